#!/usr/bin/env bash
# libcotensor loads the CUDA backend (libcotensor_cuda) from its own folder with the first
# question about a CUDA device. With the library beside it, cuda:0's reason is CUDA's own (or
# none, on a GPU); with libcotensor alone in a folder, CPU ops still run and cuda:0 is refused
# naming the missing library and how to build it.
#   bash tests/checks/cuda_library_test.sh DEVICE_REPORT BUILD_DIR
set -euo pipefail
report=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

with=$("$report")
echo "$with"
grep -q '^cpu sum: 8$' <<<"$with" || { echo "FAIL: the CPU sum"; exit 1; }
if grep -q 'could not be loaded' <<<"$with"; then
  echo "FAIL: the CUDA backend's library was not loaded from $build"
  exit 1
fi

cp -L "$build"/libcotensor.so.*.* "$work/" 2>/dev/null || cp -L "$build"/libcotensor.so.* "$work/"
rm -f "$work"/libcotensor_cuda.so*
without=$(LD_LIBRARY_PATH="$work" "$report")
echo "$without"
grep -q '^cpu sum: 8$' <<<"$without" || { echo "FAIL: the CPU sum without the CUDA library"; exit 1; }
grep -q '^available: 0$' <<<"$without" || { echo "FAIL: cuda:0 available without its library"; exit 1; }
grep -q 'libcotensor_cuda.so.* could not be loaded' <<<"$without" ||
  { echo "FAIL: the reason does not name the missing library"; exit 1; }
grep -q 'target cotensor_cuda' <<<"$without" || { echo "FAIL: the reason says not how to build it"; exit 1; }
echo "cuda library: loaded beside libcotensor; its absence refuses cuda:0 by name"

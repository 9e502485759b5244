#!/usr/bin/env bash
# .ci/check-layers passes on the tree as it is, and fails, naming the file, on a copy of the tree
# with one include that runs up per floor rule (engine -> frontend, core -> public runtime
# header, kernels -> engine, backend -> other backend, backend -> frontend) and on an include
# that names no file.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
check="$repo/.ci/check-layers"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash "$check" "$repo" >"$work/clean.log" || { cat "$work/clean.log"; echo "FAIL: the tree itself"; exit 1; }

failures=0
# expect_refused FILE INCLUDE: a copy of the tree with INCLUDE added to FILE fails the check,
# and the report names FILE.
expect_refused() {
  local file=$1 include=$2 copy="$work/tree"
  rm -rf "$copy" && mkdir -p "$copy" && cp -r "$repo/src" "$repo/include" "$copy/"
  sed -i "1i #include \"$include\"" "$copy/$file"
  if bash "$check" "$copy" >"$work/out.log" 2>&1; then
    echo "FAIL: $file including $include passed the check"
    failures=$((failures + 1))
  elif ! grep -q "^$file:1:" "$work/out.log"; then
    echo "FAIL: $file including $include: the report does not name it:"
    cat "$work/out.log"
    failures=$((failures + 1))
  else
    echo "ok: $file including $include is refused: $(head -n 1 "$work/out.log")"
  fi
}

expect_refused src/engine/var.cpp frontend/frontend.hpp
expect_refused src/engine/engine.cpp cotensor/runtime.hpp
expect_refused src/engine/engine.cpp cotensor/trace.hpp
expect_refused src/core/shape.cpp engine/engine.hpp
expect_refused src/support/environment.cpp cotensor/tensor.hpp
expect_refused src/kernels/element.hpp engine/op_node.hpp
expect_refused src/cpu/unary.cpp cuda/devices.hpp
expect_refused src/cpu/unary.cpp frontend/frontend.hpp
expect_refused src/cuda/blas.cpp io/file.hpp
expect_refused src/frontend/ops.cpp serving/protocol.hpp
expect_refused src/io/npy.cpp cotensor/serving.hpp
expect_refused src/core/dtype.cpp no_such_header.hpp

if [[ $failures != 0 ]]; then
  echo "$failures failed"
  exit 1
fi
echo "check-layers: every wrong include refused"

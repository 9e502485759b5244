#!/usr/bin/env bash
# ctest bench.gpu_preflight: `run.sh --preflight` with the build's cotensor_bench_gpu. Without a
# GPU (no nvidia-smi listing one) it must say "no GPU here: <reason>" and exit 77; with one, it
# must not exit 77 nor 2. Usage: preflight_test.sh RUN_SH BIN_DIR
set -uo pipefail
run_sh=$1
results=$(mktemp "${TMPDIR:-/tmp}/cotensor-preflight.XXXXXX")
trap 'rm -f "$results"' EXIT
output=$(BIN_DIR=$2 "$run_sh" --preflight "$results" 2>&1)
rc=$?
printf '%s\n' "$output"
gpus=0
command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [[ $gpus -gt 0 ]]; then
  if [[ $rc -eq 77 || $rc -eq 2 ]]; then
    echo "preflight_test: a GPU is listed by nvidia-smi, but run.sh --preflight exited $rc" >&2
    exit 1
  fi
  exit 0
fi
if [[ $rc -ne 77 ]]; then
  echo "preflight_test: no GPU here, but run.sh --preflight exited $rc, not 77" >&2
  exit 1
fi
if ! grep -q '^no GPU here: ' <<<"$output" || ! grep -q '^no GPU here: ' "$results"; then
  echo "preflight_test: no 'no GPU here: <reason>' line on stdout and in the results" >&2
  exit 1
fi
echo "preflight_test: exit 77, 'no GPU here' (as it must be on a machine without a GPU)"

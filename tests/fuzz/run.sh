#!/usr/bin/env bash
# Runs the program fuzzer for a fixed time on the kept corpus (tests/fuzz/corpus):
#   bash tests/fuzz/run.sh [BUILD_DIR] [SECONDS] [extra libFuzzer flags...]
# New inputs go to a scratch directory, so the kept corpus changes only by hand, e.g. with
#   build/fuzz/fuzz/cotensor_program_fuzzer -merge=1 tests/fuzz/corpus <new inputs>
set -euo pipefail
build=${1:-build/fuzz}
seconds=${2:-120}
shift $(($# < 2 ? $# : 2))
here="$(cd "$(dirname "$0")" && pwd)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$build/fuzz/cotensor_program_fuzzer" -max_total_time="$seconds" -max_len=1024 -timeout=60 \
  -rss_limit_mb=4096 -print_final_stats=1 "$@" "$scratch" "$here/corpus"

#!/usr/bin/env bash
# Runs each fuzzer for a fixed time on its kept corpus: the program fuzzer on tests/fuzz/corpus,
# the dtype fuzzer on tests/fuzz/dtype_corpus, the serving fuzzer on tests/fuzz/serving_corpus:
#   bash tests/fuzz/run.sh [BUILD_DIR] [SECONDS] [extra libFuzzer flags...]
# New inputs go to a scratch directory, so the kept corpora change only by hand, e.g. with
#   build/fuzz/fuzz/cotensor_program_fuzzer -merge=1 tests/fuzz/corpus <new inputs>
set -euo pipefail
build=${1:-build/fuzz}
seconds=${2:-120}
shift $(($# < 2 ? $# : 2))
here="$(cd "$(dirname "$0")" && pwd)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for fuzzer in program dtype serving; do
  corpus="$here/corpus"
  if [ "$fuzzer" != program ]; then
    corpus="$here/${fuzzer}_corpus"
  fi
  mkdir -p "$scratch/$fuzzer"
  echo "== cotensor_${fuzzer}_fuzzer, ${seconds} s"
  "$build/fuzz/cotensor_${fuzzer}_fuzzer" -max_total_time="$seconds" -max_len=1024 -timeout=60 \
    -rss_limit_mb=4096 -print_final_stats=1 "$@" "$scratch/$fuzzer" "$corpus"
done

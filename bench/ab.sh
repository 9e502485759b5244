#!/usr/bin/env bash
# A/B of two builds of cotensor in one sitting: runs each build's cotensor_bench_engine and
# cotensor_bench_chapter alternately, ROUNDS times, and prints every figure of every run
# prefixed with the build's label. Usage:
#   bash bench/ab.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS] [REPEAT]
set -euo pipefail
before=$1
after=$2
rounds=${3:-5}
repeat=${4:-11}
echo "# A/B $(date -u +%FT%TZ) on $(nproc) cores: before=$before after=$after, $rounds rounds, --repeat $repeat"
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    dir=${!side}
    for bench in cotensor_bench_engine cotensor_bench_chapter; do
      "$dir/bench/$bench" --repeat "$repeat" | grep "^cotensor\." | sed "s/^/$side round$round ${bench#cotensor_bench_} /"
    done
  done
done

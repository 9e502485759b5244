#!/usr/bin/env bash
# The language-model benchmark: cotensor::lm's greedy generation against Hugging Face
# transformers and CTranslate2 on the CPU, on randomly initialised models in the shapes of GPT-2
# small and Qwen2.5-0.5B (bench/lm/make_models.sh makes them, and the peers' environment, in
# ${COTENSOR_CACHE:-~/.cache/cotensor}), in float32 and bfloat16.
#
# Each round runs, for every model and dtype in turn (the rounds alternate them, so that a
# machine's drift falls on all alike):
#   BUILD_DIR/bench/cotensor_bench_lm MODEL --dtype D --prompt P --new N --concurrency ... --repeat R
#   bench/lm/peers.py MODEL --dtype D --prompt P --new N --repeat R    (transformers, CTranslate2)
# and each round starts with cotensor_bench_lm --triad (the machine's memory bandwidth). Without
# cotensor_bench_lm, cotensor's lines are skipped with a message and the peers still run.
# Every JSON line, with "round" added, goes to bench/results/<date>-debian12-2core-lm.jsonl
# (-lm-quick.jsonl with --quick) and to stdout; bench/lm/summary.py then prints the markdown
# summary of the file.
#
# Usage: bash bench/lm/run.sh [--quick] [BUILD_DIR]
#   BUILD_DIR defaults to build/ at the repository's root. Default: P=128, N=64, R=3, both
#   models, concurrency 1,4,16,64, 2 rounds. --quick: P=32, N=16, R=1, gpt2-small only,
#   concurrency 1,4, 2 rounds (about a minute of peers on 2 cores).
# Env: COTENSOR_CACHE, COTENSOR_VENV (see make_models.sh), COTENSOR_LM_RESULTS (the results
#      file instead of bench/results/...), COTENSOR_LM_REPEAT (R).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
quick=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $arg (usage: bash bench/lm/run.sh [--quick] [BUILD_DIR])" >&2; exit 2 ;;
    *) build=$arg ;;
  esac
done
if ((quick)); then
  prompt=32 new=16 repeat=1 concurrency=1,4 models=(gpt2-small) suffix=-quick
else
  prompt=128 new=64 repeat=3 concurrency=1,4,16,64 models=(gpt2-small qwen2-0.5b) suffix=
fi
repeat=${COTENSOR_LM_REPEAT:-$repeat}
dtypes=(float32 bfloat16)
rounds=2
bench=$build/bench/cotensor_bench_lm
cache=${COTENSOR_CACHE:-$HOME/.cache/cotensor}
out=${COTENSOR_LM_RESULTS:-$root/bench/results/$(date -u +%F)-debian12-2core-lm$suffix.jsonl}

python=$(bash "$here/make_models.sh" | tail -n 1)
if [[ ! -x $bench ]]; then
  echo "run.sh: $bench is missing (cmake --build $build --target cotensor_bench_lm): cotensor's lines skipped" >&2
  bench=
fi
mkdir -p "$(dirname "$out")"
: >"$out"

# Appends the JSON lines of stdin, with "round" added, to the results and stdout; other lines
# go to stderr.
record() {
  local line
  while IFS= read -r line; do
    if [[ $line == \{* ]]; then
      echo "{\"round\": $1, ${line#\{}" | tee -a "$out"
    else
      echo "$line" >&2
    fi
  done
}

for ((round = 1; round <= rounds; round++)); do
  if [[ -n $bench ]]; then
    "$bench" --triad | record "$round" || { echo "run.sh: $bench --triad failed" >&2; exit 1; }
  fi
  for model in "${models[@]}"; do
    for dtype in "${dtypes[@]}"; do
      echo "run.sh: round $round/$rounds: $model $dtype" >&2
      dir=$cache/lm-bench/$model
      if [[ -n $bench ]]; then
        "$bench" "$dir" --dtype "$dtype" --prompt "$prompt" --new "$new" \
          --concurrency "$concurrency" --repeat "$repeat" | record "$round" ||
          { echo "run.sh: cotensor_bench_lm failed on $model $dtype" >&2; exit 1; }
      fi
      "$python" "$here/peers.py" "$dir" --dtype "$dtype" --prompt "$prompt" --new "$new" \
        --repeat "$repeat" | record "$round" ||
        { echo "run.sh: peers.py failed on $model $dtype" >&2; exit 1; }
    done
  done
done
echo "run.sh: wrote $out" >&2
"$python" "$here/summary.py" "$out" "$cache/lm-bench"

#!/usr/bin/env bash
# What dynamic batching costs and gains, measured so that the figure can be trusted on a noisy
# machine: two cotensor_server processes on loopback, one batching and one not (--no-batching),
# both up for the whole run, driven by wrk in alternated rounds (on, off, then off, on, ...) at
# 1 and 64 connections, each run DURATION seconds. Prints every run, then per connection count
# the median requests/s of each mode with its spread (min-max) and the ratio of the medians.
#   bench/server/batching_cost.sh [BUILD_DIR] [ROUNDS] [DURATION_S]   (build/, 5 rounds, 6 s)
# Env: COTENSOR_PYTHON (default .venv/bin/python3, needs torch and safetensors, for the model),
#      COTENSOR_BENCH_WINDOW_US (the batch window, default 2000), CONNS (default "1 64").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
rounds=${2:-5}
duration=${3:-6}
conns_list=${CONNS:-"1 64"}
server="$build/examples/cotensor_server"
python=${COTENSOR_PYTHON:-.venv/bin/python3}
window=${COTENSOR_BENCH_WINDOW_US:-2000}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 2; }
[[ -x $server ]] || { echo "$server not found: build the cotensor_server target" >&2; exit 2; }

repo=$(mktemp -d)
results=$(mktemp)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  rm -rf "$repo" "$results"
}
trap cleanup EXIT

"$python" "$here/bench_model.py" "$repo" "$window"

declare -A port
for mode in on off; do
  log="$repo/$mode.log"
  flags=(--model-repository "$repo" --threads 1 --max-queue-rows 8192 --max-connections 8192)
  [[ $mode == off ]] && flags+=(--no-batching)
  "$server" --address 127.0.0.1 --port 0 "${flags[@]}" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
  port[$mode]=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2)
  [[ -n ${port[$mode]} ]] || { cat "$log" >&2; exit 1; }
done

url=/v2/models/bench/infer
run() {  # run MODE CONNS SECONDS: prints requests/s
  local threads=$(($2 < 2 ? 1 : 2))
  wrk -t"$threads" -c"$2" -d"${3}s" --timeout 10s -s "$here/post.lua" \
    "http://127.0.0.1:${port[$1]}$url" | sed -n 's/^cotensor.server: rps=\([0-9.]*\).*/\1/p'
}
for mode in on off; do run "$mode" 16 2 >/dev/null; done  # warm-up

echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); model bench" \
  "512x4096x16 FP32, window ${window} us; $rounds rounds of ${duration} s, alternated"
for round in $(seq "$rounds"); do
  order="on off"
  ((round % 2 == 0)) && order="off on"
  for conns in $conns_list; do
    for mode in $order; do
      rps=$(run "$mode" "$conns" "$duration")
      echo "round=$round conns=$conns mode=$mode rps=$rps"
      echo "$conns $mode $rps" >>"$results"
    done
  done
done

# Medians and spreads, and the ratio batching / no batching of the medians.
stats() {  # stats CONNS MODE: "median min max" of its runs
  awk -v c="$1" -v m="$2" '$1 == c && $2 == m { print $3 }' "$results" | sort -g |
    awk '{ v[NR] = $1 } END { k = NR; med = k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
                              print med, v[1], v[k] }'
}
for conns in $conns_list; do
  read -r on on_min on_max < <(stats "$conns" on)
  read -r off off_min off_max < <(stats "$conns" off)
  awk -v c="$conns" -v on="$on" -v a="$on_min" -v b="$on_max" -v off="$off" -v x="$off_min" \
    -v y="$off_max" 'BEGIN { printf "cotensor.server.batching_cost: conns=%s on_rps=%.0f " \
      "(%.0f-%.0f) off_rps=%.0f (%.0f-%.0f) ratio=%.3f\n", c, on, a, b, off, x, y, on / off }'
done

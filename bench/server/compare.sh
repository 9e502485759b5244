#!/usr/bin/env bash
# Side by side, on the Open Inference Protocol: cotensor_server with batching, cotensor_server
# with --no-batching, and KServe's Python ModelServer running the same model in PyTorch
# (bench/server/kserve_server.py), all on this machine at once, loaded in turn by the same
# client at each concurrency: Triton's own perf_analyzer (binary tensors over HTTP, from a Debian
# 13 chroot: perf_analyzer_env.sh) where it runs — as root — else cotensor_bench_load (a
# closed-loop client of our own, JSON requests of one row).
# Prints one line per run:
#   round=R server=<cotensor|cotensor-nobatch|kserve> perf_analyzer: conns=N infer_per_s=... p50_us=... p99_us=...
#   round=R server=<...> cotensor.load: conns=N rps=... p50_ms=... p99_ms=...   (the other client)
# Usage: bench/server/compare.sh [BUILD_DIR] [SECONDS] [CONCURRENCIES...]
#   (default build/, 10 s per run, concurrency 1 8 64)
# Env: COTENSOR_PYTHON (default .venv/bin/python3: torch, safetensors, kserve),
#      COTENSOR_BENCH_WINDOW_US (the batch window, default 2000), COTENSOR_BENCH_ROUNDS (2),
#      COTENSOR_BENCH_CLIENT (perf_analyzer or load; default perf_analyzer as root, else load).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
seconds=${2:-10}
shift $(($# < 2 ? $# : 2))
concurrencies=("${@:-1 8 64}")
read -r -a concurrencies <<<"${concurrencies[*]}"
python=${COTENSOR_PYTHON:-$root/.venv/bin/python3}
window=${COTENSOR_BENCH_WINDOW_US:-2000}
rounds=${COTENSOR_BENCH_ROUNDS:-2}
load="$build/bench/cotensor_bench_load"
server="$build/examples/cotensor_server"
for f in "$load" "$server" "$python"; do
  [[ -x $f ]] || { echo "$f not found (build the targets; bash bench/peers/setup.sh)" >&2; exit 2; }
done
client=${COTENSOR_BENCH_CLIENT:-$([[ $(id -u) == 0 ]] && echo perf_analyzer || echo load)}
if [[ $client == perf_analyzer ]]; then
  # shellcheck source=perf_analyzer_env.sh
  source "$here/perf_analyzer_env.sh"
  perf_analyzer_setup "$python" ||
    { echo "compare.sh: perf_analyzer unavailable; COTENSOR_BENCH_CLIENT=load uses our own" >&2; exit 1; }
elif [[ $client != load ]]; then
  echo "compare.sh: COTENSOR_BENCH_CLIENT must be perf_analyzer or load, not '$client'" >&2
  exit 2
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$python" "$here/bench_model.py" "$work/models" "$window"

# start NAME COMMAND...: runs it, waits for its "listening on 127.0.0.1:PORT" line.
declare -A port
start() {
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do
    grep -q "listening on" "$work/$name.log" && break
    sleep 0.1
  done
  port[$name]=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$work/$name.log" | head -1 | cut -d: -f2)
  [[ -n ${port[$name]} ]] || { cat "$work/$name.log" >&2; exit 1; }
}
common=(--model-repository "$work/models" --address 127.0.0.1 --port 0 --threads 1
        --max-queue-rows 8192 --max-connections 8192)
start cotensor "$server" "${common[@]}"
start cotensor-nobatch "$server" "${common[@]}" --no-batching
start kserve "$python" "$here/kserve_server.py" --model-repository "$work/models" --model bench \
  --port 0

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores; load average:" \
     "$(cut -d' ' -f1-3 /proc/loadavg); model bench 512x4096x16 FP32, one-row JSON requests," \
     "max_batch_size 64, window ${window} us; ${seconds} s per run, ${rounds} rounds; client $client"
for round in $(seq "$rounds"); do
  for conns in "${concurrencies[@]}"; do
    for name in cotensor cotensor-nobatch kserve; do
      if [[ $client == perf_analyzer ]]; then
        # Three windows of SECONDS, whatever their spread (a stability bound fails more often
        # than it measures on a shared 2-core machine; the rounds show the spread).
        line=$(perf_analyzer_run "${port[$name]}" bench "$conns" $((seconds * 1000)) 1000 || true)
        echo "round=$round server=$name perf_analyzer: conns=$conns ${line:-failed}"
      else
        line=$("$load" --port "${port[$name]}" --model bench --width 512 --concurrency "$conns" \
                 --seconds "$seconds" --warmup 1 || true)
        echo "round=$round server=$name $line"
      fi
    done
  done
done

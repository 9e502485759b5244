#!/usr/bin/env bash
# Load test of cotensor_server with wrk (Debian package `wrk`) on loopback: Open Inference
# Protocol JSON requests of one row to a model `bench` (MLP 512 -> 4096 -> 16, FP32, seeded),
# batching on vs off at 1, 16, 64 and 256 connections. Prints one line per run:
#   mode=<on|off> conns=<n> cotensor.server: rps=... p50_ms=... p99_ms=... requests=... errors=...
# Usage: bench/server/run.sh [BUILD_DIR] [DURATION_S]   (default build/, 10 s per run)
# Env: COTENSOR_PYTHON (default .venv/bin/python3, needs torch and safetensors),
#      COTENSOR_BENCH_WINDOW_US (the batch window, default 2000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
duration=${2:-10}
server="$build/examples/cotensor_server"
python=${COTENSOR_PYTHON:-.venv/bin/python3}
window=${COTENSOR_BENCH_WINDOW_US:-2000}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 2; }
[[ -x $server ]] || { echo "$server not found: build the cotensor_server target" >&2; exit 2; }

repo=$(mktemp -d)
log=$(mktemp)
pid=
cleanup() { [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null; rm -rf "$repo" "$log"; }
trap cleanup EXIT

# The model repository: $repo/bench/config.json and $repo/bench/1/model.safetensors.
"$python" "$here/bench_model.py" "$repo" "$window"

url=/v2/models/bench/infer
echo "# $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg);" \
     "model bench 512x4096x16 FP32, max_batch_size 64, window ${window} us"
for mode in on off; do
  flags=(--model-repository "$repo" --threads 1 --max-queue-rows 8192 --max-connections 8192)
  [[ $mode == off ]] && flags+=(--no-batching)
  : >"$log"
  "$server" --address 127.0.0.1 --port 0 "${flags[@]}" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
  port=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2)
  [[ -n $port ]] || { cat "$log" >&2; exit 1; }
  wrk -t1 -c16 -d2s -s "$here/post.lua" "http://127.0.0.1:$port$url" >/dev/null  # warm-up
  for conns in 1 16 64 256; do
    threads=$(( conns < 2 ? 1 : 2 ))
    line=$(wrk -t"$threads" -c"$conns" -d"${duration}s" --timeout 10s -s "$here/post.lua" \
             "http://127.0.0.1:$port$url" | grep '^cotensor.server:')
    echo "mode=$mode conns=$conns $line"
  done
  kill -TERM "$pid"; wait "$pid" || true
  pid=
done

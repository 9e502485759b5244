#!/usr/bin/env bash
# Load test of cotensor_server with wrk (Debian package `wrk`) on loopback: batching on vs off at
# 1, 16, 64 and 256 connections. Prints one line per run:
#   mode=<on|off> conns=<n> cotensor.server: rps=... p50_ms=... p99_ms=... requests=... errors=...
# Usage: bench/server/run.sh [BUILD_DIR] [DURATION_S]   (default build/, 10 s per run)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
duration=${2:-10}
server="$build/examples/cotensor_server"
in=${COTENSOR_BENCH_WIDTH:-512}
hidden=${COTENSOR_BENCH_HIDDEN:-4096}
out=${COTENSOR_BENCH_OUT:-16}
export COTENSOR_BENCH_WIDTH=$in
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 2; }
echo "# $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg); model ${in}x${hidden}x${out}"
for mode in on off; do
  flags=(--in "$in" --hidden "$hidden" --out "$out" --threads 1 --max-batch 64
         --batch-window-us "${COTENSOR_BENCH_WINDOW_US:-2000}" --max-queue-rows 8192
         --max-connections 8192)
  [[ $mode == off ]] && flags+=(--no-batching)
  log=$(mktemp)
  "$server" --address 127.0.0.1 --port 0 "${flags[@]}" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
  port=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2)
  wrk -t1 -c16 -d2s -s "$here/post.lua" "http://127.0.0.1:$port/v1/infer" >/dev/null  # warm-up
  for conns in 1 16 64 256; do
    threads=$(( conns < 2 ? 1 : 2 ))
    line=$(wrk -t"$threads" -c"$conns" -d"${duration}s" --timeout 10s -s "$here/post.lua" \
             "http://127.0.0.1:$port/v1/infer" | grep '^cotensor.server:')
    echo "mode=$mode conns=$conns $line"
  done
  kill -TERM "$pid"; wait "$pid" || true
  rm -f "$log"
done

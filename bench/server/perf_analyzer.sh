#!/usr/bin/env bash
# Triton's own load generator, perf_analyzer, against cotensor_server on loopback: the model
# `bench` of run.sh (MLP 512 -> 4096 -> 16, FP32, seeded, dynamic batching), driven over HTTP
# with the binary tensor extension, as Triton's users measure a server.
#
# perf_analyzer's wheels need glibc 2.38 (Debian 12 has 2.36), so it runs in a Debian 13 (trixie)
# chroot, made once with debootstrap and kept in $COTENSOR_CACHE (default ~/.cache/cotensor);
# the chroot shares the host's loopback, where the server listens. The wheel is downloaded on
# the host by the project's Python environment's pip and installed, without its dependencies
# (the binary needs none), in a venv inside the chroot. Needs root (debootstrap, chroot) and the
# Debian archive and PyPI the first time; exits 77 without root.
#
# Prints one line per concurrency:
#   concurrency=<n> cotensor.perf_analyzer: infer_per_s=... p50_us=... p99_us=... server_queue_us=...
# Usage: bench/server/perf_analyzer.sh [BUILD_DIR] [--quick] [CONCURRENCIES...]
#   (default build/ and 1 8 64; --quick: 1 and 8, shorter windows, then the example model
#   `mlp` at 1: the CI check)
# Env: COTENSOR_PYTHON (default .venv/bin/python3, needs torch and safetensors),
#      COTENSOR_BENCH_WINDOW_US (the batch window, default 2000), COTENSOR_CACHE,
#      COTENSOR_SERVER (the server program, default BUILD_DIR/examples/cotensor_server).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=build
quick=0
concurrencies=()
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    [0-9]*) concurrencies+=("$arg") ;;
    *) build=$arg ;;
  esac
done
((${#concurrencies[@]})) || { ((quick)) && concurrencies=(1 8) || concurrencies=(1 8 64); }
server=${COTENSOR_SERVER:-$build/examples/cotensor_server}
python=${COTENSOR_PYTHON:-.venv/bin/python3}
window=${COTENSOR_BENCH_WINDOW_US:-2000}
# shellcheck source=perf_analyzer_env.sh
source "$here/perf_analyzer_env.sh"

[[ -x $server ]] || { echo "$server not found: build the cotensor_server target" >&2; exit 2; }
[[ -x $python ]] || { echo "$python not found: bash bench/peers/setup.sh" >&2; exit 2; }
status=0
perf_analyzer_setup "$python" || status=$?
((status == 0)) || exit "$status"

repo=$(mktemp -d)
log=$(mktemp)
pid=
cleanup() {
  [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null
  rm -rf "$repo" "$log"
}
trap cleanup EXIT

"$python" "$here/bench_model.py" "$repo" "$window"
"$server" --address 127.0.0.1 --port 0 --model-repository "$repo" --threads 1 \
  --max-queue-rows 8192 --max-connections 8192 >"$log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
port=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2)
[[ -n $port ]] || { cat "$log" >&2; exit 1; }

# --quick checks that the protocol works, not the figures: windows count as stable whatever
# they measure. Otherwise within 100 % over at most 6 windows: on a shared 2-core machine a
# tighter bound fails more often than it measures.
interval=$((quick ? 1000 : 5000))
stability=$((quick ? 1000 : 100))
echo "# $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg);" \
     "perf_analyzer $PERF_ANALYZER_VERSION (Debian 13 chroot), model bench 512x4096x16 FP32, window ${window} us"
for c in "${concurrencies[@]}"; do
  line=$(perf_analyzer_run "$port" bench "$c" "$interval" "$stability")
  echo "concurrency=$c cotensor.perf_analyzer: $line"
done
kill -TERM "$pid"
wait "$pid" || true
pid=

# --quick (the CI check) also drives the example model, `mlp` of the server's default
# repository (examples/server/models), at one request at a time.
if ((quick)); then
  "$server" --address 127.0.0.1 --port 0 --threads 1 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
  port=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2)
  [[ -n $port ]] || { cat "$log" >&2; exit 1; }
  line=$(perf_analyzer_run "$port" mlp 1 "$interval" "$stability")
  echo "concurrency=1 cotensor.perf_analyzer (example model mlp): $line"
  kill -TERM "$pid"
  wait "$pid" || true
  pid=
fi

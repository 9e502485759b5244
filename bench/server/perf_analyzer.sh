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
#   (default build/ and 1 8 64; --quick: 1 and 8, shorter windows, for the CI check)
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
cache=${COTENSOR_CACHE:-$HOME/.cache/cotensor}
version=2.60.0
wheel=perf_analyzer-$version-py3-none-manylinux_2_38_x86_64.whl
root_dir=$cache/perf-analyzer-$version-trixie

if [[ $(id -u) != 0 ]]; then
  echo "perf_analyzer.sh: skipped, needs root for debootstrap and chroot" >&2
  exit 77
fi
[[ -x $server ]] || { echo "$server not found: build the cotensor_server target" >&2; exit 2; }
[[ -x $python ]] || { echo "$python not found: bash bench/peers/setup.sh" >&2; exit 2; }

# The chroot, once: Debian 13 with Python, a venv holding perf_analyzer. Made beside its final
# place and renamed when complete, so that an interrupted run leaves nothing half-made.
if [[ ! -x $root_dir/venv/bin/perf_analyzer ]]; then
  command -v debootstrap >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  mkdir -p "$cache"
  partial=$root_dir.partial
  rm -rf "$partial"
  echo "# making $root_dir (debootstrap trixie, about a minute)" >&2
  debootstrap --variant=minbase --include=python3,python3-venv trixie "$partial" \
    http://deb.debian.org/debian >"$cache/perf-analyzer-debootstrap.log" 2>&1 ||
    { tail -20 "$cache/perf-analyzer-debootstrap.log" >&2; exit 1; }
  mkdir -p "$partial/wheels"
  "$python" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_38_x86_64 --python-version 3.13 -d "$partial/wheels" \
    "perf-analyzer==$version"
  chroot "$partial" python3 -m venv /venv
  chroot "$partial" /venv/bin/pip install --quiet --no-index --no-deps "/wheels/$wheel"
  mv "$partial" "$root_dir"
fi

repo=$(mktemp -d)
log=$(mktemp)
pid=
cleanup() {
  [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null
  rm -rf "$repo" "$log" "$log.pa" "$root_dir/tmp/perf_analyzer.csv"
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
     "perf_analyzer $version (Debian 13 chroot), model bench 512x4096x16 FP32, window ${window} us"
for c in "${concurrencies[@]}"; do
  rm -f "$root_dir/tmp/perf_analyzer.csv"
  if ! chroot "$root_dir" /venv/bin/perf_analyzer -m bench -u "127.0.0.1:$port" -i http \
       --concurrency-range "$c" --measurement-interval "$interval" --stability-percentage "$stability" \
       --max-trials 6 --percentile 99 -f /tmp/perf_analyzer.csv --verbose-csv >"$log.pa" 2>&1 ||
     [[ ! -s $root_dir/tmp/perf_analyzer.csv ]]; then
    # It exits 0 after some errors (a model the server does not have): no CSV says so too.
    cat "$log.pa" >&2
    rm -f "$log.pa"
    exit 1
  fi
  rm -f "$log.pa"
  # The CSV's header names its columns; take the figures by name. No row, or no inference,
  # fails.
  awk -F, -v c="$c" '
    NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    NR == 2 {
      printf "concurrency=%s cotensor.perf_analyzer: infer_per_s=%s p50_us=%s p99_us=%s server_queue_us=%s\n",
        c, $col["Inferences/Second"], $col["p50 latency"], $col["p99 latency"], $col["Server Queue"]
      ok = $col["Inferences/Second"] > 0
    }
    END { exit ok ? 0 : 1 }' "$root_dir/tmp/perf_analyzer.csv"
done
kill -TERM "$pid"
wait "$pid" || true
pid=

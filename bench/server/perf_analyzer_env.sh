# Triton's perf_analyzer in a Debian 13 chroot, for bench/server/perf_analyzer.sh and
# compare.sh (sourced; they set `set -euo pipefail`). Defines:
#   perf_analyzer_setup PYTHON     makes the chroot once (needs root, the Debian archive and PyPI
#                                  the first time) and sets PERF_ANALYZER_ROOT; returns 77
#                                  without root
#   perf_analyzer_run PORT MODEL CONCURRENCY INTERVAL_MS STABILITY_PCT
#                                  one run against 127.0.0.1:PORT over HTTP, printing
#                                  `infer_per_s=... p50_us=... p99_us=... server_queue_us=...`;
#                                  fails with perf_analyzer's output when it measured nothing
# perf_analyzer's wheels need glibc 2.38 (Debian 12 has 2.36): the chroot shares the host's
# loopback, where the servers listen. The wheel is downloaded on the host by the project's pip
# and installed, without its dependencies (the binary needs none), in a venv inside the chroot.
PERF_ANALYZER_VERSION=2.60.0
PERF_ANALYZER_ROOT=${COTENSOR_CACHE:-$HOME/.cache/cotensor}/perf-analyzer-$PERF_ANALYZER_VERSION-trixie

perf_analyzer_setup() {
  local python=$1 cache partial
  cache=$(dirname "$PERF_ANALYZER_ROOT")
  if [[ $(id -u) != 0 ]]; then
    echo "perf_analyzer: skipped, needs root for debootstrap and chroot" >&2
    return 77
  fi
  [[ -x $PERF_ANALYZER_ROOT/venv/bin/perf_analyzer ]] && return 0
  # Made beside its final place and renamed when complete: an interrupted run leaves nothing
  # half-made.
  command -v debootstrap >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  mkdir -p "$cache"
  partial=$PERF_ANALYZER_ROOT.partial
  rm -rf "$partial"
  echo "# making $PERF_ANALYZER_ROOT (debootstrap trixie, about a minute)" >&2
  debootstrap --variant=minbase --include=python3,python3-venv trixie "$partial" \
    http://deb.debian.org/debian >"$cache/perf-analyzer-debootstrap.log" 2>&1 ||
    { tail -20 "$cache/perf-analyzer-debootstrap.log" >&2; return 1; }
  mkdir -p "$partial/wheels"
  "$python" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_38_x86_64 --python-version 3.13 -d "$partial/wheels" \
    "perf-analyzer==$PERF_ANALYZER_VERSION"
  chroot "$partial" python3 -m venv /venv
  chroot "$partial" /venv/bin/pip install --quiet --no-index --no-deps \
    "/wheels/perf_analyzer-$PERF_ANALYZER_VERSION-py3-none-manylinux_2_38_x86_64.whl"
  mv "$partial" "$PERF_ANALYZER_ROOT"
}

perf_analyzer_run() {
  local port=$1 model=$2 c=$3 interval=$4 stability=$5
  local csv=$PERF_ANALYZER_ROOT/tmp/perf_analyzer.csv out
  rm -f "$csv"
  out=$(chroot "$PERF_ANALYZER_ROOT" /venv/bin/perf_analyzer -m "$model" -u "127.0.0.1:$port" \
          -i http --concurrency-range "$c" --measurement-interval "$interval" \
          --stability-percentage "$stability" --max-trials 6 --percentile 99 \
          -f /tmp/perf_analyzer.csv --verbose-csv 2>&1) || true
  # It exits 0 after some errors (a model the server does not have): no CSV says so too.
  if [[ ! -s $csv ]]; then
    echo "$out" >&2
    return 1
  fi
  # The CSV's header names its columns; take the figures by name. No row, or no inference,
  # fails.
  awk -F, '
    NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    NR == 2 {
      # A server without the statistics extension (KServe) has no server-side columns.
      queue = ("Server Queue" in col) ? $col["Server Queue"] : "n/a"
      printf "infer_per_s=%s p50_us=%s p99_us=%s server_queue_us=%s\n",
        $col["Inferences/Second"], $col["p50 latency"], $col["p99 latency"], queue
      ok = $col["Inferences/Second"] > 0
    }
    END { exit ok ? 0 : 1 }' "$csv"
  rm -f "$csv"
}

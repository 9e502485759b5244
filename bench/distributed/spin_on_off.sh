#!/usr/bin/env bash
# A lone all-reduce and 16 in flight with waits that spin (COTENSOR_WAIT_SPIN_US) and without,
# alternating which goes first, on the same machine in the same run: cotensor_bench_dist from
# 4 B to 64 KiB, then per size the medians over the rounds beside raw MPI's.
#
#   bench/distributed/spin_on_off.sh BUILD [rounds (5)] [ranks (2)]
#   SPIN_US=100 FUSION_BYTES=1048576 MPIRUN_ARGS="--bind-to core" bench/distributed/spin_on_off.sh build
#
# SPIN_US: the spin of the "on" runs (default 50). FUSION_BYTES: COTENSOR_DIST_FUSION_BYTES of
# every run (default 0: unfused). MPIRUN_ARGS: more mpirun arguments (default
# "--bind-to none", as the tests run). Prints each run's table, then one line per size:
#   bytes, MPI_us, MPI_I_us, off_us, on_us, off-MPI, on-MPI, pipelined off_us, pipelined on_us
set -euo pipefail
if (($# < 1)); then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
build=$1
rounds=${2:-5}
ranks=${3:-2}
spin_us=${SPIN_US:-50}
[[ -x $build/bench/cotensor_bench_dist ]] || {
  echo "spin_on_off.sh: no $build/bench/cotensor_bench_dist (build it with MPI)" >&2
  exit 2
}
read -r -a extra <<<"${MPIRUN_ARGS:---bind-to none}"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run() {  # spin
  echo "## COTENSOR_WAIT_SPIN_US=$1" | tee -a "$log"
  COTENSOR_WAIT_SPIN_US=$1 COTENSOR_DIST_FUSION_BYTES=${FUSION_BYTES:-0} \
    COTENSOR_BENCH_DIST_MAX_BYTES=65536 mpirun -np "$ranks" --oversubscribe "${extra[@]}" \
    "$build/bench/cotensor_bench_dist" | grep '^#' | tee -a "$log"
}
for ((i = 0; i < rounds; ++i)); do
  echo "### round $i"
  if ((i % 2 == 0)); then
    run 0
    run "$spin_us"
  else
    run "$spin_us"
    run 0
  fi
done
# The table's rows: "#  bytes cotensor_us MPI_us MPI_I_us pipelined_us ...", after a run's
# "## COTENSOR_WAIT_SPIN_US=N" line.
echo "# medians over $rounds rounds: bytes MPI_us MPI_I_us off_us on_us off-MPI on-MPI pipelined_off_us pipelined_on_us"
awk '
  /^## COTENSOR_WAIT_SPIN_US=/ { split($2, kv, "="); spin = kv[2]; next }
  /^# +[0-9]+ / {
    b = $2; sizes[b] = 1; side = (spin == 0) ? "off" : "on"
    n = ++count[b, side]; ours[b, side, n] = $3; pipe[b, side, n] = $6
    if (side == "off") { m = ++mcount[b]; mpi[b, m] = $4; mpii[b, m] = $5 }
  }
  function median(arr, key, n,   i, j, t, v) {
    for (i = 1; i <= n; ++i) v[i] = arr[key, i]
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  END {
    for (b in sizes) order[++k] = b + 0
    for (i = 1; i <= k; ++i) for (j = i + 1; j <= k; ++j) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
    for (i = 1; i <= k; ++i) {
      b = order[i]
      m = median(mpi, b, mcount[b]); mi = median(mpii, b, mcount[b])
      off = median(ours, b SUBSEP "off", count[b, "off"]); onv = median(ours, b SUBSEP "on", count[b, "on"])
      po = median(pipe, b SUBSEP "off", count[b, "off"]); pn = median(pipe, b SUBSEP "on", count[b, "on"])
      printf "%10d %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", b, m, mi, off, onv, off - m, onv - m, po, pn
    }
  }' "$log"

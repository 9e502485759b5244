#!/usr/bin/env bash
# cotensor_bench_dist with 2 ranks three ways, alternating so that all meet the same machine:
#   shm       one host, Open MPI's defaults (shared memory between the ranks)
#   tcp       one host, TCP over loopback (pml ob1, btl tcp,self)
#   hosts     one rank on each of 2 test hosts (tests/distributed/hosts.sh), TCP over their veth
#             links and bridge (tests/distributed/mpirun_hosts.sh); needs root
#
#   bench/distributed/across_hosts.sh [build dir (build)] [rounds (5)]
#
# Environment: COTENSOR_BENCH_DIST_MAX_BYTES (default: the bench's, 64 MiB), COTENSOR_NUM_THREADS
# (default 2). Prints each run's table, then per message size the medians over the rounds:
#   cotensor.dist.<way>.allreduce_us.<bytes>      cotensor all_reduce + wait
#   cotensor.dist.<way>.mpi_allreduce_us.<bytes>  raw MPI_Allreduce
#   cotensor.dist.<way>.busbw_gbs.<bytes>         cotensor's bus bandwidth, bytes / time (GB/s;
#                                                 for 2 ranks the ring moves each byte once)
# and cotensor.dist.hosts_over_shm.<bytes> and .hosts_over_tcp.<bytes> (time ratios, cotensor).
# The test hosts are namespaces of one machine: their "network" is the kernel's veth and bridge,
# so the figures show what TCP costs against shared memory, not what a real NIC would give.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
rounds=${2:-5}
bench="$build/bench/cotensor_bench_dist"
[[ -x $bench ]] || { echo "across_hosts.sh: no $bench (build the benchmarks with MPI)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "across_hosts.sh: the test hosts need root" >&2; exit 77; }
bench=$(cd "$(dirname "$bench")" && pwd)/$(basename "$bench")
export COTENSOR_BENCH_DIST_MAX_BYTES=${COTENSOR_BENCH_DIST_MAX_BYTES:-67108864}
export COTENSOR_NUM_THREADS=${COTENSOR_NUM_THREADS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
local_run=(mpirun -np 2 --oversubscribe --bind-to none
  -x COTENSOR_BENCH_DIST_MAX_BYTES -x COTENSOR_NUM_THREADS)
out=$(mktemp -d /tmp/cotensor-across-hosts.XXXXXX)
# mpirun_hosts.sh brings the test hosts up when none are; then they go again at exit.
hosts_were_up=0
[[ -n $(bash "$root/tests/distributed/hosts.sh" list) ]] && hosts_were_up=1
cleanup() {
  rm -rf "$out"
  if ((!hosts_were_up)); then bash "$root/tests/distributed/hosts.sh" down >/dev/null || true; fi
}
trap cleanup EXIT

run() {  # <way> <round>: the bench's summary table into $out/<way>.<round>
  local way=$1 file="$out/$1.$2" rc=0
  case $way in
    shm) timeout 600 "${local_run[@]}" "$bench" >"$file" || rc=$? ;;
    tcp) timeout 600 "${local_run[@]}" --mca pml ob1 --mca btl tcp,self "$bench" >"$file" || rc=$? ;;
    hosts) bash "$root/tests/distributed/mpirun_hosts.sh" -np 2 --timeout 600 -- "$bench" >"$file" || rc=$? ;;
  esac
  echo "## round $2, $way"
  cat "$file"
  return "$rc"
}

for ((r = 0; r < rounds; ++r)); do
  for way in shm tcp hosts; do
    run "$way" "$r" || echo "across_hosts.sh: round $r, $way: the run failed (status $?)" >&2
  done
done

# The summary rows "#  bytes cotensor_us MPI_us MPI_I_us pipelined_us overhead_us MPI/ours".
# The median of the numbers on stdin; nothing when there are none (a way whose runs all failed).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
column() {  # <way> <bytes> <field>: that field of the row over the rounds
  awk -v b="$2" -v f="$3" '$1 == "#" && $2 == b && NF == 8 { print $(f + 1) }' "$out/$1".*
}
sizes=$(cat "$out"/*.* 2>/dev/null | awk '$1 == "#" && $2 ~ /^[0-9]+$/ && NF == 8 { print $2 }' | sort -nu)
echo "# medians over $rounds rounds"
declare -A ours_of
for b in $sizes; do
  complete=1
  for way in shm tcp hosts; do
    ours=$(column "$way" "$b" 2 | median)
    mpi=$(column "$way" "$b" 3 | median)
    if [[ -z $ours ]]; then
      echo "cotensor.dist.$way.allreduce_us.$b: (no run gave it)"
      complete=0
      continue
    fi
    ours_of[$way]=$ours
    echo "cotensor.dist.$way.allreduce_us.$b: $ours"
    echo "cotensor.dist.$way.mpi_allreduce_us.$b: $mpi"
    awk -v b="$b" -v t="$ours" -v w="$way" 'BEGIN { printf "cotensor.dist.%s.busbw_gbs.%s: %.3f\n", w, b, b / t / 1000 }'
  done
  ((complete)) || continue
  awk -v b="$b" -v h="${ours_of[hosts]}" -v s="${ours_of[shm]}" -v t="${ours_of[tcp]}" 'BEGIN {
    printf "cotensor.dist.hosts_over_shm.%s: %.2f\n", b, h / s
    printf "cotensor.dist.hosts_over_tcp.%s: %.2f\n", b, h / t }'
done

#!/usr/bin/env bash
# Two builds of cotensor side by side, alternating, on the same machine in the same run: the
# per-op time of 16 all-reduces of 4 KiB in flight (cotensor_bench_dist's pipelined figure) and
# the data-parallel SGD example's epoch with overlap. The "after" build runs each three times:
# fusion off, fusion on (COTENSOR_DIST_FUSION_BYTES, default here 1 MiB), and fusion on with
# waits that spin (COTENSOR_WAIT_SPIN_US, default here 50); the "before" build runs as it is (a
# build from before fusion and the spinning wait ignores the variables).
#
#   bench/distributed/before_after.sh BEFORE_BUILD AFTER_BUILD [rounds (5)] [ranks (2)]
#   MPIRUN_ARGS="--mca btl_vader_single_copy_mechanism none" bench/distributed/before_after.sh ...
#
# BEFORE_BUILD's cotensor_bench_dist must read COTENSOR_BENCH_DIST_MIN_BYTES and _MAX_BYTES
# (this tree's does; an older one needs those few lines, see bench/README.md). Prints each
# round, then the medians over the rounds:
#   cotensor.dist.before_after.pipelined_us.{before,after_unfused,after_fused,after_fused_spin}
#   cotensor.dist.before_after.sgd_epoch_s.{before,after_unfused,after_fused,after_fused_spin}
#   cotensor.dist.before_after.pipelined_speedup{,_spin}  before / after_fused{,_spin}
#   cotensor.dist.before_after.sgd_speedup{,_spin}        before / after_fused{,_spin}
set -euo pipefail
if (($# < 2)); then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
before=$1
after=$2
rounds=${3:-5}
ranks=${4:-2}
fusion_bytes=${FUSION_BYTES:-1048576}
spin_us=${SPIN_US:-50}
for b in "$before" "$after"; do
  for exe in bench/cotensor_bench_dist examples/data_parallel_sgd; do
    [[ -x $b/$exe ]] || { echo "before_after.sh: no $b/$exe (build it with MPI)" >&2; exit 2; }
  done
done
# MPIRUN_ARGS: more mpirun arguments for every run of both builds (e.g. Open MPI's
# "--mca btl_vader_single_copy_mechanism none").
read -r -a extra <<<"${MPIRUN_ARGS:-}"
mpirun=(mpirun -np "$ranks" --oversubscribe --bind-to none "${extra[@]}")
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

pipelined_us() {  # build, fusion bytes, spin
  COTENSOR_DIST_FUSION_BYTES=$2 COTENSOR_WAIT_SPIN_US=$3 COTENSOR_BENCH_DIST_MIN_BYTES=4096 \
    COTENSOR_BENCH_DIST_MAX_BYTES=4096 "${mpirun[@]}" "$1/bench/cotensor_bench_dist" |
    awk '/^cotensor\.dist\.allreduce_pipelined_us\.4096:/ { print $2 }'
}
epoch_s() {  # build, fusion bytes, spin
  COTENSOR_DIST_FUSION_BYTES=$2 COTENSOR_WAIT_SPIN_US=$3 "${mpirun[@]}" "$1/examples/data_parallel_sgd" --epochs 12 |
    awk '/^time per epoch/ { print $(NF - 3) }'
}
measure() {  # which, build, fusion bytes, spin
  p_us+=(["$1"]="${p_us[$1]:-} $(pipelined_us "$2" "$3" "$4")")
  e_s+=(["$1"]="${e_s[$1]:-} $(epoch_s "$2" "$3" "$4")")
}

declare -A p_us=() e_s=()
last() { local v=($1); echo "${v[-1]}"; }
for ((i = 0; i < rounds; ++i)); do
  if ((i % 2 == 0)); then  # which build goes first alternates
    measure before "$before" 0 0
    measure after_unfused "$after" 0 0
    measure after_fused "$after" "$fusion_bytes" 0
    measure after_fused_spin "$after" "$fusion_bytes" "$spin_us"
  else
    measure after_fused_spin "$after" "$fusion_bytes" "$spin_us"
    measure after_fused "$after" "$fusion_bytes" 0
    measure after_unfused "$after" 0 0
    measure before "$before" 0 0
  fi
  echo "# round $i: 16 x 4 KiB per op (us) before $(last "${p_us[before]}")," \
    "after unfused $(last "${p_us[after_unfused]}"), after fused $(last "${p_us[after_fused]}")," \
    "fused spinning $(last "${p_us[after_fused_spin]}"); SGD epoch (s) before" \
    "$(last "${e_s[before]}"), after unfused $(last "${e_s[after_unfused]}"), after fused" \
    "$(last "${e_s[after_fused]}"), fused spinning $(last "${e_s[after_fused_spin]}")"
done
median() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for which in before after_unfused after_fused after_fused_spin; do
  echo "cotensor.dist.before_after.pipelined_us.$which: $(median "${p_us[$which]}")"
done
for which in before after_unfused after_fused after_fused_spin; do
  echo "cotensor.dist.before_after.sgd_epoch_s.$which: $(median "${e_s[$which]}")"
done
for figure in pipelined:p_us sgd:e_s; do
  declare -n values=${figure#*:}
  for which in after_fused after_fused_spin; do
    suffix=${which#after_fused}
    awk -v b="$(median "${values[before]}")" -v a="$(median "${values[$which]}")" -v f="${figure%%:*}" \
      -v s="$suffix" 'BEGIN { printf "cotensor.dist.before_after.%s_speedup%s: %.3f\n", f, s, b / a }'
  done
  unset -n values
done

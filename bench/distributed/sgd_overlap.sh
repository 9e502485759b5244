#!/usr/bin/env bash
# The data-parallel SGD example's time per epoch with and without overlapping the gradients'
# all-reduces with the backward pass, and overlapped with fusion of the all-reduces
# (COTENSOR_DIST_FUSION_BYTES, default here 1 MiB: every gradient of the example), alternating
# the three so that all meet the same machine.
#
#   bench/distributed/sgd_overlap.sh [build dir (build)] [rounds (7)] [ranks (2)]
#
# Prints each run's median time per epoch (the example's own figure), then
# cotensor.dist.sgd_epoch_s.overlap, cotensor.dist.sgd_epoch_s.no_overlap,
# cotensor.dist.sgd_epoch_s.overlap_fused (the medians over the runs),
# cotensor.dist.sgd_overlap_speedup (no_overlap / overlap) and
# cotensor.dist.sgd_fusion_speedup (overlap / overlap_fused).
set -euo pipefail
build=${1:-build}
pairs=${2:-7}
ranks=${3:-2}
example="$build/examples/data_parallel_sgd"
[[ -x $example ]] || { echo "sgd_overlap.sh: no $example (build the examples with MPI)" >&2; exit 2; }
mpirun=(mpirun -np "$ranks" --oversubscribe --bind-to none)
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

epoch_seconds() {  # the median the example prints, from its "time per epoch" line
  "${mpirun[@]}" "$example" --epochs 12 "$@" | awk '/^time per epoch/ { print $(NF - 3) }'
}

fusion_bytes=${FUSION_BYTES:-1048576}
on=()
off=()
fused=()
for ((i = 0; i < pairs; ++i)); do
  on+=("$(COTENSOR_DIST_FUSION_BYTES=0 epoch_seconds)")
  off+=("$(COTENSOR_DIST_FUSION_BYTES=0 epoch_seconds --no-overlap)")
  fused+=("$(COTENSOR_DIST_FUSION_BYTES=$fusion_bytes epoch_seconds)")
  echo "# round $i: overlap ${on[-1]} s, no overlap ${off[-1]} s, overlap fused ${fused[-1]} s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m_on=$(median "${on[@]}")
m_off=$(median "${off[@]}")
m_fused=$(median "${fused[@]}")
echo "cotensor.dist.sgd_epoch_s.overlap: $m_on"
echo "cotensor.dist.sgd_epoch_s.no_overlap: $m_off"
echo "cotensor.dist.sgd_epoch_s.overlap_fused: $m_fused"
awk -v a="$m_on" -v b="$m_off" 'BEGIN { printf "cotensor.dist.sgd_overlap_speedup: %.3f\n", b / a }'
awk -v a="$m_on" -v b="$m_fused" 'BEGIN { printf "cotensor.dist.sgd_fusion_speedup: %.3f\n", a / b }'

#!/bin/sh
# differential.numpy_torch: writes COUNT programs from SEED with the C++ driver, then replays
# them in NumPy and PyTorch. Exits 77 (ctest: SKIPPED) when the Python environment is missing.
#   sh run.sh PYTHON DRIVER COMPARE_PY OUT.jsonl SEED COUNT
python=$1 driver=$2 compare=$3 out=$4 seed=$5 count=$6
if [ -z "$python" ] || [ ! -x "$python" ]; then
  echo "SKIPPED: no Python interpreter (COTENSOR_PYTHON='$python'); run bench/peers/setup.sh"
  exit 77
fi
if ! "$python" -c "import numpy, ml_dtypes, torch" 2>/dev/null; then
  echo "SKIPPED: $python lacks numpy, ml_dtypes or torch; run bench/peers/setup.sh"
  exit 77
fi
"$driver" "$seed" "$count" "$out" || exit 1
exec "$python" "$compare" "$out"

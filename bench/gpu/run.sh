#!/usr/bin/env bash
# The GPU run of a bundle made by bench/gpu/bundle.sh, on a machine with an NVIDIA driver, CUDA 13
# and a python3 with PyTorch (CUDA) and nothing else: this script sits in the bundle beside bin/,
# lib/ and chapter.py. Usage: run.sh [RESULTS]
#
# Steps, each logged with a header and its exit status to RESULTS (default: $OUT/gpu-results.txt
# when $OUT is set, else ./gpu-results.txt) and to stdout; a failed step does not stop the run:
#   preflight  the machine, cuBLAS 13 located, nvidia-smi, `cotensor_bench_gpu --probe`
#   tests      cotensor_cuda_tests with COTENSOR_REQUIRE_GPU=1
#   memcheck   the same under `compute-sanitizer --tool memcheck` (when compute-sanitizer exists)
#   racecheck  the same under `compute-sanitizer --tool racecheck`
#   examples   examples/chapter 01-05 with --device cuda
#   bench      cotensor_bench_gpu and `python3 chapter.py --device cuda`, alternately, ROUNDS times
#
# Exit status: 0 if every step passed, 1 if one failed, 77 if this machine has no usable GPU
# (said as "no GPU here: <reason>"; nothing after the preflight runs), 2 for a broken bundle.
#
# Environment: STEPS (default "tests memcheck racecheck examples bench"; the preflight always
# runs), ROUNDS (3), STEP_TIMEOUT (s, 300), SANITIZER_TIMEOUT (s, 900), SANITIZER_ARGS (extra
# compute-sanitizer options, e.g. "--report-api-errors no"), SANITIZER_TEST_ARGS (extra doctest
# options under the sanitizers, e.g. "--test-case-exclude=*soak*"), BENCH_ARGS (for
# cotensor_bench_gpu, e.g. "--repeat 11"), CHAPTER_ARGS (for chapter.py), PYTHON (python3),
# CUBLAS_DIR (a directory holding libcublas.so.13, searched first).
set -uo pipefail  # no -e: a failing step is logged and the run goes on

bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set /p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
elif [[ $# -gt 1 ]]; then
  echo "usage: run.sh [RESULTS] (run.sh --help says more)" >&2
  exit 2
fi
if [[ $# -eq 1 ]]; then
  results=$1
elif [[ -n ${OUT:-} ]]; then
  results=$OUT/gpu-results.txt
else
  results=./gpu-results.txt
fi
steps=" ${STEPS:-tests memcheck racecheck examples bench} "
rounds=${ROUNDS:-3}
step_timeout=${STEP_TIMEOUT:-300}
sanitizer_timeout=${SANITIZER_TIMEOUT:-900}
python=${PYTHON:-python3}
read -r -a sanitizer_args <<<"${SANITIZER_ARGS:-}"
read -r -a sanitizer_test_args <<<"${SANITIZER_TEST_ARGS:-}"
read -r -a bench_args <<<"${BENCH_ARGS:-}"
read -r -a chapter_args <<<"${CHAPTER_ARGS:-}"
examples=(01_backend_asynchrony 02_dependency_graph 03_barriers_and_blockers
  04_improving_computation 05_cpu_asynchrony)

if [[ ! -x $bundle/bin/cotensor_bench_gpu ]]; then
  echo "run.sh: $bundle/bin/cotensor_bench_gpu is missing: run the copy of run.sh inside a" \
    "bundle made by bench/gpu/bundle.sh OUTDIR" >&2
  exit 2
fi
mkdir -p "$(dirname "$results")"
: >"$results" || exit 2

log() { printf '%s\n' "$*" | tee -a "$results"; }

failed=()
passed=()
last_rc=0
# run_step NAME TIMEOUT COMMAND...: runs COMMAND (stdout and stderr) into the log under a header.
run_step() {
  local name=$1 limit=$2 start rc
  shift 2
  log ""
  log "==== [$name] \$ $*"
  start=$(date +%s.%N)
  if command -v timeout >/dev/null; then
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$results"
    rc=${PIPESTATUS[0]}
  else
    "$@" 2>&1 | tee -a "$results"
    rc=${PIPESTATUS[0]}
  fi
  local secs
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    log "==== [$name] exit $rc (timed out after ${limit} s) in $secs s"
  else
    log "==== [$name] exit $rc in $secs s"
  fi
  if [[ $rc -eq 0 ]]; then passed+=("$name"); else failed+=("$name (exit $rc)"); fi
  last_rc=$rc
  return 0
}

# Whether version $1 >= $2 (sort -V order).
version_ge() { [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1) == "$2" ]]; }

# The directory holding CUDA 13's libcublas.so.13 and libcublasLt.so.13: CUBLAS_DIR, the CUDA
# toolkit, the dynamic linker's cache, or the python environment's NVIDIA wheels
# (nvidia/cublas/lib, or nvidia/cu13/lib from CUDA 13 on; `nvidia` is a namespace package).
find_cublas() {
  local d
  for d in ${CUBLAS_DIR:-} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib \
    /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib; do
    if [[ -e $d/libcublas.so.13 && -e $d/libcublasLt.so.13 ]]; then
      echo "$d"
      return 0
    fi
  done
  d=$(ld_cache | awk '$1 == "libcublas.so.13" && /x86-64/ { print $NF; exit }')
  if [[ -n $d && -e $(dirname "$d")/libcublasLt.so.13 ]]; then
    dirname "$d"
    return 0
  fi
  command -v "$python" >/dev/null || return 1
  "$python" - 2>/dev/null <<'EOF'
import importlib, os, sys

roots = []
for name in ("nvidia.cublas", "nvidia"):
    try:
        module = importlib.import_module(name)
    except Exception:
        continue
    if getattr(module, "__file__", None):
        roots.append(os.path.dirname(module.__file__))
    roots.extend(getattr(module, "__path__", []))
for root in roots:
    for here, dirs, files in os.walk(root):
        if "libcublas.so.13" in files and "libcublasLt.so.13" in files:
            print(here)
            sys.exit(0)
        if here.count(os.sep) - root.count(os.sep) >= 3:
            dirs[:] = []
sys.exit(1)
EOF
}

find_sanitizer() {
  local s
  for s in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
    if [[ -n $s && -x $s ]]; then
      echo "$s"
      return 0
    fi
  done
  return 1
}

# The dynamic linker's cache (ldconfig may sit outside a user's PATH).
ld_cache() {
  if command -v ldconfig >/dev/null; then
    ldconfig -p 2>/dev/null
  elif [[ -x /sbin/ldconfig ]]; then
    /sbin/ldconfig -p 2>/dev/null
  fi
}

# The highest GLIBCXX_3.4.N that a libstdc++.so.6 provides.
glibcxx_of() { grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$1" 2>/dev/null | sort -uV | tail -n1; }

# no_gpu REASON: the end of the run on a machine without a usable GPU.
no_gpu() {
  log ""
  log "no GPU here: $1"
  exit 77
}

log "# cotensor GPU run, $(date -u +%Y-%m-%dT%H:%M:%SZ), ${HOSTNAME:-$(uname -n)}, bundle $bundle"
[[ -f $bundle/BUNDLE_INFO.txt ]] && log "# $(head -n1 "$bundle/BUNDLE_INFO.txt")"
log "# $(uname -srm); $(getconf GNU_LIBC_VERSION 2>/dev/null || echo 'glibc version unknown')"
log "# steps:$steps rounds $rounds"

# Our programs get the bundle's libraries and cuBLAS through LD_LIBRARY_PATH, set for them alone
# (not for python3, whose torch brings its own). The bundle's libstdc++ is used only when the
# system's is older than what our programs need.
ld_path=$bundle/lib
requires=$bundle/lib/REQUIRES
need_glibcxx=$(awk '$1 == "glibcxx" { print $2 }' "$requires" 2>/dev/null)
need_glibc=$(awk '$1 == "glibc" { print $2 }' "$requires" 2>/dev/null)
need_glibc_stdcxx=$(awk '$1 == "glibc-with-bundled-libstdc++" { print $2 }' "$requires" 2>/dev/null)
have_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
sys_stdcxx=$(ld_cache | awk '$1 == "libstdc++.so.6" && /x86-64/ { print $NF; exit }')
[[ -z $sys_stdcxx && -e /usr/lib/x86_64-linux-gnu/libstdc++.so.6 ]] &&
  sys_stdcxx=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
have_glibcxx=$([[ -n $sys_stdcxx ]] && glibcxx_of "$sys_stdcxx")
if [[ -n $need_glibcxx && -n $have_glibcxx ]] && version_ge "$have_glibcxx" "$need_glibcxx"; then
  log "# libstdc++: the system's ($sys_stdcxx, $have_glibcxx; needed $need_glibcxx)"
  need_glibc_all=$need_glibc
else
  ld_path=$ld_path:$bundle/lib/stdcxx
  log "# libstdc++: the bundle's (system: ${sys_stdcxx:-none} ${have_glibcxx:-};" \
    "needed ${need_glibcxx:-?})"
  need_glibc_all=${need_glibc_stdcxx:-$need_glibc}
fi
if [[ -n $need_glibc_all && -n $have_glibc ]] && ! version_ge "$have_glibc" "$need_glibc_all"; then
  log "# WARNING: this machine has glibc $have_glibc; the bundle needs $need_glibc_all: its" \
    "programs will not load (rebuild the bundle on an older system)"
fi

if cublas_dir=$(find_cublas); then
  log "# cuBLAS 13: $cublas_dir"
  ld_path=$ld_path:$cublas_dir
else
  log "# cuBLAS 13: libcublas.so.13 not found (looked in CUBLAS_DIR, /usr/local/cuda*," \
    "ldconfig -p, the python environment's nvidia packages); our programs will not load"
fi
ours=(env "LD_LIBRARY_PATH=$ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
log "# LD_LIBRARY_PATH for our programs: $ld_path"

# Preflight: is there a GPU? nvidia-smi says what the driver sees; the probe, what cotensor sees.
smi_problem=""
if command -v nvidia-smi >/dev/null; then
  run_step nvidia-smi 60 nvidia-smi
  [[ $last_rc -eq 0 ]] || smi_problem="nvidia-smi failed (exit $last_rc)"
else
  log ""
  log "==== [nvidia-smi] not found in PATH"
  smi_problem="nvidia-smi not found"
fi
run_step probe 120 "${ours[@]}" "$bundle/bin/cotensor_bench_gpu" --probe
probe_rc=$last_rc
if [[ $probe_rc -eq 77 ]]; then
  reason=$(grep -m1 'no usable CUDA device' "$results" | sed 's/.*no usable CUDA device: //')
  no_gpu "${smi_problem:+$smi_problem; }cotensor: ${reason:-cuda_device_count() is 0}"
elif [[ $probe_rc -ne 0 && -n $smi_problem ]]; then
  no_gpu "$smi_problem; cotensor_bench_gpu --probe exited $probe_rc"
fi

if [[ $steps == *" tests "* ]]; then
  run_step tests "$step_timeout" "${ours[@]}" COTENSOR_REQUIRE_GPU=1 \
    "$bundle/bin/cotensor_cuda_tests"
  if [[ $last_rc -eq 77 ]]; then
    no_gpu "cotensor_cuda_tests exited 77 (skipped: no usable GPU)"
  fi
fi

for tool in memcheck racecheck; do
  [[ $steps == *" $tool "* ]] || continue
  if sanitizer=$(find_sanitizer); then
    run_step "$tool" "$sanitizer_timeout" "${ours[@]}" COTENSOR_REQUIRE_GPU=1 "$sanitizer" \
      --tool "$tool" --error-exitcode 1 "${sanitizer_args[@]}" \
      "$bundle/bin/cotensor_cuda_tests" "${sanitizer_test_args[@]}"
  else
    log ""
    log "==== [$tool] skipped: compute-sanitizer not found (PATH, /usr/local/cuda*/bin)"
  fi
done

if [[ $steps == *" examples "* ]]; then
  for example in "${examples[@]}"; do
    run_step "example $example" "$step_timeout" "${ours[@]}" "$bundle/bin/$example" \
      --device cuda
  done
fi

if [[ $steps == *" bench "* ]]; then
  for ((round = 1; round <= rounds; ++round)); do
    run_step "bench round $round: cotensor" "$step_timeout" "${ours[@]}" \
      "$bundle/bin/cotensor_bench_gpu" "${bench_args[@]}"
    run_step "bench round $round: torch" "$step_timeout" "$python" "$bundle/chapter.py" \
      --device cuda "${chapter_args[@]}"
  done
  # The figures side by side, one value per round: cotensor's, then PyTorch's.
  log ""
  log "==== figures: name, cotensor per round | torch per round"
  table=$(awk '/^(cotensor|torch)\.gpu\.[A-Za-z0-9_]+: / {
         split($1, part, /\.gpu\./)
         name = substr(part[2], 1, length(part[2]) - 1)
         if (!(name in seen)) { seen[name] = 1; order[++n] = name }
         values[part[1], name] = values[part[1], name] " " $2
       }
       END {
         for (i = 1; i <= n; ++i) {
           printf "%-28s%s |%s\n", order[i], values["cotensor", order[i]], values["torch", order[i]]
         }
       }' "$results")
  log "$table"
fi

log ""
log "==== summary: ${#passed[@]} passed, ${#failed[@]} failed"
for f in "${failed[@]}"; do
  log "FAILED: $f"
done
log "results: $results"
[[ ${#failed[@]} -eq 0 ]]

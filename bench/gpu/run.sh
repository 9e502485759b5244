#!/usr/bin/env bash
# The GPU run of a bundle made by bench/gpu/bundle.sh, on a machine with an NVIDIA driver, CUDA 13
# and a python3 with PyTorch (CUDA) and nothing else: this script sits in the bundle beside bin/,
# lib/ and chapter.py. Usage: run.sh [--preflight] [RESULTS]
#
# A device command may run 10 minutes at most: a whole proof is 4 runs of this script, one per
# line of bench/gpu/README.md ("The proof in four commands"), each ending within RUN_BUDGET.
#
# Steps, each logged with a header and its exit status to RESULTS (default: $OUT/gpu-results.txt
# when $OUT is set, else ./gpu-results.txt) and to stdout; a failed step does not stop the run:
#   preflight  always first: the GPU, driver, CUDA runtime, cuBLAS, NCCL, compute-sanitizer and
#              PyTorch found (or what is missing), and `cotensor_bench_gpu --probe`; with
#              --preflight, the only step
#   tests      cotensor_cuda_tests with COTENSOR_REQUIRE_GPU=1, then its cuBLAS-less case alone
#              (CUBLAS_DIR pointing at nothing: every op but matmul runs)
#   memcheck   cotensor_cuda_tests under `compute-sanitizer --tool memcheck`, without the cases
#              that make CUDA API calls fail on purpose (API_ERROR_CASES: the 16 TiB
#              cudaMallocAsync), then those alone with `--report-api-errors no`; each passes
#              only with exit status 0 and an `ERROR SUMMARY: 0 errors` line
#   racecheck  the same with `--tool racecheck`
#   examples   examples/chapter 01-05 with --device cuda
#   bench      cotensor_bench_gpu and `python3 chapter.py --device cuda`, alternately, ROUNDS times
#
# Exit status: 0 if every step passed, 1 if one failed (for --preflight: if something the steps
# need is missing), 77 if this machine has no usable GPU (said as "no GPU here: <reason>";
# nothing after the preflight runs), 2 for a broken bundle or a bad argument.
#
# Environment: STEPS (default "tests memcheck racecheck examples bench"; the preflight always
# runs), RUN_BUDGET (s, 570: the run ends within it; each step's timeout is cut to what is left
# and a step with under 15 s left is not started, and fails), ROUNDS (3), STEP_TIMEOUT (s, 300),
# SANITIZER_TIMEOUT (s, 480), SANITIZER_ARGS (extra compute-sanitizer options),
# SANITIZER_TEST_ARGS (extra doctest options under the sanitizers, e.g.
# "--test-suite-exclude=cuda.random"), API_ERROR_CASES (doctest filter, "*cannot be had*"),
# BENCH_ARGS (for cotensor_bench_gpu, e.g. "--repeat 11"), CHAPTER_ARGS (for chapter.py), PYTHON
# (python3), CUBLAS_DIR (the directory holding libcublas.so.13: searched first, and passed on to
# our programs), BIN_DIR (the programs: the bundle's bin/).
set -uo pipefail  # no -e: a failing step is logged and the run goes on

bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
preflight_only=0
args=()
for a in "$@"; do
  case $a in
    -h | --help)
      sed -n '2,/^set /p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0 ;;
    --preflight) preflight_only=1 ;;
    -*)
      echo "run.sh: unknown option $a (run.sh --help says more)" >&2
      exit 2 ;;
    *) args+=("$a") ;;
  esac
done
if [[ ${#args[@]} -gt 1 ]]; then
  echo "usage: run.sh [--preflight] [RESULTS] (run.sh --help says more)" >&2
  exit 2
fi
if [[ ${#args[@]} -eq 1 ]]; then
  results=${args[0]}
elif [[ -n ${OUT:-} ]]; then
  results=$OUT/gpu-results.txt
else
  results=./gpu-results.txt
fi
all_steps="tests memcheck racecheck examples bench"
steps=" ${STEPS:-$all_steps} "
[[ $preflight_only -eq 1 ]] && steps=" "
for s in $steps; do
  if [[ " $all_steps " != *" $s "* ]]; then
    echo "run.sh: unknown step '$s' in STEPS (steps: $all_steps)" >&2
    exit 2
  fi
done
budget=${RUN_BUDGET:-570}
rounds=${ROUNDS:-3}
step_timeout=${STEP_TIMEOUT:-300}
sanitizer_timeout=${SANITIZER_TIMEOUT:-480}
api_error_cases=${API_ERROR_CASES:-*cannot be had*}
python=${PYTHON:-python3}
bin=${BIN_DIR:-$bundle/bin}
read -r -a sanitizer_args <<<"${SANITIZER_ARGS:-}"
read -r -a sanitizer_test_args <<<"${SANITIZER_TEST_ARGS:-}"
read -r -a bench_args <<<"${BENCH_ARGS:-}"
read -r -a chapter_args <<<"${CHAPTER_ARGS:-}"
examples=(01_backend_asynchrony 02_dependency_graph 03_barriers_and_blockers
  04_improving_computation 05_cpu_asynchrony)
deadline=$(($(date +%s) + budget))

if [[ ! -x $bin/cotensor_bench_gpu ]]; then
  echo "run.sh: $bin/cotensor_bench_gpu is missing: run the copy of run.sh inside a" \
    "bundle made by bench/gpu/bundle.sh OUTDIR (or set BIN_DIR)" >&2
  exit 2
fi
# The libraries that travel gzipped (bundle.sh: OpenBLAS) are unpacked in place, once.
for gz in "$bundle"/lib/*.gz "$bundle"/lib/stdcxx/*.gz; do
  [[ -e $gz && ! -e ${gz%.gz} ]] || continue
  if command -v gzip >/dev/null; then
    gzip -dc "$gz" >"${gz%.gz}.part" && mv "${gz%.gz}.part" "${gz%.gz}"
  else
    "$python" -c 'import gzip, shutil, sys
with gzip.open(sys.argv[1]) as i, open(sys.argv[2], "wb") as o: shutil.copyfileobj(i, o)' \
      "$gz" "${gz%.gz}.part" && mv "${gz%.gz}.part" "${gz%.gz}"
  fi || {
    echo "run.sh: cannot unpack $gz next to it (the bundle's folder must be writable)" >&2
    exit 2
  }
done
mkdir -p "$(dirname "$results")"
: >"$results" || exit 2
step_log=$(mktemp "${TMPDIR:-/tmp}/cotensor-step.XXXXXX") || exit 2
trap 'rm -f "$step_log"' EXIT

log() { printf '%s\n' "$*" | tee -a "$results"; }

failed=()
passed=()
last_rc=0
# run_step NAME TIMEOUT COMMAND...: runs COMMAND (stdout and stderr) into the log under a header,
# and into $step_log for the checks that judge it; its timeout is cut to the budget left.
run_step() {
  local name=$1 limit=$2 start rc left
  shift 2
  left=$((deadline - $(date +%s) - 5))
  ((left < limit)) && limit=$left
  log ""
  if ((limit < 15)); then
    log "==== [$name] not started: the run's budget (RUN_BUDGET ${budget} s) is spent"
    failed+=("$name (no time left)")
    last_rc=124
    : >"$step_log"
    return 0
  fi
  log "==== [$name] \$ $*"
  start=$(date +%s.%N)
  if command -v timeout >/dev/null; then
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$step_log" | tee -a "$results"
    rc=${PIPESTATUS[0]}
  else
    "$@" 2>&1 | tee "$step_log" | tee -a "$results"
    rc=${PIPESTATUS[0]}
  fi
  local secs
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    log "==== [$name] exit $rc (timed out after ${limit} s) in $secs s"
  else
    log "==== [$name] exit $rc in $secs s"
  fi
  last_rc=$rc
  [[ -n ${judge:-} ]] && "$judge" "$name"
  if [[ $last_rc -eq 0 ]]; then passed+=("$name"); else failed+=("$name (exit $last_rc)"); fi
  return 0
}

# Judges: run by run_step (set `judge` around it) on $step_log; set last_rc to 1 to fail it.
# A sanitizer step passes only on compute-sanitizer's own verdict: "ERROR SUMMARY: 0 errors"
# (racecheck may sum up as "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)").
judge_sanitizer() {
  local summary
  summary=$(grep -a -m1 -o 'ERROR SUMMARY: [0-9]* error' "$step_log")
  if [[ -z $summary ]]; then
    summary=$(grep -a -m1 -o 'RACECHECK SUMMARY: .*' "$step_log" |
      sed -n 's/.*(\([0-9]*\) error.*/ERROR SUMMARY: \1 error/p')
  fi
  if [[ -z $summary ]]; then
    log "==== [$1] FAILED: no ERROR SUMMARY line from compute-sanitizer"
    last_rc=1
  elif [[ $summary != "ERROR SUMMARY: 0 error" ]]; then
    log "==== [$1] FAILED: $summary(s)"
    last_rc=1
  elif [[ $last_rc -eq 0 ]]; then
    log "==== [$1] ERROR SUMMARY: 0 errors"
  fi
}
# A filtered doctest run passes only if it ran exactly one case, and it passed.
judge_one_case() {
  if ! grep -aEq 'test cases: *1 \| *1 passed' "$step_log"; then
    log "==== [$1] FAILED: not exactly one test case run and passed"
    last_rc=1
  fi
}

# Whether version $1 >= $2 (sort -V order).
version_ge() { [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1) == "$2" ]]; }

# The dynamic linker's cache (ldconfig may sit outside a user's PATH).
ld_cache() {
  if command -v ldconfig >/dev/null; then
    ldconfig -p 2>/dev/null
  elif [[ -x /sbin/ldconfig ]]; then
    /sbin/ldconfig -p 2>/dev/null
  fi
}

# find_lib SONAME [COMPANION] [DIR...]: the directory holding SONAME (and COMPANION): the DIRs,
# the CUDA toolkit, the dynamic linker's cache, or the python environment's NVIDIA wheels
# (nvidia/cublas/lib, nvidia/nccl/lib, or nvidia/cu13/lib from CUDA 13 on; `nvidia` is a
# namespace package).
find_lib() {
  local so=$1 companion=${2:-$1} d
  shift 2
  for d in "$@" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib \
    /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib; do
    if [[ -n $d && -e $d/$so && -e $d/$companion ]]; then
      echo "$d"
      return 0
    fi
  done
  d=$(ld_cache | awk -v so="$so" '!found && $1 == so && /x86-64/ { print $NF; found = 1 }')
  if [[ -n $d && -e $(dirname "$d")/$companion ]]; then
    dirname "$d"
    return 0
  fi
  command -v "$python" >/dev/null || return 1
  "$python" - "$so" "$companion" 2>/dev/null <<'EOF'
import importlib, os, sys

so, companion = sys.argv[1], sys.argv[2]
roots = []
for name in ("nvidia.cublas", "nvidia.nccl", "nvidia"):
    try:
        module = importlib.import_module(name)
    except Exception:
        continue
    if getattr(module, "__file__", None):
        roots.append(os.path.dirname(module.__file__))
    roots.extend(getattr(module, "__path__", []))
for root in roots:
    for here, dirs, files in os.walk(root):
        if so in files and companion in files:
            print(here)
            sys.exit(0)
        if here.count(os.sep) - root.count(os.sep) >= 3:
            dirs[:] = []
sys.exit(1)
EOF
}

# lib_version cublas|nccl PATH: the library's version as it reports it (cublasGetProperty,
# ncclGetVersion, through python's ctypes: no GPU needed), else from its file name
# (libcublas.so.13.1.0.3).
lib_version() {
  local v real
  if command -v "$python" >/dev/null; then
    v=$("$python" - "$1" "$2" 2>/dev/null <<'EOF'
import ctypes, sys

kind, path = sys.argv[1], sys.argv[2]
lib = ctypes.CDLL(path)
if kind == "cublas":
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        value = ctypes.c_int()
        if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
            sys.exit(1)
        parts.append(str(value.value))
    print(".".join(parts))
else:
    code = ctypes.c_int()
    if lib.ncclGetVersion(ctypes.byref(code)) != 0:
        sys.exit(1)
    c = code.value
    print(f"{c // 10000}.{c % 10000 // 100}.{c % 100}" if c >= 10000 else
          f"{c // 1000}.{c % 1000 // 100}.{c % 100}")
EOF
    ) && [[ -n $v ]] && {
      echo "$v"
      return 0
    }
  fi
  real=$(basename "$(readlink -f "$2")")
  echo "${real#*.so.} (from the file name)"
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
if [[ $preflight_only -eq 1 ]]; then
  log "# preflight only"
else
  log "# steps:$steps rounds $rounds, budget $budget s"
fi

# ---- preflight: what this machine has, and whether cotensor sees its GPU ----------------------
missing=()
# Our programs find the bundle's lib/ through their RUNPATH; LD_LIBRARY_PATH is set (for them
# alone, not for python3) only when the system's libstdc++ is older than they need.
ours=(env)
requires=$bundle/lib/REQUIRES
need_glibcxx=$(awk '$1 == "glibcxx" { print $2 }' "$requires" 2>/dev/null)
need_glibc=$(awk '$1 == "glibc" { print $2 }' "$requires" 2>/dev/null)
need_glibc_stdcxx=$(awk '$1 == "glibc-with-bundled-libstdc++" { print $2 }' "$requires" 2>/dev/null)
have_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
sys_stdcxx=$(ld_cache | awk '!found && $1 == "libstdc++.so.6" && /x86-64/ { print $NF; found = 1 }')
[[ -z $sys_stdcxx && -e /usr/lib/x86_64-linux-gnu/libstdc++.so.6 ]] &&
  sys_stdcxx=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
have_glibcxx=$([[ -n $sys_stdcxx ]] && glibcxx_of "$sys_stdcxx")
if [[ -z $need_glibcxx ]] || { [[ -n $have_glibcxx ]] &&
  version_ge "$have_glibcxx" "$need_glibcxx"; }; then
  log "# libstdc++: the system's ($sys_stdcxx, ${have_glibcxx:-?}; needed ${need_glibcxx:-?})"
  need_glibc_all=$need_glibc
else
  ours+=("LD_LIBRARY_PATH=$bundle/lib/stdcxx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  log "# libstdc++: the bundle's (system: ${sys_stdcxx:-none} ${have_glibcxx:-};" \
    "needed $need_glibcxx): LD_LIBRARY_PATH=$bundle/lib/stdcxx for our programs"
  need_glibc_all=${need_glibc_stdcxx:-$need_glibc}
fi
if [[ -n $need_glibc_all && -n $have_glibc ]] && ! version_ge "$have_glibc" "$need_glibc_all"; then
  log "# WARNING: this machine has glibc $have_glibc; the bundle needs $need_glibc_all: its" \
    "programs will not load (rebuild the bundle on an older system)"
  missing+=("glibc >= $need_glibc_all (have $have_glibc)")
fi

smi_problem=""
if command -v nvidia-smi >/dev/null; then
  if gpus=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap \
    --format=csv,noheader 2>&1) && [[ -n $gpus ]]; then
    while IFS= read -r g; do log "# GPU: $g (index, name, driver, memory, compute capability)"; done \
      <<<"$gpus"
    driver_cuda=$(nvidia-smi 2>/dev/null |
      sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | sed -n 1p)
    log "# driver: $(head -n1 <<<"$gpus" | cut -d, -f3 | tr -d ' '), for CUDA up to" \
      "${driver_cuda:-?}"
  else
    smi_problem="nvidia-smi: $(head -n1 <<<"$gpus")"
    log "# GPU: none ($smi_problem)"
  fi
else
  smi_problem="nvidia-smi not found"
  log "# GPU: nvidia-smi not found in PATH"
  [[ -r /proc/driver/nvidia/version ]] &&
    log "# driver: $(head -n1 /proc/driver/nvidia/version)"
fi
built_cuda=$(sed -n 's/^build: .*CUDA \([^,]*\),.*/\1/p' "$bundle/BUNDLE_INFO.txt" 2>/dev/null)
log "# CUDA runtime: ${built_cuda:-the build toolkit version} (linked statically into libcotensor)"

if cublas_dir=$(find_lib libcublas.so.13 libcublasLt.so.13 "${CUBLAS_DIR:-}"); then
  log "# cuBLAS: $(lib_version cublas "$cublas_dir/libcublas.so.13") in $cublas_dir" \
    "(CUBLAS_DIR for our programs)"
  ours+=("CUBLAS_DIR=$cublas_dir")
else
  log "# cuBLAS: MISSING: libcublas.so.13 and libcublasLt.so.13 not found (looked in" \
    "CUBLAS_DIR, /usr/local/cuda*, ldconfig -p, the python environment's nvidia packages):" \
    "matmul on the GPU will fail, naming the paths it tried; every other op runs. Set" \
    "CUBLAS_DIR to the directory that holds them"
  missing+=("cuBLAS 13 (CUBLAS_DIR)")
fi
if nccl_dir=$(find_lib libnccl.so.2 libnccl.so.2 "${NCCL_DIR:-}"); then
  log "# NCCL: $(lib_version nccl "$nccl_dir/libnccl.so.2") in $nccl_dir"
else
  log "# NCCL: libnccl.so.2 not found (not needed here: the bundle is built without MPI and" \
    "makes no collective)"
fi
if sanitizer=$(find_sanitizer); then
  log "# compute-sanitizer: $("$sanitizer" --version 2>/dev/null | sed -n 's/.*Version *//p' |
    sed -n 1p) ($sanitizer)"
else
  sanitizer=""
  log "# compute-sanitizer: MISSING (PATH, /usr/local/cuda*/bin): memcheck and racecheck cannot run"
  [[ $steps == *" memcheck "* || $steps == *" racecheck "* || $preflight_only -eq 1 ]] &&
    missing+=("compute-sanitizer")
fi
if command -v "$python" >/dev/null; then
  torch_line=$("$python" -c '
import torch
cuda = torch.cuda.is_available()
nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else "-"
print(torch.__version__, "built for CUDA", torch.version.cuda,
      "GPU available" if cuda else "no GPU", "NCCL", nccl)' 2>&1 | tail -n1)
  log "# PyTorch: $torch_line"
else
  log "# PyTorch: $python not found (the bench step needs it)"
  [[ $steps == *" bench "* ]] && missing+=("$python with PyTorch")
fi

run_step probe 60 "${ours[@]}" "$bin/cotensor_bench_gpu" --probe
probe_rc=$last_rc
if [[ $probe_rc -eq 77 ]]; then
  reason=$(grep -a -m1 'no usable CUDA device' "$step_log" | sed 's/.*no usable CUDA device: //')
  no_gpu "${smi_problem:+$smi_problem; }cotensor: ${reason:-cuda_device_count() is 0}"
elif [[ $probe_rc -ne 0 && -n $smi_problem ]]; then
  no_gpu "$smi_problem; cotensor_bench_gpu --probe exited $probe_rc"
fi

if [[ $preflight_only -eq 1 ]]; then
  log ""
  if [[ $probe_rc -ne 0 ]]; then
    missing+=("a working cotensor_bench_gpu --probe (exit $probe_rc)")
  fi
  for m in "${missing[@]}"; do
    log "missing: $m"
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "preflight: ready"
    exit 0
  fi
  exit 1
fi

# ---- the steps -------------------------------------------------------------------------------
if [[ $steps == *" tests "* ]]; then
  run_step tests "$step_timeout" "${ours[@]}" COTENSOR_REQUIRE_GPU=1 "$bin/cotensor_cuda_tests"
  if [[ $last_rc -eq 77 ]]; then
    no_gpu "cotensor_cuda_tests exited 77 (skipped: no usable GPU)"
  fi
  judge=judge_one_case run_step "tests: without cuBLAS" 120 "${ours[@]}" COTENSOR_REQUIRE_GPU=1 \
    "CUBLAS_DIR=$bundle/no-cublas-here" "$bin/cotensor_cuda_tests" --no-skip \
    "--test-case=*cuBLAS not loadable*"
fi

for tool in memcheck racecheck; do
  [[ $steps == *" $tool "* ]] || continue
  if [[ -n $sanitizer ]]; then
    judge=judge_sanitizer run_step "$tool" "$sanitizer_timeout" "${ours[@]}" \
      COTENSOR_REQUIRE_GPU=1 "$sanitizer" --tool "$tool" --error-exitcode 1 \
      "${sanitizer_args[@]}" "$bin/cotensor_cuda_tests" "--test-case-exclude=$api_error_cases" \
      "${sanitizer_test_args[@]}"
    # The cases whose CUDA calls fail on purpose: the sanitizer would count each as an error.
    judge=judge_sanitizer run_step "$tool: cases with API errors on purpose" 60 "${ours[@]}" \
      COTENSOR_REQUIRE_GPU=1 "$sanitizer" --tool "$tool" --error-exitcode 1 \
      --report-api-errors no "${sanitizer_args[@]}" "$bin/cotensor_cuda_tests" \
      "--test-case=$api_error_cases"
  else
    log ""
    log "==== [$tool] FAILED: compute-sanitizer not found (PATH, /usr/local/cuda*/bin)"
    failed+=("$tool (no compute-sanitizer)")
  fi
done

if [[ $steps == *" examples "* ]]; then
  for example in "${examples[@]}"; do
    run_step "example $example" "$step_timeout" "${ours[@]}" "$bin/$example" --device cuda
  done
fi

if [[ $steps == *" bench "* ]]; then
  for ((round = 1; round <= rounds; ++round)); do
    run_step "bench round $round: cotensor" "$step_timeout" "${ours[@]}" \
      "$bin/cotensor_bench_gpu" "${bench_args[@]}"
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

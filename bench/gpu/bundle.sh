#!/usr/bin/env bash
# Builds what the GPU run needs and packs it into OUTDIR, a folder that runs on a machine with
# only an NVIDIA driver, CUDA 13 and a python3 with PyTorch: OUTDIR/run.sh (bench/gpu/run.sh)
# runs the CUDA tests, the chapter's examples and the GPU benchmark beside chapter.py there.
#
# Usage: bench/gpu/bundle.sh OUTDIR
#
# OUTDIR gets bin/ (cotensor_cuda_tests, examples 01-05, cotensor_bench_gpu), lib/ (libcotensor,
# libcotensor_cuda and every shared library they load but glibc's, libgcc_s and NVIDIA's;
# libstdc++ in lib/stdcxx/, used by run.sh only where the system's is older), chapter.py, run.sh
# and BUNDLE_INFO.txt. Everything is stripped. The programs find lib/ through the RUNPATH they are
# linked with ($ORIGIN/../lib; libcotensor's is $ORIGIN), so they run without LD_LIBRARY_PATH;
# the libraries that only a library without a RUNPATH needs (OpenBLAS's libgfortran and
# libquadmath) are linked into libcotensor as well, so that they are loaded from lib/ first.
# cuBLAS is left out: libcotensor loads the GPU machine's own with the first matmul (run.sh
# finds it and sets CUBLAS_DIR). OUTDIR must be absent, empty or an earlier bundle (it is
# replaced); the bundle must stay within BUNDLE_MAX_MIB (40).
#
# Environment: BUNDLE_BUILD_DIR (build/gpu-bundle, under the git-ignored build/), CUDA_HOME
# (/usr/local/cuda), CHAPTER_PY (the workspace's shared/peers/chapter.py), JOBS (nproc),
# BUNDLE_MAX_MIB (40), GZIP_OVER_MIB (4: larger libraries travel gzipped, and run.sh unpacks
# them), CMAKE_LAUNCHER (e.g. ccache: the compiler launcher).
set -euo pipefail

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  echo "usage: bench/gpu/bundle.sh OUTDIR" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$1
build=${BUNDLE_BUILD_DIR:-$root/build/gpu-bundle}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
chapter_py=${CHAPTER_PY:-$root/../shared/peers/chapter.py}
jobs=${JOBS:-$(nproc)}
max_mib=${BUNDLE_MAX_MIB:-40}
examples=(01_backend_asynchrony 02_dependency_graph 03_barriers_and_blockers
  04_improving_computation 05_cpu_asynchrony)
targets=(cotensor_cuda_tests "${examples[@]}" cotensor_bench_gpu)
marker=.cotensor-gpu-bundle

die() {
  echo "bundle.sh: $*" >&2
  exit 1
}

[[ -f $chapter_py ]] || die "chapter.py not found at $chapter_py (set CHAPTER_PY)"
if [[ -e $out ]]; then
  [[ -d $out ]] || die "$out exists and is not a directory"
  if [[ -n $(ls -A "$out") && ! -e $out/$marker ]]; then
    die "$out is not empty and not an earlier bundle: refusing to replace it"
  fi
fi

# 1. Configure and build, Release, with the CUDA backend for Ampere and Hopper.
configure=(cmake -S "$root" -B "$build")
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  configure+=(-G Ninja)
fi
# Without MPI: the GPU machine has no Open MPI to start ranks (or a singleton) with, and the
# bundled programs make no collective; the NCCL collectives' tests run where both are
# (ctest -R distributed.nccl, docs/distributed.md).
# The bundle's layout is the RUNPATH of every program and library, set at link time (no
# patchelf): bin/x finds $ORIGIN/../lib, lib/libcotensor.so finds $ORIGIN. RUNPATH applies to
# an object's own needs only: a library without one (Debian's OpenBLAS) would look for its
# libgfortran and libquadmath on the system alone, so libcotensor needs them too (as-needed off
# for them), and the loader then takes the copies it has already loaded from lib/.
# awk reads to the end (no `exit`): under pipefail, ldconfig killed by SIGPIPE would fail this.
blas_so=$(ldconfig -p 2>/dev/null |
  awk '!found && $1 == "libopenblas.so.0" && /x86-64/ { print $NF; found = 1 }')
promoted=()
if [[ -n $blas_so ]]; then
  while read -r name; do
    promoted+=("-l:$name")
  done < <(ldd "$blas_so" | awk '$1 ~ /^lib(gfortran|quadmath)\.so/ { print $1 }')
fi
shared_flags="-Wl,--enable-new-dtags"
if [[ ${#promoted[@]} -gt 0 ]]; then
  shared_flags+=" -Wl,--push-state,--no-as-needed $(IFS=' '; echo "${promoted[*]}") -Wl,--pop-state"
fi
configure+=(-DCMAKE_BUILD_TYPE=Release -DCOTENSOR_WITH_CUDA=ON -DCOTENSOR_WITH_MPI=OFF
  "-DCMAKE_CUDA_ARCHITECTURES=80;90"
  -DCOTENSOR_BUILD_TESTS=ON -DCOTENSOR_BUILD_EXAMPLES=ON -DCOTENSOR_BUILD_BENCH=ON
  -DCOTENSOR_SANITIZE= "-DCUDAToolkit_ROOT=$cuda_home"
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib;\$ORIGIN"
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--enable-new-dtags" "-DCMAKE_SHARED_LINKER_FLAGS=$shared_flags")
if [[ -n ${CMAKE_LAUNCHER:-} ]]; then
  configure+=("-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_LAUNCHER"
    "-DCMAKE_CUDA_COMPILER_LAUNCHER=$CMAKE_LAUNCHER")
fi
echo "bundle.sh: ${configure[*]}"
"${configure[@]}"
known=$(cmake --build "$build" --target help)
missing=()
for t in "${targets[@]}"; do
  grep -Eq "^(\.\.\. )?$t(:| |$)" <<<"$known" || missing+=("$t")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  die "this tree has no target ${missing[*]} (is the CUDA backend and its test suite in yet?)"
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

# 2. The programs.
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/stdcxx"
touch "$out/$marker"
for t in "${targets[@]}"; do
  mapfile -t found < <(find "$build" -type f -name "$t" -perm -u+x -not -path '*/CMakeFiles/*')
  [[ ${#found[@]} -eq 1 ]] || die "expected one built $t under $build, found ${#found[@]}"
  cp "${found[0]}" "$out/bin/"
done

# 3. The shared libraries they load, as ldd resolves them with the build's own search path.
cuda_lib=$cuda_home/lib64
[[ -d $cuda_lib ]] || cuda_lib=$cuda_home/targets/x86_64-linux/lib
nvidia_needed=()
for f in "$out"/bin/*; do
  while read -r name path; do
    case $name in
      linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libmvec.so* | libpthread.so* | \
        libdl.so* | librt.so* | libresolv.so* | libutil.so* | libgcc_s.so*)
        continue ;;  # glibc and GCC's runtime: the GPU machine's own
      libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | \
        libnvrtc*.so* | libnvJitLink.so* | libcufft*.so* | libcurand.so* | libcusparse*.so* | \
        libcusolver*.so* | libnvToolsExt.so* | libnvidia-*.so*)
        [[ " ${nvidia_needed[*]} " == *" $name "* ]] || nvidia_needed+=("$name")
        continue ;;  # NVIDIA's: never bundled
    esac
    [[ $path == /* ]] || die "$(basename "$f") needs $name, which ldd does not find"
    dest=$out/lib
    [[ $name == libstdc++.so* ]] && dest=$out/lib/stdcxx
    [[ -e $dest/$name ]] || cp -L "$path" "$dest/$name"
  done < <(LD_LIBRARY_PATH="$build:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$f" |
    awk '$2 == "=>" { print $1, ($3 == "not" ? "-" : $3) }
         $2 != "=>" { n = split($1, part, "/"); print part[n], $1 }')
done
ls "$out"/lib/libcotensor.so* >/dev/null 2>&1 || die "libcotensor was not among the libraries found"
# The CUDA backend, libcotensor_cuda, which libcotensor loads from its own folder with the first
# CUDA device (no program links it), and what it needs that is not there yet.
plugin=$(find "$build" -maxdepth 1 -name 'libcotensor_cuda.so.*' -type l | sort | sed -n 1p)
[[ -n $plugin ]] || die "libcotensor_cuda was not built under $build"
cp -L "$plugin" "$out/lib/$(basename "$plugin")"
while read -r name path; do
  [[ -e $out/lib/$name || -e $out/lib/stdcxx/$name || $path != /* ]] && continue
  case $name in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libgcc_s.so* | ld-linux*) ;;
    *) die "libcotensor_cuda needs $name, which no program of the bundle does" ;;
  esac
done < <(LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$plugin" |
  awk '$2 == "=>" { print $1, $3 }')

# Stripped: symbols and debug sections are of no use on the GPU machine.
chmod u+w "$out"/bin/* "$out"/lib/*.so* "$out"/lib/stdcxx/* 2>/dev/null || true
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* "$out"/lib/stdcxx/* 2>/dev/null ||
  die "strip failed"

# Every program and libcotensor carry the RUNPATH of the layout, and every library in lib/ is
# needed by one of them directly (else only the system's copy would be looked for).
runpath_of() { readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p'; }
needed_of() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
direct=""
for f in "$out"/bin/* "$out"/lib/libcotensor.so* "$out"/lib/libcotensor_cuda.so*; do
  [[ $(runpath_of "$f") == *'$ORIGIN'* ]] ||
    die "$(basename "$f") has no \$ORIGIN RUNPATH ($(runpath_of "$f")): was it linked here?"
  direct+=" $(needed_of "$f" | tr '\n' ' ')"
done
for f in "$out"/lib/*.so*; do
  name=$(basename "$f")
  [[ " $direct " == *" $name "* ]] ||
    die "lib/$name is needed only by a library without a RUNPATH: link it into libcotensor"
done
rpath_note="RUNPATH set at link time: bin/ \$ORIGIN/../lib, lib/ \$ORIGIN; stripped"

# The libraries of more than GZIP_OVER_MIB (4) travel gzipped (OpenBLAS: 35 MiB, 10 MiB so);
# run.sh unpacks them in place, once, before anything runs.
unpacked_bytes=$(du -sb "$out" | cut -f1)
gzip_over=$((${GZIP_OVER_MIB:-4} * 1048576))
packed=()
for f in "$out"/lib/*.so* "$out"/lib/stdcxx/*; do
  [[ -f $f && $(stat -c %s "$f") -gt $gzip_over ]] || continue
  gzip -6 -n "$f"
  packed+=("${f#"$out"/}")
done

# What the GPU machine must provide: glibc and GLIBCXX versions, for run.sh's checks.
max_version() {
  { grep -aoh "$1[0-9.]*[0-9]" "${@:2}" 2>/dev/null || true; } | sort -uV | tail -n1
}
ours=("$out"/bin/* "$out"/lib/*.so*)
need_glibc=$(max_version 'GLIBC_2\.' "${ours[@]}")
need_glibc_stdcxx=$(max_version 'GLIBC_2\.' "${ours[@]}" "$out"/lib/stdcxx/*)
need_glibcxx=$(max_version 'GLIBCXX_3\.4\.' "${ours[@]}")
{
  echo "glibc ${need_glibc#GLIBC_}"
  echo "glibc-with-bundled-libstdc++ ${need_glibc_stdcxx#GLIBC_}"
  echo "glibcxx $need_glibcxx"
} >"$out/lib/REQUIRES"

cp "$chapter_py" "$out/chapter.py"
cp "$here/run.sh" "$out/run.sh"
chmod +x "$out/run.sh"

# 4. What this bundle is, and its size.
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$( (git -C "$root" status --porcelain --untracked-files=no 2>/dev/null || true) | wc -l)
nvcc_version=$( ("$cuda_home/bin/nvcc" --version 2>/dev/null || true) |
  awk -F', ' '/release/ { print $2 }')
{
  changes=""
  if [[ $dirty -gt 0 ]]; then changes=" + $dirty changed files"; fi
  echo "cotensor GPU bundle, commit $commit$changes," \
    "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on ${HOSTNAME:-$(uname -n)}"
  echo "build: $build, Release, CUDA ${nvcc_version:-?}, CMAKE_CUDA_ARCHITECTURES 80;90"
  os=$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null)
  echo "host: ${os:-unknown system}, $(getconf GNU_LIBC_VERSION)"
  echo "needs on the GPU machine: ${nvidia_needed[*]:-no NVIDIA library}," \
    "glibc >= ${need_glibc#GLIBC_}"
  echo "$rpath_note"
  echo "gzipped (run.sh unpacks them): ${packed[*]:-none};" \
    "unpacked $(awk -v b="$unpacked_bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB"
  echo
  (cd "$out" && find . -type f ! -name "$marker" ! -name BUNDLE_INFO.txt -printf '%10s  %p\n' |
    sort -k2)
} >"$out/BUNDLE_INFO.txt"

bytes=$(du -sb "$out" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
cat "$out/BUNDLE_INFO.txt"
if ((bytes > max_mib * 1048576)); then
  die "$out is $mib MiB, over the limit of $max_mib MiB"
fi
echo "bundle.sh: $out: $mib MiB (limit $max_mib MiB)"

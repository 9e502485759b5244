#!/usr/bin/env bash
# Installs what cotensor needs to build, test and benchmark on Debian 12, from Debian's own
# archive. Idempotent: does nothing when every package is already installed.
#   bash cmake/install-deps.sh            # as root, or as a user with sudo
set -euo pipefail

packages=(
  g++ cmake ninja-build           # toolchain (C++20: g++ 12, CMake 3.25)
  libboost1.81-dev                # Boost.Asio 1.81 (Debian's default libboost-dev is 1.74)
  libtbb-dev                      # oneTBB: the CPU backend's task arena
  libopenblas-dev                 # CBLAS SGEMM, run per tile from oneTBB tasks
  librandom123-dev                # Philox counter-based random numbers
  doctest-dev                     # unit tests
  libdlpack-dev                   # DLPack's header: to_dlpack / from_dlpack (src/io/dlpack.cpp)
  libicu-dev                      # ICU: the tokenizers' Unicode regexes and NFC (src/lm/)
  libbenchmark-dev                # engine micro-benchmarks
  libopenmpi-dev openmpi-bin      # Open MPI: collectives as engine ops (COTENSOR_WITH_MPI)
)

missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  sudo=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}"

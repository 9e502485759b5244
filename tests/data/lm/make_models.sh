#!/usr/bin/env bash
# Remakes tests/data/lm/{gpt2,llama,qwen2}-tiny/ and their -expected.safetensors with Hugging Face
# `transformers` (make_models.py says what they are), in a venv of its own kept in
# ~/.cache/cotensor (COTENSOR_CACHE) that sees the project's environment (torch, safetensors)
# through a .pth file: the project's environment pins no transformers.
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
  "$venv.partial/bin/pip" install --quiet "transformers==$version"
  mv "$venv.partial" "$venv"
fi
"$venv/bin/python3" "$here/make_models.py"

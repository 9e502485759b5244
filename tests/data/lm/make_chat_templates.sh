#!/usr/bin/env bash
# Remakes tests/data/lm/chat_templates/expected.json and the tiny models' tokenizer_config.json
# with Hugging Face `transformers` (make_chat_templates.py says what they are), in the venv
# make_models.sh uses, kept in ~/.cache/cotensor (COTENSOR_CACHE), made here as there if missing.
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
cd "$here"
"$venv/bin/python3" -m make_chat_templates

#!/usr/bin/env bash
# Makes the randomly initialised models of the language-model benchmark (make_models.py says
# what they are) in ${COTENSOR_CACHE:-~/.cache/cotensor}/lm-bench/, outside the repository, and
# the Python environment of the peers that bench/lm/peers.py times.
#
# The environment is tests/data/lm/transformers_venv.sh's, shared with the test fixtures:
# venv-transformers-5.24.0 in the cache, which sees the project's environment (torch, numpy,
# safetensors) through a .pth file. This script adds CTranslate2 to it when it is missing; when
# CTranslate2 does not install, it says so and goes on (peers.py then skips that peer). Models
# already made by the same version of make_models.py are kept: a second run takes seconds.
#
# Usage: bash bench/lm/make_models.sh
#   Messages go to stderr; the last line on stdout is the environment's python3.
# Env: COTENSOR_CACHE, COTENSOR_VENV (the project's environment, default .venv at the root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ct2_version=4.8.5
python=$(bash "$root/tests/data/lm/transformers_venv.sh" | tail -1)
venv=$(dirname "$(dirname "$python")")
# pip runs as a module: the venv's own scripts name the .partial path it was made in.
if ! "$venv/bin/python3" -c "import ctranslate2, sys; sys.exit(ctranslate2.__version__ != '$ct2_version')" 2>/dev/null; then
  "$venv/bin/python3" -m pip install --quiet "ctranslate2==$ct2_version" >&2 ||
    echo "make_models.sh: ctranslate2==$ct2_version did not install; peers.py will skip it" >&2
fi
"$venv/bin/python3" "$here/make_models.py" >&2
echo "$venv/bin/python3"

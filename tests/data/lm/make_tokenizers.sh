#!/usr/bin/env bash
# Remakes tests/data/lm/{gpt2,llama3,qwen2}/tokenizer.json and expected.json with Hugging Face
# `tokenizers` (make_tokenizers.py says what they are), in a venv of its own kept in
# ~/.cache/cotensor (COTENSOR_CACHE): the project's environment pins no `tokenizers`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=0.23.3
venv=${COTENSOR_CACHE:-$HOME/.cache/cotensor}/venv-tokenizers-$version
if [[ ! -x $venv/bin/python3 ]]; then
  python3 -m venv "$venv.partial"
  "$venv.partial/bin/pip" install --quiet "tokenizers==$version"
  mv "$venv.partial" "$venv"
fi
"$venv/bin/python3" "$here/make_tokenizers.py"

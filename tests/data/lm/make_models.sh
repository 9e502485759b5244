#!/usr/bin/env bash
# Remakes tests/data/lm/{gpt2,llama,qwen2}-tiny/ and their -expected.safetensors with Hugging Face
# `transformers` (make_models.py says what they are), in the environment of transformers_venv.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=$(bash "$here/transformers_venv.sh" | tail -1)
"$python" "$here/make_models.py"

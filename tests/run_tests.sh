#!/usr/bin/env bash
# Installs what the tests need into ./.venv, then runs the suite (slow tests excluded;
# add `--runslow` to include them) on two worker processes (pytest-xdist; `-n 0` runs it
# in one) that steal queued tests from each other, and lists the 20 slowest (CI's budget is
# "well under 20 minutes" on two cores). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup_env.sh
# Transparent huge pages for the test processes too, as the launchers restart themselves with
# (bertjax/runtime/host_memory.py); glibc reads the tunable only at start-up, and ignores it before 2.35.
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
exec .venv/bin/python -m pytest -n 2 --dist worksteal --durations=20 "$@"  # pytest.ini: testpaths = tests

#!/usr/bin/env bash
# Installs what the tests need into ./.venv, then runs the suite (slow tests excluded;
# add `--runslow` to include them) in two passes, each on two worker processes (pytest-xdist;
# `-n 0` runs a pass in one) that steal queued tests from each other and each listing its 20
# slowest (CI's budget is "well under 20 minutes" on two cores): the tests marked
# `multidevice` on 8 simulated CPU devices, then the rest on one, where runs are faster
# (tests/conftest.py). Extra arguments go to both passes; a pass that selects no test is no
# failure unless neither selects one; an interrupted pass (Ctrl-C) or a usage error ends both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup_env.sh
# Transparent huge pages for the test processes too, as the launchers restart themselves with
# (bertjax/runtime/host_memory.py); glibc reads the tunable only at start-up, and ignores it before 2.35.
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
ran=0
failed=0
for pass in "8 multidevice" "1 not multidevice"; do
  devices=${pass%% *}
  status=0
  BERTJAX_TEST_DEVICES=$devices .venv/bin/python -m pytest -n 2 --dist worksteal --durations=20 \
    -m "${pass#* }" "$@" || status=$?  # pytest.ini: testpaths = tests
  case $status in  # pytest's exit codes
    0) ran=1 ;;
    1) ran=1 failed=1 ;;  # tests failed: the other pass runs too
    5) ;;  # no test selected in this pass
    *) exit "$status" ;;  # interrupted, an internal error, a usage error
  esac
done
if [ "$failed" != 0 ]; then exit "$failed"; fi
if [ "$ran" = 0 ]; then exit 5; fi

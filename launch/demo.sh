#!/usr/bin/env bash
# The whole job on the embedded demo corpus: installs into ./.venv, prepares the data,
# pre-trains the tiny preset, fine-tunes on the demo task from that checkpoint and from
# scratch, and prints the results (workdir/demo/results.json, PNG curves): minutes on 2
# cores, plus the install the first time (benchmarks/README.md#the-demo). Re-running resumes, or returns quickly once
# done. Extra arguments go to launch/demo.py, e.g.
#   bash launch/demo.sh --pretrain.train.num_steps=300
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup_env.sh
# CPU steps reuse freed memory instead of faulting it in again: faster, at some more peak memory
# (bertjax/runtime/host_memory.py); BERTJAX_KEEP_FREED_MEMORY=0 bash launch/demo.sh turns it off.
export BERTJAX_KEEP_FREED_MEMORY=${BERTJAX_KEEP_FREED_MEMORY:-1}
exec .venv/bin/python launch/demo.py --workdir="${WORKDIR:-workdir/demo}" "$@"

#!/usr/bin/env bash
# The end-to-end demo on the embedded demo corpus: installs into ./.venv, prepares the data,
# pre-trains the tiny preset (CPU minutes), and evaluates it. Re-running resumes (and, once
# finished, returns at once). Extra arguments go to launch/pretrain.py, e.g.
#   bash launch/demo.sh --config.train.num_steps=200
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup_env.sh
WORKDIR=${WORKDIR:-workdir/demo}
.venv/bin/python launch/pretrain.py --config=configs/pretrain.py:tiny --workdir="$WORKDIR/pretrain" "$@"
echo "pre-training metrics: $WORKDIR/pretrain/metrics.jsonl (TensorBoard: $WORKDIR/pretrain/tensorboard)"

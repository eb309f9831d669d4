#!/usr/bin/env bash
# Creates a Cloud TPU VM (single host or pod slice), installs bertjax on every worker, and runs
# the same pre-training command on all of them. Data and workdir must be on gs:// so every
# worker sees them. Re-running `run` after a preemption resumes from the workdir's checkpoint.
#
#   export TPU_NAME=bert-v4-32 ZONE=us-central2-b ACCELERATOR=v4-32 RUNTIME=tpu-ubuntu2204-base
#   bash launch/tpu_vm.sh create
#   bash launch/tpu_vm.sh install
#   bash launch/tpu_vm.sh run --config=configs/pretrain.py:base --workdir=gs://my-bucket/bert-base \
#       --config.data.source=text --config.data.input_pattern='gs://my-bucket/text/*.txt' \
#       --config.data.vocab_path=gs://my-bucket/vocab.txt --config.data.prepared_dir=gs://my-bucket/prepared
#   bash launch/tpu_vm.sh delete
#
# Spot/preemptible slices: add SPOT=1 to `create`. On preemption the trainer gets SIGTERM,
# saves at a step all hosts agree on and exits 3; recreate the slice and run `run` again.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
ACCELERATOR=${ACCELERATOR:-v4-8}
RUNTIME=${RUNTIME:-tpu-ubuntu2204-base}
REMOTE_DIR=${REMOTE_DIR:-bertjax}
tpu() { gcloud compute tpus tpu-vm "$@" --zone="$ZONE"; }
on_all() { tpu ssh "$TPU_NAME" --worker=all --command="$1"; }

case "${1:-}" in
  create)
    tpu create "$TPU_NAME" --accelerator-type="$ACCELERATOR" --version="$RUNTIME" ${SPOT:+--spot}
    ;;
  install)
    tar czf /tmp/bertjax.tgz --exclude=.venv --exclude=.git --exclude='workdir*' .
    tpu scp /tmp/bertjax.tgz "$TPU_NAME":/tmp/bertjax.tgz --worker=all
    on_all "mkdir -p $REMOTE_DIR && tar xzf /tmp/bertjax.tgz -C $REMOTE_DIR && cd $REMOTE_DIR && \
      python3 -m venv .venv && .venv/bin/pip install -q -U pip && .venv/bin/pip install -q -e '.[tpu]'"
    ;;
  run)
    shift
    # --distributed=on: jax.distributed.initialize() finds the other workers from the TPU metadata.
    on_all "cd $REMOTE_DIR && .venv/bin/python launch/pretrain.py --distributed=on $(printf '%q ' "$@")"
    ;;
  delete)
    tpu delete "$TPU_NAME" --quiet
    ;;
  *)
    echo "usage: $0 create|install|run <pretrain flags>|delete" >&2
    exit 2
    ;;
esac

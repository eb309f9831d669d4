#!/usr/bin/env bash
# Cloud TPU VMs (one host or a pod slice): create, install bertjax on every worker, run the
# same pre-training or fine-tuning command on all of them (detached: it survives a dropped
# ssh session), read the logs, stop, delete. Data and workdir must be on gs:// so every
# worker sees them. `run` again after a preemption resumes from the workdir's checkpoint.
#
#   export TPU_NAME=bert-v4-32 ZONE=us-central2-b ACCELERATOR=v4-32
#   bash launch/tpu_vm.sh create
#   bash launch/tpu_vm.sh install
#   bash launch/tpu_vm.sh run --config=configs/pretrain.py:base --workdir=gs://my-bucket/bert-base \
#       --config.data.source=text --config.data.input_pattern='gs://my-bucket/text/*.txt' \
#       --config.data.vocab_path=gs://my-bucket/vocab.txt --config.data.prepared_dir=gs://my-bucket/prepared
#   (BERTJAX_COMPILATION_CACHE=gs://my-bucket/xla-cache before `run`: every worker loads compiled steps;
#   `run` passes on every BERTJAX_* variable set, and XLA_FLAGS, LIBTPU_INIT_ARGS, TFDS_DATA_DIR)
#   bash launch/tpu_vm.sh logs              # last 100 lines of every worker's log; --worker=0 -f to follow one
#   bash launch/tpu_vm.sh stop              # SIGTERM: the run saves a checkpoint and exits
#   bash launch/tpu_vm.sh run finetune --config=configs/finetune.py:sst2 --workdir=gs://my-bucket/sst2 ...
#   bash launch/tpu_vm.sh delete
#
# ACCELERATOR is the TPU API's name: v2/v3/v4/v5p-N count TensorCores (v4-32: 16 chips, 4
# hosts), v5litepod-N and v6e-N chips; v5e-N is taken for v5litepod-N. RUNTIME (the TPU
# software version) follows it unless set: v2/v3/v4 -> tpu-ubuntu2204-base, v5e -> v2-alpha-tpuv5-lite,
# v5p -> v2-alpha-tpuv5, v6e -> v2-alpha-tpuv6e (cloud.google.com/tpu/docs/runtimes). These images are Ubuntu 22.04
# with Python 3.10, and the jax, flax and orbax versions bertjax needs require 3.11: `install`
# gets a 3.11 interpreter with uv (a standalone CPython build; uv itself from PyPI): no sudo
# and no apt, whose lock is often held by unattended upgrades on a fresh VM, and the same on
# every image.
# Spot/preemptible slices: add SPOT=1 to `create`. On preemption the trainer gets SIGTERM,
# saves at a step all hosts agree on and exits 3; `create` again (a preempted slice keeps its
# name until deleted: `create` deletes it first), `install`, `run` again.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat >&2 <<'EOF'
usage: launch/tpu_vm.sh COMMAND   (with TPU_NAME and ZONE set; ACCELERATOR, RUNTIME, SPOT optional)
  create                          create the TPU VM or pod slice (one preempted under TPU_NAME deleted first)
  install                         copy this checkout to every worker (replacing the last), 3.11 venv, pip install
  run [pretrain|finetune] FLAGS   start launch/<pretrain|finetune>.py FLAGS on every worker, detached
  logs [--worker=N] [TAIL_ARGS]   the latest run's log on every worker (or worker N); default: tail -n 100
  stop                            SIGTERM the run on every worker (it saves a checkpoint), wait STOP_TIMEOUT s (600)
  delete                          delete the TPU VM or pod slice
EOF
  exit 2
}

runtime_for() {
  case "$1" in
    v2-*|v3-*|v4-*) echo tpu-ubuntu2204-base ;;
    v5litepod-*) echo v2-alpha-tpuv5-lite ;;
    v5p-*) echo v2-alpha-tpuv5 ;;
    v6e-*) echo v2-alpha-tpuv6e ;;
    *) echo "launch/tpu_vm.sh: no default runtime for ACCELERATOR=$1; set RUNTIME" >&2; exit 2 ;;
  esac
}

command=${1:-}
case "$command" in
  create|install|run|logs|stop|delete) shift ;;
  *) usage ;;
esac
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
ACCELERATOR=${ACCELERATOR:-v4-8}
REMOTE_DIR=${REMOTE_DIR:-bertjax}
PYTHON_VERSION=3.11
tpu() { gcloud compute tpus tpu-vm "$@" --zone="$ZONE"; }
on_workers() { tpu ssh "$TPU_NAME" --worker="$1" --command="$2"; }
INSTALLED=.bertjax-installed-files  # on a worker: the files the last install unpacked, sorted
# On a worker: the pid of a run still going, if any.
running_pid='pid=$(cat logs/run.pid 2>/dev/null || true); kill -0 "$pid" 2>/dev/null || pid='
# On a worker: exit 1, saying so, while a run is going.
no_run_going="$running_pid
      if [ -n \"\$pid\" ]; then echo \"\$(hostname): a run is still going (pid \$pid); stop it first\" >&2; exit 1; fi"
# libtpu's lock, left behind by a run that ended without its exit handlers (kill -9, os._exit):
# the next run would fail with "TPU is already in use by process N".
lockfile=$(printf '%q' "${LIBTPU_LOCKFILE:-/tmp/libtpu_lockfile}")

case "$command" in
  create)
    if [[ "$ACCELERATOR" == v5e-* ]]; then  # the TPU API knows v5e as v5litepod
      echo "ACCELERATOR=$ACCELERATOR: creating v5litepod-${ACCELERATOR#v5e-}, the TPU API's name for it" >&2
      ACCELERATOR=v5litepod-${ACCELERATOR#v5e-}
    fi
    RUNTIME=${RUNTIME:-$(runtime_for "$ACCELERATOR")}
    spot=()
    case "${SPOT:-0}" in  # (SPOT=0 asked for none, and got one)
      1 | true | yes) spot=(--spot) ;;
      0 | false | no) ;;
      *) echo "SPOT=$SPOT: give 1 (a spot slice) or 0" >&2; exit 2 ;;
    esac
    # A preempted spot slice stays under its name, unusable, until deleted.
    state=$(tpu describe "$TPU_NAME" --format='value(state)' 2>/dev/null || true)
    if [ "$state" = PREEMPTED ]; then
      echo "$TPU_NAME was preempted: deleting it before creating it again" >&2
      tpu delete "$TPU_NAME" --quiet
    fi
    tpu create "$TPU_NAME" --accelerator-type="$ACCELERATOR" --version="$RUNTIME" ${spot[@]+"${spot[@]}"}
    ;;
  install)
    # The files listed by find, pruned at the top: tar's --exclude='workdir*' also drops
    # bertjax/runtime/workdir_lock.py, and bsdtar (macOS) matches './workdir*' anywhere too.
    archive=${TMPDIR:-/tmp}/bertjax.tgz
    find . \( -path ./.git -o -path ./.venv -o -path './workdir*' \) -prune -o \( -type f -o -type l \) -print0 |
      tar czf "$archive" --null -T -
    tpu scp "$archive" "$TPU_NAME":/tmp/bertjax.tgz --worker=all
    # Not under a run still going (its imports would change under it). The files the last install
    # unpacked (INSTALLED lists them) and this one does not are removed: a module removed or
    # renamed here would otherwise stay there, importable. Nothing else there is touched.
    # (set -e stops at a failed command, not at one failing before a later && (one a line), nor,
    # without pipefail, in a pipe: an archive that cannot be listed would list nothing to keep)
    on_workers all "set -eo pipefail; export LC_ALL=C; mkdir -p $REMOTE_DIR; cd $REMOTE_DIR; $no_run_going
      tar --quoting-style=literal -tzf /tmp/bertjax.tgz | sed 's|^\\./||' | sort > $INSTALLED.new
      if [ -f $INSTALLED ]; then
        comm -23 $INSTALLED $INSTALLED.new | while IFS= read -r name; do rm -f -- \"\$name\"; done
      fi
      tar xzf /tmp/bertjax.tgz
      mv $INSTALLED.new $INSTALLED
      python3 -m pip install -q --user -U uv
      if [ ! -x .venv/bin/python$PYTHON_VERSION ]; then  # none yet, or one made with the image's 3.10
        rm -rf .venv && python3 -m uv venv -q --python $PYTHON_VERSION .venv
      fi
      python3 -m uv pip install -q --python .venv/bin/python -e '.[tpu]'"
    ;;
  run)
    launcher=pretrain
    if [ "${1:-}" = pretrain ] || [ "${1:-}" = finetune ]; then
      launcher=$1
      shift
    fi
    [ $# -gt 0 ] || usage  # the launcher's flags: --config and --workdir at least
    # --distributed=on: jax.distributed.initialize() finds the other workers from the TPU metadata.
    trainer=".venv/bin/python launch/$launcher.py --distributed=on $(printf '%q ' "$@")"
    # The settings given here reach every worker's trainer (ssh passes on no environment). JAX
    # writes compilation-cache entries from process 0 only: a cache on each worker's own disk
    # serves none of the others, so BERTJAX_COMPILATION_CACHE should be on gs://.
    settings=()
    for name in $(compgen -e | grep -E '^(BERTJAX_.*|XLA_FLAGS|LIBTPU_INIT_ARGS|TFDS_DATA_DIR)$' || true); do
      [ -z "${!name}" ] || settings+=("$name=${!name}")
    done
    if [ ${#settings[@]} -gt 0 ]; then
      echo "passing on to every worker: ${settings[*]%%=*}" >&2
      trainer="env $(printf '%q ' "${settings[@]}")$trainer"
    fi
    # Every worker is checked before any starts: one refusing while the others start leaves
    # them waiting for a coordinator the old run holds.
    on_workers all "cd $REMOTE_DIR 2> /dev/null && [ -x .venv/bin/python ] ||
        { echo \"\$(hostname): no install in $REMOTE_DIR; run install first\" >&2; exit 1; }
      $no_run_going" ||
      { echo "launch/tpu_vm.sh run: nothing started (a worker's check failed: above)" >&2; exit 1; }
    # The run's own shell writes its pid, then becomes the trainer (exec); setsid + nohup +
    # redirected stdin/stdout detach it from the ssh session. Each run gets its own log file.
    on_workers all "set -e; cd $REMOTE_DIR; mkdir -p logs; $no_run_going
      if [ -e $lockfile ] && command -v fuser > /dev/null && ! fuser -s /dev/accel* /dev/vfio/[0-9]* 2> /dev/null &&
          rm -f $lockfile 2> /dev/null; then
        echo \"\$(hostname): removed $lockfile, a killed run's (no process holds the TPU)\"
      fi
      log=logs/$launcher-\$(date -u +%Y%m%dT%H%M%SZ).log
      ln -sfn \"\${log#logs/}\" logs/latest.log
      setsid nohup bash -c 'echo \$\$ > logs/run.pid; exec \"\$@\"' run $trainer> \"\$log\" 2>&1 < /dev/null &
      echo \"\$(hostname): started, log $REMOTE_DIR/\$log\""
    ;;
  logs)
    worker=all
    if [[ "${1:-}" == --worker=* ]]; then
      worker=${1#--worker=}
      shift
    fi
    [ $# -gt 0 ] || set -- -n 100
    on_workers "$worker" "cd $REMOTE_DIR && tail $(printf '%q ' "$@")logs/latest.log"
    ;;
  stop)
    on_workers all "cd $REMOTE_DIR && $running_pid
      if [ -z \"\$pid\" ]; then echo \"\$(hostname): no run going\"; exit 0; fi
      kill -TERM \"\$pid\" && echo \"\$(hostname): SIGTERM sent to \$pid; waiting for its checkpoint\"
      waited=0
      while kill -0 \"\$pid\" 2>/dev/null && [ \$waited -lt ${STOP_TIMEOUT:-600} ]; do sleep 2; waited=\$((waited + 2)); done
      if kill -0 \"\$pid\" 2>/dev/null; then
        echo \"\$(hostname): \$pid still running after ${STOP_TIMEOUT:-600} s (it stops at its next step, after data preparation or compiling); kill -9 \$pid ends it now, without a checkpoint\"
        exit 1
      fi
      echo \"\$(hostname): stopped\""
    ;;
  delete)
    tpu delete "$TPU_NAME" --quiet
    ;;
esac

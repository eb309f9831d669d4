r"""Pre-trains BERT (masked LM + next-sentence prediction).

  python launch/pretrain.py --config=configs/pretrain.py:tiny --workdir=/tmp/bert_tiny
  python launch/pretrain.py --config=configs/pretrain.py:base --workdir=gs://bucket/run \
      --config.data.source=text --config.data.input_pattern='gs://bucket/text/*.txt' \
      --config.data.vocab_path=gs://bucket/vocab.txt --config.mesh.fsdp=8

Multi-host (TPU pod slices, multi-node GPU): run the same command on every host.
`--distributed=auto` (default) initialises `jax.distributed` when the environment says
the job has several processes (TPU pod slice metadata, SLURM, or the explicit flags);
`--coordinator_address/--num_processes/--process_id` set it by hand.
Re-running the same command after a preemption resumes from the workdir's checkpoint.
"""

import logging
import os
import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Pre-training config file (configs/pretrain.py:<preset>).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and prepared data go (local or gs://).")
_DISTRIBUTED = flags.DEFINE_enum("distributed", "auto", ["auto", "on", "off"],
                                 "auto: initialise jax.distributed when the environment shows several processes.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-host by hand).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-host by hand).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-host by hand).")
flags.mark_flags_as_required(["config", "workdir"])


def _multi_process_environment() -> bool:
    """True where jax.distributed can find its peers by itself (TPU pod slices, SLURM, Open MPI)."""
    return bool(os.environ.get("TPU_WORKER_HOSTNAMES", "").count(",") or
                int(os.environ.get("SLURM_NTASKS", "1")) > 1 or int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import jax

    if _COORDINATOR.value or _DISTRIBUTED.value == "on" or (_DISTRIBUTED.value == "auto" and _multi_process_environment()):
        if jax.config.jax_platforms == "cpu" or os.environ.get("JAX_PLATFORMS") == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                                   process_id=_PROCESS_ID.value)
    logging.getLogger().setLevel(logging.INFO)

    from bertjax import train

    try:
        train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    except train.TrainingStopped as stopped:
        logging.error("%s", stopped)
        sys.exit(3)
    except ValueError as error:  # configuration and input errors: one clear line, no traceback
        logging.error("%s", error)
        sys.exit(2)


if __name__ == "__main__":
    app.run(main)

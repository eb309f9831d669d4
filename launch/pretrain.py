r"""Pre-trains BERT (masked LM + next-sentence prediction).

  python launch/pretrain.py --config=configs/pretrain.py:tiny --workdir=/tmp/bert_tiny
  python launch/pretrain.py --config=configs/pretrain.py:base --workdir=gs://bucket/run \
      --config.data.source=text --config.data.input_pattern='gs://bucket/text/*.txt' \
      --config.data.vocab_path=gs://bucket/vocab.txt --config.mesh.fsdp=8

Multi-host (TPU pod slices, multi-node GPU): run the same command on every host.
`--distributed=auto` (default) initialises `jax.distributed` when the environment says
the job has several processes; `--coordinator_address/--num_processes/--process_id` set
it by hand. Re-running the same command after a preemption resumes from the workdir's
checkpoint. Exit codes: 0 done, 2 bad configuration or input, or a run that diverged at its
last step (one line), 3 stopped (a signal: run again to resume; or non-finite losses
before the end: resume at a lower rate).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import host_memory  # noqa: E402
host_memory.configure()  # huge pages (a restart), kept freed memory: before any thread allocates
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)

_CONFIG, _WORKDIR = cli.define_run_flags("Pre-training config file (configs/pretrain.py:<preset>).", "pre-training")


def main(_):
    cli.start_distributed()
    cli.stop_on_sigterm()  # (after: a multi-process run's is jax.distributed's)
    from bertjax import pretrain

    pretrain.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    cli.run(main)

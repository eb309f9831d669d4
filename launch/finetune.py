r"""Fine-tunes BERT on a downstream task, from a checkpoint in any layout or from scratch.

  python launch/finetune.py --config=configs/finetune.py:mrpc --workdir=/tmp/mrpc \
      --config.init_checkpoint=/ckpt/uncased_L-12_H-768_A-12
  python launch/finetune.py --config=configs/finetune.py:demo --workdir=/tmp/demo_ft \
      --config.init_checkpoint=workdir/demo/pretrain
  python launch/finetune.py --config=configs/finetune.py:rte,sweep --workdir=/tmp/rte_grid \
      --config.init_checkpoint=/ckpt/bert-base-uncased

Tasks and options: see configs/finetune.py. Multi-host: the same command on every host
(`--distributed`, as launch/pretrain.py). Re-running the same command resumes (after a
preemption) or, once finished, only rewrites the predictions. Exit codes: 0 done, 2 bad
configuration or input (one line), 3 stopped on purpose (preemption: run again to resume).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import host_memory  # noqa: E402
host_memory.configure()  # huge pages (a restart), kept freed memory: before any thread allocates
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)

_CONFIG, _WORKDIR = cli.define_run_flags("Fine-tuning config (configs/finetune.py:<task>).", "fine-tuning")


def main(_):
    grid = [arg.split("=")[0] for arg in sys.argv[1:] if arg.startswith("--config.train.sweep_")]
    if grid and not _CONFIG.value.train.sweep:  # else one run at config.train's values, without a word
        raise ValueError(f"{grid[0]} sets the sweep's grid, which only a sweep runs: add ',sweep' to --config "
                         "(configs/finetune.py:<task>,sweep)")
    cli.start_distributed()
    cli.stop_on_sigterm()  # (after: a multi-process run's is jax.distributed's)
    from bertjax import finetune, sweep

    if _CONFIG.value.train.sweep:
        results = sweep.sweep(_CONFIG.value, _WORKDIR.value)
        if all("error" in row for row in results):  # every run diverged or ran out of memory
            raise ValueError(f"every run of the sweep failed (see {_WORKDIR.value}/sweep_results.json)")
    else:
        finetune.finetune(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    cli.run(main)

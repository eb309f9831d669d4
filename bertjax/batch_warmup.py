"""Batch-size warmup: small global batches first, growing linearly to the full one.

Early in pre-training a small batch's gradient is about as useful as a large one's, so the same
tokens buy more updates; later the large batch's lower noise pays (ModernBERT ramps 768 -> 4,608
rows over its first 50B tokens). The batch grows in whole units of `start` rows:

    units(step) = min(K, 1 + floor((K - 1) x step / warmup_steps)),  K = global_batch_size / start

(step 0-based) so the run trains at start, 2 x start, ... rows over its first `warmup_steps`
steps and at global_batch_size after them. Each size is a shape of its own: the train step
compiles once per size it reaches (at most K programs, not one per step), and the input
reads batches of `start` rows and joins `units(step)` of them. Where the data stands is a pure
function of the step (`units_before`), so a resumed run reads on exactly where the interrupted
one stopped; a run resumed with other batch settings goes on after the rows its checkpoint
read (`pretrain.resume_unit`).
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np


class BatchWarmup:
    """The global batch of every step; `start` 0 (or the full batch) turns the warmup off."""

    def __init__(self, global_batch_size: int, start: int, warmup_steps: int):
        self.unit = start or global_batch_size
        self.max_units = global_batch_size // self.unit
        self.warmup_steps = warmup_steps if self.max_units > 1 else 0

    @property
    def active(self) -> bool:
        return self.max_units > 1

    def units(self, step: int) -> int:
        """Batches of `unit` rows that step `step` (0-based) trains on."""
        if not self.active or step >= self.warmup_steps:
            return self.max_units
        return 1 + (self.max_units - 1) * step // self.warmup_steps

    def rows(self, step: int) -> int:
        """The global batch size at step `step`."""
        return self.units(step) * self.unit

    def sizes(self) -> list[int]:
        """Every global batch size the run trains at, smallest first."""
        return [units * self.unit for units in range(1, self.max_units + 1)] if self.active else [self.unit]

    def units_before(self, step: int) -> int:
        """Unit batches the steps before `step` consumed (where step `step`'s input starts)."""
        ramp = min(step, self.warmup_steps)
        # By size, not step by step (the ETA asks often): a step trains on >= u units from
        # step ceil((u - 1) W / (K - 1)) on.
        consumed = 0
        for units in range(1, self.max_units + 1) if ramp else ():
            first, after = (-(-u * self.warmup_steps // (self.max_units - 1)) for u in (units - 1, units))
            consumed += units * max(0, min(after, ramp) - min(first, ramp))
        return consumed + (step - ramp) * self.max_units

    def batches(self, unit_batches: Iterator[dict[str, np.ndarray]], start_step: int
                ) -> Iterator[dict[str, np.ndarray]]:
        """This host's rows of each step's global batch from `start_step` on: `units(step)`
        consecutive unit batches joined (`unit_batches` must start at `units_before(start_step)`)."""
        step = start_step
        while True:
            parts = [next(unit_batches) for _ in range(self.units(step))]
            yield parts[0] if len(parts) == 1 else {name: np.concatenate([part[name] for part in parts])
                                                    for name in parts[0]}
            step += 1


def validate(train_config, data_parallel: int, process_count: int) -> None:
    """Checks config.train.batch_warmup_start/_steps against the batch, the mesh and the run;
    ValueError naming the key."""
    start, steps, batch = train_config.batch_warmup_start, train_config.batch_warmup_steps, train_config.global_batch_size
    for key, value in (("batch_warmup_start", start), ("batch_warmup_steps", steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"config.train.{key} must be an int >= 0, got {value!r}")
    if steps and not start:  # (accepted, it did nothing)
        raise ValueError(f"config.train.batch_warmup_steps={steps} needs config.train.batch_warmup_start (the first "
                         f"steps' batch, in rows)")
    if not start or start == batch:
        return
    if batch % start:
        raise ValueError(f"config.train.batch_warmup_start={start} must divide config.train.global_batch_size="
                         f"{batch} (the batch grows in whole steps of batch_warmup_start rows)")
    # Each batch of the warmup is split into micro-batches over every data-parallel device (all
    # processes' together), and its rows are read a share per process.
    granule = math.lcm(data_parallel * train_config.grad_accum_steps, process_count)
    if start % granule:
        raise ValueError(f"config.train.batch_warmup_start={start} must be divisible by the data-parallel size "
                         f"times config.train.grad_accum_steps and by the processes ({granule}): every batch size "
                         f"of the warmup is split that way")
    # The full batch comes after the warmup's steps: a warmup as long as the run never reaches it.
    if not 1 <= steps < train_config.num_steps:
        raise ValueError(f"config.train.batch_warmup_steps must be in [1, config.train.num_steps="
                         f"{train_config.num_steps}) when batch_warmup_start is set (the steps after the warmup's "
                         f"take global_batch_size), got {steps}")

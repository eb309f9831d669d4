"""bertjax.training_loop: what a logged row says of the steps since the last one."""

import json
import types

import numpy as np
import pytest

from bertjax import checkpointing, training_loop


def test_a_logged_row_weighs_steps_by_their_rows_and_gives_the_last_learning_rate(tmp_path):
    """A window's steps were averaged alike (a growing batch's small steps counted as much as the
    large), and so was the learning rate: 'lr 4.00e-04' at the end of a warmup to 1e-3 (a review)."""
    checkpointer = checkpointing.Checkpointer(str(tmp_path / "checkpoints"), save_interval_steps=100,
                                              max_to_keep=1, async_save=False)
    loop = training_loop.Loop(workdir=str(tmp_path), checkpointer=checkpointer, saved_config={}, num_steps=10,
                              start_step=0, log_every=2, eval_every=0, max_consecutive_bad_steps=3,
                              sequences_per_step=4.0)
    state = types.SimpleNamespace(worst_bad_run=np.int32(0), skipped_steps=np.int32(0))
    try:
        for step, accuracy, rate, rows in ((1, 0.2, 2e-4, 1), (2, 0.6, 4e-4, 3)):
            metrics = {"mlm_accuracy": accuracy, "learning_rate": rate, "grad_norm": 1.0}
            loop.record(step, {name: np.float32(value) for name, value in metrics.items()}, state, sequences=rows)
    finally:
        loop.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["step"] == 2 and row["mlm_accuracy"] == pytest.approx(0.5) and row["learning_rate"] == pytest.approx(4e-4)
    assert row["sequences_per_second"] * row["step_time"] == pytest.approx(2.0)  # 4 rows over 2 steps

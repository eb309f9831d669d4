"""bertjax.training_loop: what a logged row says of the steps since the last one."""

import json
import types

import numpy as np
import pytest

from bertjax import checkpointing, training_loop


def _loop(tmp_path, num_steps: int, sequences_per_step: float):
    """A Loop logging every 2 steps on tmp_path, and a train state with no bad steps."""
    checkpointer = checkpointing.Checkpointer(str(tmp_path / "checkpoints"), save_interval_steps=100,
                                              max_to_keep=1, async_save=False)
    loop = training_loop.Loop(workdir=str(tmp_path), checkpointer=checkpointer, saved_config={}, num_steps=num_steps,
                              start_step=0, log_every=2, eval_every=0, max_consecutive_bad_steps=3,
                              sequences_per_step=sequences_per_step)
    return loop, types.SimpleNamespace(worst_bad_run=np.int32(0), skipped_steps=np.int32(0))


def test_a_logged_row_weighs_steps_by_their_rows_and_gives_the_last_learning_rate(tmp_path):
    """A window's steps were averaged alike (a growing batch's small steps counted as much as the
    large), and so was the learning rate: 'lr 4.00e-04' at the end of a warmup to 1e-3 (a review)."""
    loop, state = _loop(tmp_path, num_steps=10, sequences_per_step=4.0)
    try:
        for step, accuracy, rate, rows in ((1, 0.2, 2e-4, 1), (2, 0.6, 4e-4, 3)):
            metrics = {"mlm_accuracy": accuracy, "learning_rate": rate, "grad_norm": 1.0}
            loop.record(step, {name: np.float32(value) for name, value in metrics.items()}, state, sequences=rows)
    finally:
        loop.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["step"] == 2 and row["mlm_accuracy"] == pytest.approx(0.5)
    assert row["learning_rate"] == pytest.approx(4e-4)
    assert row["sequences_per_second"] * row["step_time"] == pytest.approx(2.0)  # 4 rows over 2 steps


def test_a_skipped_step_leaves_the_logged_means_to_the_steps_that_updated(tmp_path, capsys):
    """One step skipped for a non-finite loss made its whole row NaN (loss, grad_norm and the
    accuracies of every step in the window; a review). Its share is `skipped`; a window of
    skipped steps only still shows NaN."""
    loop, state = _loop(tmp_path, num_steps=4, sequences_per_step=4.0)
    steps = ((1, 2.0, 0.5, 0.0), (2, np.nan, 0.0, 1.0), (3, np.nan, 0.0, 1.0), (4, np.inf, 0.1, 1.0))
    try:
        for step, loss, accuracy, skipped in steps:
            metrics = {"loss": loss, "mlm_accuracy": accuracy, "learning_rate": 1e-4, "grad_norm": loss,
                       "skipped": skipped}
            loop.record(step, {name: np.float32(value) for name, value in metrics.items()}, state)
    finally:
        loop.close()
    first, second = (json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines())
    assert (first["loss"], first["grad_norm"], first["mlm_accuracy"], first["skipped"]) == (2.0, 2.0, 0.5, 0.5)
    assert np.isnan(second["loss"]) and second["skipped"] == 1.0
    assert "(1 of 2 steps skipped: non-finite)" in capsys.readouterr().out


def test_the_first_logged_row_is_timed_from_the_first_batch(tmp_path, monkeypatch):
    """The first row's step time took in the input pipeline's start-up (0.49 s against 0.007-0.03
    s for the next rows of a tiny run; a review)."""
    now = [100.0]
    monkeypatch.setattr(training_loop.time, "perf_counter", lambda: now[0])
    loop, state = _loop(tmp_path, num_steps=2, sequences_per_step=1.0)

    def batches():
        now[0] += 30.0  # tf.data's start-up
        yield 0
        yield 1
    metrics = {name: np.float32(1.0) for name in ("loss", "learning_rate", "grad_norm")}
    try:
        stream = loop.input(batches())
        for step in range(2):
            loop.next_batch(stream, step, state)
            now[0] += 0.5
            loop.record(step + 1, metrics, state)
    finally:
        loop.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["step_time"] == pytest.approx(0.5)


def test_an_evaluation_waits_for_the_queued_steps_before_its_own_clock_starts(tmp_path):
    """JAX runs steps asynchronously: an evaluation's pause began while the last steps still ran,
    took their time out of the steps' and the row after it showed several times the rate, an MFU
    past 100% (a walkthrough). The pause now starts once the recorded steps are done; a step that
    saves nothing does not wait."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def slow_step(x):  # 40 products of 1024 x 1024: still running when the pause begins
        return {"loss": jax.lax.fori_loop(0, 40, lambda _, y: jnp.tanh(y @ y) / 8, x).sum()}

    loop, state = _loop(tmp_path, num_steps=10, sequences_per_step=1.0)
    x = jnp.ones((1024, 1024), jnp.float32)
    slow_step(x)["loss"].block_until_ready()  # compiled
    try:
        loop.pending.append(slow_step(x))
        with loop.paused():
            assert loop.pending[-1]["loss"].is_ready()
        # A step that saves nothing leaves the device working while the host queues the next.
        loop.pending.append(slow_step(x))
        loop.save(1, state)
        assert not loop.pending[-1]["loss"].is_ready()
    finally:
        loop.close()

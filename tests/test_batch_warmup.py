"""Batch-size warmup (issue 49): the global batch grows linearly in whole units of
batch_warmup_start rows, every step's input starts where the steps before it stopped, and a
run interrupted during the warmup resumes to the uninterrupted run's losses bit for bit."""

import shutil

import ml_collections
import numpy as np
import pytest

from bertjax.batch_warmup import BatchWarmup, validate
from test_train import _losses, _metrics, _run_here


def test_the_batch_grows_linearly_in_units_and_reaches_the_full_batch_at_the_end_of_the_warmup():
    warmup = BatchWarmup(global_batch_size=32, start=8, warmup_steps=8)
    assert [warmup.rows(step) for step in range(11)] == [8, 8, 8, 16, 16, 16, 24, 24, 32, 32, 32]
    assert warmup.sizes() == [8, 16, 24, 32]
    for step in range(40):
        assert warmup.units_before(step) == sum(warmup.units(s) for s in range(step))
    long = BatchWarmup(global_batch_size=4608, start=768, warmup_steps=10_000)  # ModernBERT's ramp, in steps
    assert [long.rows(step) for step in (0, 1999, 2000, 9999, 10_000)] == [768, 768, 1536, 3840, 4608]
    for off in (BatchWarmup(32, 0, 100), BatchWarmup(32, 32, 100)):
        assert not off.active and off.rows(0) == 32 and off.units_before(7) == 7 and off.sizes() == [32]


def test_each_step_joins_its_units_in_stream_order():
    warmup = BatchWarmup(global_batch_size=6, start=2, warmup_steps=4)
    units = ({"input_ids": np.full((2, 3), i)} for i in range(100))
    steps = [next(b)["input_ids"][:, 0].tolist() for b in [warmup.batches(units, 0)] for _ in range(5)]
    assert steps == [[0, 0], [1, 1], [2, 2, 3, 3], [4, 4, 5, 5], [6, 6, 7, 7, 8, 8]]
    resumed = warmup.batches(({"input_ids": np.full((2, 3), i)} for i in range(warmup.units_before(3), 100)), 3)
    assert next(resumed)["input_ids"][:, 0].tolist() == [4, 4, 5, 5]


@pytest.mark.parametrize("change, message", [
    (dict(batch_warmup_start=5), "batch_warmup_start=5 must divide config.train.global_batch_size=32"),
    (dict(batch_warmup_start=4, grad_accum_steps=8), r"divisible by the data-parallel size .* \(16\)"),
    (dict(batch_warmup_start=8, batch_warmup_steps=0), r"batch_warmup_steps must be in \[1, "),
    # A warmup as long as the run never trained at global_batch_size (a review): 8, 16, 24 rows only.
    (dict(batch_warmup_start=8, batch_warmup_steps=100), r"must be in \[1, config.train.num_steps=100\)"),
    (dict(batch_warmup_start=-8), "batch_warmup_start must be an int >= 0"),
    # Steps without a starting batch were accepted and did nothing (a review).
    (dict(batch_warmup_start=0), r"batch_warmup_steps=10 needs config.train.batch_warmup_start"),
])
def test_bad_warmup_settings_name_the_key(change, message):
    train = ml_collections.ConfigDict(dict(global_batch_size=32, grad_accum_steps=1, num_steps=100,
                                           batch_warmup_start=0, batch_warmup_steps=10))
    train.update(change)
    with pytest.raises(ValueError, match=message):
        validate(train, data_parallel=2, process_count=1)


def test_warmup_sizes_that_split_over_every_device_and_process_are_accepted():
    """Two processes of four devices each: 8 rows split over the 8 devices and read 4 a process
    (the data-parallel size already counts every process's devices: 16 was asked; a review)."""
    train = ml_collections.ConfigDict(dict(global_batch_size=32, grad_accum_steps=1, num_steps=100,
                                           batch_warmup_start=8, batch_warmup_steps=10))
    validate(train, data_parallel=8, process_count=2)
    train.batch_warmup_start = 4
    with pytest.raises(ValueError, match=r"batch_warmup_start=4 must be divisible by the data-parallel size times "
                                         r"config.train.grad_accum_steps and by the processes \(8\)"):
        validate(train, data_parallel=8, process_count=2)
    train.update(batch_warmup_start=2, global_batch_size=8)  # one device a process: rows split one a process
    validate(train, data_parallel=2, process_count=2)


def test_a_run_interrupted_in_the_warmup_resumes_to_the_uninterrupted_losses(tmp_path, prepared_dir, capsys):
    settings = ["--config.train.num_steps=12", "--config.train.batch_warmup_start=4",
                "--config.train.batch_warmup_steps=8", "--config.checkpoint.every=6"]
    _run_here(tmp_path / "run", prepared_dir, *settings)
    stdout = capsys.readouterr().out
    assert "the batch grows 4 -> 16 rows over the first 8 steps" in stdout
    # The largest batch compiles at the start (a batch too large for memory fails there, not late).
    assert "compiled the train step at 4 and 16 rows in" in stdout
    assert [line.split(" in ")[0] for line in stdout.splitlines() if "the batch grows to" in line] == [
        "step 4: the batch grows to 8 rows; compiled its step", "step 7: the batch grows to 12 rows; compiled its step",
        "step 9: the batch grows to 16 rows; compiled at the start"]
    # The sizes between compile in a background thread from the start, not where they are needed
    # (a compile there held off a stop signal: minutes on a TPU).
    assert "compiling the step for the 2 batch size(s) between (8, 12 rows) in the background" in stdout
    reference = _losses(_metrics(tmp_path / "run"))
    assert sorted(reference) == list(range(1, 13))
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "12")  # as if stopped after the checkpoint at step 6
    _run_here(tmp_path / "run", prepared_dir, *settings)
    assert "starting at step 6 of 12" in capsys.readouterr().out
    assert _losses(_metrics(tmp_path / "run")) == reference  # every step, bitwise

"""Tests for bertjax.checkpointing: round trips, retention, re-sharding, read errors
(retried, then moved aside, never deleted), kill -9, two processes."""

import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from bertjax import checkpointing, optim, sharding
from bertjax.models import BertConfig, BertEncoder
from small_runs import xla_flags

pytestmark = pytest.mark.multidevice  # states sharded over the 8 simulated devices, restored onto fewer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {"model": {"preset": "tiny"}, "train": {"learning_rate": 1e-3}}


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: dict
    opt_state: optax.OptState


def abstract_state(mesh):
    """The abstract TrainState of a tiny BertEncoder, with shardings on `mesh`.

    opt_state chains AdamW and LAMB, so it holds all their optax states (EmptyState,
    ScaleByAdamState, MaskedState, ScaleByScheduleState, ...); moments are sharded like
    the params, everything else replicated.
    """
    model = BertEncoder(BertConfig.preset("tiny", vocab_size=64, max_position_embeddings=16))
    ids = jnp.zeros((1, 8), jnp.int32)
    train = dict(optim.DEFAULTS, learning_rate=1e-3, warmup_steps=1, num_steps=10)
    tx = optax.chain(optim.make_optimizer(ml_collections.ConfigDict(train)),
                     optim.make_optimizer(ml_collections.ConfigDict(dict(train, optimizer="lamb"))))

    def init(key):
        params = nn.unbox(model.init(key, ids))["params"]
        return TrainState(step=jnp.int32(0), params=params, opt_state=tx.init(params))

    abstract = jax.eval_shape(init, jax.random.key(0))
    boxed = jax.eval_shape(model.init, jax.random.key(0), ids)["params"]
    params = nn.unbox(sharding.logical_shardings(boxed, mesh))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    opt_state = optax.tree_map_params(tx, lambda _, s: s, abstract.opt_state, params,
                                      transform_non_params=lambda _: replicated)
    shardings = TrainState(step=replicated, params=params, opt_state=opt_state)
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)


def random_state(abstract, seed=0):
    """Distinct random values for every leaf, placed as `abstract` says (no compile)."""
    rng = np.random.default_rng(seed)
    values = [rng.integers(0, 1000, a.shape).astype(a.dtype) if jnp.issubdtype(a.dtype, jnp.integer)
              else rng.normal(size=a.shape).astype(a.dtype) for a in jax.tree.leaves(abstract)]
    arrays = [jax.device_put(v, a.sharding) for v, a in zip(values, jax.tree.leaves(abstract))]
    return jax.tree.unflatten(jax.tree.structure(abstract), arrays)


def assert_trees_equal(actual, expected):
    assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
    for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.fixture(autouse=True)
def no_retry_waits(monkeypatch):
    monkeypatch.setattr(checkpointing, "READ_RETRY_SECONDS", (0.0, 0.0))


@pytest.fixture(scope="module")
def mesh8():
    return sharding.create_mesh(data=1, fsdp=4, tensor=2)


@pytest.fixture(scope="module")
def state8(mesh8):
    abstract = abstract_state(mesh8)
    return random_state(abstract), abstract


@pytest.fixture(scope="module")
def small8(mesh8):
    """A few arrays, for tests about steps and files rather than about the tree."""
    spec = jax.sharding.PartitionSpec
    abstract = {"step": jax.ShapeDtypeStruct((), jnp.int32, sharding=jax.sharding.NamedSharding(mesh8, spec())),
                "params": {"kernel": jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=jax.sharding.NamedSharding(
                    mesh8, spec("fsdp", "tensor")))}}
    return random_state(abstract), abstract


def test_save_restore_round_trip_keeps_types_and_shardings(tmp_path, state8):
    state, abstract = state8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=10, max_to_keep=3)
    assert ckpt.latest_step() is None
    assert ckpt.save(10, state, data_position=1234, config=CONFIG)
    assert not ckpt.save(15, state, data_position=0, config=CONFIG)  # not on the interval
    # An async save has copied the arrays off the devices when save() returns, so the
    # trainer may donate them to the next step right away.
    donated = jax.tree.map(lambda x: x + 1, state)  # other values than step 10's: each restore reads its own step
    expected = jax.tree.map(np.array, donated)
    best = {"best_step": 20, "best_metrics": {"accuracy": 0.5}}
    ckpt.save(20, donated, data_position=0, config=CONFIG, extra_meta=best)
    for leaf in jax.tree.leaves(donated):
        leaf.delete()
    ckpt.wait_until_finished()
    restored, meta = ckpt.restore(abstract)
    assert_trees_equal(restored, expected)
    assert meta["extra"] == best
    restored, meta = ckpt.restore(abstract, step=10)
    assert meta == {"format": "bertjax", "step": 10, "data_position": 1234, "config": CONFIG, "extra": {}}
    assert checkpointing.read_meta(str(tmp_path)) == dict(meta, step=20, data_position=0, extra=best)
    assert checkpointing.read_meta(str(tmp_path / "10")) == meta
    assert isinstance(restored, TrainState)
    adamw_state, lamb_state = restored.opt_state
    assert isinstance(adamw_state[1], optax.ScaleByAdamState)
    assert isinstance(adamw_state[2], optax.MaskedState)
    assert isinstance(lamb_state[1][0], optax.ScaleByAdamState) and isinstance(lamb_state[1][2], optax.MaskedState)
    assert_trees_equal(restored, state)
    for leaf, want in zip(jax.tree.leaves(restored), jax.tree.leaves(abstract)):
        assert leaf.sharding == want.sharding
    ckpt.close()


def test_one_process_writes_replicated_arrays_whole_without_compiling(tmp_path):
    """orbax's default splits an array replicated on 8 devices into 8 slices, each cut by a small
    program compiled per shape and device; a single process writes it whole from one replica, so
    a save compiles nothing (and restores the same values onto the same layout)."""
    from jax import monitoring
    from jax._src import dispatch

    mesh = sharding.create_mesh(data=-1)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    abstract = {"kernel": jax.ShapeDtypeStruct((16, 6), jnp.float32, sharding=replicated),
                "bias": jax.ShapeDtypeStruct((10,), jnp.float32, sharding=replicated)}
    state = random_state(abstract, seed=3)
    compiles = []

    def listener(event, duration, **kwargs):
        if event == dispatch.BACKEND_COMPILE_EVENT:
            compiles.append(duration)

    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=1)
    monitoring.register_event_duration_secs_listener(listener)
    try:
        ckpt.save(1, state, data_position=1, config=CONFIG)
        ckpt.wait_until_finished()
    finally:
        monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    restored, _ = ckpt.restore(abstract)
    assert_trees_equal(restored, state)
    assert all(leaf.sharding == replicated for leaf in jax.tree.leaves(restored))
    ckpt.close()


def test_interval_keep_last_n_and_force(tmp_path, small8):
    state, _ = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=10, max_to_keep=2, async_save=False)
    for step in (10, 20, 30):
        assert ckpt.save(step, state, data_position=step, config=CONFIG)
    assert ckpt.all_steps() == [20, 30]
    assert ckpt.save(33, state, data_position=33, config=CONFIG, force=True)  # preemption save
    assert not ckpt.save(33, state, data_position=33, config=CONFIG, force=True)  # already saved
    assert ckpt.all_steps() == [30, 33] and ckpt.latest_step() == 33
    # A best checkpoint evaluated again after a resume: the step's other weights and score go.
    other = jax.tree.map(lambda leaf: leaf + 1, state)
    assert ckpt.save(33, other, data_position=33, config=CONFIG, force=True, replace=True, extra_meta={"score": 2})
    restored, meta = ckpt.restore(jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                                                 sharding=leaf.sharding), state))
    assert_trees_equal(restored, other)
    assert meta["extra"] == {"score": 2} and ckpt.all_steps() == [30, 33]
    assert sorted(os.listdir(tmp_path)) == ["30", "33"]
    # A replacing save that fails (a full disk, a kill) leaves the step it replaces aside, whole:
    # it was deleted first, and best/ (one step kept) lost its weights (a review).
    failing = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=10, max_to_keep=2, async_save=False)
    failing._manager.save = lambda *args, **kwargs: (_ for _ in ()).throw(OSError("No space left on device"))
    with pytest.raises(checkpointing.CheckpointSaveError, match="saving checkpoint step 33 .* failed"):
        failing.save(33, state, data_position=33, config=CONFIG, force=True, replace=True)
    # The same failure met again (the run's close waits for saves too) said "step None" (a walkthrough).
    failing._manager.wait_until_finished = lambda: (_ for _ in ()).throw(TimeoutError("write barrier"))
    with pytest.raises(checkpointing.CheckpointSaveError, match=f"^saving a checkpoint to {tmp_path} failed"):
        failing.wait_until_finished()
    aside = [name for name in os.listdir(tmp_path) if name.startswith("33.replaced-")]
    assert len(aside) == 1 and checkpointing.read_meta(str(tmp_path / aside[0]))["extra"] == {"score": 2}
    # The next run's Checkpointer puts it back: best/ keeps the weights it had.
    again = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=10, max_to_keep=2, async_save=False)
    assert again.all_steps() == [30, 33] and sorted(os.listdir(tmp_path)) == ["30", "33"]
    assert checkpointing.read_meta(str(tmp_path / "33"))["extra"] == {"score": 2}
    again.close()
    # On gs:// orbax writes a step in place: a killed replacing save leaves an unfinished 33/
    # beside the copy, which was deleted as if 33 were saved (a review: best/ lost).
    checkpointing.move_aside(str(tmp_path / "33"), "replaced")
    (tmp_path / "33" / "meta").mkdir(parents=True)  # (no state/: unfinished)
    again = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=10, max_to_keep=2, async_save=False)
    assert again.all_steps() == [30, 33] and sorted(os.listdir(tmp_path)) == ["30", "33"]
    assert checkpointing.read_meta(str(tmp_path / "33"))["extra"] == {"score": 2}
    again.close()
    with pytest.raises(ValueError, match="config and extra_meta must be JSON-serializable"):
        ckpt.save(40, state, data_position=40, config={"bad": object()})
    with pytest.raises(ValueError, match="config and extra_meta must be JSON-serializable"):
        ckpt.save(40, state, data_position=40, config=CONFIG, extra_meta={"bad": object()})
    with pytest.raises(ValueError, match="extra_meta must be a dict, got list"):
        ckpt.save(40, state, data_position=40, config=CONFIG, extra_meta=[1])
    ckpt.close()


def test_a_save_after_one_that_failed_still_saves_its_step(tmp_path, small8, caplog):
    """A background save that failed (a passing gs:// 503) made the next save raise before it
    started: a preemption's save was never tried, and every step since the last good one was
    lost (a review). The failure is a warning; the step is saved and waited for."""
    import threading

    state, _ = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=10, max_to_keep=3, async_save=True)
    inner = ckpt._manager._checkpointer  # (orbax's: its finalize thread commits a step in the background)
    wait, failures = inner.wait_until_finished, []

    def committing():  # fails once where a failure is queued, as a passing gs:// error would
        wait()
        if failures and threading.current_thread().name == "save_finalize":
            raise failures.pop()

    inner.wait_until_finished = committing
    failures.append(OSError("503 Service Unavailable"))
    assert ckpt.save(10, state, data_position=10, config=CONFIG)
    with caplog.at_level("WARNING"):
        assert ckpt.save(25, state, data_position=25, config=CONFIG, force=True)  # a SIGTERM's save
    assert f"saving checkpoint step 10 to {tmp_path} failed (OSError: 503 Service Unavailable)" in caplog.text
    assert "; saving step 25 now" in caplog.text
    assert ckpt.all_steps() == [25] and checkpointing.read_meta(str(tmp_path))["step"] == 25
    # The stop at a checkpoint step whose own save fails in the background: that step, saved
    # again (it was listed while in flight, and taken as saved; a review).
    failures.append(OSError("503 Service Unavailable"))
    assert ckpt.save(30, state, data_position=30, config=CONFIG)
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert ckpt.save(30, state, data_position=30, config=CONFIG, force=True)
    assert "saving checkpoint step 30" in caplog.text and "; saving step 30 now" in caplog.text
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [25, 30] and checkpointing.read_meta(str(tmp_path))["step"] == 30
    ckpt.close()


def test_restore_onto_a_smaller_mesh_and_load_params(tmp_path, state8):
    state, _ = state8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=1)
    ckpt.save(1, state, data_position=5, config=CONFIG)
    ckpt.close()

    mesh2 = sharding.create_mesh(data=1, fsdp=2, tensor=1, devices=jax.devices()[:2])
    abstract2 = abstract_state(mesh2)
    restored, meta = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=1).restore(abstract2)
    assert meta["data_position"] == 5
    assert_trees_equal(restored, state)
    kernel = restored.params["encoder"]["layer_0"]["intermediate"]["kernel"]
    assert kernel.sharding.mesh.devices.size == 2 and kernel.sharding == abstract2.params["encoder"][
        "layer_0"]["intermediate"]["kernel"].sharding

    meta, params = checkpointing.load_params(str(tmp_path), abstract_params=abstract2.params)
    assert meta["step"] == 1 and meta["config"] == CONFIG
    assert_trees_equal(params, state.params)
    assert params["pooler"]["kernel"].sharding == abstract2.params["pooler"]["kernel"].sharding
    _, numpy_params = checkpointing.load_params(str(tmp_path / "1"))
    assert isinstance(numpy_params["pooler"]["kernel"], np.ndarray)
    assert_trees_equal(numpy_params, jax.tree.map(np.asarray, state.params))


def test_is_bertjax_checkpoint(tmp_path, small8):
    assert not checkpointing.is_bertjax_checkpoint(str(tmp_path))
    assert not checkpointing.is_bertjax_checkpoint(str(tmp_path / "missing"))
    ckpt = checkpointing.Checkpointer(str(tmp_path / "ckpt"), save_interval_steps=1, max_to_keep=1)
    ckpt.save(3, small8[0], data_position=0, config=CONFIG)
    ckpt.close()
    assert checkpointing.is_bertjax_checkpoint(str(tmp_path / "ckpt"))
    assert checkpointing.is_bertjax_checkpoint(str(tmp_path / "ckpt" / "3"))
    with pytest.raises(FileNotFoundError, match="neither a bertjax checkpoint"):
        checkpointing.load_params(str(tmp_path))


def test_mismatched_tree_raises_without_fallback(tmp_path, small8):
    state, abstract = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=2, async_save=False)
    ckpt.save(1, state, data_position=0, config=CONFIG)
    ckpt.save(2, state, data_position=0, config=CONFIG)
    wrong = dict(abstract, step=jax.ShapeDtypeStruct((2,), jnp.int32, sharding=abstract["step"].sharding))
    with pytest.raises(checkpointing.CheckpointMismatchError, match=r"shape mismatch.*'step'"):
        ckpt.restore(wrong)
    with pytest.raises(ValueError, match="must be a jax.ShapeDtypeStruct with a sharding"):
        ckpt.restore(jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), abstract))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        checkpointing.Checkpointer(str(tmp_path / "empty"), save_interval_steps=1, max_to_keep=1).restore(abstract)


def _files(directory):
    """{relative path: bytes} of every file under `directory`."""
    return {os.path.relpath(os.path.join(root, name), directory): open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(directory) for name in names}


def _aside(directory, step):
    return [name for name in os.listdir(directory) if name.startswith(f"{step}.unreadable-")]


def _failing_restore(monkeypatch, fails):
    """Makes orbax's restore raise OSError while `fails(step, attempt)`; returns the attempts per step."""
    real, attempts = ocp.CheckpointManager.restore, {}

    def restore(manager, step, *args, **kwargs):
        attempts[step] = attempts.get(step, 0) + 1
        if fails(step, attempts[step]):
            raise OSError(f"injected read error for step {step}")
        return real(manager, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", restore)
    return attempts


def test_a_transient_read_error_is_retried_and_nothing_is_moved(tmp_path, small8, monkeypatch, caplog):
    state, abstract = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=3, async_save=False)
    newer = jax.tree.map(lambda x: x + 1, state)  # (step 2's arrays told apart from step 1's)
    ckpt.save(1, state, data_position=11, config=CONFIG)
    ckpt.save(2, newer, data_position=22, config=CONFIG)
    before = _files(tmp_path)
    attempts = _failing_restore(monkeypatch, lambda step, attempt: attempt == 1)  # a gs:// blip
    with caplog.at_level(logging.WARNING, logger="bertjax.checkpointing"):
        restored, meta = ckpt.restore(abstract)
    assert meta["step"] == 2 and attempts == {2: 2}
    assert_trees_equal(restored, newer)
    assert f"reading checkpoint {tmp_path / '2'} failed (OSError: injected read error" in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["1", "2"] and _files(tmp_path) == before
    ckpt.close()


def test_a_sigterm_while_a_step_is_read_stops_it_and_is_no_read_error(tmp_path, small8, monkeypatch):
    """A training launcher's SIGTERM outside the steps (cli.stop_on_sigterm) raised an Exception:
    a restore took it for a failed read and tried again, then went on ignoring the signal; a step
    read for the newest readable was set aside as unreadable (a review). It is a StopSignal, which
    no `except Exception` takes."""
    import signal

    from bertjax.runtime import cli
    from bertjax.runtime.errors import StopSignal

    state, abstract = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=3, async_save=False)
    ckpt.save(1, state, data_position=11, config=CONFIG)
    ckpt.save(2, state, data_position=22, config=CONFIG)
    before = _files(tmp_path)
    real, attempts = ocp.CheckpointManager.restore, []

    def signalled(manager, step, *args, **kwargs):
        attempts.append(step)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here, inside the read
        return real(manager, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", signalled)
    previous = signal.getsignal(signal.SIGTERM)
    cli.stop_on_sigterm()
    try:
        with pytest.raises(StopSignal, match="SIGTERM outside the training steps"):
            ckpt.restore(abstract)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert attempts == [2] and _files(tmp_path) == before  # one attempt, nothing set aside
    ckpt.close()


def test_a_sigterm_inside_an_event_loops_callback_stops_the_read():
    """orbax reads through an asyncio event loop, whose callbacks log and drop any
    BaseException but a KeyboardInterrupt or SystemExit: a SIGTERM whose StopSignal was raised
    in one was lost (the run trained on) or left the read waiting forever for the result that
    callback was to deliver (a walkthrough). A StopSignal is a KeyboardInterrupt, passed on."""
    import asyncio
    import signal

    from bertjax.runtime import cli
    from bertjax.runtime.errors import StopSignal

    async def read():
        loop = asyncio.get_running_loop()
        result = loop.create_future()

        def deliver():  # a thread pool's read handed back to the loop, the notice arriving meanwhile
            os.kill(os.getpid(), signal.SIGTERM)
            result.set_result("checkpoint read")

        loop.call_soon(deliver)
        return await asyncio.wait_for(result, 5)

    previous = signal.getsignal(signal.SIGTERM)
    cli.stop_on_sigterm()
    try:
        with pytest.raises(StopSignal, match="SIGTERM outside the training steps"):
            asyncio.run(read())
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_step_that_keeps_failing_is_moved_aside_intact_never_deleted(tmp_path, small8, monkeypatch, caplog):
    state, abstract = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=2, async_save=False)
    ckpt.save(1, state, data_position=11, config=CONFIG)
    ckpt.save(2, state, data_position=22, config=CONFIG)
    step2 = _files(tmp_path / "2")
    attempts = _failing_restore(monkeypatch, lambda step, attempt: step == 2)
    with caplog.at_level(logging.WARNING, logger="bertjax.checkpointing"):
        restored, meta = ckpt.restore(abstract)
    assert meta["step"] == 1 and meta["data_position"] == 11
    assert_trees_equal(restored, state)
    assert attempts == {2: 3, 1: 1}
    [aside] = _aside(tmp_path, 2)
    assert _files(tmp_path / aside) == step2  # every byte kept
    assert f"moved unreadable checkpoint {tmp_path / '2'} aside to {tmp_path / aside}" in caplog.text
    assert ckpt.all_steps() == [1]
    # The resumed run saves step 2 again (and 3, which with max_to_keep=2 retires step 1);
    # the moved-aside folder survives that and a new Checkpointer's clean-up of tmp folders.
    monkeypatch.undo()
    assert ckpt.save(2, state, data_position=23, config=CONFIG)
    assert ckpt.save(3, state, data_position=33, config=CONFIG)
    ckpt.close()
    reopened = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=2)
    assert reopened.all_steps() == [2, 3]
    assert reopened.restore(abstract, step=2)[1]["data_position"] == 23
    assert _aside(tmp_path, 2) == [aside] and _files(tmp_path / aside) == step2
    assert checkpointing.read_meta(str(tmp_path))["step"] == 3
    reopened.close()


def test_on_gs_a_step_is_moved_aside_by_copy_then_delete(tmp_path, small8, monkeypatch):
    """gs:// has no atomic rename: the step is copied (commit file last), then deleted.
    Exercised here on a local directory by treating it as remote."""
    state, abstract = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=3, async_save=False)
    ckpt.save(1, state, data_position=11, config=CONFIG)
    ckpt.save(2, state, data_position=22, config=CONFIG)
    assert (tmp_path / "2" / checkpointing.COMMIT_FILE).exists()  # orbax's "complete" marker
    step2 = _files(tmp_path / "2")
    copied, path_class = [], type(ckpt.directory)
    real_copy = path_class.copy

    def copy(self, dst, overwrite=False):
        copied.append(str(self))
        return real_copy(self, dst, overwrite)

    committed_when_deleted, real_rmtree = {}, path_class.rmtree

    def rmtree(self, *args, **kwargs):
        folders = (self, *(child for child in self.iterdir() if child.is_dir()))
        committed_when_deleted[str(self)] = any((folder / checkpointing.COMMIT_FILE).exists() for folder in folders)
        return real_rmtree(self, *args, **kwargs)

    monkeypatch.setattr(path_class, "copy", copy)
    monkeypatch.setattr(path_class, "rmtree", rmtree)
    monkeypatch.setattr(checkpointing, "_is_remote", lambda path: True)
    _failing_restore(monkeypatch, lambda step, attempt: step == 2)
    assert ckpt.restore(abstract)[1]["step"] == 1
    [aside] = _aside(tmp_path, 2)
    assert _files(tmp_path / aside) == step2 and not (tmp_path / "2").exists()
    # The source's commit file goes first: a delete killed part-way leaves no step that reads as
    # complete, which the recovery of a replaced step would keep over its intact copy (a review).
    assert committed_when_deleted[str(tmp_path / "2")] is False
    assert len(copied) == len(step2) and copied[-1] == str(tmp_path / "2" / checkpointing.COMMIT_FILE)
    ckpt.close()
    aside = checkpointing.move_aside(str(tmp_path), "stale")  # a whole checkpoint directory (best/): its steps' too
    assert committed_when_deleted[str(tmp_path)] is False
    assert os.path.exists(os.path.join(aside, "1", checkpointing.COMMIT_FILE)) and not os.path.exists(tmp_path)


def _corrupt_array_data(step_dir):
    """Deletes every stored array chunk of the state (a lost upload, a wiped disk block)."""
    for root, _, files in os.walk(step_dir / "state"):
        if os.path.basename(root) == "d":
            for name in files:
                os.remove(os.path.join(root, name))


def _truncate_metadata(step_dir):
    with open(step_dir / "state" / "_METADATA", "r+b") as f:
        f.truncate(10)


# A failed read leaves an orbax/tensorstore callback for an already-closed event loop.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("corrupt", [_corrupt_array_data, _truncate_metadata])
def test_corrupt_latest_falls_back_to_previous(tmp_path, small8, caplog, corrupt):
    state, abstract = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=3, async_save=False)
    ckpt.save(1, state, data_position=11, config=CONFIG)
    ckpt.save(2, state, data_position=22, config=CONFIG)
    corrupt(tmp_path / "2")
    corrupted = _files(tmp_path / "2")
    with caplog.at_level(logging.WARNING, logger="bertjax.checkpointing"):
        restored, meta = ckpt.restore(abstract)
    assert meta["step"] == 1 and meta["data_position"] == 11
    assert_trees_equal(restored, state)
    assert any(f"checkpoint {tmp_path / '2'} is unreadable" in r.getMessage() and "falling back" in r.getMessage()
               for r in caplog.records)
    [aside] = _aside(tmp_path, 2)
    assert _files(tmp_path / aside) == corrupted
    # The run resumes from step 1 and saves step 2 again.
    assert ckpt.save(2, state, data_position=23, config=CONFIG)
    assert ckpt.restore(abstract)[1]["data_position"] == 23
    # When no step can be read, nothing is moved: a person decides.
    corrupt(tmp_path / "1")
    corrupt(tmp_path / "2")
    with pytest.raises(checkpointing.CheckpointUnreadableError,  # an OSError: launchers end it with one line
                       match="no readable checkpoint.*corrupt or truncated.*none was moved aside") as raised:
        ckpt.restore(abstract)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 800
    assert all("\n" not in r.getMessage() for r in caplog.records  # no TensorStore spec dumps
               if r.name == "bertjax.checkpointing")
    assert ckpt.all_steps() == [1, 2] and _aside(tmp_path, 1) == [] and _aside(tmp_path, 2) == [aside]
    ckpt.close()


def test_reading_another_runs_checkpoint_retries_a_passing_error(tmp_path, small8, caplog, monkeypatch):
    """read_meta (a resumed run's best/, an init checkpoint) read each step once: one passing
    error (a gs:// 503) read the newest step as corrupt, and a resumed fine-tuning run moved its
    best/ aside as unreadable (a review). It is retried, as `restore` retries."""
    import orbax.checkpoint as ocp

    state, _ = small8
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=3, async_save=False)
    ckpt.save(1, state, data_position=11, config=CONFIG)
    ckpt.save(2, state, data_position=22, config=CONFIG)
    ckpt.close()
    restore, failures = ocp.JsonCheckpointHandler.restore, [OSError("503 Service Unavailable")]

    def failing_once(self, *args, **kwargs):
        if failures:
            raise failures.pop()
        return restore(self, *args, **kwargs)

    monkeypatch.setattr(ocp.JsonCheckpointHandler, "restore", failing_once)
    with caplog.at_level(logging.WARNING, logger="bertjax.checkpointing"):
        assert checkpointing.read_meta(str(tmp_path))["data_position"] == 22
    assert f"reading checkpoint {tmp_path / '2'} failed (OSError: 503 Service Unavailable); trying again" \
        in caplog.text and "falling back" not in caplog.text
    # Bytes that are no JSON do not read another time: no wait, the step before (a review).
    for meta in (tmp_path / "2" / "meta").rglob("*"):
        if meta.is_file():
            meta.write_bytes(b"\x00 not json")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bertjax.checkpointing"):
        assert checkpointing.read_meta(str(tmp_path))["data_position"] == 11
    assert "trying again" not in caplog.text and "falling back to the previous one" in caplog.text


_KILL_DURING_SAVE = textwrap.dedent("""
    import os, signal, sys, time
    import jax, jax.numpy as jnp
    from bertjax import checkpointing

    directory = sys.argv[1]
    ckpt = checkpointing.Checkpointer(directory, save_interval_steps=1, max_to_keep=3, async_save=True)
    small = {"params": {"w": jnp.full((1000,), 1.0)}, "step": jnp.int32(1)}
    ckpt.save(1, small, data_position=1, config={})
    ckpt.wait_until_finished()
    # ~200 MB of incompressible data: the background write takes a while.
    big = {"params": {"w": jax.random.normal(jax.random.key(0), (50_000_000,))}, "step": jnp.int32(2)}
    big["params"]["w"].block_until_ready()
    ckpt.save(2, big, data_position=2, config={})
    tmp_dirs = lambda: sorted(n for n in os.listdir(directory) if "tmp" in n)
    deadline = time.time() + 10  # orbax may create the tmp folder from its background thread
    while not tmp_dirs() and time.time() < deadline:
        time.sleep(0.01)
    print("tmp dirs:", tmp_dirs(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_kill_9_during_async_save_leaves_previous_checkpoint(tmp_path):
    directory = tmp_path / "ckpt"
    env = dict(os.environ, PYTHONPATH=REPO, XLA_FLAGS=xla_flags(), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _KILL_DURING_SAVE, str(directory)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert "2.orbax-checkpoint-tmp" in proc.stdout, proc.stdout  # killed mid-save
    assert "2" not in os.listdir(directory)
    tmp_step = [name for name in os.listdir(directory) if name.startswith("2.orbax-checkpoint-tmp")][0]
    assert not checkpointing.is_bertjax_checkpoint(str(directory / tmp_step))
    assert checkpointing.load_params(str(directory))[0]["step"] == 1

    ckpt = checkpointing.Checkpointer(str(directory), save_interval_steps=1, max_to_keep=3)
    assert ckpt.all_steps() == [1]
    replicated = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = {"params": {"w": jax.ShapeDtypeStruct((1000,), jnp.float32, sharding=replicated)},
                "step": jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)}
    restored, meta = ckpt.restore(abstract)
    assert meta["step"] == 1 and int(restored["step"]) == 1
    np.testing.assert_array_equal(restored["params"]["w"], np.ones(1000))
    # The resumed run saves step 2 again; the leftover tmp folder is gone by then.
    assert ckpt.save(2, restored, data_position=2, config={})
    ckpt.wait_until_finished()
    assert sorted(os.listdir(directory)) == ["1", "2"]
    ckpt.close()


_TWO_PROCESSES = textwrap.dedent("""
    import os, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.experimental import multihost_utils
    jax.distributed.initialize(f"127.0.0.1:{sys.argv[2]}", num_processes=2, process_id=int(sys.argv[3]))
    from bertjax import checkpointing
    checkpointing.READ_RETRY_SECONDS = (0.0, 0.0)

    directory = sys.argv[1]
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    abstract = {"w": jax.ShapeDtypeStruct((8,), jnp.float32, sharding=sharded)}
    ckpt = checkpointing.Checkpointer(directory, save_interval_steps=1, max_to_keep=3, async_save=False)
    for step in (1, 2):
        w = jax.make_array_from_callback((8,), sharded, lambda index: np.arange(8.0)[index] * step)
        ckpt.save(step, {"w": w}, data_position=step, config={})
    if jax.process_index() == 0:
        with open(os.path.join(directory, "2", "state", "_METADATA"), "r+b") as f:
            f.truncate(10)
    multihost_utils.sync_global_devices("step 2 corrupted")
    restored, meta = ckpt.restore(abstract)
    gathered = multihost_utils.process_allgather(restored["w"], tiled=True)
    print(f"restored {meta['step']} {gathered.tolist()} {ckpt.all_steps()}", flush=True)  # one write: Gloo logs too
    ckpt.close()
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A failed read leaves an orbax/tensorstore callback for an already-closed event loop.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_two_processes_agree_on_the_fallback_and_move_the_step_aside_once(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO, XLA_FLAGS=xla_flags(2),
               JAX_PLATFORMS="cpu")
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-c", _TWO_PROCESSES, str(tmp_path), str(port), str(i)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
        assert f"restored 1 {[float(i) for i in range(8)]} [1]" in out, out
    assert sorted(os.listdir(tmp_path)) == ["1", _aside(tmp_path, 2)[0]]
    assert "moved unreadable checkpoint" in outputs[0][1] and "moved unreadable checkpoint" not in outputs[1][1]


def _remove_meta(step_dir):
    import shutil

    shutil.rmtree(step_dir / "meta")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("damage", [_corrupt_array_data, _truncate_metadata, _remove_meta])
def test_an_init_checkpoint_with_a_damaged_newest_step_reads_the_previous_one(tmp_path, small8, caplog, damage):
    """As a run resuming its own workdir does: the newest readable step, a warning naming the skipped one."""
    from bertjax.models import convert

    state, _ = small8
    run = tmp_path / "run"
    ckpt = checkpointing.Checkpointer(str(run / "checkpoints"), save_interval_steps=1, max_to_keep=3, async_save=False)
    ckpt.save(1, state, data_position=11, config=CONFIG)
    second = jax.tree.map(lambda x: x + 1, state)
    ckpt.save(2, second, data_position=22, config=CONFIG)
    ckpt.close()
    damage(run / "checkpoints" / "2")
    assert convert.checkpoint_layout(str(run)) == ("bertjax", str(run / "checkpoints"))
    with caplog.at_level(logging.WARNING, logger="bertjax.checkpointing"):
        meta, params = checkpointing.load_params(str(run / "checkpoints"))
    assert meta["step"] == 1 and meta["data_position"] == 11
    np.testing.assert_array_equal(params["kernel"], np.asarray(state["params"]["kernel"]))
    if damage is not _remove_meta:  # a step without meta/ is no step: nothing to warn about
        assert any(f"checkpoint {run / 'checkpoints' / '2'} is unreadable" in r.getMessage() for r in caplog.records)
    assert sorted(os.listdir(run / "checkpoints")) == ["1", "2"]  # nothing moved: it is another run's
    with pytest.raises(Exception) as failed:  # an explicit step is read or fails, never swapped for another
        checkpointing.load_params(str(run / "checkpoints" / "2"))
    assert not isinstance(failed.value, (TypeError, AttributeError, KeyError, NameError)), failed.value  # (a bug)

"""The shared trainer pieces: gradient accumulation equals the whole batch, skipped non-finite
steps leave weights and schedule alone, evaluation sums count every example once."""

import tempfile
import textwrap

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from bertjax import checkpointing, optim, sharding, trainer
from bertjax.models import BertConfig, BertForPreTraining
from bertjax.pretrain import objective
from small_runs import two_cpu_processes

pytestmark = pytest.mark.multidevice  # the train step data-parallel over the 8 simulated devices

CONFIG = BertConfig.preset("tiny", vocab_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
TRAIN = ml_collections.ConfigDict(dict(optim.DEFAULTS, learning_rate=1e-2, warmup_steps=2, num_steps=10))


def _batch(rng, size=16, length=16, predictions=4):
    """A pre-training batch whose rows have different numbers of real predictions, so a mean
    of per-micro-batch means would differ from the whole batch's weighted mean."""
    weights = (np.arange(predictions)[None, :] < rng.integers(1, predictions + 1, (size, 1))).astype(np.float32)
    return {"input_ids": rng.integers(5, 64, (size, length)).astype(np.int32),
            "segment_ids": np.zeros((size, length), np.int32), "input_mask": np.ones((size, length), np.int32),
            "masked_lm_positions": rng.integers(1, length, (size, predictions)).astype(np.int32),
            "masked_lm_ids": rng.integers(5, 64, (size, predictions)).astype(np.int32),
            "masked_lm_weights": weights, "next_sentence_labels": rng.integers(0, 2, size).astype(np.int32)}


@pytest.fixture(scope="module")
def setup():
    mesh = sharding.create_mesh(data=-1)  # the 8 simulated devices
    model = BertForPreTraining(CONFIG)
    batch = _batch(np.random.default_rng(0))
    init_params = lambda: model.init(jax.random.key(0), batch["input_ids"], batch["segment_ids"],
                                     batch["input_mask"], batch["masked_lm_positions"])["params"]
    optimizer = optim.make_optimizer(TRAIN)
    inputs = trainer.step_inputs(TRAIN, 0, mesh)
    abstract, shardings = trainer.state_shardings(init_params, optimizer, mesh)

    def fresh_state(checkpointer=None, train=None, config=None):
        """A new state, or (with `checkpointer`) the latest checkpoint's for a run of `train`'s
        optimizer whose saved config is `config`."""
        optimizer_now = optimizer if train is None else optim.make_optimizer(train)
        abstract_now, shardings_now = (abstract, shardings) if train is None else trainer.state_shardings(
            init_params, optimizer_now, mesh)
        return trainer.initial_state(checkpointer, abstract_now, shardings_now, init_params=init_params,
                                     optimizer=optimizer_now, mesh=mesh, config=config)[0]

    compiled = {}  # grad_accum_steps -> the jitted step, traced and compiled once

    def step(state, batch, grad_accum_steps=1, step_inputs=inputs):
        if grad_accum_steps not in compiled:
            compiled[grad_accum_steps] = jax.jit(lambda s, b, i: trainer.train_step(
                s, b, i, objective=objective(model), train_config=TRAIN, grad_accum_steps=grad_accum_steps))
        with sharding.activate(mesh):
            return compiled[grad_accum_steps](state, trainer.global_batch(batch, mesh), step_inputs)

    return fresh_state, step, batch


@pytest.mark.heavy
def test_accumulated_micro_batches_give_the_whole_batch_update(setup):
    """Compared after the second step: the first update's learning rate is 0 (warmup starts
    at 0, as the original schedule), so the first step alone would compare unchanged weights."""
    fresh_state, step, batch = setup
    initial = jax.device_get(fresh_state().params)
    whole, _ = step(fresh_state(), batch)
    whole, whole_metrics = step(whole, batch)
    accumulated, _ = step(fresh_state(), batch, grad_accum_steps=4)
    accumulated, accumulated_metrics = step(accumulated, batch, grad_accum_steps=4)
    assert float(whole_metrics["learning_rate"]) == pytest.approx(TRAIN.learning_rate / TRAIN.warmup_steps)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(jax.device_get(whole.params)),
                                                            jax.tree.leaves(initial)))
    assert moved > 1e-3  # a real update, 100x the tolerance below (float sums in another order)
    for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(accumulated.params)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    for name in ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "grad_norm"):
        np.testing.assert_allclose(whole_metrics[name], accumulated_metrics[name], rtol=1e-5, err_msg=name)


def test_seed_and_schedule_are_arguments_so_a_sweep_shares_one_compiled_step(setup):
    """The step built for another learning rate, warmup, length and seed lowers to the same
    program (what the compilation cache keys on), and follows the numbers it is given."""
    fresh_state, step, batch = setup
    other = ml_collections.ConfigDict(dict(TRAIN, learning_rate=3e-3, warmup_steps=5, num_steps=400))
    mesh = sharding.create_mesh(data=-1)
    model = BertForPreTraining(CONFIG)

    def lowered(train_config, seed):
        jitted = jax.jit(lambda s, b, i: trainer.train_step(s, b, i, objective=objective(model),
                                                            train_config=train_config, grad_accum_steps=1))
        with sharding.activate(mesh):
            return jitted.lower(fresh_state(), trainer.global_batch(batch, mesh),
                                trainer.step_inputs(train_config, seed, mesh)).as_text()

    assert lowered(TRAIN, 0) == lowered(other, 7)
    state, _ = step(fresh_state(), batch, step_inputs=trainer.step_inputs(other, 7, mesh))
    _, second = step(state, batch, step_inputs=trainer.step_inputs(other, 7, mesh))
    assert float(second["learning_rate"]) == pytest.approx(3e-3 / 5)  # TRAIN's would be 1e-2 / 2


def test_a_resumed_run_counts_non_finite_steps_afresh(setup, tmp_path):
    """The stop for too many non-finite steps in a row advises resuming from the last checkpoint
    (at a lower learning rate); that checkpoint may hold a count already at the limit."""
    fresh_state, step, batch = setup
    poisoned = dict(batch, masked_lm_weights=np.full_like(batch["masked_lm_weights"], np.nan))
    state, _ = step(fresh_state(), batch)
    for _ in range(2):
        state, _ = step(state, poisoned)
    assert (int(state.bad_steps), int(state.worst_bad_run), int(state.skipped_steps)) == (2, 2, 2)
    config = {"train": dict(TRAIN)}
    checkpointer = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=1, async_save=False)
    checkpointer.save(3, state, data_position=3, config=config)
    resumed = fresh_state(checkpointer, config=config)
    assert (int(resumed.step), int(resumed.bad_steps), int(resumed.worst_bad_run), int(resumed.skipped_steps)) == (
        3, 0, 0, 2)
    for a, b in zip(jax.tree.leaves(jax.device_get(state.params)), jax.tree.leaves(jax.device_get(resumed.params))):
        np.testing.assert_array_equal(a, b)

    # A setting that changes the state's tree (no clipping: one stage fewer in the optimizer)
    # is named in the refusal, not only the tree paths that differ.
    unclipped = ml_collections.ConfigDict(dict(TRAIN, max_grad_norm=0.0))
    with pytest.raises(checkpointing.CheckpointMismatchError,
                       match=r"Settings changed since that checkpoint: train.max_grad_norm 1.0 -> 0.0: set "
                             r"them back to resume, or give the run a new workdir"):
        fresh_state(checkpointer, train=unclipped, config={"train": dict(unclipped)})


def test_micro_batches_are_strided_across_the_global_batch():
    rows = jnp.arange(16)
    with sharding.activate(sharding.create_mesh(data=-1)):
        micro = jax.jit(lambda b: trainer.micro_batches({"x": b}, 4))(rows)["x"]
    np.testing.assert_array_equal(micro, np.arange(16).reshape(4, 4).T)  # micro-batch i = rows i, i+4, ...


def test_a_skipped_step_changes_no_weight_and_does_not_advance_the_schedule(setup):
    fresh_state, step, batch = setup
    poisoned = dict(batch, masked_lm_weights=np.full_like(batch["masked_lm_weights"], np.nan))
    state, first = step(fresh_state(), batch)
    before = jax.device_get((state.params, state.opt_state))  # Adam's moments and count too
    state, skipped = step(state, poisoned)
    assert float(skipped["skipped"]) == 1.0
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(jax.device_get((state.params, state.opt_state)))):
        np.testing.assert_array_equal(a, b)
    state, third = step(state, batch)
    schedule = optim.make_schedule(TRAIN)
    assert int(state.step) == 3 and int(optim.update_count(state.opt_state)) == 2
    assert int(state.skipped_steps) == 1 and int(state.bad_steps) == 0 and int(state.worst_bad_run) == 1
    # The logged rate is the one each update used: schedule(0), schedule(1) for the skipped
    # step (which uses none), schedule(1) again for the next real update.
    np.testing.assert_allclose([first["learning_rate"], skipped["learning_rate"], third["learning_rate"]],
                               [schedule(0), schedule(1), schedule(1)])


def test_an_evaluation_in_the_train_steps_micro_batches_sums_as_the_whole_batch(setup):
    """Pre-training evaluates a global batch in grad_accum_steps parts (the memory a training
    micro-batch fits): the sums and counts are the whole batch's, padded predictions too."""
    fresh_state, _, batch = setup
    mesh, params = sharding.create_mesh(data=-1), fresh_state().params
    task = objective(BertForPreTraining(CONFIG))
    with sharding.activate(mesh):
        placed = trainer.global_batch(batch, mesh)
        whole = jax.jit(lambda p, b: trainer.eval_sums(p, b, objective=task)[:2])(params, placed)
        parts = jax.jit(lambda p, b: trainer.eval_sums_in_parts(p, b, objective=task, parts=2))(params, placed)
    for got, want in zip(parts, whole):
        assert sorted(got) == sorted(want) and want["mlm_accuracy"] > 0
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5)


def test_evaluation_totals_weight_every_example_once():
    totals = trainer.EvalTotals()
    # Two batches, the second padded: its counts hold only the real rows.
    totals.add({"accuracy": jnp.float32(3.0), "loss": jnp.float32(2.0)}, {"accuracy": jnp.float32(4.0),
                                                                          "loss": jnp.float32(4.0)})
    totals.add({"accuracy": jnp.float32(1.0), "loss": jnp.float32(1.0)}, {"accuracy": jnp.float32(1.0),
                                                                          "loss": jnp.float32(1.0)})
    assert totals.means() == {"accuracy": 4.0 / 5.0, "loss": 3.0 / 5.0}  # not the mean of 0.75 and 1.0


# Two processes of two CPU devices each, on a mesh that interleaves them as a TPU slice's
# topology order does (process 0's devices hold batch rows 0-1 and 4-5): a batch that every
# process holds whole must come out in its own row order, fed rows must be each process's
# own, the pre-training guesses count both processes' eval rows, and a busy workdir stops both.
_INTERLEAVED = textwrap.dedent("""
    import os
    import sys
    import numpy as np
    from bertjax.runtime import distributed
    assert distributed.initialize("auto", f"127.0.0.1:{sys.argv[1]}", 2, int(sys.argv[2]))
    import jax
    from jax.experimental import multihost_utils
    from bertjax import pretrain, sharding, trainer
    mine, theirs = jax.local_devices(), [d for d in jax.devices() if d.process_index != jax.process_index()]
    by_process = sorted([mine, theirs], key=lambda devices: devices[0].process_index)
    interleaved = [device for pair in zip(*by_process) for device in pair]
    mesh = sharding.create_mesh(data=4, devices=interleaved)
    rows = {"x": np.arange(16, dtype=np.int32).reshape(8, 2)}
    whole = multihost_utils.process_allgather(trainer.whole_batch(rows, mesh)["x"], tiled=True)
    # One write a line: print's separate writes of its arguments let Gloo's own log lines in between.
    print(f"whole {np.asarray(whole)[:, 0].tolist()}", flush=True)
    trainer.check_rows_per_process(mesh, 8)
    try:
        trainer.check_rows_per_process(sharding.create_mesh(data=1, tensor=4, devices=interleaved), 8)
    except ValueError as error:
        print(f"refused {error}", flush=True)
    targets = np.full((1, 4), 5 if jax.process_index() == 0 else 7, np.int32)
    weights = np.array([[1, 1, 1, 0]] if jax.process_index() == 0 else [[1, 1, 1, 1]], np.float32)
    guesses = pretrain.guess_accuracies([{"masked_lm_ids": targets, "masked_lm_weights": weights}], 8, False)
    print(f"unigram {round(guesses['mlm_unigram_accuracy'], 4)}", flush=True)
    # The frozen encoder's digest of weights sharded over both processes: the whole values'.
    from jax.sharding import NamedSharding, PartitionSpec
    from bertjax import checkpointing
    full = np.arange(16, dtype=np.float32).reshape(8, 2)
    sharded = jax.make_array_from_callback((8, 2), NamedSharding(mesh, PartitionSpec("data")), lambda i: full[i])
    same = checkpointing.weights_digest({"w": sharded}) == checkpointing.weights_digest({"w": jax.numpy.asarray(full)})
    same_as_numpy = checkpointing.weights_digest({"w": sharded}) == checkpointing.weights_digest({"w": full})
    print(f"digest {checkpointing.weights_digest({'w': sharded})[:12]} {same} {same_as_numpy}", flush=True)
    # A workdir another run holds: every process stops at once (process 1 went on alone).
    import contextlib, tempfile
    from bertjax.runtime import workdir_lock
    workdir = os.path.join(tempfile.gettempdir(), f"bertjax-busy-{sys.argv[1]}")
    with workdir_lock.hold(workdir) if jax.process_index() == 0 else contextlib.nullcontext():
        try:
            with trainer.hold_workdir(workdir):
                print("held", flush=True)
        except workdir_lock.WorkdirBusyError as error:
            print(f"busy {error}", flush=True)
    # A workdir process 0 cannot create: both stop too, process 0 with its own error (naming the
    # folder), process 1 with one pointing at it.
    try:
        with trainer.hold_lock("/proc/bertjax-no-such-workdir"):
            print("held", flush=True)
    except Exception as error:
        own = "cannot make the folder" in str(error)
        print(f"refused {type(error).__name__} {'own' if own else 'relayed'}", flush=True)
    # Checkpoint steps as process 0 lists them (another's listing may lag): one step restored.
    from bertjax import checkpointing
    print(f"agreed {checkpointing.agreed_steps([9, 5] if jax.process_index() == 0 else [5])}", flush=True)
    # Listings that stay different (a folder not shared, listings that lag): refused on both.
    checkpointer = checkpointing.Checkpointer(os.path.join(tempfile.gettempdir(), f"bertjax-listing-{sys.argv[1]}"),
                                              save_interval_steps=1, max_to_keep=2, async_save=False)
    checkpointer._manager.all_steps = lambda: [7] if jax.process_index() == 0 else [3]  # as each would list it
    checkpointing.LISTING_RETRY_SECONDS = (0.1,)
    try:
        checkpointer.agreed_steps()
    except checkpointing.CheckpointListingError as error:
        print(f"listing {error}", flush=True)
    # A shared step that fails on process 0 (a tokenizer it cannot read): both stop at once.
    def load():
        raise FileNotFoundError("no vocab.txt")
    try:
        trainer.process_zero_first(load, "tokenizer")
    except Exception as error:
        print(f"first failed {type(error).__name__}: {error}", flush=True)
    # A TFDS dataset not yet prepared in a folder both processes share, as fine-tuning prepares
    # it: process 0 prepares it, process 1 finds it there (both writing it, the second's rename
    # of its finished folder into place would fail).
    import shutil
    import ml_collections
    import tensorflow_datasets as tfds
    from bertjax import tasks

    class BertjaxSharedFolder(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            features = tfds.features.FeaturesDict({"text": tfds.features.Text()})
            return tfds.core.DatasetInfo(builder=self, features=features)

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            print("preparing", flush=True)
            for i in range(3):
                yield i, {"text": f"line {i}"}

    tasks.FAMILIES["classification"].tfds_datasets = lambda config: ("bertjax_shared_folder",)
    shared = os.path.join(tempfile.gettempdir(), f"bertjax-tfds-{sys.argv[1]}")
    config = ml_collections.ConfigDict({"task": "cola", "data": {"tfds_data_dir": shared}})
    trainer.process_zero_first(lambda: tasks.prepare_tfds(config), "TFDS datasets")
    dataset = tfds.builder("bertjax_shared_folder", data_dir=shared).as_dataset(split="train", shuffle_files=False)
    print(f"tfds {sorted(row['text'].decode() for row in tfds.as_numpy(dataset))}", flush=True)
    # A workdir of each process's own (a node's local disk under one path) is refused on every
    # process: each would save its part of every checkpoint where no other reads it.
    trainer._SHARED_WAIT_SECONDS = 0.2
    for name in ("shared", f"own-{jax.process_index()}"):
        workdir = os.path.join(tempfile.gettempdir(), f"bertjax-{name}-{sys.argv[1]}")
        try:
            with trainer.hold_lock(workdir):
                listed = sorted(os.listdir(workdir)) if jax.process_index() == 0 else "-"
                print(f"{name} held {listed}", flush=True)
        except ValueError as error:
            print(f"{name} refused: {error}", flush=True)
    # Pre-training's files as each process lists them: a copy with a file fewer is refused on
    # every process (each host deals the files out from its own listing).
    sys.path.insert(0, os.path.join(os.environ["PYTHONPATH"], "tests", "data"))
    from test_original_tfrecord import write_original
    from configs import pretrain as pretrain_config
    records = [os.path.join(tempfile.gettempdir(), f"bertjax-records-{sys.argv[1]}-{i}") for i in range(2)]
    mine = records[jax.process_index()]
    os.makedirs(mine)
    for i in range(4 - jax.process_index()):
        write_original(os.path.join(mine, f"part-{i}.tfrecord"), 100 * i, 20)
    with open(os.path.join(mine, "vocab.txt"), "w") as f:
        f.write("".join(f"{token}\\n" for token in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                        + [f"t{i}" for i in range(400)]))
    config = pretrain_config.get_config("tiny")
    config.data.update(source="original_tfrecord", input_pattern="*.tfrecord", vocab_path="vocab.txt",
                       max_seq_length=16, max_predictions_per_seq=3)
    config.train.global_batch_size = 4
    multihost_utils.sync_global_devices("records written")
    for folder, name in ((records[0], "same"), (mine, "own")):
        os.chdir(folder)  # the same pattern, each host's own files
        try:
            pretrain.HostBatches(config, folder, "train")
            print(f"{name} files read", flush=True)
        except ValueError as error:
            print(f"{name} files refused: {error}", flush=True)
    multihost_utils.sync_global_devices("done")
    if jax.process_index() == 0:
        shutil.rmtree(shared)
        for folder in records:
            shutil.rmtree(folder)
    os._exit(0)
""")


def test_batches_on_a_mesh_that_interleaves_two_processes():
    outputs = two_cpu_processes(_INTERLEAVED)
    for returncode, out, err in outputs:
        assert returncode == 0, err[-3000:]
        assert "whole [0, 2, 4, 6, 8, 10, 12, 14]" in out, out  # row i is row i, wherever its device is
        assert "refused config.mesh {'data': 1, 'fsdp': 1, 'tensor': 4} gives each of the 2 processes 8 of" in out
        assert "unigram 0.5714" in out, out  # 4 of the 7 targets (7s on process 1), not process 0's 3 of 3
        assert "busy workdir " in out and "held" not in out.splitlines() and "refused " in out, out
    assert "refused ValueError relayed" in outputs[1][1] and "refused ValueError own" in outputs[0][1]
    assert "first failed FileNotFoundError: no vocab.txt" in outputs[0][1], outputs[0][1]
    assert all("agreed [9, 5]" in out for _, out, _ in outputs), outputs
    assert all("listing the processes list other steps in" in out and "than process 0 ([7])" in out
               for _, out, _ in outputs), outputs
    assert "first failed ValueError: tokenizer: process 0 failed" in outputs[1][1], outputs[1][1]
    digests = [next(line for line in out.splitlines() if line.startswith("digest ")) for _, out, _ in outputs]
    assert digests[0] == digests[1] and digests[0].endswith(" True True"), digests
    assert ["preparing" in out for _, out, _ in outputs] == [True, False], outputs
    assert all("tfds ['line 0', 'line 1', 'line 2']" in out for _, out, _ in outputs), outputs
    assert "shared held ['.lock']" in outputs[0][1] and "shared held -" in outputs[1][1], outputs
    for index, (_, out, _) in enumerate(outputs):
        assert (f"own-{index} refused: workdir {tempfile.gettempdir()}/bertjax-own-") in out and (
            "process 1 does not see the files process 0 writes there; the processes of a run must share its "
            "workdir (gs://, or a file system every host mounts)") in out, out
        assert "same files read" in out and (
            "own files refused: process 1 differs from process 0 in the data it read (train_files_digest: "
            "train_files='*.tfrecord'): give every host the same command, and the same files") in out, out



def test_a_failing_look_for_the_shared_workdirs_file_is_not_seeing_it(tmp_path, monkeypatch):
    """Every process must reach the gather after looking: a passing gs:// error raised on one
    host alone, and the others waited at the gather until the coordinator's timeout (a review)."""
    from bertjax.runtime import fileio

    (tmp_path / "marker").write_bytes(b"")
    assert trainer._sees(str(tmp_path / "marker")) and not trainer._sees(str(tmp_path / "other"))

    def unreachable(path):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fileio, "exists", unreachable)
    assert not trainer._sees(str(tmp_path / "marker"))


def test_every_process_names_the_first_setting_or_data_that_differs(monkeypatch):
    """check_same_on_every_process, as process 0 of two sees it: a setting by its key and value,
    the data by what it is (a host with another copy of the evaluation file scored its own rows
    against process 0's: a walkthrough), another set of keys by the first key one lacks (a
    review: no name was given). Two threads stand for the two processes."""
    import threading

    from jax.experimental import multihost_utils

    process = threading.local()
    barrier, sent = threading.Barrier(2), [None, None]

    def allgather(array):  # [processes, ...]: what each thread sent, once both have
        sent[process.index] = np.asarray(array)
        barrier.wait()
        gathered = np.stack(sent)
        barrier.wait()
        return gathered

    def two_processes(settings: list[dict]) -> list[str | None]:
        errors = [None, None]

        def run(index):
            process.index = index
            try:
                trainer.check_same_on_every_process(settings[index])
            except ValueError as error:
                errors[index] = str(error)
            except BaseException as error:  # noqa: BLE001 (anything else fails the test, not the thread alone)
                errors[index] = error

        threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads) and not any(
            isinstance(error, BaseException) for error in errors), errors
        return errors

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: process.index)
    monkeypatch.setattr(multihost_utils, "process_allgather", allgather)
    mine = {"train": {"learning_rate": 0.001, "feature_cache_dir": "/tmp/a"}, "evaluation_digest": "aaaa",
            "test_digest": "aaaa", "data": {"eval_file": "dev.csv", "test_file": ""}}
    outcomes, seconds = {}, {}
    # (a sweep's temporary feature cache lies under each host's own $TMPDIR: a review)
    for name, theirs in [("same", {**mine, "train": {"learning_rate": 0.001, "feature_cache_dir": "/var/tmp/b"}}),
                         ("rate", {**mine, "train": {"learning_rate": 0.5, "feature_cache_dir": "/tmp/a"}}),
                         ("data", {**mine, "evaluation_digest": "bbbb"}), ("keys", {**mine, "added": 1}),
                         ("test", {**mine, "test_digest": "bbbb"})]:
        outcomes[name], seconds[name] = two_processes([mine, theirs])
    assert outcomes == {
        "same": None,
        "rate": "process 1 differs from process 0 in train.learning_rate (0.001 on process 0): give every host the "
                "same command, and the same files",
        # (the file named: a walkthrough's two hosts had other copies of one relative path)
        "data": "process 1 differs from process 0 in the data it read (evaluation_digest: data.eval_file='dev.csv'): "
                "give every host the same command, and the same files",
        "keys": "process 1 was given other settings than process 0 (process 1 has added, which process 0 has not; "
                "another bertjax version, or config file): give every host the same command",
        "test": "process 1 differs from process 0 in the data it read (test_digest): give every host the same "
                "command, and the same files"}
    assert seconds["keys"] == outcomes["keys"]  # (every process names the same key)
    assert two_processes([mine, {**mine, "data": {"eval_file": "dev.csv"}}])[1] == (
        "process 1 was given other settings than process 0 (process 1 has no data.test_file; another bertjax "
        "version, or config file): give every host the same command")


def test_each_micro_batch_and_each_step_draws_its_own_dropout():
    """Dropout keys: the step's, then each micro-batch's own. The trainer's other tests run
    without dropout, where one key for every micro-batch or step would pass unseen (a review).
    Rows 0 and 1 are micro-batches 0 and 1; each draws noise from the key it is given."""
    mesh = sharding.create_mesh(data=1, devices=jax.devices()[:1])
    task = trainer.Objective(
        apply=lambda params, batch, rng: params["w"] + jax.random.uniform(rng, batch["which"].shape),
        sums=lambda noise, batch: {f"row_{i}": jnp.sum(jnp.where(batch["which"] == i, noise, 0.0)) for i in (0, 1)},
        counts=lambda batch: {"row_0": jnp.float32(1), "row_1": jnp.float32(1)}, loss_terms=("row_0",))
    params = {"w": jnp.float32(0)}
    state = trainer.TrainState(step=jnp.int32(0), params=params, opt_state=optim.make_optimizer(TRAIN).init(params),
                               bad_steps=jnp.int32(0), worst_bad_run=jnp.int32(0), skipped_steps=jnp.int32(0))
    step = jax.jit(lambda state, batch, inputs: trainer.train_step(state, batch, inputs, objective=task,
                                                                   train_config=TRAIN, grad_accum_steps=2))
    batch = {"which": jnp.arange(2)}
    with sharding.activate(mesh):
        state, first = step(state, batch, trainer.step_inputs(TRAIN, 0, mesh))
        _, second = step(state, batch, trainer.step_inputs(TRAIN, 0, mesh))
    draws = [float(metrics[f"row_{i}"]) for metrics in (first, second) for i in (0, 1)]
    assert len(set(draws)) == 4, draws

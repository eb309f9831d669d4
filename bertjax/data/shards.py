"""The on-disk format of prepared data: TFRecord shards of tokenized documents.

One record = one document = one `tf.train.Example` with two int64 features:
  token_ids        <int64>[T]  all sentences' token ids, concatenated
  sentence_lengths <int64>[N]  tokens per sentence (sum == T, every entry >= 1)

Shards are named `<split>-NNNNN-of-MMMMM.tfrecord` beside a `metadata.json`.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

FEATURE_SPEC = {
    "token_ids": tf.io.RaggedFeature(tf.int64),
    "sentence_lengths": tf.io.RaggedFeature(tf.int64),
}


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def encode_document(sentences: Sequence[Sequence[int]]) -> bytes:
    """A document (list of sentences, each a list of token ids) -> serialized tf.train.Example."""
    sentences = [list(s) for s in sentences if len(s)]
    if not sentences:
        raise ValueError("encode_document: a document needs at least one non-empty sentence")
    flat = [token for sentence in sentences for token in sentence]
    feature = {
        "token_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=flat)),
        "sentence_lengths": tf.train.Feature(int64_list=tf.train.Int64List(value=[len(s) for s in sentences])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_document(serialized: tf.Tensor) -> tf.RaggedTensor:
    """Graph op: serialized Example -> <int32>[num_sentences, (tokens)] ragged sentences."""
    features = tf.io.parse_single_example(serialized, FEATURE_SPEC)
    return tf.RaggedTensor.from_row_lengths(
        tf.cast(features["token_ids"], tf.int32), features["sentence_lengths"])

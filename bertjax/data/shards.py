"""The on-disk format of prepared data: TFRecord shards of tokenized documents.

One record = one document = little-endian int32 values, no other framing:
  [S, length_1 .. length_S, token ids (length_1 + .. + length_S of them)]
S >= 1 sentences, every length >= 1. A raw layout rather than a tf.train.Example: prepare
writes a whole batch of documents with a few numpy calls (building one Example per
document in Python cost more than tokenizing it), and the pipeline decodes a batch of
records with one `tf.io.decode_raw`. TFRecord's per-record CRC still catches corruption.

Shards are named `<split>-NNNNN-of-MMMMM.tfrecord` beside a `metadata.json`.
`RecordWriter` writes the TFRecord framing itself (google-crc32c for the checksums), so
prepare's workers never import TensorFlow; only `parse_documents` needs it.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from bertjax import ragged
from bertjax.runtime import fileio, tfrecord


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def is_shard_name(name: str) -> bool:
    """Whether a file name is one `shard_name` gives (a prepared split's shard)."""
    return re.fullmatch(r"(train|eval)-\d{5}-of-\d{5}\.tfrecord", name) is not None


class RecordWriter:
    """Writes a TFRecord file (local or gs://), the format tf.data.TFRecordDataset reads:
    per record, uint64 length, masked crc32c of the length, the bytes, their masked crc32c."""

    def __init__(self, path: str):
        self._file = fileio.open_file(path, "wb")

    def write(self, record: bytes) -> None:
        self._file.write(tfrecord.frame(record))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def encode_documents(token_ids: np.ndarray, sentence_lengths: np.ndarray, document_sentences: np.ndarray) -> list[bytes]:
    """D documents, held flat -> D records.

    token_ids: <int>[T] every sentence's ids, concatenated; sentence_lengths: <int>[N]
    (each >= 1, summing to T); document_sentences: <int>[D] sentences per document (each
    >= 1, summing to N).
    """
    sentence_lengths = np.asarray(sentence_lengths, np.int64)
    document_sentences = np.asarray(document_sentences, np.int64)
    if (len(sentence_lengths) and sentence_lengths.min() < 1) or (len(document_sentences) and document_sentences.min() < 1):
        raise ValueError("encode_documents: every document needs sentences and every sentence tokens")
    if sentence_lengths.sum() != len(token_ids) or document_sentences.sum() != len(sentence_lengths):
        raise ValueError("encode_documents: lengths do not add up to the token ids / sentences given")
    first_sentence = ragged.row_starts(document_sentences)
    document_tokens = np.add.reduceat(sentence_lengths, first_sentence) if len(first_sentence) else first_sentence
    # One flat source [S_d for all d | all sentence lengths | all token ids], and per
    # document three ranges of it, gathered in record order.
    source = np.concatenate([document_sentences, sentence_lengths, np.asarray(token_ids, np.int64)])
    starts = np.stack([np.arange(len(document_sentences)), len(document_sentences) + first_sentence,
                       len(document_sentences) + len(sentence_lengths) + ragged.row_starts(document_tokens)], 1)
    lengths = np.stack([np.ones_like(document_sentences), document_sentences, document_tokens], 1)
    values = ragged.gather_ranges(source, starts.ravel(), lengths.ravel()).astype("<i4").tobytes()
    ends = 4 * np.cumsum(1 + document_sentences + document_tokens)
    return [values[start:end] for start, end in zip([0, *ends[:-1].tolist()], ends.tolist())]


def encode_document(sentences: Sequence[Sequence[int]]) -> bytes:
    """One document (a list of sentences, each a list of token ids; empty ones skipped) -> a record."""
    sentences = [list(s) for s in sentences if len(s)]
    if not sentences:
        raise ValueError("encode_document: a document needs at least one non-empty sentence")
    flat = np.array([token for sentence in sentences for token in sentence], np.int64)
    return encode_documents(flat, [len(s) for s in sentences], [len(sentences)])[0]


def parse_documents(records: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """Graph op: <string>[D] records -> (<int32>[D, (T)] token ids, <int32>[D, (S)] sentence lengths).

    A record whose structure is inconsistent (not whole int32s, lengths that do not add
    up) raises InvalidArgumentError.
    """
    from bertjax.runtime.tf_cpu import tf  # here, not at the top: prepare's writers never need TF
    sizes = tf.strings.length(records)
    tf.debugging.assert_equal(sizes % 4, 0, message="record length is not a multiple of 4 bytes")
    tf.debugging.assert_greater(sizes, 4, message="record too short")
    values = tf.io.decode_raw(tf.strings.reduce_join(records), tf.int32, little_endian=True)
    record_starts = tf.cumsum(sizes // 4, exclusive=True)
    record_ends = record_starts + sizes // 4
    num_sentences = tf.gather(values, record_starts)
    tf.debugging.assert_positive(num_sentences, message="record with no sentences")
    tokens_start = record_starts + 1 + num_sentences
    tf.debugging.assert_less_equal(tokens_start, record_ends, message="record shorter than its header says")
    sentence_lengths = tf.gather(values, tf.ragged.range(record_starts + 1, tokens_start))
    tokens = tf.gather(values, tf.ragged.range(tokens_start, record_ends))
    tf.debugging.assert_equal(tf.reduce_sum(sentence_lengths, axis=1), tf.cast(tokens.row_lengths(), tf.int32),
                              message="sentence lengths do not add up to the record's token ids")
    tf.debugging.assert_positive(sentence_lengths.flat_values, message="empty sentence in a record")
    return tokens, sentence_lengths


def parse_document(record: tf.Tensor) -> tf.RaggedTensor:
    """One record -> <int32>[S, (tokens)] its sentences."""
    from bertjax.runtime.tf_cpu import tf
    tokens, sentence_lengths = parse_documents(record[tf.newaxis])
    return tf.RaggedTensor.from_row_lengths(tokens.flat_values, sentence_lengths.flat_values)

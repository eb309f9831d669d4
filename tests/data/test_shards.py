"""The prepared-shard format: TFRecord framing written without TensorFlow, raw int32 documents."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bertjax.data import shards


def _random_documents(seed: int, count: int) -> list[list[list[int]]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, 30_000, rng.integers(1, 40)).tolist() for _ in range(rng.integers(1, 12))]
            for _ in range(count)]


def test_records_written_without_tensorflow_read_back_with_tf_data(tmp_path):
    records = [b"", b"x", bytes(range(256)) * 40] + [shards.encode_document(d) for d in _random_documents(0, 50)]
    path = str(tmp_path / "a.tfrecord")
    with shards.RecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == records
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01  # one flipped bit: TF's checksum test must catch it
    open(path, "wb").write(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(path))


def test_batch_encoding_and_parsing_round_trip():
    documents = _random_documents(1, 200)
    sentences = [s for d in documents for s in d]
    records = shards.encode_documents(np.concatenate(sentences), [len(s) for s in sentences],
                                      [len(d) for d in documents])
    assert records == [shards.encode_document(d) for d in documents]
    assert np.frombuffer(records[0], "<i4").tolist()[:1 + len(documents[0])] == [
        len(documents[0]), *map(len, documents[0])]
    tokens, sentence_lengths = shards.parse_documents(tf.constant(records))
    assert tokens.to_list() == [[t for s in d for t in s] for d in documents]
    assert sentence_lengths.to_list() == [[len(s) for s in d] for d in documents]
    assert shards.parse_document(tf.constant(records[3])).to_list() == documents[3]
    assert shards.encode_document([[], [7, 8], []]) == shards.encode_document([[7, 8]])


@pytest.mark.parametrize("values, message", [
    ([2, 1, 5, 7, 8], "sentence lengths do not add up"),
    ([9, 1], "record shorter than its header says"),
    ([1, 0], "empty sentence in a record"),
    ([0], "record too short"),
    ([0, 3], "record with no sentences"),
])
def test_inconsistent_records_are_rejected_by_the_parser(values, message):
    good = shards.encode_document([[5, 6]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        shards.parse_documents(tf.constant([good, np.array(values, "<i4").tobytes()]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a multiple of 4"):
        shards.parse_documents(tf.constant([good, b"abcdefg"]))


def test_bad_arguments_to_the_writer_side_are_clear():
    with pytest.raises(ValueError, match="at least one non-empty sentence"):
        shards.encode_document([[], []])
    with pytest.raises(ValueError, match="every document needs sentences"):
        shards.encode_documents(np.array([1, 2]), [2], [1, 0])
    with pytest.raises(ValueError, match="do not add up"):
        shards.encode_documents(np.array([1, 2]), [3], [1])


def test_prepare_workers_do_not_import_tensorflow():
    """Spawned prepare workers import bertjax.data.prepare: it must not pull TensorFlow
    (6 s and 770 MB per worker)."""
    code = ("import sys; import bertjax.data.prepare, bertjax.data.sources, bertjax.data.shards, bertjax.tokenization; "
            "print('tensorflow' in sys.modules, 'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["False", "False"]

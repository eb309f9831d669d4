"""Reads TFRecords written by google-research/bert's create_pretraining_data.py, as they are.

Those records hold finished, statically masked sequences (int64 features input_ids,
input_mask, segment_ids [max_seq_length], masked_lm_positions, masked_lm_ids
[max_predictions_per_seq], float masked_lm_weights [max_predictions_per_seq],
next_sentence_labels [1]); this pipeline only shuffles, host-splits and batches them,
into the same batch format as `PretrainingPipeline`. Epoch e's order is a function of
(seed, e); resume skips whole epochs by record count (counted once, on first resume).
"""

from __future__ import annotations

from concurrent import futures
from typing import Iterator

import numpy as np
from google.protobuf import message

from bertjax.data.records import (FEATURE_NAMES, check_files_not_empty, host_file_split, iterate_naming_bad_files,
                                  shuffle_seed, tf_message, without_autotuning_thread)
from bertjax.runtime.tf_cpu import no_autograph, tf

_MAX_EPOCHS = 1 << 40
_COUNT_BATCH = 4096  # records counted per Python step while counting an epoch


def feature_spec(max_seq_length: int, max_predictions: int) -> dict:
    seq, pred = [max_seq_length], [max_predictions]
    return {
        "input_ids": tf.io.FixedLenFeature(seq, tf.int64),
        "input_mask": tf.io.FixedLenFeature(seq, tf.int64),
        "segment_ids": tf.io.FixedLenFeature(seq, tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature(pred, tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature(pred, tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature(pred, tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def _check_first_record(path: str, spec: dict, vocab_size: int | None) -> None:
    """Clear errors (file and key) for a record that does not match the configured shapes or
    holds a token id outside the vocabulary."""
    try:
        first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except tf.errors.OpError as e:
        raise ValueError(f"unreadable TFRecord file {path}: {tf_message(e)}") from e
    if first is None:
        raise ValueError(f"no records in {path}")
    try:
        example = tf.train.Example.FromString(first.numpy())
    except message.DecodeError:
        raise ValueError(f"{path}: its records are not tf.train.Example protos (not a create_pretraining_data.py "
                         "file; a bertjax prepared shard is read with config.data.source='prepared')") from None
    problem = _example_problem(example, spec)
    if problem:
        raise ValueError(f"{path}: {problem}")
    for key in _TOKEN_IDS:
        _check_ids(max(example.features.feature[key].int64_list.value, default=0), vocab_size, path)


def _example_problem(example: tf.train.Example, spec: dict) -> str | None:
    """What keeps a record from parsing as `spec` says (a feature missing, of another type or
    length), or None."""
    for key, feature in spec.items():
        if key not in example.features.feature:
            return f"feature {key!r} missing (not a create_pretraining_data.py record?)"
        values = example.features.feature[key]
        floats, ints = len(values.float_list.value), len(values.int64_list.value)
        wanted, other = ("float", "int64") if feature.dtype == tf.float32 else ("int64", "float")
        length = floats if wanted == "float" else ints
        if not length and (ints or floats or len(values.bytes_list.value)):
            return f"feature {key!r} holds {other if ints or floats else 'bytes'} values; {wanted} was expected"
        if length != feature.shape[0]:
            return (f"feature {key!r} has {length} values, the config expects {feature.shape[0]} (check "
                    "config.data.max_seq_length / max_predictions_per_seq)")
    return None


# Features holding token ids: each below the vocabulary's size, or its embedding lookup gives NaN.
_TOKEN_IDS = ("input_ids", "masked_lm_ids")


def _check_ids(largest: int, vocab_size: int | None, where: str) -> None:
    if vocab_size is not None and largest >= vocab_size:
        raise ValueError(f"{where} holds token id {largest}, but the vocabulary (config.data.vocab_path) has "
                         f"{vocab_size} tokens: the records were made with another vocab.txt; give that one")


class OriginalTFRecordPipeline:
    """Batches of original pre-training records; same interface as `PretrainingPipeline`."""

    def __init__(self, data_config, *, paths: list[str], batch_size: int, process_index: int = 0,
                 process_count: int = 1, seed: int | None = None, vocab_size: int | None = None,
                 split: str = "train"):
        if not paths:
            raise ValueError("OriginalTFRecordPipeline: no input files")
        self.paths = sorted(paths)
        self.spec = feature_spec(data_config.max_seq_length, data_config.max_predictions_per_seq)
        self.sizes = sizes = check_files_not_empty(self.paths)
        self.vocab_size = vocab_size  # token ids are checked against it (None: not checked)
        # Every file's first record, not the first file's only: a glob over phase-1 (128/20) and
        # phase-2 (512/76) files would fail only when training reached the other kind.
        with futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda path: _check_first_record(path, self.spec, vocab_size), self.paths))
        self.batch_size = batch_size
        self.shuffle_buffer = data_config.instance_shuffle_buffer
        self.seed = data_config.seed if seed is None else seed
        self.process_index, self.process_count = process_index, process_count
        self.file_ids, self.record_shard = host_file_split(sizes, process_index, process_count,
                                                           warn=split == "train")
        self._epoch_size: int | None = None

    def _epoch(self, epoch) -> tf.data.Dataset:
        key = tf.random.experimental.stateless_fold_in(tf.constant([self.seed, 0], tf.int64), epoch)
        files = tf.data.Dataset.from_tensor_slices([self.paths[i] for i in self.file_ids])
        files = files.shuffle(len(self.file_ids), seed=shuffle_seed(key))
        records = files.interleave(tf.data.TFRecordDataset, cycle_length=min(len(self.file_ids), 8),
                                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if self.record_shard:
            records = records.shard(*self.record_shard)
        return records.shuffle(self.shuffle_buffer, seed=shuffle_seed(tf.random.experimental.stateless_fold_in(key, 1)))

    def epoch_size(self) -> int:
        """Records per epoch on this host (one counting pass, cached)."""
        if self._epoch_size is None:
            self._epoch_size = self._count(self._epoch(tf.constant(0, tf.int64)))
        return self._epoch_size

    def holds_at_least(self, count: int) -> bool:
        """Whether an epoch has at least `count` records on this host (reads no further)."""
        if self._epoch_size is not None:
            return self._epoch_size >= count
        return self._count(self._epoch(tf.constant(0, tf.int64)).take(count)) >= count

    def _count(self, records: tf.data.Dataset) -> int:
        """The records of `records`; a file that cannot be read is named (a resume counts the
        whole corpus before its first step: a truncated file stopped it with a traceback)."""
        sizes = records.batch(_COUNT_BATCH).map(no_autograph(lambda batch: tf.shape(batch, tf.int64)[0]))
        return sum(int(size) for size in iterate_naming_bad_files(sizes, self._host_paths(), self._bad_records))

    def _host_paths(self) -> list[str]:
        return [self.paths[i] for i in self.file_ids]

    def _bad_records(self, serialized: tf.Tensor, offset: int) -> str | None:
        """<string>[N] records (the first the file's record `offset`) -> the first one that does
        not parse as the config says, or None."""
        try:
            self._parse(serialized)
            return None
        except tf.errors.InvalidArgumentError as e:
            for index, record in enumerate(serialized.numpy(), start=offset + 1):
                try:
                    problem = _example_problem(tf.train.Example.FromString(record), self.spec)
                except message.DecodeError:
                    problem = "not a tf.train.Example proto"
                if problem:
                    return f"record {index}: {problem}"
            return tf_message(e)

    def _parse(self, serialized: tf.Tensor) -> dict:
        features = tf.io.parse_example(serialized, self.spec)
        out = {k: v if v.dtype == tf.float32 else tf.cast(v, tf.int32) for k, v in features.items()}
        out["next_sentence_labels"] = out["next_sentence_labels"][:, 0]
        return {name: out[name] for name in FEATURE_NAMES}

    def dataset(self, start_batch: int = 0) -> tf.data.Dataset:
        if not self.holds_at_least(1):  # else an endless stream of empty epochs: a silent hang
            raise ValueError(f"this host (process {self.process_index} of {self.process_count}) gets no record of "
                             f"{', '.join(self.paths[:3])}" + (f" and {len(self.paths) - 3} more" if len(self.paths) > 3
                                                               else "")
                             + ": fewer records than hosts; give more data (more records or files)")
        position = start_batch * self.batch_size
        epoch, offset = divmod(position, self.epoch_size()) if position else (0, 0)
        ds = tf.data.Dataset.range(epoch, _MAX_EPOCHS).flat_map(no_autograph(self._epoch)).skip(offset)
        ds = ds.batch(self.batch_size, drop_remainder=True)
        ds = ds.map(no_autograph(self._parse), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        return without_autotuning_thread(ds)

    def batches(self, start_batch: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """Host-local numpy batches from batch `start_batch` on, exactly as a fresh iterator's."""
        paths = self._host_paths()
        for batch in iterate_naming_bad_files(self.dataset(start_batch), paths, self._bad_records):
            for key in _TOKEN_IDS:
                _check_ids(int(batch[key].max()), self.vocab_size, f"a record ({key}) of {', '.join(paths[:2])}"
                           + (f" and {len(paths) - 2} more files" if len(paths) > 2 else ""))
            yield batch

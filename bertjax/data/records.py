"""Record-file helpers shared by the pre-training pipelines (prepared shards, original TFRecords).

Host split of files, bad-file naming, shuffle seeds from stateless keys, and the batch
feature names of the original create_pretraining_data.py records.
"""

from __future__ import annotations

import re
from concurrent import futures
from typing import Callable, Iterator

import numpy as np
from absl import logging

from bertjax.runtime import fileio
from bertjax.runtime.tf_cpu import tf

# The features of a pre-training batch, in the original records' names.
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                 "masked_lm_weights", "next_sentence_labels")

# <string>[N] serialized records, the first one's index in its file -> what is wrong with
# them, or None.
BatchCheck = Callable[[tf.Tensor, int], "str | None"]


def tf_message(error: tf.errors.OpError) -> str:
    """A TensorFlow error's first line without the op's wrapping ("{{function_node ...}}",
    "[Op:ParseExampleV2] name:"), which says nothing to a user."""
    line = error.message.strip().splitlines()[0] if error.message.strip() else type(error).__name__
    line = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", line)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", line).strip()


def without_autotuning_thread(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` without tf.data's autotuning model, whose thread sleeps up to a minute between
    optimisations: an iterator read from one thread (preemption.interruptible's) and let go
    from another waited for that sleep to end when released, at the end of every run and
    where a preempted run has seconds (benchmarks/log/2026-12-01.md). AUTOTUNE then means a
    fixed parallelism (TensorFlow's: up to 16 calls a map stage) and prefetch buffers that
    grow as the reader waits."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def find_bad_file(paths: list[str], check_batch: BatchCheck) -> str | None:
    """Reads every record of every file: a line naming the first bad file and what is wrong
    with it (records that cannot be read, or one `check_batch` finds wrong), else None."""
    for path in paths:
        offset = 0
        try:
            for batch in tf.data.TFRecordDataset(path).batch(_CHECK_BATCH):
                problem = check_batch(batch, offset)
                if problem:
                    return f"{path}: {problem}"
                offset += int(batch.shape[0])
        except tf.errors.OpError as e:
            return f"corrupt or truncated file {path}: {tf_message(e)}"
    return None


_CHECK_BATCH = 4096  # records a check reads at once


def iterate_naming_bad_files(dataset: tf.data.Dataset, paths: list[str],
                             check_batch: BatchCheck) -> Iterator[dict[str, np.ndarray]]:
    """Numpy elements of `dataset`; a data error becomes a ValueError naming the bad file."""
    iterator = dataset.as_numpy_iterator()
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            bad = find_bad_file(paths, check_batch)
            if bad is None:
                raise
            raise ValueError(bad) from e
        yield batch


def _size(path: str) -> int | None:
    try:
        return fileio.size(path)
    except FileNotFoundError:
        return None


def check_files_not_empty(paths: list[str]) -> list[int]:
    """The files' sizes; raises naming the first missing or empty file (stat calls in
    parallel: cheap on GCS too)."""
    with futures.ThreadPoolExecutor(32) as pool:
        sizes = list(pool.map(_size, paths))
    for path, size in zip(paths, sizes):
        if size is None:
            raise FileNotFoundError(f"file not found: {path}")
        if size == 0:
            raise ValueError(f"empty file (no records): {path}")
    return sizes


_HOST_IMBALANCE = 1.25  # whole files per host while no host reads more than this many times another's bytes


def host_file_split(sizes: list[int], process_index: int, process_count: int, warn: bool = False):
    """(the file ids this host reads, record shard (count, index) or None), from every file's
    size in bytes (the same list on every host).

    Whole files per host when they balance: dealt largest first, each to the host with the
    fewest bytes so far, while the most-loaded host then reads at most _HOST_IMBALANCE times
    the least-loaded's bytes. Every host feeds the same rows per step, so a host with less
    data would repeat it more often (dealing files in turn gave one host every 64 MB unit of
    each file and another every file's tail). Else every host reads all files and keeps every
    n-th record, which process 0 warns of where `warn` (the training input): the reading grows
    with the host count, and nothing else would say why the input is slow."""
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index {process_index} not in [0, {process_count})")
    ids = list(range(len(sizes)))
    if process_count == 1:
        return ids, None
    loads, owned = [0] * process_count, [[] for _ in range(process_count)]
    for i in sorted(ids, key=lambda i: (-sizes[i], i)):
        host = min(range(process_count), key=lambda h: (loads[h], h))
        loads[host] += sizes[i]
        owned[host].append(i)
    if min(loads) > 0 and max(loads) <= _HOST_IMBALANCE * min(loads):
        return sorted(owned[process_index]), None
    if warn and process_index == 0:
        logging.warning("%d record files (prepared shards or TFRecords, %.3g GB) do not deal evenly over %d hosts "
                        "(whole files, at most %g times the bytes of another): every host reads all of them and "
                        "keeps one record in %d, %d times the reading; files deal evenly from about 4 a host of "
                        "similar size (a larger corpus prepares into more shards)", len(sizes),
                        sum(sizes) / 1e9, process_count, _HOST_IMBALANCE, process_count, process_count)
    return ids, (process_count, process_index)


def shuffle_seed(key: tf.Tensor) -> tf.Tensor:
    """<int32>[2] stateless key -> <int64>[] seed for shuffle()."""
    return tf.random.stateless_uniform([], key, minval=None, maxval=None, dtype=tf.int64)

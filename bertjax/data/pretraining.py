"""The online pre-training pipeline: prepared shards -> masked-LM + NSP batches (tf.data).

    shards --(host split, per-epoch file shuffle, interleave)--> documents --(shuffle,
      batch of 128, parse, chunk_documents: NSP pairs)--> instances --(shuffle, batch)-->
      layout_batch + mask_batch (vectorized per batch) --> numpy batches

Batches have the original create_pretraining_data.py features, fixed shapes:
  input_ids, input_mask, segment_ids      <int32>[B, max_seq_length]
  masked_lm_positions, masked_lm_ids      <int32>[B, max_predictions_per_seq]
  masked_lm_weights                       <float32>[B, max_predictions_per_seq]
  next_sentence_labels                    <int32>[B]   (0 = IsNext, 1 = random)

Full rows (`full_rows`, masked LM only, RoBERTa's and ModernBERT's layout): each batch of 128
documents (129 where an epoch's last would be alone) is laid end to end, every document
followed by [SEP], and cut into rows of max_seq_length - 2 tokens, each row
`[CLS] ... [SEP]`: no pair sampling, and padding only in the last row of each batch of
documents. Attention runs across the documents of a row (the
[SEP] between them marks the boundary), or with `full_rows_attention="document"` within each
document: batches then add packing's sequence_ids and position_ids <int32>[B, max_seq_length]
(positions restart at each document) and cls_positions <int32>[B, 1] (the row's [CLS]).

Packing (`pack_pairs` = K > 0): each window of 256 shuffled instances is laid out and
masked pair by pair (keyed by epoch and window), then packed first-fit into rows of up to
K pairs (pairing.pack_rows); batches are cut from the stream of rows, and
next_sentence_labels becomes [B, K] with next_sentence_weights <float32>[B, K],
position_ids and sequence_ids <int32>[B, max_seq_length] and cls_positions <int32>[B, K].
max_predictions_per_seq is then the capacity of a row. Epoch sizes count rows; resuming
inside an epoch lays out, masks and packs its skipped part again (the rows are a pure
function of the pairs).

Determinism and resume: epoch e's document order and all random draws are stateless
functions of (seed, process_index, e, position), and batches are cut from the
concatenation of epochs, so the stream is a pure function of the seed. Resuming at batch
k (`batches(start_batch=k)`) needs the instance count of each earlier epoch, then starts
at k's epoch and skips inside it (the skipped part is read and chunked, not laid out or
masked). `batches()` records the size of every epoch it sees end in `epoch_sizes_path`
(a small JSON file in the workdir, keyed by a fingerprint of everything that decides the
stream), so a resume after many epochs costs no recount; a size not recorded is counted
by a chunking pass (a second or so per epoch of the demo corpus). Train and eval
both repeat forever; for a fixed evaluation set take the first N batches of `batches()`.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Iterator

import numpy as np
from absl import logging

from bertjax.runtime import fileio
from bertjax.data import masking, pairing, shards
from bertjax.data.records import (FEATURE_NAMES, check_files_not_empty, host_file_split, iterate_naming_bad_files,
                                  shuffle_seed, tf_message, without_autotuning_thread)
from bertjax.data.pretraining_config import check_data_config
from bertjax.runtime.console import PROCESS_SPECIFIC
from bertjax.runtime.tf_cpu import no_autograph, tf

_AUTOTUNE = tf.data.AUTOTUNE
_MAX_EPOCHS = 1 << 40  # "forever"
_DOCS_PER_CHUNK_BATCH = 128  # documents chunked together (vectorized)
# The rule that batches an epoch's documents (2: a lone last document joins the batch before
# it, `_lone_last_document_joined`): epoch sizes counted under another rule are not reused.
_CHUNK_RULE = 2
_COUNT_BATCH = 256  # row counts summed in the graph per Python step while counting an epoch
_PACK_WINDOW = 256  # pairs packed together (pack_pairs > 0)
# The rule that cuts full rows (pairing.full_rows; 2: no last row of a lone [SEP]): epoch sizes
# counted under another rule are not reused.
_FULL_ROWS_RULE = 2
DOCUMENT_FIELDS = ("sequence_ids", "position_ids", "cls_positions")  # full_rows_attention="document"
# Salts that keep the stateless random streams of different stages apart.
_DOC_ORDER, _CHUNK, _INSTANCE_ORDER, _BATCH, _PACK = range(5)


def check_document_batch(serialized: tf.Tensor, offset: int) -> str | None:
    """<string>[N] shard records (the first the file's record `offset`) -> what is wrong with
    them, or None."""
    try:
        shards.parse_documents(serialized)
    except tf.errors.InvalidArgumentError as e:
        return f"a corrupt record among records {offset + 1}-{offset + len(serialized)} ({tf_message(e)})"
    return None


def _lone_last_document_joined(batches: tf.data.Dataset) -> tf.data.Dataset:
    """`batches` of serialized documents, with a last batch of one document joined to the batch
    before it: alone it has no other document to draw NSP's random B from, so a one-sentence
    document was dropped from the epoch and a longer one paired with itself, where the epoch had
    other documents. A lone document with no batch before it (a one-document host) stays."""
    none = tf.constant([], tf.string)

    def hold_one_back(held, batch):  # -> (the batch held next, the batch given now: none is dropped)
        joined = (tf.size(batch) == 1) & (tf.size(held) > 0)
        return (tf.cond(joined, lambda: none, lambda: batch),
                tf.cond(joined, lambda: tf.concat([held, batch], 0), lambda: held))

    end = tf.data.Dataset.from_tensors(none)  # flushes the batch held last
    return batches.concatenate(end).scan(none, hold_one_back).filter(lambda batch: tf.size(batch) > 0)


class PretrainingPipeline:
    """Host-local masked-LM + NSP batches from prepared shards (see the module docstring)."""

    def __init__(self, data_config, *, shard_paths: list[str], tokenizer, batch_size: int,
                 process_index: int = 0, process_count: int = 1, split: str = "train", seed: int | None = None,
                 epoch_sizes_path: str = ""):
        check_data_config(data_config)
        if not shard_paths:
            raise ValueError(f"PretrainingPipeline: no shards for split {split!r}")
        self.config = data_config
        self.batch_size = batch_size
        self.split = split
        self.paths = sorted(shard_paths)
        self.sizes = shard_sizes = check_files_not_empty(self.paths)
        self.file_ids, self.record_shard = host_file_split(shard_sizes, process_index, process_count,
                                                           warn=split == "train")
        self.seed = data_config.seed if seed is None else seed
        self.process_index = process_index
        self.tokenizer = tokenizer
        self.continuation = tokenizer.continuation_mask() if data_config.whole_word_mask else None
        self.nsp = data_config.next_sentence_prediction
        self.pack_pairs = data_config.pack_pairs
        self.full_rows = data_config.full_rows
        self.by_document = data_config.full_rows_attention == "document"
        self.max_num_tokens = data_config.max_seq_length - (3 if self.nsp else 2)
        self.epoch_sizes_path = epoch_sizes_path
        self._fingerprint = hashlib.sha256(json.dumps({  # everything that decides the instance stream
            "shards": [(os.path.basename(self.paths[i]), shard_sizes[i]) for i in self.file_ids],
            "record_shard": self.record_shard, "seed": self.seed, "process_index": process_index,
            "max_seq_length": data_config.max_seq_length, "short_seq_prob": data_config.short_seq_prob,
            "nsp": self.nsp, "shuffle_buffer": data_config.shuffle_buffer,
            "chunk_batch": [_DOCS_PER_CHUNK_BATCH, _CHUNK_RULE],
            "pack_pairs": self.pack_pairs, "pack_window": _PACK_WINDOW,
            "full_rows": _FULL_ROWS_RULE if self.full_rows else False,
            # Packed rows also depend on the instances' order and their masked tokens (each row's
            # prediction budget).
            **({"instance_shuffle_buffer": data_config.instance_shuffle_buffer,
                "masked_lm_prob": data_config.masked_lm_prob, "whole_word_mask": data_config.whole_word_mask,
                "max_predictions_per_seq": data_config.max_predictions_per_seq} if self.pack_pairs else {}),
        }, sort_keys=True).encode()).hexdigest()
        self._epoch_sizes: dict[int, int] = self._load_epoch_sizes()
        self._rows_at_least: dict[int, int] = {}  # epochs counted part of the way

    # -- keys: document order is the same on every host (so record sharding is disjoint);
    #    all other randomness is per host. --
    def _key(self, salt: int, *data, host: bool = True) -> tf.Tensor:
        key = tf.constant([self.seed, self.process_index if host else -1], tf.int64)
        for value in (salt, *data):
            key = tf.random.experimental.stateless_fold_in(key, tf.cast(value, tf.int64))
        return key

    def _documents(self, order_key: tf.Tensor) -> tf.data.Dataset:
        """Serialized documents of this host, in an order determined by `order_key`."""
        files = tf.data.Dataset.from_tensor_slices([self.paths[i] for i in self.file_ids])
        files = files.shuffle(len(self.file_ids), seed=shuffle_seed(order_key))
        docs = files.interleave(tf.data.TFRecordDataset, cycle_length=min(len(self.file_ids), 8),
                                num_parallel_calls=_AUTOTUNE, deterministic=True)
        if self.record_shard:
            docs = docs.shard(*self.record_shard)
        return docs.shuffle(self.config.shuffle_buffer,
                            seed=shuffle_seed(tf.random.experimental.stateless_fold_in(order_key, 1)))

    def _chunked(self, epoch) -> tf.data.Dataset:
        """Epoch `epoch`'s documents in batches, each batch -> its instances (chunk_documents)."""
        order_key = self._key(_DOC_ORDER, epoch, host=False)
        chunk_key = self._key(_CHUNK, epoch)

        def chunk(index, serialized):
            tokens, sentence_lengths = shards.parse_documents(serialized)
            if self.full_rows:
                return pairing.full_rows(tokens, self.tokenizer.sep_id, self.max_num_tokens)
            out = pairing.chunk_documents(
                tokens, sentence_lengths,
                tf.random.experimental.stateless_fold_in(chunk_key, index),
                max_num_tokens=self.max_num_tokens, short_seq_prob=self.config.short_seq_prob,
                next_sentence_prediction=self.nsp)
            return {key: out[key] for key in ("a_tokens", "b_tokens", "is_random")}

        docs = _lone_last_document_joined(self._documents(order_key).batch(_DOCS_PER_CHUNK_BATCH)).enumerate()
        return docs.map(no_autograph(chunk), num_parallel_calls=_AUTOTUNE)

    def _epoch(self, epoch) -> tf.data.Dataset:
        """Epoch `epoch`'s instances (with their `epoch`), shuffled."""
        with_epoch = no_autograph(lambda out: dict(out, epoch=tf.fill(tf.shape(out["is_random"]), epoch)))
        chunked = self._chunked(epoch).map(with_epoch)
        return chunked.unbatch().shuffle(
            self.config.instance_shuffle_buffer, seed=shuffle_seed(self._key(_INSTANCE_ORDER, epoch)))

    def _rows(self, epoch) -> tf.data.Dataset:
        """Epoch `epoch`'s rows: its instances, or with pack_pairs its packed rows (each window
        of _PACK_WINDOW instances laid out, masked and packed, keyed by (epoch, window))."""
        if not self.pack_pairs:
            return self._epoch(epoch)

        def pack(window, instances):
            key = self._key(_PACK, epoch, window)
            pairs = self._laid_out(instances, key)
            rows = pairing.pack_rows(pairs, max_pairs=self.pack_pairs,
                                     max_predictions=self.config.max_predictions_per_seq)
            return {"epoch": tf.fill(tf.shape(rows["input_mask"])[:1], epoch), **rows}

        windows = self._epoch(epoch).batch(_PACK_WINDOW).enumerate()
        return windows.map(no_autograph(pack), num_parallel_calls=_AUTOTUNE).unbatch()

    def epoch_size(self, epoch: int) -> int:
        """Rows (instances, or packed rows) in epoch `epoch` on this host, recorded or counted:
        by a chunking pass, or with packing by packing the epoch."""
        if epoch not in self._epoch_sizes and not self._count_rows(epoch):
            raise ValueError(self._no_instances())
        return self._epoch_sizes[epoch]

    def holds_at_least(self, count: int, epoch: int = 0) -> bool:
        """Whether epoch `epoch` has at least `count` rows on this host: its recorded size, or
        the rows counted only as far as `count`."""
        if epoch in self._epoch_sizes:
            return self._epoch_sizes[epoch] >= count
        return self._rows_at_least.get(epoch, 0) >= count or self._count_rows(epoch, at_most=count) >= count

    def _row_counts(self, epoch: int) -> tf.data.Dataset:
        """<int32> counts that add up to epoch `epoch`'s rows on this host: one per batch of
        documents chunked (no layout or masking), or with packing 1 per packed row."""
        epoch = tf.constant(epoch, tf.int64)
        if self.pack_pairs:
            return self._rows(epoch).map(no_autograph(lambda _: tf.constant(1)))
        return self._chunked(epoch).map(no_autograph(lambda out: tf.size(out["is_random"])))

    def _count_rows(self, epoch: int, at_most: int | None = None) -> int:
        """Epoch `epoch`'s rows on this host, counted until `at_most` (then the count so far, at
        least at_most); a whole count is recorded (`_remember_epoch_size`)."""
        sums = self._row_counts(epoch).batch(_COUNT_BATCH).map(no_autograph(tf.reduce_sum))
        seen = 0
        for size in iterate_naming_bad_files(sums, self._host_paths(), check_document_batch):
            seen += int(size)
            if at_most is not None and seen >= at_most:
                self._rows_at_least[epoch] = max(seen, self._rows_at_least.get(epoch, 0))
                return seen
        if seen:
            self._remember_epoch_size(epoch, seen)
        return seen

    def _host_paths(self) -> list[str]:
        return [self.paths[i] for i in self.file_ids]

    def _no_instances(self) -> str:
        nsp = " (next-sentence prediction needs a document of two sentences or two documents)" if self.nsp else ""
        return (f"the {self.split} shards give this host no sequences{nsp}: {len(self.file_ids)} of "
                f"{len(self.paths)} files in {os.path.dirname(self.paths[0])}")

    def _load_epoch_sizes(self) -> dict[int, int]:
        path = self.epoch_sizes_path
        if not path or not fileio.exists(path):
            return {}
        try:
            recorded = fileio.read_json(path)
        except (json.JSONDecodeError, OSError) as e:  # a cache: never worth failing the run for
            logging.warning("%s: unreadable (%s); epoch sizes will be counted", path, e, extra=PROCESS_SPECIFIC)
            return {}
        if recorded.get("fingerprint") != self._fingerprint:
            logging.info("%s: recorded for other data or settings; epoch sizes will be counted", path)
            return {}
        return {int(epoch): int(size) for epoch, size in recorded["epoch_sizes"].items()}

    def _remember_epoch_size(self, epoch: int, size: int) -> None:
        known = self._epoch_sizes.get(epoch)
        if known == size:
            return
        if known is not None:
            logging.warning("epoch %d of the %s data has %d instances, %d were recorded in %s; keeping %d",
                            epoch, self.split, size, known, self.epoch_sizes_path, size, extra=PROCESS_SPECIFIC)
        self._epoch_sizes[epoch] = size
        if self.epoch_sizes_path:
            fileio.makedirs(os.path.dirname(self.epoch_sizes_path))
            fileio.write_json(self.epoch_sizes_path, {"fingerprint": self._fingerprint,
                                                     "epoch_sizes": dict(sorted(self._epoch_sizes.items()))})

    def _build(self, batch_index, instances) -> dict:
        out = self._laid_out(instances, self._key(_BATCH, batch_index))
        return {"epoch": instances["epoch"], **{name: out[name] for name in FEATURE_NAMES + DOCUMENT_FIELDS
                                                if name in out}}

    def _laid_out(self, instances, key) -> dict:
        """Instances -> one laid-out, masked sequence each (the FEATURE_NAMES); with
        full_rows_attention="document" also each document's sequence (DOCUMENT_FIELDS), found
        before masking: a random replacement may draw [SEP]."""
        layout_key, mask_key = tf.unstack(tf.random.experimental.stateless_split(key, 2))
        tok = self.tokenizer
        out = pairing.layout_batch(instances, layout_key, max_seq_length=self.config.max_seq_length,
                                   next_sentence_prediction=self.nsp, cls_id=tok.cls_id, sep_id=tok.sep_id,
                                   pad_id=tok.pad_id)
        if self.by_document:
            out.update(pairing.document_sequences(out["input_ids"], out["input_mask"], tok.sep_id))
        masked = masking.mask_batch(out["input_ids"], out["input_mask"], out.pop("candidates"), mask_key,
                                    vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                                    masked_lm_prob=self.config.masked_lm_prob,
                                    max_predictions=self.config.max_predictions_per_seq,
                                    continuation=self.continuation, mask_token_prob=self.config.mask_token_prob,
                                    random_token_prob=self.config.random_token_prob)
        out.update(masked)
        return out

    def _locate(self, start_batch: int) -> tuple[int, int]:
        """Batch `start_batch`'s first instance -> (its epoch, its index in that epoch)."""
        epoch, offset = 0, start_batch * self.batch_size
        while offset and not self.holds_at_least(offset + 1, epoch):  # counts an epoch only past its end
            offset -= self.epoch_size(epoch)
            epoch += 1
        return epoch, offset

    def dataset(self, start_batch: int = 0) -> tf.data.Dataset:
        """The tf.data.Dataset behind `batches` (infinite); elements also hold `epoch`
        <int64>[B], each row's epoch."""
        epoch, offset = self._locate(start_batch)
        ds = tf.data.Dataset.range(epoch, _MAX_EPOCHS).flat_map(no_autograph(self._rows)).skip(offset)
        ds = ds.batch(self.batch_size, drop_remainder=True)
        if not self.pack_pairs:
            ds = tf.data.Dataset.zip(tf.data.Dataset.range(start_batch, _MAX_EPOCHS), ds)
            ds = ds.map(no_autograph(self._build), num_parallel_calls=_AUTOTUNE)
        return without_autotuning_thread(ds.prefetch(_AUTOTUNE))

    def batches(self, start_batch: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """Host-local numpy batches from batch `start_batch` on, exactly as a fresh iterator's.

        Records the size of each epoch it sees end (see `epoch_sizes_path`).
        """
        if not self.holds_at_least(1):  # else an endless stream of empty epochs: a silent hang
            raise ValueError(self._no_instances())
        epoch, offset = self._locate(start_batch)
        epoch_start = start_batch * self.batch_size - offset  # instance index where `epoch` began
        data = iterate_naming_bad_files(self.dataset(start_batch), self._host_paths(), check_document_batch)
        for index, batch in enumerate(data, start_batch):
            epochs = batch.pop("epoch")
            for row in np.flatnonzero(epochs != np.concatenate([[epoch], epochs[:-1]])):  # a new epoch begins
                position = index * self.batch_size + int(row)
                self._remember_epoch_size(epoch, position - epoch_start)
                epoch, epoch_start = int(epochs[row]), position
            yield batch

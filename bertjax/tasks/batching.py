"""Batches of a tokenized `Split`, on the host, with length bucketing.

Training: the stream of examples is the concatenation of epochs, epoch e coming from a
permutation drawn from (seed, e); batch k is examples [k B, (k + 1) B) of that stream, so
a batch is a pure function of its index (exact resume at any step, across epoch ends) and
every batch is full. Evaluation: the split sorted by length, the last batch padded with
rows of weight 0 (`example_weights`), so every example counts exactly once.

Length bucketing: a batch is cut to the smallest bucket length that holds its longest
row instead of always carrying `max_seq_length` tokens. At most num_buckets lengths, so at
most num_buckets shapes are ever compiled, fitted to the training batches' longest rows
(`fitted_bucket_lengths` over `longest_rows`: the multiples of 8 that carry the fewest tokens;
on SST-2-like lengths at 128, 8/16/32/72 instead of the halvings 16/32/64/128 of
`bucket_lengths`). With `group_by_length`, each epoch's permutation is
cut into groups of GROUP_BATCHES batches, each group sorted by length and cut into batches
whose order is then shuffled, so a batch holds rows of similar length (as tf.data's
bucket_by_sequence_length): a random batch of short sentences is padded to its longest,
usually 3-4x the typical one. Packing (`pack_examples`, classification and tagging
tasks; see packing.py) goes further: the same B examples in fewer rows, several a row.
`padding_share` measures what each saves.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

from bertjax.runtime.errors import RunSettingsError
from bertjax.tasks import packing
from bertjax.tasks.common import SEQUENCE_FEATURES, Split


def bucket_lengths(max_seq_length: int, num_buckets: int, minimum: int = 8) -> list[int]:
    """Ascending bucket lengths: max_seq_length / 2^k for k < num_buckets, none below `minimum`."""
    if num_buckets < 1:
        raise ValueError(f"config.data.num_buckets must be >= 1, got {num_buckets}")
    lengths = {max_seq_length}
    for k in range(1, num_buckets):
        if max_seq_length // 2**k >= minimum:
            lengths.add(max_seq_length // 2**k)
    return sorted(lengths)


def fitted_bucket_lengths(lengths: np.ndarray, max_seq_length: int, num_buckets: int, multiple: int = 8) -> list[int]:
    """At most num_buckets ascending bucket lengths for rows of `lengths` <int>[N] (examples, or
    each batch's longest), each a multiple of `multiple` (or max_seq_length), the longest
    holding the longest row, chosen so that padding each row to the smallest bucket that holds
    it carries the fewest tokens (exact: a dynamic programme over the lengths that occur,
    rounded up)."""
    if num_buckets < 1:
        raise ValueError(f"config.data.num_buckets must be >= 1, got {num_buckets}")
    rounded = np.minimum(-(-np.asarray(lengths, np.int64) // multiple) * multiple, max_seq_length)
    candidates, counts = np.unique(rounded, return_counts=True)
    if len(candidates) <= num_buckets:
        return candidates.tolist()
    covered = np.cumsum(counts)  # examples at or below each candidate
    # tokens[j]: the fewest tokens carried by the examples up to candidates[j] with k buckets,
    # the longest at candidates[j]; below[k - 2][j]: the next bucket down in that choice.
    tokens, below = candidates * covered, []
    for _ in range(num_buckets - 1):
        costs = tokens[None, :] + candidates[:, None] * (covered[:, None] - covered[None, :])  # [j, i]
        costs[np.triu_indices(len(candidates))] = 2**62  # the next bucket down is shorter: i < j
        below.append(costs.argmin(axis=1))
        tokens = costs[np.arange(len(candidates)), below[-1]]
    chosen = [len(candidates) - 1]
    for step in reversed(below):
        chosen.append(int(step[chosen[-1]]))
    return sorted(int(candidates[j]) for j in chosen)


def bucket_for(length: int, buckets: list[int]) -> int:
    """The smallest bucket >= length (the largest if none is)."""
    for bucket in buckets:
        if length <= bucket:
            return bucket
    return buckets[-1]


def _bucket_of(split: Split, rows: np.ndarray, buckets: list[int]) -> int:
    """The smallest bucket that holds the longest of these rows of `split` (negative = padding)."""
    return bucket_for(int(split.lengths[rows[rows >= 0]].max(initial=1)), buckets)


def _cut(split: Split, rows: np.ndarray, weights: np.ndarray, buckets: list[int]) -> dict[str, np.ndarray]:
    """The features of the given rows of `split` (negative index = a padding row of zeros),
    cut to the bucket of the longest, with the rows' example_weights."""
    real = rows >= 0
    length = _bucket_of(split, rows, buckets)
    batch = {"example_weights": weights.astype(np.float32)}
    for name, values in split.features.items():
        taken = values[np.where(real, rows, 0)]
        taken[~real] = 0
        batch[name] = taken[..., :length] if name in SEQUENCE_FEATURES else taken
    return batch


GROUP_BATCHES = 64  # batches per length-sorted group (group_by_length)
FIT_BATCHES = 1000  # packed: the batches whose row counts `TrainBatches` fits its row buckets to


class TrainBatches:
    """Full, shuffled global batches of `batch_size` examples of a split, forever (see the
    module docstring).

    pack_examples=K > 0: each batch's examples are laid into rows of buckets[-1] tokens, up
    to K a row (`packing.first_fit`, longest first; length grouping does not apply), and the
    rows padded with empty ones to the smallest of `row_counts` that holds them: at most
    num_row_counts counts, multiples of `row_multiple`, fitted to the first FIT_BATCHES
    batches (a later batch that needs more rows gets batch_size rows, which always suffice).
    """

    def __init__(self, split: Split, batch_size: int, seed: int, buckets: list[int], group_by_length: bool = True,
                 pack_examples: int = 0, num_row_counts: int = 4, row_multiple: int = 1):
        self.split, self.batch_size, self.seed, self.buckets = split, batch_size, seed, buckets
        self.group_by_length, self.pack_examples = group_by_length and not pack_examples, pack_examples
        self._orders: dict[int, np.ndarray] = {}
        if len(split) < batch_size:
            raise RunSettingsError(f"the {split.name} split has {len(split)} examples, fewer than one batch "
                                   f"(config.train.batch_size={batch_size})")
        self.row_counts = [batch_size]
        if pack_examples:
            needed = [len(self._packed_rows(index)) for index in range(FIT_BATCHES)]
            self.row_counts = fitted_bucket_lengths(needed, batch_size, num_row_counts, row_multiple)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The example indices <int>[N] of `epoch` in order, from a permutation drawn from
        (seed, epoch), length-grouped with group_by_length."""
        if epoch not in self._orders:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(len(self.split))
            if self.group_by_length:
                order = self._grouped(order, rng, lead=-epoch * len(self.split) % self.batch_size)
            self._orders = {epoch: order, **{e: o for e, o in self._orders.items() if e == epoch - 1}}
        return self._orders[epoch]

    def _grouped(self, order: np.ndarray, rng: np.random.Generator, lead: int) -> np.ndarray:
        """`order` with batches of similar lengths, in groups of GROUP_BATCHES batches. The
        first `lead` rows complete the batch that the epoch before ends in: the batches cut
        after them are the stream's own (else, when the batch size does not divide the split,
        every later epoch's batch would straddle two length-sorted ones)."""
        size, group = self.batch_size, self.batch_size * GROUP_BATCHES
        pieces = [order[:lead]]
        for start in range(lead, len(order), group):
            rows = order[start:start + group]
            rows = rows[np.argsort(self.split.lengths[rows], kind="stable")]
            full = len(rows) // size
            batches = rows[:full * size].reshape(full, size)[rng.permutation(full)]
            pieces += [batches.reshape(-1), rows[full * size:]]
        return np.concatenate(pieces)

    def steps_per_epoch(self) -> int:
        """Batches in an epoch (the last one runs into the next epoch)."""
        return math.ceil(len(self.split) / self.batch_size)

    def examples(self, batch_index: int) -> np.ndarray:
        """<int>[B] examples [batch_index * B, (batch_index + 1) * B) of the stream of epochs."""
        first, last = batch_index * self.batch_size, (batch_index + 1) * self.batch_size
        epoch = first // len(self.split)
        start, pieces = epoch * len(self.split), []
        while start < last:
            pieces.append(self.epoch_order(epoch)[max(first - start, 0):last - start])
            epoch, start = epoch + 1, start + len(self.split)
        return np.concatenate(pieces)

    def _packed_rows(self, batch_index: int) -> np.ndarray:
        """<int32>[R, K] the batch's examples in rows (-1 = empty slot), R as few as first fit finds."""
        examples = self.examples(batch_index)
        longest_first = examples[np.argsort(-self.split.lengths[examples], kind="stable")]
        return packing.first_fit(self.split.lengths, longest_first, self.pack_examples, self.buckets[-1])

    def batch(self, batch_index: int) -> dict[str, np.ndarray]:
        """Global batch `batch_index` (all rows, every host the same)."""
        if not self.pack_examples:
            return _cut(self.split, self.examples(batch_index), np.ones(self.batch_size), self.buckets)
        slots = self._packed_rows(batch_index)
        empty = np.full((self._row_count(len(slots)) - len(slots), self.pack_examples), -1, np.int32)
        return packing.packed_batch(self.split, np.concatenate([slots, empty]), self.buckets[-1])

    def shape(self, batch_index: int) -> tuple[int, int]:
        """(rows, tokens) of batch `batch_index`: what its train step is compiled for."""
        if self.pack_examples:
            return self._row_count(len(self._packed_rows(batch_index))), self.buckets[-1]
        return self.batch_size, _bucket_of(self.split, self.examples(batch_index), self.buckets)

    def shape_order(self, start_batch: int, num_batches: int) -> list[tuple[int, int]]:
        """The shapes of batches [start_batch, start_batch + num_batches), in the order of
        their first use (what to compile first)."""
        order: list[tuple[int, int]] = []
        for index in range(start_batch, start_batch + num_batches):
            shape = self.shape(index)
            if shape not in order:
                order.append(shape)
                if len(order) == self._num_shapes():
                    break
        return order

    def _row_count(self, needed: int) -> int:
        """The rows a packed batch whose examples need `needed` rows is padded to."""
        return bucket_for(needed, self.row_counts + [self.batch_size])

    def _num_shapes(self) -> int:
        """How many shapes the batches can have."""
        return len({*self.row_counts, self.batch_size}) if self.pack_examples else len(self.buckets)

    def real_tokens(self, batch_index: int) -> int:
        """Tokens of the batch's examples (the rest of its rows is padding)."""
        return int(self.split.lengths[self.examples(batch_index)].sum())

    def batches(self, start_batch: int = 0) -> Iterator[dict[str, np.ndarray]]:
        index = start_batch
        while True:
            yield self.batch(index)
            index += 1


def batch_shape(batch: dict[str, np.ndarray]) -> tuple[int, int]:
    """(rows, tokens) of a training batch, as `TrainBatches.shape` gives them (multiple choice
    rows hold several sequences)."""
    return len(batch["input_ids"]), batch["input_ids"].shape[-1]


def longest_rows(split: Split, batch_size: int, seed: int, group_by_length: bool) -> np.ndarray:
    """<int>[ceil(N / batch_size)] the tokens of the longest example in each batch of epoch 0's
    order (what its bucket must hold; every example is in one), for unpacked batches, whose
    order does not depend on the buckets."""
    order = TrainBatches(split, batch_size, seed, [int(split.lengths.max())], group_by_length).epoch_order(0)
    lengths = split.lengths[order]
    return np.pad(lengths, (0, -len(lengths) % batch_size)).reshape(-1, batch_size).max(axis=1)


def eval_batches(split: Split, batch_size: int, buckets: list[int]
                 ) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """(global batch, the split's indices of its real rows <int>[n]) over `split`, shortest
    rows first (each batch is cut to the smallest bucket that holds it, so a short example
    is not padded to a long neighbour's length); the last batch is padded with zero rows of
    weight 0 to `batch_size`. Every example comes exactly once: put a batch's outputs back
    in the split's order with the indices."""
    order = np.argsort(split.lengths, kind="stable")
    for start in range(0, len(split), batch_size):
        real = order[start:start + batch_size]
        rows = np.full(batch_size, -1)
        rows[:len(real)] = real
        weights = np.zeros(batch_size)
        weights[:len(real)] = 1.0
        yield _cut(split, rows, weights, buckets), real


def eval_lengths(split: Split, batch_size: int, buckets: list[int]) -> list[int]:
    """The bucket lengths `eval_batches` cuts the split's batches to, shortest first."""
    longest = np.sort(split.lengths)[batch_size - 1::batch_size].tolist() + [int(split.lengths.max(initial=1))]
    return sorted({bucket_for(int(length), buckets) for length in longest})


class InSplitOrder:
    """Gathers the outputs of `eval_batches`' batches into arrays in the split's row order.

    `add(real, outputs)` takes a batch's real-row indices and its outputs {name: <[B, ...]>}
    (padding rows after the real ones); `arrays` is then {name: <[N, ...]>} and `count` the
    rows added so far. The outputs named in `sequence_outputs` have the sequence as their last
    axis, cut to the batch's bucket: they are padded back to the split's width with -1e9
    (floats: no argmax or softmax picks them) or -1 (integers).
    """

    def __init__(self, split: Split, sequence_outputs: tuple[str, ...] = ()):
        self.size, self.width = len(split), split.features["input_ids"].shape[-1]
        self.sequence_outputs = sequence_outputs
        self.arrays: dict[str, np.ndarray] = {}
        self.count = 0

    def add(self, real: np.ndarray, outputs: dict[str, Any]) -> None:
        self.count += len(real)
        for name, value in outputs.items():
            value = np.asarray(value)[:len(real)]
            sequence = name in self.sequence_outputs
            if name not in self.arrays:
                shape = (self.size, *value.shape[1:-1], self.width) if sequence else (self.size, *value.shape[1:])
                self.arrays[name] = np.full(shape, -1 if value.dtype.kind in "iu" else -1e9, value.dtype)
            if sequence:
                self.arrays[name][real, ..., :value.shape[-1]] = value
            else:
                self.arrays[name][real] = value


def padding_share(split: Split, batch_size: int, seed: int, buckets: list[int], group_by_length: bool,
                  num_batches: int = 200, pack_examples: int = 0) -> float:
    """Share of the token positions in `num_batches` training batches that are padding."""
    batches = TrainBatches(split, batch_size, seed, buckets, group_by_length, pack_examples)
    padded = real = 0
    for index in range(num_batches):
        rows, length = batches.shape(index)
        padded += rows * length
        real += batches.real_tokens(index)
    return 1.0 - real / padded

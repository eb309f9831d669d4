"""Batches of a tokenized `Split`, on the host, with length bucketing.

Training: the stream of units (examples, or packed rows of examples) is the concatenation
of epochs, epoch e coming from a permutation drawn from (seed, e); batch k is units
[k B, (k + 1) B) of that stream, so a batch is a pure function of its index (exact resume
at any step, across epoch ends) and every batch is full. Evaluation: the split sorted by
length, the last batch padded with rows of weight 0 (`example_weights`), so every example
counts exactly once.

Length bucketing: a batch is cut to the smallest bucket length that holds its longest
row instead of always carrying `max_seq_length` tokens. At most num_buckets lengths, so at
most num_buckets shapes are ever compiled, fitted to the training batches' longest rows
(`fitted_bucket_lengths` over `longest_rows`: the multiples of 8 that carry the fewest tokens;
on SST-2-like lengths at 128, 8/16/32/72 instead of the halvings 16/32/64/128 of
`bucket_lengths`, which packed rows use). With `group_by_length`, each epoch's permutation is
cut into groups of GROUP_BATCHES batches, each group sorted by length and cut into batches
whose order is then shuffled, so a batch holds rows of similar length (as tf.data's
bucket_by_sequence_length): a random batch of short sentences is padded to its longest,
usually 3-4x the typical one. Packing (`pack_examples`, classification tasks; see
packing.py) goes further: rows of several examples each. `padding_share` measures what
each saves.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

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


def _cut(split: Split, rows: np.ndarray, weights: np.ndarray, buckets: list[int]) -> dict[str, np.ndarray]:
    """The features of the given rows of `split` (negative index = a padding row of zeros),
    cut to the bucket of the longest, with the rows' example_weights."""
    real = rows >= 0
    length = bucket_for(int(split.lengths[rows[real]].max(initial=1)), buckets)
    batch = {"example_weights": weights.astype(np.float32)}
    for name, values in split.features.items():
        taken = values[np.where(real, rows, 0)]
        taken[~real] = 0
        batch[name] = taken[..., :length] if name in SEQUENCE_FEATURES else taken
    return batch


GROUP_BATCHES = 64  # batches per length-sorted group (group_by_length)


class TrainBatches:
    """Full, shuffled global batches of a split, forever (see the module docstring).

    pack_examples=K > 0: the units of an epoch are packed rows of up to K examples
    (`packing.first_fit` over the epoch's permutation; length grouping does not apply), and
    a batch is `batch_size` rows; else the units are examples.
    """

    def __init__(self, split: Split, batch_size: int, seed: int, buckets: list[int], group_by_length: bool = True,
                 pack_examples: int = 0):
        self.split, self.batch_size, self.seed, self.buckets = split, batch_size, seed, buckets
        self.group_by_length, self.pack_examples = group_by_length, pack_examples
        self._units: dict[int, np.ndarray] = {}
        self._epoch_sizes: list[int] = []  # units in epochs 0, 1, ... as far as needed so far
        if self.units_in_epoch(0) < batch_size:
            raise ValueError(f"the {split.name} split has {self.units_in_epoch(0)} "
                             f"{'packed rows' if pack_examples else 'examples'}, fewer than one batch "
                             f"(config.train.batch_size={batch_size})")

    def epoch_units(self, epoch: int) -> np.ndarray:
        """The units of `epoch` in order, from a permutation drawn from (seed, epoch): example
        indices <int>[N] (length-grouped with group_by_length) or, packed, rows <int>[R, K]."""
        if epoch not in self._units:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(len(self.split))
            if self.pack_examples:
                order = packing.first_fit(self.split.lengths, order, self.pack_examples, self.buckets[-1])
            elif self.group_by_length:
                order = self._grouped(order, rng)
            self._units = {epoch: order, **{e: o for e, o in self._units.items() if e == epoch - 1}}
        return self._units[epoch]

    def _grouped(self, order: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        size, group = self.batch_size, self.batch_size * GROUP_BATCHES
        pieces = []
        for start in range(0, len(order), group):
            rows = order[start:start + group]
            rows = rows[np.argsort(self.split.lengths[rows], kind="stable")]
            full = len(rows) // size
            batches = rows[:full * size].reshape(full, size)[rng.permutation(full)]
            pieces += [batches.reshape(-1), rows[full * size:]]
        return np.concatenate(pieces)

    def units_in_epoch(self, epoch: int) -> int:
        """Examples (or packed rows) in `epoch`; packed epochs differ a little in size."""
        if not self.pack_examples:
            return len(self.split)
        while len(self._epoch_sizes) <= epoch:
            self._epoch_sizes.append(len(self.epoch_units(len(self._epoch_sizes))))
        return self._epoch_sizes[epoch]

    def steps_per_epoch(self) -> int:
        """Batches in epoch 0 (packed epochs differ a little in size)."""
        return math.ceil(self.units_in_epoch(0) / self.batch_size)

    def _rows(self, batch_index: int) -> np.ndarray:
        """Units [batch_index * B, (batch_index + 1) * B) of the stream of epochs."""
        first, last = batch_index * self.batch_size, (batch_index + 1) * self.batch_size
        epoch = 0 if self.pack_examples else first // len(self.split)  # packed epochs differ in size
        start, pieces = epoch * len(self.split), []
        while start < last:
            size = self.units_in_epoch(epoch)
            if start + size > first:
                pieces.append(self.epoch_units(epoch)[max(first - start, 0):last - start])
            epoch, start = epoch + 1, start + size
        return np.concatenate(pieces)

    def batch(self, batch_index: int) -> dict[str, np.ndarray]:
        """Global batch `batch_index` (all rows, every host the same)."""
        rows = self._rows(batch_index)
        if self.pack_examples:
            return packing.packed_batch(self.split, rows, self._bucket(rows))
        return _cut(self.split, rows, np.ones(self.batch_size), self.buckets)

    def _bucket(self, rows: np.ndarray) -> int:
        """The bucket length a batch of these units is cut to."""
        return bucket_for(int(self.row_tokens(rows).max()), self.buckets)

    def row_tokens(self, rows: np.ndarray) -> np.ndarray:
        """<int>[B] tokens in each row of units <int>[B] (examples) or [B, K] (packed, -1 = empty)."""
        lengths = np.where(rows >= 0, self.split.lengths[np.maximum(rows, 0)], 0)
        return lengths.reshape(len(rows), -1).sum(axis=1)

    def bucket_order(self, start_batch: int, num_batches: int) -> list[int]:
        """The bucket lengths that batches [start_batch, start_batch + num_batches) are cut to,
        in the order of their first use (what to compile first)."""
        order: list[int] = []
        for index in range(start_batch, start_batch + num_batches):
            length = self._bucket(self._rows(index))
            if length not in order:
                order.append(length)
                if len(order) == len(self.buckets):
                    break
        return order

    def batches(self, start_batch: int = 0) -> Iterator[dict[str, np.ndarray]]:
        index = start_batch
        while True:
            yield self.batch(index)
            index += 1


def longest_rows(split: Split, batch_size: int, seed: int, group_by_length: bool) -> np.ndarray:
    """<int>[ceil(N / batch_size)] the tokens of the longest example in each batch of epoch 0's
    order (what its bucket must hold; every example is in one), for unpacked batches, whose
    order does not depend on the buckets."""
    units = TrainBatches(split, batch_size, seed, [int(split.lengths.max())], group_by_length).epoch_units(0)
    lengths = split.lengths[units]
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
        tokens = batches.row_tokens(batches._rows(index))
        padded += len(tokens) * bucket_for(int(tokens.max()), buckets)
        real += int(tokens.sum())
    return 1.0 - real / padded

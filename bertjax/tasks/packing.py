"""Packed fine-tuning batches: several short examples per row, each with its own [CLS].

Short-sentence tasks (SST-2's median is 11 tokens) waste most of a row on padding even
with length buckets. With `config.data.pack_examples = K`, a training step still takes
`batch_size` examples (the recipe does not change), but lays them end to end in rows as
long as the split's longest example (rounded up to 8), up to K a row; attention stays inside an example (block-diagonal,
through `sequence_ids`), positions restart at 0 for each, and the classifier reads each
example's own [CLS] (`cls_positions`); a tagger reads every token as before. An example is
never split across rows. The batch is then as many rows as its examples need (padded with
empty rows to one of a few row counts: `batching.TrainBatches`).

    first_fit(lengths, order, K, L) -> <int>[R, K] example indices per row (-1 = empty slot)
    packed_batch(split, slots, S) -> a batch of those rows, S tokens long:
        input_ids, segment_ids, input_mask, position_ids, sequence_ids <int32>[B, S] and the
        split's other token features (tagging: label_ids, label_weights) laid out the same;
        cls_positions <int32>[B, K]; per-example features (label) [B, K];
        example_weights <f32>[B, K] (0 = empty)
    model_inputs(batch) -> the packed keyword inputs of the model ({} for unpacked batches)

The packing is a pure function of the batch's examples, so a packed batch is still a pure
function of its index (exact resume).
"""

from __future__ import annotations

import numpy as np

from bertjax.tasks.common import SEQUENCE_FEATURES, Split

PACKED_FEATURES = ("position_ids", "sequence_ids", "cls_positions")


def first_fit(lengths: np.ndarray, order: np.ndarray, max_examples: int, max_length: int) -> np.ndarray:
    """Examples in `order`, each placed in the first row with room for its tokens (at most
    `max_length` in all) and fewer than `max_examples` examples so far; -> <int32>[R, K] rows
    of example indices in placement order, -1 for empty slots. Every example appears once
    (pass `order` longest first for the fewest rows: first-fit decreasing)."""
    used = np.zeros(len(order), np.int64)      # tokens in each row so far
    count = np.zeros(len(order), np.int64)     # examples in each row so far
    slots = np.full((len(order), max_examples), -1, np.int32)
    rows = 0
    for example in order:
        n = lengths[example]
        fits = np.flatnonzero((used[:rows] + n <= max_length) & (count[:rows] < max_examples))
        row = int(fits[0]) if len(fits) else rows
        rows = max(rows, row + 1)
        slots[row, count[row]] = example
        used[row] += n
        count[row] += 1
    return slots[:rows]


def packed_batch(split: Split, slots: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """Rows of examples <int>[B, K] (-1 = empty) -> one packed batch `length` tokens long
    (see the module docstring)."""
    batch_size, max_examples = slots.shape
    filled = slots >= 0
    examples = np.where(filled, slots, 0)
    sizes = np.where(filled, split.lengths[examples], 0)                # [B, K] tokens per example
    offsets = np.cumsum(sizes, axis=1) - sizes                          # where each example starts
    if sizes.sum(axis=1).max(initial=0) > length:
        raise ValueError(f"packed rows of {sizes.sum(axis=1).max()} tokens do not fit length {length}")

    # One entry per real token: its row, its column in the row, its example and position there.
    row, slot = np.nonzero(filled)
    counts = sizes[row, slot]
    token_row = np.repeat(row, counts)
    token_slot = np.repeat(slot, counts)
    position = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    column = offsets[token_row, token_slot] + position
    source = examples[token_row, token_slot]

    batch = {}
    for name, values in split.features.items():  # token features: ids, segments, tagging labels
        if name in SEQUENCE_FEATURES and name != "input_mask":
            batch[name] = np.zeros((batch_size, length), values.dtype)
            batch[name][token_row, column] = values[source, position]
    batch["position_ids"] = np.zeros((batch_size, length), np.int32)
    batch["position_ids"][token_row, column] = position
    batch["sequence_ids"] = np.zeros((batch_size, length), np.int32)
    batch["sequence_ids"][token_row, column] = token_slot + 1
    batch["input_mask"] = (batch["sequence_ids"] > 0).astype(split.features["input_mask"].dtype)
    batch["cls_positions"] = np.where(filled, offsets, 0).astype(np.int32)
    for name, values in split.features.items():
        if name not in batch and values.ndim == 1:  # per-example features: labels
            taken = values[examples]
            taken[~filled] = 0
            batch[name] = taken
    batch["example_weights"] = filled.astype(np.float32)
    return batch


def model_inputs(batch: dict) -> dict:
    """The model's packed keyword inputs (position_ids, sequence_ids, cls_positions), or {}."""
    return {name: batch[name] for name in PACKED_FEATURES if name in batch}

"""Packed fine-tuning batches: first-fit rows, the packed layout, exact resume, less padding,
and the same loss and gradients as the unpacked batch of the same examples (pre-training's
packing is tests/data/test_packing.py)."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from bertjax.models import (BertConfig, BertForSequenceClassification, BertForTokenClassification,
                            classification_sums, token_classification_sums)
from bertjax.tasks import batching, packing
from bertjax.tasks.common import Split, encode_pairs


def _split(tokenizer, count=40, seed=0):
    rng = np.random.default_rng(seed)
    words = "the fox lives in rivers and eats fish while the owl sleeps in a tree".split()
    texts_a = [" ".join(rng.choice(words, rng.integers(1, 9))) for _ in range(count)]
    texts_b = [" ".join(rng.choice(words, rng.integers(1, 6))) for _ in range(count)]
    features, lengths, _ = encode_pairs(tokenizer, texts_a, texts_b, max_seq_length=32)
    features["label"] = rng.integers(0, 3, count).astype(np.int32)
    return Split("train", features, lengths)


def test_first_fit_places_every_example_once_within_the_limits():
    lengths = np.random.default_rng(0).integers(3, 60, 2000).astype(np.int32)
    order = np.random.default_rng(1).permutation(2000)
    rows = packing.first_fit(lengths, order, max_examples=4, max_length=128)
    placed = rows[rows >= 0]
    assert sorted(placed.tolist()) == list(range(2000))
    tokens = np.where(rows >= 0, lengths[np.maximum(rows, 0)], 0).sum(axis=1)
    assert tokens.max() <= 128 and rows.shape[1] == 4
    assert np.all((rows[:, :-1] >= 0) >= (rows[:, 1:] >= 0))  # slots fill from the left
    assert len(rows) < 2000 / 2.5  # 31.5 tokens on average: most rows take 3 or 4 examples
    np.testing.assert_array_equal(rows, packing.first_fit(lengths, order, 4, 128))


def test_packed_batch_layout(demo_tokenizer):
    split = _split(demo_tokenizer)
    slots = np.array([[3, 7, -1], [5, -1, -1]])
    batch = packing.packed_batch(split, slots, length=32)
    n3, n7, n5 = split.lengths[[3, 7, 5]]
    assert n3 + n7 <= 32
    row = batch["input_ids"][0]
    np.testing.assert_array_equal(row[:n3], split.features["input_ids"][3, :n3])
    np.testing.assert_array_equal(row[n3:n3 + n7], split.features["input_ids"][7, :n7])
    assert row[n3 + n7:].sum() == 0
    np.testing.assert_array_equal(batch["segment_ids"][0, n3:n3 + n7], split.features["segment_ids"][7, :n7])
    assert batch["position_ids"][0, :n3 + n7].tolist() == list(range(n3)) + list(range(n7))
    assert batch["sequence_ids"][0].tolist() == [1] * n3 + [2] * n7 + [0] * (32 - n3 - n7)
    assert batch["sequence_ids"][1].tolist() == [1] * n5 + [0] * (32 - n5)
    assert batch["input_mask"].sum() == n3 + n7 + n5
    assert batch["cls_positions"].tolist() == [[0, n3, 0], [0, 0, 0]]
    assert (batch["input_ids"][0, [0, n3]] == demo_tokenizer.cls_id).all()
    labels = split.features["label"]
    assert batch["label"].tolist() == [[labels[3], labels[7], 0], [labels[5], 0, 0]]
    assert batch["example_weights"].tolist() == [[1, 1, 0], [1, 0, 0]]


def test_the_row_counts_are_fitted_over_several_epochs_of_a_short_one():
    """The row counts were fitted to the first epoch alone when it is shorter than FIT_BATCHES:
    on SST-2-like lengths (3,000 examples, 94 batches of 32 an epoch, up to 16 a row) 17 of the
    next four epochs' batches needed more rows than any fitted count and ran at 32 rows instead
    of 7-9, each such shape compiled mid-run (a review). Fitted over FIT_BATCHES batches, epochs
    included, none of the first five epochs' batches falls back."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(10), 0.6, 3000).astype(np.int32) + 2, 3, 66)
    split = Split("train", {"input_ids": np.zeros((len(lengths), 1), np.int32)}, lengths)
    batches = batching.TrainBatches(split, 32, 0, [72], group_by_length=False, pack_examples=16)
    rows = [batches.shape(index)[0] for index in range(5 * batches.steps_per_epoch())]
    assert set(rows) <= set(batches.row_counts) and max(batches.row_counts) < 16, (batches.row_counts, max(rows))


def test_packed_training_batches_are_the_unpacked_batches_examples_in_fewer_rows(demo_tokenizer):
    """Each step packs the same batch_size examples the unpacked stream gives it (every
    example once an epoch, across the epoch's end), into rows padded to a fitted row count
    (a multiple of row_multiple); a new object (a resumed run) builds the same batches."""
    split = _split(demo_tokenizer, count=50)
    make = lambda: batching.TrainBatches(split, batch_size=8, seed=3, buckets=[64], pack_examples=3,
                                         num_row_counts=2, row_multiple=2)
    batches = make()
    plain = batching.TrainBatches(split, batch_size=8, seed=3, buckets=[32], group_by_length=False)
    assert len(batches.row_counts) <= 2 and all(count % 2 == 0 for count in batches.row_counts)
    stream = [batches.batch(i) for i in range(15)]  # 120 examples: past the end of epoch 1
    for index, batch in enumerate(stream):
        slots = batch["cls_positions"].shape
        assert batch["input_ids"].shape == (slots[0], 64) and slots[1] == 3
        assert slots[0] in batches.row_counts + [8] and (index > 6 or slots[0] in batches.row_counts)
        assert batches.shape(index) == batching.batch_shape(batch)
        examples = plain.examples(index)
        np.testing.assert_array_equal(batches.examples(index), examples)
        packed = sorted(tuple(row[ids == k]) for row, ids in zip(batch["input_ids"], batch["sequence_ids"])
                        for k in range(1, 4) if (ids == k).any())
        assert packed == sorted(tuple(split.features["input_ids"][e, :split.lengths[e]]) for e in examples)
        assert batch["example_weights"].sum() == 8
        assert sorted(batch["label"][batch["example_weights"] > 0]) == sorted(split.features["label"][examples])
    assert sum(len(batch["input_ids"]) for batch in stream) <= 15 * 4  # 3 examples a row, most rows
    first_two_epochs = np.concatenate([batches.examples(i) for i in range(13)])[:100]
    assert sorted(first_two_epochs[:50]) == sorted(first_two_epochs[50:]) == list(range(50))
    for name, value in make().batch(14).items():
        np.testing.assert_array_equal(value, stream[14][name], err_msg=name)


def test_packing_cuts_the_padding_of_short_sentence_tasks():
    """The SST-2-like lengths of test_bucketing_and_length_grouping_cut_the_padding_of_short_sentence_tasks
    (batch 32, length 128, 4 buckets, 13.5 tokens on average): 0.395 of the positions are padding
    with length grouping. Packed, each step's 32 examples in rows of 72 tokens (the longest
    example's length, as fine-tuning picks) padded to one of 4 row counts: 0.328 with up to 4
    examples a row (4 x 13.5 fill 54 of 72), 0.109 with 8, 0.085 with 16; 0.141 with 16 in
    rows of 128, whose row counts are coarser (measured 2026-11-27)."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(10), 0.6, 20_000).astype(np.int32) + 2, 3, 66)
    split = Split("train", {"input_ids": np.zeros((len(lengths), 1), np.int32)}, lengths)
    grouped = batching.padding_share(split, 32, 0, batching.bucket_lengths(128, 4), True)
    rows = batching.fitted_bucket_lengths(lengths, 128, 1)
    assert rows == [72]
    packed = [batching.padding_share(split, 32, 0, rows, False, pack_examples=k) for k in (4, 8, 16)]
    long_rows = batching.padding_share(split, 32, 0, [128], False, pack_examples=16)
    np.testing.assert_allclose([grouped, *packed, long_rows], [0.395, 0.328, 0.109, 0.085, 0.141], atol=0.005)


def _same_loss_and_gradients(tokenizer, model_class, num_labels, split, slots, loss_sums):
    """Packed rows of `slots` and the plain batch of the same examples (0, 1, ...) through one
    model without dropout: asserts the same loss and gradients; -> (packed batch, plain batch,
    packed logits, plain logits). loss_sums(logits, batch) -> (summed loss, its count)."""
    packed = packing.packed_batch(split, slots, length=32)
    plain = batching._cut(split, np.arange((slots >= 0).sum()), np.ones((slots >= 0).sum()), [32])
    config = BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_position_embeddings=32,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = model_class(config, num_labels=num_labels)
    inputs = lambda b: (b["input_ids"], b["segment_ids"], b["input_mask"])
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), *inputs(plain))["params"])

    def loss(params, batch):
        logits = model.apply({"params": params}, *inputs(batch), **packing.model_inputs(batch))
        total, count = loss_sums(logits, batch)
        return total / count, logits

    loss_and_grads = jax.jit(jax.value_and_grad(loss, has_aux=True))  # one compile per shape, not one per op
    (packed_loss, packed_logits), packed_grads = loss_and_grads(params, packed)
    (plain_loss, plain_logits), plain_grads = loss_and_grads(params, plain)
    np.testing.assert_allclose(packed_loss, plain_loss, rtol=1e-5)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(packed_grads), jax.tree.leaves(plain_grads)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4, err_msg=jax.tree_util.keystr(path))
    assert np.abs(np.asarray(plain_grads["classifier"]["kernel"])).max() > 1e-3
    return packed, plain, np.asarray(packed_logits), np.asarray(plain_logits)


@pytest.mark.parametrize("num_labels", [3, 1])
def test_packed_rows_give_the_loss_and_gradients_of_the_unpacked_batch(demo_tokenizer, num_labels):
    split = _split(demo_tokenizer)
    if num_labels == 1:
        split.features["label"] = split.features["label"].astype(np.float32) / 2
    slots = packing.first_fit(split.lengths, np.arange(12), max_examples=3, max_length=32)

    def loss_sums(logits, batch):
        return classification_sums(logits, batch["label"], batch["example_weights"])["loss"], batch["example_weights"].sum()

    _, _, packed_logits, plain_logits = _same_loss_and_gradients(
        demo_tokenizer, BertForSequenceClassification, num_labels, split, slots, loss_sums)
    assert len(slots) < 12 and packed_logits.shape == (len(slots), 3, num_labels)
    filled = slots >= 0
    order = np.argsort(slots[filled])
    np.testing.assert_allclose(packed_logits[filled][order], plain_logits, atol=1e-5)


def test_packed_tagging_rows_give_the_logits_loss_and_gradients_of_the_unpacked_batch(demo_tokenizer):
    """Token labels and weights travel with their tokens; padding tokens weigh 0."""
    split = _split(demo_tokenizer)
    rng = np.random.default_rng(5)
    columns = np.arange(32)[None, :]
    real = (columns >= 1) & (columns < split.lengths[:, None] - 1)  # as tagging: not [CLS], [SEP], pads
    split.features["label_ids"] = np.where(real, rng.integers(0, 5, real.shape), 0).astype(np.int32)
    split.features["label_weights"] = (real & (rng.random(real.shape) < 0.7)).astype(np.float32)
    del split.features["label"]
    slots = packing.first_fit(split.lengths, np.arange(12), max_examples=4, max_length=32)

    def loss_sums(logits, batch):
        weights = batch["label_weights"]
        return token_classification_sums(logits, batch["label_ids"], weights)["loss"], weights.sum()

    packed, plain, packed_logits, plain_logits = _same_loss_and_gradients(
        demo_tokenizer, BertForTokenClassification, 5, split, slots, loss_sums)
    assert len(slots) < 12 and packed["label_weights"].sum() == split.features["label_weights"][:12].sum()
    # Each token's logits, read in (example, position) order from both layouts.
    example = np.take_along_axis(slots, np.maximum(packed["sequence_ids"] - 1, 0), axis=1)
    weighted = packed["label_weights"] > 0
    order = np.lexsort((packed["position_ids"][weighted], example[weighted]))
    np.testing.assert_allclose(packed_logits[weighted][order], plain_logits[plain["label_weights"] > 0], atol=1e-5)

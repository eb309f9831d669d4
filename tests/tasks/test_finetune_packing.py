"""Packed fine-tuning batches: first-fit rows, the packed layout, exact resume, less padding,
and the same loss and gradients as the unpacked batch of the same examples (pre-training's
packing is tests/data/test_packing.py)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.models import BertConfig, BertForSequenceClassification, classification_sums
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
    rows = packing.first_fit(lengths, order, max_examples=4, max_length=128, window=256)
    placed = rows[rows >= 0]
    assert sorted(placed.tolist()) == list(range(2000))
    tokens = np.where(rows >= 0, lengths[np.maximum(rows, 0)], 0).sum(axis=1)
    assert tokens.max() <= 128 and rows.shape[1] == 4
    assert np.all((rows[:, :-1] >= 0) >= (rows[:, 1:] >= 0))  # slots fill from the left
    assert len(rows) < 2000 / 2.5  # 31.5 tokens on average: most rows take 3 or 4 examples
    np.testing.assert_array_equal(rows, packing.first_fit(lengths, order, 4, 128, window=256))


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


def test_packed_training_batches_cover_each_epoch_and_resume_exactly(demo_tokenizer):
    split = _split(demo_tokenizer, count=50)
    make = lambda: batching.TrainBatches(split, batch_size=4, seed=3, buckets=[16, 32], pack_examples=3)
    batches = make()
    epoch_rows = [batches.units_in_epoch(e) for e in range(3)]
    assert all(50 / 3 <= rows < 50 for rows in epoch_rows)
    stream = [batches.batch(i) for i in range(sum(epoch_rows[:2]) // 4 + 1)]  # past the end of epoch 1
    ids = np.concatenate([batches._rows(i) for i in range(len(stream))])
    assert sorted(ids[:epoch_rows[0]][ids[:epoch_rows[0]] >= 0]) == list(range(50))
    second = ids[epoch_rows[0]:sum(epoch_rows[:2])]
    assert sorted(second[second >= 0]) == list(range(50))
    for batch in stream:
        assert batch["input_ids"].shape[1] in (16, 32)
        assert batch["label"].shape == batch["cls_positions"].shape == (4, 3)
    index = len(stream) - 1
    for name, value in make().batch(index).items():  # a new object (a resumed run) builds the same batch
        np.testing.assert_array_equal(value, stream[index][name], err_msg=name)


def test_packing_cuts_the_padding_of_short_sentence_tasks():
    """The SST-2-like lengths of test_bucketing_and_length_grouping_cut_the_padding_of_short_sentence_tasks
    (batch 32, length 128, 4 buckets, 13.5 tokens on average): 0.395 of the positions are padding
    with length grouping; packing leaves 0.579 with up to 4 examples per row (a batch's fullest
    row of 4 still picks the 128 bucket), 0.176 with 8 and 0.018 with 16 (measured 2026-11-24)."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(10), 0.6, 20_000).astype(np.int32) + 2, 3, 66)
    split = Split("train", {"input_ids": np.zeros((len(lengths), 1), np.int32)}, lengths)
    buckets = batching.bucket_lengths(128, 4)
    grouped = batching.padding_share(split, 32, 0, buckets, True)
    packed = [batching.padding_share(split, 32, 0, buckets, False, pack_examples=k) for k in (4, 8, 16)]
    np.testing.assert_allclose([grouped, *packed], [0.395, 0.579, 0.176, 0.018], atol=0.005)


@pytest.mark.parametrize("num_labels", [3, 1])
def test_packed_rows_give_the_loss_and_gradients_of_the_unpacked_batch(demo_tokenizer, num_labels):
    split = _split(demo_tokenizer)
    if num_labels == 1:
        split.features["label"] = split.features["label"].astype(np.float32) / 2
    slots = packing.first_fit(split.lengths, np.arange(12), max_examples=3, max_length=32)
    packed = packing.packed_batch(split, slots, length=32)
    plain = batching._cut(split, np.arange(12), np.ones(12), [32])
    config = BertConfig.preset("tiny", vocab_size=demo_tokenizer.vocab_size, max_position_embeddings=32,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(config, num_labels=num_labels)
    inputs = lambda b: (b["input_ids"], b["segment_ids"], b["input_mask"])
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), *inputs(plain))["params"])

    def loss(params, batch):
        logits = model.apply({"params": params}, *inputs(batch), **packing.model_inputs(batch))
        sums = classification_sums(logits, batch["label"], batch["example_weights"])
        return sums["loss"] / batch["example_weights"].sum(), logits

    loss_and_grads = jax.jit(jax.value_and_grad(loss, has_aux=True))  # one compile per shape, not one per op
    (packed_loss, packed_logits), packed_grads = loss_and_grads(params, packed)
    (plain_loss, plain_logits), plain_grads = loss_and_grads(params, plain)
    assert len(slots) < 12 and packed_logits.shape == (len(slots), 3, num_labels)
    filled = slots >= 0
    order = np.argsort(slots[filled])
    np.testing.assert_allclose(np.asarray(packed_logits)[filled][order], plain_logits, atol=1e-5)
    np.testing.assert_allclose(packed_loss, plain_loss, rtol=1e-5)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(packed_grads), jax.tree.leaves(plain_grads)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4, err_msg=jax.tree_util.keystr(path))
    assert np.abs(np.asarray(plain_grads["classifier"]["kernel"])).max() > 1e-3

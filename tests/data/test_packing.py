"""Sequence packing for pre-training: pairing.pack_rows, the packed pipeline (less padding,
deterministic, exact resume) and the model's loss on packed rows equal to the unpacked batch's."""

import jax
import flax.linen as nn
import numpy as np
import pytest
import tensorflow as tf

import synthetic
from bertjax.data import pairing, pretraining
from configs import pretrain

MAX_PREDICTIONS = 4


def _pairs(seed=0, count=9, length=32):
    """Laid-out, masked pairs of random lengths, left-aligned: the input of pack_rows."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, length + 1, count)
    real = np.arange(length)[None, :] < lengths[:, None]
    ids = np.where(real, rng.integers(5, 60, (count, length)), 0).astype(np.int32)
    ids[:, 0] = 2  # [CLS]
    predictions = np.minimum(rng.integers(1, MAX_PREDICTIONS + 1, count), lengths - 1)
    weights = (np.arange(MAX_PREDICTIONS)[None, :] < predictions[:, None]).astype(np.float32)
    positions = np.zeros((count, MAX_PREDICTIONS), np.int32)
    for i, (n, p) in enumerate(zip(lengths, predictions)):
        positions[i, :p] = np.sort(rng.choice(np.arange(1, n), p, replace=False))
    return {"input_ids": ids, "input_mask": real.astype(np.int32),
            "segment_ids": (np.arange(length)[None, :] >= lengths[:, None] // 2).astype(np.int32) * real,
            "masked_lm_positions": positions, "masked_lm_ids": np.where(weights > 0, positions + 100, 0).astype(np.int32),
            "masked_lm_weights": weights, "next_sentence_labels": rng.integers(0, 2, count).astype(np.int32)}


def _pack(pairs, max_pairs=3):
    return {k: v.numpy() for k, v in pairing.pack_rows(pairs, max_pairs=max_pairs,
                                                       max_predictions=MAX_PREDICTIONS).items()}


def test_pack_rows_keeps_every_pair_whole_and_in_first_fit_order():
    pairs = _pairs()
    rows = _pack(pairs)
    lengths = pairs["input_mask"].sum(1)
    assert rows["input_mask"].sum() == lengths.sum() and len(rows["input_ids"]) < len(lengths)
    assert (rows["next_sentence_weights"].sum(1) <= 3).all() and rows["next_sentence_weights"].sum() == len(lengths)
    found = 0
    for r in range(len(rows["input_ids"])):
        for slot in np.flatnonzero(rows["next_sentence_weights"][r]):
            start = rows["cls_positions"][r, slot]
            span = rows["sequence_ids"][r] == slot + 1
            n = span.sum()
            i = next(i for i in range(len(lengths)) if lengths[i] == n and np.array_equal(
                pairs["input_ids"][i, :n], rows["input_ids"][r, span]))  # the pair it came from, intact
            assert np.flatnonzero(span)[0] == start and np.array_equal(rows["position_ids"][r, span], np.arange(n))
            np.testing.assert_array_equal(rows["segment_ids"][r, span], pairs["segment_ids"][i, :n])
            assert rows["next_sentence_labels"][r, slot] == pairs["next_sentence_labels"][i]
            found += 1
        real = rows["masked_lm_weights"][r] > 0
        assert rows["masked_lm_weights"][r].sum() <= MAX_PREDICTIONS
        assert (np.diff(rows["masked_lm_positions"][r][real]) > 0).all()  # ascending, as unpacked rows
        np.testing.assert_array_equal(rows["masked_lm_ids"][r][real], rows["masked_lm_positions"][r][real] -
                                      rows["cls_positions"][r][rows["sequence_ids"][r][
                                          rows["masked_lm_positions"][r][real]] - 1] + 100)  # shifted by the offset
    assert found == len(lengths)
    # The placement is first fit, as the docstring says (a review: any placement that kept the
    # pairs whole passed): each pair in order into the first row with room for its tokens,
    # its predictions and one more pair, at that row's next slot and position.
    used = np.zeros((len(lengths), 3), np.int64)  # tokens, predictions, pairs of each row
    for i, (n, p) in enumerate(zip(lengths, pairs["masked_lm_weights"].sum(1).astype(int))):
        r = next(r for r in range(len(used)) if used[r, 0] + n <= pairs["input_ids"].shape[1]
                 and used[r, 1] + p <= MAX_PREDICTIONS and used[r, 2] < 3)
        slot = used[r, 2]
        assert rows["cls_positions"][r, slot] == used[r, 0], (i, r, slot)
        assert np.array_equal(rows["input_ids"][r, rows["sequence_ids"][r] == slot + 1], pairs["input_ids"][i, :n])
        used[r] += (n, p, 1)


def test_pack_rows_eager_equals_in_tf_data():
    pairs = _pairs(seed=3)
    eager = _pack(pairs)
    graph = next(iter(tf.data.Dataset.from_tensors(pairs).map(
        lambda p: pairing.pack_rows(p, max_pairs=3, max_predictions=MAX_PREDICTIONS))))
    for key in eager:
        np.testing.assert_array_equal(eager[key], graph[key].numpy())


def test_packed_loss_equals_the_unpacked_batch_on_the_same_pairs():
    """Same MLM predictions and NSP pairs: the losses (and metrics) agree within 1e-5."""
    from bertjax.models import BertConfig, BertForPreTraining
    from bertjax.pretrain import model_inputs, objective

    pairs = _pairs(seed=1)
    rows = _pack(pairs)
    config = BertConfig.preset("tiny", vocab_size=128, max_position_embeddings=32, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config)
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), **model_inputs(pairs))["params"])
    task = objective(model)

    @jax.jit
    def metrics(batch):
        sums, counts = task.sums(task.apply(params, batch, None), batch), task.counts(batch)
        return {name: sums[name] / counts[name] for name in sums}

    unpacked, packed = metrics(pairs), metrics(rows)
    for name in unpacked:
        np.testing.assert_allclose(packed[name], unpacked[name], rtol=1e-5, atol=1e-6, err_msg=name)


def _pipeline(paths, pack_pairs, **overrides):
    config = pretrain.get_config("tiny").data
    config.update(max_seq_length=64, max_predictions_per_seq=10, shuffle_buffer=64, instance_shuffle_buffer=64,
                  pack_pairs=pack_pairs, short_seq_prob=0.5, **overrides)
    return pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=8,
                                           tokenizer=synthetic.tokenizer_for(60))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return synthetic.write_shards(str(tmp_path_factory.mktemp("shards")), 60, 2, seed=5)


def test_packed_pipeline_has_less_padding_and_intact_pairs(shards):
    plain = [b for _, b in zip(range(10), _pipeline(shards, 0).batches())]
    packed = [b for _, b in zip(range(10), _pipeline(shards, 3).batches())]
    padding = lambda batches: 1 - np.mean(np.concatenate([b["input_mask"] for b in batches]))
    assert padding(packed) < padding(plain) / 2
    assert packed[0]["next_sentence_labels"].shape == (8, 3) and packed[0]["cls_positions"].shape == (8, 3)
    for batch in packed:
        for row, sequence, cls in zip(batch["input_ids"], batch["sequence_ids"], batch["cls_positions"]):
            for slot in range(1, sequence.max() + 1):
                span = row[sequence == slot]
                assert span[0] == synthetic.tokenizer_for(60).cls_id
                assert np.flatnonzero(sequence == slot)[0] == cls[slot - 1]


def test_packed_pipeline_is_deterministic_and_resumes_exactly(shards):
    fresh = [b for _, b in zip(range(40), _pipeline(shards, 2).batches())]
    pipeline = _pipeline(shards, 2)
    assert _pipeline(shards, 2).holds_at_least(pipeline.epoch_size(0))
    assert not _pipeline(shards, 2).holds_at_least(pipeline.epoch_size(0) + 1)
    assert pipeline.epoch_size(0) < 40 * 8 // 2  # the 40 batches span more than two epochs of rows
    for start in (0, 17, 35):
        for want, got in zip(fresh[start:start + 3], [b for _, b in zip(range(3), pipeline.batches(start))]):
            for key in want:
                np.testing.assert_array_equal(want[key], got[key], err_msg=f"batch {start} {key}")

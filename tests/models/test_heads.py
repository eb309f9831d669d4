"""Task heads: parameter layout, tied MLM decoder, and every loss against a numpy reference."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.models import (BertConfig, BertForMultipleChoice, BertForPreTraining, BertForQuestionAnswering,
                            BertForSequenceClassification, BertForTokenClassification, classification_loss,
                            multiple_choice_loss, multiple_choice_sums, pretraining_loss, span_loss,
                            token_classification_loss)

CONFIG = BertConfig.preset("tiny", vocab_size=53, max_position_embeddings=32)
RNG = np.random.default_rng(0)
IDS = jnp.asarray(RNG.integers(5, 53, (2, 10)), jnp.int32)
TYPES = jnp.zeros_like(IDS)
MASK = jnp.ones_like(IDS).at[1, 7:].set(0)


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))


def test_pretraining_head_gathers_positions_and_ties_the_decoder():
    model = BertForPreTraining(CONFIG)
    positions = jnp.asarray([[1, 4, 0], [2, 3, 6]], jnp.int32)
    params = nn.unbox(model.init(jax.random.key(0), IDS, TYPES, MASK, positions)["params"])
    assert set(params) == {"bert", "mlm", "nsp"}
    assert set(params["mlm"]) == {"transform", "transform_norm", "output_bias"}  # no separate decoder matrix
    params = jax.tree_util.tree_map(lambda x: x, params)
    params["mlm"]["output_bias"] = jnp.arange(53, dtype=jnp.float32) / 100
    mlm_logits, nsp_logits = model.apply({"params": params}, IDS, TYPES, MASK, positions)
    assert mlm_logits.shape == (2, 3, 53) and nsp_logits.shape == (2, 2)

    from bertjax.models import BertEncoder
    from bertjax.models.primitives import activation
    sequence, pooled = BertEncoder(CONFIG).apply({"params": params["bert"]}, IDS, TYPES, MASK)
    hidden = np.take_along_axis(np.asarray(sequence), np.asarray(positions)[:, :, None], axis=1)
    mlm = params["mlm"]
    h = np.asarray(activation("gelu")(hidden @ mlm["transform"]["kernel"] + mlm["transform"]["bias"]))
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-12)
    h = h * mlm["transform_norm"]["scale"] + mlm["transform_norm"]["bias"]
    expected = h @ np.asarray(params["bert"]["embeddings"]["word_embeddings"]["embedding"]).T + mlm["output_bias"]
    np.testing.assert_allclose(mlm_logits, expected, atol=1e-4)
    np.testing.assert_allclose(nsp_logits, pooled @ params["nsp"]["kernel"] + params["nsp"]["bias"], atol=1e-5)


def test_masked_lm_only_pretraining_leaves_the_pooler_untrained():
    """next_sentence_prediction=False (the modern recipe): no "nsp" head, a loss of masked LM
    alone, and no gradient reaches the pooler (a head fitted to a constant label would
    saturate it)."""
    model = BertForPreTraining(CONFIG, next_sentence_prediction=False)
    positions = jnp.asarray([[1, 4, 0], [2, 3, 6]], jnp.int32)
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), IDS, TYPES, MASK, positions)["params"])
    assert set(params) == {"bert", "mlm"}
    batch = {"masked_lm_ids": np.array([[3, 9, 0], [4, 5, 6]]),
             "masked_lm_weights": np.array([[1, 1, 0], [1, 1, 1]], np.float32),
             "next_sentence_labels": np.array([0, 0])}

    def loss_fn(p):
        mlm_logits, nsp_logits = model.apply({"params": p}, IDS, TYPES, MASK, positions)
        assert nsp_logits is None
        return pretraining_loss(mlm_logits, nsp_logits, batch)

    (loss, metrics), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params)
    assert set(metrics) == {"mlm_loss", "mlm_accuracy"}
    np.testing.assert_allclose(loss, metrics["mlm_loss"], rtol=1e-6)
    assert loss > 1.0
    pooler = jax.tree_util.tree_leaves(grads["bert"]["pooler"])
    assert pooler and all(not np.any(g) for g in pooler)
    assert np.abs(grads["bert"]["embeddings"]["word_embeddings"]["embedding"]).sum() > 0


def test_pretraining_loss_matches_the_original_formula():
    logits = RNG.normal(size=(2, 3, 53)).astype(np.float32)
    nsp_logits = RNG.normal(size=(2, 2)).astype(np.float32)
    batch = {"masked_lm_ids": np.array([[3, 9, 0], [4, 5, 6]]),
             "masked_lm_weights": np.array([[1, 1, 0], [1, 1, 1]], np.float32),
             "next_sentence_labels": np.array([0, 1])}
    loss, metrics = pretraining_loss(jnp.asarray(logits), jnp.asarray(nsp_logits), batch)
    per_token = -np.take_along_axis(_log_softmax(logits), batch["masked_lm_ids"][..., None], -1)[..., 0]
    mlm = (per_token * batch["masked_lm_weights"]).sum() / (batch["masked_lm_weights"].sum() + 1e-5)
    nsp = -np.take_along_axis(_log_softmax(nsp_logits), batch["next_sentence_labels"][:, None], -1).mean()
    np.testing.assert_allclose(metrics["mlm_loss"], mlm, rtol=1e-5)
    np.testing.assert_allclose(metrics["nsp_loss"], nsp, rtol=1e-5)
    np.testing.assert_allclose(loss, mlm + nsp, rtol=1e-5)
    correct = (logits.argmax(-1) == batch["masked_lm_ids"]) * batch["masked_lm_weights"]
    np.testing.assert_allclose(metrics["mlm_accuracy"], correct.sum() / (5 + 1e-5), rtol=1e-5)


def test_sequence_classification_and_regression():
    model = BertForSequenceClassification(CONFIG, num_labels=3)
    params = model.init(jax.random.key(1), IDS, TYPES, MASK)["params"]
    logits = model.apply({"params": params}, IDS, TYPES, MASK)
    assert logits.shape == (2, 3)
    labels = np.array([2, 0])
    loss, metrics = classification_loss(logits, labels)
    expected = -np.take_along_axis(_log_softmax(logits), labels[:, None], -1).mean()
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    regression, _ = classification_loss(jnp.asarray([[0.5], [2.0]]), jnp.asarray([1.0, 1.0]))
    np.testing.assert_allclose(regression, (0.25 + 1.0) / 2)


def test_the_heads_scores_are_float32_in_a_bfloat16_model():
    """Regression scores, class and span logits are compared, thresholded and reported: in
    bfloat16 a score in [2, 4) would lie on a grid of 1/64. The output layer computes in float32."""
    config = CONFIG.replace(dtype="bfloat16")
    models = [(BertForSequenceClassification(config, num_labels=1), (IDS, TYPES, MASK)),
              (BertForTokenClassification(config, num_labels=3), (IDS, TYPES, MASK)),
              (BertForQuestionAnswering(config), (IDS, TYPES, MASK)),
              (BertForMultipleChoice(config), (IDS[None], TYPES[None], MASK[None]))]
    for model, inputs in models:
        params = model.init(jax.random.key(1), *inputs)["params"]
        scale = jax.tree_util.tree_map(lambda p: p * 40.0, params)  # scores of a few units, as trained ones
        outputs = model.apply({"params": scale}, *inputs)
        for scores in outputs if isinstance(outputs, tuple) else (outputs,):
            values = np.asarray(scores)
            assert scores.dtype == jnp.float32 and np.isfinite(values).all() and np.any(
                values != np.asarray(scores.astype(jnp.bfloat16), np.float32)), type(model).__name__


def test_token_classification_ignores_weightless_tokens():
    model = BertForTokenClassification(CONFIG, num_labels=5)
    params = model.init(jax.random.key(1), IDS, TYPES, MASK)
    logits = model.apply(params, IDS, TYPES, MASK)
    assert logits.shape == (2, 10, 5)
    labels = RNG.integers(0, 5, (2, 10))
    weights = np.asarray(MASK, np.float32)
    loss, _ = token_classification_loss(logits, labels, weights)
    per_token = -np.take_along_axis(_log_softmax(logits), labels[..., None], -1)[..., 0]
    np.testing.assert_allclose(loss, (per_token * weights).sum() / weights.sum(), rtol=1e-5)
    other_labels = labels.copy()
    other_labels[1, 7:] = (labels[1, 7:] + 1) % 5  # changing padded labels changes nothing
    np.testing.assert_allclose(token_classification_loss(logits, other_labels, weights)[0], loss)


def test_question_answering_masks_padding_and_averages_losses():
    model = BertForQuestionAnswering(CONFIG)
    params = model.init(jax.random.key(1), IDS, TYPES, MASK)
    start, end = model.apply(params, IDS, TYPES, MASK)
    assert start.shape == end.shape == (2, 10)
    assert float(start[1, 8]) <= -1e8
    starts, ends = np.array([1, 2]), np.array([3, 6])
    loss, _ = span_loss(start, end, starts, ends)
    ce = lambda lg, y: -np.take_along_axis(_log_softmax(lg), y[:, None], -1).mean()
    np.testing.assert_allclose(loss, (ce(start, starts) + ce(end, ends)) / 2, rtol=1e-5)


def test_multiple_choice_scores_each_pair_with_shared_weights():
    model = BertForMultipleChoice(CONFIG)
    ids = jnp.stack([IDS, IDS[::-1], IDS], axis=1)  # [B=2, C=3, S=10]; choice 0 == choice 2
    params = model.init(jax.random.key(1), ids)
    scores = model.apply(params, ids)
    assert scores.shape == (2, 3)
    np.testing.assert_allclose(scores[:, 0], scores[:, 2], atol=1e-6)
    single = model.apply(params, ids[:, :1])  # one choice is still a softmax, not a regression
    loss, metrics = multiple_choice_loss(single, jnp.asarray([0, 0]))
    np.testing.assert_allclose(loss, 0.0, atol=1e-6)
    assert float(metrics["accuracy"]) == 1.0


def test_multiple_choice_sums_never_count_a_padding_choice():
    """Example 0 has 2 real choices of 4: its padding choices' scores, however high, change neither
    the loss nor the accuracy, which equal those over its real choices alone."""
    scores = jnp.asarray([[0.5, 1.5, 9.0, 9.0], [2.0, 0.0, 1.0, -1.0]])
    mask = jnp.asarray([[1, 1, 0, 0], [1, 1, 1, 1]])
    labels, weights = jnp.asarray([1, 0]), jnp.asarray([1.0, 0.5])
    sums = multiple_choice_sums(scores, labels, weights, mask)
    ce = lambda row, y: -_log_softmax(np.asarray(row))[y]
    np.testing.assert_allclose(sums["loss"], ce(scores[0, :2], 1) + 0.5 * ce(scores[1], 0), rtol=1e-6)
    assert float(sums["accuracy"]) == 1.5
    unmasked = multiple_choice_sums(scores, labels, weights)
    assert float(unmasked["accuracy"]) == 0.5 and float(unmasked["loss"]) > float(sums["loss"]) + 5


@pytest.mark.parametrize("head", [BertForSequenceClassification, BertForTokenClassification])
def test_heads_keep_the_encoder_under_bert(head):
    params = head(CONFIG, num_labels=2).init(jax.random.key(0), IDS)["params"]
    assert set(params) == {"bert", "classifier"}

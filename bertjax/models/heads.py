"""BERT with task heads, and one loss function per head.

Every model keeps the encoder under the "bert" parameter subtree, so fine-tuning can
restore it from a pre-training checkpoint and add a freshly initialised head:

  BertForPreTraining              "mlm" (transform + LayerNorm + tied decoder + output_bias), "nsp"
  BertForSequenceClassification   "classifier" on the pooled [CLS] (num_labels=1: regression)
  BertForTokenClassification      "classifier" on every token
  BertForQuestionAnswering        "qa_outputs": start/end logits
  BertForMultipleChoice           "classifier" (1 output) on each (context, choice) pair's [CLS]

Losses return (scalar loss, dict of metrics); logits are computed in the compute dtype
and the losses in float32.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bertjax.models.bert import BertEncoder, activation, dense, layer_norm
from bertjax.models.config import BertConfig

Array = jax.Array


def _encode(module: nn.Module, input_ids, token_type_ids, attention_mask, deterministic):
    return BertEncoder(module.config, name="bert")(input_ids, token_type_ids, attention_mask, deterministic)


class MaskedLMHead(nn.Module):
    """Dense + activation + LayerNorm, then the decoder tied to the word embeddings + bias."""

    config: BertConfig

    @nn.compact
    def __call__(self, hidden: Array, decoder) -> Array:
        """<dtype>[B, P, H] gathered hidden states -> <dtype>[B, P, vocab] logits.

        decoder: the encoder's tied `attend`, [..., H] -> [..., vocab].
        """
        config = self.config
        hidden = dense(config, config.hidden_size, ("embed", "mlp"), "transform")(hidden)
        hidden = layer_norm(config, "transform_norm")(activation(config.hidden_act)(hidden))
        bias = self.param("output_bias", nn.with_logical_partitioning(nn.initializers.zeros_init(), ("vocab",)),
                          (config.vocab_size,), config.param_dtype)
        return decoder(hidden) + bias.astype(config.dtype)


def gather_positions(sequence: Array, positions: Array) -> Array:
    """<T>[B, S, H] and <int>[B, P] -> <T>[B, P, H]: the hidden states at the given positions."""
    return jnp.take_along_axis(sequence, positions[:, :, None].astype(jnp.int32), axis=1)


class BertForPreTraining(nn.Module):
    """Masked LM over the gathered masked positions + next-sentence prediction.

    __call__(input_ids, token_type_ids, attention_mask <int>[B, S], masked_lm_positions <int>[B, P])
      -> (mlm_logits <dtype>[B, P, vocab], nsp_logits <dtype>[B, 2])
    """

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids, attention_mask, masked_lm_positions, deterministic=True):
        encoder = BertEncoder(self.config, name="bert")
        sequence, pooled = encoder(input_ids, token_type_ids, attention_mask, deterministic)
        masked_hidden = gather_positions(sequence, masked_lm_positions)
        mlm_logits = MaskedLMHead(self.config, name="mlm")(masked_hidden, encoder.attend)
        nsp_logits = dense(self.config, 2, ("embed", "classes"), "nsp")(pooled)
        return mlm_logits, nsp_logits


def pretraining_loss(mlm_logits: Array, nsp_logits: Array, batch: dict[str, Array]) -> tuple[Array, dict]:
    """The original loss: weighted-mean MLM cross-entropy (denominator + 1e-5) + mean NSP.

    batch: masked_lm_ids <int>[B, P], masked_lm_weights <f32>[B, P], next_sentence_labels <int>[B].
    """
    weights = batch["masked_lm_weights"].astype(jnp.float32)
    mlm_logits = mlm_logits.astype(jnp.float32)
    mlm_xent = optax.softmax_cross_entropy_with_integer_labels(mlm_logits, batch["masked_lm_ids"])
    mlm_denominator = jnp.sum(weights) + 1e-5
    mlm_loss = jnp.sum(mlm_xent * weights) / mlm_denominator
    mlm_correct = (jnp.argmax(mlm_logits, -1) == batch["masked_lm_ids"]).astype(jnp.float32)
    nsp_logits = nsp_logits.astype(jnp.float32)
    labels = batch["next_sentence_labels"].reshape(-1)
    nsp_loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(nsp_logits, labels))
    metrics = {
        "mlm_loss": mlm_loss,
        "mlm_accuracy": jnp.sum(mlm_correct * weights) / mlm_denominator,
        "nsp_loss": nsp_loss,
        "nsp_accuracy": jnp.mean((jnp.argmax(nsp_logits, -1) == labels).astype(jnp.float32)),
    }
    return mlm_loss + nsp_loss, metrics


class BertForSequenceClassification(nn.Module):
    """Dropout + dense on the pooled [CLS] vector -> <dtype>[B, num_labels] (1 = regression)."""

    config: BertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic=True):
        _, pooled = _encode(self, input_ids, token_type_ids, attention_mask, deterministic)
        pooled = nn.Dropout(self.config.hidden_dropout_prob)(pooled, deterministic=deterministic)
        return dense(self.config, self.num_labels, ("embed", "classes"), "classifier")(pooled)


def classification_loss(logits: Array, labels: Array) -> tuple[Array, dict]:
    """Cross-entropy over <int>[B] labels, or mean squared error when logits are [B, 1]."""
    logits = logits.astype(jnp.float32)
    if logits.shape[-1] == 1:
        loss = jnp.mean(jnp.square(logits[:, 0] - labels.astype(jnp.float32)))
        return loss, {"mse": loss}
    loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))
    return loss, {"accuracy": jnp.mean((jnp.argmax(logits, -1) == labels).astype(jnp.float32))}


class BertForTokenClassification(nn.Module):
    """Dropout + dense on every token -> <dtype>[B, S, num_labels]."""

    config: BertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic=True):
        sequence, _ = _encode(self, input_ids, token_type_ids, attention_mask, deterministic)
        sequence = nn.Dropout(self.config.hidden_dropout_prob)(sequence, deterministic=deterministic)
        return dense(self.config, self.num_labels, ("embed", "classes"), "classifier")(sequence)


def token_classification_loss(logits: Array, labels: Array, label_weights: Array) -> tuple[Array, dict]:
    """Weighted-mean cross-entropy over tokens; label_weights <f32>[B, S] is 0 for pads/sub-words."""
    logits = logits.astype(jnp.float32)
    weights = label_weights.astype(jnp.float32)
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    denominator = jnp.maximum(jnp.sum(weights), 1e-5)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return jnp.sum(xent * weights) / denominator, {"accuracy": jnp.sum(correct * weights) / denominator}


class BertForQuestionAnswering(nn.Module):
    """Start and end logits over the sequence: two <f32>[B, S]; padding gets a large negative."""

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic=True):
        sequence, _ = _encode(self, input_ids, token_type_ids, attention_mask, deterministic)
        logits = dense(self.config, 2, ("embed", "classes"), "qa_outputs")(sequence).astype(jnp.float32)
        if attention_mask is not None:
            logits = jnp.where(attention_mask[..., None].astype(bool), logits, -1e9)
        return logits[..., 0], logits[..., 1]


def span_loss(start_logits: Array, end_logits: Array, start_positions: Array, end_positions: Array):
    """Mean of the start and end cross-entropies (the original run_squad.py loss)."""
    start = optax.softmax_cross_entropy_with_integer_labels(start_logits.astype(jnp.float32), start_positions)
    end = optax.softmax_cross_entropy_with_integer_labels(end_logits.astype(jnp.float32), end_positions)
    exact = (jnp.argmax(start_logits, -1) == start_positions) & (jnp.argmax(end_logits, -1) == end_positions)
    return jnp.mean(start + end) / 2, {"span_accuracy": jnp.mean(exact.astype(jnp.float32))}


class BertForMultipleChoice(nn.Module):
    """Inputs <int>[B, C, S]: each (context, choice) pair's pooled [CLS] -> one score; -> [B, C]."""

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic=True):
        batch, choices, length = input_ids.shape
        flat = lambda x: None if x is None else x.reshape(batch * choices, length)
        _, pooled = _encode(self, flat(input_ids), flat(token_type_ids), flat(attention_mask), deterministic)
        pooled = nn.Dropout(self.config.hidden_dropout_prob)(pooled, deterministic=deterministic)
        scores = dense(self.config, 1, ("embed", "classes"), "classifier")(pooled)
        return scores.reshape(batch, choices)


def multiple_choice_loss(logits: Array, labels: Array) -> tuple[Array, dict]:
    """Softmax over choices: <f32>[B, C] scores and <int>[B] correct choice."""
    logits = logits.astype(jnp.float32)
    loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))
    return loss, {"accuracy": jnp.mean((jnp.argmax(logits, -1) == labels).astype(jnp.float32))}

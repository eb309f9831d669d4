"""BERT with task heads, and one loss function per head.

Every model keeps the encoder under the "bert" parameter subtree, so fine-tuning can
restore it from a pre-training checkpoint and add a freshly initialised head:

  BertForPreTraining              "mlm" (transform + LayerNorm + tied decoder + output_bias), "nsp"
                                  (none when next_sentence_prediction=False: masked LM only)
  BertForSequenceClassification   "classifier" on the pooled [CLS] (num_labels=1: regression)
  BertForTokenClassification      "classifier" on every token
  BertForQuestionAnswering        "qa_outputs": start/end logits
  BertForMultipleChoice           "classifier" (1 output) on each (context, choice) pair's [CLS]

The fine-tuning heads read the features `config` names (`encoder_features`): by default the
last layer (and the pooled [CLS] for sentence-level heads), as Google's scripts; with the
feature-based options (BertConfig.feature_layers, feature_combine, tagging_head; the BERT
paper's section 5.3) several layers' hidden states, concatenated or mixed by learned softmax
weights ("feature_mix": weights [K], scale []), the sentence-level heads reading the [CLS]
position of those (no pooler; the real tokens' mean where config.pooler is "mean", as a
ModernBERT's pooler reads them), and for tagging optionally a two-layer BiLSTM ("bilstm")
under the classifier. `frozen_encoder=True` runs the encoder deterministically (its
activations are fixed features; the trainer then differentiates only the head).

Each loss comes as sums over the batch (`*_sums`) and their denominators (`*_counts`,
`example_counts`), so a global batch split into micro-batches, or an evaluation split
into batches with a padded last one, averages exactly once over all of it
(`mean_metrics`); the `*_loss` functions are the plain per-batch means. The task heads' and
NSP's output layers compute in float32 (`logits_layer`), the masked-LM's in the compute
dtype (float32 with `float32_logits`, as fill-mask reports it); the losses in float32.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bertjax.models import bf16_matmul
from bertjax.models.bert import BertEncoder, token_mean
from bertjax.models.primitives import activation, dense, layer_norm
from bertjax.models.config import BertConfig
from bertjax.models.dropout import Dropout
from bertjax.models.lstm import lstm_recurrence
from bertjax.sharding import Axis

Array = jax.Array

# Top-level params a feature-based head adds beside its classifier.
FEATURE_HEADS = ("feature_mix", "bilstm")
# The token-level transform of the tagging and span-QA heads (config.token_transform).
TOKEN_TRANSFORM = ("token_transform", "token_transform_norm")


class ScalarMix(nn.Module):
    """ELMo's scalar mix: scale * sum_k softmax(weights)_k layers[k], weights learned from 0 (a mean)."""

    config: BertConfig

    @nn.compact
    def __call__(self, layers: Array) -> Array:
        """<dtype>[K, B, S, H] -> <dtype>[B, S, H]."""
        param_dtype = self.config.param_dtype
        weights = self.param("weights", nn.initializers.zeros_init(), (layers.shape[0],), param_dtype)
        scale = self.param("scale", nn.initializers.ones_init(), (), param_dtype)
        mix = jax.nn.softmax(weights.astype(jnp.float32)) * scale.astype(jnp.float32)
        return jnp.einsum("k,k...->...", mix.astype(layers.dtype), layers)


_LSTM_GATES = ("i", "f", "g", "o")  # input, forget, cell candidate, output


class _LSTMWeights(nn.Module):
    """One direction's weights in flax's OptimizedLSTMCell layout (checkpoints of either
    implementation load): input kernels i<gate> [F, U], recurrent h<gate> kernel [U, U] and
    bias [U]. Returns them concatenated over the gates i, f, g, o: [F, 4U], [U, 4U], [4U]."""

    units: int
    param_dtype: Any

    @nn.compact
    def __call__(self, features: int) -> tuple[Array, Array, Array]:
        inputs = [_Param(name=f"i{gate}")("kernel", nn.initializers.lecun_normal(), (features, self.units),
                                          self.param_dtype) for gate in _LSTM_GATES]
        recurrent = [_Param(name=f"h{gate}") for gate in _LSTM_GATES]
        kernels = [r("kernel", _orthogonal_float32, (self.units, self.units), self.param_dtype) for r in recurrent]
        biases = [r("bias", nn.initializers.zeros_init(), (self.units,), self.param_dtype) for r in recurrent]
        return jnp.concatenate(inputs, -1), jnp.concatenate(kernels, -1), jnp.concatenate(biases, -1)


def _orthogonal_float32(key: Array, shape: tuple[int, ...], dtype) -> Array:
    """An orthogonal matrix drawn in float32 (its QR has no 16-bit kernel), then cast to `dtype`."""
    return nn.initializers.orthogonal()(key, shape, jnp.float32).astype(dtype)


class _Param(nn.Module):
    """A named holder of parameters (keeps the "i<gate>"/"h<gate>" sub-trees)."""

    @nn.compact
    def __call__(self, name: str, init, shape: tuple[int, ...], dtype) -> Array:
        return self.param(name, init, shape, dtype)


def _input_projection(config: BertConfig, x: Array, w_input: Array) -> Array:
    """Both directions' input projections of every step, x [B, S, F] . w_input [2, F, G] ->
    [2, B, S, G]. With bfloat16 products (matmul_precision) one [B S, F] x [F, 2 G] product of
    `bf16_matmul`, as the dense layers multiply: the largest products of the head, where AMX
    is fastest."""
    if config.matmul_precision != "bfloat16":
        return jnp.einsum("bsf,dfg->dbsg", x, w_input)
    batch, length, features = x.shape
    kernel = jnp.moveaxis(w_input, 0, 1).reshape(features, -1)  # [F, 2 G]: the directions side by side
    rows = bf16_matmul.matmul(x.reshape(batch * length, features), kernel).astype(x.dtype)
    return jnp.moveaxis(rows.reshape(batch, length, 2, -1), 2, 0)


def _recurrent_product_dtype(config: BertConfig) -> str:
    """The recurrence's product operands: bfloat16 where the dense layers' are (matmul_precision),
    else the compute dtype."""
    return "bfloat16" if config.matmul_precision == "bfloat16" else config.dtype


class BiLSTM(nn.Module):
    """Two bidirectional LSTM layers (`lstm_hidden_size` units per direction):
    <dtype>[B, S, F] and attention_mask <int>[B, S] -> <dtype>[B, S, 2 x units].

    Each row runs over its real tokens only (sequence lengths from the mask, which must be
    ones then padding): the backward direction starts at the last real token. The maths is
    flax's OptimizedLSTMCell (and its parameters), arranged for the matmul units: the input
    projections of every step and both directions are one product outside the recurrence,
    and one scan steps both directions together (the backward one over each row's reversed
    real tokens), so each step is a single [2, B, U] x [2, U, 4U] product and the gates
    (`lstm_recurrence`, whose backward takes the recurrent weights' gradient as one product)."""

    NUM_LAYERS = 2

    config: BertConfig

    @nn.compact
    def __call__(self, x: Array, attention_mask: Array | None) -> Array:
        config = self.config
        batch, length, _ = x.shape
        units = config.lstm_hidden_size
        lengths = (jnp.full((batch,), length, jnp.int32) if attention_mask is None
                   else jnp.sum(attention_mask.astype(jnp.int32), axis=-1))
        steps = jnp.arange(length)[None, :]
        real = steps < lengths[:, None]                                          # [B, S]
        reverse = jnp.where(real, lengths[:, None] - 1 - steps, steps)[..., None]  # its own inverse
        for i in range(self.NUM_LAYERS):  # params: forward_<i>, backward_<i>
            weights = [_LSTMWeights(units, config.param_dtype, name=f"{direction}_{i}")(x.shape[-1])
                       for direction in ("forward", "backward")]
            w_input, w_recurrent, bias = (jnp.stack(w).astype(config.dtype) for w in zip(*weights))
            projected = _input_projection(config, x.astype(config.dtype), w_input) + bias[:, None, None]
            projected = jnp.stack([projected[0], jnp.take_along_axis(projected[1], reverse, axis=1)])
            hidden = lstm_recurrence(jnp.moveaxis(projected, 2, 0), w_recurrent, real.T,
                                     _recurrent_product_dtype(config))
            hidden = jnp.moveaxis(hidden, 0, 2).astype(config.dtype)     # [2, B, S, U]
            x = jnp.concatenate([hidden[0], jnp.take_along_axis(hidden[1], reverse, axis=1)], axis=-1)
        return x


def encode(module: nn.Module, input_ids, token_type_ids, attention_mask, deterministic,
           **packed) -> tuple[Array, Array | None]:
    """The encoder ("bert", under `module`) as far as no head parameter is involved: what a
    frozen encoder gives its head, the same every epoch (`tasks.feature_cache` keeps it).

    Plain heads: (the last layer <dtype>[B, S, H], the pooled [CLS] [B, H] or [B, K, H] packed).
    Feature-based (config.feature_based): (the hidden states at config.feature_layer_indices
    <dtype>[B, S, K, H], None).
    """
    config = module.config
    encoder = BertEncoder(config, name="bert")
    if not config.feature_based:
        return encoder(input_ids, token_type_ids, attention_mask, deterministic, **packed)
    _, _, hidden_states = encoder(input_ids, token_type_ids, attention_mask, deterministic, output_hidden_states=True,
                                  **packed)
    return jnp.stack([hidden_states[i] for i in config.feature_layer_indices], axis=2), None


class FrozenEncoder(nn.Module):
    """What a frozen encoder gives a head, for `tasks.feature_cache`: `encode` on input_ids,
    token_type_ids, attention_mask <int>[B, (C,) S] (params {"bert": ...}), deterministic, and of
    it what the head reads: with `reads_tokens` every token's features <dtype>[B, S, *tail],
    else the sentence vector [B, (C,) *tail] (the pooled [CLS], or the feature layers at [CLS],
    or their mean over the real tokens with pooler "mean": `sentence_vector`); tail = (H,), or
    (K, H) for K feature layers."""

    config: BertConfig
    reads_tokens: bool

    @nn.compact
    def __call__(self, input_ids, token_type_ids, attention_mask):
        shape = input_ids.shape
        flat = lambda x: x.reshape(-1, shape[-1])  # noqa: E731  (choices are rows of their own)
        sequence, pooled = encode(self, flat(input_ids), flat(token_type_ids), flat(attention_mask), True)
        if self.reads_tokens:  # tagging and span QA: no choice axis
            return sequence
        sentence = sentence_vector(self.config, sequence, pooled, flat(attention_mask))
        return sentence.reshape(*shape[:-1], *sentence.shape[1:])


def encoder_features(module: nn.Module, input_ids, token_type_ids, attention_mask, deterministic, frozen_encoder,
                     encoded: tuple[Array, Array | None] | None = None, **packed) -> tuple[Array, Array | None]:
    """The encoder ("bert") as `module.config` says -> (features <dtype>[B, S, F], pooled).

    Plain heads: the last layer (F = H) and the pooled [CLS] <dtype>[B, H] ([B, K, H] packed).
    Feature-based (config.feature_based): the hidden states at config.feature_layer_indices,
    combined by config.feature_combine (F = H, or K x H for concat), and pooled None.
    frozen_encoder: the encoder runs deterministically (fixed features).
    encoded: `encode`'s result computed earlier (a frozen encoder's, cached): the encoder does
    not run; a sentence-level head may pass only the [CLS] position (S = 1) or only pooled.
    """
    config = module.config
    if encoded is None:
        encoded = encode(module, input_ids, token_type_ids, attention_mask, deterministic or frozen_encoder, **packed)
    if not config.feature_based:
        return encoded
    layers, _ = encoded                                                    # [B, S, K, H]
    if config.feature_combine == "weighted_sum":
        return ScalarMix(config, name="feature_mix")(jnp.moveaxis(layers, 2, 0)), None
    return layers.reshape(*layers.shape[:2], -1), None  # concat in the listed order; "last": the one layer


def sentence_vector(config: BertConfig, features: Array, pooled: Array | None, attention_mask: Array | None,
                    cls_positions: Array | None = None, sequence_ids: Array | None = None, cached: bool = False
                    ) -> Array:
    """The vector a sentence-level head reads: the pooled one, or (feature-based) the features
    <dtype>[B, S, *F] at [CLS], or with config.pooler "mean" (a ModernBERT's) their mean over
    the sequence's real tokens, as its pooler reads them -> [B, *F]; packed rows (cls_positions
    <int>[B, K], sequence_ids <int>[B, S]) -> [B, K, *F]. cached: `features` hold that vector at
    position 0 already (`FrozenEncoder`'s)."""
    if pooled is not None:
        return pooled
    if config.pooler == "mean" and not cached:
        if cls_positions is not None:
            return token_mean(features, sequence_ids, cls_positions.shape[1])
        return token_mean(features, jnp.ones(features.shape[:2], jnp.int32) if attention_mask is None
                          else attention_mask)
    return features[:, 0] if cls_positions is None else gather_positions(features, cls_positions)


class MaskedLMHead(nn.Module):
    """Dense + activation + LayerNorm, then the decoder tied to the word embeddings + bias.
    float32_logits: logits summed and returned in float32 whatever the compute dtype (the
    probabilities fill-mask reports; training keeps the compute dtype's smaller logits)."""

    config: BertConfig
    float32_logits: bool = False

    @nn.compact
    def __call__(self, hidden: Array, decoder) -> Array:
        """<dtype>[B, P, H] gathered hidden states -> <dtype>[B, P, vocab] logits (float32
        with float32_logits).

        decoder: the encoder's tied `attend`, [..., H] (, float32_logits) -> [..., vocab].
        """
        config = self.config
        hidden = dense(config, config.hidden_size, (Axis.EMBED, Axis.MLP), "transform", role="out")(hidden)
        hidden = layer_norm(config, "transform_norm")(activation(config.hidden_act)(hidden))
        bias = self.param("output_bias", nn.with_logical_partitioning(nn.initializers.zeros_init(), (Axis.VOCAB,)),
                          (config.vocab_size,), config.param_dtype)
        if self.float32_logits:
            return decoder(hidden, float32_logits=True) + bias.astype(jnp.float32)
        return decoder(hidden) + bias.astype(config.dtype)


def token_transform(config: BertConfig, sequence: Array) -> Array:
    """With config.token_transform, ModernBERT's prediction head over every token <dtype>[B, S, F]
    -> [B, S, H]: dense, activation, norm (params "token_transform", "token_transform_norm" of
    the calling task model's compact method); else `sequence` as it is."""
    if not config.token_transform:
        return sequence
    sequence = dense(config, config.hidden_size, (Axis.EMBED, Axis.MLP), TOKEN_TRANSFORM[0], role="out")(sequence)
    return layer_norm(config, TOKEN_TRANSFORM[1])(activation(config.hidden_act)(sequence))


def logits_layer(config: BertConfig, outputs: int, name: str) -> nn.Dense:
    """A head's last dense layer, a float32 product whatever the compute dtype and products:
    its few outputs are the scores that are compared, thresholded and reported (in bfloat16 a
    regression score in [2, 4) lies on a grid of 1/64, SQuAD's null odds on a coarse one)."""
    return dense(config.replace(dtype="float32", matmul_precision="default"), outputs, (Axis.EMBED, Axis.CLASSES),
                 name, bias=True, role="final")


def gather_positions(sequence: Array, positions: Array) -> Array:
    """<T>[B, S, H] and <int>[B, P] -> <T>[B, P, H]: the hidden states at the given positions."""
    return jnp.take_along_axis(sequence, positions[:, :, None].astype(jnp.int32), axis=1)


class BertForPreTraining(nn.Module):
    """Masked LM over the gathered masked positions + next-sentence prediction.

    __call__(input_ids, token_type_ids, attention_mask <int>[B, S], masked_lm_positions <int>[B, P])
      -> (mlm_logits <dtype>[B, P, vocab], nsp_logits <dtype>[B, 2])
    Packed rows (K NSP pairs per row; see BertEncoder) also pass position_ids and
    sequence_ids <int>[B, S] and cls_positions <int>[B, K], and get nsp_logits [B, K, 2].
    With next_sentence_prediction=False (the modern recipe) there is no "nsp" head and
    nsp_logits is None: a head trained on a constant label would drive the pooler to one
    saturated output, which fine-tuning then has to undo.
    """

    config: BertConfig
    next_sentence_prediction: bool = True

    @nn.compact
    def __call__(self, input_ids, token_type_ids, attention_mask, masked_lm_positions, deterministic=True, *,
                 position_ids=None, sequence_ids=None, cls_positions=None):
        encoder = BertEncoder(self.config, name="bert")
        sequence, pooled = encoder(input_ids, token_type_ids, attention_mask, deterministic, position_ids=position_ids,
                                   sequence_ids=sequence_ids, pooled_positions=cls_positions)
        masked_hidden = gather_positions(sequence, masked_lm_positions)
        mlm_logits = MaskedLMHead(self.config, name="mlm")(masked_hidden, encoder.attend)
        if not self.next_sentence_prediction:
            return mlm_logits, None
        nsp_logits = logits_layer(self.config, 2, "nsp")(pooled)
        return mlm_logits, nsp_logits


def _nsp_weights(batch: dict[str, Array]) -> Array:
    """<f32>[B] or, packed, [B, K]: 1 for each real pair (`next_sentence_weights`, packed rows)."""
    if "next_sentence_weights" in batch:
        return batch["next_sentence_weights"].astype(jnp.float32)
    return jnp.ones(batch["next_sentence_labels"].shape, jnp.float32)


def pretraining_sums(mlm_logits: Array, nsp_logits: Array | None, batch: dict[str, Array]) -> dict[str, Array]:
    """Masked-LM and NSP cross-entropy and accuracy, summed (MLM weighted by masked_lm_weights);
    masked LM only when nsp_logits is None.

    batch: masked_lm_ids <int>[B, P], masked_lm_weights <f32>[B, P], next_sentence_labels <int>[B]
    (packed rows: [B, K] with next_sentence_weights <f32>[B, K], 0 for an empty pair slot).
    """
    weights = batch["masked_lm_weights"].astype(jnp.float32)
    mlm_logits = mlm_logits.astype(jnp.float32)
    mlm_xent = optax.softmax_cross_entropy_with_integer_labels(mlm_logits, batch["masked_lm_ids"])
    mlm_correct = (jnp.argmax(mlm_logits, -1) == batch["masked_lm_ids"]).astype(jnp.float32)
    sums = {"mlm_loss": jnp.sum(mlm_xent * weights), "mlm_accuracy": jnp.sum(mlm_correct * weights)}
    if nsp_logits is None:
        return sums
    nsp_logits = nsp_logits.astype(jnp.float32).reshape(-1, 2)
    labels = batch["next_sentence_labels"].reshape(-1)
    nsp_weights = _nsp_weights(batch).reshape(-1)
    return {
        **sums,
        "nsp_loss": jnp.sum(optax.softmax_cross_entropy_with_integer_labels(nsp_logits, labels) * nsp_weights),
        "nsp_accuracy": jnp.sum((jnp.argmax(nsp_logits, -1) == labels).astype(jnp.float32) * nsp_weights),
    }


def pretraining_counts(batch: dict[str, Array], next_sentence_prediction: bool = True) -> dict[str, Array]:
    """The denominators of `pretraining_sums`: real predictions for MLM, pairs for NSP."""
    predictions = jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))
    counts = {"mlm_loss": predictions, "mlm_accuracy": predictions}
    if not next_sentence_prediction:
        return counts
    pairs = jnp.sum(_nsp_weights(batch))
    return {**counts, "nsp_loss": pairs, "nsp_accuracy": pairs}


def pretraining_loss_terms(next_sentence_prediction: bool = True) -> tuple[str, ...]:
    """The metrics whose means add up to the pre-training loss."""
    return ("mlm_loss", "nsp_loss") if next_sentence_prediction else ("mlm_loss",)


def mean_metrics(sums: dict[str, Array], counts: dict[str, Array]) -> dict[str, Array]:
    """{name: sums[name] / counts[name]}; a count of 0 (nothing to average) gives 0."""
    return {name: value / jnp.maximum(counts[name], 1e-5) for name, value in sums.items()}


def pretraining_loss(mlm_logits: Array, nsp_logits: Array | None, batch: dict[str, Array]) -> tuple[Array, dict]:
    """The loss on one batch: weighted-mean MLM cross-entropy (+ mean NSP cross-entropy)."""
    nsp = nsp_logits is not None
    metrics = mean_metrics(pretraining_sums(mlm_logits, nsp_logits, batch), pretraining_counts(batch, nsp))
    return sum(metrics[name] for name in pretraining_loss_terms(nsp)), metrics


class BertForSequenceClassification(nn.Module):
    """Dropout + dense on the pooled [CLS] vector -> <dtype>[B, num_labels] (1 = regression).

    Packed rows (several examples per row; see BertEncoder) also pass position_ids,
    sequence_ids <int>[B, S] and cls_positions <int>[B, K], and get logits [B, K, num_labels].
    """

    config: BertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic=True, *,
                 position_ids=None, sequence_ids=None, cls_positions=None, frozen_encoder=False, encoded=None):
        features, pooled = encoder_features(self, input_ids, token_type_ids, attention_mask, deterministic,
                                            frozen_encoder, encoded, position_ids=position_ids,
                                            sequence_ids=sequence_ids, pooled_positions=cls_positions)
        pooled = sentence_vector(self.config, features, pooled, attention_mask, cls_positions, sequence_ids,
                                 cached=encoded is not None)
        pooled = Dropout(self.config.hidden_dropout_prob)(pooled, deterministic=deterministic)
        return logits_layer(self.config, self.num_labels, "classifier")(pooled)


def classification_sums(logits: Array, labels: Array, weights: Array) -> dict[str, Array]:
    """<f32>[B, L] logits, labels <int>[B] (or <f32>[B] when L == 1: regression), weights <f32>[B]
    (0 for padding rows) -> weighted sums: cross-entropy and accuracy, or squared error.
    Packed rows: [B, K, L] logits with [B, K] labels and weights (0 for empty slots)."""
    logits = logits.astype(jnp.float32).reshape(-1, logits.shape[-1])
    labels, weights = labels.reshape(-1), weights.astype(jnp.float32).reshape(-1)
    if logits.shape[-1] == 1:
        squared = jnp.square(logits[:, 0] - labels.astype(jnp.float32))
        return {"loss": jnp.sum(squared * weights), "mse": jnp.sum(squared * weights)}
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return {"loss": jnp.sum(xent * weights), "accuracy": jnp.sum(correct * weights)}


def example_counts(weights: Array, names: tuple[str, ...]) -> dict[str, Array]:
    """The same denominator, the weighted number of examples (or tokens), for every metric in `names`."""
    total = jnp.sum(weights.astype(jnp.float32))
    return {name: total for name in names}


def classification_loss(logits: Array, labels: Array) -> tuple[Array, dict]:
    """Mean cross-entropy over <int>[B] labels, or mean squared error when logits are [B, 1]."""
    weights = jnp.ones(labels.shape[0], jnp.float32)
    sums = classification_sums(logits, labels, weights)
    metrics = mean_metrics(sums, example_counts(weights, tuple(sums)))
    return metrics["loss"], {k: v for k, v in metrics.items() if k != "loss"}


class BertForTokenClassification(nn.Module):
    """Dropout + dense on every token -> <dtype>[B, S, num_labels]; with config.tagging_head
    "bilstm", a two-layer BiLSTM ("bilstm") over the features first; with
    config.token_transform, ModernBERT's dense, activation, norm before the dropout.

    Packed rows (several sentences per row; see BertEncoder; linear head only) also pass
    position_ids, sequence_ids <int>[B, S] and cls_positions <int>[B, K].
    """

    config: BertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic=True, *,
                 position_ids=None, sequence_ids=None, cls_positions=None, frozen_encoder=False, encoded=None):
        sequence, _ = encoder_features(self, input_ids, token_type_ids, attention_mask, deterministic, frozen_encoder,
                                       encoded, position_ids=position_ids, sequence_ids=sequence_ids,
                                       pooled_positions=cls_positions)
        if self.config.tagging_head == "bilstm":
            if sequence_ids is not None:
                raise ValueError("the BiLSTM tagging head reads whole rows: packed rows need tagging_head 'linear'")
            sequence = BiLSTM(self.config, name="bilstm")(sequence, attention_mask)
        sequence = token_transform(self.config, sequence)
        sequence = Dropout(self.config.hidden_dropout_prob)(sequence, deterministic=deterministic)
        return logits_layer(self.config, self.num_labels, "classifier")(sequence)


def token_classification_sums(logits: Array, labels: Array, label_weights: Array) -> dict[str, Array]:
    """<f32>[B, S, L] logits, labels <int>[B, S], label_weights <f32>[B, S] (0 for pads and
    non-first sub-words) -> weighted token cross-entropy and accuracy sums."""
    logits, weights = logits.astype(jnp.float32), label_weights.astype(jnp.float32)
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return {"loss": jnp.sum(xent * weights), "accuracy": jnp.sum(correct * weights)}


def token_classification_loss(logits: Array, labels: Array, label_weights: Array) -> tuple[Array, dict]:
    """Weighted-mean cross-entropy over tokens; label_weights <f32>[B, S] is 0 for pads/sub-words."""
    sums = token_classification_sums(logits, labels, label_weights)
    metrics = mean_metrics(sums, example_counts(label_weights, tuple(sums)))
    return metrics["loss"], {"accuracy": metrics["accuracy"]}


class BertForQuestionAnswering(nn.Module):
    """Start and end logits over the sequence: two <f32>[B, S]; padding gets a large negative.
    With config.token_transform, ModernBERT's dense, activation, norm on every token first."""

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic=True, *,
                 frozen_encoder=False, encoded=None):
        sequence, _ = encoder_features(self, input_ids, token_type_ids, attention_mask, deterministic, frozen_encoder,
                                       encoded)
        sequence = token_transform(self.config, sequence)
        logits = logits_layer(self.config, 2, "qa_outputs")(sequence)
        if attention_mask is not None:
            logits = jnp.where(attention_mask[..., None].astype(bool), logits, -1e9)
        return logits[..., 0], logits[..., 1]


def span_sums(start_logits: Array, end_logits: Array, start_positions: Array, end_positions: Array,
              weights: Array) -> dict[str, Array]:
    """Start/end logits <f32>[B, S], gold positions <int>[B], weights <f32>[B] -> weighted sums of
    the mean of the start and end cross-entropies (the original run_squad.py loss) and exact spans."""
    weights = weights.astype(jnp.float32)
    start = optax.softmax_cross_entropy_with_integer_labels(start_logits.astype(jnp.float32), start_positions)
    end = optax.softmax_cross_entropy_with_integer_labels(end_logits.astype(jnp.float32), end_positions)
    exact = (jnp.argmax(start_logits, -1) == start_positions) & (jnp.argmax(end_logits, -1) == end_positions)
    return {"loss": jnp.sum((start + end) / 2 * weights), "span_accuracy": jnp.sum(exact * weights)}


def span_loss(start_logits: Array, end_logits: Array, start_positions: Array, end_positions: Array):
    """Mean of the start and end cross-entropies (the original run_squad.py loss)."""
    weights = jnp.ones(start_positions.shape[0], jnp.float32)
    sums = span_sums(start_logits, end_logits, start_positions, end_positions, weights)
    metrics = mean_metrics(sums, example_counts(weights, tuple(sums)))
    return metrics["loss"], {"span_accuracy": metrics["span_accuracy"]}


class BertForMultipleChoice(nn.Module):
    """Inputs <int>[B, C, S]: each (context, choice) pair's pooled [CLS] -> one score; -> [B, C]."""

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic=True, *,
                 frozen_encoder=False, encoded=None):
        batch, choices, length = input_ids.shape
        flat = lambda x: None if x is None else x.reshape(batch * choices, length)
        if encoded is not None:  # [B, C, ...] -> [B x C, ...], as the encoder's rows
            encoded = tuple(None if x is None else x.reshape(batch * choices, *x.shape[2:]) for x in encoded)
        features, pooled = encoder_features(self, flat(input_ids), flat(token_type_ids), flat(attention_mask),
                                            deterministic, frozen_encoder, encoded)
        pooled = sentence_vector(self.config, features, pooled, flat(attention_mask), cached=encoded is not None)
        pooled = Dropout(self.config.hidden_dropout_prob)(pooled, deterministic=deterministic)
        scores = logits_layer(self.config, 1, "classifier")(pooled)
        return scores.reshape(batch, choices)


def multiple_choice_sums(logits: Array, labels: Array, weights: Array, choice_mask: Array | None = None
                         ) -> dict[str, Array]:
    """Softmax over choices: scores <f32>[B, C], correct choice <int>[B], weights <f32>[B],
    choice_mask <bool>[B, C] (False = a padding choice, never chosen) -> weighted sums."""
    logits, weights = logits.astype(jnp.float32), weights.astype(jnp.float32)
    if choice_mask is not None:
        logits = jnp.where(choice_mask.astype(bool), logits, -1e9)
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return {"loss": jnp.sum(xent * weights), "accuracy": jnp.sum(correct * weights)}


def multiple_choice_loss(logits: Array, labels: Array) -> tuple[Array, dict]:
    """Softmax over choices: <f32>[B, C] scores and <int>[B] correct choice."""
    weights = jnp.ones(labels.shape[0], jnp.float32)
    sums = multiple_choice_sums(logits, labels, weights)
    metrics = mean_metrics(sums, example_counts(weights, tuple(sums)))
    return metrics["loss"], {"accuracy": metrics["accuracy"]}

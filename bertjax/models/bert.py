"""The BERT encoder in Flax linen: embeddings, transformer layers, pooler; the original
BERT by default and the modern encoder (ModernBERT) by configuration (see BertConfig).

Shapes: B = batch, S = sequence length, H = hidden size, N = heads, D = head size.
Parameter tree of `BertEncoder` (unrolled; with `scan_layers` the layers are one
`encoder/layers` subtree with a leading [L] axis)::

    embeddings/{word_embeddings,position_embeddings,token_type_embeddings}/embedding
    embeddings/LayerNorm/{scale,bias}
    encoder/layer_{i}/attention/{query,key,value,output}/{kernel,bias}
    encoder/layer_{i}/attention_norm/{scale,bias}
    encoder/layer_{i}/intermediate/{kernel,bias}
    encoder/layer_{i}/output/{kernel,bias}
    encoder/layer_{i}/output_norm/{scale,bias}
    pooler/{kernel,bias}

The modern switches change it: no position_embeddings with rotary positions, no
token_type_embeddings with type_vocab_size 0, no biases without use_bias / norm_bias;
pre-normalisation names the norms before the sublayers `attention_norm` (not in layer 0)
and `mlp_norm`, and adds `encoder/final_norm`; a gated MLP adds `intermediate_gate`; the
"cls" / "mean" pooler adds `pooler_norm`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.models.attention import BertSelfAttention
from bertjax.models.config import BertConfig
from bertjax.models.dropout import Dropout
from bertjax.models.primitives import activation, dense, dense_init, layer_norm, over_rows
from bertjax.sharding import Axis, constrain

Array = jax.Array


def one_hot_lookup(table: Array, ids: Array, dtype: str) -> Array:
    """<float>[N, H] table, <int>[...] ids -> <dtype>[..., H]: the rows, exactly, as a matmul
    with one-hot rows (whose gradient is a matmul too, where a gather's is a scatter-add)."""
    table = jnp.asarray(table, dtype)
    return jnp.dot(jax.nn.one_hot(ids, table.shape[0], dtype=dtype), table, precision=jax.lax.Precision.HIGHEST)


class BertEmbeddings(nn.Module):
    """Token + segment + learned position embeddings, then LayerNorm and dropout (segments
    only with type_vocab_size > 0, positions only with position_embedding "absolute")."""

    config: BertConfig

    def setup(self):
        config = self.config

        def embed(num, names, name):
            return nn.Embed(num, config.hidden_size, dtype=config.dtype, param_dtype=config.param_dtype,
                            embedding_init=dense_init(config, names), name=name)

        self.word_embeddings = embed(config.vocab_size, (Axis.VOCAB, Axis.EMBED), "word_embeddings")
        if config.position_embedding == "absolute":
            self.position_embeddings = embed(config.max_position_embeddings, (Axis.POSITION, Axis.EMBED),
                                             "position_embeddings")
        if config.type_vocab_size:
            self.token_type_embeddings = embed(config.type_vocab_size, (Axis.TOKEN_TYPE, Axis.EMBED),
                                               "token_type_embeddings")
        self.layer_norm = layer_norm(config, "LayerNorm")
        self.dropout = Dropout(config.hidden_dropout_prob)

    def __call__(self, input_ids: Array, token_type_ids: Array, deterministic: bool,
                 position_ids: Array | None = None) -> Array:
        """<int>[B, S] ids (position_ids None: 0..S-1 in every row) -> <dtype>[B, S, H].

        The small tables (segments, positions) are read by one-hot matmuls, or a slice for
        0..S-1: a gather's gradient is a scatter-add, and thousands of adds into the same few
        rows serialise on GPU atomics. The word table stays a gather: as a one-hot matmul the
        step is slower (benchmarks/README.md#segment-and-position-embeddings).
        """
        config = self.config
        x = self.word_embeddings(input_ids)
        if config.type_vocab_size:
            # One token type (RoBERTa's layout): a pair's second text reads that row too, as
            # Hugging Face's tokenizers give such models type 0 throughout (a one-hot of
            # id 1 over one row would be zero).
            types = jnp.minimum(token_type_ids, config.type_vocab_size - 1)
            x = x + one_hot_lookup(self.token_type_embeddings.embedding, types, config.dtype)
        if config.position_embedding == "absolute":
            positions = self.position_embeddings.embedding
            if position_ids is None:
                x = x + jnp.asarray(positions[:input_ids.shape[-1]], config.dtype)[None]
            else:
                x = x + one_hot_lookup(positions, position_ids, config.dtype)
        return self.dropout(self.layer_norm(x), deterministic=deterministic)

    def attend(self, x: Array, float32_logits: bool = False) -> Array:
        """Tied decoder: <dtype>[..., H] -> <dtype>[..., vocab] logits (no bias), one matmul
        over [rows, H] as `dot_over_rows`; with float32_logits the same operands' product
        summed and returned in float32 (not rounded to bfloat16)."""
        if not float32_logits:
            return over_rows(self.word_embeddings.attend, x)
        table = jnp.asarray(self.word_embeddings.embedding, self.config.dtype)
        return over_rows(lambda rows: jnp.dot(rows.astype(table.dtype), table.T, preferred_element_type=jnp.float32), x)


class BertLayer(nn.Module):
    """One transformer layer, post-LN (BERT) or pre-LN (config.norm_placement). Returns
    (x, x if return_output else None) so it can be scanned, the second element collecting
    every layer's output. `index`: the layer's place in the stack (local or global attention;
    a pre-LN stack's first layer reads the normalised embeddings without a norm of its own)."""

    config: BertConfig
    deterministic: bool
    packed: bool = False
    return_output: bool = False
    index: int = 0

    @nn.compact
    def __call__(self, x: Array, sequence_ids: Array, position_ids: Array | None = None
                 ) -> tuple[Array, Array | None]:
        config = self.config
        dropout = functools.partial(Dropout(config.hidden_dropout_prob), deterministic=self.deterministic)
        is_global = config.is_global_layer(self.index)
        attention = BertSelfAttention(
            config, self.deterministic, self.packed, window=0 if is_global else config.attention_window,
            rope_theta=(None if config.position_embedding != "rope" else
                        config.rope_theta if is_global else config.local_rope_theta), name="attention")
        if config.norm_placement == "pre":
            normed = x if self.index == 0 else layer_norm(config, "attention_norm")(x)
            x = x + dropout(attention(normed, sequence_ids, position_ids))
            x = constrain(x, (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_EMBED))
            x = x + self._mlp(layer_norm(config, "mlp_norm")(x), dropout)
        else:
            x = layer_norm(config, "attention_norm")(x + dropout(attention(x, sequence_ids, position_ids)))
            x = constrain(x, (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_EMBED))
            x = layer_norm(config, "output_norm")(x + self._mlp(x, dropout))
        x = constrain(x, (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_EMBED))
        return x, (x if self.return_output else None)

    def _mlp(self, x: Array, dropout: Callable[[Array], Array]) -> Array:
        """<dtype>[B, S, H] -> [B, S, H]: dropout(W2 act(x W1)) (BERT), or gated,
        W2 dropout(act(x W1) * x V) (ModernBERT's GeGLU)."""
        config = self.config
        hidden = dense(config, config.intermediate_size, (Axis.EMBED, Axis.MLP), "intermediate")(x)
        hidden = constrain(activation(config.hidden_act)(hidden), (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_MLP))
        output = lambda h: dense(config, config.hidden_size, (Axis.MLP, Axis.EMBED), "output", role="out")(h)
        if not config.gated_mlp:
            return dropout(output(hidden))
        gate = dense(config, config.intermediate_size, (Axis.EMBED, Axis.MLP), "intermediate_gate")(x)
        return output(dropout(hidden * gate))


REMAT_POLICIES = {
    "full": None,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class BertTransformer(nn.Module):
    """The stack of layers, unrolled or scanned, with optional rematerialisation.

    Returns the last layer's output <dtype>[B, S, H] or, with all_layers, every layer's
    <dtype>[L, B, S, H]."""

    config: BertConfig

    @nn.compact
    def __call__(self, x: Array, sequence_ids: Array, deterministic: bool, packed: bool,
                 all_layers: bool = False, position_ids: Array | None = None) -> Array:
        """A pre-LN stack normalises the last layer's output (`final_norm`), the last of all_layers too."""
        config = self.config
        layer = BertLayer
        if config.remat_policy != "none":
            layer = nn.remat(BertLayer, policy=REMAT_POLICIES[config.remat_policy], prevent_cse=not config.scan_layers)
        if config.scan_layers:  # identical layers only (BertConfig checks)
            stack = nn.scan(
                layer, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                in_axes=nn.broadcast, length=config.num_hidden_layers,
                metadata_params={nn.PARTITION_NAME: Axis.LAYERS})
            x, outputs = stack(config, deterministic, packed, all_layers, name="layers")(x, sequence_ids, position_ids)
        else:
            outputs = []
            for i in range(config.num_hidden_layers):
                x, _ = layer(config, deterministic, packed, index=i, name=f"layer_{i}")(x, sequence_ids, position_ids)
                outputs.append(x)
            outputs = jnp.stack(outputs) if all_layers else None
        if config.norm_placement == "pre":
            x = layer_norm(config, "final_norm")(x)
            outputs = None if outputs is None else outputs.at[-1].set(x)
        return outputs if all_layers else x


class BertEncoder(nn.Module):
    """BERT encoder + pooler.

    __call__(input_ids <int>[B, S], token_type_ids <int>[B, S] = zeros,
             attention_mask <int|bool>[B, S] = ones, deterministic=True)
      -> (sequence_output <dtype>[B, S, H], pooled_output <dtype>[B, H])

    output_hidden_states=True adds a third output, hidden_states <dtype>[L + 1, B, S, H]: the
    embeddings' output, then each layer's (Hugging Face's `hidden_states`, stacked;
    hidden_states[-1] is sequence_output).

    Packed rows (several sequences per row) add, all three together:
      position_ids <int>[B, S]     each token's position in its own sequence;
      sequence_ids <int>[B, S]     1, 2, ... for the sequences of a row, 0 for padding
                                   (attention stays inside a sequence; attention_mask unused);
      pooled_positions <int>[B, K] each sequence's [CLS] position -> pooled_output [B, K, H].
    """

    config: BertConfig

    def setup(self):
        self.embeddings = BertEmbeddings(self.config)
        self.encoder = BertTransformer(self.config)
        self.pooler = dense(self.config, self.config.hidden_size, (Axis.EMBED, Axis.MLP), "pooler", role="out")
        if self.config.pooler != "tanh":
            self.pooler_norm = layer_norm(self.config, "pooler_norm")

    def __call__(self, input_ids: Array, token_type_ids: Array | None = None,
                 attention_mask: Array | None = None, deterministic: bool = True, *,
                 position_ids: Array | None = None, sequence_ids: Array | None = None,
                 pooled_positions: Array | None = None, output_hidden_states: bool = False) -> tuple[Array, ...]:
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {input_ids.shape}")
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_position_embeddings "
                             f"{self.config.max_position_embeddings}")
        packed = sequence_ids is not None
        if packed != (position_ids is not None) or packed != (pooled_positions is not None):
            raise ValueError("packed rows need position_ids, sequence_ids and pooled_positions together")
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if not packed:
            sequence_ids = jnp.ones_like(input_ids) if attention_mask is None else attention_mask
        x = self.embeddings(input_ids, token_type_ids, deterministic, position_ids)
        x = constrain(x, (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_EMBED))
        embedded = x
        sequence_ids = sequence_ids.astype(jnp.int32)
        x = self.encoder(x, sequence_ids, deterministic, packed, output_hidden_states, position_ids)
        hidden_states = None
        if output_hidden_states:
            hidden_states = jnp.concatenate([embedded[None], x])
            x = x[-1]
        pooled = self._pool(x, sequence_ids, pooled_positions if packed else None)
        return (x, pooled) if hidden_states is None else (x, pooled, hidden_states)

    def _pool(self, x: Array, sequence_ids: Array, pooled_positions: Array | None) -> Array:
        """The sentence vector(s): <dtype>[B, H], or [B, K, H] for packed rows.

        "tanh" (BERT): tanh(dense([CLS])). "cls" / "mean" (ModernBERT): norm(act(dense(v)))
        of v = [CLS], or the mean of the sequence's real tokens."""
        config = self.config
        if config.pooler == "mean":
            vector = token_mean(x, sequence_ids, None if pooled_positions is None else pooled_positions.shape[1])
        elif pooled_positions is not None:
            vector = jnp.take_along_axis(x, pooled_positions[:, :, None].astype(jnp.int32), axis=1)
        else:
            vector = x[:, 0]
        if config.pooler == "tanh":
            return jnp.tanh(self.pooler(vector))
        return self.pooler_norm(activation(config.hidden_act)(self.pooler(vector)))

    def attend(self, x: Array, float32_logits: bool = False) -> Array:
        """Tied MLM decoder through the word embeddings: [..., H] -> [..., vocab]."""
        return self.embeddings.attend(x, float32_logits)


def token_mean(x: Array, sequence_ids: Array, count: int | None = None) -> Array:
    """The mean of each sequence's real tokens (ModernBERT's mean pooling), in float32 sums:
    x <dtype>[B, S, *F], sequence_ids <int>[B, S] (0: padding) -> [B, *F]; packed rows
    (sequence k of a row is the tokens with id k + 1) with `count` = K -> [B, K, *F]."""
    if count is None:
        weights = (sequence_ids > 0)[:, None, :]  # [B, 1, S]
    else:
        weights = sequence_ids[:, None, :] == jnp.arange(1, count + 1)[None, :, None]  # [B, K, S]
    weights = weights.astype(jnp.float32)
    weights = weights / jnp.maximum(weights.sum(-1, keepdims=True), 1.0)
    vector = jnp.einsum("bks,bs...->bk...", weights, x.astype(jnp.float32)).astype(x.dtype)
    return vector[:, 0] if count is None else vector


def stack_layers(encoder_params: dict[str, Any], num_layers: int) -> dict[str, Any]:
    """Unrolled `encoder/layer_i` params -> scanned `encoder/layers` with a leading [L] axis."""
    encoder = encoder_params["encoder"]
    layers = [encoder[f"layer_{i}"] for i in range(num_layers)]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *layers)
    return {**encoder_params, "encoder": {"layers": stacked}}


def unstack_layers(encoder_params: dict[str, Any]) -> dict[str, Any]:
    """Scanned `encoder/layers` params -> unrolled `encoder/layer_i` (the inverse of stack_layers)."""
    stacked = encoder_params["encoder"]["layers"]
    num_layers = jax.tree_util.tree_leaves(stacked)[0].shape[0]
    layers = {f"layer_{i}": jax.tree_util.tree_map(lambda x, i=i: x[i], stacked) for i in range(num_layers)}
    return {**encoder_params, "encoder": layers}

"""The BERT encoder in Flax linen: embeddings, post-LN transformer layers, pooler.

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
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.models import bf16_matmul
from bertjax.models.config import BertConfig
from bertjax.models.dropout import Dropout, keep_mask, keep_probability
from bertjax.sharding import Axis, constrain

Array = jax.Array
_partition = nn.with_logical_partitioning


def dense_init(config: BertConfig, names: tuple[str, ...]):
    """Truncated-normal(initializer_range) kernel init carrying logical axis names."""
    return _partition(nn.initializers.truncated_normal(config.initializer_range), names)


def zeros_init(names: tuple[str, ...]):
    return _partition(nn.initializers.zeros_init(), names)


def activation(name: str):
    """'gelu' = exact erf GELU (Hugging Face), 'gelu_tanh' = original TF approximation.

    Recomputed from its input in the backward pass (`jax.checkpoint`): the forward pass keeps
    the input, which the matmul before it wrote anyway, instead of two more [B, S, I]
    tensors of the derivative's factors (XLA on an H100 still wrote one per layer)."""
    return jax.checkpoint({
        "gelu": functools.partial(jax.nn.gelu, approximate=False),
        "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),
        "relu": jax.nn.relu,
    }[name])


def layer_norm(config: BertConfig, name: str) -> nn.LayerNorm:
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps, dtype=config.dtype, param_dtype=config.param_dtype,
        scale_init=_partition(nn.initializers.ones_init(), (Axis.EMBED,)),
        bias_init=zeros_init((Axis.EMBED,)), name=name)


def dot_over_rows(inputs: Array, kernel: Array, dimension_numbers: Any, precision: Any = None,
                  preferred_element_type: Any = None, *, bfloat16_operands: bool = False) -> Array:
    """nn.Dense's product <T>[..., K] x [K, N] -> <T>[..., N] as one [rows, K] x [K, N] matmul.

    The same values; what changes is the kernel's gradient: a product over one row axis,
    x^T [K, rows] . dy [rows, N], where over [B, S] XLA:CPU transposed both operands and ran
    the slowest form of the matmul (benchmarks/README.md#dense-layers-over-rows). The leading axes merged are batch and
    length, never split over one another (act_length is not sharded): the reshape moves no data.
    bfloat16_operands: the product of `bf16_matmul.matmul` (matmul_precision="bfloat16").
    """
    if dimension_numbers != (((inputs.ndim - 1,), (0,)), ((), ())):
        raise ValueError(f"dot_over_rows is nn.Dense's product, got dimension_numbers {dimension_numbers}")
    if bfloat16_operands:
        return over_rows(lambda rows: bf16_matmul.matmul(rows, kernel).astype(inputs.dtype), inputs)
    return over_rows(lambda rows: jax.lax.dot_general(rows, kernel, (((1,), (0,)), ((), ())), precision=precision,
                                                      preferred_element_type=preferred_element_type), inputs)


def over_rows(fn: Callable[[Array], Array], x: Array) -> Array:
    """fn applied to x <T>[..., K] as rows [prod(...), K] -> [..., N]."""
    out = fn(x.reshape(-1, x.shape[-1]))
    return out.reshape(*x.shape[:-1], out.shape[-1])


def dense(config: BertConfig, features: int, names: tuple[str, str], name: str) -> nn.Dense:
    product = functools.partial(dot_over_rows, bfloat16_operands=config.matmul_precision == "bfloat16")
    return nn.Dense(
        features, dtype=config.dtype, param_dtype=config.param_dtype, dot_general=product,
        kernel_init=dense_init(config, names), bias_init=zeros_init(names[1:]), name=name)


def one_hot_lookup(table: Array, ids: Array, dtype: str) -> Array:
    """<float>[N, H] table, <int>[...] ids -> <dtype>[..., H]: the rows, exactly, as a matmul
    with one-hot rows (whose gradient is a matmul too, where a gather's is a scatter-add)."""
    table = jnp.asarray(table, dtype)
    return jnp.dot(jax.nn.one_hot(ids, table.shape[0], dtype=dtype), table, precision=jax.lax.Precision.HIGHEST)


class BertEmbeddings(nn.Module):
    """Token + segment + learned position embeddings, then LayerNorm and dropout."""

    config: BertConfig

    def setup(self):
        config = self.config

        def embed(num, names, name):
            return nn.Embed(num, config.hidden_size, dtype=config.dtype, param_dtype=config.param_dtype,
                            embedding_init=dense_init(config, names), name=name)

        self.word_embeddings = embed(config.vocab_size, (Axis.VOCAB, Axis.EMBED), "word_embeddings")
        self.position_embeddings = embed(config.max_position_embeddings, (Axis.POSITION, Axis.EMBED),
                                         "position_embeddings")
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
        words = self.word_embeddings(input_ids)
        positions = self.position_embeddings.embedding
        if position_ids is None:
            positions = jnp.asarray(positions[:input_ids.shape[-1]], config.dtype)[None]
        else:
            positions = one_hot_lookup(positions, position_ids, config.dtype)
        segments = one_hot_lookup(self.token_type_embeddings.embedding, token_type_ids, config.dtype)
        x = self.layer_norm(words + segments + positions)
        return self.dropout(x, deterministic=deterministic)

    def attend(self, x: Array) -> Array:
        """Tied decoder: <dtype>[..., H] -> <dtype>[..., vocab] logits (no bias), one matmul
        over [rows, H] as `dot_over_rows`."""
        return over_rows(self.word_embeddings.attend, x)


def attention_mask(sequence_ids: Array, packed: bool) -> Array:
    """<int>[B, S] -> <bool>[B, 1, 1, S] (padding keys off) or, packed, [B, 1, S, S]: a
    query sees only keys of its own sequence (block-diagonal); 0 = padding."""
    keys = sequence_ids[:, None, None, :]
    if not packed:
        return keys > 0
    return (sequence_ids[:, None, :, None] == keys) & (keys > 0)


class BertSelfAttention(nn.Module):
    """Multi-head self-attention with the output projection (before residual + LN).

    `config.attention_impl`: "xla" plain XLA ops with attention dropout; "fused"
    jax.nn.dot_product_attention; "cudnn" its cuDNN flash kernel (GPU); "splash" the
    Pallas splash-attention kernel (TPU; interpreted on CPU, for tests).
    """

    config: BertConfig
    deterministic: bool
    packed: bool = False

    @nn.compact
    def __call__(self, x: Array, sequence_ids: Array) -> Array:
        """x <dtype>[B, S, H], sequence_ids <int>[B, S] (0 = padding; packed: the 1-based
        sequence of each token, else 1 for every real token) -> <dtype>[B, S, H]."""
        config, packed = self.config, self.packed
        batch, length, hidden = x.shape
        split = (batch, length, config.num_attention_heads, config.head_dim)
        q, k, v = (dense(config, hidden, (Axis.EMBED, Axis.HEADS), name)(x).reshape(split)
                   for name in ("query", "key", "value"))
        q, k, v = (constrain(t, (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_HEADS, Axis.ACT_KV))
                   for t in (q, k, v))
        impl = config.attention_impl
        if impl == "xla":
            context = self._xla_attention(q, k, v, attention_mask(sequence_ids, packed))
        elif impl == "splash":
            from bertjax.models import splash

            context = splash.attention(q, k, v, sequence_ids)
        elif impl == "cudnn" and not packed:  # padding as lengths: rows are left-aligned
            lengths = jnp.sum(sequence_ids > 0, axis=1, dtype=jnp.int32)
            context = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths, implementation="cudnn")
        else:
            context = jax.nn.dot_product_attention(q, k, v, mask=attention_mask(sequence_ids, packed),
                                                   implementation="cudnn" if impl == "cudnn" else None)
        context = context.reshape(batch, length, hidden)
        return dense(config, hidden, (Axis.HEADS, Axis.EMBED), "output")(context)

    def _xla_attention(self, q: Array, k: Array, v: Array, mask: Array) -> Array:
        """Softmax attention in plain XLA ops, with attention dropout; <dtype>[B, S, N, D].

        Computed heads-first ([B, N, S, D]): XLA:CPU runs the two batched products much
        slower straight from [B, S, N, D] (benchmarks/README.md#heads-first-attention)."""
        q, k, v = (jnp.swapaxes(t, 1, 2) for t in (q, k, v))
        scores = jnp.einsum("bnqd,bnkd->bnqk", q, k).astype(jnp.float32) / np.sqrt(q.shape[-1])
        scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
        rate = self.config.attention_probs_dropout_prob
        if not self.deterministic and rate > 0.0:
            keep = keep_mask(self.make_rng("dropout"), probs.shape, rate)
            probs = drop_probabilities(probs, keep, keep_probability(rate))
        return jnp.swapaxes(jnp.einsum("bnqk,bnkd->bnqd", probs, v), 1, 2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def drop_probabilities(probs: Array, keep: Array, keep_prob: float) -> Array:
    """Inverted dropout of softmax probabilities: where(keep, probs / keep_prob, 0), keep_prob > 0.

    Only for softmax outputs: its gradient is taken from the output (zero where the output is zero), which the
    context product saves anyway, instead of from `keep`: XLA fuses the comparison that
    makes `keep` into the backward pass and so kept the random bits alive until then, two
    uint32 halves per probability (BERT-base, batch 8, length 128: 147 MB of the step's
    peak). Exact: where a kept probability is itself zero (a masked key), softmax's
    backward multiplies that gradient by the probability, so it never reaches the scores.
    """
    return jnp.where(keep, probs / keep_prob, 0).astype(probs.dtype)


def _drop_probabilities_fwd(probs, keep, keep_prob):
    dropped = drop_probabilities(probs, keep, keep_prob)
    return dropped, dropped


def _drop_probabilities_bwd(keep_prob, dropped, grad):
    return jnp.where(dropped != 0, grad / keep_prob, 0).astype(grad.dtype), None


drop_probabilities.defvjp(_drop_probabilities_fwd, _drop_probabilities_bwd)


class BertLayer(nn.Module):
    """One post-LN transformer layer. Returns (x, x if return_output else None) so it can be
    scanned, the second element collecting every layer's output."""

    config: BertConfig
    deterministic: bool
    packed: bool = False
    return_output: bool = False

    @nn.compact
    def __call__(self, x: Array, sequence_ids: Array) -> tuple[Array, Array | None]:
        config = self.config
        dropout = Dropout(config.hidden_dropout_prob)
        attended = BertSelfAttention(config, self.deterministic, self.packed, name="attention")(x, sequence_ids)
        x = layer_norm(config, "attention_norm")(x + dropout(attended, deterministic=self.deterministic))
        x = constrain(x, (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_EMBED))
        hidden = dense(config, config.intermediate_size, (Axis.EMBED, Axis.MLP), "intermediate")(x)
        hidden = constrain(activation(config.hidden_act)(hidden), (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_MLP))
        out = dense(config, config.hidden_size, (Axis.MLP, Axis.EMBED), "output")(hidden)
        x = layer_norm(config, "output_norm")(x + dropout(out, deterministic=self.deterministic))
        x = constrain(x, (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_EMBED))
        return x, (x if self.return_output else None)


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
                 all_layers: bool = False) -> Array:
        config = self.config
        layer = BertLayer
        if config.remat_policy != "none":
            layer = nn.remat(BertLayer, policy=REMAT_POLICIES[config.remat_policy], prevent_cse=not config.scan_layers)
        if config.scan_layers:
            stack = nn.scan(
                layer, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                in_axes=nn.broadcast, length=config.num_hidden_layers,
                metadata_params={nn.PARTITION_NAME: Axis.LAYERS})
            x, outputs = stack(config, deterministic, packed, all_layers, name="layers")(x, sequence_ids)
            return outputs if all_layers else x
        outputs = []
        for i in range(config.num_hidden_layers):
            x, _ = layer(config, deterministic, packed, name=f"layer_{i}")(x, sequence_ids)
            outputs.append(x)
        return jnp.stack(outputs) if all_layers else x


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
        self.pooler = dense(self.config, self.config.hidden_size, (Axis.EMBED, Axis.MLP), "pooler")

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
        x = self.encoder(x, sequence_ids.astype(jnp.int32), deterministic, packed, output_hidden_states)
        hidden_states = None
        if output_hidden_states:
            hidden_states = jnp.concatenate([embedded[None], x])
            x = x[-1]
        if packed:
            first = jnp.take_along_axis(x, pooled_positions[:, :, None].astype(jnp.int32), axis=1)
        else:
            first = x[:, 0]
        pooled = jnp.tanh(self.pooler(first))
        return (x, pooled) if hidden_states is None else (x, pooled, hidden_states)

    def attend(self, x: Array) -> Array:
        """Tied MLM decoder through the word embeddings: [..., H] -> [..., vocab]."""
        return self.embeddings.attend(x)


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

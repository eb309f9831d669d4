"""Self-attention: the masks (padding, packed sequences, local windows), the product in each
form `config.attention_impl` chooses (plain XLA with dropout, jax.nn.dot_product_attention,
cuDNN, splash), rotary positions, and the CPU's block and chunked forms that keep the
scores within memory at long lengths.

Shapes: B = batch, S = sequence length, H = hidden size, N = heads, D = head size.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.models.config import BertConfig
from bertjax.models.dropout import keep_mask, keep_probability
from bertjax.models.primitives import dense
from bertjax.sharding import Axis, constrain

Array = jax.Array


def rotate(x: Array, positions: Array, theta: float) -> Array:
    """Rotary position embedding (RoPE, the half-split form): x <T>[B, S, N, D] at
    positions <int>[B, S] or [1, S] -> <T>[B, S, N, D], each pair (d, d + D/2) turned by
    position * theta^(-2d/D) radians (in float32)."""
    half = x.shape[-1] // 2
    inverse_frequency = 1.0 / theta ** (np.arange(half, dtype=np.float32) * 2 / x.shape[-1])
    angles = positions.astype(jnp.float32)[..., None, None] * jnp.asarray(inverse_frequency)  # [B, S, 1, D/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    first, second = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1).astype(x.dtype)




def attention_mask(sequence_ids: Array, packed: bool) -> Array:
    """<int>[B, S] -> <bool>[B, 1, 1, S] (padding keys off) or, packed, [B, 1, S, S]: a
    query sees only keys of its own sequence (block-diagonal); 0 = padding."""
    keys = sequence_ids[:, None, None, :]
    if not packed:
        return keys > 0
    return (sequence_ids[:, None, :, None] == keys) & (keys > 0)


QUERY_BLOCK = 256  # queries per block in `_xla_attention` at long lengths
SCORE_CHUNK_BYTES = 4 << 20  # CPU: the float32 scores of a chunk of rows (or heads, query blocks) at a time


def local_band(length: int, half_window: int) -> Array:
    """<bool>[1, 1, S, S]: query i may see key j when |i - j| <= half_window."""
    distance = np.abs(np.arange(length)[:, None] - np.arange(length)[None, :])
    return jnp.asarray(distance <= half_window)[None, None]


def _blocks_around(x: Array, block: int, fill: Any) -> Array:
    """<T>[B, ..., S(, D)] along axis 2 (heads first: [B, N, S, D]; ids: [B, 1, S]) ->
    [B, ..., S/block, 3 x block(, D)]: for each block of `block` positions, the keys of the
    block before it, itself and the one after (padded with `fill` past the ends)."""
    count = x.shape[2] // block
    pad = [(0, 0)] * x.ndim
    pad[2] = (block, block)
    padded = jnp.pad(x, pad, constant_values=fill)
    padded = padded.reshape(*x.shape[:2], count + 2, block, *x.shape[3:])
    return jnp.concatenate([padded[:, :, i:i + count] for i in range(3)], axis=3)


class BertSelfAttention(nn.Module):
    """Multi-head self-attention with the output projection (before residual + LN).

    `config.attention_impl`: "xla" plain XLA ops with attention dropout; "fused"
    jax.nn.dot_product_attention; "cudnn" its cuDNN flash kernel (GPU); "splash" the
    Pallas splash-attention kernel (TPU; interpreted on CPU, for tests).
    window > 0: a local layer, each query seeing keys within window // 2 positions (the
    "xla" form computes only the blocks of keys near each block of queries, not S x S).
    rope_theta: rotary positions (at position_ids, else 0..S-1) with this theta, or None.
    """

    config: BertConfig
    deterministic: bool
    packed: bool = False
    window: int = 0
    rope_theta: float | None = None

    @nn.compact
    def __call__(self, x: Array, sequence_ids: Array, position_ids: Array | None = None) -> Array:
        """x <dtype>[B, S, H], sequence_ids <int>[B, S] (0 = padding; packed: the 1-based
        sequence of each token, else 1 for every real token) -> <dtype>[B, S, H]."""
        config, packed = self.config, self.packed
        batch, length, hidden = x.shape
        split = (batch, length, config.num_attention_heads, config.head_dim)
        q, k, v = (dense(config, hidden, (Axis.EMBED, Axis.HEADS), name)(x).reshape(split)
                   for name in ("query", "key", "value"))
        if self.rope_theta is not None:
            positions = jnp.arange(length)[None] if position_ids is None else position_ids
            q, k = rotate(q, positions, self.rope_theta), rotate(k, positions, self.rope_theta)
        q, k, v = (constrain(t, (Axis.ACT_BATCH, Axis.ACT_LENGTH, Axis.ACT_HEADS, Axis.ACT_KV))
                   for t in (q, k, v))
        impl, half = config.attention_impl, self.window // 2
        if impl == "cudnn" and self.window:  # cuDNN refuses a two-sided window: local layers take XLA's forms
            impl = "xla"
        local = {"local_window_size": (half, half)} if self.window else {}
        # The blocked form is exact at every length; the banded one is cheaper only while the
        # window covers most of the row (a symbolic length, as in the export, takes blocks).
        if impl == "xla" and self.window and (not isinstance(length, int) or 3 * half < length):
            context = self._local_xla_attention(q, k, v, sequence_ids, half)
        elif impl == "xla":
            mask = attention_mask(sequence_ids, packed)
            context = self._xla_attention(q, k, v, mask & local_band(length, half) if self.window else mask)
        elif impl == "splash":
            from bertjax.models import splash

            context = splash.attention(q, k, v, sequence_ids, half if self.window else None)
        elif impl == "cudnn" and not packed:  # padding as lengths: rows are left-aligned
            # At least one key: a row that is all padding (an evaluation batch's filler rows,
            # a multiple-choice example's missing choices) would be a zero-length sequence,
            # which cuDNN releases have failed on; its outputs are never read.
            lengths = jnp.maximum(jnp.sum(sequence_ids > 0, axis=1, dtype=jnp.int32), 1)
            context = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths, implementation="cudnn",
                                                   **local)
        else:
            context = jax.nn.dot_product_attention(q, k, v, mask=attention_mask(sequence_ids, packed),
                                                   implementation="cudnn" if impl == "cudnn" else None, **local)
        context = context.reshape(batch, length, hidden)
        return dense(config, hidden, (Axis.HEADS, Axis.EMBED), "output", role="out")(context)

    def _xla_attention(self, q: Array, k: Array, v: Array, mask: Array) -> Array:
        """Softmax attention in plain XLA ops, with attention dropout; <dtype>[B, S, N, D].

        Computed heads-first ([B, N, S, D]): XLA:CPU runs the two batched products much
        slower straight from [B, S, N, D] (benchmarks/README.md#heads-first-attention).
        From QUERY_BLOCK x 2 tokens on, without attention dropout, queries go in blocks of
        QUERY_BLOCK, one after another: each block's [B, N, block, S] scores stay in cache
        where the whole [B, N, S, S] went through memory, which is faster on a CPU
        (benchmarks/README.md#the-modern-encoders-attention)."""
        q, k, v = (jnp.swapaxes(t, 1, 2) for t in (q, k, v))
        length = q.shape[2]
        dropout = not self.deterministic and self.config.attention_probs_dropout_prob > 0.0
        by_blocks = isinstance(length, int) and length >= 2 * QUERY_BLOCK and not dropout
        attend = self._attend_by_query_blocks if by_blocks else self._attend_all
        queries = QUERY_BLOCK if by_blocks else length
        chunks = (1, 1)
        if not dropout and jax.default_backend() == "cpu":
            chunks = _attention_chunks(q.shape, mask.shape, queries)
        if chunks != (1, 1):
            return jnp.swapaxes(self._by_chunks(attend, (q, k, v, mask), *chunks), 1, 2)
        return jnp.swapaxes(attend(q, k, v, mask), 1, 2)

    def _attend_all(self, q: Array, k: Array, v: Array, mask: Array) -> Array:
        """Heads-first q, k, v <T>[B, N, S, D] and mask [B, 1, 1 or S, S] -> <T>[B, N, S, D]."""
        # float32 products' sums, as _block_scores: a bfloat16 score rounded before the softmax
        # differs by the bucket a text lands in (this path below 2 x QUERY_BLOCK, that one above).
        scores = jnp.einsum("bnqd,bnkd->bnqk", q, k, preferred_element_type=jnp.float32) / np.sqrt(q.shape[-1])
        return self._attend(scores, mask, v, "bnqk,bnkd->bnqd")

    @staticmethod
    def _by_chunks(attend: Callable[..., Array], operands: tuple[Array, ...], row_chunks: int,
                   head_groups: int) -> Array:
        """`attend(q, k, v, mask)` (no dropout) over `row_chunks` strided chunks of the rows and,
        within each, `head_groups` strided groups of the heads, one after another (lax.map): a
        chunk's scores stay in the CPU's cache where the whole batch's went through memory
        (benchmarks/README.md#attention-on-a-cpu). Chunk i holds rows i, i + row_chunks, ...
        and group j heads j, j + head_groups, ..., so each spreads over the data- and
        tensor-parallel devices as the batch and the heads do."""
        def strided(t, axis, count, names):  # [.., n, ..] at axis -> [count, .., n / count, ..]
            t = t.reshape(*t.shape[:axis], t.shape[axis] // count, count, *t.shape[axis + 1:])
            return constrain(jnp.moveaxis(t, axis + 1, 0), (None, *names))

        def unstrided(t, axis):  # the inverse of `strided` for the result
            t = jnp.moveaxis(t, 0, axis + 1)
            return t.reshape(*t.shape[:axis], t.shape[axis] * t.shape[axis + 1], *t.shape[axis + 2:])

        def attend_row_chunk(parts):
            q, k, v, mask = parts
            if head_groups == 1:
                return attend(q, k, v, mask)
            names = (Axis.ACT_BATCH, Axis.ACT_HEADS, None, None)
            groups = tuple(strided(t, 1, head_groups, names) for t in (q, k, v))
            return unstrided(jax.lax.map(lambda qkv: attend(*qkv, mask), groups), 1)

        if row_chunks == 1:
            return attend_row_chunk(operands)
        chunks = tuple(strided(t, 0, row_chunks, (Axis.ACT_BATCH, *([None] * (t.ndim - 1)))) for t in operands)
        return unstrided(jax.lax.map(attend_row_chunk, chunks), 0)

    def _attend_by_query_blocks(self, q: Array, k: Array, v: Array, mask: Array) -> Array:
        """`_xla_attention` without dropout for heads-first q, k, v <T>[B, N, S, D] and mask
        [B, 1, 1 or S, S], QUERY_BLOCK queries at a time (`block_attention`) -> <T>[B, N, S, D]."""
        batch, heads, length, size = q.shape
        count = -(-length // QUERY_BLOCK)
        padding = count * QUERY_BLOCK - length
        blocks = jnp.pad(q, [(0, 0), (0, 0), (0, padding), (0, 0)])
        blocks = jnp.moveaxis(blocks.reshape(batch, heads, count, QUERY_BLOCK, size), 2, 0)
        if mask.shape[2] == 1:  # the same keys for every query: one [B, 1, 1, S] per block
            mask_blocks = jnp.broadcast_to(mask[None], (count, *mask.shape))
        else:
            mask_blocks = jnp.pad(mask, [(0, 0), (0, 0), (0, padding), (0, 0)])
            mask_blocks = jnp.moveaxis(mask_blocks.reshape(batch, 1, count, QUERY_BLOCK, length), 2, 0)
        out = block_attention(blocks, k, v, mask_blocks)  # [C, B, N, block, D]
        return jnp.moveaxis(out, 0, 2).reshape(batch, heads, count * QUERY_BLOCK, size)[:, :, :length]

    def _local_xla_attention(self, q: Array, k: Array, v: Array, sequence_ids: Array, half: int) -> Array:
        """Sliding-window attention by blocks: queries in blocks of `half` positions, each
        block scoring only the 3 x half keys of its own and the two neighbouring blocks (all
        it may see), so the cost grows as S x 1.5 w instead of S x S; <dtype>[B, S, N, D]."""
        batch, length = q.shape[:2]
        count = -(-length // half)
        pad = lambda t, fill=0: jnp.pad(t, [(0, 0), (0, count * half - length)] + [(0, 0)] * (t.ndim - 2),
                                        constant_values=fill)
        q, k, v = (jnp.swapaxes(pad(t), 1, 2) for t in (q, k, v))  # [B, N, S', D]
        ids = pad(sequence_ids)[:, None]  # [B, 1, S']
        keys, values = _blocks_around(k, half, 0), _blocks_around(v, half, 0)  # [B, N, C, 3h, D]
        key_ids = _blocks_around(ids, half, 0)  # [B, 1, C, 3h]
        query_ids = ids.reshape(batch, 1, count, half)
        offsets = np.arange(3 * half)[None, :] - half - np.arange(half)[:, None]  # key - query position
        near = jnp.asarray(np.abs(offsets) <= half)  # [h, 3h]
        if self.packed:
            mask = (query_ids[..., :, None] == key_ids[..., None, :]) & (key_ids[..., None, :] > 0) & near
        else:
            mask = (key_ids[..., None, :] > 0) & near  # [B, 1, C, h, 3h]
        blocks = q.reshape(*q.shape[:2], count, half, q.shape[-1])
        scores = (jnp.einsum("bncqd,bnckd->bncqk", blocks, keys, preferred_element_type=jnp.float32)
                  / np.sqrt(q.shape[-1]))
        context = self._attend(scores, mask, values, "bncqk,bnckd->bncqd")
        return jnp.swapaxes(context.reshape(*q.shape), 1, 2)[:, :length]

    def _attend(self, scores: Array, mask: Array, values: Array, product: str) -> Array:
        """Masked softmax over the last axis of float32 scores, attention dropout, then the
        `product` with the values (an einsum spec whose output ends in [..., queries, D]).

        Softmax's division comes after the product: exp(s - max s), dropped out, times the
        values, divided by the sum of exp(s - max s). The same numbers as normalising first
        (dropout and the product are linear), but the division runs over [.., S, D] instead of
        [.., S, S], and one pass less goes over the scores (benchmarks/README.md#attention-on-a-cpu)."""
        scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
        weights = jnp.exp(scores - jax.lax.stop_gradient(scores.max(axis=-1, keepdims=True)))
        total = weights.sum(axis=-1)
        weights = weights.astype(values.dtype)
        rate = self.config.attention_probs_dropout_prob
        if not self.deterministic and rate > 0.0:
            keep = keep_mask(self.make_rng("dropout"), weights.shape, rate)
            weights = drop_probabilities(weights, keep, keep_probability(rate))
        context = jnp.einsum(product, weights, values, preferred_element_type=jnp.float32)
        return (context / total[..., None]).astype(values.dtype)


def _block_scores(queries: Array, keys: Array, mask: Array) -> Array:
    """Masked float32 scores of a block of queries <T>[B, N, Q, D] against keys [B, N, S, D]."""
    scores = jnp.einsum("bnqd,bnkd->bnqk", queries, keys, preferred_element_type=jnp.float32)
    return jnp.where(mask, scores / np.sqrt(queries.shape[-1]), jnp.finfo(jnp.float32).min)


@jax.custom_vjp
def block_attention(query_blocks: Array, keys: Array, values: Array, mask_blocks: Array) -> Array:
    """Softmax attention one block of queries at a time, <T>[C, B, N, Q, D] queries in C blocks,
    keys and values [B, N, S, D], masks <bool>[C, B, 1, 1 or Q, S] -> <T>[C, B, N, Q, D].

    The backward pass recomputes each block's scores from the queries and keys instead of
    keeping them (flash attention's recomputation, by query blocks): what it keeps is the output
    and two numbers a query (the scores' maximum and the sum of their exponentials), so training
    at long lengths holds no [S, S] per layer (benchmarks/README.md#the-modern-encoders-attention)."""
    return _block_attention_forward(query_blocks, keys, values, mask_blocks)[0]


def _block_attention_forward(query_blocks, keys, values, mask_blocks):
    def one(block_and_mask):
        block, mask = block_and_mask
        scores = _block_scores(block, keys, mask)
        peak = scores.max(axis=-1, keepdims=True)
        weights = jnp.exp(scores - peak)
        total = weights.sum(axis=-1, keepdims=True)
        context = jnp.einsum("bnqk,bnkd->bnqd", weights.astype(values.dtype), values,
                             preferred_element_type=jnp.float32) / total
        return context.astype(values.dtype), peak, total

    out, peak, total = jax.lax.map(one, (query_blocks, mask_blocks))
    return out, (query_blocks, keys, values, mask_blocks, out, peak, total)


def _block_attention_backward(residuals, grad):
    query_blocks, keys, values, mask_blocks, out, peak, total = residuals
    f32 = lambda t: t.astype(jnp.float32)
    scale = 1.0 / np.sqrt(query_blocks.shape[-1])

    def one(carry, block):
        d_keys, d_values = carry
        queries, mask, block_out, block_peak, block_total, block_grad = block
        probs = jnp.exp(_block_scores(queries, keys, mask) - block_peak) / block_total  # [B, N, Q, S]
        d_values = d_values + jnp.einsum("bnqk,bnqd->bnkd", probs, f32(block_grad))
        d_probs = jnp.einsum("bnqd,bnkd->bnqk", f32(block_grad), f32(values))
        d_scores = probs * (d_probs - jnp.sum(f32(block_grad) * f32(block_out), axis=-1, keepdims=True)) * scale
        # A query that sees no key (a packed row's padding) has uniform probs but, as the masked
        # scores are constants, no gradient.
        d_scores = jnp.where(mask, d_scores, 0.0)
        d_queries = jnp.einsum("bnqk,bnkd->bnqd", d_scores, f32(keys))
        d_keys = d_keys + jnp.einsum("bnqk,bnqd->bnkd", d_scores, f32(queries))
        return (d_keys, d_values), d_queries.astype(queries.dtype)

    zeros = jnp.zeros(keys.shape, jnp.float32)
    (d_keys, d_values), d_queries = jax.lax.scan(one, (zeros, zeros),
                                                 (query_blocks, mask_blocks, out, peak, total, grad))
    return d_queries, d_keys.astype(keys.dtype), d_values.astype(values.dtype), None


block_attention.defvjp(_block_attention_forward, _block_attention_backward)


def _attention_chunks(qkv_shape: tuple[int, ...], mask_shape: tuple[int, ...], queries: int) -> tuple[int, int]:
    """(row chunks, head groups) `_by_chunks` takes heads-first q [B, N, S, D] in when `queries`
    queries of a row are scored at once: the fewest chunks of whole rows (a divisor of B) whose
    float32 scores [B / chunks, N, queries, S] fit in SCORE_CHUNK_BYTES; when not even one row's
    fit, one row a chunk in the fewest groups of heads (a divisor of N) that do, else one head a
    group. (1, 1) when the whole batch's fit (or the shapes are symbolic)."""
    batch, heads, length = qkv_shape[:3]
    if not all(isinstance(n, int) for n in (batch, heads, length)) or mask_shape[0] != batch:
        return 1, 1
    head_bytes = queries * length * 4
    fits = lambda rows, groups: rows * (heads // groups) * head_bytes <= SCORE_CHUNK_BYTES
    for chunks in range(1, batch + 1):
        if batch % chunks == 0 and fits(batch // chunks, 1):
            return chunks, 1
    groups = next((g for g in range(1, heads + 1) if heads % g == 0 and fits(1, g)), heads)
    return batch, groups


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def drop_probabilities(probs: Array, keep: Array, keep_prob: float) -> Array:
    """Inverted dropout of softmax weights (probabilities, or `_attend`'s unnormalised exp(s - max s)):
    where(keep, probs / keep_prob, 0), keep_prob > 0.

    Only for softmax weights: its gradient is taken from the output (zero where the output is zero), which the
    context product saves anyway, instead of from `keep`: XLA fuses the comparison that
    makes `keep` into the backward pass and so kept the random bits alive until then, two
    uint32 halves per probability (BERT-base, batch 8, length 128: 147 MB of the step's
    peak). Exact: where a kept weight is itself zero (a masked key), the backward of softmax
    (or of exp) multiplies that gradient by the weight, so it never reaches the scores.
    """
    return jnp.where(keep, probs / keep_prob, 0).astype(probs.dtype)


def _drop_probabilities_fwd(probs, keep, keep_prob):
    dropped = drop_probabilities(probs, keep, keep_prob)
    return dropped, dropped


def _drop_probabilities_bwd(keep_prob, dropped, grad):
    return jnp.where(dropped != 0, grad / keep_prob, 0).astype(grad.dtype), None


drop_probabilities.defvjp(_drop_probabilities_fwd, _drop_probabilities_bwd)


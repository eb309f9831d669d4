"""Splash attention (Pallas, TPU) with segment ids: padding and packed sequences in one kernel.

The kernel skips key blocks that no query of the block may see, so packed rows pay only
for their diagonal blocks. On CPU the same kernel runs in Pallas' interpret mode (slow;
for tests); on GPU use attention_impl="cudnn".
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P


def _kernel(num_heads: int, length: int, interpret: bool, half_window: int | None):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    # The largest block of at most 512 rows that divides the length (384: 384; 640: 128).
    block = length if length <= 512 else next(size for size in (512, 384, 256, 128) if length % size == 0)
    sizes = kernel.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                              block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block)
    if half_window is None:
        mask = lambda: masks.FullMask((length, length))
    else:  # the kernel skips the blocks outside the band
        mask = lambda: masks.LocalMask((length, length), window_size=(half_window, half_window), offset=0)
    heads = masks.MultiHeadMask([mask() for _ in range(num_heads)])
    return kernel.make_splash_mha(heads, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret)


def _interpret() -> bool:
    """Whether the kernel runs in Pallas' interpret mode (on CPU)."""
    return jax.default_backend() == "cpu"


def attention(q: jax.Array, k: jax.Array, v: jax.Array, sequence_ids: jax.Array,
              half_window: int | None = None) -> jax.Array:
    """q, k, v <T>[B, S, N, D], sequence_ids <int>[B, S] (a token sees keys with its own id;
    padding is id 0 and sees only padding; half_window: and only keys that near) -> <T>[B, S, N, D].

    Under a mesh (`sharding.activate`) the kernel runs on each device's rows and heads (batch
    over data and fsdp, heads over tensor, as the activations are laid out; a dimension they
    do not divide, as a model's one-row initialisation batch, is whole on every device): XLA
    cannot partition a Mosaic kernel, so a jit over several devices would not compile on a TPU."""
    if jax.default_backend() == "gpu":
        raise ValueError("BertConfig.attention_impl='splash' is a TPU kernel; use 'cudnn' on GPUs")
    if q.shape[1] % 128:
        raise ValueError("BertConfig.attention_impl='splash' needs a sequence length divisible by 128, got "
                         f"{q.shape[1]}")
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return _local_attention(q, k, v, sequence_ids, half_window)
    batch = tuple(name for name in ("data", "fsdp") if name in mesh.axis_names)
    batch = batch if q.shape[0] % int(np.prod([mesh.shape[name] for name in batch])) == 0 else None
    heads = "tensor" if "tensor" in mesh.axis_names and q.shape[2] % mesh.shape["tensor"] == 0 else None
    rows = P(batch, None, heads, None)  # [B, S, N, D]
    local = jax.shard_map(functools.partial(_local_attention, half_window=half_window), mesh=mesh,
                          in_specs=(rows, rows, rows, P(batch, None)), out_specs=rows, check_vma=False)
    return local(q, k, v, sequence_ids)


def _local_attention(q: jax.Array, k: jax.Array, v: jax.Array, sequence_ids: jax.Array,
                     half_window: int | None) -> jax.Array:
    """`attention` on one device's rows and heads."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel

    _, length, heads, head_dim = q.shape
    run = _kernel(heads, length, _interpret(), half_window)
    to_heads = lambda t: jnp.swapaxes(t, 1, 2)  # [B, N, S, D]: the kernel's layout
    q = to_heads(q) / np.sqrt(head_dim).astype(q.dtype)  # the kernel does not scale

    def one(q1, k1, v1, ids):
        return run(q1, k1, v1, segment_ids=kernel.SegmentIds(q=ids, kv=ids))

    out = jax.vmap(one)(q, to_heads(k), to_heads(v), sequence_ids.astype(jnp.int32))
    return to_heads(out)

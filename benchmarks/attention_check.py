r"""Each attention implementation against plain XLA attention on this machine's backend.

  python benchmarks/attention_check.py [--preset=small] [--dtype=bfloat16]

For padded rows and for packed rows (three sequences per row, block-diagonal), prints the
relative error ||out - ref|| / ||ref|| of the encoder output (real tokens only) and of
the gradient of a scalar loss with respect to all parameters. Implementations tried:
"fused" everywhere, "cudnn" on GPUs, "splash" on TPUs (and, interpreted, on CPU) at lengths
that are a multiple of its 128-token tiles.
"""

import os
import sys

from absl import flags
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from anywhere
from bertjax.runtime import cli  # noqa: E402  (bad flags: one line)

_PRESET = flags.DEFINE_string("preset", "small", "BERT size.")
_DTYPE = flags.DEFINE_string("dtype", "bfloat16", "Compute dtype (cuDNN needs bfloat16 or float16).")
_LENGTH = flags.DEFINE_integer("seq_len", 256, "Sequence length.")


def _inputs(rng, batch: int, length: int, packed: bool) -> dict:
    ids = rng.integers(5, 1000, (batch, length)).astype(np.int32)
    lengths = rng.integers(length // 2, length + 1, batch)
    real = np.arange(length)[None, :] < lengths[:, None]
    inputs = dict(input_ids=ids, token_type_ids=np.zeros_like(ids), attention_mask=real.astype(np.int32))
    if packed:
        starts = np.stack([[0, length // 4, length // 2]] * batch)
        sequence = (np.arange(length)[None, :, None] >= starts[:, None, :]).sum(-1) * real
        position = np.arange(length)[None, :] - np.take_along_axis(starts, np.maximum(sequence - 1, 0), axis=1)
        inputs.update(sequence_ids=sequence.astype(np.int32), position_ids=position.astype(np.int32),
                      pooled_positions=starts.astype(np.int32))
    return inputs, real


def main(_):
    import jax
    import jax.numpy as jnp
    import flax.linen as nn

    from bertjax.models import BertConfig, BertEncoder

    backend = jax.default_backend()
    if _LENGTH.value < 8 or _DTYPE.value not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"--seq_len must be >= 8 and --dtype float32, bfloat16 or float16 (got {_LENGTH.value}, "
                         f"{_DTYPE.value!r})")
    impls = ["fused"] + (["cudnn"] if backend == "gpu" else []) + (
        ["splash"] if backend in ("tpu", "cpu") and _LENGTH.value % 128 == 0 else [])  # (splash tiles 128 tokens)
    base = BertConfig.preset(_PRESET.value, vocab_size=1000, dtype=_DTYPE.value, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    rng = np.random.default_rng(0)
    print(f"{jax.devices()[0].device_kind} ({backend}), BERT-{_PRESET.value}, {_DTYPE.value}, length {_LENGTH.value}")
    print(f"{'implementation':16} {'rows':7} {'output rel. err':>16} {'gradient rel. err':>18}")
    for packed in (False, True):
        inputs, real = _inputs(rng, 4, _LENGTH.value, packed)
        params = nn.unbox(BertEncoder(base).init(jax.random.key(0), **inputs)["params"])

        def run(config):
            model = BertEncoder(config)

            def loss(p):
                sequence, pooled = model.apply({"params": p}, **inputs)
                return jnp.sum(jnp.where(real[..., None], sequence, 0).astype(jnp.float32) ** 2), sequence

            (_, sequence), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
            return np.asarray(sequence, np.float32)[real], grads

        ref_out, ref_grads = run(base)
        for impl in impls:
            out, grads = run(base.replace(attention_impl=impl))
            error = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))
            flat = lambda g: np.concatenate([np.asarray(x, np.float32).ravel() for x in jax.tree_util.tree_leaves(g)])
            print(f"{impl:16} {'packed' if packed else 'padded':7} {error(out, ref_out):16.2e} "
                  f"{error(flat(grads), flat(ref_grads)):18.2e}", flush=True)


if __name__ == "__main__":
    cli.run(main)

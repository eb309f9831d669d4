"""Dropout from 16-bit random draws: two per 32-bit random word.

`jax.random.bernoulli` spends one 32-bit draw (one threefry hash) and a float conversion per
element; dropout needs far less resolution. Here each 32-bit word gives two 16-bit draws and
an element is dropped when its draw is below round(rate x 65536): the drop probability is
`rate` rounded to a multiple of 1/65536 (0.1 -> 0.1000061), and kept values are scaled by
the exact keep probability, so the expected output still equals the input. A quarter of
the hashing makes the masks several times cheaper, which matters most on accelerators,
where hidden dropout was a visible part of the BERT-large step (benchmarks/README.md#dropout-masks).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array
_DRAWS = 65536  # values of one 16-bit draw


def drop_threshold(rate: float) -> int:
    """Draws below this many of 65536 are dropped."""
    return int(round(rate * _DRAWS))


def keep_probability(rate: float) -> float:
    """The exact probability that an element is kept at this rate."""
    return 1.0 - drop_threshold(rate) / _DRAWS


def keep_mask(rng: Array, shape: tuple[int, ...], rate: float) -> Array:
    """<bool>[*shape]: True with probability keep_probability(rate), independently per element.

    Draws are laid out along the last axis (a row's draws come from that row's words), so a
    mask sharded by rows needs no communication."""
    *rows, last = shape
    words = jax.random.bits(rng, (*rows, (last + 1) // 2), jnp.uint32)
    draws = jax.lax.bitcast_convert_type(words, jnp.uint16).reshape(*rows, -1)[..., :last]
    return draws.astype(jnp.uint32) >= drop_threshold(rate)


class Dropout(nn.Module):
    """Inverted dropout of `x` (any shape) with the rng collection 'dropout', like `nn.Dropout`."""

    rate: float

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        if deterministic or self.rate == 0.0:
            return x
        if keep_probability(self.rate) == 0.0:
            return jnp.zeros_like(x)
        keep = keep_mask(self.make_rng("dropout"), x.shape, self.rate)
        return jnp.where(keep, x / keep_probability(self.rate), 0).astype(x.dtype)

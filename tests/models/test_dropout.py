"""Dropout from 16-bit draws: its statistics, its scaling and the module's behaviour."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.models.dropout import Dropout, drop_threshold, keep_mask, keep_probability


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_drop_fraction_is_the_rate_rounded_to_1_in_65536(rate):
    shape = (64, 128, 257)  # an odd last axis: the second half of the last word is cut off
    keep = np.asarray(keep_mask(jax.random.key(0), shape, rate))
    assert keep.shape == shape and keep.dtype == bool
    expected = 1.0 - keep_probability(rate)
    assert abs(expected - rate) < 1 / 65536
    sigma = np.sqrt(expected * (1 - expected) / keep.size)
    assert abs((~keep).mean() - expected) < 4 * sigma


def test_the_two_draws_of_one_word_and_of_neighbouring_rows_are_independent():
    rate = 0.1
    dropped = ~np.asarray(keep_mask(jax.random.key(1), (512, 128, 256), rate))
    same_word = dropped[..., 0::2] & dropped[..., 1::2]
    next_row = dropped[:, :-1] & dropped[:, 1:]
    for both in (same_word, next_row):
        sigma = np.sqrt(rate**2 * (1 - rate**2) / both.size)
        assert abs(both.mean() - rate**2) < 4 * sigma


def test_expected_output_equals_the_input_and_kept_values_are_scaled_exactly():
    x = jnp.full((256, 64, 128), 3.0)
    out = np.asarray(Dropout(0.1).apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(2)}))
    kept = out[out != 0]
    np.testing.assert_allclose(kept, 3.0 / keep_probability(0.1), rtol=1e-6)
    sigma = 3.0 * np.sqrt(0.1 / 0.9 / out.size)
    assert abs(out.mean() - 3.0) < 4 * sigma


def test_module_is_deterministic_per_key_and_the_identity_when_off():
    x = jnp.ones((4, 8, 16), jnp.bfloat16)
    apply = lambda rate, det, seed: Dropout(rate).apply({}, x, deterministic=det,
                                                         rngs={"dropout": jax.random.key(seed)})
    np.testing.assert_array_equal(apply(0.3, False, 5), apply(0.3, False, 5))
    assert not np.array_equal(apply(0.3, False, 5), apply(0.3, False, 6))
    assert apply(0.3, False, 5).dtype == jnp.bfloat16
    np.testing.assert_array_equal(apply(0.3, True, 5), x)
    np.testing.assert_array_equal(apply(0.0, False, 5), x)
    assert drop_threshold(0.0) == 0 and keep_probability(0.0) == 1.0


def test_one_module_called_twice_draws_two_masks():
    class Twice(nn.Module):
        @nn.compact
        def __call__(self, x):
            dropout = Dropout(0.5)
            return dropout(x, deterministic=False), dropout(x, deterministic=False)

    first, second = Twice().apply({}, jnp.ones((16, 64)), rngs={"dropout": jax.random.key(0)})
    assert not np.array_equal(np.asarray(first) == 0, np.asarray(second) == 0)

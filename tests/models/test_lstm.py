"""The LSTM recurrence's hand-written backward pass against JAX's differentiation of the same
scan (tests/test_features.py checks the whole BiLSTM against flax's LSTM cells)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.models import lstm


def _inputs(dtype, steps=7, batch=3, units=5):
    keys = jax.random.split(jax.random.key(0), 4)
    projected = jax.random.normal(keys[0], (steps, 2, batch, 4 * units)).astype(dtype)
    w_recurrent = (0.5 * jax.random.normal(keys[1], (2, units, 4 * units))).astype(dtype)
    valid = jax.random.uniform(keys[2], (steps, batch)) < 0.7  # any pattern: gaps, not only prefixes
    valid = valid.at[:, 0].set(True).at[:, 2].set(False)         # a full row and an empty one
    d_outputs = jax.random.normal(keys[3], (steps, 2, batch, units))  # at invalid steps too
    return projected, w_recurrent, valid, d_outputs


def _plain(projected, w_recurrent, valid):
    return lstm._scan(projected, w_recurrent, valid, keep_residuals=False)[0]


@pytest.mark.parametrize("dtype, tolerance", [(jnp.float32, 1e-5), (jnp.bfloat16, 3e-2)])
def test_the_backward_pass_equals_differentiating_the_scan(dtype, tolerance):
    projected, w_recurrent, valid, d_outputs = _inputs(dtype)
    ours, ours_vjp = jax.vjp(lambda p, w: lstm.lstm_recurrence(p, w, valid), projected, w_recurrent)
    theirs, theirs_vjp = jax.vjp(lambda p, w: _plain(p, w, valid), projected, w_recurrent)
    np.testing.assert_array_equal(ours, theirs)
    assert ours.dtype == jnp.float32
    for mine, reference in zip(jax.jit(ours_vjp)(d_outputs), jax.jit(theirs_vjp)(d_outputs)):
        assert mine.dtype == reference.dtype == dtype
        mine, reference = np.asarray(mine, np.float32), np.asarray(reference, np.float32)
        np.testing.assert_allclose(mine, reference, atol=tolerance * np.abs(reference).max())
        assert np.abs(reference).max() > 0.1
    read = valid[:, None, :, None]  # a caller reading valid steps only: an empty row's inputs get no gradient
    d_projected = ours_vjp(jnp.where(read, d_outputs, 0.0))[0]
    assert np.all(np.asarray(d_projected[:, :, 2], np.float32) == 0.0)
    assert np.abs(np.asarray(d_projected[:, :, 0], np.float32)).max() > 0.1  # the full row's do

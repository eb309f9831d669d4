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


def _plain(projected, w_recurrent, valid, product_dtype):
    return lstm._scan(product_dtype, projected, w_recurrent, valid, keep_residuals=False)[0]


@pytest.mark.parametrize("dtype, product_dtype, tolerance", [
    (jnp.float32, "float32", 1e-5), (jnp.bfloat16, "bfloat16", 3e-2), (jnp.float32, "bfloat16", 3e-2)])
def test_the_backward_pass_equals_differentiating_the_scan(dtype, product_dtype, tolerance):
    projected, w_recurrent, valid, d_outputs = _inputs(dtype)
    ours, ours_vjp = jax.vjp(lambda p, w: lstm.lstm_recurrence(p, w, valid, product_dtype), projected, w_recurrent)
    theirs, theirs_vjp = jax.vjp(lambda p, w: _plain(p, w, valid, product_dtype), projected, w_recurrent)
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


def test_bfloat16_products_round_only_the_products_operands():
    """product_dtype="bfloat16" over float32 inputs: every product of the forward and backward
    passes takes bfloat16 operands and sums in float32; the results stay near float32
    products' and keep float32 (the gates, the cell and the state are not rounded)."""
    projected, w_recurrent, valid, d_outputs = _inputs(jnp.float32)
    run = lambda product_dtype: lambda p, w: jnp.sum(lstm.lstm_recurrence(p, w, valid, product_dtype) * d_outputs)
    gradients = jax.grad(run("bfloat16"), argnums=(0, 1))
    jaxpr = jax.make_jaxpr(gradients)(projected, w_recurrent).jaxpr

    from models.test_bert import _dot_generals

    products = list(_dot_generals(jaxpr))
    assert len(products) == 3  # the forward step's, the backward step's, the recurrent weights' gradient
    for eqn in products:
        assert [v.aval.dtype for v in eqn.invars] == [jnp.bfloat16] * 2
        assert eqn.outvars[0].aval.dtype == jnp.float32
    outputs, reference = (lstm.lstm_recurrence(projected, w_recurrent, valid, dtype)
                          for dtype in ("bfloat16", "float32"))
    assert outputs.dtype == jnp.float32
    assert 1e-4 < np.abs(outputs - reference).max() < 0.05
    exact_gradients = jax.grad(run("float32"), argnums=(0, 1))(projected, w_recurrent)
    for mine, exact in zip(gradients(projected, w_recurrent), exact_gradients):
        assert mine.dtype == jnp.float32
        np.testing.assert_allclose(mine, exact, atol=0.05 * np.abs(exact).max())

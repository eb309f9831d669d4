"""The LSTM recurrence of the BiLSTM tagging head, with a hand-written backward pass.

Both directions step together: the inputs are the gates' input projections of every step,
computed beforehand as one product, and each step is one [2, B, U] x [2, U, 4U] product and
the gates (flax's OptimizedLSTMCell: gates i, f, g, o; c' = f c + i g, h' = o tanh(c')).
The products take their operands in `product_dtype` and sum in float32; the gates, the cell
and the hidden state stay float32. With bfloat16 products (matmul_precision="bfloat16", as
the dense layers multiply, for a CPU's AMX units) the hidden state is rounded only as a
product's operand, as PyTorch's LSTM under torch.autocast rounds it.

Why a custom VJP: differentiating the scan accumulates the recurrent weights' gradient a step
at a time, a [U, B] x [B, 4U] product per step whose B rows (the batch) keep it far below
the matmul rate. The backward here keeps every step's gate gradients and takes the weight
gradient after the scan as one product over all S x B rows; the step-by-step part is left
with what is truly sequential (the hidden state's gradient through the recurrent weights).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

Array = jax.Array


def _product(spec: str, a: Array, b: Array) -> Array:
    """einsum(spec, a, b) of operands in b's dtype (the products'), summed in float32."""
    return jnp.einsum(spec, a.astype(b.dtype), b, preferred_element_type=jnp.float32)


def _step(carry, projected: Array, valid: Array, w_product: Array):
    """One step of both directions: carry (cell, hidden) <f32>[2, B, U] each, projected
    [2, B, 4U], valid <bool>[B] (rows past their end keep their state), w_product the
    recurrent weights in the products' dtype -> (new carry, output <f32>[2, B, U], gate
    activations <f32>[2, B, 4U], new cell <f32>[2, B, U])."""
    cell, hidden = carry
    gates = projected.astype(jnp.float32) + _product("dbu,dug->dbg", hidden, w_product)
    gate_i, gate_f, gate_g, gate_o = jnp.split(gates, 4, axis=-1)
    gate_i, gate_f, gate_o = jax.nn.sigmoid(gate_i), jax.nn.sigmoid(gate_f), jax.nn.sigmoid(gate_o)
    gate_g = jnp.tanh(gate_g)
    new_cell = gate_f * cell + gate_i * gate_g
    new_hidden = gate_o * jnp.tanh(new_cell)
    keep = valid[None, :, None]
    carry = (jnp.where(keep, new_cell, cell), jnp.where(keep, new_hidden, hidden))
    return carry, new_hidden, jnp.concatenate([gate_i, gate_f, gate_g, gate_o], axis=-1), new_cell


def _scan(product_dtype: str, projected: Array, w_recurrent: Array, valid: Array, keep_residuals: bool):
    """-> (outputs <f32>[S, 2, B, U], `_backward`'s residuals if keep_residuals else None)."""
    _, batch, width = projected.shape[1:]
    zeros = jnp.zeros((2, batch, width // 4), jnp.float32)
    w_product = w_recurrent.astype(product_dtype)

    def step(carry, inputs):
        new_carry, output, gates, new_cell = _step(carry, *inputs, w_product)
        return new_carry, ((output, gates, new_cell, carry) if keep_residuals else (output,))

    _, (outputs, *residuals) = jax.lax.scan(step, (zeros, zeros), (projected, valid))
    return outputs, (tuple(residuals) if keep_residuals else None)


def lstm_recurrence(projected: Array, w_recurrent: Array, valid: Array, product_dtype: str) -> Array:
    """Both directions' LSTM over S steps from zero states.

    projected: the gates' input projections plus bias [S, 2, B, 4U] (gates i, f, g, o);
    w_recurrent: [2, U, 4U]; valid: <bool>[S, B] (a row's state does not change at its invalid
    steps); product_dtype: the recurrent products' operands ("float32" or "bfloat16").
    Returns every step's new hidden state <f32>[S, 2, B, U] (at an invalid step: what the step
    would have given; callers read valid steps only). Gradients come back in projected's and
    w_recurrent's dtypes.
    """
    return _recurrence(jnp.dtype(product_dtype).name, jnp.dtype(projected.dtype).name, projected, w_recurrent, valid)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _recurrence(product_dtype, projected_dtype, projected, w_recurrent, valid):
    return _scan(product_dtype, projected, w_recurrent, valid, keep_residuals=False)[0]


def _forward(product_dtype, projected_dtype, projected, w_recurrent, valid):
    outputs, residuals = _scan(product_dtype, projected, w_recurrent, valid, keep_residuals=True)
    return outputs, (residuals, w_recurrent, valid)


def _backward(product_dtype, projected_dtype, saved, d_outputs):
    (gates, new_cells, (cells, hiddens)), w_recurrent, valid = saved
    w_product = w_recurrent.astype(product_dtype)

    def step(carry, inputs):
        d_cell, d_hidden = carry                                      # cotangents of the carry after the step
        d_output, gate, new_cell, cell, valid = inputs
        keep = valid[None, :, None]
        gate_i, gate_f, gate_g, gate_o = jnp.split(gate, 4, axis=-1)
        d_new_hidden = d_output + jnp.where(keep, d_hidden, 0.0)
        tanh_cell = jnp.tanh(new_cell)
        d_new_cell = jnp.where(keep, d_cell, 0.0) + d_new_hidden * gate_o * (1.0 - tanh_cell ** 2)
        d_gates = jnp.concatenate([d_new_cell * gate_g * gate_i * (1.0 - gate_i),
                                   d_new_cell * cell * gate_f * (1.0 - gate_f),
                                   d_new_cell * gate_i * (1.0 - gate_g ** 2),
                                   d_new_hidden * tanh_cell * gate_o * (1.0 - gate_o)], axis=-1)
        d_gates = d_gates.astype(projected_dtype)
        d_prev_hidden = _product("dbg,dug->dbu", d_gates, w_product)
        d_prev_cell = d_new_cell * gate_f + jnp.where(keep, 0.0, d_cell)
        d_prev_hidden = d_prev_hidden + jnp.where(keep, 0.0, d_hidden)
        return (d_prev_cell, d_prev_hidden), d_gates

    zeros = jnp.zeros_like(cells[0])
    _, d_gates = jax.lax.scan(step, (zeros, zeros), (d_outputs, gates, new_cells, cells, valid), reverse=True)
    d_w_recurrent = _product("sdbu,sdbg->dug", hiddens.astype(product_dtype), d_gates.astype(product_dtype))
    return d_gates, d_w_recurrent.astype(w_recurrent.dtype), None


_recurrence.defvjp(_forward, _backward)

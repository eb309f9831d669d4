"""bf16_matmul: bfloat16-rounded operands, float32 sums, and a backward pass in the plain form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.models import bf16_matmul


def _rounded(a):
    return np.asarray(jnp.asarray(a).astype(jnp.bfloat16).astype(jnp.float32))


def _operands(dtype, m=24, k=16, n=10):
    rng = np.random.default_rng(0)
    x, w, dy = (jnp.asarray(rng.normal(size=shape), dtype) for shape in ((m, k), (k, n), (m, n)))
    return x, w, dy


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_product_and_gradients_are_float32_sums_of_bfloat16_operands(dtype):
    x, w, dy = _operands(dtype)
    out, backward = jax.vjp(bf16_matmul.matmul, x, w)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, _rounded(x) @ _rounded(w), rtol=1e-6, atol=1e-5)
    dx, dw = backward(dy.astype(jnp.float32))
    assert (dx.dtype, dw.dtype) == (x.dtype, w.dtype)  # each gradient in its operand's dtype
    tolerance = dict(rtol=1e-6, atol=1e-5) if dtype == jnp.float32 else dict(rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(np.asarray(dx, np.float32), _rounded(dy) @ _rounded(w).T, **tolerance)
    np.testing.assert_allclose(np.asarray(dw, np.float32), _rounded(x).T @ _rounded(dy), **tolerance)
    # Rounding is real: float32 operands give a different product beyond float32 rounding.
    if dtype == jnp.float32:
        assert np.abs(np.asarray(out) - np.asarray(x) @ np.asarray(w)).max() > 1e-3


def test_the_backward_products_read_operands_transposed_in_memory():
    """Every product, forward and backward, is [M, K] . [K, N] with bfloat16 operands and a
    float32 result, the only form XLA:CPU gives its AMX kernels; a transposed operand comes
    from a reshape of a transpose (a bare transpose XLA would fold into the product)."""
    x, w, dy = _operands(jnp.float32)
    jaxpr = jax.make_jaxpr(lambda x, w: jax.vjp(bf16_matmul.matmul, x, w)[1](dy))(x, w).jaxpr
    producer = {str(out): eqn.primitive.name for eqn in jaxpr.eqns for out in eqn.outvars}
    products = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == "dot_general"]
    assert len(products) == 3  # y, dx, dw
    for eqn in products:
        assert eqn.params["dimension_numbers"] == (((1,), (0,)), ((), ()))
        assert [v.aval.dtype for v in eqn.invars] == [jnp.bfloat16, jnp.bfloat16]
        assert eqn.params["preferred_element_type"] == jnp.float32
        assert "transpose" not in [producer.get(str(v)) for v in eqn.invars]
    assert sorted(producer.get(str(v)) for eqn in products[1:] for v in eqn.invars).count("reshape") == 2


@pytest.mark.parametrize("shape", [(832, 384), (12, 5), (26, 3), (13, 4), (1, 7), (2, 3)])
def test_transposed_in_memory_is_the_transpose(shape):
    a = jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape)
    np.testing.assert_array_equal(jax.jit(bf16_matmul.transposed_in_memory)(a), np.asarray(a).T)


@pytest.mark.parametrize("flags, amx, instructions", [
    ("flags\t\t: fpu sse avx512f amx_bf16 amx_tile amx_int8\n", True, True),
    ("flags\t\t: fpu sse avx512f avx512_bf16\n", False, True),  # bfloat16 vector instructions, no AMX
    ("model name\t: amx_bf16 in a name\nflags\t\t: fpu\n", False, False),
])
def test_amx_is_read_from_the_cpu_flags(tmp_path, flags, amx, instructions):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\n" + flags)
    assert bf16_matmul.has_amx_bf16(str(tmp_path / "cpuinfo")) is amx
    assert bf16_matmul.has_bf16_instructions(str(tmp_path / "cpuinfo")) is instructions
    assert bf16_matmul.has_amx_bf16(str(tmp_path / "missing")) is False

"""Dense products with bfloat16 operands and float32 accumulation, laid out for a CPU's AMX units.

`BertConfig.matmul_precision = "bfloat16"` routes every dense layer's product through
`matmul`: x [M, K] . w [K, N] with both operands rounded to bfloat16 and the sums kept in
float32, as a TPU multiplies float32 operands at JAX's default precision (so the original
BERT's TPU runs did too). The result is float32; the layer casts it to its compute dtype.

Why a product of its own: on a CPU with AMX-BF16 (Intel Xeon since Sapphire Rapids), XLA
hands a bfloat16 product to its YNN kernels only in the plain form [M, K] . [K, N] with a
float32 result. Both products of the backward pass (dx = dy . w^T, dw = x^T . dy) have a
transposed operand; XLA folds any transpose into the product's dimension numbers and then
runs it in float32 after converting the operands, slower than float32 throughout. Here the
backward pass transposes its operands in memory first, as a reshape of a transpose that XLA
cannot fold, and multiplies in the plain form: faster than float32 and than bfloat16
operands left to XLA (benchmarks/README.md#bfloat16-products-on-amx).

    matmul(x, w) -> <f32>[M, N]; its gradients come back in x's and w's dtypes
    has_amx_bf16() -> whether this host's CPU has the bfloat16 matrix units
    has_bf16_instructions() -> whether it has bfloat16 dot-product instructions (AMX or AVX512_BF16)
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

Array = jax.Array
_SMALL_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31)


def matmul(x: Array, w: Array) -> Array:
    """<T>[M, K] . <U>[K, N] -> <f32>[M, N] from bfloat16-rounded operands."""
    return _matmul(jnp.dtype(x.dtype).name, jnp.dtype(w.dtype).name, x, w)


def _plain_product(a: Array, b: Array) -> Array:
    """<bf16>[M, K] . <bf16>[K, N] -> <f32>[M, N], the one form XLA:CPU gives its bf16 kernels."""
    return jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def transposed_in_memory(a: Array) -> Array:
    """[M, K] -> [K, M], written out: the transpose of a [d, M / d, K] reshape, merged back,
    which XLA cannot fold into the product that reads it (a plain transpose it would).
    M with no small prime factor (rare: M is rows = batch x length) keeps the plain transpose."""
    rows, columns = a.shape
    factor = next((p for p in _SMALL_PRIMES if rows % p == 0 and rows > p), None)
    if factor is None:
        return a.T
    return jnp.transpose(a.reshape(factor, rows // factor, columns), (2, 0, 1)).reshape(columns, rows)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _matmul(x_dtype: str, w_dtype: str, x: Array, w: Array) -> Array:
    return _forward(x_dtype, w_dtype, x, w)[0]


def _forward(x_dtype, w_dtype, x, w):
    x, w = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    return _plain_product(x, w), (x, w)


def _backward(x_dtype, w_dtype, residuals, dy):
    x, w = residuals
    dy = dy.astype(jnp.bfloat16)
    dx = _plain_product(dy, transposed_in_memory(w))
    dw = _plain_product(transposed_in_memory(x), dy)
    return dx.astype(x_dtype), dw.astype(w_dtype)


_matmul.defvjp(_forward, _backward)


@functools.cache
def _cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The CPU's flags in /proc/cpuinfo (Linux; elsewhere none)."""
    try:
        with open(cpuinfo) as f:
            return frozenset(word for line in f if line.startswith("flags") for word in line.split()[2:])
    except OSError:
        return frozenset()


def has_amx_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU lists the `amx_bf16` flag (the matrix units training's products use)."""
    return "amx_bf16" in _cpu_flags(cpuinfo)


def has_bf16_instructions(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU multiplies bfloat16 in hardware: AMX-BF16 (Intel Xeon since Sapphire
    Rapids) or AVX512_BF16 (also AMD Zen 4 and later): inference products that run faster
    than float32 there."""
    return bool({"amx_bf16", "avx512_bf16"} & _cpu_flags(cpuinfo))

"""The small pieces the encoder (bert.py, attention.py) and the task heads (heads.py) are built
of: initialisers with logical axis names, dense layers whose product runs over rows,
layer norms and activations as BertConfig chooses them."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.models import bf16_matmul
from bertjax.models.config import BertConfig
from bertjax.sharding import Axis

Array = jax.Array
_partition = nn.with_logical_partitioning


def init_stddev(config: BertConfig, role: str = "in") -> float:
    """A kernel's init stddev (truncated normal, cut at 2 sigma). BERT: initializer_range for
    every one. A pre-norm encoder (the modern one), as ModernBERT initialises: "in"
    initializer_range; "out" (a layer that writes into the residual stream, or a prediction
    head's dense) initializer_range / sqrt(2 L), so that the un-normalised residual stream's
    variance does not grow with depth; "final" (a task's logits) hidden_size ** -0.5."""
    if config.norm_placement != "pre" or role == "in":
        return config.initializer_range
    if role == "out":
        return config.initializer_range / math.sqrt(2 * config.num_hidden_layers)
    if role == "final":
        return config.hidden_size ** -0.5
    raise ValueError(f"init_stddev: role must be 'in', 'out' or 'final', got {role!r}")


def dense_init(config: BertConfig, names: tuple[str, ...], role: str = "in"):
    """Truncated-normal(`init_stddev`) kernel init carrying logical axis names."""
    return _partition(nn.initializers.truncated_normal(init_stddev(config, role)), names)


def zeros_init(names: tuple[str, ...]):
    return _partition(nn.initializers.zeros_init(), names)



def activation(name: str):
    """'gelu' = exact erf GELU (Hugging Face), 'gelu_tanh' = original TF approximation.

    Recomputed from its input in the backward pass (`jax.checkpoint`): the forward pass keeps
    the input, which the matmul before it wrote anyway, instead of two more [B, S, I]
    tensors of the derivative's factors (XLA on an H100 still wrote one per layer)."""
    return jax.checkpoint({
        "gelu": functools.partial(jax.nn.gelu, approximate=False),
        "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),
        "relu": jax.nn.relu,
        "silu": jax.nn.silu,
    }[name])


def layer_norm(config: BertConfig, name: str) -> nn.LayerNorm:
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps, dtype=config.dtype, param_dtype=config.param_dtype, use_bias=config.norm_bias,
        scale_init=_partition(nn.initializers.ones_init(), (Axis.EMBED,)),
        bias_init=zeros_init((Axis.EMBED,)), name=name)


def dot_over_rows(inputs: Array, kernel: Array, dimension_numbers: Any, precision: Any = None,
                  preferred_element_type: Any = None, *, bfloat16_operands: bool = False) -> Array:
    """nn.Dense's product <T>[..., K] x [K, N] -> <T>[..., N] as one [rows, K] x [K, N] matmul.

    The same values; what changes is the kernel's gradient: a product over one row axis,
    x^T [K, rows] . dy [rows, N], where over [B, S] XLA:CPU transposed both operands and ran
    the slowest form of the matmul (benchmarks/README.md#dense-layers-over-rows). The leading axes merged are batch and
    length, never split over one another (act_length is not sharded): the reshape moves no data.
    bfloat16_operands: the product of `bf16_matmul.matmul` (matmul_precision="bfloat16").
    """
    if dimension_numbers != (((inputs.ndim - 1,), (0,)), ((), ())):
        raise ValueError(f"dot_over_rows is nn.Dense's product, got dimension_numbers {dimension_numbers}")
    if bfloat16_operands:
        return over_rows(lambda rows: bf16_matmul.matmul(rows, kernel).astype(inputs.dtype), inputs)
    return over_rows(lambda rows: jax.lax.dot_general(rows, kernel, (((1,), (0,)), ((), ())), precision=precision,
                                                      preferred_element_type=preferred_element_type), inputs)


def kernels_in_bfloat16(module: nn.Module, params: Any, *inputs: Any) -> Any:
    """`params` with the kernel of every dense layer whose product rounds its operands to
    bfloat16 (`dot_over_rows(bfloat16_operands=True)`) stored rounded; every other leaf as it is.

    The same products (rounding is idempotent), without a conversion of each float32 kernel
    on every call, which inference would otherwise repeat batch after batch
    (benchmarks/README.md#bfloat16-inference-on-amx). The layers are the ones
    `module.apply({"params": params}, *inputs)` calls, found by tracing it for shapes only;
    any other kernel (a head's float32 logits layer, an LSTM's, stacked per layer before its
    products) stays as it is."""
    rounded = set()

    def record(call, args, kwargs, context):
        product = getattr(context.module, "dot_general", None)
        if isinstance(context.module, nn.Dense) and getattr(product, "keywords", {}).get("bfloat16_operands"):
            rounded.add(context.module.path)
        return call(*args, **kwargs)

    with nn.intercept_methods(record):
        jax.eval_shape(lambda tree: module.apply({"params": tree}, *inputs), params)

    def cast(path, leaf):
        names = tuple(entry.key for entry in path)
        return leaf.astype(jnp.bfloat16) if names[-1] == "kernel" and names[:-1] in rounded else leaf

    return jax.tree_util.tree_map_with_path(cast, params)


def over_rows(fn: Callable[[Array], Array], x: Array) -> Array:
    """fn applied to x <T>[..., K] as rows [prod(...), K] -> [..., N]."""
    out = fn(x.reshape(-1, x.shape[-1]))
    return out.reshape(*x.shape[:-1], out.shape[-1])


def dense(config: BertConfig, features: int, names: tuple[str, str], name: str, bias: bool | None = None,
          role: str = "in") -> nn.Dense:
    """A dense layer with a bias when `bias` says (None: config.use_bias), its kernel drawn as
    `init_stddev(config, role)` says."""
    product = functools.partial(dot_over_rows, bfloat16_operands=config.matmul_precision == "bfloat16")
    return nn.Dense(
        features, dtype=config.dtype, param_dtype=config.param_dtype, dot_general=product,
        use_bias=config.use_bias if bias is None else bias,
        kernel_init=dense_init(config, names, role), bias_init=zeros_init(names[1:]), name=name)



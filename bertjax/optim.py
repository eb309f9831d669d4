"""Optimizers, learning-rate schedules and the weight-decay mask.

Defaults are the original BERT release's (`optimization.py`): AdamWeightDecay with
b1 0.9, b2 0.999, eps 1e-6, weight decay 0.01 on everything but LayerNorm and
biases, global-norm clipping at 1.0, linear warmup then linear decay to 0.

Everything is read from the `train` config section (an ml_collections ConfigDict
or any attribute object) through these keys:

    optimizer      'adamw' (the original AdamWeightDecay) | 'stable_adamw' (AdamW with update
                   clipping, as ModernBERT trained) | 'lamb'
    learning_rate  peak learning rate, > 0
    schedule       'linear' | 'cosine' | 'constant' | 'inverse_sqrt' | 'wsd' (warmup-stable-decay)
    decay_fraction 'wsd' only (optional, default 0.1): the last share of num_steps that decays to 0
    decay_shape    'wsd' only (optional, default 'linear'): 'linear' | '1-sqrt'
    warmup_steps   linear warmup from 0 to learning_rate, 0 <= warmup_steps <= num_steps
    num_steps      total optimizer steps
    weight_decay   decoupled weight decay on kernels and embeddings, >= 0
    adam_b1, adam_b2, adam_eps
    max_grad_norm  global-norm clipping threshold; 0 disables clipping
    adam_bias_correction  'adamw' only (optional, default False, the original); True for the tiny
                   preset's recipe: see `scale_by_bert_adam`. 'stable_adamw' and 'lamb' always
                   bias-correct, whatever this says.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

OPTIMIZERS = ("adamw", "stable_adamw", "lamb")
SCHEDULES = ("linear", "cosine", "constant", "inverse_sqrt", "wsd")
DECAY_SHAPES = ("linear", "1-sqrt")

# The original release's values, for configs to start from (`config.train.update(DEFAULTS)`).
DEFAULTS = dict(
    optimizer="adamw", schedule="linear", weight_decay=0.01, adam_b1=0.9, adam_b2=0.999,
    adam_eps=1e-6, max_grad_norm=1.0, decay_fraction=0.1, decay_shape="linear")

# Parameter leaves that get weight decay; LayerNorm scale/bias and all biases do not.
DECAYED_LEAF_NAMES = ("kernel", "embedding")


# --------------------------------------------------------------------------------------
# Config access and validation
# --------------------------------------------------------------------------------------

def _get(train_config: Any, key: str) -> Any:
    try:
        return getattr(train_config, key)
    except (AttributeError, KeyError):
        raise ValueError(f"config.train.{key} is missing from the config") from None


def _is_number(value: Any) -> bool:
    """A finite int or float (inf passes every '> 0' and fails only after compiling)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_parameter_dtype(param_dtype: str) -> None:
    """ValueError for weights stored in 16 bits: training keeps no float32 copy of them, so an
    update below half a 16-bit step is lost (Adam at a learning rate of 2e-5 moves a bfloat16
    weight of 0.02 by less than that: it stays where it started)."""
    if param_dtype != "float32":
        raise ValueError(f"config.model.param_dtype={param_dtype!r}: training keeps no float32 copy of the weights, "
                         f"so every update smaller than half a {param_dtype} step is lost (a learning rate of 2e-5 "
                         "leaves a weight of 0.02 where it was); keep float32 (config.model.dtype=bfloat16 computes "
                         "in bfloat16 over float32 weights)")


def validate_train_config(train_config: Any) -> None:
    """Checks the optimizer/schedule keys; raises ValueError naming the first bad key."""

    def check(key: str, ok: bool, requirement: str):
        if not ok:
            raise ValueError(f"config.train.{key} must be {requirement}, got {_get(train_config, key)!r}")

    optimizer, schedule = _get(train_config, "optimizer"), _get(train_config, "schedule")
    check("optimizer", optimizer in OPTIMIZERS, f"one of {OPTIMIZERS}")
    check("schedule", schedule in SCHEDULES, f"one of {SCHEDULES}")
    lr = _get(train_config, "learning_rate")
    check("learning_rate", _is_number(lr) and lr > 0, "finite and > 0")
    num_steps = _get(train_config, "num_steps")
    check("num_steps", _is_int(num_steps) and num_steps >= 1, "an int >= 1")
    warmup = _get(train_config, "warmup_steps")
    check("warmup_steps", _is_int(warmup) and 0 <= warmup <= num_steps,
          f"an int in [0, config.train.num_steps={num_steps}] (a shorter run needs a shorter warmup: set both)")
    if schedule == "inverse_sqrt":
        check("warmup_steps", warmup > 0, "> 0 for the 'inverse_sqrt' schedule")
    fraction, shape = _wsd(train_config)  # checked whatever the schedule (a bad value read later, or never)
    check("decay_fraction", _is_number(fraction) and 0 <= fraction <= 1, "in [0, 1]")
    check("decay_shape", shape in DECAY_SHAPES, f"one of {DECAY_SHAPES}")
    if schedule == "wsd":
        # (within rounding: 1000 x (1 - 0.9) is 99.99999999999997, and a warmup of 100 fits)
        check("warmup_steps", warmup <= num_steps * (1 - fraction) + 1e-6,
              f"at most the steps before the decay, num_steps x (1 - decay_fraction) = {num_steps * (1 - fraction):g}")
    wd = _get(train_config, "weight_decay")
    check("weight_decay", _is_number(wd) and wd >= 0, "finite and >= 0")
    for key in ("adam_b1", "adam_b2"):
        value = _get(train_config, key)
        check(key, _is_number(value) and 0 <= value < 1, "in [0, 1)")
    eps = _get(train_config, "adam_eps")
    check("adam_eps", _is_number(eps) and eps > 0, "finite and > 0")
    clip = _get(train_config, "max_grad_norm")
    check("max_grad_norm", _is_number(clip) and clip >= 0, "finite and >= 0 (0 disables clipping)")
    bias_correction = getattr(train_config, "adam_bias_correction", False)
    if not isinstance(bias_correction, bool):
        raise ValueError(f"config.train.adam_bias_correction must be a bool, got {bias_correction!r}")


# --------------------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------------------

def warn_if_no_decay(train_config: Any) -> None:
    """A warning for a 'wsd' run whose decay is one step or less: every update runs at the peak
    rate (the rate reaches 0 at num_steps, one past the last update's count)."""
    if train_config.schedule != "wsd":
        return
    fraction, _ = _wsd(train_config)
    decay = train_config.num_steps * fraction
    if 0 < decay <= 1:
        logging.getLogger(__name__).warning(
            "config.train.decay_fraction=%g of num_steps=%d is %.2g steps: one or less, so no update runs below "
            "the peak learning rate", fraction, train_config.num_steps, decay)


def _wsd(train_config: Any) -> tuple[Any, Any]:
    """The 'wsd' schedule's (decay_fraction, decay_shape), with their defaults."""
    return getattr(train_config, "decay_fraction", 0.1), getattr(train_config, "decay_shape", "linear")


def schedule_numbers(train_config: Any) -> dict[str, np.ndarray]:
    """The schedule's numbers as float32 scalars: {"learning_rate", "warmup_steps", "num_steps"}.

    The train step takes them as an argument (`trainer.step_inputs`) rather than holding them
    as constants, so runs that differ only in these share one compiled program.
    """
    validate_train_config(train_config)
    return {key: np.float32(getattr(train_config, key)) for key in ("learning_rate", "warmup_steps", "num_steps")}


def make_schedule(train_config: Any, numbers: dict[str, Any] | None = None) -> optax.Schedule:
    """Learning rate as a function of the optimizer step count (0 for the first update).

    `numbers` ({"learning_rate", "warmup_steps", "num_steps"}, arrays or tracers) default to
    `schedule_numbers(train_config)`; `train_config.schedule` picks the shape.
    Every schedule warms up linearly, lr * step / warmup_steps, for step < warmup_steps.
    After warmup:
      'linear'       the original: lr * (1 - min(step, num_steps) / num_steps). As in
                     `optimization.py` the polynomial decay runs from step 0, not from the
                     end of warmup, so right after warmup it is lr * (1 - warmup/num_steps).
      'cosine'       lr * 0.5 * (1 + cos(pi * t)), t = (step - warmup) / (num_steps - warmup)
                     clipped to [0, 1]: reaches 0 at num_steps.
      'constant'     lr.
      'inverse_sqrt' lr * sqrt(warmup_steps / step) (needs warmup_steps > 0).
      'wsd'          warmup-stable-decay (MiniCPM, ModernBERT): lr until the last decay_fraction
                     of num_steps, then down to 0 at num_steps, linearly or as 1 - sqrt(t)
                     (decay_shape), t the share of the decay done.
    """
    validate_train_config(train_config)
    numbers = schedule_numbers(train_config) if numbers is None else numbers
    lr, warmup, num_steps = numbers["learning_rate"], numbers["warmup_steps"], numbers["num_steps"]
    kind = train_config.schedule

    def after_warmup(step):
        if kind == "linear":
            return lr * (num_steps - jnp.minimum(step, num_steps)) / num_steps
        if kind == "cosine":
            t = jnp.clip((step - warmup) / jnp.maximum(num_steps - warmup, 1.0), 0.0, 1.0)
            return lr * 0.5 * (1.0 + jnp.cos(jnp.pi * t))
        if kind == "constant":
            return jnp.zeros_like(step) + lr
        if kind == "wsd":
            fraction, shape = _wsd(train_config)
            decay = num_steps * fraction
            t = jnp.clip((step - (num_steps - decay)) / jnp.maximum(decay, 1.0), 0.0, 1.0)
            return lr * (1.0 - (t if shape == "linear" else jnp.sqrt(t)))
        return lr * jnp.sqrt(warmup / jnp.maximum(step, 1.0))  # inverse_sqrt

    def schedule(count):
        step = jnp.asarray(count, jnp.float32)
        return jnp.where(step < warmup, lr * step / jnp.maximum(warmup, 1.0), after_warmup(step))

    return schedule


# --------------------------------------------------------------------------------------
# Optimizers
# --------------------------------------------------------------------------------------

def decay_mask(params: Any) -> Any:
    """Bool tree like `params`: True for leaves named 'kernel' or 'embedding'.

    LayerNorm `scale`/`bias` and every dense `bias` get no weight decay, as in the
    original (which excludes names containing "LayerNorm", "layer_norm" and "bias").
    """

    def is_decayed(path, _):
        names = [entry.key for entry in path if isinstance(entry, jax.tree_util.DictKey)]
        return bool(names) and names[-1] in DECAYED_LEAF_NAMES

    return jax.tree_util.tree_map_with_path(is_decayed, params)


def scale_by_bert_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                       bias_correction: bool = False) -> optax.GradientTransformation:
    """Adam's direction m / (sqrt(v) + eps), by default WITHOUT bias correction.

    The original AdamWeightDecayOptimizer never bias-corrects m and v, which makes the first
    updates LARGER than the learning rate: for a steady gradient each coordinate moves
    (1 - b1^t) / sqrt(1 - b2^t) x lr at step t (b1 0.9, b2 0.999: 3.2 at t=1, 6.5 at t=10,
    3.2 at t=100, 1.3 at t=1000), against 1 x lr with the correction. Under the paper's 10k
    warmup steps the rate is still near 0 then; at a small model's 1e-3 after 100 warmup steps
    the burst can leave it predicting the most frequent token for good (docs/pretraining.md, Pre-training
    recipes). bias_correction=True gives optax's (and Hugging Face's AdamW's) behaviour.
    The state is `optax.ScaleByAdamState(count, mu, nu)`.
    """

    def init(params):
        zeros = lambda p: jnp.zeros_like(p, dtype=jnp.float32)
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=jax.tree.map(zeros, params),
                                      nu=jax.tree.map(zeros, params))

    def update(updates, state, params=None):
        del params
        count = optax.safe_increment(state.count)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)
        if bias_correction:
            mu_hat = jax.tree.map(lambda m: m / (1 - b1 ** count), mu)
            nu_hat = jax.tree.map(lambda v: v / (1 - b2 ** count), nu)
        else:
            mu_hat, nu_hat = mu, nu
        directions = jax.tree.map(lambda m, v, g: (m / (jnp.sqrt(v) + eps)).astype(g.dtype),
                                  mu_hat, nu_hat, updates)
        return directions, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def _per_layer_axes(path: tuple, leaf: jax.Array) -> tuple[int, ...] | None:
    """The axes a per-tensor statistic of `leaf` (at `path` in the params) sums over: all of
    them (None), or all but the first for a scanned encoder's stacked layers ([L, ...] under
    encoder/layers), so that each layer keeps its own, as when unrolled."""
    names = [entry.key for entry in path if isinstance(entry, jax.tree_util.DictKey)]
    stacked = any(outer == "encoder" and inner == "layers" for outer, inner in zip(names, names[1:]))
    return tuple(range(1, leaf.ndim)) if stacked else None


def _per_tensor(reduce, x: jax.Array, axes: tuple[int, ...] | None) -> jax.Array:
    """reduce (jnp.sum, jnp.mean) of x over `axes` (None: all), kept broadcastable to x."""
    return reduce(x, axis=axes, keepdims=axes is not None)


def scale_by_layerwise_trust_ratio(eps: float = 0.0) -> optax.GradientTransformation:
    """optax.scale_by_trust_ratio (LAMB's ||param|| / ||update||, 1 where either is 0), one
    ratio a tensor, and a layer of a scanned encoder's stacked tensors (`_per_layer_axes`).
    Its state is optax's (`ScaleByTrustRatioState`)."""

    def update(updates, state, params):
        def scale(path, u, p):
            axes = _per_layer_axes(path, u)
            norm = lambda x: jnp.sqrt(_per_tensor(jnp.sum, jnp.square(x.astype(jnp.float32)), axes))
            param_norm, update_norm = norm(p), norm(u)
            ratio = jnp.where((param_norm == 0) | (update_norm == 0), 1.0, param_norm / (update_norm + eps))
            return (u * ratio).astype(u.dtype)

        return jax.tree_util.tree_map_with_path(scale, updates, params), state

    return optax.GradientTransformation(lambda _: optax.ScaleByTrustRatioState(), update)


def scale_by_stable_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6, weight_decay: float = 0.0,
                         mask: Any = None) -> optax.GradientTransformation:
    """StableAdamW's step before the learning rate (Wortsman et al. 2023, as ModernBERT trained):
    bias-corrected Adam's direction plus decoupled weight decay, divided per tensor by
    max(1, RMS(g / sqrt(v_hat))) (a layer of a scanned encoder's stacked tensors by its own).

    That RMS is about 1 while v_hat tracks the gradients' scale; a gradient far above what v
    has seen (a spike after quiet steps, when b2 averages slowly) pushes it up, and the tensor's
    step is then capped at about the learning rate instead of jumping: update clipping in
    place of (or beside) global-norm clipping. `mask(params)` (a bool tree) picks the decayed
    leaves. The state is `optax.ScaleByAdamState(count, mu, nu)`, as AdamW's.
    """

    def init(params):
        zeros = lambda p: jnp.zeros_like(p, dtype=jnp.float32)
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=jax.tree.map(zeros, params),
                                      nu=jax.tree.map(zeros, params))

    def update(updates, state, params=None):
        count = optax.safe_increment(state.count)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)
        first, second = 1 - b1 ** count, 1 - b2 ** count
        decayed = mask(params) if mask is not None else jax.tree.map(lambda _: True, params)

        def step(path, m, v, g, p, decay):
            v_hat = v / second
            ratio = jnp.square(g.astype(jnp.float32)) / jnp.maximum(v_hat, eps * eps)
            rms = jnp.sqrt(_per_tensor(jnp.mean, ratio, _per_layer_axes(path, g)))
            direction = (m / first) / (jnp.sqrt(v_hat) + eps)
            if decay and weight_decay:
                direction = direction + weight_decay * p.astype(jnp.float32)
            return (direction / jnp.maximum(1.0, rms)).astype(g.dtype)

        directions = jax.tree_util.tree_map_with_path(step, mu, nu, updates, params, decayed)
        return directions, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformationExtraArgs:
    """Every gradient times max_norm / max(global_norm, max_norm), as `tf.clip_by_global_norm`.

    One scalar multiply, which XLA fuses into the optimizer's own passes over each leaf
    (optax's version divides every element by the norm, a division XLA writes out to a
    buffer of its own: one pass more over all gradients). `global_norm`, an extra argument
    of `update`, is the norm the caller has already computed (the train step's, outside its
    update branch); without it, the updates' own. Both together save a pass over the
    gradients (benchmarks/README.md#gradient-clip). The state is `optax.EmptyState()`, as optax's, so
    checkpoints written with either restore into the other.
    """

    def update(updates, state, params=None, *, global_norm=None, **extra_args):
        del params, extra_args
        norm = optax.tree.norm(updates) if global_norm is None else global_norm
        scale = max_norm / jnp.maximum(norm, max_norm)
        return jax.tree.map(lambda g: g * scale.astype(g.dtype), updates), state

    return optax.GradientTransformationExtraArgs(optax.init_empty_state, update)


def make_optimizer(train_config: Any, schedule: optax.Schedule | None = None) -> optax.GradientTransformationExtraArgs:
    """The configured optimizer: clip -> optimizer with decoupled decay -> schedule.

    `schedule` defaults to `make_schedule(train_config)`; the train step passes one built from
    its run-time numbers. Either way the optimizer state has the same structure.

    'adamw': the original AdamWeightDecay. Per step, with g the clipped gradient:
        m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
        param -= lr * (m / (sqrt(v) + eps) + weight_decay * param * decay_mask)
    'stable_adamw': bias-corrected AdamW whose step (decay included) each tensor divides by
             max(1, RMS(g / sqrt(v_hat))): `scale_by_stable_adam`.
    'lamb':  bias-corrected Adam direction + decay, scaled by the layer-wise trust ratio
             ||param|| / ||update|| where decay applies: LayerNorm and bias parameters are
             excluded from both, as in the LAMB reference for BERT (optax.lamb's mask
             excludes them from the decay only).
    Clipping by global norm comes first (skipped when max_grad_norm == 0); `update` takes the
    gradients' norm as `global_norm=` where the caller has it (`clip_by_global_norm`).
    """
    validate_train_config(train_config)
    tc = train_config
    schedule = make_schedule(tc) if schedule is None else schedule
    parts = []
    if tc.max_grad_norm > 0:
        parts.append(clip_by_global_norm(tc.max_grad_norm))
    if tc.optimizer == "adamw":
        parts += [
            scale_by_bert_adam(tc.adam_b1, tc.adam_b2, tc.adam_eps,
                               bias_correction=getattr(tc, "adam_bias_correction", False)),
            optax.add_decayed_weights(tc.weight_decay, mask=decay_mask),
            optax.scale_by_learning_rate(schedule),
        ]
    elif tc.optimizer == "stable_adamw":
        parts += [
            scale_by_stable_adam(tc.adam_b1, tc.adam_b2, tc.adam_eps, tc.weight_decay, mask=decay_mask),
            optax.scale_by_learning_rate(schedule),
        ]
    else:  # one chain, as optax.lamb's: a lamb run's optimizer state keeps its layout
        parts.append(optax.chain(
            optax.scale_by_adam(tc.adam_b1, tc.adam_b2, tc.adam_eps),
            optax.add_decayed_weights(tc.weight_decay, mask=decay_mask),
            optax.masked(scale_by_layerwise_trust_ratio(), decay_mask),
            optax.scale_by_learning_rate(schedule),
        ))
    return optax.chain(*parts)


def update_count(opt_state: Any) -> jax.Array:
    """How many updates the optimizer has applied: the step its learning-rate schedule is at.

    Read from the `optax.ScaleByScheduleState` of `make_optimizer`'s chain (both optimizers
    have one), so a step skipped for a non-finite gradient (its state left untouched) does
    not advance the schedule, and the logged learning rate is the one actually used.
    """
    states = [leaf for leaf in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState))
              if isinstance(leaf, optax.ScaleByScheduleState)]
    if len(states) != 1:
        raise ValueError(f"update_count: expected one ScaleByScheduleState in the optimizer state, found {len(states)}")
    return states[0].count

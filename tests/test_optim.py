"""Tests for bertjax.optim: schedules, weight-decay mask, AdamWeightDecay parity, LAMB, clipping."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from bertjax import optim
from bertjax.models import BertConfig, BertEncoder


def train_config(**overrides):
    values = dict(optim.DEFAULTS, learning_rate=1e-4, warmup_steps=100, num_steps=1000)
    values.update(overrides)
    return ml_collections.ConfigDict(values)


# -- schedules ------------------------------------------------------------------------

def original_bert_lr(step, lr, warmup, num_steps):
    """google-research/bert optimization.py: polynomial_decay(power=1) from step 0, then warmup."""
    decayed = lr * (1.0 - min(step, num_steps) / num_steps)
    return lr * step / warmup if step < warmup else decayed


@pytest.mark.parametrize("step", [0, 1, 50, 99, 100, 101, 500, 999, 1000, 5000])
def test_linear_schedule_matches_original(step):
    schedule = optim.make_schedule(train_config())
    np.testing.assert_allclose(float(schedule(step)), original_bert_lr(step, 1e-4, 100, 1000),
                               rtol=1e-6, atol=1e-12)


def test_linear_schedule_without_warmup():
    schedule = optim.make_schedule(train_config(warmup_steps=0))
    assert float(schedule(0)) == pytest.approx(1e-4)
    assert float(schedule(500)) == pytest.approx(0.5e-4)


def test_other_schedules():
    lr, warmup, total = 1e-4, 100, 1000
    cosine = optim.make_schedule(train_config(schedule="cosine"))
    constant = optim.make_schedule(train_config(schedule="constant"))
    inv_sqrt = optim.make_schedule(train_config(schedule="inverse_sqrt"))
    for schedule in (cosine, constant, inv_sqrt):
        assert float(schedule(0)) == 0.0
        assert float(schedule(50)) == pytest.approx(lr * 0.5)
        assert float(schedule(warmup)) == pytest.approx(lr)
    assert float(cosine(550)) == pytest.approx(lr * 0.5, rel=1e-5)
    assert float(cosine(total)) == pytest.approx(0.0, abs=1e-12)
    assert float(constant(total * 3)) == pytest.approx(lr)
    assert float(inv_sqrt(400)) == pytest.approx(lr * 0.5)


@pytest.mark.parametrize("shape", ["linear", "1-sqrt"])
def test_warmup_stable_decay(shape):
    """Issue 49: warmup, then the peak until the last 20% of steps, then down to 0."""
    lr = 1e-4
    schedule = optim.make_schedule(train_config(schedule="wsd", decay_fraction=0.2, decay_shape=shape))
    values = np.array([float(schedule(step)) for step in range(1001)])
    assert values[50] == pytest.approx(lr * 0.5) and np.allclose(values[100:801], lr)
    assert values[1000] == pytest.approx(0.0, abs=1e-12) and np.all(np.diff(values[800:]) < 0)
    halfway = 1 - (0.5 if shape == "linear" else np.sqrt(0.5))
    assert values[900] == pytest.approx(lr * halfway, rel=1e-5)


@pytest.mark.parametrize("change, message", [
    (dict(decay_fraction=1.5), "decay_fraction must be in"),
    (dict(decay_shape="cosine"), "decay_shape must be one of"),
    (dict(decay_fraction=0.95), "warmup_steps must be at most the steps before the decay"),
])
def test_warmup_stable_decay_settings_are_checked(change, message):
    with pytest.raises(ValueError, match=message):
        optim.validate_train_config(train_config(schedule="wsd", **change))


def test_a_warmup_ending_where_the_decay_starts_is_not_refused_by_rounding():
    """1000 x (1 - 0.9) is 99.99999999999997: a warmup of 100 was 'at most ... = 100, got 100'
    (a walkthrough)."""
    optim.validate_train_config(train_config(schedule="wsd", num_steps=1000, warmup_steps=100, decay_fraction=0.9))
    with pytest.raises(ValueError, match="warmup_steps must be at most"):
        optim.validate_train_config(train_config(schedule="wsd", num_steps=1000, warmup_steps=101, decay_fraction=0.9))


def test_a_decay_under_one_step_is_said(caplog):
    """A 4-step 'wsd' run decays over 0.4 steps: none, every update at the peak rate, with no
    word (a walkthrough of the docs)."""
    for steps in (4, 10):
        schedule = optim.make_schedule(train_config(schedule="wsd", num_steps=steps, warmup_steps=0))
        assert float(schedule(steps - 1)) == pytest.approx(1e-4)  # the last update's count
    schedule = optim.make_schedule(train_config(schedule="wsd", num_steps=20, warmup_steps=0))
    assert float(schedule(19)) == pytest.approx(0.5e-4)  # two steps of decay: the last at half
    with caplog.at_level("WARNING"):
        for steps, schedule in ((4, "wsd"), (10, "wsd"), (20, "wsd"), (4, "linear")):  # linear decays from step 0
            optim.warn_if_no_decay(train_config(schedule=schedule, num_steps=steps, warmup_steps=0))
    assert caplog.messages == [f"config.train.decay_fraction=0.1 of num_steps={steps} is {decay} steps: one or less, "
                               "so no update runs below the peak learning rate" for steps, decay in ((4, 0.4), (10, 1))]


def test_schedule_is_jittable():
    schedule = optim.make_schedule(train_config())
    np.testing.assert_allclose(jax.jit(schedule)(jnp.int32(500)), schedule(500))


# -- validation -----------------------------------------------------------------------

@pytest.mark.parametrize("key,value,message", [
    ("learning_rate", 0.0, "train.learning_rate must be finite and > 0, got 0.0"),
    ("learning_rate", float("inf"), "train.learning_rate must be finite and > 0, got inf"),  # finite: inf passed (a review)
    ("weight_decay", float("nan"), "train.weight_decay must be finite and >= 0, got nan"),
    ("warmup_steps", 2000, "train.warmup_steps must be an int in [0, config.train.num_steps=1000]"),
    ("optimizer", "sgd", "train.optimizer must be one of"),
    ("schedule", "step", "train.schedule must be one of"),
    ("num_steps", 0, "train.num_steps must be an int >= 1"),
    ("adam_b2", 1.0, "train.adam_b2 must be in [0, 1)"),
    ("adam_eps", 0, "train.adam_eps must be finite and > 0"),
    ("max_grad_norm", -1.0, "train.max_grad_norm must be finite and >= 0"),
    ("weight_decay", -0.1, "train.weight_decay must be finite and >= 0"),
])
def test_validate_names_the_bad_key(key, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        optim.validate_train_config(train_config(**{key: value}))


def test_validate_missing_key_and_inverse_sqrt_warmup():
    config = train_config()
    del config["adam_eps"]
    with pytest.raises(ValueError, match="train.adam_eps is missing"):
        optim.validate_train_config(config)
    with pytest.raises(ValueError, match="train.warmup_steps must be > 0 for the 'inverse_sqrt'"):
        optim.validate_train_config(train_config(schedule="inverse_sqrt", warmup_steps=0))


# -- weight-decay mask ----------------------------------------------------------------

def test_decay_mask_on_bert_encoder():
    config = BertConfig.preset("tiny", vocab_size=64, max_position_embeddings=16)
    ids = jnp.zeros((1, 8), jnp.int32)
    params = nn.unbox(jax.eval_shape(BertEncoder(config).init, jax.random.key(0), ids))["params"]
    mask = optim.decay_mask(params)
    flat = {jax.tree_util.keystr(path): value
            for path, value in jax.tree_util.tree_leaves_with_path(mask)}
    decayed = {name for name, value in flat.items() if value}
    assert decayed == {name for name in flat if name.endswith("['kernel']") or name.endswith("['embedding']")}
    assert flat["['embeddings']['word_embeddings']['embedding']"]
    assert flat["['encoder']['layer_0']['attention']['query']['kernel']"]
    assert not flat["['embeddings']['LayerNorm']['scale']"]
    assert not flat["['embeddings']['LayerNorm']['bias']"]
    assert not flat["['encoder']['layer_1']['output_norm']['scale']"]
    assert not flat["['encoder']['layer_0']['intermediate']['bias']"]
    assert not flat["['pooler']['bias']"]
    # 3 embeddings + 2 layers x 6 kernels + pooler kernel.
    assert len(decayed) == 3 + 2 * 6 + 1


@pytest.mark.parametrize("preset", ["tiny", "modernbert-tiny"])
def test_decay_mask_on_every_head_is_the_originals_rule(preset):
    """The mask allows leaves by name (kernel, embedding); the original denies them by name
    (LayerNorm, bias), which for BERT is every matrix decayed and every vector not: the
    masked LM's output bias, NSP's and every task head's weights, a BiLSTM tagger's. A head
    whose matrix had another name would go undecayed, unseen (a review)."""
    from bertjax.models import (BertForMultipleChoice, BertForPreTraining, BertForQuestionAnswering,
                                BertForSequenceClassification, BertForTokenClassification)

    config = BertConfig.preset(preset, vocab_size=64, max_position_embeddings=16)
    ids = jnp.zeros((1, 8), jnp.int32)
    bilstm = config.replace(tagging_head="bilstm", lstm_hidden_size=8)
    models = [(BertForPreTraining(config, next_sentence_prediction=True), (ids, ids, ids, ids[:, :2])),
              (BertForSequenceClassification(config, 3), (ids, ids, ids)),
              (BertForTokenClassification(config, 5), (ids, ids, ids)),
              (BertForTokenClassification(bilstm, 5), (ids, ids, ids)),
              (BertForQuestionAnswering(config), (ids, ids, ids)),
              (BertForMultipleChoice(config), (ids[None], ids[None], ids[None]))]
    for model, inputs in models:
        params = nn.unbox(jax.eval_shape(model.init, jax.random.key(0), *inputs))["params"]
        decided = zip(jax.tree_util.tree_leaves_with_path(optim.decay_mask(params)), jax.tree.leaves(params))
        wrong = [jax.tree_util.keystr(path) for (path, decayed), leaf in decided if decayed != (leaf.ndim >= 2)]
        assert not wrong, (type(model).__name__, wrong)


# -- AdamWeightDecay parity -----------------------------------------------------------

def numpy_adam_weight_decay(params, grads_per_step, lrs, b1, b2, eps, wd, decayed, clip):
    """The original AdamWeightDecayOptimizer (plus clip_by_global_norm), in numpy."""
    params = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    for grads, lr in zip(grads_per_step, lrs):
        norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
        scale = clip / max(norm, clip)
        for k in params:
            g = grads[k] * scale
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            update = m[k] / (np.sqrt(v[k]) + eps)
            if decayed[k]:
                update = update + wd * params[k]
            params[k] = params[k] - lr * update
    return params


def test_adamw_matches_original_adam_weight_decay():
    rng = np.random.default_rng(0)
    params = {"kernel": rng.normal(size=(3, 4)).astype(np.float32),
              "bias": rng.normal(size=(4,)).astype(np.float32)}
    grads = [{k: (rng.normal(size=v.shape) * 0.3).astype(np.float32) for k, v in params.items()}
             for _ in range(3)]
    config = train_config(learning_rate=0.1, warmup_steps=2, num_steps=10, weight_decay=0.01,
                          max_grad_norm=1.0)
    tx = optim.make_optimizer(config)
    schedule = optim.make_schedule(config)
    state = tx.init(params)
    jax_params = {k: jnp.asarray(v) for k, v in params.items()}
    for g in grads:
        updates, state = tx.update({k: jnp.asarray(v) for k, v in g.items()}, state, jax_params)
        jax_params = optax.apply_updates(jax_params, updates)
    lrs = [0.0, 0.05, 0.1 * (1 - 2 / 10)]  # the original's: warmup to step 2, then 0.1 x (1 - step / 10)
    assert [float(schedule(i)) for i in range(3)] == pytest.approx(lrs, abs=1e-7)
    expected = numpy_adam_weight_decay(params, grads, lrs, 0.9, 0.999, 1e-6, 0.01,
                                       {"kernel": True, "bias": False}, clip=1.0)
    for k in params:
        np.testing.assert_allclose(np.asarray(jax_params[k]), expected[k], atol=1e-6, rtol=0)


def test_adamw_single_step_no_bias_correction():
    """One step of the original: m = 0.1 g, v = 0.001 g^2, so the direction is ~3.16 sign(g)."""
    params = {"kernel": jnp.array([1.0, -2.0]), "bias": jnp.array([0.5])}
    grads = {"kernel": jnp.array([0.01, -0.02]), "bias": jnp.array([0.03])}
    config = train_config(learning_rate=0.1, warmup_steps=0, num_steps=10, max_grad_norm=0.0)
    tx = optim.make_optimizer(config)
    updates, _ = tx.update(grads, tx.init(params), params)
    for k in params:
        g, p = np.asarray(grads[k], np.float64), np.asarray(params[k], np.float64)
        direction = 0.1 * g / (np.sqrt(0.001 * g * g) + 1e-6) + (0.01 * p if k == "kernel" else 0)
        np.testing.assert_allclose(np.asarray(updates[k]), -0.1 * direction, atol=1e-6, rtol=0)
    bias_corrected = optim.make_optimizer(train_config(
        learning_rate=0.1, warmup_steps=0, num_steps=10, max_grad_norm=0.0, adam_bias_correction=True))
    updates, _ = bias_corrected.update(grads, bias_corrected.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["bias"]), [-0.1], rtol=1e-4)  # ~ -lr * sign(g)


def test_stable_adamw_is_bias_corrected_adamw_with_its_update_clipped_per_tensor():
    """StableAdamW (Wortsman et al. 2023) against a numpy transcription: steady gradients give
    bias-corrected AdamW's step; a spike after quiet steps has its tensor's step (decay
    included) divided by RMS(g / sqrt(v_hat)) > 2, while the other tensor moves about as AdamW."""
    rng = np.random.default_rng(1)
    params = {"kernel": rng.normal(size=(3, 4)).astype(np.float32), "bias": rng.normal(size=(4,)).astype(np.float32)}
    grads = [{k: (rng.normal(size=v.shape) * 0.01).astype(np.float32) for k, v in params.items()} for _ in range(5)]
    grads[4]["kernel"] = grads[4]["kernel"] * 100  # the spike
    settings = dict(learning_rate=0.01, warmup_steps=0, num_steps=10, schedule="constant", weight_decay=0.1,
                    max_grad_norm=0.0, adam_b2=0.99, adam_eps=1e-8)
    stable = optim.make_optimizer(train_config(optimizer="stable_adamw", **settings))
    adamw = optim.make_optimizer(train_config(adam_bias_correction=True, **settings))
    jax_params = {k: jnp.asarray(v) for k, v in params.items()}
    states = stable.init(jax_params), adamw.init(jax_params)
    m = {k: np.zeros_like(v, np.float64) for k, v in params.items()}
    v = {k: np.zeros_like(v, np.float64) for k, v in params.items()}
    for t, g in enumerate(grads, 1):
        (step, stable_state), (adamw_step, adamw_state) = (
            tx.update({k: jnp.asarray(x) for k, x in g.items()}, state, jax_params)
            for tx, state in zip((stable, adamw), states))
        states = stable_state, adamw_state
        rms = {}
        for k in params:
            m[k] = 0.9 * m[k] + 0.1 * g[k]
            v[k] = 0.99 * v[k] + 0.01 * np.square(g[k].astype(np.float64))
            m_hat, v_hat = m[k] / (1 - 0.9 ** t), v[k] / (1 - 0.99 ** t)
            rms[k] = np.sqrt(np.mean(np.square(g[k]) / np.maximum(v_hat, 1e-16)))
            decay = 0.1 * np.asarray(jax_params[k], np.float64) if k == "kernel" else 0.0
            want = -0.01 * (m_hat / (np.sqrt(v_hat) + 1e-8) + decay) / max(1.0, rms[k])
            np.testing.assert_allclose(np.asarray(step[k]), want, rtol=2e-4, atol=1e-9)
        if t < 5:  # steady gradients: at most the AdamW step
            assert max(rms.values()) < 1.5
        else:
            assert rms["kernel"] > 2 and rms["bias"] < 1.2  # v_hat holds the spike too: at most sqrt(4.9)
            np.testing.assert_allclose(np.asarray(step["kernel"]), np.asarray(adamw_step["kernel"]) / rms["kernel"],
                                       rtol=2e-4)
            np.testing.assert_allclose(np.asarray(step["bias"]), np.asarray(adamw_step["bias"]), rtol=0.2)
        jax_params = optax.apply_updates(jax_params, step)
    assert int(optim.update_count(states[0])) == 5


# -- LAMB and clipping ----------------------------------------------------------------

def test_lamb_runs_and_decreases_a_quadratic():
    params = {"dense": {"kernel": jnp.ones((4, 4)), "bias": jnp.ones((4,))}}
    loss = lambda p: jnp.sum(p["dense"]["kernel"] ** 2) + jnp.sum(p["dense"]["bias"] ** 2)
    tx = optim.make_optimizer(train_config(optimizer="lamb", learning_rate=0.01, warmup_steps=0,
                                           num_steps=100))
    state = tx.init(params)

    @jax.jit
    def step(params, state):
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        return optax.apply_updates(params, updates), state

    start = float(loss(params))
    for _ in range(5):
        params, state = step(params, state)
    assert np.isfinite(float(loss(params))) and float(loss(params)) < start


def test_lamb_scales_kernels_by_the_trust_ratio_and_leaves_biases_and_norms_alone():
    """The LAMB reference for BERT excludes LayerNorm and bias parameters from the layer-wise
    adaptation as from the decay; optax.lamb's mask excluded them from the decay only (a review).
    First step, bias-corrected Adam: the direction is sign(g)."""
    params = {"dense": {"kernel": jnp.full((4, 4), 3.0), "bias": jnp.full((4,), 3.0)},
              "LayerNorm": {"scale": jnp.full((4,), 3.0)}}
    grads = jax.tree.map(lambda p: 0.5 * jnp.ones_like(p), params)
    tx = optim.make_optimizer(train_config(optimizer="lamb", learning_rate=0.01, warmup_steps=0, num_steps=100,
                                           weight_decay=0.0, max_grad_norm=0.0))
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["dense"]["bias"], -0.01, rtol=1e-4)
    np.testing.assert_allclose(updates["LayerNorm"]["scale"], -0.01, rtol=1e-4)
    np.testing.assert_allclose(updates["dense"]["kernel"], -0.01 * 3.0, rtol=1e-4)  # ||p|| / ||sign(g)|| = 3
    # The arrays of its state sit where optax.lamb's did: a lamb run saved before resumes.
    paths = lambda state: [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(state)]
    reference = optax.chain(optax.lamb(lambda step: 0.01, mask=optim.decay_mask))  # (no clipping here)
    assert paths(tx.init(params)) == paths(reference.init(params))


def test_clipping_scales_the_gradient_to_max_norm():
    """Adam's first moment sees the clipped gradient: mu = (1 - b1) * g * min(1, clip / |g|)."""
    grads = {"kernel": jnp.full((100,), 10.0)}  # global norm 100

    def first_moment(max_grad_norm):
        tx = optim.make_optimizer(train_config(max_grad_norm=max_grad_norm))
        _, state = tx.update(grads, tx.init(grads), grads)
        adam_state = state[1] if max_grad_norm else state[0]
        return np.asarray(adam_state.mu["kernel"])

    np.testing.assert_allclose(first_moment(1.0), 0.1 * 10.0 / 100.0, rtol=1e-6)
    np.testing.assert_allclose(first_moment(1000.0), 0.1 * 10.0, rtol=1e-6)
    np.testing.assert_allclose(first_moment(0.0), 0.1 * 10.0, rtol=1e-6)


def test_clipping_equals_optax_and_takes_the_callers_norm():
    """The same clipped gradients as optax.clip_by_global_norm, below and above the limit, and
    the same (empty) state; a norm passed as `global_norm` is the one used."""
    grads = {"a": jnp.array([3.0, -4.0]), "b": {"kernel": jnp.full((2, 2), 6.0)}}  # global norm 13
    for max_norm in (1.0, 13.0, 50.0):
        ours, state = optim.clip_by_global_norm(max_norm).update(grads, optax.EmptyState())
        theirs, _ = optax.clip_by_global_norm(max_norm).update(grads, optax.EmptyState())
        for mine, reference in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
            np.testing.assert_allclose(np.asarray(mine), np.asarray(reference), rtol=1e-6)
        assert state == optax.clip_by_global_norm(max_norm).init(grads)
    given, _ = optim.clip_by_global_norm(1.0).update(grads, optax.EmptyState(), global_norm=jnp.float32(2.0))
    np.testing.assert_allclose(np.asarray(given["a"]), [1.5, -2.0], rtol=1e-6)
    for optimizer in optim.OPTIMIZERS:  # the chain hands the norm to the clip alone
        tx = optim.make_optimizer(train_config(optimizer=optimizer, warmup_steps=0))
        with_norm, _ = tx.update(grads, tx.init(grads), grads, global_norm=jnp.float32(13.0))
        without, _ = tx.update(grads, tx.init(grads), grads)
        for a, b in zip(jax.tree.leaves(with_norm), jax.tree.leaves(without)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
            assert np.abs(np.asarray(a)).max() > 0


@pytest.mark.parametrize("optimizer", ["adamw", "stable_adamw", "lamb"])
def test_a_scanned_encoder_gets_the_unrolled_encoders_updates(optimizer):
    """scan_layers stacks the layers into [L, ...] tensors; LAMB's trust ratio and StableAdamW's
    update clipping are per tensor, so each layer must keep its own (one ratio over all layers
    would dilute a spike in one of them). Layer 1's weights and gradients are far larger."""
    from bertjax.models import stack_layers, unstack_layers

    config = BertConfig.preset("tiny", vocab_size=64, max_position_embeddings=16)
    params = nn.unbox(BertEncoder(config).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))["params"]
    params["encoder"]["layer_1"] = jax.tree.map(lambda p: 5.0 * p + 0.1, params["encoder"]["layer_1"])
    keys = iter(jax.random.split(jax.random.key(1), 1000))
    grads = [jax.tree.map(lambda p: jax.random.normal(next(keys), p.shape), params) for _ in range(2)]
    grads[1]["encoder"]["layer_1"] = jax.tree.map(lambda g: 100.0 * g, grads[1]["encoder"]["layer_1"])
    tx = optim.make_optimizer(train_config(optimizer=optimizer, learning_rate=1e-3, warmup_steps=0, num_steps=10))

    def train(params, grads, layout):
        state = tx.init(params)
        for g in grads:
            updates, state = tx.update(g, state, params)
            params = optax.apply_updates(params, updates)
        return layout(params)

    flat = train(params, grads, lambda p: p)
    stack = lambda p: stack_layers(p, config.num_hidden_layers)
    scanned = train(stack(params), [stack(g) for g in grads], unstack_layers)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7), flat, scanned)


def test_weights_stored_in_16_bits_are_refused_for_fine_tuning():
    """Adam's update at a fine-tuning learning rate is below half a bfloat16 step of a typical
    weight: with no float32 copy, the weights stayed where they started (a review)."""
    import jax.numpy as jnp

    from bertjax import finetune_setup
    from bertjax.models import BertConfig
    from configs import finetune

    weight, update = jnp.bfloat16(0.02), 2e-5 * 1.0  # lr x Adam's direction for a steady gradient
    assert weight - jnp.bfloat16(update) == weight
    bert = BertConfig.preset("tiny", vocab_size=784, param_dtype="bfloat16")
    with pytest.raises(ValueError, match=r"config.model.param_dtype='bfloat16': training keeps no float32 copy"):
        finetune_setup.validate_config(finetune.get_config("demo"), bert, (1, 1, 1), 784)
    finetune_setup.validate_config(finetune.get_config("demo"), bert.replace(param_dtype="float32"), (1, 1, 1), 784)

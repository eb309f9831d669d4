"""The pre-training step's fast paths: the MLM head never builds [batch, seq, vocab] logits; with
bf16 compute and packed rows the step keeps float32 master weights, is deterministic, and a
run resumed from a saved state replays the uninterrupted run bitwise."""

import jax
import ml_collections
import numpy as np
import pytest

from bertjax import optim, sharding, trainer
from bertjax.models import BertConfig, BertForPreTraining
from bertjax.pretrain import model_inputs, objective

VOCAB, LENGTH, BATCH = 1031, 32, 8  # a vocabulary size no other dimension has
TRAIN = ml_collections.ConfigDict(dict(optim.DEFAULTS, learning_rate=1e-3, warmup_steps=2, num_steps=10))


def _batch(rng, packed: bool):
    ids = rng.integers(5, VOCAB, (BATCH, LENGTH)).astype(np.int32)
    batch = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
             "masked_lm_positions": np.sort(rng.choice(np.arange(1, LENGTH), (BATCH, 5)), axis=1).astype(np.int32),
             "masked_lm_ids": rng.integers(5, VOCAB, (BATCH, 5)).astype(np.int32),
             "masked_lm_weights": np.ones((BATCH, 5), np.float32)}
    if not packed:
        return dict(batch, next_sentence_labels=rng.integers(0, 2, BATCH).astype(np.int32))
    columns = np.arange(LENGTH)[None, :]
    second = columns >= 12  # two pairs per row: tokens 0..11 and 12..31
    return dict(batch, position_ids=np.where(second, columns - 12, columns).repeat(BATCH, 0).astype(np.int32),
                sequence_ids=(1 + second).repeat(BATCH, 0).astype(np.int32),
                cls_positions=np.tile([0, 12], (BATCH, 1)).astype(np.int32),
                next_sentence_labels=rng.integers(0, 2, (BATCH, 2)).astype(np.int32),
                next_sentence_weights=np.ones((BATCH, 2), np.float32))


def _setup(config: BertConfig, packed: bool):
    mesh = sharding.create_mesh(data=-1)
    model = BertForPreTraining(config)
    first = _batch(np.random.default_rng(0), packed)
    init_params = lambda: model.init(jax.random.key(0), **model_inputs(first))["params"]
    optimizer = optim.make_optimizer(TRAIN)
    abstract, shardings = trainer.state_shardings(init_params, optimizer, mesh)

    def fresh():
        return trainer.initial_state(None, abstract, shardings, init_params=init_params,
                                     optimizer=optimizer, mesh=mesh)[0]

    with sharding.activate(mesh):
        inputs = trainer.step_inputs(TRAIN, 0, mesh)
        step = jax.jit(lambda s, b: trainer.train_step(s, b, inputs, objective=objective(model), train_config=TRAIN,
                                                       grad_accum_steps=1),
                       out_shardings=(shardings, None), donate_argnums=0)

    def run(state, batch):
        with sharding.activate(mesh):
            return step(state, trainer.global_batch(batch, mesh))

    return fresh, run, step, shardings


def test_the_compiled_step_has_no_full_vocabulary_logits():
    config = BertConfig.preset("tiny", vocab_size=VOCAB, max_position_embeddings=LENGTH)
    fresh, _, step, _ = _setup(config, packed=False)
    with sharding.activate(sharding.create_mesh(data=-1)):
        hlo = step.lower(fresh(), _batch(np.random.default_rng(0), False)).compile().as_text()
    assert f",{VOCAB}]" in hlo  # the gathered [batch, predictions, vocab] logits are there
    for rows in (BATCH, 1):  # the whole batch or one device's rows, never [., LENGTH, VOCAB]
        assert f"[{rows},{LENGTH},{VOCAB}]" not in hlo


@pytest.mark.parametrize("packed", [False, True])
def test_bf16_steps_are_deterministic_and_resume_bitwise(packed):
    config = BertConfig.preset("tiny", vocab_size=VOCAB, max_position_embeddings=LENGTH, dtype="bfloat16")
    fresh, run, _, shardings = _setup(config, packed)
    batches = [_batch(np.random.default_rng(i), packed) for i in range(4)]

    def steps(state, todo):
        losses = []
        for batch in todo:
            state, metrics = run(state, batch)
            losses.append(float(metrics["loss"]))
        return state, losses

    state, straight = steps(fresh(), batches)
    assert {leaf.dtype for leaf in jax.tree.leaves(state.params)} == {np.dtype(np.float32)}  # master weights
    assert straight == steps(fresh(), batches)[1]  # deterministic, bitwise
    half, first = steps(fresh(), batches[:2])
    saved = jax.device_get(half)  # what a checkpoint holds
    restored = jax.tree.map(lambda x, s: jax.device_put(x, s), saved, shardings)
    resumed, second = steps(restored, batches[2:])
    assert first + second == straight
    for a, b in zip(jax.tree.leaves(jax.device_get(state)), jax.tree.leaves(jax.device_get(resumed))):
        np.testing.assert_array_equal(a, b)

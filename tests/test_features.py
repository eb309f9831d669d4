"""The feature-based approach: task heads on several layers (concat, weighted sum, BiLSTM) and a
frozen encoder (no optimizer state, no backward pass, bit-identical weights) for every task
family, exact resume, the loaders, bad input."""

import contextlib
import errno
import json
import os
import re
import shutil
import sys
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bertjax import finetune_setup  # noqa: E402
from configs import finetune as finetune_config  # noqa: E402
from test_finetune_tasks import MOCKS, _small_config  # noqa: E402
from small_runs import xla_flags  # noqa: E402

TINY = dict(vocab_size=40, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32)


def _inputs(batch=2, length=10, real=(10, 6)):
    ids = jax.random.randint(jax.random.key(1), (batch, length), 1, TINY["vocab_size"])
    mask = jnp.asarray([[1] * n + [0] * (length - n) for n in real], jnp.int32)
    return ids, jnp.zeros_like(ids), mask


# -- The heads. --

@pytest.mark.parametrize("combine", ["concat", "weighted_sum"])
def test_the_classifier_reads_the_chosen_layers_combined(combine):
    """concat: [h_-1, h_-3] along H; weighted_sum: softmax(0) = the mean of the layers, times 1."""
    from bertjax.models import BertConfig, BertEncoder, BertForQuestionAnswering

    config = BertConfig(**TINY, feature_layers="-1,-3", feature_combine=combine)
    ids, segments, mask = _inputs()
    model = BertForQuestionAnswering(config)
    params = nn.unbox(model.init(jax.random.key(0), ids, segments, mask)["params"])
    start, end = jax.jit(model.apply)({"params": params}, ids, segments, mask)
    _, _, hidden = jax.jit(lambda p: BertEncoder(config).apply({"params": p}, ids, segments, mask,
                                                               output_hidden_states=True))(params["bert"])
    chosen = [hidden[-1], hidden[-3]]
    features = jnp.concatenate(chosen, -1) if combine == "concat" else (chosen[0] + chosen[1]) / 2
    logits = features @ params["qa_outputs"]["kernel"] + params["qa_outputs"]["bias"]
    real = mask.astype(bool)
    np.testing.assert_allclose(start[real], logits[..., 0][real], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(end[real], logits[..., 1][real], rtol=1e-5, atol=1e-5)
    assert params["qa_outputs"]["kernel"].shape == ((32, 2) if combine == "concat" else (16, 2))
    assert set(params) == ({"bert", "qa_outputs", "feature_mix"} if combine == "weighted_sum" else
                           {"bert", "qa_outputs"})


def test_feature_based_sentence_heads_read_the_token_mean_of_a_mean_pooling_model():
    """A ModernBERT with mean pooling (classifier_pooling="mean") read its features at [CLS]
    when fine-tuned feature-based, silently (a review): the real tokens' mean, as its pooler,
    cached or not, padded or packed."""
    from bertjax.models import (BertConfig, BertEncoder, BertForMultipleChoice, BertForSequenceClassification,
                                FrozenEncoder)

    config = BertConfig.preset("modernbert-tiny", vocab_size=40, pooler="mean", feature_layers="-1,-2",
                               feature_combine="concat")
    ids, segments, mask = _inputs()
    model = BertForSequenceClassification(config, 3)
    params = nn.unbox(model.init(jax.random.key(0), ids, segments, mask)["params"])
    _, _, hidden = BertEncoder(config).apply({"params": params["bert"]}, ids, segments, mask,
                                             output_hidden_states=True)
    features = np.concatenate([hidden[-1], hidden[-2]], -1)
    weights = np.asarray(mask, np.float32)
    mean = np.einsum("bs,bsf->bf", weights, features) / weights.sum(-1, keepdims=True)
    kernel, bias = (np.asarray(params["classifier"][name]) for name in ("kernel", "bias"))
    logits = np.asarray(model.apply({"params": params}, ids, segments, mask))
    np.testing.assert_allclose(logits, mean @ kernel + bias, atol=1e-5)
    # The cache keeps that vector; the head given it answers the same.
    cached = FrozenEncoder(config, reads_tokens=False).apply({"params": {"bert": params["bert"]}}, ids, segments, mask)
    np.testing.assert_allclose(np.asarray(cached).reshape(2, -1), mean, atol=1e-5)
    from_cache = model.apply({"params": params}, ids, segments, mask, encoded=(cached[:, None], None))
    np.testing.assert_allclose(np.asarray(from_cache), logits, atol=1e-5)
    # Packed: two sequences in one row, each its own mean, as run alone.
    row = jnp.concatenate([ids[0, :4], ids[1, :6]])[None]
    sequence_ids = jnp.asarray([[1] * 4 + [2] * 6])
    packed = model.apply({"params": params}, row, jnp.zeros_like(row), jnp.ones_like(row),
                         position_ids=jnp.asarray([list(range(4)) + list(range(6))]), sequence_ids=sequence_ids,
                         cls_positions=jnp.asarray([[0, 4]]))
    alone = model.apply({"params": params}, jnp.stack([ids[0, :6], ids[1, :6]]), segments[:, :6],
                        jnp.asarray([[1] * 4 + [0] * 2, [1] * 6]))
    np.testing.assert_allclose(np.asarray(packed)[0], np.asarray(alone), atol=1e-5)
    # Multiple choice: each pair its own mean.
    choice = {"bert": params["bert"], "classifier": {"kernel": kernel[:, :1], "bias": bias[:1]}}
    scores = BertForMultipleChoice(config).apply({"params": choice}, ids[None], segments[None], mask[None])
    np.testing.assert_allclose(np.asarray(scores)[0], mean @ kernel[:, 0] + bias[0], atol=1e-5)


def test_a_bilstm_head_initialises_in_16_bit_parameters():
    """Its orthogonal recurrent kernels came from a QR JAX has no 16-bit kernel for: a bfloat16
    param_dtype passed every start-up check, then failed at init (a review)."""
    from bertjax.models import BertConfig, BertForTokenClassification

    for dtype in ("bfloat16", "float16"):
        config = BertConfig(**TINY, tagging_head="bilstm", lstm_hidden_size=8, param_dtype=dtype)
        params = BertForTokenClassification(config, 3).init(jax.random.key(0), *_inputs())["params"]
        kernel = np.asarray(nn.unbox(params["bilstm"]["forward_0"]["hi"]["kernel"]), np.float32)
        assert params["bilstm"]["forward_0"]["hi"]["kernel"].dtype == jnp.dtype(dtype)
        np.testing.assert_allclose(kernel @ kernel.T, np.eye(8), atol=0.03)  # still orthogonal


def test_only_kernels_of_bfloat16_products_are_stored_rounded():
    """kernels_in_bfloat16 over a BiLSTM tagger with bfloat16 products: the encoder's dense
    kernels (and the pooler's) become bfloat16 and the outputs stay the same; the LSTM's
    kernels (not nn.Dense layers) and the float32 logits layer stay as they are, as every
    other leaf."""
    from bertjax.models import BertConfig, BertForTokenClassification, primitives

    config = BertConfig(**TINY, tagging_head="bilstm", lstm_hidden_size=8, matmul_precision="bfloat16")
    inputs = _inputs()
    model = BertForTokenClassification(config, num_labels=5)
    params = nn.unbox(model.init(jax.random.key(0), *inputs)["params"])
    stored = primitives.kernels_in_bfloat16(model, params, *inputs)
    names = lambda path: tuple(entry.key for entry in path)
    rounded = {names(path) for path, leaf in jax.tree_util.tree_leaves_with_path(stored) if leaf.dtype == jnp.bfloat16}
    assert rounded == {("bert", "encoder", f"layer_{i}", *dense, "kernel") for i in range(TINY["num_hidden_layers"])
                       for dense in (("attention", "query"), ("attention", "key"), ("attention", "value"),
                                     ("attention", "output"), ("intermediate",), ("output",))} | {
        ("bert", "pooler", "kernel")}
    for path, leaf in jax.tree_util.tree_leaves_with_path(stored):
        if names(path) not in rounded:
            original = params
            for name in names(path):
                original = original[name]
            assert leaf is original, names(path)
    np.testing.assert_array_equal(model.apply({"params": stored}, *inputs), model.apply({"params": params}, *inputs))


def test_bilstm_products_take_bfloat16_operands_with_bfloat16_products():
    """matmul_precision="bfloat16": both directions' input projections of a layer are one
    product of bfloat16 operands (forward and the kernel's gradient), as the dense layers', and
    so are the recurrence's products. Outputs and gradients stay near the float32 head's."""
    from bertjax.models import BertConfig
    from bertjax.models.heads import BiLSTM

    exact = BertConfig(**TINY, tagging_head="bilstm", lstm_hidden_size=8)
    rounded = exact.replace(matmul_precision="bfloat16")
    mask = _inputs(real=(10, 6))[2]
    x = jax.random.normal(jax.random.key(2), (2, 10, 24))
    params = BiLSTM(exact).init(jax.random.key(0), x, mask)["params"]
    run = lambda config: lambda p: BiLSTM(config).apply({"params": p}, x, mask)
    reference, out = run(exact)(params), run(rounded)(params)
    assert 1e-5 < np.abs(out - reference).max() < 0.02
    loss = lambda config: lambda p: jnp.sum(jnp.sin(run(config)(p)))
    grads, reference_grads = jax.grad(loss(rounded))(params), jax.grad(loss(exact))(params)
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(reference_grads)):
        assert np.abs(a - b).max() <= 0.05 * np.abs(b).max() + 1e-6

    from models.test_bert import _dot_generals

    found = list(_dot_generals(jax.make_jaxpr(jax.grad(loss(rounded)))(params).jaxpr))
    projections = [eqn for eqn in found if all(v.aval.ndim == 2 for v in eqn.invars)]  # the recurrence's are batched
    assert len(projections) == 6  # each layer's product and its two gradients' (XLA drops layer 0's input one)
    assert len(found) == 12  # and each layer's forward step, backward step and recurrent weights' gradient
    assert all(v.aval.dtype == jnp.bfloat16 for eqn in found for v in eqn.invars)


def test_bilstm_tagging_head_runs_over_the_real_tokens_only():
    """A row's logits do not depend on its padding (the backward LSTM starts at its last real
    token); two layers of forward/backward cells under "bilstm"."""
    from bertjax.models import BertConfig, BertForTokenClassification

    config = BertConfig(**TINY, tagging_head="bilstm", lstm_hidden_size=8)
    ids, segments, mask = _inputs(real=(10, 6))
    model = BertForTokenClassification(config, num_labels=5)
    params = model.init(jax.random.key(0), ids, segments, mask)["params"]
    assert sorted(params["bilstm"]) == ["backward_0", "backward_1", "forward_0", "forward_1"]
    assert params["bilstm"]["forward_1"]["ii"]["kernel"].shape == (16, 8)  # both directions of layer 0 in
    apply = jax.jit(model.apply)
    padded = apply({"params": params}, ids, segments, mask)
    cut = apply({"params": params}, ids[:, :6], segments[:, :6], mask[:, :6])
    assert padded.shape == (2, 10, 5)
    np.testing.assert_allclose(padded[1, :6], cut[1], atol=1e-6)  # 6 real tokens: padding changes nothing
    assert np.abs(padded[0, :6] - cut[0]).max() > 1e-4  # 10 real tokens: the cut row lost context


class _FlaxBiLSTM(nn.Module):
    """The reference: flax's own bidirectional RNN of OptimizedLSTMCells, parameters named as
    bertjax's BiLSTM names them."""

    units: int

    @nn.compact
    def __call__(self, x, lengths):
        rnn = lambda name: nn.RNN(nn.OptimizedLSTMCell(self.units, name=name))  # noqa: E731
        for i in range(2):
            x = nn.Bidirectional(rnn(f"forward_{i}"), rnn(f"backward_{i}"))(x, seq_lengths=lengths)
        return x


def test_the_bilstm_equals_flax_lstm_cells_and_their_gradients():
    """bertjax's BiLSTM (input products outside the recurrence, both directions in one scan)
    computes flax's OptimizedLSTMCell recurrence with the same parameters: outputs and
    gradients at every real token, rows of different lengths."""
    from bertjax.models import BertConfig
    from bertjax.models.heads import BiLSTM

    config = BertConfig(**TINY, tagging_head="bilstm", lstm_hidden_size=8)
    x = jax.random.normal(jax.random.key(2), (3, 9, 12))
    lengths = jnp.asarray([9, 4, 1])
    mask = (jnp.arange(9)[None] < lengths[:, None]).astype(jnp.int32)
    params = BiLSTM(config).init(jax.random.key(0), x, mask)["params"]
    reference = _FlaxBiLSTM(8)
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(
        reference.init(jax.random.key(0), x, lengths)["params"])  # checkpoints of either load
    weights = jax.random.normal(jax.random.key(3), (3, 9, 16)) * mask[..., None]

    def loss(module, params, x, *args):
        return jnp.sum(module.apply({"params": params}, x, *args) * weights)

    ours = jax.jit(lambda p, x: BiLSTM(config).apply({"params": p}, x, mask))(params, x)
    theirs = jax.jit(lambda p, x: reference.apply({"params": p}, x, lengths))(params, x)
    real = mask.astype(bool)
    assert ours.shape == (3, 9, 16)
    np.testing.assert_allclose(ours[real], theirs[real], atol=1e-5)
    ours_grads = jax.grad(lambda p, x: loss(BiLSTM(config), p, x, mask), argnums=(0, 1))(params, x)
    theirs_grads = jax.grad(lambda p, x: loss(reference, p, x, lengths), argnums=(0, 1))(params, x)
    for a, b in zip(jax.tree_util.tree_leaves(ours_grads), jax.tree_util.tree_leaves(theirs_grads)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert np.abs(ours_grads[0]["backward_1"]["hf"]["kernel"]).max() > 1e-3  # the recurrence has a gradient


# -- The frozen step. --

def _frozen_step_setup(frozen):
    from bertjax import optim, sharding, trainer
    from bertjax.models import BertConfig, BertForSequenceClassification, classification_sums, example_counts
    import ml_collections

    config = BertConfig(**TINY)
    model = BertForSequenceClassification(config, num_labels=2)
    ids, segments, mask = _inputs(batch=8, real=[10, 6] * 4)
    batch = {"input_ids": ids, "segment_ids": segments, "input_mask": mask, "label": jnp.arange(8) % 2,
             "weights": jnp.ones(8)}
    objective = trainer.Objective(
        apply=lambda p, b, rng: model.apply({"params": p}, b["input_ids"], b["segment_ids"], b["input_mask"],
                                            deterministic=rng is None, rngs=None if rng is None else {"dropout": rng},
                                            frozen_encoder=bool(frozen)),
        sums=lambda logits, b: classification_sums(logits, b["label"], b["weights"]),
        counts=lambda b: example_counts(b["weights"], ("loss", "accuracy")), loss_terms=("loss",))
    train = ml_collections.ConfigDict(dict(optim.DEFAULTS, learning_rate=1e-2, num_steps=10, warmup_steps=0))
    optimizer = optim.make_optimizer(train)
    mesh = sharding.create_mesh(data=-1)
    init = lambda: model.init(jax.random.key(0), ids, segments, mask)["params"]  # noqa: E731
    abstract, shardings = trainer.state_shardings(init, optimizer, mesh, frozen)
    state, _ = trainer.initial_state(None, abstract, shardings, init_params=init, optimizer=optimizer, mesh=mesh,
                                     frozen=frozen)
    with sharding.activate(mesh):
        inputs = trainer.step_inputs(train, 0, mesh)
        step = jax.jit(lambda s, b: trainer.train_step(s, b, inputs, objective=objective, train_config=train,
                                                       grad_accum_steps=2, frozen=frozen))
    return abstract, state, step, batch, mesh


def test_a_frozen_encoder_has_no_optimizer_state_no_backward_pass_and_never_changes():
    from bertjax import sharding

    abstract, state, step, batch, mesh = _frozen_step_setup(("bert",))
    paths = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(abstract.opt_state)]
    assert paths and not any("bert" in path for path in paths) and any("classifier" in path for path in paths)
    before = jax.device_get(state.params)
    with sharding.activate(mesh):
        for _ in range(3):
            state, metrics = step(state, batch)
    after = jax.device_get(state.params)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(before["bert"]), jax.tree.leaves(after["bert"])):
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))  # bit for bit
    assert not np.array_equal(before["classifier"]["kernel"], after["classifier"]["kernel"])
    assert metrics["grad_norm"] > 0 and int(state.step) == 3

    # No gradient through the encoder: the frozen step has the encoder's matmuls once (forward),
    # the full step about three times (forward, and gradients of inputs and of weights).
    _, full_state, full_step, _, _ = _frozen_step_setup(())
    with sharding.activate(mesh):
        frozen_dots = step.lower(state, batch).as_text().count("dot_general")
        full_dots = full_step.lower(full_state, batch).as_text().count("dot_general")
    assert frozen_dots < 0.5 * full_dots, (frozen_dots, full_dots)


# -- Every task family, frozen, through finetune(); resume; the loaders. --

def _pairs_file(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text_a,text_b,label\n" + "".join(f"anna {w},{w} boris,{w}\n" for w in ["yes", "no"] * 8))
    return str(path)


@pytest.fixture(scope="module")
def encoder_run(tmp_path_factory):
    """A 2-step fine-tuning run of the small model (no evaluation): the checkpoint the frozen
    runs start from."""
    from bertjax import finetune

    tmp_path = tmp_path_factory.mktemp("encoder")
    finetune.finetune(_small_config("classification", tmp_path, train_file=_pairs_file(tmp_path)),
                      str(tmp_path / "run"))
    return str(tmp_path / "run")


def _frozen_config(task, tmp_path, init, **model):
    config = _small_config(task, tmp_path, max_query_length=12)
    config.init_checkpoint = init
    config.model.update({key: None for key in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                               "intermediate_size")}, **model)  # from the checkpoint
    config.train.update(freeze_encoder=True, learning_rate=1e-2, num_steps=4)
    config.checkpoint.every = 2
    return config


def _params(path):
    from bertjax import checkpointing

    return checkpointing.load_params(path)[1]


def _assert_same(a, b):
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y, err_msg=jax.tree_util.keystr(path))


FAMILIES = [  # task, model options (the small model has 1 layer: hidden states 0 and 1), its heads
    ("conll2003", dict(feature_layers="1,0", feature_combine="concat", tagging_head="bilstm", lstm_hidden_size=8),
     ["bilstm", "classifier"]),
    ("squad_v2", dict(feature_layers="-1,-2", feature_combine="weighted_sum"), ["feature_mix", "qa_outputs"]),
    ("hellaswag", dict(), ["classifier"]),  # the plain head (pooled [CLS]) on a frozen encoder
    ("classification", dict(feature_layers="0,1", feature_combine="concat"), ["classifier"]),  # packed rows
]


@pytest.mark.parametrize("task, model, heads", FAMILIES, ids=[family[0] for family in FAMILIES])
def test_frozen_runs_keep_the_encoder_bit_for_bit_in_every_family(encoder_run, tmp_path, task, model, heads):
    from bertjax import finetune
    from bertjax.models.convert import load_bertjax_checkpoint

    config = _frozen_config(task, tmp_path, encoder_run, **model)
    if task == "classification":  # packed rows run the encoder each step: nothing cached
        config.data.update(train_file=_pairs_file(tmp_path), eval_file=_pairs_file(tmp_path), pack_examples=2)
        config.train.cache_features = False
    with MOCKS.get(task, contextlib.nullcontext)():
        summary = finetune.finetune(config, str(tmp_path / "run"))
    assert summary["best"] is not None
    start = _params(os.path.join(encoder_run, "checkpoints"))
    last = _params(str(tmp_path / "run" / "checkpoints"))
    _assert_same(start["bert"], last["bert"])
    _assert_same(start["bert"], _params(str(tmp_path / "run" / "best"))["bert"])
    assert sorted(set(last) - {"bert"}) == heads
    # The existing loader still finds the encoder under "bert", and keeps the feature-based head.
    loaded_config, loaded = load_bertjax_checkpoint(str(tmp_path / "run" / "best"))
    assert sorted(loaded) == sorted(last) and loaded_config.feature_layers == model.get("feature_layers", "-1")
    _assert_same(start["bert"], loaded["bert"])


@pytest.mark.multidevice  # fine-tuning data-parallel over the 8 simulated devices, its features cached sharded
@pytest.mark.parametrize("task, model, heads", FAMILIES, ids=[family[0] for family in FAMILIES])
def test_cached_features_train_the_head_as_the_frozen_encoder_does(encoder_run, tmp_path, capsys, task, model,
                                                                     heads):
    """Issue 47: the frozen encoder runs once over the training split (tokens kept for tagging
    and span QA, the sentence vector for classification and choice) and every step reads what
    it gave: the head's weights after 4 steps equal those of a run that ran the encoder at
    every step, head dropout included; the evaluation splits' features are cached too, and the
    evaluation's metrics equal the uncached run's."""
    from bertjax import finetune

    trained, metrics = {}, {}
    for cache in (True, False):
        config = _frozen_config(task, tmp_path / str(cache), encoder_run, **model)
        config.train.cache_features = cache
        # float32 products, as on a CPU without AMX: the cached features equal the recomputed
        # ones to float32 rounding only (the encoder ran at other batch shapes), and the
        # bfloat16 rounding of the head's inputs that AMX's default takes would magnify that.
        config.model.matmul_precision = "default"
        if task == "classification":
            config.data.update(train_file=_pairs_file(tmp_path), eval_file=_pairs_file(tmp_path))
        with MOCKS.get(task, contextlib.nullcontext)():
            metrics[cache] = finetune.finetune(config, str(tmp_path / str(cache) / "run"))["best"]["metrics"]
        trained[cache] = _params(str(tmp_path / str(cache) / "run" / "checkpoints"))
        output = "".join(capsys.readouterr())
        assert ("cached the frozen encoder's features in" in output) == cache, output[-2000:]
    files = list((tmp_path / "True" / "run" / "feature_cache").glob("*.bin"))
    assert len([f for f in files if f.name.startswith("train-")]) == 1 and all(f.stat().st_size > 0 for f in files)
    assert len(files) >= 2  # the training split and the evaluation split(s)
    assert metrics[True].keys() == metrics[False].keys()
    for name, value in metrics[False].items():
        assert metrics[True][name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    for head in heads:
        for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(trained[True][head]),
                                jax.tree.leaves(trained[False][head])):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{head}{jax.tree_util.keystr(path)}")
    # The head learned (a review: the guard compared kernels of other shapes, always unequal):
    # steps with a learning rate and a gradient, whose updates the equal weights above carry.
    with open(tmp_path / "True" / "run" / "metrics.jsonl") as f:
        steps = [json.loads(line) for line in f if '"loss"' in line]
    later = [r for r in steps if r["step"] > 1]
    assert later and all(r["learning_rate"] > 0 and r["grad_norm"] > 0 for r in later), steps


def test_features_cached_in_bfloat16_are_evaluated(encoder_run, tmp_path, capsys):
    """With bfloat16 activations (a GPU's or TPU's default) the cached run trained, then every
    evaluation failed to compile ("No dtype_to_ir_type handler for dtype: |V2": the compiled
    evaluations were keyed by numpy's str of bfloat16, a raw two-byte type), and so did every
    resume (a review). The cache holds bfloat16, and the evaluation equals the uncached run's."""
    from bertjax import finetune

    metrics = {}
    for cache in (True, False):
        config = _frozen_config("conll2003", tmp_path / str(cache), encoder_run, feature_layers="1,0",
                                feature_combine="concat", tagging_head="bilstm", lstm_hidden_size=8, dtype="bfloat16")
        config.train.cache_features = cache
        with MOCKS["conll2003"]():
            metrics[cache] = finetune.finetune(config, str(tmp_path / str(cache) / "run"))["best"]["metrics"]
    capsys.readouterr()
    [train] = (tmp_path / "True" / "run" / "feature_cache").glob("train-*.bin")
    assert train.read_bytes() and "bfloat16" in (tmp_path / "True" / "run" / "feature_cache").joinpath(
        train.name.replace(".bin", ".json")).read_text()
    assert metrics[True]["loss"] == pytest.approx(metrics[False]["loss"], rel=1e-2)


def test_a_stop_signal_while_caching_features_stops_there_and_the_relaunch_resumes(encoder_run, tmp_path,
                                                                                  monkeypatch, capsys):
    """SIGTERM (a preemption's notice) or Ctrl-C while the frozen encoder's features were being
    computed was heard only after every split's cache, the compile and a first step (a review):
    past a notice's grace period on a large split. The computation stops after its batch, keeps
    the batches done, and the relaunched run resumes there and trains."""
    import signal

    from bertjax import checkpointing, finetune
    from bertjax.runtime.errors import TrainingStopped

    config = _frozen_config("classification", tmp_path, encoder_run)
    config.data.update(train_file=_pairs_file(tmp_path))
    config.train.eval_batch_size = 4  # 16 examples: 4 batches
    host, batches = finetune._host, []

    def signalled_in_the_second_batch(tree):
        batches.append(1)
        if len(batches) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return host(tree)

    monkeypatch.setattr(finetune, "_host", signalled_in_the_second_batch)
    with pytest.raises(TrainingStopped,
                       match=r"preempted \(SIGTERM\) while caching the frozen encoder's features: 2 of 4 batches"):
        finetune.finetune(config, str(tmp_path / "run"))
    assert len(batches) == 2 and checkpointing.latest_step(str(tmp_path / "run" / "checkpoints")) is None
    # A signal in a split's last batch: that split is whole, the stop comes at the next one's
    # first batch (or the first step), nothing left to compute again.
    from bertjax.tasks import feature_cache
    from bertjax.tasks.common import Split

    split = Split("train", {"input_ids": np.ones((4, 2), np.int32)}, np.full(4, 2, np.int32))
    whole = feature_cache.FeatureCache(split, str(tmp_path / "whole"), "one", False, (2,), np.float32)
    assert whole.compute(lambda batch: batch["input_ids"].astype(np.float32), 4, [2], stop=lambda: "SIGTERM")
    assert whole.batches_done(4, [2]) == 1
    monkeypatch.setattr(finetune, "_host", host)
    capsys.readouterr()
    summary = finetune.finetune(config, str(tmp_path / "run"))
    assert "resumed at batch 2 of 4" in capsys.readouterr().out
    assert summary["last"]["loss"] > 0
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f if '"loss"' in line][-1] == 4


def test_a_cache_in_a_folder_no_one_chose_is_removed_when_the_run_ends(encoder_run, tmp_path, monkeypatch, capsys):
    """A gs:// workdir's caches went to one folder of $TMPDIR that every run on the machine
    filled and none emptied, gigabytes a split, until a later run found no room (a review).
    The folder is the workdir's own now, and the run that finishes removes its caches; a
    folder the user names (feature_cache_dir, a local workdir's WORKDIR/feature_cache) stays."""
    from bertjax import finetune

    config = _frozen_config("classification", tmp_path, encoder_run)
    config.data.update(train_file=_pairs_file(tmp_path), eval_file=_pairs_file(tmp_path))
    folders = {workdir: finetune.cache_directory(config, workdir) for workdir in ("gs://b/one", "gs://b/two")}
    assert len(set(folders.values())) == 2
    assert all(folder.startswith(tempfile.gettempdir()) for folder in folders.values())
    assert finetune.temporary_cache(config, "gs://b/one") and not finetune.temporary_cache(config, str(tmp_path))
    config.train.feature_cache_dir = str(tmp_path / "named")
    assert not finetune.temporary_cache(config, "gs://b/one")
    finetune.finetune(config, str(tmp_path / "kept"))
    assert len(list((tmp_path / "named").glob("*.bin"))) == 2  # train and eval, kept for the next run
    # A gs:// workdir's run, here on a local folder standing for the temporary one.
    config.train.feature_cache_dir = str(tmp_path / "temporary")
    monkeypatch.setattr(finetune, "temporary_cache", lambda *_: True)
    capsys.readouterr()
    summary = finetune.finetune(config, str(tmp_path / "run"))
    assert summary["best"] is not None and not (tmp_path / "temporary").exists()
    assert f"removed the cached features from {tmp_path / 'temporary'}" in capsys.readouterr().out
    # Relaunched finished, the run caches no training split: one an earlier launch left (stopped
    # after its last step) went unremoved, said removed all the same (a review).
    (tmp_path / "temporary").mkdir()
    (tmp_path / "temporary" / "train-left.bin").write_bytes(b"0" * 64)
    finetune.finetune(config, str(tmp_path / "run"))
    assert not (tmp_path / "temporary").exists()
    # So too for one that caches nothing relaunched: no split to evaluate or predict (a review).
    config.data.eval_file = ""
    finetune.finetune(config, str(tmp_path / "train_only"))
    (tmp_path / "temporary").mkdir()
    (tmp_path / "temporary" / "train-left.bin").write_bytes(b"0" * 64)
    finetune.finetune(config, str(tmp_path / "train_only"))
    assert not (tmp_path / "temporary").exists()
    config.data.eval_file = _pairs_file(tmp_path)
    # A run that diverges after an evaluation is one to relaunch, as a stopped one: its caches
    # stay (a review: removed, so the relaunch ran the encoder again).
    from bertjax.runtime.errors import TrainingDiverged

    config.train.update(learning_rate=1e9, eval_every=2, log_every=1, max_consecutive_bad_steps=1, num_steps=20)
    with pytest.raises(TrainingDiverged) as diverged:
        finetune.finetune(config, str(tmp_path / "diverged"))
    assert diverged.value.resumable and diverged.value.result is not None, diverged.value
    assert len(list((tmp_path / "temporary").glob("*.bin"))) == 2


def test_a_finished_run_relaunched_caches_no_training_features(encoder_run, tmp_path, capsys):
    """A finished frozen run relaunched (to predict a new test file, say) computed its whole
    training split's cache again for no step (a walkthrough: gigabytes and minutes at scale)."""
    from bertjax import finetune
    from bertjax.tasks import feature_cache

    config = _frozen_config("classification", tmp_path, encoder_run)
    config.data.update(train_file=_pairs_file(tmp_path), eval_file=_pairs_file(tmp_path))
    config.train.feature_cache_dir = str(tmp_path / "cache")
    first = finetune.finetune(config, str(tmp_path / "run"))
    [train_cache] = (tmp_path / "cache").glob("train-*.bin")
    train_cache.unlink()
    # What a launch stopped while computing left for other settings: counted (a walkthrough: unseen).
    (tmp_path / "cache" / "train-0123.bin").write_bytes(bytes(3072))
    capsys.readouterr()
    again = finetune.finetune(config, str(tmp_path / "run"))
    printed = capsys.readouterr().out
    assert [p.name for p in (tmp_path / "cache").glob("train-*.bin")] == ["train-0123.bin"]
    assert "train: " not in printed and "eval: reusing the cached features" in printed, printed
    size = feature_cache.readable_size(os.path.getsize(next((tmp_path / "cache").glob("eval-*.bin"))))
    assert (f"the frozen encoder's cached features stay in {tmp_path / 'cache'} ({size} for this run, and 3.0 KiB of "
            "other cache files): a run on the same weights and inputs reuses them; delete them when none will"
            ) in printed
    assert again["best"]["metrics"] == pytest.approx(first["best"]["metrics"])


def test_runs_that_differ_in_the_head_share_one_feature_cache(encoder_run, tmp_path, capsys, monkeypatch):
    """Two frozen tagging runs with other head settings (BiLSTM size, concat vs weighted sum)
    and one cache folder: the second reuses the first's features; other layers compute anew.
    Each run stops once its caches are there (training on them is the test above's)."""
    from bertjax import finetune

    class CachesDone(Exception):
        pass

    def stop(**_):
        raise CachesDone

    monkeypatch.setattr(finetune, "Programs", stop)  # built right after the caches, before any step

    def run(name, **model):
        config = _frozen_config("conll2003", tmp_path / name, encoder_run, **model)
        config.train.feature_cache_dir = str(tmp_path / "cache")
        with MOCKS["conll2003"](), pytest.raises(CachesDone):
            finetune.finetune(config, str(tmp_path / name / "run"))
        return "".join(capsys.readouterr())

    assert "cached the frozen encoder's features" in run("a", feature_layers="1,0", feature_combine="concat",
                                                         tagging_head="bilstm", lstm_hidden_size=8)
    assert "reusing the cached features" in run("b", feature_layers="1,0", feature_combine="weighted_sum",
                                                 tagging_head="bilstm", lstm_hidden_size=4)
    assert "cached the frozen encoder's features" in run("c", feature_layers="0,1", feature_combine="concat")
    assert len(list((tmp_path / "cache").glob("train-*.bin"))) == 2
    # The same layer kept alone (a linear head: [H]) or as a mix of one ([1, H]): two caches, not
    # one file each run writes over.
    run("d", feature_layers="-1", feature_combine="last")
    run("e", feature_layers="-1", feature_combine="weighted_sum")
    assert len(list((tmp_path / "cache").glob("train-*.bin"))) == 4


def test_two_runs_computing_one_feature_cache_take_turns(tmp_path, caplog):
    """Two runs computing the same cache at once (a sweep's runs sharing feature_cache_dir): the
    second truncated the file under the first, which then trusted zeros behind a complete
    manifest (a review). The second now waits, saying so (a walkthrough saw a run silent for as
    long as the other computed: the line was at INFO), then reuses what the first computed."""
    import threading

    from bertjax.tasks import feature_cache
    from bertjax.tasks.common import Split

    ids = np.arange(1, 1 + 20 * 4, dtype=np.int32).reshape(20, 4)
    split = Split("train", {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": np.ones_like(ids)},
                  np.full(20, 4, np.int32))
    inside, release = threading.Event(), threading.Event()

    def encode(batch, who):
        calls.append(who)
        if who == "first" and len(calls) == 2:
            inside.set()
            release.wait(30)
        return batch["input_ids"][..., None].astype(np.float32)

    calls, messages = [], {}

    def run(who):
        cache = feature_cache.FeatureCache(split, str(tmp_path), "train-x", False, (4, 1), np.float32)
        messages[who] = cache.compute(lambda batch: encode(batch, who)[:, :, :], 4, [4])
        messages[who + "_values"] = np.array(cache.values)

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=run, args=("second",))
    second.start()
    second.join(1.0)
    assert second.is_alive() and "second" not in calls  # waiting, not truncating
    release.set()
    first.join(30), second.join(30)
    assert calls == ["first"] * 5 and "reusing the cached features" in messages["second"]
    assert [r.levelname for r in caplog.records if "is being computed by" in r.getMessage()] == ["WARNING"]
    np.testing.assert_array_equal(messages["first_values"][..., 0], ids)
    np.testing.assert_array_equal(messages["second_values"], messages["first_values"])
    # Ctrl-C while waiting stops the wait (it went on waiting, then trained a step: a walkthrough).
    from bertjax.runtime import workdir_lock
    from bertjax.runtime.errors import TrainingStopped

    other = feature_cache.FeatureCache(split, str(tmp_path), "train-y", False, (4, 1), np.float32)
    stopped = []

    def wait_for_the_other_run():
        try:
            other.compute(lambda batch: batch["input_ids"][..., None].astype(np.float32), 4, [4], stop=lambda: "SIGINT")
        except TrainingStopped as stop:
            stopped.append(str(stop))

    with workdir_lock.hold(str(tmp_path), lock_name=other.lock_name):
        waiter = threading.Thread(target=wait_for_the_other_run, daemon=True)
        waiter.start()
        waiter.join(30)
    assert len(stopped) == 1 and re.fullmatch(r"interrupted \(Ctrl-C\) while waiting for another run's cached features "
                                              r"in .*train-y.bin; run the same command again to go on", stopped[0])


def _as_two_processes(process) -> None:
    """process(0) and process(1) in threads, as one run's two processes; both must end."""
    import threading

    threads = [threading.Thread(target=process, args=(index,), daemon=True) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)


class _ThreadedRun:
    """Two threads as one run's processes: `fewest` is their collective (a minimum)."""

    def __init__(self):
        import threading

        self.barrier, self.counts = threading.Barrier(2, timeout=20), [0, 0]

    def fewest(self, process: int, count: int) -> int:
        self.counts[process] = count
        self.barrier.wait()
        smallest = min(self.counts)
        self.barrier.wait()  # both read before either writes its next count
        return smallest


def test_a_process_whose_copy_is_finished_writes_nothing_while_another_computes(tmp_path):
    """Host 0's cache finished, host 1's missing (a disk replaced): every process started again
    from batch 0 and host 0 zeroed its finished file, which another run reading it then read as
    zeros; in a folder it could not write (a shared read-only one), the run failed (a
    walkthrough). Host 0 now runs the encoder with host 1 and leaves its file as it was."""
    from bertjax.tasks import feature_cache
    from bertjax.tasks.common import Split

    ids = np.arange(1, 1 + 12 * 4, dtype=np.int32).reshape(12, 4)
    split = Split("train", {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": np.ones_like(ids)},
                  np.full(12, 4, np.int32))
    folders = [tmp_path / "host0", tmp_path / "host1"]
    folders[0].mkdir()
    encode = lambda batch: batch["input_ids"][..., None].astype(np.float32)  # noqa: E731
    finished = feature_cache.FeatureCache(split, str(folders[0]), "train-x", False, (4, 1), np.float32)
    finished.compute(encode, 4, [4])
    before, files = os.stat(finished.path), sorted(os.listdir(folders[0]))
    reader = np.memmap(finished.path, np.float32, "r", shape=finished.shape)  # another run's, reading it
    run, results, encoded = _ThreadedRun(), {}, [0, 0]

    def process(index):
        def counted(batch):
            encoded[index] += 1
            return encode(batch)

        cache = feature_cache.FeatureCache(split, str(folders[index]), "train-x", False, (4, 1), np.float32)
        results[index] = cache.compute(counted, 4, [4], fewest=lambda count: run.fewest(index, count))
        results[index, "values"] = np.array(cache.values)

    _as_two_processes(process)
    assert encoded == [3, 3]  # together: on hosts, each batch is one computation over both
    assert results[0] == (f"reusing the cached features in {finished.path} (0.2 KiB); another process of this run "
                          "computed its copy")
    assert results[1].startswith("cached the frozen encoder's features in")
    after = os.stat(finished.path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(os.listdir(folders[0])) == files  # not even a lock: the folder may be read-only
    np.testing.assert_array_equal(reader[..., 0], ids)
    for index in (0, 1):
        np.testing.assert_array_equal(results[index, "values"][..., 0], ids)
    # In a folder the processes share, this run's bytes are every copy's: the end's line counted
    # the other processes' copies as "other cache files", for a user to delete (a walkthrough).
    (folders[1] / "train-x.bin").rename(folders[0] / "train-x1.bin")
    shared = feature_cache.FeatureCache(split, str(folders[0]), "train-x", False, (4, 1), np.float32,
                                        copies=("train-x1",))
    assert shared.stored_bytes() == 2 * shared.nbytes == feature_cache.stored_bytes(str(folders[0]))


@pytest.mark.parametrize("failing", ["lock", "disk", "file"])
def test_a_process_that_cannot_store_its_cache_stops_the_others_with_it(tmp_path, monkeypatch, failing):
    """One host's folder cannot be written, or its disk has no room: it raised alone and the
    other processes waited in the next collective until JAX's heartbeat gave up, with no word of
    why (a review). Every process now stops, the failing one with its own reason; one whose
    folder is a file too (a review: its lock's error was not said to the others)."""
    import contextlib

    from bertjax.runtime import workdir_lock
    from bertjax.tasks import feature_cache
    from bertjax.tasks.common import Split

    ids = np.arange(1, 1 + 12 * 4, dtype=np.int32).reshape(12, 4)
    split = Split("train", {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": np.ones_like(ids)},
                  np.full(12, 4, np.int32))
    folders = [tmp_path / "host0", tmp_path / "host1"]
    hold, reserve = workdir_lock.hold, feature_cache.FeatureCache._reserve

    def lock(directory, **kwargs):
        if failing == "lock" and directory == str(folders[1]):
            raise PermissionError(13, "Permission denied")
        return hold(directory, **kwargs)

    def room(self, zeroed):
        if failing == "disk" and self.path.startswith(str(folders[1])):
            raise ValueError("the disk has no room")
        return reserve(self, zeroed)

    monkeypatch.setattr(workdir_lock, "hold", lock)
    monkeypatch.setattr(feature_cache.FeatureCache, "_reserve", room)
    run, errors = _ThreadedRun(), {}

    def process(index):
        cache = feature_cache.FeatureCache(split, str(folders[index]), "train-x", False, (4, 1), np.float32)
        with contextlib.suppress(ValueError):
            try:
                cache.compute(lambda batch: batch["input_ids"][..., None].astype(np.float32), 4, [4],
                              fewest=lambda count: run.fewest(index, count))
            except ValueError as error:
                errors[index] = str(error)
                raise

    folders[0].mkdir()
    if failing == "file":
        folders[1].write_text("")
    else:
        folders[1].mkdir()
    _as_two_processes(process)
    assert errors[0] == ("another process of this run could not store its cached features (its log says why): "
                         "this one stops with it")
    assert errors[1] == ("the disk has no room" if failing == "disk" else
                         f"config.train.feature_cache_dir={folders[1]} is a file; give a folder" if failing == "file"
                         else
                         f"config.train.feature_cache_dir={folders[1]}: cannot write the cached features there "
                         "(Permission denied); give a folder that can be written or set "
                         "config.train.cache_features=False")


def test_two_multi_process_runs_computing_one_feature_cache_do_not_wait_for_each_other(tmp_path):
    """Each process of a run locks its own cache file, then meets the others in a collective
    (where to start). Two 2-process runs started together on one feature_cache_dir: run A's
    process 0 held lock 0 and waited in the collective for its process 1, blocked on lock 1,
    which run B's process 1 held while waiting for its process 0, blocked on lock 0: for ever
    (a review). A run's processes now lock together or let go and try again."""
    import threading

    from bertjax.tasks import feature_cache
    from bertjax.tasks.common import Split

    ids = np.arange(1, 1 + 12 * 4, dtype=np.int32).reshape(12, 4)
    split = Split("train", {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": np.ones_like(ids)},
                  np.full(12, 4, np.int32))

    runs, results = {"A": _ThreadedRun(), "B": _ThreadedRun()}, {}

    def process(run: str, index: int, delay: float):
        cache = feature_cache.FeatureCache(split, str(tmp_path), f"train-process{index}", False, (4, 1), np.float32)
        time.sleep(delay)
        try:
            results[run, index] = cache.compute(lambda batch: batch["input_ids"][..., None].astype(np.float32), 4,
                                                [4], fewest=lambda count: runs[run].fewest(index, count))
            results[run, index, "values"] = np.array(cache.values)
        except threading.BrokenBarrierError:
            results[run, index] = "stuck in the collective"

    threads = [threading.Thread(target=process, args=args, daemon=True)
               for args in (("A", 0, 0.0), ("B", 1, 0.0), ("A", 1, 0.3), ("B", 0, 0.3))]  # the locks crossed
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(key for key in results if len(key) == 2) == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
    messages = [results[key] for key in sorted(results) if len(key) == 2]
    assert all(message.startswith(("cached", "reusing")) for message in messages), messages
    for key in [key for key in results if len(key) == 3]:
        np.testing.assert_array_equal(results[key][..., 0], ids)


def test_the_feature_cache_resumes_a_killed_computation_and_is_memory_mapped(tmp_path, caplog):
    """A computation stopped after some batches carries on from the last recorded one, the stored
    values equal one uninterrupted computation, and the cache is a file mapped into memory
    (never read whole): its size is the kept tokens' values."""
    from bertjax.tasks import feature_cache
    from bertjax.tasks.common import Split

    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 12, 37).astype(np.int32)
    ids = np.zeros((37, 12), np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, 50, n)
    split = Split("train", {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": (ids > 0) * 1},
                  lengths)
    calls = []

    def encode(batch, fail_at=None):  # token t of a row -> (id, position, 7) as its "features"
        calls.append(len(calls))
        if fail_at is not None and len(calls) > fail_at:
            raise KeyboardInterrupt
        ids = batch["input_ids"]
        positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
        return np.stack([ids, positions, np.full_like(ids, 7)], -1).astype(np.float32)

    def cache(directory):
        return feature_cache.FeatureCache(split, str(directory), "train-test", True, (3,), np.float32)

    whole = cache(tmp_path / "whole")
    whole.compute(encode, 8, [4, 8, 12])
    assert whole.values.shape == (int(lengths.sum()), 3) and isinstance(whole.values, np.memmap)
    assert os.path.getsize(whole.path) == whole.values.nbytes
    feature_cache._SAVE_SECONDS, saved = 0.0, feature_cache._SAVE_SECONDS  # record after every batch
    try:
        calls.clear()
        with pytest.raises(KeyboardInterrupt):  # killed in its fourth batch
            cache(tmp_path / "killed").compute(lambda b: encode(b, fail_at=3), 8, [4, 8, 12])
        resumed = cache(tmp_path / "killed")
        assert resumed.batches_done(8, [4, 8, 12]) == 3
        # Other batches hold other examples: batch 3 of 16 is not batch 3 of 8; said, as the work
        # done is lost (a walkthrough: a batch size lowered after running out of memory).
        with caplog.at_level("WARNING"):
            assert resumed.batches_done(16, [4, 8, 12]) == resumed.batches_done(8, [4, 12]) == 0
        assert "the 3 batches of 8 computed so far were of another batch size or lengths (now 16; lengths " \
               "[4, 8, 12], then [4, 8, 12]): computed again from the start" in caplog.text
        calls.clear()
        # Processes that run the encoder together start where the one furthest behind stopped.
        message = resumed.compute(encode, 8, [4, 8, 12], fewest=lambda count: min(count, 1))
        assert len(calls) == 4 and "resumed at batch 1 of 5" in message  # 37 rows: 5 batches of 8
        np.testing.assert_array_equal(resumed.values, whole.values)
        calls.clear()
        with pytest.raises(KeyboardInterrupt):
            cache(tmp_path / "larger").compute(lambda b: encode(b, fail_at=3), 8, [4, 8, 12])
        calls.clear()
        # Started anew with other batches and killed before recording any progress: the earlier
        # progress is void.
        with pytest.raises(KeyboardInterrupt):
            cache(tmp_path / "larger").compute(lambda b: encode(b, fail_at=0), 16, [4, 12])
        assert cache(tmp_path / "larger").batches_done(8, [4, 8, 12]) == 0
        larger = cache(tmp_path / "larger")
        calls.clear()
        message = larger.compute(encode, 16, [4, 8, 12])  # resumed with larger batches: computed anew
    finally:
        feature_cache._SAVE_SECONDS = saved
    assert len(calls) == 3 and "resumed" not in message
    np.testing.assert_array_equal(larger.values, whole.values)
    gathered = whole.gather(np.array([5, 0]), 12)[feature_cache.CACHED_TOKENS]
    for row, example in enumerate([5, 0]):
        n = lengths[example]
        np.testing.assert_array_equal(gathered[row, :n, 0], ids[example, :n])
        np.testing.assert_array_equal(gathered[row, :n, 1], np.arange(n))
        assert not gathered[row, n:].any()
    assert "reusing the cached features" in cache(tmp_path / "whole").compute(encode, 8, [4, 8, 12])
    # A finished cache serves any batches (a sweep over batch sizes): never computed or zeroed again.
    calls.clear()
    again = cache(tmp_path / "whole")
    assert "reusing the cached features" in again.compute(encode, 16, [6, 12])
    assert not calls
    np.testing.assert_array_equal(again.values, whole.values)
    # A finished cache in a folder that cannot be written (shared read-only) is read without its
    # lock; it was refused ('cannot write the cached features there', a walkthrough).
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    hold = feature_cache.workdir_lock.hold
    feature_cache.workdir_lock.hold = read_only
    try:
        assert "reusing the cached features" in cache(tmp_path / "whole").compute(encode, 8, [4, 8, 12])
        with pytest.raises(ValueError, match="cannot write the cached features there"):  # one to compute: refused
            cache(tmp_path / "unwritable").compute(encode, 8, [4, 8, 12])
    finally:
        feature_cache.workdir_lock.hold = hold
    # A file cut short (a copy, a full disk) behind a finished manifest was mapped: 'mmap length
    # is greater than file size' (a walkthrough). It is computed anew.
    expected = np.array(whole.values)
    del whole, again  # (their maps of the file: not read once it is cut)
    with open(cache(tmp_path / "whole").path, "r+b") as f:
        f.truncate(expected.nbytes // 2)
    calls.clear()
    recomputed = cache(tmp_path / "whole")
    assert "cached the frozen encoder's features" in recomputed.compute(encode, 8, [4, 8, 12]) and len(calls) == 5
    np.testing.assert_array_equal(recomputed.values, expected)
    # A progress record cut short or emptied (a copy, a crash): every run on the folder failed
    # with 'Expecting value: line 1 column 31 (char 30)', naming no file (a walkthrough).
    del recomputed
    for cut in (30, 0):
        with open(cache(tmp_path / "whole").manifest_path, "r+") as f:
            f.truncate(cut)
        calls.clear()
        again = cache(tmp_path / "whole")
        assert "cached the frozen encoder's features" in again.compute(encode, 8, [4, 8, 12]) and len(calls) == 5
        np.testing.assert_array_equal(again.values, expected)
        del again


@pytest.mark.skipif(sys.platform != "linux", reason="/proc: a folder no file can be made in, even by root")
def test_a_feature_cache_folder_that_cannot_be_written_is_said_at_start_up(caplog):
    """It failed once the first split's features were wanted, after tokenizing and building the
    model (a walkthrough); a shared read-only folder of finished caches still serves, so it is a
    warning, before any work. A folder that cannot be made holds no cached features: an error
    (a walkthrough: the warning came, then the error, after the start-up)."""
    config = finetune_config.get_config("classification")
    config.train.update(freeze_encoder=True, cache_features=True, feature_cache_dir="/proc")
    finetune_setup.check_run_settings(config)
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith("config.train.feature_cache_dir=/proc: ") and warning.endswith(
        ": only features cached there already are read; a split without them stops the run when it reaches them, "
        "after its start-up")
    config.train.feature_cache_dir = "/proc/bertjax-cache"
    with pytest.raises(ValueError, match=r"^config.train.feature_cache_dir=/proc/bertjax-cache: cannot write in /proc "
                                         r"\(No such file or directory\)"):
        finetune_setup.check_run_settings(config)


def test_the_feature_cache_takes_its_disk_space_before_the_first_write(tmp_path, monkeypatch):
    """A disk that fills up under a memory-mapped write kills the process with SIGBUS and no
    message: the file's blocks are allocated before the encoder runs (a review found a sparse
    file), and a disk without room is one error naming the folder."""
    import errno

    from bertjax.tasks import feature_cache
    from bertjax.tasks.common import Split

    ids = np.arange(1, 1 + 64 * 8, dtype=np.int32).reshape(64, 8) % 50 + 1
    split = Split("train", {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": np.ones_like(ids)},
                  np.full(64, 8, np.int32))
    cache = feature_cache.FeatureCache(split, str(tmp_path), "train-space", False, (1024,), np.float32)
    allocated = []

    def encode(batch):
        allocated.append(os.stat(cache.path).st_blocks * 512)
        return np.ones((len(batch["input_ids"]), 1024), np.float32)

    cache.compute(encode, 16, [8])
    assert cache.nbytes == 64 * 1024 * 4 and allocated[0] >= cache.nbytes
    np.testing.assert_array_equal(cache.values, 1.0)

    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_room)
    allocated.clear()
    full = feature_cache.FeatureCache(split, str(tmp_path), "train-full", False, (1024,), np.float32)
    with pytest.raises(ValueError, match=rf"feature_cache_dir={tmp_path}: the cached features need [\d.]+ [KM]iB, the "
                                         r"disk has [\d.]+ [KMG]iB free \(No space left on device\)"):
        full.compute(encode, 16, [8])
    assert not allocated and os.path.getsize(full.path) == 0  # what was taken, given back

    # A file system that cannot allocate ahead: the free space is checked instead (a sparse file).
    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    sparse = feature_cache.FeatureCache(split, str(tmp_path), "train-sparse", False, (1024,), np.float32)
    sparse.compute(encode, 16, [8])
    np.testing.assert_array_equal(sparse.values, 1.0)
    import shutil as shutil_module

    monkeypatch.setattr(shutil_module, "disk_usage", lambda path: type("Usage", (), {"free": 1000})())
    with pytest.raises(ValueError, match=r"need 256.0 KiB, the disk has 1.0 KiB free \(not enough free space\)"):
        feature_cache.FeatureCache(split, str(tmp_path), "train-tiny", False, (1024,), np.float32).compute(
            encode, 16, [8])  # (a review: "need 0.0 GiB, the disk has 0.0 GiB free")
    monkeypatch.undo()
    # A folder that cannot be written (a read-only mount): named, with the way out (a review:
    # "[Errno 30] Read-only file system: '...bin.lock'", naming neither setting).
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    (tmp_path / "a_file").write_text("")  # (a review: called a "workdir")
    with pytest.raises(ValueError, match=rf"config.train.feature_cache_dir={tmp_path}/a_file/cache: cannot make the "
                                         rf"folder \({tmp_path}/a_file is a file\)"):
        feature_cache.FeatureCache(split, str(tmp_path / "a_file" / "cache"), "train-x", False, (1024,),
                                   np.float32).compute(encode, 16, [8])
    monkeypatch.setattr(feature_cache.workdir_lock, "hold", read_only)
    with pytest.raises(ValueError, match=rf"feature_cache_dir={tmp_path}: cannot write the cached features there "
                                         r"\(Read-only file system\); give a folder that can be written or set "
                                         r"config.train.cache_features=False"):
        feature_cache.FeatureCache(split, str(tmp_path), "train-ro", False, (1024,), np.float32).compute(
            encode, 16, [8])


def test_a_frozen_run_resumes_exactly(encoder_run, tmp_path, capsys):
    """4 steps straight == 2 steps, then a restart from the step-2 checkpoint (optimizer state
    for the head only): the same weights bit for bit, the encoder untouched."""
    from bertjax import finetune

    config = _frozen_config("classification", tmp_path, encoder_run, feature_layers="0,1",
                            feature_combine="weighted_sum")
    config.data.train_file = _pairs_file(tmp_path)
    finetune.finetune(config, str(tmp_path / "run"))
    reference = _params(str(tmp_path / "run" / "checkpoints"))
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "4")
    capsys.readouterr()
    finetune.finetune(config, str(tmp_path / "run"))
    output = "".join(capsys.readouterr())
    assert "resumed from" in output and "the encoder frozen; starting at step 2" in output, output[-2000:]
    assert "reusing the cached features in" in output
    _assert_same(reference, _params(str(tmp_path / "run" / "checkpoints")))
    _assert_same(_params(os.path.join(encoder_run, "checkpoints"))["bert"], reference["bert"])
    assert not np.array_equal(reference["feature_mix"]["weights"], np.zeros(2))  # the mix was trained


def test_the_feature_cache_is_named_by_the_weights_the_run_runs_not_by_its_init_path(encoder_run, tmp_path, capsys):
    """A resumed frozen run runs its own checkpoint's encoder, whatever its init_checkpoint holds
    by then (a pre-training workdir that saved a newer step): its features are those weights',
    and a fresh run from the newer weights does not take them for its own."""
    from bertjax import finetune

    shutil.copytree(encoder_run, tmp_path / "init")

    def run(name, steps=4):
        config = _frozen_config("classification", tmp_path / name, str(tmp_path / "init"), feature_layers="0,1",
                                feature_combine="weighted_sum")
        config.data.train_file = _pairs_file(tmp_path)
        config.train.update(feature_cache_dir=str(tmp_path / "cache"), num_steps=steps)
        capsys.readouterr()
        finetune.finetune(config, str(tmp_path / name / "run"))
        return "".join(capsys.readouterr())

    assert "cached the frozen encoder's features" in run("first")
    shutil.rmtree(tmp_path / "first" / "run" / "checkpoints" / "4")
    other = _small_config("classification", tmp_path / "other", train_file=_pairs_file(tmp_path))
    other.seed = 1  # other weights in the same place
    finetune.finetune(other, str(tmp_path / "other" / "run"))
    shutil.rmtree(tmp_path / "init")
    shutil.copytree(tmp_path / "other" / "run", tmp_path / "init")
    assert "reusing the cached features" in run("first")  # the step-2 checkpoint's encoder: the first weights
    assert "cached the frozen encoder's features" in run("second")  # the new weights: features of their own
    assert len(list((tmp_path / "cache").glob("train-*.bin"))) == 2


# -- Bad input. --

def test_bad_feature_layers_are_shown_an_example_of_the_models_own():
    """A walkthrough: -1,-2,-3,-4 (the paper's) refused for a model of two layers, suggesting itself."""
    from bertjax.models import BertConfig

    for layers, example in ((2, "-1,-2"), (12, "-1,-2,-3,-4")):
        with pytest.raises(ValueError, match=rf"in \[-{layers + 1}, {layers}\] of the embeddings and the {layers} "
                                             rf"layers \(e.g. {example}\), got '-1,-20'"):
            BertConfig.preset("tiny", vocab_size=100, num_hidden_layers=layers, feature_layers="-1,-20",
                              feature_combine="concat")


@pytest.mark.parametrize("model, message", [
    (dict(feature_layers="-1,-6"), r"config.model.feature_layers must be distinct comma-separated indices in "
                                   r"\[-5, 4\] of the embeddings and the 4 layers"),
    (dict(feature_layers="-1,4", feature_combine="concat"), r"config.model.feature_layers must be distinct.*, got "
                                                            r"'-1,4': -1 and 4 are one layer \(of the 5 hidden states"),
    (dict(feature_layers="-2,-1,-2", feature_combine="concat"), r"config.model.feature_layers must be distinct.*: "
                                                                r"layer -2 is given twice"),
    (dict(feature_layers="last"), r"config.model.feature_layers must be distinct"),
    (dict(feature_layers="-1,-2"), r"config.model.feature_layers='-1,-2' names 2 layers but feature_combine='last' "
                                   r"reads one: set config.model."
                                   r"feature_combine to 'concat' or 'weighted_sum'"),
    (dict(feature_combine="sum"), r"config.model.feature_combine must be one of \('last', 'concat', 'weighted_sum'\)"),
    (dict(tagging_head="lstm"), r"config.model.tagging_head must be one of \('linear', 'bilstm'\)"),
    (dict(lstm_hidden_size=0), r"config.model.lstm_hidden_size must be a positive int"),
])
def test_bad_feature_options_name_the_key(model, message):
    from bertjax.models import BertConfig
    from bertjax.models import config as bert_config

    checkpoint = BertConfig.preset("mini", vocab_size=100)
    with pytest.raises(ValueError, match="^" + message):
        bert_config.resolve(model, checkpoint=checkpoint)


def test_a_reused_head_reads_the_features_it_was_trained_on():
    """config.reuse_head from a feature-based run took its BiLSTM head onto features other than
    it trained on without a word when the shapes agreed, and otherwise failed on a kernel's
    shape naming no key (a walkthrough). The head's fields left unset are the checkpoint's; one
    set otherwise is refused, named."""
    from bertjax.models import BertConfig

    checkpoint = BertConfig.preset("mini", vocab_size=100, feature_layers="-1,-2,-3,-4", feature_combine="concat",
                                   tagging_head="bilstm", lstm_hidden_size=32)
    config = finetune_config.get_config("ner")
    config.init_checkpoint, config.reuse_head = "/runs/ner_features", True
    bert = finetune_setup.model_config(config, checkpoint, 100)
    assert (bert.feature_layers, bert.feature_combine, bert.tagging_head, bert.lstm_hidden_size) == (
        "-1,-2,-3,-4", "concat", "bilstm", 32)
    config.model.update(feature_layers="-1, -2,-3,1", lstm_hidden_size=32)  # the same layers however written
    assert finetune_setup.model_config(config, checkpoint, 100).feature_layers == "-1, -2,-3,1"
    config.model.update(feature_layers="0,1,2,3", lstm_hidden_size=None)
    with pytest.raises(ValueError, match=r"^config.model.feature_layers='0,1,2,3': config.reuse_head takes "
                                         r"/runs/ner_features's head, which has feature_layers='-1,-2,-3,-4'; leave it "
                                         r"unset, or fine-tune a new head \(config.reuse_head=False\)$"):
        finetune_setup.model_config(config, checkpoint, 100)
    config.reuse_head = False  # a new head: the settings asked, else the defaults
    config.model.feature_layers = None
    assert finetune_setup.model_config(config, checkpoint, 100).tagging_head == "linear"


def test_a_bilstm_head_outside_tagging_or_packed_and_a_non_bool_freeze_are_errors(tmp_path):
    from bertjax.models import BertConfig

    config = finetune_config.get_config("squad")
    bert = BertConfig.preset("tiny", vocab_size=100, tagging_head="bilstm")
    with pytest.raises(ValueError, match=r"config.model.tagging_head='bilstm' is for tagging tasks .*not "
                                         r"config.task='squad'; leave it 'linear'"):
        finetune_setup.validate_config(config, bert, (1, 1, 1), 100)
    ner = finetune_config.get_config("ner")
    ner.data.pack_examples = 8
    with pytest.raises(ValueError, match=r"config.data.pack_examples=8: packed rows need "
                                         r"config.model.tagging_head='linear' \(the BiLSTM reads whole rows\)"):
        finetune_setup.validate_config(ner, bert, (1, 1, 1), 100)
    splash = BertConfig.preset("tiny", vocab_size=100, attention_impl="splash", attention_probs_dropout_prob=0.0)
    config.data.max_seq_length = 320
    with pytest.raises(ValueError, match=r"config.data.max_seq_length=320 must be a multiple of 128 with "
                                         r"config.model.attention_impl='splash'"):
        finetune_setup.validate_config(config, splash, (1, 1, 1), 100)
    config.train.freeze_encoder = None
    with pytest.raises(ValueError, match=r"config.train.freeze_encoder must be True or False, got None"):
        finetune_setup.check_train_values(config.train)


def test_feature_based_heads_are_not_exported_as_a_hugging_face_model(tmp_path, caplog):
    """... but --architecture=BertModel writes the encoder alone, as docs/weights.md says (a
    walkthrough: refused with or without it, pointing to params['bert'], Python only)."""
    from bertjax.models import BertConfig, BertForTokenClassification
    from bertjax.models.convert import export_huggingface

    config = BertConfig(**TINY, tagging_head="bilstm", lstm_hidden_size=8)
    ids, segments, mask = _inputs()
    params = nn.unbox(BertForTokenClassification(config, 3).init(jax.random.key(0), ids, segments, mask)["params"])
    with pytest.raises(ValueError, match=r"export_huggingface: the task head \['bilstm', 'classifier'\] reads "
                                         r"features .* the encoder alone is written by --architecture=BertModel"):
        export_huggingface(config, params, str(tmp_path / "hf"))
    export_huggingface(config, params["bert"], str(tmp_path / "hf"))
    assert (tmp_path / "hf" / "model.safetensors").exists()
    with caplog.at_level("WARNING"):
        assert export_huggingface(config, params, str(tmp_path / "encoder"), architecture="BertModel") == ()
    assert "BertModel does not read the feature-based head(s) ['bilstm', 'classifier']: left out" in caplog.text
    written = [(tmp_path / name / "model.safetensors").read_bytes() for name in ("encoder", "hf")]
    assert written[0] == written[1]


@pytest.mark.slow
def test_concatenating_the_last_four_layers_beats_the_last_one(tmp_path):
    """Table 7's shape among the frozen rows (benchmarks/feature_based.py rows 1 and 2: MiniLM-L6,
    a two-layer BiLSTM, NER on generated sentences with unseen verbs in dev; about 3 CPU-minutes):
    measured 2026-11-25, dev F1 0.939 from the last layer, 0.966 from the last four concatenated."""
    import subprocess

    command = [sys.executable, os.path.join(ROOT, "benchmarks", "feature_based.py"), "--runs=1,2"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(optimized=True)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line[:36].strip(): float(line.split()[-2]) for line in result.stdout.splitlines()[-2:]}
    assert rows["frozen concat last four, BiLSTM"] > rows["frozen last layer, BiLSTM"] + 0.01, rows

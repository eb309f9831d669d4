"""BertConfig validation and the encoder's behaviour: shapes, masking, scan/remat/attention-kernel
parity, packed rows."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.models import BertConfig, BertEncoder, stack_layers, unstack_layers
from bertjax.models import attention, primitives
from bertjax.models.attention import drop_probabilities
from bertjax.models.bert import BertEmbeddings

TINY = BertConfig.preset("tiny", vocab_size=97, max_position_embeddings=128)


def _inputs(batch=3, length=12, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, TINY.vocab_size, (batch, length)).astype(np.int32)
    types = np.zeros_like(ids)
    types[:, length // 2:] = 1
    mask = np.ones_like(ids)
    mask[1, 8:] = 0  # a padded row
    mask[2, 5:] = 0
    return jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask)


def _init(config, inputs):
    return nn.unbox(jax.jit(BertEncoder(config).init)(jax.random.key(0), *inputs)["params"])


@pytest.fixture(scope="module")
def tiny_params():
    return _init(TINY, _inputs())


def test_presets_match_released_sizes():
    assert (BertConfig.preset("base").num_hidden_layers, BertConfig.preset("base").hidden_size) == (12, 768)
    large = BertConfig.preset("large")
    assert (large.num_hidden_layers, large.hidden_size, large.num_attention_heads, large.intermediate_size) == (
        24, 1024, 16, 4096)
    medium = BertConfig.preset("medium", vocab_size=100)
    assert (medium.num_hidden_layers, medium.hidden_size, medium.head_dim, medium.vocab_size) == (8, 512, 64, 100)
    default = BertConfig()
    assert (default.layer_norm_eps, default.hidden_act, default.hidden_dropout_prob) == (1e-12, "gelu", 0.1)


@pytest.mark.parametrize("changes, field", [
    (dict(hidden_size=100, num_attention_heads=12), "hidden_size"),
    (dict(num_hidden_layers=0), "num_hidden_layers"),
    (dict(vocab_size=-3), "vocab_size"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob"),
    (dict(attention_probs_dropout_prob=-0.1), "attention_probs_dropout_prob"),
    (dict(hidden_act="swish"), "hidden_act"),
    (dict(dtype="float64"), "dtype"),
    (dict(remat_policy="sometimes"), "remat_policy"),
    (dict(attention_impl="fused"), "attention_impl"),  # fused kernels need attention dropout 0
    (dict(attention_impl="cudnn"), "attention_impl"),
    (dict(attention_impl="flash"), "attention_impl"),
    (dict(layer_norm_eps=0.0), "layer_norm_eps"),
    (dict(layer_norm_eps=float("nan")), "layer_norm_eps"),  # (NaN and inf passed `<= 0`: outputs NaN or 0)
    (dict(layer_norm_eps=float("inf")), "layer_norm_eps"),
    (dict(initializer_range=float("nan")), "initializer_range"),
    (dict(rope_theta=float("inf")), "rope_theta"),
    (dict(matmul_precision="float16"), "matmul_precision"),
])
def test_config_errors_name_the_field(changes, field):
    with pytest.raises(ValueError, match=f"BertConfig.{field}"):
        BertConfig(**changes)


def test_a_cudnn_config_builds_the_float32_copies_heads_take():
    """The heads' logits layers take float32 copies of the encoder's config: a cuDNN model in
    bfloat16 must allow them (a check in BertConfig itself refused every head on a GPU)."""
    cudnn = BertConfig(attention_impl="cudnn", dtype="bfloat16", attention_probs_dropout_prob=0.0)
    assert cudnn.replace(dtype="float32", matmul_precision="default").dtype == "float32"


def test_unknown_preset_and_keys_are_rejected():
    with pytest.raises(ValueError, match="unknown BERT preset 'huge'"):
        BertConfig.preset("huge")
    with pytest.raises(ValueError, match=r"my.json: unknown BertConfig keys \['hiden_size'\]"):
        BertConfig.from_dict({"hiden_size": 3}, source="my.json")
    assert BertConfig.from_dict(TINY.to_dict()) == TINY


def test_output_shapes_and_pooler(tiny_params):
    inputs = _inputs()
    sequence, pooled = BertEncoder(TINY).apply({"params": tiny_params}, *inputs)
    assert sequence.shape == (3, 12, 128) and sequence.dtype == jnp.float32
    assert pooled.shape == (3, 128)
    pooler = tiny_params["pooler"]
    np.testing.assert_allclose(pooled, np.tanh(sequence[:, 0] @ pooler["kernel"] + pooler["bias"]), atol=1e-5)
    # Post-LN: every output vector is layer-normalised (mean 0, variance 1 before scale/bias).
    np.testing.assert_allclose(sequence.mean(-1), 0.0, atol=1e-4)


def test_padded_keys_do_not_influence_real_tokens(tiny_params):
    ids, types, mask = _inputs()
    other_ids = ids.at[1, 8:].set(7).at[2, 5:].set(9)
    model = BertEncoder(TINY)
    a, _ = model.apply({"params": tiny_params}, ids, types, mask)
    b, _ = model.apply({"params": tiny_params}, other_ids, types, mask)
    np.testing.assert_allclose(a[1, :8], b[1, :8], atol=1e-6)
    np.testing.assert_allclose(a[2, :5], b[2, :5], atol=1e-6)
    assert np.abs(a[1, 8:] - b[1, 8:]).max() > 1e-3  # the padded positions themselves did change


def test_defaults_for_segment_and_mask(tiny_params):
    ids, _, _ = _inputs()
    model = BertEncoder(TINY)
    a, _ = model.apply({"params": tiny_params}, ids)
    b, _ = model.apply({"params": tiny_params}, ids, jnp.zeros_like(ids), jnp.ones_like(ids))
    np.testing.assert_array_equal(a, b)


def test_dropout_is_active_only_when_not_deterministic(tiny_params):
    inputs = _inputs()
    model = BertEncoder(TINY)
    train = lambda seed: model.apply({"params": tiny_params}, *inputs, deterministic=False,
                                     rngs={"dropout": jax.random.key(seed)})[0]
    assert np.abs(train(1) - train(2)).max() > 1e-2
    np.testing.assert_array_equal(train(1), train(1))


def test_attention_dropout_gradient_equals_plain_dropout():
    # drop_probabilities takes its gradient from the dropped output rather than the keep
    # mask (to free the random bits early); through the softmax that must change nothing,
    # masked keys (probability exactly 0) included.
    scores = jax.random.normal(jax.random.key(0), (2, 3, 16, 16))
    key_mask = jnp.arange(16) < jnp.array([16, 9])[:, None, None, None]  # batch 1 has 7 padded keys
    keep = jax.random.bernoulli(jax.random.key(1), 0.9, scores.shape)
    weights = jax.random.normal(jax.random.key(2), scores.shape)

    def loss(scores, dropout):
        probs = jax.nn.softmax(jnp.where(key_mask, scores, jnp.finfo(jnp.float32).min), axis=-1)
        return jnp.sum(weights * dropout(probs))

    plain = lambda probs: jnp.where(keep, probs / 0.9, 0)
    ours = lambda probs: drop_probabilities(probs, keep, 0.9)
    np.testing.assert_array_equal(ours(jax.nn.softmax(scores)), plain(jax.nn.softmax(scores)))
    grad_plain = jax.grad(loss)(scores, plain)
    grad_ours = jax.grad(loss)(scores, ours)
    assert np.abs(grad_plain).max() > 1e-2
    np.testing.assert_allclose(grad_ours, grad_plain, atol=1e-6)


@pytest.mark.parametrize("remat_policy", ["none", "full", "dots", "dots_no_batch"])
def test_scan_and_remat_match_unrolled(tiny_params, remat_policy):
    inputs = _inputs()
    reference = jax.jit(BertEncoder(TINY).apply)({"params": tiny_params}, *inputs)[0]
    scanned = TINY.replace(scan_layers=True, remat_policy=remat_policy)
    stacked = stack_layers(tiny_params, TINY.num_hidden_layers)
    assert jax.tree_util.tree_structure(stacked) == jax.tree_util.tree_structure(_init(scanned, inputs))
    out = BertEncoder(scanned).apply({"params": stacked}, *inputs)[0]
    np.testing.assert_allclose(out, reference, atol=1e-5)

    # Gradients agree too (remat changes what is stored, never what is computed).
    loss = lambda config, p: jnp.sum(BertEncoder(config).apply({"params": p}, *inputs)[0] ** 2)
    grad_unrolled = jax.jit(jax.grad(lambda p: loss(TINY, p)))(tiny_params)  # jitted: eager ops compile one by one
    grad_scanned = unstack_layers(jax.jit(jax.grad(lambda p: loss(scanned, p)))(stacked))
    for a, b in zip(jax.tree_util.tree_leaves(grad_unrolled), jax.tree_util.tree_leaves(grad_scanned)):
        np.testing.assert_allclose(a, b, atol=2e-4, rtol=1e-4)


def test_hidden_states_are_each_layers_output_unrolled_and_scanned(tiny_params):
    inputs = _inputs()
    sequence, pooled, hidden = BertEncoder(TINY).apply({"params": tiny_params}, *inputs, output_hidden_states=True)
    assert hidden.shape == (TINY.num_hidden_layers + 1, 3, 12, TINY.hidden_size)
    np.testing.assert_array_equal(hidden[-1], sequence)
    plain_sequence, plain_pooled = BertEncoder(TINY).apply({"params": tiny_params}, *inputs)
    np.testing.assert_array_equal(plain_sequence, sequence)
    np.testing.assert_array_equal(plain_pooled, pooled)
    embedded = BertEncoder(TINY).apply({"params": tiny_params}, inputs[0], inputs[1], True,
                                       method=lambda module, ids, types, deterministic: module.embeddings(
                                           ids, types, deterministic))
    np.testing.assert_array_equal(hidden[0], embedded)
    one_layer = TINY.replace(num_hidden_layers=1)
    first = {**tiny_params, "encoder": {"layer_0": tiny_params["encoder"]["layer_0"]}}
    np.testing.assert_allclose(hidden[1], BertEncoder(one_layer).apply({"params": first}, *inputs)[0], atol=1e-6)
    scanned = TINY.replace(scan_layers=True)
    stacked = stack_layers(tiny_params, TINY.num_hidden_layers)
    _, _, hidden_scanned = BertEncoder(scanned).apply({"params": stacked}, *inputs, output_hidden_states=True)
    np.testing.assert_allclose(hidden_scanned, hidden, atol=1e-6)


def test_unstack_inverts_stack(tiny_params):
    round_trip = unstack_layers(stack_layers(tiny_params, TINY.num_hidden_layers))
    jax.tree_util.tree_map(np.testing.assert_array_equal, round_trip, tiny_params)


@pytest.mark.parametrize("impl", ["fused", "splash"])  # splash: the TPU kernel, interpreted on CPU
def test_attention_implementations_match_xla(tiny_params, impl):
    inputs = _inputs(length=128)  # splash works in blocks of 128
    reference = BertEncoder(TINY).apply({"params": tiny_params}, *inputs)[0]
    config = TINY.replace(attention_impl=impl, attention_probs_dropout_prob=0.0)
    out = BertEncoder(config).apply({"params": tiny_params}, *inputs)[0]
    mask = np.asarray(inputs[2], bool)
    np.testing.assert_allclose(np.asarray(out)[mask], np.asarray(reference)[mask], atol=1e-5)


def test_cudnn_attention_gives_an_all_padding_row_one_key(tiny_params, monkeypatch):
    """cuDNN takes padding as key lengths; a row of padding only (an evaluation batch's filler
    rows, missing choices) was a zero-length sequence, which cuDNN releases have failed on.
    Run here through XLA's form of the same call (cuDNN needs a GPU): the lengths it gets, and
    the real rows' outputs."""
    calls = []
    plain = jax.nn.dot_product_attention

    def recorded(*args, key_value_seq_lengths=None, implementation=None, **kwargs):
        calls.append((implementation, key_value_seq_lengths))
        return plain(*args, key_value_seq_lengths=key_value_seq_lengths, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", recorded)
    ids, types, mask = _inputs()
    mask = mask.at[0].set(0)  # a filler row
    config = TINY.replace(attention_impl="cudnn", attention_probs_dropout_prob=0.0, dtype="bfloat16")
    out = BertEncoder(config).apply({"params": tiny_params}, ids, types, mask)[0]
    reference = BertEncoder(TINY.replace(dtype="bfloat16")).apply({"params": tiny_params}, ids, types, mask)[0]
    assert [(implementation, list(lengths)) for implementation, lengths in calls] == [("cudnn", [1, 8, 5])] * 2
    real = np.asarray(mask, bool)
    np.testing.assert_allclose(np.asarray(out, np.float32)[real], np.asarray(reference, np.float32)[real], atol=0.05)
    assert np.isfinite(np.asarray(out, np.float32)).all()


def test_splash_attention_takes_any_multiple_of_128():
    """Its blocks were 512 rows from 512 tokens on, so 640 (a multiple of 128, as it asks) failed
    deep in Pallas (a review)."""
    from bertjax.models import splash

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 640, 2, 8)).astype(np.float32) for _ in range(3))
    out = splash.attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.ones((1, 640), jnp.int32))
    scores = np.einsum("bqnd,bknd->bnqk", q, k) / np.sqrt(8)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    want = np.einsum("bnqk,bknd->bqnd", weights / weights.sum(-1, keepdims=True), v)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


def _packed(rows):
    """Sequences (lists of ids) -> one packed row per list of sequences, padded to 128."""
    length, pairs = 128, max(len(r) for r in rows)
    out = {k: np.zeros((len(rows), length), np.int32) for k in ("input_ids", "position_ids", "sequence_ids")}
    out["pooled_positions"] = np.zeros((len(rows), pairs), np.int32)
    for r, sequences in enumerate(rows):
        start = 0
        for i, ids in enumerate(sequences):
            span = slice(start, start + len(ids))
            out["input_ids"][r, span], out["position_ids"][r, span] = ids, np.arange(len(ids))
            out["sequence_ids"][r, span], out["pooled_positions"][r, i] = i + 1, start
            start += len(ids)
    out["token_type_ids"] = (out["position_ids"] >= 3).astype(np.int32)
    return out


@pytest.mark.parametrize("impl", ["xla", "fused", "splash"])
def test_packed_rows_equal_each_sequence_alone(tiny_params, impl):
    """Block-diagonal attention, per-sequence positions and pooled [CLS] vectors: a sequence
    packed with others (or with padding after it) gets exactly its unpacked outputs."""
    rng = np.random.default_rng(1)
    sequences = [rng.integers(5, TINY.vocab_size, n).astype(np.int32) for n in (7, 9, 5, 11, 8)]
    packed = _packed([sequences[:3], sequences[3:]])
    config = TINY.replace(attention_impl=impl, attention_probs_dropout_prob=0.0)
    out, pooled = jax.jit(BertEncoder(config).apply)({"params": tiny_params}, **packed)
    assert pooled.shape == (2, 3, TINY.hidden_size)
    row_of = [(0, 0, 0), (0, 1, 7), (0, 2, 16), (1, 0, 0), (1, 1, 11)]  # (row, slot, start)
    encode_alone = jax.jit(BertEncoder(TINY).apply)  # jitted: eagerly, every op compiles for every length
    for ids, (row, slot, start) in zip(sequences, row_of):
        alone, alone_pooled = encode_alone({"params": tiny_params}, ids[None],
                                           (np.arange(len(ids)) >= 3).astype(np.int32)[None])
        np.testing.assert_allclose(out[row, start:start + len(ids)], alone[0], atol=2e-5)
        np.testing.assert_allclose(pooled[row, slot], alone_pooled[0], atol=2e-5)


def test_packed_inputs_come_together(tiny_params):
    packed = _packed([[np.arange(5, 10)]])
    with pytest.raises(ValueError, match="position_ids, sequence_ids and pooled_positions together"):
        BertEncoder(TINY).apply({"params": tiny_params}, packed["input_ids"], sequence_ids=packed["sequence_ids"])


@pytest.mark.parametrize("packed_positions", [False, True])
def test_embedding_gradients_equal_gathers_and_scatter_only_into_the_word_table(packed_positions):
    """Segment and position rows are read by one-hot matmuls (or a slice): the same values and
    gradients as gathers, without the scatter-adds into 2 or 512 rows that serialise on GPU."""
    ids, types, _ = _inputs()
    positions = jnp.asarray(np.tile(np.arange(12) % 7, (3, 1))) if packed_positions else None
    module = BertEmbeddings(TINY)
    params = nn.unbox(module.init(jax.random.key(0), ids, types, True))

    def by_gathers(params):
        table = params["params"]
        rows = jnp.arange(12)[None] if positions is None else positions
        x = (table["word_embeddings"]["embedding"][ids] + table["token_type_embeddings"]["embedding"][types]
             + table["position_embeddings"]["embedding"][rows])
        return nn.LayerNorm(epsilon=TINY.layer_norm_eps).apply({"params": table["LayerNorm"]}, x)

    weights = jnp.asarray(np.random.default_rng(2).normal(size=(3, 12, TINY.hidden_size)), jnp.float32)
    loss = lambda p: jnp.sum(module.apply(p, ids, types, True, position_ids=positions) * weights)
    reference_loss = lambda p: jnp.sum(by_gathers(p) * weights)
    np.testing.assert_allclose(module.apply(params, ids, types, True, position_ids=positions), by_gathers(params),
                               atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5), jax.grad(loss)(params),
                 jax.grad(reference_loss)(params))
    hlo = jax.jit(jax.grad(loss)).lower(params).as_text()
    assert hlo.count('"stablehlo.scatter"') == 1  # the word table's gradient


def test_bfloat16_compute_keeps_float32_params():
    config = TINY.replace(dtype="bfloat16")
    inputs = _inputs()
    params = _init(config, inputs)
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(params)} == {jnp.dtype(jnp.float32)}
    sequence, _ = BertEncoder(config).apply({"params": params}, *inputs)
    assert sequence.dtype == jnp.bfloat16
    reference, _ = BertEncoder(TINY).apply({"params": params}, *inputs)
    assert np.abs(np.asarray(sequence, np.float32) - reference).max() < 0.15


@pytest.mark.parametrize("window", [0, 4])  # all keys; the modern encoder's local band (blocked)
def test_bfloat16_attention_scores_sum_in_float32(window):
    """Every attention product of bfloat16 operands gives float32 sums: the scores were rounded
    to bfloat16 before the softmax on some paths and not on the query-block one, so one text's
    probabilities depended on the bucket it landed in (a review)."""
    import jax.extend.core  # noqa: F401 (jax.extend.core.jaxprs_in_params)

    config = TINY.replace(dtype="bfloat16", attention_window=window)
    inputs = _inputs(length=16)
    params = _init(config, inputs)
    jaxpr = jax.make_jaxpr(lambda p: BertEncoder(config).apply({"params": p}, *inputs))(params)

    def products(eqns):
        for eqn in eqns:
            if eqn.primitive.name == "dot_general":
                yield eqn
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                yield from products(sub.eqns)

    attention_products = [eqn for eqn in products(jaxpr.eqns) if all(v.aval.ndim >= 4 for v in eqn.invars)]
    assert attention_products and all(eqn.outvars[0].aval.dtype == jnp.float32 for eqn in attention_products)


def test_bfloat16_matmuls_round_the_dense_operands_only():
    """matmul_precision="bfloat16": float32 activations and parameters, the dense layers'
    operands rounded to bfloat16 (a TPU's default precision): outputs and gradients near the
    float32 model's, every dense product (forward and backward) on bfloat16 operands."""
    config = TINY.replace(matmul_precision="bfloat16")
    inputs = _inputs()
    params = _init(config, inputs)
    loss = lambda config: lambda p: sum(jnp.sum(jnp.sin(out)) for out in BertEncoder(config).apply({"params": p},
                                                                                                     *inputs))
    sequence, _ = BertEncoder(config).apply({"params": params}, *inputs)
    reference, _ = BertEncoder(TINY).apply({"params": params}, *inputs)
    assert sequence.dtype == jnp.float32
    assert 1e-4 < np.abs(sequence - reference).max() < 0.05
    grads, reference_grads = jax.grad(loss(config))(params), jax.grad(loss(TINY))(params)
    for path, (a, b) in zip(jax.tree_util.tree_leaves_with_path(grads),
                            zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(reference_grads))):
        assert np.abs(a - b).max() <= 0.05 * np.abs(b).max() + 1e-6, jax.tree_util.keystr(path[0])

    products = list(_dot_generals(jax.make_jaxpr(jax.grad(loss(config)))(params).jaxpr))
    dense = [eqn for eqn in products if eqn.invars[0].aval.ndim == 2]  # attention's products are batched
    assert len(dense) == 3 * 6 * TINY.num_hidden_layers + 3  # 6 dense layers a layer, the pooler; y, dx, dw each
    assert all(v.aval.dtype == jnp.bfloat16 for eqn in dense for v in eqn.invars)


def test_gelu_variants_differ():
    inputs = _inputs()
    params = _init(TINY, inputs)
    exact = BertEncoder(TINY).apply({"params": params}, *inputs)[0]
    tanh = BertEncoder(TINY.replace(hidden_act="gelu_tanh")).apply({"params": params}, *inputs)[0]
    assert 0 < np.abs(exact - tanh).max() < 0.05


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_tanh"])
def test_the_backward_pass_keeps_two_feed_forward_tensors_per_layer(hidden_act):
    """The activation is recomputed in the backward pass: of the [B, S, I] feed-forward the
    forward pass keeps the activation's input and output (the output matmul's gradient needs
    it), not the GELU derivative's factors too (four such tensors without jax.checkpoint)."""
    config = TINY.replace(hidden_act=hidden_act, num_hidden_layers=1)
    inputs = _inputs()
    params = _init(config, inputs)
    _, backward = jax.vjp(lambda p: BertEncoder(config).apply({"params": p}, *inputs)[0], params)
    feed_forward_size = inputs[0].size * config.intermediate_size
    kept = [leaf.shape for leaf in jax.tree_util.tree_leaves(backward) if leaf.size == feed_forward_size]
    assert len(kept) == 2, kept  # [B, S, I], or [B x S, I] as the output matmul reads it


def _dot_generals(jaxpr):
    """Every dot_general equation of a jaxpr, inside nested calls too."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                yield from _dot_generals(inner)


def test_dense_is_one_matmul_over_rows():
    """`dense` multiplies [B x S, K] rows: nn.Dense's values and gradients, with the kernel's
    gradient one x^T [K, B x S] . dy [B x S, N] product (contracted over [B, S], XLA:CPU
    transposed both operands into its slowest matmul form)."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 5, 16)), jnp.float32)
    ours, plain = primitives.dense(TINY, 24, ("embed", "mlp"), "d"), nn.Dense(24)
    params = nn.unbox(ours.init(jax.random.key(0), x))
    loss = lambda module: lambda p, x: jnp.sum(jnp.sin(module.apply(p, x)))
    np.testing.assert_allclose(ours.apply(params, x), plain.apply(params, x), rtol=1e-6, atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 jax.grad(loss(ours), argnums=(0, 1))(params, x), jax.grad(loss(plain), argnums=(0, 1))(params, x))

    jaxpr = jax.make_jaxpr(jax.grad(loss(ours)))(params, x).jaxpr
    kernel_grad, = [eqn for eqn in _dot_generals(jaxpr) if eqn.outvars[0].aval.shape in ((16, 24), (24, 16))]
    assert sorted(v.aval.shape for v in kernel_grad.invars) == [(15, 16), (15, 24)]
    assert kernel_grad.params["dimension_numbers"] == (((0,), (0,)), ((), ()))
    with pytest.raises(ValueError, match="nn.Dense's product"):
        primitives.dot_over_rows(x, jnp.ones((3, 24)), (((0,), (0,)), ((), ())))


def test_bad_input_shapes_are_reported(tiny_params):
    with pytest.raises(ValueError, match="input_ids must be"):
        BertEncoder(TINY).apply({"params": tiny_params}, jnp.ones((12,), jnp.int32))
    with pytest.raises(ValueError, match="exceeds max_position_embeddings 128"):
        BertEncoder(TINY).apply({"params": tiny_params}, jnp.ones((1, 129), jnp.int32))


def test_initialisation_statistics():
    params = _init(TINY, _inputs())
    kernel = params["encoder"]["layer_0"]["intermediate"]["kernel"]
    assert abs(float(kernel.std()) - TINY.initializer_range) < 0.003
    assert float(np.abs(kernel).max()) <= 2 * TINY.initializer_range + 1e-6  # truncated at 2 sigma
    np.testing.assert_array_equal(params["embeddings"]["LayerNorm"]["scale"], 1.0)
    np.testing.assert_array_equal(params["encoder"]["layer_1"]["output"]["bias"], 0.0)


@pytest.mark.parametrize("packed", [False, True])
def test_long_rows_attend_by_query_blocks_as_all_at_once(monkeypatch, packed):
    """From 2 x QUERY_BLOCK tokens queries go in blocks (on a CPU within chunks of rows and
    heads): the same outputs as the whole S x S, for a length no multiple of the block, padded
    or packed."""
    config = BertConfig.preset("tiny", vocab_size=97, max_position_embeddings=1024)
    rng = np.random.default_rng(3)
    length = 2 * attention.QUERY_BLOCK + 89
    x = jnp.asarray(rng.normal(size=(2, length, config.hidden_size)), jnp.float32)
    if packed:
        ids = np.concatenate([np.full(300, 1), np.full(length - 340, 2), np.zeros(40)]).astype(np.int32)[None]
        ids = np.repeat(ids, 2, 0)
    else:
        ids = np.ones((2, length), np.int32)
        ids[1, 400:] = 0
    layer = attention.BertSelfAttention(config, deterministic=True, packed=packed)
    params = layer.init(jax.random.key(0), x, jnp.asarray(ids))
    blocked = np.asarray(layer.apply(params, x, jnp.asarray(ids)))
    monkeypatch.setattr(attention, "SCORE_CHUNK_BYTES", 1)  # and one row and one head at a time (CPU)
    heads = config.num_attention_heads
    assert attention._attention_chunks((2, heads, length, 64), (2, 1, 1, length), attention.QUERY_BLOCK) == (2, heads)
    blocked_by_row = np.asarray(layer.apply(params, x, jnp.asarray(ids)))
    monkeypatch.setattr(attention, "QUERY_BLOCK", 10 ** 6)
    monkeypatch.setattr(attention, "SCORE_CHUNK_BYTES", 10 ** 12)
    whole = np.asarray(layer.apply(params, x, jnp.asarray(ids)))
    real = ids > 0
    np.testing.assert_allclose(blocked[real], whole[real], atol=1e-7, rtol=1e-4)
    np.testing.assert_allclose(blocked_by_row[real], whole[real], atol=1e-7, rtol=1e-4)
    assert np.abs(whole[real]).max() > 1e-3


@pytest.mark.parametrize("packed", [False, True])
def test_query_blocks_recompute_their_scores_for_the_exact_gradient(monkeypatch, packed):
    """block_attention's hand-written backward (scores recomputed block by block) gives the
    gradients of the whole S x S attention, for padded and packed rows; a loss on every
    position too, where a packed row's padding queries see no key (their gradient leaked into
    the queries and keys: a review)."""
    config = BertConfig.preset("tiny", vocab_size=97, max_position_embeddings=1024, attention_probs_dropout_prob=0.0)
    rng = np.random.default_rng(5)
    length = 2 * attention.QUERY_BLOCK + 37
    x = jnp.asarray(rng.normal(size=(2, length, config.hidden_size)), jnp.float32)
    ids = np.ones((2, length), np.int32)
    if packed:
        ids[:, 200:] = 2
    ids[1, 450:] = 0
    ids = jnp.asarray(ids)
    real = jnp.asarray(np.asarray(ids) > 0)[..., None]
    layer = attention.BertSelfAttention(config, deterministic=False, packed=packed)
    params = layer.init(jax.random.key(0), x, ids)
    real_only = lambda p, x: jnp.sum(jnp.where(real, jnp.sin(layer.apply(p, x, ids)), 0.0))
    everywhere = lambda p, x: jnp.sum(jnp.sin(layer.apply(p, x, ids)))
    blocked = [jax.tree.map(np.asarray, jax.grad(loss, argnums=(0, 1))(params, x)) for loss in (real_only, everywhere)]
    monkeypatch.setattr(attention, "QUERY_BLOCK", 10 ** 6)
    whole = [jax.tree.map(np.asarray, jax.grad(loss, argnums=(0, 1))(params, x)) for loss in (real_only, everywhere)]
    for a, b in zip(jax.tree.leaves(blocked), jax.tree.leaves(whole)):  # gradients up to ~20: summation order
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=2e-4)
    assert max(np.abs(leaf).max() for leaf in jax.tree.leaves(whole)) > 1e-3


@pytest.mark.parametrize("packed", [False, True])
def test_rows_and_heads_in_chunks_attend_as_the_whole_batch_and_train_the_same(monkeypatch, packed):
    """On a CPU, a batch whose scores exceed SCORE_CHUNK_BYTES attends a chunk of rows at a
    time, and a row whose scores exceed it a group of heads at a time (strided chunks and
    groups, put back in order): the outputs and the gradients equal the whole batch's, padded
    or packed."""
    config = BertConfig.preset("tiny", vocab_size=97, num_attention_heads=4, attention_probs_dropout_prob=0.0)
    rng = np.random.default_rng(4)
    batch, length = 6, 48
    x = jnp.asarray(rng.normal(size=(batch, length, config.hidden_size)), jnp.float32)
    ids = np.ones((batch, length), np.int32)
    if packed:
        ids[:, 20:] = 2
    ids[1::2, 40:] = 0
    ids = jnp.asarray(ids)
    layer = attention.BertSelfAttention(config, deterministic=False, packed=packed)
    params = layer.init(jax.random.key(0), x, ids)
    shapes = (batch, config.num_attention_heads, length, config.head_dim), (batch, 1, 1, length)
    row_bytes = config.num_attention_heads * length * length * 4
    assert attention._attention_chunks(*shapes, length) == (1, 1)

    def outputs_and_gradient():
        loss = lambda p, x: jnp.sum(jnp.sin(layer.apply(p, x, ids, rngs={"dropout": jax.random.key(1)})))
        out = layer.apply(params, x, ids, rngs={"dropout": jax.random.key(1)})
        return np.asarray(out), jax.tree.map(np.asarray, jax.grad(loss, argnums=(0, 1))(params, x))

    whole, whole_grads = outputs_and_gradient()
    real = np.asarray(ids) > 0
    assert np.abs(whole[real]).max() > 1e-3
    # chunks of 2 rows; one row in 2 groups of 2 heads (0 and 2, 1 and 3); one head at a time
    for budget, chunks in ((2 * row_bytes, (3, 1)), (row_bytes // 2, (6, 2)), (1, (6, 4))):
        monkeypatch.setattr(attention, "SCORE_CHUNK_BYTES", budget)
        assert attention._attention_chunks(*shapes, length) == chunks
        chunked, chunked_grads = outputs_and_gradient()
        np.testing.assert_allclose(chunked[real], whole[real], atol=1e-6, rtol=1e-5)
        for a, b in zip(jax.tree.leaves(chunked_grads), jax.tree.leaves(whole_grads)):
            np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-4)


def test_fill_mask_logits_are_summed_and_returned_in_float32_under_bfloat16():
    """Fill-mask reports probabilities: under bfloat16 compute (the GPU/TPU default) its
    vocabulary logits must not be rounded to bfloat16's grid (1/32 at 8 and more)."""
    from bertjax.inference.fill_mask import _MaskedLM

    ids, types, mask = _inputs()
    positions = jnp.array([[1, 2], [3, 4], [0, 1]])
    params = _MaskedLM(TINY).init(jax.random.key(0), ids, types, mask, positions)
    exact = _MaskedLM(TINY).apply(params, ids, types, mask, positions)
    logits = _MaskedLM(TINY.replace(dtype="bfloat16")).apply(params, ids, types, mask, positions)
    assert logits.dtype == jnp.float32
    assert np.mean(np.asarray(logits) != np.asarray(logits.astype(jnp.bfloat16).astype(jnp.float32))) > 0.9
    np.testing.assert_allclose(logits, exact, atol=0.05)


def test_one_token_type_serves_both_texts_of_a_pair():
    """A model with type_vocab_size=1 adds its one row to a pair's second text too (a one-hot
    of type 1 over one row would add nothing)."""
    config = TINY.replace(type_vocab_size=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ids, types, mask = _inputs()
    params = _init(config, (ids, types, mask))
    pair = BertEncoder(config).apply({"params": params}, ids, types, mask)
    single = BertEncoder(config).apply({"params": params}, ids, jnp.zeros_like(types), mask)
    np.testing.assert_array_equal(pair[0], single[0])


def test_a_window_without_local_layers_is_refused():
    """BERT's global_attention_every=1 makes every layer global: a window set with it did nothing."""
    from bertjax.models import config as bert_config

    with pytest.raises(ValueError, match=r"^config.model.attention_window=128 has no effect with "
                                         r"global_attention_every=1 \(every layer attends globally\)"):
        bert_config.resolve({"attention_window": 128, "position_embedding": "rope"}, preset="base")
    windowed = bert_config.resolve({"attention_window": 128, "global_attention_every": 3,
                                    "position_embedding": "rope"}, preset="base")
    assert [windowed.is_global_layer(i) for i in range(4)] == [True, False, False, True]
    assert bert_config.resolve({}, preset="modernbert-tiny").attention_window == 16  # the presets' own windows


@pytest.mark.multidevice
def test_splash_attention_runs_per_device_under_a_mesh(monkeypatch):
    """The Pallas kernel sat inside the jit over the mesh: XLA cannot partition a Mosaic kernel,
    so on a TPU any mesh of more than one device failed at the first compile (a review; on a
    CPU the interpreted kernel is plain XLA and partitioned). Lowered for a TPU here, and the
    same numbers as on one device on the CPU."""
    from bertjax import sharding
    from bertjax.models import splash

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((4, 128, 4, 8)), jnp.float32) for _ in range(3))
    ids = jnp.asarray([[1] * 100 + [0] * 28, [1] * 128, [1] * 60 + [2] * 68, [1] * 128])  # padded, packed
    alone = splash.attention(q, k, v, ids)
    mesh = sharding.create_mesh(data=2, tensor=2, devices=jax.devices()[:4])
    with sharding.activate(mesh):
        np.testing.assert_allclose(np.asarray(jax.jit(splash.attention)(q, k, v, ids)), np.asarray(alone), atol=1e-5)
        # A batch the mesh does not divide (fine-tuning builds its model from one row): whole.
        one = jax.jit(splash.attention)(q[:1], k[:1], v[:1], ids[:1])
        np.testing.assert_allclose(np.asarray(one), np.asarray(alone)[:1], atol=1e-5)
        monkeypatch.setattr(splash, "_interpret", lambda: False)  # the TPU kernel itself
        jax.jit(splash.attention).trace(q, k, v, ids).lower(lowering_platforms=("tpu",))

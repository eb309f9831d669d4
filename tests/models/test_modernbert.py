"""The modern encoder (ModernBERT) as BertConfig switches: parity with Hugging Face's
ModernBertForMaskedLM / ModernBertForSequenceClassification / ModernBertForTokenClassification /
ModernBertForQuestionAnswering (reference outputs stored by
make_modernbert_reference.py), export back to that layout, the attention forms against each
other, packing, and the switches' validation."""

import json
import os
import shutil
import subprocess
import sys

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from bertjax.models import (BertConfig, BertEncoder, BertForQuestionAnswering, BertForSequenceClassification,
                            BertForTokenClassification, convert, modernbert_layout)
from bertjax.models.attention import BertSelfAttention
from bertjax.models.heads import MaskedLMHead

HF_DIR = os.path.join(os.path.dirname(__file__), "hf_modernbert")
REFERENCE = np.load(os.path.join(HF_DIR, "reference.npz"))


def _outputs(config, params, input_ids, attention_mask):
    """bertjax's hidden states [L + 1, B, S, H] and masked-LM logits [B, S, V] of `params`."""
    _, _, hidden_states = BertEncoder(config).apply({"params": params["bert"]}, jnp.asarray(input_ids), None,
                                                    jnp.asarray(attention_mask), output_hidden_states=True)
    embedding = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    logits = MaskedLMHead(config).apply({"params": params["mlm"]}, hidden_states[-1], lambda h: h @ embedding.T)
    return np.asarray(hidden_states), np.asarray(logits)


@pytest.mark.parametrize("length", ["short", "long"])  # inside and beyond the attention window
def test_hugging_face_modernbert_imports_with_parity(length):
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "masked_lm"))
    assert (config.position_embedding, config.norm_placement, config.gated_mlp, config.attention_window,
            config.global_attention_every, config.rope_theta, config.use_bias) == ("rope", "pre", True, 16, 3,
                                                                                   160_000.0, False)
    mask = REFERENCE[f"{length}_attention_mask"]
    real = mask.astype(bool)
    hidden_states, logits = _outputs(config, params, REFERENCE[f"{length}_input_ids"], mask)
    want = REFERENCE[f"{length}_hidden_states"]
    assert hidden_states.shape == want.shape
    for layer in range(len(want)):
        np.testing.assert_allclose(hidden_states[layer][real], want[layer][real], atol=1e-4, rtol=0)
    np.testing.assert_allclose(logits[real], REFERENCE[f"{length}_mlm_logits"][real], atol=1e-4, rtol=0)
    assert np.abs(want[-1][real]).max() > 0.5 and np.abs(REFERENCE[f"{length}_mlm_logits"]).max() > 0.5


def test_the_reference_tells_near_misses_apart():
    """The reference's layers move the hidden states by O(1) (initializer_range 0.2), so an
    encoder with the two RoPE bases swapped, or GELU's tanh form, misses the 1e-4 parity."""
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "masked_lm"))
    real = REFERENCE["long_attention_mask"].astype(bool)
    want = REFERENCE["long_hidden_states"]
    assert np.abs(want[-1][real] - want[0][real]).max() > 1.0
    for near_miss, at_least in ((config.replace(rope_theta=config.local_rope_theta, local_rope_theta=config.rope_theta),
                                 0.05), (config.replace(hidden_act="gelu_tanh"), 3e-4)):
        hidden_states, _ = _outputs(near_miss, params, REFERENCE["long_input_ids"], REFERENCE["long_attention_mask"])
        assert np.abs(hidden_states[:, real] - want[:, real]).max() > at_least, near_miss


@pytest.mark.parametrize("length", ["short", "long"])
def test_hugging_face_modernbert_classifier_imports_with_parity(length):
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "classifier"))
    assert config.pooler == "mean" and params["classifier"]["kernel"].shape == (32, 3)
    logits = BertForSequenceClassification(config, num_labels=3).apply(
        {"params": params}, jnp.asarray(REFERENCE[f"{length}_input_ids"]), None,
        jnp.asarray(REFERENCE[f"{length}_attention_mask"]))
    np.testing.assert_allclose(np.asarray(logits), REFERENCE[f"{length}_class_logits"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("length", ["short", "long"])
def test_hugging_face_modernbert_token_heads_import_with_parity(length):
    """Token classification and span QA: ModernBERT's dense, activation, norm over every token
    (config.token_transform) before the output layer, which for QA Hugging Face calls "classifier"."""
    inputs = (jnp.asarray(REFERENCE[f"{length}_input_ids"]), None, jnp.asarray(REFERENCE[f"{length}_attention_mask"]))
    real = REFERENCE[f"{length}_attention_mask"].astype(bool)
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "token_classifier"))
    assert config.token_transform and sorted(params) == ["bert", "classifier", "token_transform",
                                                         "token_transform_norm"]
    logits = BertForTokenClassification(config, num_labels=5).apply({"params": params}, *inputs)
    np.testing.assert_allclose(np.asarray(logits)[real], REFERENCE[f"{length}_token_logits"][real], atol=1e-4, rtol=0)
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "question_answering"))
    assert sorted(params) == ["bert", "qa_outputs", "token_transform", "token_transform_norm"]
    start, end = BertForQuestionAnswering(config).apply({"params": params}, *inputs)
    for got, name in ((start, "start"), (end, "end")):
        np.testing.assert_allclose(np.asarray(got)[real], REFERENCE[f"{length}_{name}_logits"][real], atol=1e-4,
                                   rtol=0)


def test_a_new_head_starts_from_the_checkpoints_head_as_hugging_face_loads_it():
    """Hugging Face's ModernBertFor<Task> classes all name their head (dense, activation, norm)
    `head.*`: a classifier or tagger made from ModernBERT's masked-LM checkpoint starts from its
    pre-trained head. bertjax's pooler and token transform started fresh (a review)."""
    import ml_collections

    from bertjax import finetune
    from bertjax.inference import model_source

    _, mlm = convert.load_pretrained(os.path.join(HF_DIR, "masked_lm"))
    _, tagger = convert.load_pretrained(os.path.join(HF_DIR, "token_classifier"))
    for params, dense, norm in ((mlm, mlm["mlm"]["transform"], mlm["mlm"]["transform_norm"]),
                                (tagger, tagger["token_transform"], tagger["token_transform_norm"])):
        for got, want in ((params["bert"]["pooler"], dense), (params["bert"]["pooler_norm"], norm)):
            assert sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k]) for k in want)
    source = model_source.resolve(os.path.join(HF_DIR, "masked_lm"))
    config = ml_collections.ConfigDict({"reuse_head": False, "init_checkpoint": source.path})
    started = finetune.pretrained_params(config, source, source.bert, dict.fromkeys(
        ["bert", "token_transform", "token_transform_norm", "classifier"]))
    assert sorted(started) == ["bert", "token_transform", "token_transform_norm"]
    for name, part in (("token_transform", "transform"), ("token_transform_norm", "transform_norm")):
        assert all(np.array_equal(started[name][k], mlm["mlm"][part][k]) for k in mlm["mlm"][part])


@pytest.mark.parametrize("head", [dict(tagging_head="bilstm", lstm_hidden_size=8),
                                  dict(feature_layers="-1,-2", feature_combine="concat")])
def test_a_feature_based_heads_token_transform_starts_fresh(head):
    """The token transform was started from the masked-LM head's, which read the last layer,
    over concatenated layers or a BiLSTM's outputs: fine-tuning from a ModernBERT refused the
    checkpoint's transform as the wrong shape, or put it over fresh BiLSTM outputs (a walkthrough).
    It starts fresh there, over the features' width; a run trained so still loads as it was."""
    import ml_collections

    from bertjax import finetune
    from bertjax.inference import model_source

    source = model_source.resolve(os.path.join(HF_DIR, "masked_lm"))
    config = source.bert.replace(**head)
    ids = jnp.ones((2, 8), jnp.int32)
    for model in (BertForTokenClassification(config, num_labels=3), BertForQuestionAnswering(config)):
        params = flax.linen.meta.unbox(model.init(jax.random.key(0), ids, attention_mask=ids)["params"])
        width = ((16 if isinstance(model, BertForTokenClassification) else config.hidden_size)  # (QA: no BiLSTM)
                 if "lstm_hidden_size" in head else 2 * config.hidden_size)
        assert params["token_transform"]["kernel"].shape == (width, config.hidden_size)
        run = ml_collections.ConfigDict({"reuse_head": False, "init_checkpoint": source.path})
        assert sorted(finetune.pretrained_params(run, source, config, params)) == ["bert"]
        logits = model.apply({"params": params}, ids, attention_mask=ids)
        assert np.isfinite(np.asarray(jax.tree_util.tree_leaves(logits)[0])).all()


def test_a_multiple_choice_model_exports_as_modernbert_for_multiple_choice(tmp_path):
    """transformers has ModernBertForMultipleChoice (the sequence classifier's layout with one
    output): a modern choice model was refused, 'Hugging Face has no ModernBERT class' (a review).
    It is written under that class, read back as a choice model with the same weights; a
    classifier of three outputs is no choice scorer."""
    from bertjax.inference import model_source

    config, params = convert.load_pretrained(os.path.join(HF_DIR, "classifier"))
    with pytest.raises(ValueError, match="ModernBertForMultipleChoice has a classifier of one output"):
        convert.export_huggingface(config, params, str(tmp_path / "three"), architecture="BertForMultipleChoice")
    kernel, bias = params["classifier"]["kernel"], params["classifier"]["bias"]
    params = {**params, "classifier": {"kernel": kernel[:, :1], "bias": bias[:1]}}
    convert.export_huggingface(config, params, str(tmp_path / "choice"), architecture="BertForMultipleChoice")
    written = json.loads((tmp_path / "choice" / "config.json").read_text())
    assert written["architectures"] == ["ModernBertForMultipleChoice"]
    assert "problem_type" not in written  # one output, each choice's score: no regression (a review)
    source = model_source.resolve(str(tmp_path / "choice"))
    assert source.task_info["family"] == "choice"
    loaded = source.load_params()
    assert jax.tree.structure(loaded) == jax.tree.structure(params)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(loaded), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))


def test_a_fused_tensor_of_the_wrong_shape_is_named_as_the_file_stores_it(tmp_path):
    """A Wqkv or Wi whose rows are not what config.json's sizes give failed in numpy's split
    ('array split does not result in an equal division'), or was named by a part's key that no
    file holds, 'layers.0.attn.Wqkv.weight#0' (a review)."""
    import shutil

    from safetensors.numpy import save_file

    for key, cut in (("model.layers.1.attn.Wqkv.weight", 1), ("model.layers.0.mlp.Wi.weight", 2)):
        folder = tmp_path / key
        shutil.copytree(os.path.join(HF_DIR, "masked_lm"), folder)
        tensors = load_file(str(folder / "model.safetensors"))
        rows, columns = tensors[key].shape
        tensors[key] = tensors[key][:-cut].copy()
        save_file(tensors, str(folder / "model.safetensors"))
        with pytest.raises(ValueError, match=rf"model.safetensors: tensor '{key}' has shape \({rows - cut}, "
                                             rf"{columns}\), expected \({rows}, {columns}\)"):
            convert.load_pretrained(str(folder))


def test_an_export_hugging_face_cannot_hold_says_why(tmp_path, caplog):
    """A tagger fine-tuned without the token transform was refused as 'does not hold the heads
    ['classifier']' (a review): the reason is named."""
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "token_classifier"))
    bare = {name: tree for name, tree in params.items() if not name.startswith("token_transform")}
    with pytest.raises(ValueError, match="fine-tuned with config.model.token_transform=False"):
        convert.export_huggingface(config, bare, str(tmp_path / "tags"), architecture="BertForTokenClassification")
    assert not os.path.exists(tmp_path / "tags")
    # Another class than the heads': the one that holds them is named, not a list with the refused one
    # in it (a walkthrough).
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "classifier"))
    with pytest.raises(ValueError, match=r"'ModernBertForMaskedLM' does not hold the heads \['classifier'\]; "
                                         r"expected ModernBertForMultipleChoice or ModernBertForSequenceClassification$"):
        convert.export_huggingface(config, params, str(tmp_path / "mlm"), architecture="ModernBertForMaskedLM")
    # A pre-training run's NSP head is said to be left out only of an export that goes on (a
    # walkthrough saw the warning before a refusal of the class named).
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "masked_lm"))
    params["nsp"] = {"kernel": np.zeros((config.hidden_size, 2), np.float32), "bias": np.zeros(2, np.float32)}
    left_out = "ModernBertForMaskedLM holds no next-sentence head or pooler"
    with caplog.at_level("WARNING"), pytest.raises(ValueError, match=r"'ModernBertForSequenceClassification' does "
                                                                     r"not hold the heads \['mlm'\]"):
        convert.export_huggingface(config, params, str(tmp_path / "refused"),
                                   architecture="ModernBertForSequenceClassification")
    assert left_out not in caplog.text
    # The encoder alone, as BertModel writes a BERT's (a walkthrough was refused, and told to name a head's class).
    with caplog.at_level("WARNING"):
        assert convert.export_huggingface(config, params, str(tmp_path / "bare"), architecture="ModernBertModel") == ()
    assert "ModernBertModel holds the encoder alone: mlm, nsp left out" in caplog.text and left_out not in caplog.text
    assert convert.load_pretrained(str(tmp_path / "bare"))[1].keys() == {"bert"}
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert convert.export_huggingface(config, params, str(tmp_path / "mlm")) == ("mlm",)
    assert left_out in caplog.text
    # ...and fill-mask on a model without the masked-LM head names ModernBERT's class that has one.
    import bertjax

    with pytest.raises(ValueError, match="fill-mask needs a pre-training checkpoint or a Hugging Face "
                                         "ModernBertForMaskedLM$"):
        bertjax.load_model(os.path.join(HF_DIR, "classifier")).fill_mask(["a [MASK] b"])


@pytest.mark.parametrize("model", ["masked_lm", "classifier", "token_classifier", "question_answering"])
def test_modernbert_exports_back_to_the_same_files(model, tmp_path):
    """Import, export: the same tensors under the same names, and a config.json that reads back
    to the same BertConfig with the Hugging Face keys that decide the maths."""
    source = os.path.join(HF_DIR, model)
    config, params = convert.load_pretrained(source)
    label_names = {"classifier": ["a", "b", "c"], "token_classifier": list("vwxyz")}.get(model)
    convert.export_huggingface(config, params, str(tmp_path), label_names=label_names)
    original, exported = load_file(os.path.join(source, "model.safetensors")), load_file(tmp_path / "model.safetensors")
    original.pop("decoder.weight", None)  # tied: transformers stores it or not by version
    assert sorted(exported) == sorted(original)
    for name, value in original.items():
        np.testing.assert_array_equal(exported[name], value, err_msg=name)
    written = json.loads((tmp_path / "config.json").read_text())
    hf = json.loads(open(os.path.join(source, "config.json")).read())
    for key in ("model_type", "architectures", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "local_attention", "global_attn_every_n_layers", "norm_eps", "norm_bias",
                "attention_bias", "mlp_bias", "hidden_activation", "classifier_pooling", "vocab_size",
                "layer_types", "rope_parameters"):  # (transformers 5's; a review: only 4's theta keys were written)
        assert written[key] == hf[key], key
    assert modernbert_layout.modernbert_config(written) == config
    # Thetas of its own (a 1,024-token phase at 10,000) in both versions' keys.
    other = config.replace(rope_theta=50_000.0, local_rope_theta=5_000.0)
    written = modernbert_layout.modernbert_hf_config(other)
    assert written["rope_parameters"] == {"full_attention": {"rope_type": "default", "rope_theta": 50_000.0},
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 5_000.0}}
    assert (written["global_rope_theta"], written["local_rope_theta"]) == (50_000.0, 5_000.0)
    assert modernbert_layout.modernbert_config(written) == other


def test_a_wordpiece_modernbert_keeps_its_casing(tmp_path):
    """A modern encoder with a cased vocab.txt: the export says cased in tokenizer_config.json
    (without it, readers lower-case), and bertjax reads it back."""
    config, params = convert.load_pretrained(os.path.join(HF_DIR, "masked_lm"))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"{token}\n" for token in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                             + [f"w{i}" for i in range(config.vocab_size - 5)]))
    heads = convert.export_huggingface(config, params, str(tmp_path / "out"), str(vocab), do_lower_case=False)
    assert heads == ("mlm",)
    saved = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert saved["do_lower_case"] is False and saved["tokenizer_class"] == "BertTokenizer"
    assert convert.checkpoint_vocabulary(str(tmp_path / "out"))["do_lower_case"] is False
    # ModernBertModel's forward takes no token_type_ids, which BertTokenizer gives by default (a
    # review): the written tokenizer's inputs are the model's, the casing unknown or not.
    assert saved["model_input_names"] == ["input_ids", "attention_mask"]
    convert.export_huggingface(config, params, str(tmp_path / "unknown"), str(vocab))
    saved = json.loads((tmp_path / "unknown" / "tokenizer_config.json").read_text())
    assert saved["model_input_names"] == ["input_ids", "attention_mask"] and "do_lower_case" not in saved


def test_the_windowed_attention_forms_agree():
    """Blocked (S > 1.5 w), banded (the full S x S mask) and jax.nn.dot_product_attention's
    local window compute the same, padded and packed."""
    config = BertConfig.preset("modernbert-tiny", vocab_size=50, attention_window=8)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 37, config.hidden_size)), jnp.float32)
    padded = np.ones((2, 37), np.int32)
    padded[1, 20:] = 0
    packed = np.concatenate([np.full(15, 1), np.full(17, 2), np.zeros(5)]).astype(np.int32)[None].repeat(2, 0)
    for sequence_ids, is_packed in ((padded, False), (packed, True)):
        # Jitted: eager, every op of every form compiled on its own.
        layer = lambda cfg: jax.jit(BertSelfAttention(cfg, True, is_packed, window=8, rope_theta=10_000.0).apply)
        params = BertSelfAttention(config, True, is_packed, window=8, rope_theta=10_000.0).init(
            jax.random.key(0), x, jnp.asarray(sequence_ids))
        blocked = layer(config)(params, x, jnp.asarray(sequence_ids))
        real = sequence_ids > 0
        fused = layer(config.replace(attention_impl="fused"))(params, x, jnp.asarray(sequence_ids))
        np.testing.assert_allclose(np.asarray(blocked)[real], np.asarray(fused)[real], atol=2e-5)
        short = x[:, :12]  # S <= 1.5 w: the banded form
        band = layer(config)(params, short, jnp.asarray(sequence_ids[:, :12]))
        band_fused = layer(config.replace(attention_impl="fused"))(params, short, jnp.asarray(sequence_ids[:, :12]))
        np.testing.assert_allclose(np.asarray(band)[real[:, :12]], np.asarray(band_fused)[real[:, :12]], atol=2e-5)
        # cuDNN has no two-sided window (jax raises at trace time): a local layer runs as XLA's
        # (in bfloat16: cuDNN has no float32 form).
        half = layer(config.replace(dtype="bfloat16"))(params, x, jnp.asarray(sequence_ids))
        cudnn = layer(config.replace(attention_impl="cudnn", dtype="bfloat16"))(params, x, jnp.asarray(sequence_ids))
        np.testing.assert_array_equal(np.asarray(cudnn, np.float32), np.asarray(half, np.float32))


def test_a_packed_row_encodes_each_sequence_as_alone():
    """Rotary positions restart and attention (global and local) stays inside each sequence."""
    config = BertConfig.preset("modernbert-tiny", vocab_size=50)
    rng = np.random.default_rng(1)
    first, second = rng.integers(5, 50, 30), rng.integers(5, 50, 21)
    row = np.concatenate([first, second, np.zeros(5, int)])[None]
    sequence_ids = np.concatenate([np.full(30, 1), np.full(21, 2), np.zeros(5)])[None].astype(np.int32)
    position_ids = np.concatenate([np.arange(30), np.arange(21), np.zeros(5)])[None].astype(np.int32)
    encoder = BertEncoder(config)
    params = jax.jit(encoder.init)(jax.random.key(0), jnp.asarray(row))
    encode = jax.jit(encoder.apply)  # jitted: eagerly, every op compiles for every length
    packed, pooled = encode(params, jnp.asarray(row), position_ids=jnp.asarray(position_ids),
                            sequence_ids=jnp.asarray(sequence_ids), pooled_positions=jnp.asarray([[0, 30]]))
    for start, tokens, k in ((0, first, 0), (30, second, 1)):
        alone, alone_pooled = encode(params, jnp.asarray(tokens[None]))
        np.testing.assert_allclose(np.asarray(packed)[0, start:start + len(tokens)], np.asarray(alone)[0], atol=2e-5)
        np.testing.assert_allclose(np.asarray(pooled)[0, k], np.asarray(alone_pooled)[0], atol=2e-5)


def test_the_modern_presets_and_their_parameters():
    base = BertConfig.preset("modernbert-base")
    assert (base.num_hidden_layers, base.hidden_size, base.intermediate_size, base.attention_window,
            base.max_position_embeddings, base.vocab_size) == (22, 768, 1152, 128, 8192, 50368)
    shapes = jax.eval_shape(lambda: BertEncoder(base).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))
    count = sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(shapes))
    hugging_face = sum(int(np.prod(var.shape)) for var in modernbert_layout.modernbert_variable_table(base, ("mlm",)))
    # ModernBertForMaskedLM-base: 149.66M with the MLM head (dense 768 x 768, norm, decoder bias);
    # bertjax's encoder has the pooler (dense, norm) instead of those.
    assert hugging_face == 149_655_232 and count == hugging_face - 50368
    assert [base.is_global_layer(i) for i in range(4)] == [True, False, False, True]
    assert BertConfig.preset("modernbert-large").num_hidden_layers == 28


def test_activations_are_compared_by_the_function_they_name():
    """gelu_new and gelu_pytorch_tanh are one tanh GELU: refused as differing (a review)."""
    config = modernbert_layout.modernbert_config({"hidden_activation": "gelu_new",
                                                  "classifier_activation": "gelu_pytorch_tanh"})
    assert config.hidden_act == "gelu_tanh"


def test_transformers_4_rope_keys_are_read_as_it_reads_them():
    """local_rope_theta null: the global theta; a rope_scaling (unscaled RoPE here) is refused."""
    config = modernbert_layout.modernbert_config({"global_rope_theta": 80_000.0, "local_rope_theta": None})
    assert config.local_rope_theta == config.rope_theta == 80_000.0
    with pytest.raises(ValueError, match=r"config.json: rope_scaling \{'type': 'linear', 'factor': 2.0\}: "
                                         "bertjax's RoPE is unscaled"):
        modernbert_layout.modernbert_config({"rope_scaling": {"type": "linear", "factor": 2.0}})


def test_a_config_json_that_contradicts_its_weights_names_the_files_tensors(tmp_path):
    """attention_bias true over bias-free weights named bertjax's split of a fused tensor,
    'layers.0.attn.Wqkv.bias#0', which is no name in the file (a review)."""
    folder = tmp_path / "biased"
    shutil.copytree(os.path.join(HF_DIR, "masked_lm"), folder)
    settings = json.loads((folder / "config.json").read_text())
    settings.update(attention_bias=True, mlp_bias=True, classifier_bias=True)
    (folder / "config.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=r"missing variable 'layers.0.attn.Wqkv.bias';\n") as refused:
        convert.load_pretrained(str(folder))
    assert "#" not in str(refused.value)


@pytest.mark.parametrize("values, message", [
    ({"classifier_pooling": "max"}, r"classifier_pooling must be 'cls' or 'mean', got 'max'"),
    # BERT's tanh pooler built over a ModernBERT head's weights answered otherwise, silently (a walkthrough).
    ({"classifier_pooling": "tanh"}, r"classifier_pooling must be 'cls' or 'mean', got 'tanh'"),
    # A layer count layer_types does not have was named as another pattern (a walkthrough).
    ({"num_hidden_layers": 3, "layer_types": ["full_attention", "sliding_attention"] * 2},
     "layer_types has 4 entries for num_hidden_layers 3: one a layer"),
    ({"layer_types": "full_attention"}, "layer_types must be a list of one entry a layer, got 'full_attention'"),
    # A value of another type was "a value of the wrong type (unsupported operand ...)", naming no key (a review).
    ({"local_attention": None}, "local_attention must be a positive int, got None"),
    ({"local_attention": "128"}, "local_attention must be a positive int, got '128'"),
    # Hugging Face reads 0 as a window of +-0 keys, bertjax as no window at all (a review).
    ({"local_attention": 0}, "local_attention must be a positive int, got 0"),
    ({"local_attention": 7}, "local_attention 7 must be even and positive"),
    # transformers' default classifier_activation is gelu, whatever hidden_activation says.
    ({"hidden_activation": "silu"}, "classifier_activation 'gelu' differs from hidden_activation 'silu'"),
    ({"rope_parameters": [1]}, r"rope_parameters must be an object of full_attention and sliding_attention objects"),
    ({"hidden_activation": ["gelu"]}, r"hidden_activation \['gelu'\] is not one of"),
    ([{"hidden_size": 8}], "expected a JSON object of config keys, got a list"),
    ({"global_rope_theta": "abc"}, r"the global rope_theta \(rope_parameters or global_rope_theta\) must be a "
                                   r"positive float, got 'abc'"),
    ({"global_attn_every_n_layers": 0, "layer_types": ["full_attention"]},
     "global_attn_every_n_layers must be a positive int, got 0"),
])
def test_a_config_json_error_names_the_file_and_its_key(values, message):
    """Values BertConfig refuses were named by its own fields, without the file; values of another
    type (null, a list) were tracebacks (a review)."""
    with pytest.raises(ValueError, match="^/models/x/config.json: " + message):
        modernbert_layout.modernbert_config(values, "/models/x/config.json")


def test_an_embedding_table_padded_past_the_tokenizer_is_read(tmp_path):
    """ModernBERT-family checkpoints may pad the embedding table past their tokenizer's ids (to
    a multiple of 64): transformers runs one, bertjax refused it everywhere (a review). The
    padded rows are no token's: fill-mask answers as without them. A vocabulary of another size
    than the model's own is still refused."""
    import safetensors.numpy

    import bertjax
    from bertjax.models import tensor_files

    padded = tmp_path / "padded"
    shutil.copytree(os.path.join(HF_DIR, "masked_lm"), padded)
    tensors = tensor_files.read_safetensors(str(padded / "model.safetensors"))
    rows = 384 - tensors["decoder.bias"].shape[0]
    tensors["model.embeddings.tok_embeddings.weight"] = np.concatenate(
        [tensors["model.embeddings.tok_embeddings.weight"], np.zeros((rows, 32), np.float32)])
    tensors["decoder.bias"] = np.concatenate([tensors["decoder.bias"], np.full(rows, 50.0, np.float32)])
    safetensors.numpy.save_file(tensors, str(padded / "model.safetensors"))
    config = json.loads((padded / "config.json").read_text())
    (padded / "config.json").write_text(json.dumps({**config, "vocab_size": 384}))
    texts = ["the [MASK] sat on the mat .", "a [MASK] of [MASK] words"]
    model = bertjax.load_model(str(padded))
    assert model.bert.vocab_size == 384 and model.tokenizer.vocab_size == 320
    # (the padded rows' bias of 50 would win every mask if they were read)
    assert model.fill_mask(texts, top_k=3) == bertjax.load_model(os.path.join(HF_DIR, "masked_lm")).fill_mask(
        texts, top_k=3)
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 320\]"):
        model.fill_mask(texts, top_k=384)
    tokenizer = json.loads((padded / "tokenizer.json").read_text())  # 64 tokens fewer: another vocabulary
    tokenizer["model"]["vocab"] = {t: i for t, i in tokenizer["model"]["vocab"].items() if i < 256}
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["id"] < 256]
    tokenizer["model"]["merges"] = []
    (tmp_path / "small.json").write_text(json.dumps(tokenizer))
    with pytest.raises(ValueError, match=r"small.json is not the vocabulary .* comes with \(.*: 320 tokens, 256 here"):
        bertjax.load_model(str(padded), vocab_path=str(tmp_path / "small.json"))
    # Converted and read back (a review: the conversion still wanted equal sizes; the TF layout
    # holds no modern encoder).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    converted = subprocess.run([sys.executable, os.path.join(root, "launch", "convert_checkpoint.py"),
                                f"--input={padded}", f"--output={tmp_path / 'huggingface'}"],
                               capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert converted.returncode == 0, converted.stderr[-2000:]
    answers = model.fill_mask(texts, top_k=3)
    assert bertjax.load_model(str(tmp_path / "huggingface")).fill_mask(texts, top_k=3) == answers
    guesses = [guess for masks in answers for mask in masks for guess in mask]
    assert all(g["text"] == model.tokenizer.token_text(g["token_id"]) and "\u0120" not in g["text"] for g in guesses)
    # A folder whose own vocabulary no longer fits its table (tokens added, the table resized): the
    # vocabulary that fits is taken, not refused for differing from the folder's own (a review).
    shutil.copy(tmp_path / "small.json", padded / "tokenizer.json")  # 256 tokens: 128 short of the table
    with pytest.raises(ValueError, match="has a vocabulary of 384 tokens but the tokenizer has 256"):
        bertjax.load_model(str(padded))
    fitting = bertjax.load_model(str(padded), vocab_path=os.path.join(HF_DIR, "masked_lm", "tokenizer.json"))
    assert fitting.fill_mask(texts, top_k=3) == model.fill_mask(texts, top_k=3)


def test_a_layer_pattern_given_as_layer_types_alone_is_read():
    """transformers 5 writes a ModernBertConfig(layer_types=[...]) without
    global_attn_every_n_layers: one global layer in 2 was read as one in 3 and refused (a
    review), though bertjax builds it."""
    every_2 = ["full_attention", "sliding_attention"] * 2
    assert modernbert_layout.modernbert_config({"num_hidden_layers": 4, "layer_types": every_2}
                                               ).global_attention_every == 2
    assert modernbert_layout.modernbert_config({"num_hidden_layers": 2, "layer_types": ["full_attention"] * 2}
                                               ).global_attention_every == 1
    with pytest.raises(ValueError, match=r"is not one layer in 2 global, from the first"):
        modernbert_layout.modernbert_config({"num_hidden_layers": 4, "layer_types": [
            "full_attention", "sliding_attention", "full_attention", "full_attention"]})


def test_dropouts_bertjax_cannot_hold_apart_are_warned_of(caplog):
    """Hugging Face's attention_dropout also drops the attention output, which bertjax drops with
    the hidden dropout (mlp_dropout's); inference is the same, further training is not."""
    config = modernbert_layout.modernbert_config({"attention_dropout": 0.1, "mlp_dropout": 0.0})
    assert (config.hidden_dropout_prob, config.attention_probs_dropout_prob) == (0.0, 0.1)
    assert "config.json: dropouts {'embedding_dropout': 0.0, 'mlp_dropout': 0.0, 'attention_dropout': 0.1, " \
           "'classifier_dropout': 0.0} differ" in caplog.text
    caplog.clear()
    modernbert_layout.modernbert_config({})  # ModernBERT's: all 0
    assert not caplog.text
    assert modernbert_layout.modernbert_hf_config(config.replace(hidden_dropout_prob=0.1))["classifier_dropout"] == 0.1


@pytest.mark.parametrize("change, message", [
    (dict(attention_window=7), "attention_window must be even"),
    (dict(position_embedding="alibi"), "position_embedding must be one of"),
    (dict(norm_placement="sandwich"), "norm_placement must be one of"),
    (dict(pooler="max"), "pooler must be one of"),
    (dict(scan_layers=True), "scan_layers needs identical layers"),
    (dict(rope_theta=0), "rope_theta must be a positive number"),
    (dict(global_attention_every=0), "global_attention_every must be a positive int"),
])
def test_the_modern_switches_are_validated(change, message):
    with pytest.raises(ValueError, match=message):
        BertConfig.preset("modernbert-tiny", **change)


def test_an_export_without_a_tokenizer_warns_of_transformers_default_special_ids(tmp_path, caplog):
    """ModernBertConfig's default pad id (50283) is outside a small vocabulary, where torch
    refuses it as the embedding's padding index: given ids are written, their absence warned."""
    import types

    config = BertConfig.preset("modernbert-tiny", vocab_size=50)
    params = {"bert": BertEncoder(config).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]}
    convert.export_huggingface(config, params, str(tmp_path / "bare"))
    assert "no tokenizer says the special tokens' ids" in caplog.text
    assert "pad_token_id" not in json.loads((tmp_path / "bare" / "config.json").read_text())
    caplog.clear()
    ids = modernbert_layout.special_token_ids(types.SimpleNamespace(pad_id=0, cls_id=2, sep_id=3))
    convert.export_huggingface(config, params, str(tmp_path / "ids"), extra_config=ids)
    written = json.loads((tmp_path / "ids" / "config.json").read_text())
    assert "special tokens" not in caplog.text and (written["pad_token_id"], written["bos_token_id"]) == (0, 2)
    layer = params["bert"]["encoder"]["layer_1"]
    layer["attention"]["key"]["kernel"] = jnp.zeros((config.hidden_size, config.hidden_size + 2))
    with pytest.raises(ValueError, match=r"params bert/encoder/layer_1/attention/key/kernel has shape \(\d+, \d+\)"):
        convert.export_huggingface(config, params, str(tmp_path / "wrong"), extra_config=ids)


def test_a_modernbert_without_local_layers_exports_as_one_global_layer_in_one(tmp_path):
    """attention_window=0 (every layer global) was refused as a mixed model (a walkthrough), though
    global_attn_every_n_layers=1 says it; it reads back as the same encoder."""
    config = BertConfig.preset("modernbert-tiny", vocab_size=64, attention_window=0)
    params = jax.tree_util.tree_map(np.asarray, BertEncoder(config).init(
        jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"])
    convert.export_huggingface(config, {"bert": params}, str(tmp_path))
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["global_attn_every_n_layers"] == 1
    back, loaded = convert.load_pretrained(str(tmp_path))
    assert back.attention_window == 0 and all(back.is_global_layer(i) for i in range(back.num_hidden_layers))
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 40)))
    assert np.array_equal(BertEncoder(config).apply({"params": params}, ids)[0],
                          BertEncoder(back).apply({"params": loaded["bert"]}, ids)[0])
    assert modernbert_layout.modernbert_config({"local_attention": 64, "global_attn_every_n_layers": 1}
                                               ).attention_window == 0


def test_a_mixed_model_has_no_hugging_face_layout(tmp_path):
    config = BertConfig.preset("tiny", vocab_size=30, position_embedding="rope")
    params = BertEncoder(config).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    with pytest.raises(ValueError, match="mixes BERT and ModernBERT switches"):
        convert.export_huggingface(config, jax.tree_util.tree_map(np.asarray, params), str(tmp_path))


def test_a_fresh_modern_encoder_initialises_as_modernbert():
    """Every kernel was drawn at 0.02 (a review): ModernBERT draws the layers that write into the
    residual stream, and its heads' dense, at 0.02 / sqrt(2 L) and a task's logits at
    hidden ** -0.5. Truncated at 2 sigma, a draw's std is 0.88 of the stated one. BERT keeps
    0.02 everywhere, as the original."""
    import flax.linen as nn

    truncated = 0.8796  # the std of a normal cut at +-2 sigma
    for preset, out, final in (("modernbert-tiny", 0.02 / np.sqrt(8), 128 ** -0.5), ("tiny", 0.02, 0.02)):
        config = BertConfig.preset(preset, vocab_size=64)
        ids = jnp.ones((2, 16), jnp.int32)
        params = nn.unbox(BertForSequenceClassification(config, 64).init(jax.random.key(0), ids)["params"])
        layer = params["bert"]["encoder"]["layer_1"]
        stds = {name: float(np.std(kernel)) for name, kernel in (
            ("query", layer["attention"]["query"]["kernel"]), ("intermediate", layer["intermediate"]["kernel"]),
            ("attention output", layer["attention"]["output"]["kernel"]), ("output", layer["output"]["kernel"]),
            ("pooler", params["bert"]["pooler"]["kernel"]), ("classifier", params["classifier"]["kernel"]))}
        want = {"query": 0.02, "intermediate": 0.02, "attention output": out, "output": out, "pooler": out,
                "classifier": final}
        for name, std in stds.items():
            assert abs(std / (truncated * want[name]) - 1) < 0.1, (preset, name, std, want[name])

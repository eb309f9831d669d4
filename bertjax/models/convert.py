"""Checkpoint import and export in every layout bertjax reads: Hugging Face BERT (and ModernBERT,
bertjax.models.modernbert_layout), Google's original TF1 release, and bertjax's own checkpoints.

Every BERT variable has one row in `variable_table` (bertjax.models.variable_table, where the
params tree is described) with its Hugging Face and TF names, so import and export share one
mapping.

Strictness: a missing or mis-shaped variable is an error naming it with the expected and
found shapes, and so is an integer tensor (a quantized checkpoint's, which cast to float32
would be no weights). Unexpected variables are an error too (weights are never dropped silently),
except bookkeeping that holds no weights: Hugging Face `position_ids` buffers, and TF
optimizer slots (`adam_m`, `adam_v`), `global_step` and the TF2 object graph. One
exception to "missing is an error": Hugging Face's BertForMaskedLM, BertForTokenClassification
and BertForQuestionAnswering have no pooler, so theirs starts freshly initialised, as Hugging
Face's does (with a warning).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from typing import Any

import numpy as np

from bertjax.models.config import BertConfig, check_config_object
from bertjax.models.modernbert_layout import (export_modernbert, load_modernbert, modern_pooler, modernbert_config,
                                              modernbert_hf_config, modernbert_variable_table)
from bertjax.models.tensor_files import (RUN_DATA, SHARD_INDEX, label_keys, read_weights, trained_length,
                                         write_fast_tokenizer_config, write_huggingface_files, write_tokenizer_config)
from bertjax.models.variable_table import (ARCH_KEYS, gather_params, get_param, is_modern, param_heads,
                                          plain_params, variable_table)
from bertjax.runtime import fileio, workdir_lock

_HF_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
           "gelu_fast": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu"}
# BertConfig switches off the original BERT that neither BERT layout (Hugging Face BertModel,
# Google's TF release) can hold: exported anyway, the weights would load into another model.
_NOT_IN_BERT_LAYOUTS = ("attention_window", "use_bias", "norm_bias", "pooler", "token_transform")
_TF_ACT = {"gelu": "gelu_tanh", "relu": "relu"}  # the original TF "gelu" is the tanh form
_HF_IGNORED = re.compile(r"(^|\.)position_ids$")
_HF_NO_POOLER = ("BertForMaskedLM", "BertForTokenClassification", "BertForQuestionAnswering")
# The Hugging Face BERT classes an export may name in config.json's "architectures".
HF_ARCHITECTURES = ("BertModel", "BertForPreTraining", "BertForNextSentencePrediction",
                    "BertForSequenceClassification", "BertForMultipleChoice", *_HF_NO_POOLER)
_HEADS_OF = {"BertForPreTraining": ("mlm", "nsp"), "BertForMaskedLM": ("mlm",),
             "BertForNextSentencePrediction": ("nsp",), "BertForSequenceClassification": ("classifier",),
             "BertForMultipleChoice": ("classifier",), "BertForTokenClassification": ("classifier",),
             "BertForQuestionAnswering": ("qa_outputs",)}  # the heads each class reads
_TF_IGNORED = re.compile(r"(/adam_[mv]$)|(^global_step$)|(^_CHECKPOINTABLE_OBJECT_GRAPH$)")


# ------------------------------------------------------------------------------------------------
# Configs
# ------------------------------------------------------------------------------------------------

def _config_from_json(values: dict[str, Any], activations: dict[str, str], source: str) -> BertConfig:
    missing = [key for key in ARCH_KEYS if key not in values]
    if missing:
        raise ValueError(f"{source}: missing BERT config keys {missing}")
    act = values.get("hidden_act")
    if not isinstance(act, str) or act not in activations:
        raise ValueError(f"{source}: hidden_act {act!r} is not supported; expected one of {sorted(activations)}")
    return BertConfig.from_dict({**{key: values[key] for key in ARCH_KEYS}, "hidden_act": activations[act],
                                 "layer_norm_eps": values.get("layer_norm_eps", 1e-12)}, source)


def hf_config_to_bert(values: dict[str, Any], source: str = "config.json") -> BertConfig:
    """Hugging Face config.json dict -> BertConfig. Rejects non-BERT variants."""
    check_config_object(values, source)
    if values.get("model_type", "bert") != "bert":
        raise ValueError(f"{source}: model_type {values['model_type']!r} is not 'bert'")
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{source}: position_embedding_type {values['position_embedding_type']!r} "
                         "is not supported; expected 'absolute'")
    if values.get("is_decoder") or values.get("add_cross_attention"):
        raise ValueError(f"{source}: decoder BERTs (is_decoder/add_cross_attention) are not supported")
    return _config_from_json(values, _HF_ACT, source)


def _check_bert_layout(config: BertConfig, export: str) -> None:
    """ValueError naming the switches of `config` (not the modern encoder's layout) that a BERT
    layout cannot hold."""
    original = BertConfig()
    changed = [f"{name}={getattr(config, name)!r}" for name in _NOT_IN_BERT_LAYOUTS
               if getattr(config, name) != getattr(original, name)]
    if changed:
        raise ValueError(f"{export}: {', '.join(changed)}: BERT's checkpoint layout has no such setting (the "
                         "exported model would be another model); keep the checkpoint in bertjax's layout")
    if config.type_vocab_size < 1:
        raise ValueError(f"{export}: type_vocab_size={config.type_vocab_size}: BERT's checkpoint layout holds at "
                         "least one token-type embedding row; keep the checkpoint in bertjax's layout")


def _two_token_type_rows(config: BertConfig, params: dict[str, Any]) -> tuple[BertConfig, dict[str, Any]]:
    """(config, plain params) with a one-row token-type table written as two equal rows.

    bertjax reads every segment id from the table's last row; BERT's other readers index it by
    segment id, so a text pair's second segment (id 1) would fail in torch and read a zero row
    through the original TF code's one-hot. Two equal rows compute what bertjax computes."""
    if config.type_vocab_size != 1:
        return config, params
    embeddings = dict(params["bert"]["embeddings"])
    row = np.asarray(embeddings["token_type_embeddings"]["embedding"])
    embeddings["token_type_embeddings"] = {"embedding": np.concatenate([row, row])}
    return config.replace(type_vocab_size=2), {**params, "bert": {**params["bert"], "embeddings": embeddings}}


def bert_to_hf_config(config: BertConfig) -> dict[str, Any]:
    """BertConfig -> the architecture part of a Hugging Face config.json."""
    act = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}[config.hidden_act]
    return {"model_type": "bert", **{key: getattr(config, key) for key in ARCH_KEYS},
            "hidden_act": act, "layer_norm_eps": config.layer_norm_eps,
            "position_embedding_type": "absolute", "pad_token_id": 0}


# ------------------------------------------------------------------------------------------------
# Hugging Face layout
# ------------------------------------------------------------------------------------------------

def _detect_heads(tensors: dict[str, np.ndarray], prefixes: dict[str, str], classifier: str
                  ) -> tuple[tuple[str, ...], int]:
    """(heads whose name prefix occurs in `tensors`, classifier outputs from its `classifier` bias)."""
    heads = tuple(head for head, prefix in prefixes.items() if any(n.startswith(prefix) for n in tensors))
    num_labels = tensors[classifier].shape[0] if classifier in tensors else 2
    return heads, num_labels


_HF_HEAD_PREFIXES = {"mlm": "cls.predictions.", "nsp": "cls.seq_relationship.", "classifier": "classifier.",
                     "qa_outputs": "qa_outputs."}
# run_classifier.py's head is the bare output_weights/output_bias; run_squad.py's is cls/squad/.
_TF_HEAD_PREFIXES = {"mlm": "cls/predictions/", "nsp": "cls/seq_relationship/", "classifier": "output_",
                     "qa_outputs": "cls/squad/"}


def _hf_name(key: str) -> str:
    """Normalises a Hugging Face key: drops the "bert." prefix, old LayerNorm gamma/beta."""
    key = key.removeprefix("bert.")
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key))


def load_huggingface(path: str) -> tuple[BertConfig, dict[str, Any]]:
    """Reads `path`/config.json + model.safetensors -> (config, params).

    The MLM decoder is tied to the word embeddings: a stored `cls.predictions.decoder.weight`
    must equal them, and `cls.predictions.decoder.bias` must equal `cls.predictions.bias`.
    """
    hf_config = fileio.read_json(fileio.join(path, "config.json"))
    check_config_object(hf_config, fileio.join(path, "config.json"))
    if hf_config.get("model_type") == "modernbert":
        return load_modernbert(path, hf_config)
    config = hf_config_to_bert(hf_config, fileio.join(path, "config.json"))
    file, stored = read_weights(path)
    tensors = {}
    for key, value in stored.items():
        if _HF_IGNORED.search(key):
            continue
        name = _hf_name(key)
        if name in tensors:
            raise ValueError(f"{file}: {key!r} duplicates another stored name of {name!r}")
        tensors[name] = value
    decoder_bias = tensors.pop("cls.predictions.decoder.bias", None)
    if decoder_bias is not None and not np.array_equal(tensors.setdefault("cls.predictions.bias", decoder_bias),
                                                       decoder_bias):
        raise ValueError(f"{file}: 'cls.predictions.decoder.bias' differs from 'cls.predictions.bias'; "
                         "bertjax has one MLM output bias")
    decoder = tensors.pop("cls.predictions.decoder.weight", None)
    if decoder is not None and not np.array_equal(decoder, tensors.get("embeddings.word_embeddings.weight")):
        raise ValueError(f"{file}: 'cls.predictions.decoder.weight' is not tied to the word embeddings; "
                         "bertjax ties the MLM decoder to them")
    pooler = ("pooler.dense.weight", "pooler.dense.bias")
    if not set(pooler) & set(tensors):  # BertFor{MaskedLM,TokenClassification,...}, BertModel(add_pooling_layer=False)
        # Initialised as Hugging Face initialises a missing pooler: a zero one would make a frozen
        # encoder's pooled [CLS] zero for every input, leaving a classifier only its bias. Said
        # where it matters: fine-tuning a frozen encoder whose head reads it (model_source's
        # pooler_trained), not at every load (a tagger's or span QA's predictions never read it).
        h, rng = config.hidden_size, np.random.default_rng(0)
        tensors.update({pooler[0]: rng.normal(0.0, config.initializer_range, (h, h)).astype(np.float32),
                        pooler[1]: np.zeros((h,), np.float32)})
    table = variable_table(config, *_detect_heads(tensors, _HF_HEAD_PREFIXES, "classifier.bias"))
    return config, gather_params(table, tensors, "hf", file)


def export_huggingface(config: BertConfig, params: dict[str, Any], out_dir: str, vocab_path: str | None = None,
                       architecture: str | None = None, do_lower_case: bool | None = None,
                       label_names: list[str] | None = None, extra_config: dict[str, Any] | None = None,
                       pooler_trained: bool = True) -> tuple[str, ...]:
    """Writes `out_dir`/config.json, model.safetensors (and vocab.txt if `vocab_path`, with
    tokenizer_config.json when `do_lower_case` is known: Hugging Face's BertTokenizer
    lower-cases unless told otherwise, so a cased model needs it). Returns the heads written.

    `params`: {"bert": encoder tree, <heads>} or a bare encoder tree; scanned or unrolled.
    Names carry the "bert." prefix when heads are present (like BertFor* models).
    `architecture` overrides the guessed one, e.g. "BertForTokenClassification" or
    "BertForMultipleChoice" (a "classifier" head defaults to BertForSequenceClassification).
    `label_names` (one per classifier output) become config.json's id2label/label2id
    (default LABEL_<i>). `extra_config`: more config.json keys, which transformers keeps and
    ignores (a span-QA run's squad_version, read back by bertjax; RUN_DATA, what using the model
    needs of the run's config.data, its length also the tokenizer's model_max_length).
    `pooler_trained` False (a
    masked-LM-only pre-training run's pooler): a class without a pooler (BertForMaskedLM) is
    written without it, so that a classifier loaded from the folder, by Hugging Face or by
    bertjax, starts from a fresh one and says so, rather than from random weights that look trained.
    """
    params = plain_params(params)
    feature_heads = sorted(set(params) - {"bert"}) if config.feature_based else []
    if architecture in ("BertModel", "ModernBertModel") and feature_heads and "bert" in params:
        # (the class of the encoder alone: a feature-based head has no class to go to)
        logging.warning("export_huggingface: %s does not read the feature-based head(s) %s: left out", architecture,
                        feature_heads)
        params = {"bert": params["bert"]}
    if is_modern(config):
        return export_modernbert(config, params, out_dir, architecture, label_names, vocab_path, do_lower_case,
                                 extra_config)
    _check_bert_layout(config, "export_huggingface")
    tokens = _wordpiece_tokens(vocab_path)  # read before anything is written
    config, params = _two_token_type_rows(config, plain_params(params))
    heads, num_labels = param_heads(params, config, "export_huggingface")
    architecture = architecture or _guess_architecture(heads)
    if architecture not in HF_ARCHITECTURES:  # a ModernBERT class would read these names as another model
        raise ValueError(f"export_huggingface: architecture {architecture!r} is not a BERT class; expected one of "
                         f"{', '.join(HF_ARCHITECTURES)}")
    lacking = [head for head in _HEADS_OF.get(architecture, ()) if head not in heads]
    if lacking:
        raise ValueError(f"export_huggingface: {architecture} needs the head(s) {lacking}, which the checkpoint does "
                         f"not have (it has {list(heads) or 'none'}); name another architecture "
                         "(--architecture; Python: architecture=)")
    unread = [head for head in heads if head not in _HEADS_OF.get(architecture, ())]
    if unread:  # (written, a classifier under BertModel read back as a task its class does not say, unnamed labels)
        logging.warning("export_huggingface: %s does not read the head(s) %s: left out", architecture, unread)
        heads = tuple(head for head in heads if head not in unread)
    prefix = "bert." if heads else ""
    omit_pooler = not pooler_trained and architecture in _HF_NO_POOLER
    if not pooler_trained and not omit_pooler:
        logging.warning("export_huggingface: the pooler never trained; %s holds one, so it is written and a "
                        "classifier starts from its random weights", architecture)
    tensors = {}
    for var in variable_table(config, heads, num_labels):
        if omit_pooler and var.path[:2] == ("bert", "pooler"):
            continue
        value = np.asarray(get_param(params, var.path, "export_huggingface"), dtype=np.float32)
        if value.shape != var.shape:
            raise ValueError(f"export_huggingface: params {'/'.join(var.path)} has shape {value.shape}, "
                             f"expected {var.shape}")
        name = var.hf if var.path[0] != "bert" else prefix + var.hf
        tensors[name] = np.ascontiguousarray(value.T if var.hf_transposed else value)
    if architecture == "BertForMultipleChoice" and num_labels != 1:  # its classifier scores each choice
        raise ValueError(f"export_huggingface: BertForMultipleChoice has a classifier of one output (a score per "
                         f"choice); this one has {num_labels}")
    hf_config = {**bert_to_hf_config(config), **(extra_config or {})}
    hf_config["architectures"] = [architecture]
    # The tokenizer written beside it says where padding is (0 in BERT's vocabularies, not in all).
    whole_tokenizer = None  # a BPE or Unigram tokenizer.json, copied whole below
    if tokens is not None and "[PAD]" in tokens:
        hf_config["pad_token_id"] = len(tokens) - 1 - tokens[::-1].index("[PAD]")  # a repeated token's last id
    elif tokens is None and vocab_path:
        from bertjax import tokenization

        whole_tokenizer = tokenization.load_tokenizer("huggingface", vocab_path)
        hf_config["pad_token_id"] = whole_tokenizer.pad_id
    write_huggingface_files(out_dir, tensors, hf_config, num_labels if "classifier" in heads else 0, label_names)
    if tokens is not None:
        from bertjax import tokenization

        tokenization.write_vocab(tokens, fileio.join(out_dir, "vocab.txt"))
        if do_lower_case is None and vocab_path.endswith(".json"):  # its BertNormalizer says
            do_lower_case = tokenization.wordpiece_casing(vocab_path)
        if do_lower_case is not None:
            write_tokenizer_config(out_dir, do_lower_case,
                                   trained_length(hf_config) or config.max_position_embeddings)
    elif whole_tokenizer is not None:  # a BPE or Unigram tokenizer.json holds its own normalisation
        from bertjax import tokenization

        fileio.write_bytes(fileio.join(out_dir, "tokenizer.json"),
                           tokenization.hf_tokenizer_json(whole_tokenizer).encode("utf-8"))
        write_fast_tokenizer_config(out_dir, whole_tokenizer, trained_length(hf_config) or
                                    config.max_position_embeddings)
    return heads


def _wordpiece_tokens(vocab_path: str | None) -> list[str] | None:
    """The WordPiece vocabulary at `vocab_path` (a vocab.txt or tokenizer.json), None without one
    or for a tokenizer.json of another kind (BPE, Unigram); ValueError for a bad file."""
    if not vocab_path or (vocab_path.endswith(".json") and not _is_wordpiece_json(vocab_path)):
        return None
    from bertjax import tokenization

    return tokenization.read_vocab(vocab_path)


def vocabulary_kind(path: str) -> str:
    """The tokenizer kind a vocabulary file given on its own (the launchers' --vocab_file) is read
    as: a SentencePiece model (.model), a tokenizer.json that is not BERT's plain WordPiece
    ("huggingface": run as written, as `checkpoint_vocabulary` reads one beside a checkpoint),
    else "wordpiece" (a vocab.txt, or a tokenizer.json of BERT's WordPiece)."""
    if path.endswith(".model"):
        return "sentencepiece"
    if path.endswith(".json") and not _is_wordpiece_json(path):
        return "huggingface"
    return "wordpiece"


def _is_wordpiece_json(path: str) -> bool:
    """Whether the tokenizer.json at `path` is BERT's WordPiece (else BPE, Unigram, or a WordPiece
    that normalises or splits otherwise: used whole, as written)."""
    from bertjax import tokenization

    return ((fileio.read_json(path).get("model") or {}).get("type") == "WordPiece"
            and not tokenization.bert_wordpiece_differences(path))


def _guess_architecture(heads: tuple[str, ...]) -> str:
    if "mlm" in heads and "nsp" in heads:
        return "BertForPreTraining"
    for head, arch in (("mlm", "BertForMaskedLM"), ("nsp", "BertForNextSentencePrediction"),
                       ("qa_outputs", "BertForQuestionAnswering"), ("classifier", "BertForSequenceClassification")):
        if head in heads:
            return arch
    return "BertModel"


# ------------------------------------------------------------------------------------------------
# Google's original TF1 release
# ------------------------------------------------------------------------------------------------

# Keys bertjax adds to an exported bert_config.json for what the original code cannot say (its
# BertConfig.from_json_file sets them as attributes nobody reads): exact GELU, the casing.
_TF_EXACT_GELU, _TF_CASING = "bertjax_exact_gelu", "do_lower_case"
TF_POOLER_UNTRAINED = "bertjax_pooler_untrained"
# A fine-tuned model's task in bert_config.json, as a Hugging Face config.json says it
# (architectures, id2label, ...): the TF layout has no place of its own for it.
TF_TASK = "bertjax_task"


def tf_config_to_bert(values: dict[str, Any], source: str = "bert_config.json") -> BertConfig:
    """Original bert_config.json dict -> BertConfig ("gelu" there is the tanh form, unless a
    bertjax export says the model used exact GELU)."""
    check_config_object(values, source)
    config = _config_from_json(values, _TF_ACT, source)
    return config.replace(hidden_act="gelu") if values.get(_TF_EXACT_GELU) else config


def tf_checkpoint_prefix(path: str) -> str | None:
    """`path`/bert_model.ckpt if its index exists, else the latest checkpoint named in `path`/checkpoint
    (in `path` itself when it is there: a copied folder's file may name the original's), else
    the one checkpoint in `path` (a run_pretraining.py step copied without its `checkpoint`
    file), else None. A release's bert_model.ckpt beside other checkpoints is refused."""
    prefix = fileio.join(path, "bert_model.ckpt")
    if fileio.exists(prefix + ".index"):
        # Google's fine-tuning scripts want the release's bert_config.json and vocab.txt in
        # their output_dir: a copy of the whole release puts its weights beside the run's own,
        # and either could be the one meant.
        others = sorted(name for name in fileio.listdir(path)
                        if name.endswith(".index") and name != "bert_model.ckpt.index")
        if others:
            raise ValueError(f"{path} holds a release's bert_model.ckpt and {len(others)} other TF checkpoint"
                             f"{'s' * (len(others) > 1)} ({', '.join(others[:3])}{', ...' * (len(others) > 3)}; "
                             "a fine-tuning run's?): which to read is not clear; give a folder with the one "
                             "checkpoint meant, its bert_config.json and vocab.txt beside it")
        return prefix
    if fileio.exists(fileio.join(path, "checkpoint")):
        from bertjax.runtime.tf_cpu import tf

        state = tf.train.get_checkpoint_state(path)
        if state is None or not state.model_checkpoint_path:
            raise ValueError(f"{fileio.join(path, 'checkpoint')}: names no checkpoint (expected TF's "
                             "model_checkpoint_path: \"...\")")
        named = state.model_checkpoint_path
        # An Estimator writes absolute paths: a copied folder's file still names the original's.
        local = fileio.join(path, os.path.basename(named))
        if fileio.exists(local + ".index"):
            return local
        _check_not_cut_off(local)  # else the original's weights, read without a word
        if fileio.exists(named + ".index"):
            _say_read_from_outside(path, named)
            return named
        raise ValueError(f"{fileio.join(path, 'checkpoint')} names {named}, whose .index is neither there nor in "
                         f"{path}")
    names = fileio.listdir(path)
    indexes = [name for name in names if name.endswith(".index")]
    data = next((name for name in names if ".data-" in name), None)
    if data and not indexes:  # (a release copied without its bert_model.ckpt.index: "no TF checkpoint" said less)
        _check_not_cut_off(fileio.join(path, data.split(".data-")[0]))
    if len(indexes) > 1:
        raise ValueError(f"{path} holds {len(indexes)} TF checkpoints ({', '.join(sorted(indexes)[:4])}) and no "
                         "'checkpoint' file naming one: give a folder with one")
    return fileio.join(path, indexes[0].removesuffix(".index")) if indexes else None


def _check_not_cut_off(prefix: str) -> None:
    """ValueError when a TF checkpoint's .data files are at `prefix` without its .index."""
    if fileio.glob(fileio.escape(prefix) + ".data-*"):
        raise ValueError(f"{prefix}.index is missing beside its .data file(s): an incomplete copy? Copy the "
                         "checkpoint's .index too")


@functools.lru_cache(maxsize=None)
def _say_read_from_outside(path: str, named: str) -> None:
    """Warns, once a process (a load resolves the prefix three times), that `path`'s `checkpoint`
    file names weights outside it."""
    logging.warning("%s names %s, outside %s: its weights are read from there", fileio.join(path, "checkpoint"),
                    named, path)


def tf_task_config(path: str) -> dict[str, Any]:
    """The task a TF checkpoint's head says, as a Hugging Face config.json says it (which
    model_source reads): bertjax's own export's, recorded (TF_TASK; none from an export written
    before it was, whose `output_weights` may be any head, unless Google's code fine-tuned it
    since); else run_classifier.py's
    `output_weights` [labels, hidden], a BertForSequenceClassification whose labels are named
    LABEL_<i> (the checkpoint names none; one output: a regression), or run_squad.py's
    `cls/squad/`, a BertForQuestionAnswering; {} for a pre-trained checkpoint."""
    tf_config = fileio.read_json(fileio.join(path, "bert_config.json"))
    if TF_TASK in tf_config:
        return tf_config[TF_TASK]
    prefix = tf_checkpoint_prefix(path)
    if prefix is None:
        return {}
    from bertjax.runtime.tf_cpu import tf

    shapes = tf.compat.v1.train.NewCheckpointReader(prefix).get_variable_to_shape_map()
    # bertjax's own export from before TF_TASK (its layer_norm_eps; no trainer's global_step):
    # any head of it is output_weights. Google's code fine-tuning an export saves its step.
    if "layer_norm_eps" in tf_config and "global_step" not in shapes:
        return {}
    if "output_weights" in shapes:
        architecture = "BertForSequenceClassification"
        return {"architectures": [architecture], **label_keys(architecture, shapes["output_weights"][0], None)}
    if any(name.startswith(_TF_HEAD_PREFIXES["qa_outputs"]) for name in shapes):
        return {"architectures": ["BertForQuestionAnswering"]}
    return {}


def load_tf_checkpoint(path: str) -> tuple[BertConfig, dict[str, Any]]:
    """Reads `path`/bert_config.json + a TF1 checkpoint (original variable names) -> (config, params)."""
    from bertjax.runtime.tf_cpu import tf

    config = tf_config_to_bert(fileio.read_json(fileio.join(path, "bert_config.json")),
                               fileio.join(path, "bert_config.json"))
    prefix = tf_checkpoint_prefix(path)
    if prefix is None:
        raise ValueError(f"{path}: no TF checkpoint (looked for bert_model.ckpt.index and a 'checkpoint' file)")
    try:  # a copy cut short fails in TensorFlow's reader with its own words, naming no file
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)  # the prefix as given (no directory guess)
        tensors = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
                   if not _TF_IGNORED.search(name)}
    except (IndexError, tf.errors.OpError) as e:
        raise ValueError(f"{prefix}: the TF checkpoint does not read whole (cut off or corrupt: copy it again; "
                         f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
    table = variable_table(config, *_detect_heads(tensors, _TF_HEAD_PREFIXES, "output_bias"))
    return config, gather_params(table, tensors, "tf", prefix)


def export_tf_checkpoint(config: BertConfig, params: dict[str, Any], out_dir: str,
                         vocab_path: str | None = None, do_lower_case: bool | None = None,
                         pooler_trained: bool = True, run_data: dict[str, Any] | None = None,
                         architecture: str | None = None, label_names: list[str] | None = None,
                         task_keys: dict[str, Any] | None = None) -> tuple[str, ...]:
    """Writes `out_dir`/bert_config.json + bert_model.ckpt.* with the original TF1 names;
    returns the heads written. The original layout has no place for the casing (Google's
    releases say it in the folder's name, cased_L-... or uncased_L-..., which bertjax reads):
    `do_lower_case` goes into bert_config.json, which bertjax reads back.

    The original code's "gelu" is the tanh approximation, so an exact-GELU model is
    written as "gelu" with a warning (outputs then differ slightly in that code) and
    bertjax_exact_gelu; likewise a LayerNorm epsilon other than its hard-coded 1e-12: both
    in bert_config.json, which bertjax reads back. The layout always holds a pooler: one that
    never trained (`pooler_trained` False: a masked-LM-only run's) is written with a warning and
    bertjax_pooler_untrained, so that bertjax reading the folder says so again; `run_data` (what
    using the model needs of a bertjax run's config.data) goes in as RUN_DATA, read back too.
    A task head's meaning (`architecture`, `label_names`, `task_keys`: as export_huggingface's,
    e.g. squad_version) goes in as TF_TASK, which `tf_task_config` reads back.
    """
    missing = "the modern encoder (ModernBERT)" if is_modern(config) else (
        f"hidden_act {config.hidden_act!r}" if config.hidden_act not in ("gelu", "gelu_tanh", "relu") else "")
    if missing:
        advice = "export to Hugging Face"
        if is_modern(config):
            try:
                modernbert_hf_config(config)
            except ValueError as e:  # a mix of switches: Hugging Face refuses it too (a walkthrough)
                advice = f"keep it in bertjax's layout; {e}"
        raise ValueError(f"export_tf_checkpoint: the original TF code cannot run {missing}; {advice}")
    _check_bert_layout(config, "export_tf_checkpoint")
    config, params = _two_token_type_rows(config, plain_params(params))
    values = {}
    heads, num_labels = param_heads(params, config, "export_tf_checkpoint")
    for var in variable_table(config, heads, num_labels):
        value = np.asarray(get_param(params, var.path, "export_tf_checkpoint"), dtype=np.float32)
        if value.shape != var.shape:
            raise ValueError(f"export_tf_checkpoint: params {'/'.join(var.path)} has shape {value.shape}, "
                             f"expected {var.shape}")
        values[var.tf] = np.ascontiguousarray(value.T if var.tf_transposed else value)
    if config.hidden_act == "gelu":
        logging.warning("export_tf_checkpoint: the model uses exact GELU; the original TF code's 'gelu' "
                        "is the tanh approximation")
    if config.layer_norm_eps != 1e-12:
        logging.warning("export_tf_checkpoint: the model's LayerNorm epsilon is %g; the original TF code "
                        "hard-codes 1e-12 (bert_config.json's layer_norm_eps is read by bertjax, not by it)",
                        config.layer_norm_eps)
    tf_config = {key: getattr(config, key) for key in ARCH_KEYS}
    tf_config["hidden_act"] = {"gelu": "gelu", "gelu_tanh": "gelu", "relu": "relu"}[config.hidden_act]
    tf_config["layer_norm_eps"] = config.layer_norm_eps  # the original code hard-codes 1e-12
    if config.hidden_act == "gelu":
        tf_config[_TF_EXACT_GELU] = True
    if do_lower_case is not None:
        tf_config[_TF_CASING] = do_lower_case
    if not pooler_trained:
        logging.warning("export_tf_checkpoint: the pooler never trained (or the model was saved without one); the "
                        "TF layout holds one, so it is written and a classifier reading it starts from its random "
                        "weights")
        tf_config[TF_POOLER_UNTRAINED] = True
    if run_data:
        tf_config[RUN_DATA] = run_data
    if "classifier" in heads or "qa_outputs" in heads:
        architecture = architecture or _guess_architecture(heads)
        tf_config[TF_TASK] = {"architectures": [architecture], **(task_keys or {}),
                              **label_keys(architecture, num_labels if "classifier" in heads else 0, label_names)}
    tokens = _wordpiece_tokens(vocab_path)  # read before anything is written
    if vocab_path and tokens is None:
        raise ValueError(f"export_tf_checkpoint: {vocab_path} is not a WordPiece vocabulary, and the TF layout "
                         "holds a vocab.txt only; write the huggingface layout (which keeps a tokenizer.json)")
    fileio.makedirs(out_dir)
    write_tf1_checkpoint(values, fileio.join(out_dir, "bert_model.ckpt"))
    with fileio.open_file(fileio.join(out_dir, "bert_config.json"), "w") as f:  # after the weights: a failed
        json.dump(tf_config, f, indent=2, sort_keys=True)                     # write is no checkpoint
    if tokens is not None:
        from bertjax import tokenization

        tokenization.write_vocab(tokens, fileio.join(out_dir, "vocab.txt"))
    return heads


def write_tf1_checkpoint(values: dict[str, np.ndarray], prefix: str) -> None:
    """Saves {TF variable name: array} as a TF1 checkpoint at `prefix` (graph-mode Saver)."""
    from bertjax.runtime import tf_cpu
    from bertjax.runtime.tf_cpu import tf

    with tf.Graph().as_default():
        # Values fed to placeholders, not held as constants: a graph is limited to 2 GB, which a
        # model of ~500M parameters passes.
        fed = {name: tf.compat.v1.placeholder(tf.as_dtype(value.dtype), value.shape) for name, value in values.items()}
        variables = [tf.compat.v1.Variable(fed[name], name=name) for name in values]
        # Relative names in the `checkpoint` file: a copied folder reads its own files, never the original's.
        saver = tf.compat.v1.train.Saver(variables, save_relative_paths=True)
        with tf.compat.v1.Session() as session:
            session.run([variable.initializer for variable in variables],
                        feed_dict={fed[name]: value for name, value in values.items()})
            try:
                saver.save(session, prefix, write_meta_graph=False)
            except tf.errors.OpError as e:  # a full disk's, as fileio's OSError (write_folder_whole names it)
                raise tf_cpu.disk_error(e, os.path.dirname(prefix)) or e from None


# ------------------------------------------------------------------------------------------------
# bertjax's own checkpoints (bertjax.checkpointing)
# ------------------------------------------------------------------------------------------------

def load_bertjax_checkpoint(path: str) -> tuple[BertConfig, dict[str, Any]]:
    """A bertjax checkpoint (a step folder, or a run's directory: its newest step) -> (config, params).

    The BertConfig is the run config's `model` section saved with it (the trainer stores
    it fully resolved), with scan_layers off, since the returned params are unrolled, and
    float32 products (matmul_precision "default"): bfloat16 products on a CPU with AMX are how
    that run trained, not a property of the model.
    """
    from bertjax import checkpointing

    meta, params = checkpointing.load_params(path)
    params = plain_params(params)
    params = {key: _to_numpy(value) for key, value in params.items()}
    config = bertjax_config(meta, path).replace(matmul_precision="default")
    heads, num_labels = param_heads(params, config)
    encoder = encoder_shapes(config)
    found = _shapes(params["bert"])
    problems = ([f"{'/'.join(name)} has shape {found[name]}, expected {shape}" for name, shape in encoder.items()
                 if name in found and found[name] != shape]
                + [f"{'/'.join(name)} is missing" for name in encoder if name not in found]
                + [f"{'/'.join(name)} is not part of this encoder" for name in found if name not in encoder])
    if problems:
        raise ValueError(f"{path}: the encoder's params do not match the saved model config: "
                         + "; ".join(problems[:4]) + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""))
    # The heads: by the checkpoint layout whose encoder is this one (a config with only some of
    # the modern switches has neither layout; its heads are checked when the model applies them).
    if is_modern(config):
        table = modernbert_variable_table(config, tuple(h for h in heads if h in ("mlm", "classifier")), num_labels)
        table += [] if "classifier" in heads else modern_pooler(config)
    else:
        table = variable_table(config, heads, num_labels)
    if {var.path[1:]: var.shape for var in table if var.path[0] == "bert"} == encoder:
        for var in (var for var in table if var.path[0] != "bert"):  # (the encoder is checked above)
            shape = get_param(params, var.path, path).shape
            if shape != var.shape:
                raise ValueError(f"{path}: params {'/'.join(var.path)} has shape {shape}, expected {var.shape} "
                                 f"for the saved model config")
    return config, params


def encoder_shapes(config: BertConfig) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Every parameter of `config`'s encoder (unrolled layers, pooler included): path -> shape,
    from an abstract initialisation (nothing is computed)."""
    import jax
    import jax.numpy as jnp

    from bertjax.models.bert import BertEncoder

    # The attention's implementation has no parameters; the default one traces anywhere.
    encoder = BertEncoder(config.replace(scan_layers=False, attention_impl=BertConfig().attention_impl))
    ids = jnp.zeros((1, 8), jnp.int32)
    abstract = jax.eval_shape(lambda: encoder.init(jax.random.PRNGKey(0), ids))
    return _shapes(abstract["params"])  # (unboxing would apply the sharding rules of a mesh in use)


def _shapes(tree: Any) -> dict[tuple[str, ...], tuple[int, ...]]:
    """{path of names: shape} of a params tree (a partitioning box adds no name)."""
    import jax

    return {tuple(entry.key for entry in path if isinstance(entry, jax.tree_util.DictKey)): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def _to_numpy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _to_numpy(value) for key, value in tree.items()}
    return np.asarray(tree, dtype=np.float32)


# ------------------------------------------------------------------------------------------------
# Any layout
# ------------------------------------------------------------------------------------------------

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # "bert-base-uncased", "answerdotai/ModernBERT-base"
_LAYOUTS = """  Hugging Face: config.json + model.safetensors (or its shards' model.safetensors.index.json);
  Google TF release: bert_config.json + bert_model.ckpt.index (or a 'checkpoint' file);
  bertjax: a checkpoint step folder (state/ + meta/), a run's checkpoint directory, or the run's workdir"""


def _steps_beside(path: str) -> list[int]:
    """The steps of the bertjax checkpoint directory `path` would be a step folder of, if any."""
    from bertjax import checkpointing

    folder = fileio.parent(path)
    if not (os.path.basename(path.rstrip("/")).isdigit() and checkpointing.is_bertjax_checkpoint(folder)):
        return []
    return sorted(int(name) for name in fileio.listdir(folder) if name.isdigit())


def _tensor_layout(files: set[str]) -> str | None:
    """"huggingface" or "tf" when a folder's file names are that layout's weights and config."""
    if "config.json" in files and files & {"model.safetensors", SHARD_INDEX}:
        return "huggingface"
    # (.data files alone: a copy that lost its .index, which tf_checkpoint_prefix names)
    if "bert_config.json" in files and any(name == "checkpoint" or name.endswith(".index") or ".data-" in name
                                           for name in files):
        return "tf"
    return None


def _is_checkpoint(directory: str) -> bool:
    """Whether `directory` is a Hugging Face, TF or bertjax step folder (its names only: no run's
    state is read, nothing warned of)."""
    from bertjax import checkpointing

    return bool(_tensor_layout(set(fileio.listdir(directory)))) or checkpointing.is_bertjax_checkpoint(directory)


def checkpoint_layout(path: str) -> tuple[str, str]:
    """(layout, directory to read) of a checkpoint path, local or gs://.

    layout: "huggingface", "tf" or "bertjax"; for a bertjax run's workdir the directory is
    its `best/` (a fine-tuning run's result), else its `checkpoints/`. FileNotFoundError listing the layouts otherwise.
    """
    path = os.fspath(path)
    if not fileio.isdir(path):
        if fileio.exists(path + ".index"):  # Google's README's $BERT_BASE_DIR/bert_model.ckpt
            raise FileNotFoundError(f"{path!r} is a TF checkpoint's prefix; give the folder that holds it and its "
                                    f"bert_config.json: {fileio.parent(path)}")
        what = "is a file, not a directory" if fileio.exists(path) else "does not exist"
        if fileio.exists(path) and _is_checkpoint(fileio.parent(path)):  # one of its files, named itself
            # (a walkthrough gave model.safetensors, config.json and bert_model.ckpt.index)
            raise FileNotFoundError(f"{path!r} is one of a checkpoint's files; give its folder: {fileio.parent(path)}")
        steps = _steps_beside(path)
        if steps:  # a step that keep-last-N deleted, or a typo
            raise FileNotFoundError(f"{path!r} {what}; the steps saved in {fileio.parent(path)} are "
                                    f"{', '.join(map(str, steps))} (older ones are deleted: config.checkpoint.keep)")
        hub = ("" if fileio.exists(path) or not _HUB_NAME.fullmatch(path) else
               f"\n(if {path!r} is a Hugging Face Hub name: bertjax reads folders and downloads nothing; fetch it "
               f"where the network is, e.g. `huggingface-cli download {path} --local-dir DIR`, and give DIR)")
        raise FileNotFoundError(f"{path!r} {what}; expected a checkpoint directory:\n{_LAYOUTS}{hub}")
    files = set(fileio.listdir(path))
    if layout := _tensor_layout(files):
        return layout, path
    from bertjax import checkpointing

    # A fine-tuning workdir's result is best/ (checkpoints/ is its latest training state, and
    # may be gone: the optimizer state is 3x the weights); a pre-training workdir has no best/.
    for candidate in (path, fileio.join(path, "best"), fileio.join(path, "checkpoints")):
        if checkpointing.is_bertjax_checkpoint(candidate):
            if candidate != path:
                _check_fine_tuning_ended(path, candidate)
            return "bertjax", candidate
    if "sweep_results.json" in files:  # (bertjax.sweep.RESULTS_FILE)
        raise FileNotFoundError(_sweep_workdir(path))
    saved_model = [name for name in sorted(files) if name == "saved_model.pb"
                   or fileio.exists(fileio.join(path, name, "saved_model.pb"))]  # (TF Serving's version folders)
    if saved_model:
        raise FileNotFoundError(f"{path!r} is a TensorFlow SavedModel ({fileio.join(path, saved_model[0])}): serve it "
                                "(TensorFlow Serving, tf.saved_model.load; docs/using-a-model.md); bertjax loads the "
                                "run it was exported from")
    if files & {"checkpoints", "best", "metrics.jsonl", workdir_lock.LOCK_NAME}:  # a bertjax workdir, no weights yet
        raise FileNotFoundError(
            f"{path!r} is a bertjax run with no saved weights yet: neither best/ (a fine-tuning run writes it at "
            f"its first evaluation and at its end) nor a complete step in checkpoints/ (written every "
            f"config.checkpoint.every steps); wait for one, or give a finished run")
    hint = ""
    if any(name == "checkpoint" or name.endswith(".index") for name in files) and "bert_config.json" not in files:
        # (Google's run_classifier.py and run_squad.py write their output_dir so: a walkthrough)
        hint = ("\na TensorFlow checkpoint without bert_config.json (a fine-tuning output_dir of Google's scripts "
                "holds none): copy the bert_config.json and vocab.txt of the model it started from beside it")
    if "pytorch_model.bin" in files:
        # (the folder as given, where it pastes into the shell's double quotes as it is)
        folder = repr(path) if not (fileio.is_remote(path) or set(path) & set("'\"$`\\")) else "'DIR'"
        hint = ("\npytorch_model.bin needs PyTorch to read; convert it once, every tensor under its own name "
                "(AutoModel would drop the task head): python -c \"import torch, safetensors.torch as st; "
                f"d = {folder}; w = torch.load(d + '/pytorch_model.bin', map_location='cpu', weights_only=True); "
                "st.save_file({k: v.clone().contiguous() for k, v in w.items()}, d + '/model.safetensors', "
                "metadata={'format': 'pt'})\"")
    raise FileNotFoundError(f"{path!r} matches no known checkpoint layout; looked for:\n"
                            f"{_LAYOUTS};\nfound: {sorted(files)}{hint}")


def _sweep_workdir(path: str) -> str:
    """Why a sweep's workdir is no model, and which of its runs to give instead: each run is a
    workdir of its own, and which is best is the sweep's table, read when it was written."""
    rows = fileio.read_json(fileio.join(path, "sweep_results.json"))  # ranked, best first
    best = next((row for row in rows if "error" not in row and row.get("best_step") is not None), None)
    named = ("no run of it has finished yet" if best is None else
             f"its best so far is {fileio.join(path, 'sweep', best['run'])}")
    return (f"{path!r} is a sweep's workdir, not a model: each of its runs is a fine-tuning workdir in "
            f"{fileio.join(path, 'sweep')}/<run>, ranked in sweep_results.json; {named}")


def _check_fine_tuning_ended(workdir: str, directory: str) -> None:
    """A fine-tuning workdir read through its result (`directory`: best/, or checkpoints/ where
    best/ is empty) before its run reached its last step: checkpoints/ alone are a run stopped
    before its first evaluation, weights half-trained and never scored (ValueError: given as
    WORKDIR/checkpoints they load); best/ holds the best evaluation so far (warned)."""
    from bertjax import checkpointing

    checkpoints = fileio.join(workdir, "checkpoints")
    if not checkpointing.is_bertjax_checkpoint(checkpoints):  # (a finished run may drop its training state)
        return
    meta = checkpointing.read_meta(checkpoints)
    run = meta.get("config") or {}
    step, steps = meta.get("step"), (run.get("train") or {}).get("num_steps")
    if not run.get("task") or not isinstance(step, int) or not isinstance(steps, int) or step >= steps:
        return  # pre-training (its result is checkpoints/), or a run that ended
    running = workdir_lock.holder(workdir)  # (a run read while it trains: not one to launch again)
    state = (f"still training (by {running}; step {step} of {steps} saved last)" if running else
             f"stopped at step {step} of {steps}")
    if directory == checkpoints:
        then = "wait for its first evaluation" if running else "run its command again to finish it"
        raise ValueError(f"{workdir} is a fine-tuning run {state}, before its first evaluation (best/ is empty): "
                         f"{then}, or give {checkpoints} to use the weights of step {step}")
    logging.warning("%s is a fine-tuning run %s: %s holds its best evaluation so far (step %s)",
                    workdir, state, directory, checkpointing.read_meta(directory).get("step"))


def pretrained_config(path: str) -> BertConfig:
    """The BertConfig of a checkpoint in any layout, read without loading its weights."""
    layout, directory = checkpoint_layout(path)
    if layout == "huggingface":
        config_path = fileio.join(directory, "config.json")
        values = fileio.read_json(config_path)
        check_config_object(values, config_path)
        if values.get("model_type") == "modernbert":
            return modernbert_config(values, config_path)
        return hf_config_to_bert(values, config_path)
    if layout == "tf":
        return tf_config_to_bert(fileio.read_json(fileio.join(directory, "bert_config.json")),
                                 fileio.join(directory, "bert_config.json"))
    from bertjax import checkpointing

    return bertjax_config(checkpointing.read_meta(directory), directory)


def bertjax_config(meta: dict, path: str) -> BertConfig:
    """The BertConfig saved with a bertjax checkpoint (the run config's resolved model section),
    with scan_layers off, since loaded params are unrolled."""
    model = (meta.get("config") or {}).get("model")
    if not isinstance(model, dict):
        raise ValueError(f"{path}: the run config saved with the checkpoint has no model section")
    return BertConfig.from_dict({**model, "scan_layers": False}, source=f"{path} (saved model config)")


def load_pretrained(path: str) -> tuple[BertConfig, dict[str, Any]]:
    """A checkpoint in any supported layout (see _LAYOUTS), local or gs:// -> (BertConfig, params).

    params: {"bert": encoder tree, <heads present>}, numpy float32, unrolled layout.
    """
    layout, directory = checkpoint_layout(path)
    if layout == "huggingface":
        return load_huggingface(directory)
    if layout == "tf":
        return load_tf_checkpoint(directory)
    return load_bertjax_checkpoint(directory)


def release_casing(name: str) -> bool | None:
    """Whether a Google release folder's name says uncased (True) or cased (False), as the
    original's validate_case_matches_checkpoint reads them: uncased_L-..., cased_L-...,
    multi_cased_L-..., wwm_uncased_L-...; multilingual_L-... and chinese_L-... are uncased.
    None: the name does not say."""
    found = re.match(r"^(?:\w+_)?(un)?cased_L-", name)
    if found:
        return bool(found.group(1))
    return True if re.match(r"^(multilingual|chinese)_L-", name) else None


# Hugging Face tokenizer classes that split as BERT's BasicTokenizer + WordPiece (the generic
# fast class reads tokenizer.json, whose normaliser and pre-tokenizer are checked apart).
_BERT_WORDPIECE_CLASSES = tuple(f"{name}Tokenizer{fast}" for name in ("Bert", "DistilBert", "Electra", "MobileBert")
                                for fast in ("", "Fast")) + ("PreTrainedTokenizerFast",)


def _wordpiece_settings_problem(settings: dict[str, Any], path: str) -> str | None:
    """What makes a tokenizer_config.json's BertTokenizer settings ones bertjax's WordPiece does
    not reproduce (None: nothing): it strips accents exactly when it lower-cases (Hugging Face's
    strip_accents None), puts CJK characters apart (tokenize_chinese_chars) and splits words
    and punctuation first (do_basic_tokenize)."""
    tokenizer_class = settings.get("tokenizer_class")
    if tokenizer_class is not None and tokenizer_class not in _BERT_WORDPIECE_CLASSES:
        return (f"{path}: tokenizer_class {tokenizer_class!r} is not BERT's WordPiece tokenizer "
                f"({', '.join(_BERT_WORDPIECE_CLASSES)}), the one bertjax reproduces: the ids would differ "
                "from the model's")
    lower = settings.get("do_lower_case", True)  # BertTokenizer's default
    unsupported = [f"{key}={settings[key]!r}" for key, wanted in (("strip_accents", lower),
                                                                  ("tokenize_chinese_chars", True),
                                                                  ("do_basic_tokenize", True))
                   if settings.get(key) not in (None, wanted)]
    if unsupported:
        return (f"{path}: {', '.join(unsupported)} (do_lower_case={lower}), which bertjax's WordPiece does "
                "not reproduce (the ids would differ from the model's)")
    return None


# The SentencePiece model a bertjax export writes beside the weights (neither layout's BERT
# tokenizer reads one; bertjax reads it back).
SENTENCEPIECE_FILE = "spm.model"


def checkpoint_vocabulary(path: str) -> dict[str, Any] | None:
    """The tokenizer that comes with a checkpoint: {"kind", "path", "do_lower_case"} (and
    "refused": why bertjax cannot reproduce it, for a WordPiece vocabulary whose
    tokenizer_config.json asks for another algorithm; its weights still load), or None.

    Hugging Face and Google releases: their vocab.txt (WordPiece; a Hugging Face directory
    without one: the WordPiece vocabulary in its tokenizer.json, or any other tokenizer.json
    whole, kind "huggingface", as ModernBERT's BPE; either layout without both: the
    SentencePiece model a bertjax export wrote, SENTENCEPIECE_FILE); do_lower_case from
    tokenizer_config.json (True where it is silent, as transformers reads it) or tokenizer.json's
    BertNormalizer (Hugging Face), bert_config.json
    (a bertjax TF export), or from the release's name (`release_casing`), else None (the
    caller's default). bertjax: the
    tokenizer the run saved in <workdir>/tokenizer (see tokenization.save_tokenizer).
    """
    layout, directory = checkpoint_layout(path)
    if layout == "bertjax":
        from bertjax import tokenization

        run_directory = directory
        for _ in range(3):  # the directory may be a workdir, its checkpoints/ or one step folder
            saved = fileio.join(run_directory, "tokenizer")
            if fileio.exists(fileio.join(saved, tokenization.SAVED_TOKENIZER)):
                return tokenization.saved_tokenizer_spec(saved)
            run_directory = fileio.parent(run_directory)
        return None
    vocab = fileio.join(directory, "vocab.txt")
    tokenizer_json = fileio.join(directory, "tokenizer.json")
    has_json = layout == "huggingface" and fileio.exists(tokenizer_json)
    if has_json and not _is_wordpiece_json(tokenizer_json):
        # BPE, Unigram, or a WordPiece that normalises or splits otherwise: run as written, as
        # transformers' fast tokenizer runs it, even beside a vocab.txt (which would lose that).
        return {"kind": "huggingface", "path": tokenizer_json, "do_lower_case": False}
    if not fileio.exists(vocab):
        if has_json:
            vocab = tokenizer_json
        elif fileio.exists(fileio.join(directory, SENTENCEPIECE_FILE)):  # a bertjax export's (its own normalisation)
            return {"kind": "sentencepiece", "path": fileio.join(directory, SENTENCEPIECE_FILE), "do_lower_case": False}
        else:
            return None
    tokenizer_config = fileio.join(directory, "tokenizer_config.json")
    refused = (_wordpiece_settings_problem(fileio.read_json(tokenizer_config), tokenizer_config)
               if layout == "huggingface" and fileio.exists(tokenizer_config) else None)
    spec = {"kind": "wordpiece", "path": vocab, "do_lower_case": _casing_in(layout, directory)}
    return {**spec, "refused": refused} if refused else spec


def recorded_casing(path: str) -> bool | None:
    """The WordPiece casing a Hugging Face or TF checkpoint's files record, with or without a
    vocabulary beside them: tokenizer_config.json's do_lower_case (True where it is silent, as
    transformers' BertTokenizer reads it), else tokenizer.json's BertNormalizer, else a bertjax TF
    export's bert_config.json, else the release's name (`release_casing`); None where nothing
    says it (a bertjax run's casing is its saved tokenizer's)."""
    return _casing_in(*checkpoint_layout(path))


def _casing_in(layout: str, directory: str) -> bool | None:
    """`recorded_casing` of the checkpoint folder `directory` of `layout`."""
    if layout == "bertjax":
        return None
    do_lower_case = None
    tokenizer_config = fileio.join(directory, "tokenizer_config.json")
    tokenizer_json = fileio.join(directory, "tokenizer.json")
    if layout == "huggingface" and fileio.exists(tokenizer_config):
        settings = fileio.read_json(tokenizer_config)
        do_lower_case = settings.get("do_lower_case")
        if do_lower_case is None and settings.get("tokenizer_class") != "PreTrainedTokenizerFast":
            # BertTokenizer's default, which transformers applies over a cased tokenizer.json too
            # (the generic fast class runs tokenizer.json as written: read below).
            do_lower_case = True
    if do_lower_case is None and layout == "huggingface" and fileio.exists(tokenizer_json):
        from bertjax import tokenization

        do_lower_case = tokenization.wordpiece_casing(tokenizer_json)
    if do_lower_case is None and layout == "tf":
        do_lower_case = fileio.read_json(fileio.join(directory, "bert_config.json")).get(_TF_CASING)
    if do_lower_case is None:
        do_lower_case = release_casing(os.path.basename(os.path.normpath(directory)))
    return do_lower_case

"""Checkpoint import and export: the Hugging Face layout and Google's original TF1 release.

bertjax params (unrolled layout, numpy float32; H = hidden, V = vocab, I = intermediate)::

    {"bert": <BertEncoder tree, see bert.py>,
     "mlm": {"transform": {kernel [H, H], bias}, "transform_norm": {scale, bias}, "output_bias": [V]},
     "nsp": {kernel [H, 2], bias [2]},
     "classifier": {kernel [H, num_labels], bias},
     "qa_outputs": {kernel [H, 2], bias [2]}}

Only the heads a checkpoint holds appear. Every variable has one row in `variable_table`
with its Hugging Face and TF names, so import and export share one mapping.

Strictness: a missing or mis-shaped variable is an error naming it with the expected and
found shapes. Unexpected variables are an error too (weights are never dropped silently),
except bookkeeping that holds no weights: Hugging Face `position_ids` buffers, and TF
optimizer slots (`adam_m`, `adam_v`), `global_step` and the TF2 object graph. One
exception to "missing is an error": Hugging Face's BertForMaskedLM, BertForTokenClassification
and BertForQuestionAnswering have no pooler, so theirs is filled with zeros (with a warning).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from typing import Any

import flax.linen as nn
import numpy as np

from bertjax.models.bert import unstack_layers
from bertjax.models.config import BertConfig
from bertjax.models.heads import FEATURE_HEADS, TOKEN_TRANSFORM
from bertjax.models.tensor_files import read_safetensors
from bertjax.runtime import fileio

HEADS = ("mlm", "nsp", "classifier", "qa_outputs")

# Config keys shared by BertConfig, Hugging Face config.json and TF bert_config.json.
_ARCH_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
              "max_position_embeddings", "type_vocab_size", "initializer_range")
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


@dataclasses.dataclass(frozen=True)
class Variable:
    """One parameter: its bertjax path and shape, its Hugging Face and TF names.

    Hugging Face Linear weights are [out, in] (transposed vs bertjax kernels); TF kernels
    are [in, out] except the classifier-style `output_weights`, which are [out, in].
    """

    path: tuple[str, ...]
    shape: tuple[int, ...]
    hf: str
    tf: str

    @property
    def hf_transposed(self) -> bool:
        return self.path[-1] == "kernel"

    @property
    def tf_transposed(self) -> bool:
        return self.tf.endswith("output_weights")


def _dense(path, hf, tf, n_in, n_out):
    return [Variable(path + ("kernel",), (n_in, n_out), f"{hf}.weight", f"{tf}/kernel"),
            Variable(path + ("bias",), (n_out,), f"{hf}.bias", f"{tf}/bias")]


def _norm(path, hf, tf, size):
    return [Variable(path + ("scale",), (size,), f"{hf}.weight", f"{tf}/gamma"),
            Variable(path + ("bias",), (size,), f"{hf}.bias", f"{tf}/beta")]


def _output(path, hf, tf, size, n_out):
    """A classifier-style layer: TF stores `output_weights` [out, in] and `output_bias`."""
    return [Variable(path + ("kernel",), (size, n_out), f"{hf}.weight", f"{tf}output_weights"),
            Variable(path + ("bias",), (n_out,), f"{hf}.bias", f"{tf}output_bias")]


def variable_table(config: BertConfig, heads: tuple[str, ...] = (), num_labels: int = 2) -> list[Variable]:
    """All variables of the encoder plus `heads` (some of HEADS; the classifier has
    `num_labels` outputs). Encoder Hugging Face names are without the "bert." prefix.
    """
    h, i_size, v = config.hidden_size, config.intermediate_size, config.vocab_size
    emb = ("bert", "embeddings")
    table = [
        Variable(emb + ("word_embeddings", "embedding"), (v, h),
                 "embeddings.word_embeddings.weight", "bert/embeddings/word_embeddings"),
        Variable(emb + ("position_embeddings", "embedding"), (config.max_position_embeddings, h),
                 "embeddings.position_embeddings.weight", "bert/embeddings/position_embeddings"),
        Variable(emb + ("token_type_embeddings", "embedding"), (config.type_vocab_size, h),
                 "embeddings.token_type_embeddings.weight", "bert/embeddings/token_type_embeddings"),
        *_norm(emb + ("LayerNorm",), "embeddings.LayerNorm", "bert/embeddings/LayerNorm", h),
    ]
    for i in range(config.num_hidden_layers):
        path, hf, tf = ("bert", "encoder", f"layer_{i}"), f"encoder.layer.{i}", f"bert/encoder/layer_{i}"
        for name in ("query", "key", "value"):
            table += _dense(path + ("attention", name), f"{hf}.attention.self.{name}",
                            f"{tf}/attention/self/{name}", h, h)
        table += _dense(path + ("attention", "output"), f"{hf}.attention.output.dense",
                        f"{tf}/attention/output/dense", h, h)
        table += _norm(path + ("attention_norm",), f"{hf}.attention.output.LayerNorm",
                       f"{tf}/attention/output/LayerNorm", h)
        table += _dense(path + ("intermediate",), f"{hf}.intermediate.dense", f"{tf}/intermediate/dense",
                        h, i_size)
        table += _dense(path + ("output",), f"{hf}.output.dense", f"{tf}/output/dense", i_size, h)
        table += _norm(path + ("output_norm",), f"{hf}.output.LayerNorm", f"{tf}/output/LayerNorm", h)
    table += _dense(("bert", "pooler"), "pooler.dense", "bert/pooler/dense", h, h)

    unknown = sorted(set(heads) - set(HEADS))
    if unknown:
        raise ValueError(f"unknown heads {unknown}; expected some of {HEADS}")
    if "mlm" in heads:
        table += _dense(("mlm", "transform"), "cls.predictions.transform.dense",
                        "cls/predictions/transform/dense", h, h)
        table += _norm(("mlm", "transform_norm"), "cls.predictions.transform.LayerNorm",
                       "cls/predictions/transform/LayerNorm", h)
        table.append(Variable(("mlm", "output_bias"), (v,), "cls.predictions.bias", "cls/predictions/output_bias"))
    if "nsp" in heads:
        table += _output(("nsp",), "cls.seq_relationship", "cls/seq_relationship/", h, 2)
    if "classifier" in heads:
        table += _output(("classifier",), "classifier", "", h, num_labels)
    if "qa_outputs" in heads:
        table += _output(("qa_outputs",), "qa_outputs", "cls/squad/", h, 2)
    return table


def _set(tree: dict, path: tuple[str, ...], value: np.ndarray):
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _get(tree: dict, path: tuple[str, ...], source: str) -> np.ndarray:
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            raise ValueError(f"{source}: params lack {'/'.join(path)}")
        node = node[key]
    return np.asarray(node)


def _gather(table: list[Variable], tensors: dict[str, np.ndarray], fmt: str, source: str) -> dict[str, Any]:
    """Picks every variable of `table` out of `tensors` ({name in format fmt: array}) into
    a bertjax params tree. fmt: "hf" or "tf". Raises one error listing all missing,
    mis-shaped and unexpected variables.
    """
    params, problems = {}, []
    for var in table:
        name = var.hf if fmt == "hf" else var.tf
        transposed = var.hf_transposed if fmt == "hf" else var.tf_transposed
        expected = var.shape[::-1] if transposed else var.shape
        if name not in tensors:
            problems.append(f"missing variable {name!r} (expected shape {expected})")
        elif tensors[name].shape != expected:
            problems.append(f"variable {name!r} has shape {tensors[name].shape}, expected {expected}")
        else:
            value = np.asarray(tensors[name], dtype=np.float32)
            _set(params, var.path, np.ascontiguousarray(value.T) if transposed else value)
    unexpected = sorted(set(tensors) - {var.hf if fmt == "hf" else var.tf for var in table})
    if unexpected:
        problems.append(f"unexpected variables (not part of a BERT of this config): {unexpected}")
    if problems:
        raise ValueError(f"{source}: checkpoint does not match the BERT config:\n  " + "\n  ".join(problems))
    return params


# ------------------------------------------------------------------------------------------------
# Configs
# ------------------------------------------------------------------------------------------------

def _config_from_json(values: dict[str, Any], activations: dict[str, str], source: str) -> BertConfig:
    missing = [key for key in _ARCH_KEYS if key not in values]
    if missing:
        raise ValueError(f"{source}: missing BERT config keys {missing}")
    act = values.get("hidden_act")
    if act not in activations:
        raise ValueError(f"{source}: hidden_act {act!r} is not supported; expected one of {sorted(activations)}")
    return BertConfig(**{key: values[key] for key in _ARCH_KEYS}, hidden_act=activations[act],
                      layer_norm_eps=values.get("layer_norm_eps", 1e-12))


def hf_config_to_bert(values: dict[str, Any], source: str = "config.json") -> BertConfig:
    """Hugging Face config.json dict -> BertConfig. Rejects non-BERT variants."""
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


def bert_to_hf_config(config: BertConfig) -> dict[str, Any]:
    """BertConfig -> the architecture part of a Hugging Face config.json."""
    act = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}[config.hidden_act]
    return {"model_type": "bert", **{key: getattr(config, key) for key in _ARCH_KEYS},
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
    if hf_config.get("model_type") == "modernbert":
        return load_modernbert(path, hf_config)
    config = hf_config_to_bert(hf_config, fileio.join(path, "config.json"))
    file = fileio.join(path, "model.safetensors")
    tensors = {}
    for key, value in read_safetensors(file).items():
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
    architectures = hf_config.get("architectures") or []
    pooler = ("pooler.dense.weight", "pooler.dense.bias")
    if architectures and set(architectures) <= set(_HF_NO_POOLER) and not set(pooler) & set(tensors):
        logging.warning("%s: %s has no pooler; bertjax's pooler is filled with zeros", file, architectures[0])
        h = config.hidden_size
        tensors.update({pooler[0]: np.zeros((h, h), np.float32), pooler[1]: np.zeros((h,), np.float32)})
    table = variable_table(config, *_detect_heads(tensors, _HF_HEAD_PREFIXES, "classifier.bias"))
    return config, _gather(table, tensors, "hf", file)


def export_huggingface(config: BertConfig, params: dict[str, Any], out_dir: str, vocab_path: str | None = None,
                       architecture: str | None = None, do_lower_case: bool | None = None,
                       label_names: list[str] | None = None, extra_config: dict[str, Any] | None = None) -> None:
    """Writes `out_dir`/config.json, model.safetensors (and vocab.txt if `vocab_path`, with
    tokenizer_config.json when `do_lower_case` is known: Hugging Face's BertTokenizer
    lower-cases unless told otherwise, so a cased model needs it).

    `params`: {"bert": encoder tree, <heads>} or a bare encoder tree; scanned or unrolled.
    Names carry the "bert." prefix when heads are present (like BertFor* models).
    `architecture` overrides the guessed one, e.g. "BertForTokenClassification" or
    "BertForMultipleChoice" (a "classifier" head defaults to BertForSequenceClassification).
    `label_names` (one per classifier output) become config.json's id2label/label2id
    (default LABEL_<i>). `extra_config`: more config.json keys, which transformers keeps and
    ignores (a span-QA run's squad_version, read back by bertjax).
    """
    if is_modern(config):
        return export_modernbert(config, params, out_dir, architecture, label_names, vocab_path, extra_config)
    _check_bert_layout(config, "export_huggingface")
    params = _export_params(params)
    heads, num_labels = _param_heads(params, config, "export_huggingface")
    prefix = "bert." if heads else ""
    tensors = {}
    for var in variable_table(config, heads, num_labels):
        value = np.asarray(_get(params, var.path, "export_huggingface"), dtype=np.float32)
        if value.shape != var.shape:
            raise ValueError(f"export_huggingface: params {'/'.join(var.path)} has shape {value.shape}, "
                             f"expected {var.shape}")
        name = var.hf if var.path[0] != "bert" else prefix + var.hf
        tensors[name] = np.ascontiguousarray(value.T if var.hf_transposed else value)
    architecture = architecture or _guess_architecture(heads)
    lacking = [head for head in _HEADS_OF.get(architecture, ()) if head not in heads]
    if lacking:
        raise ValueError(f"export_huggingface: {architecture} needs the head(s) {lacking}, which the checkpoint does "
                         f"not have (it has {list(heads) or 'none'}); name another architecture")
    hf_config = {**bert_to_hf_config(config), **(extra_config or {})}
    hf_config["architectures"] = [architecture]
    _write_huggingface(out_dir, tensors, hf_config, num_labels if "classifier" in heads else 0, label_names)
    if vocab_path:
        from bertjax import tokenization

        tokenization.write_vocab(vocab_path, fileio.join(out_dir, "vocab.txt"))
        if do_lower_case is not None:
            fileio.write_json(fileio.join(out_dir, "tokenizer_config.json"), {
                "tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case,
                "model_max_length": config.max_position_embeddings})


def _write_huggingface(out_dir: str, tensors: dict[str, np.ndarray], hf_config: dict[str, Any], num_labels: int,
                       label_names: list[str] | None) -> None:
    """Writes model.safetensors and config.json, with id2label/label2id for a classifier of
    `num_labels` outputs (0: none; default names LABEL_<i>)."""
    from safetensors.numpy import save

    if num_labels == 1 and not label_names:  # one output: a regression, which Hugging Face must be told
        hf_config["problem_type"] = "regression"  # (else its pipeline reads the value through a sigmoid)
    if num_labels:
        names = list(label_names) if label_names else [f"LABEL_{i}" for i in range(num_labels)]
        if len(names) != num_labels:
            raise ValueError(f"export_huggingface: {len(names)} label names for a classifier of {num_labels} outputs")
        hf_config["id2label"] = {str(i): name for i, name in enumerate(names)}
        hf_config["label2id"] = {name: i for i, name in enumerate(names)}
    fileio.makedirs(out_dir)
    with fileio.open_file(fileio.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(save(tensors, metadata={"format": "pt"}))
    with fileio.open_file(fileio.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2, sort_keys=True)


def _guess_architecture(heads: tuple[str, ...]) -> str:
    if "mlm" in heads and "nsp" in heads:
        return "BertForPreTraining"
    for head, arch in (("mlm", "BertForMaskedLM"), ("nsp", "BertForNextSentencePrediction"),
                       ("qa_outputs", "BertForQuestionAnswering"), ("classifier", "BertForSequenceClassification")):
        if head in heads:
            return arch
    return "BertModel"


def _export_params(params: dict[str, Any]) -> dict[str, Any]:
    """A bare encoder tree (with "embeddings") or a full {"bert": ...} tree, possibly with
    logical-partitioning boxes or scanned layers -> a plain {"bert": unrolled tree, ...}."""
    params = nn.meta.unbox(params)
    params = {"bert": params} if "embeddings" in params else dict(params)
    if "layers" in params.get("bert", {}).get("encoder", {}):
        params["bert"] = unstack_layers(params["bert"])
    return params


def _param_heads(params: dict[str, Any], config: BertConfig, export: str = "") -> tuple[tuple[str, ...], int]:
    """(heads present in `params` that have a Hugging Face / TF layout, classifier outputs).

    A feature-based task head (config.feature_based: its classifier reads other features,
    perhaps through FEATURE_HEADS params) has no such layout: loading keeps its params as
    they are and checks the encoder's shapes only (none is listed); `export` (the caller's
    name) makes it an error instead.
    """
    unknown = sorted(set(params) - {"bert", *HEADS, *FEATURE_HEADS, *TOKEN_TRANSFORM})
    if unknown:
        raise ValueError(f"params have unknown top-level entries {unknown}; expected 'bert' and some of "
                         f"{HEADS + FEATURE_HEADS + TOKEN_TRANSFORM}")
    if export and TOKEN_TRANSFORM[0] in params and not is_modern(config):
        raise ValueError(f"{export}: the head's token transform (config.token_transform) is ModernBERT's; no BERT "
                         "class has it")
    if config.feature_based and set(params) != {"bert"}:
        if export:
            raise ValueError(f"{export}: the task head {sorted(set(params) - {'bert'})} reads features "
                             f"(feature_layers={config.feature_layers!r}, feature_combine={config.feature_combine!r}, "
                             f"tagging_head={config.tagging_head!r}) that no Hugging Face or TF BERT class has; "
                             "export the encoder alone (params['bert'])")
        return (), 2
    num_labels = np.shape(params["classifier"]["bias"])[0] if "classifier" in params else 2
    return tuple(head for head in HEADS if head in params), num_labels


# ------------------------------------------------------------------------------------------------
# Hugging Face ModernBERT layout
# ------------------------------------------------------------------------------------------------

_MODERN_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu"}
# Each class -> (the bertjax heads it holds, whether its head runs over every token: "head.dense"
# and "head.norm" are then config.token_transform's params, else bertjax's pooler).
MODERNBERT_ARCHITECTURES = {"ModernBertModel": ((), False), "ModernBertForMaskedLM": (("mlm",), False),
                            "ModernBertForSequenceClassification": (("classifier",), False),
                            "ModernBertForTokenClassification": (("classifier",), True),
                            "ModernBertForQuestionAnswering": (("qa_outputs",), True)}
_MODERN_FOR_BERT = {"BertModel": "ModernBertModel", "BertForMaskedLM": "ModernBertForMaskedLM",
                    "BertForSequenceClassification": "ModernBertForSequenceClassification",
                    "BertForTokenClassification": "ModernBertForTokenClassification",
                    "BertForQuestionAnswering": "ModernBertForQuestionAnswering"}
# Hugging Face fuses some products bertjax keeps apart: name -> the bertjax parts, in order.
_FUSED = {"attn.Wqkv": ("query", "key", "value"), "mlp.Wi": ("intermediate", "intermediate_gate")}


def is_modern(config: BertConfig) -> bool:
    """Whether `config` is the modern encoder (any switch off BERT's), saved in ModernBERT's layout."""
    return (config.position_embedding, config.norm_placement, config.gated_mlp) != ("absolute", "post", False)


def modernbert_config(values: dict[str, Any], source: str = "config.json") -> BertConfig:
    """Hugging Face ModernBertConfig (config.json) -> BertConfig; what bertjax cannot express
    exactly is an error naming the key."""
    def need(condition, message):
        if not condition:
            raise ValueError(f"{source}: {message}")

    layers = values.get("num_hidden_layers", 22)
    every = values.get("global_attn_every_n_layers", 3)
    if values.get("layer_types"):
        pattern = ["full_attention" if i % every == 0 else "sliding_attention" for i in range(layers)]
        need(values["layer_types"] == pattern, f"layer_types {values['layer_types']} is not every "
             f"{every}th layer global, the pattern bertjax builds (global_attn_every_n_layers)")
    rope = values.get("rope_parameters") or {}
    global_theta = (rope.get("full_attention") or {}).get("rope_theta", values.get("global_rope_theta", 160_000.0))
    local_theta = (rope.get("sliding_attention") or {}).get("rope_theta", values.get("local_rope_theta", 10_000.0))
    for kind in ("full_attention", "sliding_attention"):
        need((rope.get(kind) or {}).get("rope_type", "default") == "default",
             f"rope_parameters.{kind}.rope_type must be 'default' (plain RoPE)")
    act = values.get("hidden_activation", "gelu")
    need(act in _MODERN_ACT, f"hidden_activation {act!r} is not one of {sorted(_MODERN_ACT)}")
    need(values.get("classifier_activation", act) == act,
         f"classifier_activation {values.get('classifier_activation')!r} differs from hidden_activation {act!r}")
    bias = values.get("attention_bias", False)
    need(values.get("mlp_bias", False) == bias and values.get("classifier_bias", False) == bias,
         "attention_bias, mlp_bias and classifier_bias must agree (bertjax has one use_bias)")
    need(values.get("decoder_bias", True), "decoder_bias must be true (bertjax's MLM decoder has a bias)")
    window = values.get("local_attention", 128)
    need(window % 2 == 0, f"local_attention {window} must be even")
    return BertConfig(
        vocab_size=values.get("vocab_size", 50368), hidden_size=values.get("hidden_size", 768),
        num_hidden_layers=layers, num_attention_heads=values.get("num_attention_heads", 12),
        intermediate_size=values.get("intermediate_size", 1152), hidden_act=_MODERN_ACT[act],
        hidden_dropout_prob=values.get("mlp_dropout", 0.0), attention_probs_dropout_prob=values.get("attention_dropout", 0.0),
        max_position_embeddings=values.get("max_position_embeddings", 8192), type_vocab_size=0,
        initializer_range=values.get("initializer_range", 0.02), layer_norm_eps=values.get("norm_eps", 1e-5),
        position_embedding="rope", rope_theta=float(global_theta), local_rope_theta=float(local_theta),
        attention_window=window, global_attention_every=every, norm_placement="pre", use_bias=bias,
        norm_bias=values.get("norm_bias", False), gated_mlp=True, pooler=values.get("classifier_pooling", "cls"),
        token_transform=True)


def modernbert_hf_config(config: BertConfig) -> dict[str, Any]:
    """BertConfig of the modern encoder -> Hugging Face ModernBertConfig values (config.json)."""
    problems = [f"{name}={getattr(config, name)!r} (ModernBERT: {want!r})" for name, want in
                (("position_embedding", "rope"), ("norm_placement", "pre"), ("gated_mlp", True),
                 ("type_vocab_size", 0), ("pooler", config.pooler if config.pooler != "tanh" else "cls or mean"))
                if getattr(config, name) != want]
    if problems or config.attention_window == 0:
        raise ValueError("this model mixes BERT and ModernBERT switches, which no Hugging Face class holds: "
                         + ", ".join(problems + ["attention_window=0 (ModernBERT: > 0)"] * (config.attention_window == 0)))
    act = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu", "silu": "silu"}[config.hidden_act]
    return {"model_type": "modernbert", "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
            "num_hidden_layers": config.num_hidden_layers, "num_attention_heads": config.num_attention_heads,
            "intermediate_size": config.intermediate_size, "hidden_activation": act, "classifier_activation": act,
            "max_position_embeddings": config.max_position_embeddings, "initializer_range": config.initializer_range,
            "norm_eps": config.layer_norm_eps, "norm_bias": config.norm_bias, "attention_bias": config.use_bias,
            "mlp_bias": config.use_bias, "classifier_bias": config.use_bias, "decoder_bias": True,
            "global_rope_theta": config.rope_theta, "local_rope_theta": config.local_rope_theta,
            "local_attention": config.attention_window, "global_attn_every_n_layers": config.global_attention_every,
            "classifier_pooling": config.pooler, "embedding_dropout": config.hidden_dropout_prob,
            "mlp_dropout": config.hidden_dropout_prob, "attention_dropout": config.attention_probs_dropout_prob,
            "tie_word_embeddings": True}


def modernbert_variable_table(config: BertConfig, heads: tuple[str, ...] = (), num_labels: int = 2,
                              token_level: bool = False) -> list[Variable]:
    """ModernBERT's variables (Hugging Face names without the "model." prefix; a fused product's
    parts as "<name>#<k>", see _FUSED), plus `heads` ("mlm", "classifier", "qa_outputs"): a
    "classifier" over the pooler, or with `token_level` over every token (token classification),
    as "qa_outputs" always is, both after the token transform ("head.dense", "head.norm")."""
    h, i_size, v = config.hidden_size, config.intermediate_size, config.vocab_size

    def linear(path, hf, n_in, n_out, bias=config.use_bias, part=""):
        return ([Variable(path + ("kernel",), (n_in, n_out), f"{hf}.weight{part}", "")]
                + [Variable(path + ("bias",), (n_out,), f"{hf}.bias{part}", "")] * bias)

    def norm(path, hf):
        return ([Variable(path + ("scale",), (h,), f"{hf}.weight", "")]
                + [Variable(path + ("bias",), (h,), f"{hf}.bias", "")] * config.norm_bias)

    emb = ("bert", "embeddings")
    table = [Variable(emb + ("word_embeddings", "embedding"), (v, h), "embeddings.tok_embeddings.weight", ""),
             *norm(emb + ("LayerNorm",), "embeddings.norm")]
    for i in range(config.num_hidden_layers):
        path, hf = ("bert", "encoder", f"layer_{i}"), f"layers.{i}"
        if i:
            table += norm(path + ("attention_norm",), f"{hf}.attn_norm")
        for k, name in enumerate(_FUSED["attn.Wqkv"]):
            table += linear(path + ("attention", name), f"{hf}.attn.Wqkv", h, h, part=f"#{k}")
        table += linear(path + ("attention", "output"), f"{hf}.attn.Wo", h, h)
        table += norm(path + ("mlp_norm",), f"{hf}.mlp_norm")
        for k, name in enumerate(_FUSED["mlp.Wi"]):
            table += linear(path + (name,), f"{hf}.mlp.Wi", h, i_size, part=f"#{k}")
        table += linear(path + ("output",), f"{hf}.mlp.Wo", i_size, h)
    table += norm(("bert", "encoder", "final_norm"), "final_norm")
    if "mlm" in heads:
        table += linear(("mlm", "transform"), "head.dense", h, h) + norm(("mlm", "transform_norm"), "head.norm")
        table.append(Variable(("mlm", "output_bias"), (v,), "decoder.bias", ""))
    if token_level:
        table += linear((TOKEN_TRANSFORM[0],), "head.dense", h, h) + norm((TOKEN_TRANSFORM[1],), "head.norm")
    elif "classifier" in heads:  # ModernBERT's classification head is bertjax's pooler
        table += _modern_pooler(config)
    if "classifier" in heads:
        table += linear(("classifier",), "classifier", h, num_labels, bias=True)
    if "qa_outputs" in heads:  # Hugging Face names its start/end layer "classifier" too
        table += linear(("qa_outputs",), "classifier", h, 2, bias=True)
    return table


def _modern_pooler(config: BertConfig) -> list[Variable]:
    """bertjax's "cls"/"mean" pooler: ModernBERT's classification head ("head.dense", "head.norm")."""
    h = config.hidden_size
    return ([Variable(("bert", "pooler", "kernel"), (h, h), "head.dense.weight", "")]
            + [Variable(("bert", "pooler", "bias"), (h,), "head.dense.bias", "")] * config.use_bias
            + [Variable(("bert", "pooler_norm", "scale"), (h,), "head.norm.weight", "")]
            + [Variable(("bert", "pooler_norm", "bias"), (h,), "head.norm.bias", "")] * config.norm_bias)


def _fresh_pooler(config: BertConfig) -> dict[str, Any]:
    """bertjax's "cls"/"mean" pooler, initialised as a new classification head is (a fixed seed)."""
    h, std = config.hidden_size, config.initializer_range
    kernel = np.clip(np.random.default_rng(0).normal(0.0, std, (h, h)), -2 * std, 2 * std).astype(np.float32)
    pooler = {"kernel": kernel, **({"bias": np.zeros(h, np.float32)} if config.use_bias else {})}
    norm = {"scale": np.ones(h, np.float32), **({"bias": np.zeros(h, np.float32)} if config.norm_bias else {})}
    return {"pooler": pooler, "pooler_norm": norm}


def load_modernbert(path: str, hf_config: dict[str, Any]) -> tuple[BertConfig, dict[str, Any]]:
    """A Hugging Face ModernBERT directory (config.json with model_type "modernbert", model.safetensors)
    -> (config, params): ModernBertModel, ModernBertForMaskedLM (its decoder tied to the
    embeddings), ModernBertForSequenceClassification, ModernBertForTokenClassification or
    ModernBertForQuestionAnswering. All but the sequence classifier have no pooler, so bertjax's
    starts fresh (as Hugging Face initialises a missing head)."""
    config = modernbert_config(hf_config, fileio.join(path, "config.json"))
    file = fileio.join(path, "model.safetensors")
    architectures = hf_config.get("architectures") or ["ModernBertModel"]
    if len(architectures) != 1 or architectures[0] not in MODERNBERT_ARCHITECTURES:
        raise ValueError(f"{file}: architectures {architectures} is not one of {sorted(MODERNBERT_ARCHITECTURES)}")
    heads, token_level = MODERNBERT_ARCHITECTURES[architectures[0]]
    tensors = {key.removeprefix("model."): value for key, value in read_safetensors(file).items()}
    decoder = tensors.pop("decoder.weight", None)
    if decoder is not None and not np.array_equal(decoder, tensors.get("embeddings.tok_embeddings.weight")):
        raise ValueError(f"{file}: 'decoder.weight' is not tied to the embeddings; bertjax ties the MLM decoder")
    for fused, parts in _FUSED.items():
        for name in [n for n in tensors if re.search(rf"(^|\.){re.escape(fused)}\.(weight|bias)$", n)]:
            for k, part in enumerate(np.split(tensors.pop(name), len(parts))):
                tensors[f"{name}#{k}"] = part
    num_labels = tensors["classifier.bias"].shape[0] if "classifier.bias" in tensors else 2
    params = _gather(modernbert_variable_table(config, heads, num_labels, token_level), tensors, "hf", file)
    if heads != ("classifier",) or token_level:
        params["bert"].update(_fresh_pooler(config))
    return config, params


def export_modernbert(config: BertConfig, params: dict[str, Any], out_dir: str, architecture: str | None = None,
                      label_names: list[str] | None = None, tokenizer_path: str | None = None,
                      extra_config: dict[str, Any] | None = None) -> None:
    """Writes a bertjax modern encoder (and its "mlm", "classifier" or "qa_outputs" head; a
    "classifier" after the token transform is a token classifier) in the Hugging Face ModernBERT
    layout: config.json + model.safetensors (the MLM decoder tied, not stored), and
    the tokenizer.json at `tokenizer_path` if given. A pre-training run's NSP head and pooler
    have no place in ModernBertForMaskedLM: they are left out, with a warning."""
    hf_config = {**modernbert_hf_config(config), **(extra_config or {})}
    params = _export_params(params)
    if {"mlm", "nsp"} <= set(params):
        logging.warning("export_huggingface: ModernBertForMaskedLM holds no next-sentence head or pooler; "
                        "the run's 'nsp' head and pooler are not written")
        params.pop("nsp")
    heads, num_labels = _param_heads(params, config, "export_huggingface")
    token_level = TOKEN_TRANSFORM[0] in params
    if len(heads) > 1 or (token_level and not heads) or (heads == ("qa_outputs",) and not token_level):
        raise ValueError(f"export_huggingface: ModernBERT's Hugging Face classes hold one masked-LM, classification, "
                         f"token-classification or question-answering head, not {sorted(set(params) - {'bert'})}")
    held = (heads, token_level)
    architecture = _MODERN_FOR_BERT.get(architecture, architecture) or next(
        name for name, classes_heads in MODERNBERT_ARCHITECTURES.items() if classes_heads == held)
    if MODERNBERT_ARCHITECTURES.get(architecture) != held:
        raise ValueError(f"export_huggingface: architecture {architecture!r} does not hold the heads "
                         f"{sorted(set(params) - {'bert'})}; expected one of {sorted(MODERNBERT_ARCHITECTURES)}")
    prefix = "model." if heads else ""
    tensors = {}
    for var in modernbert_variable_table(config, heads, num_labels, token_level):
        value = np.asarray(_get(params, var.path, "export_huggingface"), dtype=np.float32)
        name = prefix + var.hf if var.path[0] == "bert" and not var.hf.startswith("head.") else var.hf
        tensors[name] = value.T if var.hf_transposed else value
    for name in sorted({n.split("#")[0] for n in tensors if "#" in n}):
        parts = [tensors.pop(f"{name}#{k}") for k in range(len(next(p for f, p in _FUSED.items() if f in name)))]
        tensors[name] = np.concatenate(parts)
    tensors = {name: np.ascontiguousarray(value) for name, value in tensors.items()}
    hf_config["architectures"] = [architecture]
    if tokenizer_path:  # its special tokens: transformers' defaults are ModernBERT's own vocabulary's ids
        from bertjax import tokenization

        tokenizer = tokenization.load_tokenizer("huggingface" if tokenizer_path.endswith(".json") else "wordpiece",
                                                tokenizer_path)
        hf_config.update(pad_token_id=tokenizer.pad_id, cls_token_id=tokenizer.cls_id, sep_token_id=tokenizer.sep_id,
                         bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id)
    _write_huggingface(out_dir, tensors, hf_config, num_labels if "classifier" in heads else 0, label_names)
    if tokenizer_path:  # a tokenizer.json (a bertjax run saves it as hf_tokenizer.json) or a vocab.txt
        fileio.copy(tokenizer_path, fileio.join(out_dir, "tokenizer.json" if tokenizer_path.endswith(".json")
                                                else "vocab.txt"))


# ------------------------------------------------------------------------------------------------
# Google's original TF1 release
# ------------------------------------------------------------------------------------------------

def tf_config_to_bert(values: dict[str, Any], source: str = "bert_config.json") -> BertConfig:
    """Original bert_config.json dict -> BertConfig ("gelu" there is the tanh form)."""
    return _config_from_json(values, _TF_ACT, source)


def tf_checkpoint_prefix(path: str) -> str | None:
    """`path`/bert_model.ckpt if its index exists, else the latest checkpoint named in `path`/checkpoint."""
    prefix = fileio.join(path, "bert_model.ckpt")
    if fileio.exists(prefix + ".index"):
        return prefix
    if fileio.exists(fileio.join(path, "checkpoint")):
        from bertjax.runtime.tf_cpu import tf
        return tf.train.latest_checkpoint(path)
    return None


def load_tf_checkpoint(path: str) -> tuple[BertConfig, dict[str, Any]]:
    """Reads `path`/bert_config.json + a TF1 checkpoint (original variable names) -> (config, params)."""
    from bertjax.runtime.tf_cpu import tf

    config = tf_config_to_bert(fileio.read_json(fileio.join(path, "bert_config.json")),
                               fileio.join(path, "bert_config.json"))
    prefix = tf_checkpoint_prefix(path)
    if prefix is None:
        raise ValueError(f"{path}: no TF checkpoint (looked for bert_model.ckpt.index and a 'checkpoint' file)")
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)  # the prefix as given (no directory guess)
    tensors = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
               if not _TF_IGNORED.search(name)}
    table = variable_table(config, *_detect_heads(tensors, _TF_HEAD_PREFIXES, "output_bias"))
    return config, _gather(table, tensors, "tf", prefix)


def export_tf_checkpoint(config: BertConfig, params: dict[str, Any], out_dir: str,
                         vocab_path: str | None = None) -> None:
    """Writes `out_dir`/bert_config.json + bert_model.ckpt.* with the original TF1 names.

    The original code's "gelu" is the tanh approximation, so an exact-GELU model is
    written as "gelu" with a warning (outputs then differ slightly in that code).
    """
    missing = "the modern encoder" if is_modern(config) else (
        f"hidden_act {config.hidden_act!r}" if config.hidden_act not in ("gelu", "gelu_tanh", "relu") else "")
    if missing:
        raise ValueError(f"export_tf_checkpoint: the original TF code has no {missing}; export to Hugging Face")
    _check_bert_layout(config, "export_tf_checkpoint")
    params = _export_params(params)
    values = {}
    for var in variable_table(config, *_param_heads(params, config, "export_tf_checkpoint")):
        value = np.asarray(_get(params, var.path, "export_tf_checkpoint"), dtype=np.float32)
        if value.shape != var.shape:
            raise ValueError(f"export_tf_checkpoint: params {'/'.join(var.path)} has shape {value.shape}, "
                             f"expected {var.shape}")
        values[var.tf] = np.ascontiguousarray(value.T if var.tf_transposed else value)
    if config.hidden_act == "gelu":
        logging.warning("export_tf_checkpoint: the model uses exact GELU; the original TF code's 'gelu' "
                        "is the tanh approximation")
    tf_config = {key: getattr(config, key) for key in _ARCH_KEYS}
    tf_config["hidden_act"] = {"gelu": "gelu", "gelu_tanh": "gelu", "relu": "relu"}[config.hidden_act]
    tf_config["layer_norm_eps"] = config.layer_norm_eps  # the original code hard-codes 1e-12
    fileio.makedirs(out_dir)
    with fileio.open_file(fileio.join(out_dir, "bert_config.json"), "w") as f:
        json.dump(tf_config, f, indent=2, sort_keys=True)
    write_tf1_checkpoint(values, fileio.join(out_dir, "bert_model.ckpt"))
    if vocab_path:
        from bertjax import tokenization

        tokenization.write_vocab(vocab_path, fileio.join(out_dir, "vocab.txt"))


def write_tf1_checkpoint(values: dict[str, np.ndarray], prefix: str) -> None:
    """Saves {TF variable name: array} as a TF1 checkpoint at `prefix` (graph-mode Saver)."""
    from bertjax.runtime.tf_cpu import tf

    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(value, name=name) for name, value in values.items()]
        # Relative names in the `checkpoint` file: a copied folder reads its own files, never the original's.
        saver = tf.compat.v1.train.Saver(variables, save_relative_paths=True)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix, write_meta_graph=False)


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
    params = _export_params(params)
    params = {key: _to_numpy(value) for key, value in params.items()}
    config = bertjax_config(meta, path).replace(matmul_precision="default")
    heads, num_labels = _param_heads(params, config)
    if is_modern(config):  # the encoder with its pooler, and the heads ModernBERT's layout has
        table = modernbert_variable_table(config, tuple(h for h in heads if h in ("mlm", "classifier")), num_labels)
        table += [] if "classifier" in heads else _modern_pooler(config)
    else:
        table = variable_table(config, heads, num_labels)
    for var in table:
        found = _get(params, var.path, path).shape
        if found != var.shape:
            raise ValueError(f"{path}: params {'/'.join(var.path)} has shape {found}, expected {var.shape} "
                             f"for the saved model config")
    return config, params


def _to_numpy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _to_numpy(value) for key, value in tree.items()}
    return np.asarray(tree, dtype=np.float32)


# ------------------------------------------------------------------------------------------------
# Any layout
# ------------------------------------------------------------------------------------------------

_LAYOUTS = """  Hugging Face: config.json + model.safetensors
  Google TF release: bert_config.json + bert_model.ckpt.index (or a 'checkpoint' file)
  bertjax: a checkpoint step folder (state/ + meta/), a run's checkpoint directory, or the run's workdir"""


def checkpoint_layout(path: str) -> tuple[str, str]:
    """(layout, directory to read) of a checkpoint path, local or gs://.

    layout: "huggingface", "tf" or "bertjax"; for a bertjax run's workdir the directory is
    its `checkpoints/`. FileNotFoundError listing the layouts otherwise.
    """
    path = os.fspath(path)
    if not fileio.isdir(path):
        raise FileNotFoundError(f"{path!r} is not a directory; expected a checkpoint directory:\n{_LAYOUTS}")
    files = set(fileio.listdir(path))
    if {"config.json", "model.safetensors"} <= files:
        return "huggingface", path
    if "bert_config.json" in files and ("bert_model.ckpt.index" in files or "checkpoint" in files):
        return "tf", path
    from bertjax import checkpointing

    for candidate in (path, fileio.join(path, "checkpoints")):
        if checkpointing.is_bertjax_checkpoint(candidate):
            return "bertjax", candidate
    if files & {"checkpoints", "best", "metrics.jsonl"}:  # a bertjax run's workdir, with no weights yet
        raise FileNotFoundError(
            f"{path!r} is a bertjax run with no saved weights yet: neither best/ (a fine-tuning run writes it at "
            f"its first evaluation and at its end) nor a complete step in checkpoints/ (written every "
            f"config.checkpoint.every steps); wait for one, or give a finished run")
    hint = ""
    if "pytorch_model.bin" in files:
        hint = ("\npytorch_model.bin needs PyTorch to read; convert it once with transformers: "
                "AutoModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)")
    raise FileNotFoundError(f"{path!r} matches no known checkpoint layout; looked for:\n"
                            f"{_LAYOUTS}\nfound: {sorted(files)}{hint}")


def pretrained_config(path: str) -> BertConfig:
    """The BertConfig of a checkpoint in any layout, read without loading its weights."""
    layout, directory = checkpoint_layout(path)
    if layout == "huggingface":
        config_path = fileio.join(directory, "config.json")
        values = fileio.read_json(config_path)
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


def checkpoint_vocabulary(path: str) -> dict[str, Any] | None:
    """The tokenizer that comes with a checkpoint: {"kind", "path", "do_lower_case"}, or None.

    Hugging Face and Google releases: their vocab.txt (WordPiece; a Hugging Face directory
    without one: the WordPiece vocabulary in its tokenizer.json, or any other tokenizer.json
    whole, kind "huggingface", as ModernBERT's BPE); do_lower_case from
    tokenizer_config.json or tokenizer.json's BertNormalizer (Hugging Face), or from the
    release's name ("cased_L-..." is cased, "uncased_L-..." uncased), else None (the
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
    if not fileio.exists(vocab):
        if layout != "huggingface" or not fileio.exists(tokenizer_json):
            return None
        if (fileio.read_json(tokenizer_json).get("model") or {}).get("type") != "WordPiece":
            return {"kind": "huggingface", "path": tokenizer_json, "do_lower_case": False}  # BPE, Unigram
        vocab = tokenizer_json
    do_lower_case = None
    tokenizer_config = fileio.join(directory, "tokenizer_config.json")
    if layout == "huggingface" and fileio.exists(tokenizer_config):
        do_lower_case = fileio.read_json(tokenizer_config).get("do_lower_case")
    if do_lower_case is None and layout == "huggingface" and fileio.exists(tokenizer_json):
        from bertjax import tokenization

        do_lower_case = tokenization.wordpiece_casing(tokenizer_json)
    name = os.path.basename(os.path.normpath(directory))
    if do_lower_case is None and re.match(r"^(un)?cased_L-", name):
        do_lower_case = name.startswith("uncased")
    return {"kind": "wordpiece", "path": vocab, "do_lower_case": do_lower_case}

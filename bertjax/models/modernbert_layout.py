"""Hugging Face's ModernBERT layout: its config.json and model.safetensors <-> bertjax's modern encoder.

ModernBERT fuses products bertjax keeps apart (the attention's query/key/value, the gated MLP's
two inputs), names its classification head "head" and has no token-type embeddings; what a
ModernBertConfig says that bertjax cannot build exactly is an error naming the key.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np

from bertjax.models.config import BertConfig, check_config_object
from bertjax.models.heads import TOKEN_TRANSFORM
from bertjax.models.primitives import init_stddev
from bertjax.models.tensor_files import (read_weights, trained_length, write_fast_tokenizer_config,
                                         write_huggingface_files, write_tokenizer_config)
from bertjax.models.variable_table import Variable, gather_params, get_param, param_heads, plain_params
from bertjax.runtime import fileio

_MODERN_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu"}
# Each class -> (the bertjax heads it holds, whether its head runs over every token: "head.dense"
# and "head.norm" are then config.token_transform's params, else bertjax's pooler).
MODERNBERT_ARCHITECTURES = {"ModernBertModel": ((), False), "ModernBertForMaskedLM": (("mlm",), False),
                            "ModernBertForSequenceClassification": (("classifier",), False),
                            "ModernBertForMultipleChoice": (("classifier",), False),  # one output: a choice's score
                            "ModernBertForTokenClassification": (("classifier",), True),
                            "ModernBertForQuestionAnswering": (("qa_outputs",), True)}
MODERN_FOR_BERT = {"BertModel": "ModernBertModel", "BertForMaskedLM": "ModernBertForMaskedLM",
                    "BertForSequenceClassification": "ModernBertForSequenceClassification",
                    "BertForMultipleChoice": "ModernBertForMultipleChoice",
                    "BertForTokenClassification": "ModernBertForTokenClassification",
                    "BertForQuestionAnswering": "ModernBertForQuestionAnswering"}
# Hugging Face fuses some products bertjax keeps apart: name -> the bertjax parts, in order.
_FUSED = {"attn.Wqkv": ("query", "key", "value"), "mlp.Wi": ("intermediate", "intermediate_gate")}


# BertConfig's fields by ModernBertConfig's names, for errors that name the file's key.
_MODERN_KEYS = {"pooler": "classifier_pooling", "attention_window": "local_attention", "layer_norm_eps": "norm_eps",
                "rope_theta": "global_rope_theta", "global_attention_every": "global_attn_every_n_layers",
                "hidden_dropout_prob": "mlp_dropout", "attention_probs_dropout_prob": "attention_dropout",
                "use_bias": "attention_bias"}


def modernbert_config(values: dict[str, Any], source: str = "config.json") -> BertConfig:
    """Hugging Face ModernBertConfig (config.json) -> BertConfig; what bertjax cannot express
    exactly, or a value of the wrong type, is an error naming the file and key."""
    check_config_object(values, source)
    try:
        fields = _modernbert_fields(values, source)
    except (TypeError, AttributeError) as e:  # e.g. local_attention null, rope_parameters a list
        raise ValueError(f"{source}: a value of the wrong type ({e})") from None
    return BertConfig.from_dict(fields, source, keys=_MODERN_KEYS)


def _modernbert_fields(values: dict[str, Any], source: str) -> dict[str, Any]:
    """`modernbert_config`'s BertConfig fields."""
    def need(condition, message):
        if not condition:
            raise ValueError(f"{source}: {message}")

    def number(key: str, value: Any, kind: type = float) -> Any:
        need(isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
             and value > 0, f"{key} must be a positive {kind.__name__}, got {value!r}")
        return kind(value)

    layers = number("num_hidden_layers", values.get("num_hidden_layers", 22), int)
    types = values.get("layer_types")
    # transformers 5 may write the pattern as layer_types alone: its period is the second global layer's index.
    globals_at = [i for i, kind in enumerate(types or []) if kind == "full_attention"]
    implied = (globals_at[1] if len(globals_at) > 1 else layers) if types else 3
    every = number("global_attn_every_n_layers", values.get("global_attn_every_n_layers", implied), int)
    if types:
        need(isinstance(types, list), f"layer_types must be a list of one entry a layer, got {types!r}"[:300])
        need(len(types) == layers, f"layer_types has {len(types)} entries for num_hidden_layers {layers}: one a layer")
        pattern = ["full_attention" if i % every == 0 else "sliding_attention" for i in range(layers)]
        need(values["layer_types"] == pattern, f"layer_types {values['layer_types']} is not one layer in "
             f"{every} global, from the first, the pattern bertjax builds (global_attn_every_n_layers)")
    rope = values.get("rope_parameters") or {}
    need(isinstance(rope, dict) and all(isinstance(rope.get(kind) or {}, dict) for kind in
                                        ("full_attention", "sliding_attention")),
         f"rope_parameters must be an object of full_attention and sliding_attention objects, got {rope!r}"[:300])
    global_theta = (rope.get("full_attention") or {}).get("rope_theta", values.get("global_rope_theta", 160_000.0))
    # transformers 4's local_rope_theta null means the global theta.
    local_theta = (rope.get("sliding_attention") or {}).get("rope_theta", values.get("local_rope_theta", 10_000.0))
    local_theta = global_theta if local_theta is None else local_theta
    global_theta = number("the global rope_theta (rope_parameters or global_rope_theta)", global_theta)
    local_theta = number("the local rope_theta (rope_parameters or local_rope_theta)", local_theta)
    need(not values.get("rope_scaling"), f"rope_scaling {values.get('rope_scaling')!r}: bertjax's RoPE is unscaled")
    for kind in ("full_attention", "sliding_attention"):
        need((rope.get(kind) or {}).get("rope_type", "default") == "default",
             f"rope_parameters.{kind}.rope_type must be 'default' (plain RoPE)")
    act = values.get("hidden_activation", "gelu")
    need(isinstance(act, str) and act in _MODERN_ACT, f"hidden_activation {act!r} is not one of {sorted(_MODERN_ACT)}")
    head_act = values.get("classifier_activation", "gelu")  # transformers' default, whatever hidden_activation says
    # (by function: gelu_new is gelu_pytorch_tanh)
    need(isinstance(head_act, str) and _MODERN_ACT.get(head_act) == _MODERN_ACT[act],
         f"classifier_activation {head_act!r} differs from hidden_activation {act!r}")
    bias = values.get("attention_bias", False)
    need(values.get("mlp_bias", False) == bias and values.get("classifier_bias", False) == bias,
         "attention_bias, mlp_bias and classifier_bias must agree (bertjax has one use_bias)")
    need(values.get("decoder_bias", True), "decoder_bias must be true (bertjax's MLM decoder has a bias)")
    window = number("local_attention", values.get("local_attention", 128), int)
    need(window % 2 == 0, f"local_attention {window} must be even and positive")
    window = window if every > 1 else 0  # every layer global: bertjax says so with no window
    pooling = values.get("classifier_pooling", "cls")  # (BERT's tanh pooler is no ModernBERT's)
    need(pooling in ("cls", "mean"), f"classifier_pooling must be 'cls' or 'mean', got {pooling!r}")
    dropouts = {key: values.get(key, 0.0) for key in
                ("embedding_dropout", "mlp_dropout", "attention_dropout", "classifier_dropout")}
    if len(set(dropouts.values())) > 1:  # training only: inference runs without dropout
        logging.warning("%s: dropouts %s differ, and bertjax has two: hidden_dropout_prob (embeddings, attention "
                        "and MLP outputs, heads) takes mlp_dropout=%s, attention_probs_dropout_prob "
                        "attention_dropout=%s; training from these weights regularises as that says",
                        source, dropouts, dropouts["mlp_dropout"], dropouts["attention_dropout"])
    return dict(
        vocab_size=values.get("vocab_size", 50368), hidden_size=values.get("hidden_size", 768),
        num_hidden_layers=layers, num_attention_heads=values.get("num_attention_heads", 12),
        intermediate_size=values.get("intermediate_size", 1152), hidden_act=_MODERN_ACT[act],
        hidden_dropout_prob=values.get("mlp_dropout", 0.0), attention_probs_dropout_prob=values.get("attention_dropout", 0.0),
        max_position_embeddings=values.get("max_position_embeddings", 8192), type_vocab_size=0,
        initializer_range=values.get("initializer_range", 0.02), layer_norm_eps=values.get("norm_eps", 1e-5),
        position_embedding="rope", rope_theta=global_theta, local_rope_theta=local_theta,
        attention_window=window, global_attention_every=every, norm_placement="pre", use_bias=bias,
        norm_bias=values.get("norm_bias", False), gated_mlp=True, pooler=pooling,
        token_transform=True)


_HF_DEFAULT_PAD_ID = 50283  # ModernBertConfig's default pad_token_id (ModernBERT's own vocabulary)


def special_token_ids(tokenizer) -> dict[str, int]:
    """config.json's special-token ids for a ModernBERT with `tokenizer` ([CLS] begins, [SEP] ends)."""
    return {"pad_token_id": tokenizer.pad_id, "cls_token_id": tokenizer.cls_id, "sep_token_id": tokenizer.sep_id,
            "bos_token_id": tokenizer.cls_id, "eos_token_id": tokenizer.sep_id}


def modernbert_hf_config(config: BertConfig) -> dict[str, Any]:
    """BertConfig of the modern encoder -> Hugging Face ModernBertConfig values (config.json)."""
    problems = [f"{name}={getattr(config, name)!r} (ModernBERT: {want!r})" for name, want in
                (("position_embedding", "rope"), ("norm_placement", "pre"), ("gated_mlp", True),
                 ("type_vocab_size", 0), ("pooler", config.pooler if config.pooler != "tanh" else "cls or mean"))
                if getattr(config, name) != want]
    if problems:
        raise ValueError("this model mixes BERT and ModernBERT switches, which no Hugging Face class holds: "
                         + ", ".join(problems))
    act = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu", "silu": "silu"}[config.hidden_act]
    return {"model_type": "modernbert", "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
            "num_hidden_layers": config.num_hidden_layers, "num_attention_heads": config.num_attention_heads,
            "intermediate_size": config.intermediate_size, "hidden_activation": act, "classifier_activation": act,
            "max_position_embeddings": config.max_position_embeddings, "initializer_range": config.initializer_range,
            "norm_eps": config.layer_norm_eps, "norm_bias": config.norm_bias, "attention_bias": config.use_bias,
            "mlp_bias": config.use_bias, "classifier_bias": config.use_bias, "decoder_bias": True,
            # transformers 5 reads rope_parameters and layer_types (it converts the older theta keys,
            # which transformers 4 reads): both, so neither falls back to its default thetas.
            "global_rope_theta": config.rope_theta, "local_rope_theta": config.local_rope_theta,
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": config.rope_theta},
                                "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rope_theta}},
            "layer_types": ["full_attention" if config.is_global_layer(i) else "sliding_attention"
                            for i in range(config.num_hidden_layers)],
            # No window: every layer global, one in 1 (local_attention then unread; its default).
            "local_attention": config.attention_window or 128,
            "global_attn_every_n_layers": config.global_attention_every if config.attention_window else 1,
            "classifier_pooling": config.pooler, "embedding_dropout": config.hidden_dropout_prob,
            "mlp_dropout": config.hidden_dropout_prob, "attention_dropout": config.attention_probs_dropout_prob,
            "classifier_dropout": config.hidden_dropout_prob,
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
        table += modern_pooler(config)
    if "classifier" in heads:
        table += linear(("classifier",), "classifier", h, num_labels, bias=True)
    if "qa_outputs" in heads:  # Hugging Face names its start/end layer "classifier" too
        table += linear(("qa_outputs",), "classifier", h, 2, bias=True)
    return table


def modern_pooler(config: BertConfig) -> list[Variable]:
    """bertjax's "cls"/"mean" pooler: ModernBERT's classification head ("head.dense", "head.norm")."""
    h = config.hidden_size
    return ([Variable(("bert", "pooler", "kernel"), (h, h), "head.dense.weight", "")]
            + [Variable(("bert", "pooler", "bias"), (h,), "head.dense.bias", "")] * config.use_bias
            + [Variable(("bert", "pooler_norm", "scale"), (h,), "head.norm.weight", "")]
            + [Variable(("bert", "pooler_norm", "bias"), (h,), "head.norm.bias", "")] * config.norm_bias)


def _fresh_pooler(config: BertConfig) -> dict[str, Any]:
    """bertjax's "cls"/"mean" pooler, initialised as a new classification head is (a fixed seed)."""
    h, std = config.hidden_size, init_stddev(config, "out")
    kernel = np.clip(np.random.default_rng(0).normal(0.0, std, (h, h)), -2 * std, 2 * std).astype(np.float32)
    pooler = {"kernel": kernel, **({"bias": np.zeros(h, np.float32)} if config.use_bias else {})}
    norm = {"scale": np.ones(h, np.float32), **({"bias": np.zeros(h, np.float32)} if config.norm_bias else {})}
    return {"pooler": pooler, "pooler_norm": norm}


def load_modernbert(path: str, hf_config: dict[str, Any]) -> tuple[BertConfig, dict[str, Any]]:
    """A Hugging Face ModernBERT directory (config.json with model_type "modernbert", model.safetensors)
    -> (config, params): ModernBertModel, ModernBertForMaskedLM (its decoder tied to the
    embeddings), ModernBertForSequenceClassification, ModernBertForTokenClassification or
    ModernBertForQuestionAnswering. Hugging Face's classes all name their head (dense,
    activation, norm) `head.*`, so a sequence classifier made from any of them starts from that
    head: bertjax's pooler does too (the masked-LM head's transform, or the token transform);
    from ModernBertModel, which has none, it starts fresh."""
    config = modernbert_config(hf_config, fileio.join(path, "config.json"))
    architectures = hf_config.get("architectures") or ["ModernBertModel"]
    if len(architectures) != 1 or architectures[0] not in MODERNBERT_ARCHITECTURES:
        raise ValueError(f"{fileio.join(path, 'config.json')}: architectures {architectures} is not one of "
                         f"{sorted(MODERNBERT_ARCHITECTURES)}")
    heads, token_level = MODERNBERT_ARCHITECTURES[architectures[0]]
    file, stored = read_weights(path)
    tensors = {key.removeprefix("model."): value for key, value in stored.items()}
    decoder = tensors.pop("decoder.weight", None)
    if decoder is not None and not np.array_equal(decoder, tensors.get("embeddings.tok_embeddings.weight")):
        raise ValueError(f"{file}: 'decoder.weight' is not tied to the embeddings; bertjax ties the MLM decoder")
    fused_rows = {"attn.Wqkv": 3 * config.hidden_size, "mlp.Wi": 2 * config.intermediate_size}
    for fused, parts in _FUSED.items():
        for name in [n for n in tensors if re.search(rf"(^|\.){re.escape(fused)}\.(weight|bias)$", n)]:
            expected = (fused_rows[fused], config.hidden_size) if name.endswith("weight") else (fused_rows[fused],)
            if tensors[name].shape != expected:  # (split, a part's shape would name no key of the file)
                key = f"model.{name}" if f"model.{name}" in stored else name
                raise ValueError(f"{file}: tensor {key!r} has shape {tensors[name].shape}, expected {expected} "
                                 f"({' | '.join(parts)}, as config.json's sizes give)")
            for k, part in enumerate(np.split(tensors.pop(name), len(parts))):
                tensors[f"{name}#{k}"] = part
    num_labels = tensors["classifier.bias"].shape[0] if "classifier.bias" in tensors else 2
    params = gather_params(modernbert_variable_table(config, heads, num_labels, token_level), tensors, "hf", file)
    if heads != ("classifier",) or token_level:
        params["bert"].update(_pooler_from_head(params) or _fresh_pooler(config))
    return config, params


def _pooler_from_head(params: dict[str, Any]) -> dict[str, Any] | None:
    """bertjax's pooler as Hugging Face's ModernBertForSequenceClassification loads its `head.*`
    from another class's checkpoint: the masked-LM head's transform, or the token transform
    (copies); None without either."""
    if "mlm" in params:
        dense, norm = params["mlm"]["transform"], params["mlm"]["transform_norm"]
    elif TOKEN_TRANSFORM[0] in params:
        dense, norm = params[TOKEN_TRANSFORM[0]], params[TOKEN_TRANSFORM[1]]
    else:
        return None
    return {"pooler": {name: np.array(value) for name, value in dense.items()},
            "pooler_norm": {name: np.array(value) for name, value in norm.items()}}


def export_modernbert(config: BertConfig, params: dict[str, Any], out_dir: str, architecture: str | None = None,
                      label_names: list[str] | None = None, tokenizer_path: str | None = None,
                      do_lower_case: bool | None = None, extra_config: dict[str, Any] | None = None
                      ) -> tuple[str, ...]:
    """Writes a bertjax modern encoder (and its "mlm", "classifier" or "qa_outputs" head; a
    "classifier" after the token transform is a token classifier) in the Hugging Face ModernBERT
    layout: config.json + model.safetensors (the MLM decoder tied, not stored), and the
    tokenizer at `tokenizer_path` if given: a tokenizer.json (which holds its own casing) or a
    vocab.txt (with tokenizer_config.json when `do_lower_case` is known). A pre-training run's
    NSP head and pooler have no place in ModernBertForMaskedLM: they are left out, with a
    warning. Returns the heads written."""
    hf_config = {**modernbert_hf_config(config), **(extra_config or {})}
    params = plain_params(params)
    if MODERN_FOR_BERT.get(architecture, architecture) == "ModernBertModel" and set(params) - {"bert"}:
        # (the encoder alone, as BertModel writes a BERT's: a walkthrough was told to name a head's class)
        logging.warning("export_huggingface: ModernBertModel holds the encoder alone: %s left out",
                        ", ".join(sorted(set(params) - {"bert"})))
        params = {"bert": params["bert"]}
    left_out_nsp = params.pop("nsp") if {"mlm", "nsp"} <= set(params) else None
    heads, num_labels = param_heads(params, config, "export_huggingface")
    token_level = TOKEN_TRANSFORM[0] in params
    if architecture and architecture.startswith("Bert") and architecture not in MODERN_FOR_BERT:
        raise ValueError(f"export_huggingface: Hugging Face has no ModernBERT class for {architecture}; keep the "
                         "model in bertjax's layout, or export a SavedModel (launch/export_model.py)")
    wanted = MODERNBERT_ARCHITECTURES.get(MODERN_FOR_BERT.get(architecture, architecture))
    if wanted and wanted[1] and not token_level and heads == wanted[0]:
        raise ValueError(f"export_huggingface: {architecture} reads every token through ModernBERT's head (dense, "
                         "activation, norm), which this model lacks: it was fine-tuned with "
                         "config.model.token_transform=False; keep it in bertjax's layout")
    if len(heads) > 1 or (token_level and not heads) or (heads == ("qa_outputs",) and not token_level):
        raise ValueError(f"export_huggingface: ModernBERT's Hugging Face classes hold one masked-LM, classification, "
                         f"token-classification or question-answering head, not {sorted(set(params) - {'bert'})}")
    held = (heads, token_level)
    architecture = MODERN_FOR_BERT.get(architecture, architecture) or next(
        name for name, classes_heads in MODERNBERT_ARCHITECTURES.items() if classes_heads == held)
    if MODERNBERT_ARCHITECTURES.get(architecture) != held:
        fitting = sorted(name for name, classes_heads in MODERNBERT_ARCHITECTURES.items() if classes_heads == held)
        raise ValueError(f"export_huggingface: architecture {architecture!r} does not hold the heads "
                         f"{sorted(set(params) - {'bert'})}; expected {' or '.join(fitting) or 'no ModernBERT class'}")
    if architecture == "ModernBertForMultipleChoice" and num_labels != 1:  # its classifier scores each choice
        raise ValueError(f"export_huggingface: ModernBertForMultipleChoice has a classifier of one output (a score "
                         f"per choice); this one has {num_labels}")
    if left_out_nsp is not None:  # (said once nothing refuses the export: a walkthrough saw it before a refusal)
        logging.warning("export_huggingface: ModernBertForMaskedLM holds no next-sentence head or pooler; "
                        "the run's 'nsp' head and pooler are not written")
    prefix = "model." if heads else ""
    tensors = {}
    for var in modernbert_variable_table(config, heads, num_labels, token_level):
        value = np.asarray(get_param(params, var.path, "export_huggingface"), dtype=np.float32)
        if value.shape != var.shape:  # before the fused products are put together from their parts
            raise ValueError(f"export_huggingface: params {'/'.join(var.path)} has shape {value.shape}, "
                             f"expected {var.shape}")
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
        hf_config.update(special_token_ids(tokenizer))
    if "pad_token_id" not in hf_config and config.vocab_size <= _HF_DEFAULT_PAD_ID:
        logging.warning("export_huggingface: no tokenizer says the special tokens' ids, so config.json has "
                        "transformers' defaults (pad %d), outside this vocabulary of %d: torch refuses such a "
                        "padding index; give the vocabulary", _HF_DEFAULT_PAD_ID, config.vocab_size)
    write_huggingface_files(out_dir, tensors, hf_config, num_labels if "classifier" in heads else 0, label_names)
    if tokenizer_path:  # a tokenizer.json (a bertjax run saves it as hf_tokenizer.json) or a vocab.txt
        wordpiece = not tokenizer_path.endswith(".json")
        model_max_length = trained_length(hf_config) or config.max_position_embeddings
        if wordpiece:
            fileio.copy(tokenizer_path, fileio.join(out_dir, "vocab.txt"))
        else:
            fileio.write_bytes(fileio.join(out_dir, "tokenizer.json"),
                               tokenization.hf_tokenizer_json(tokenizer).encode("utf-8"))
        if wordpiece:  # (always: its tokenizer must give no token_type_ids)
            write_tokenizer_config(out_dir, do_lower_case, model_max_length, token_types=False)
        else:
            write_fast_tokenizer_config(out_dir, tokenizer, model_max_length, token_types=False)
    return heads

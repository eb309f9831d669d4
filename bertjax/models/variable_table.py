"""The variables of a BERT checkpoint: one table from bertjax's params to the names Hugging Face
and Google's TF release give them, shared by import and export (bertjax.models.convert), and the
params-tree helpers every layout uses.

bertjax params (unrolled layout, numpy float32; H = hidden, V = vocab, I = intermediate)::

    {"bert": <BertEncoder tree, see bert.py>,
     "mlm": {"transform": {kernel [H, H], bias}, "transform_norm": {scale, bias}, "output_bias": [V]},
     "nsp": {kernel [H, 2], bias [2]},
     "classifier": {kernel [H, num_labels], bias},
     "qa_outputs": {kernel [H, 2], bias [2]}}

Only the heads a checkpoint holds appear.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import numpy as np

from bertjax.models.bert import unstack_layers
from bertjax.models.config import BertConfig
from bertjax.models.heads import FEATURE_HEADS, TOKEN_TRANSFORM

HEADS = ("mlm", "nsp", "classifier", "qa_outputs")

# Config keys shared by BertConfig, Hugging Face config.json and TF bert_config.json.
ARCH_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
             "max_position_embeddings", "type_vocab_size", "initializer_range")


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


def set_param(tree: dict, path: tuple[str, ...], value: np.ndarray) -> None:
    """tree[path[0]][path[1]]... = value, making the dicts on the way."""
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def get_param(tree: dict, path: tuple[str, ...], source: str) -> np.ndarray:
    """tree[path[0]][path[1]]... as an array; a ValueError naming `source` and the path if absent."""
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            raise ValueError(f"{source}: params lack {'/'.join(path)}")
        node = node[key]
    return np.asarray(node)


_SHOWN = 8  # problems (and unexpected names) an error lists


def gather_params(table: list[Variable], tensors: dict[str, np.ndarray], fmt: str, source: str
                  ) -> dict[str, Any]:
    """Picks every variable of `table` out of `tensors` ({name in format fmt: array}) into
    a bertjax params tree. fmt: "hf" or "tf". Raises one error listing all missing,
    mis-shaped and unexpected variables.
    """
    params, problems = {}, []
    for var in table:
        name = var.hf if fmt == "hf" else var.tf
        transposed = var.hf_transposed if fmt == "hf" else var.tf_transposed
        expected = var.shape[::-1] if transposed else var.shape
        if name not in tensors:  # a fused tensor's part ('attn.Wqkv.bias#0') by the file's own name, once
            missing = (f"missing variable {name!r} (expected shape {expected})" if "#" not in name
                       else f"missing variable {name.split('#')[0]!r}")
            if missing not in problems:
                problems.append(missing)
        elif tensors[name].shape != expected:
            problems.append(f"variable {name!r} has shape {tensors[name].shape}, expected {expected}")
        elif np.asarray(tensors[name]).dtype.kind in "biu":  # (a quantized checkpoint's ints: cast, garbage weights)
            problems.append(f"variable {name!r} holds {tensors[name].dtype} values, expected "
                            "floating-point weights (a quantized checkpoint?)")
        else:
            value = np.asarray(tensors[name], dtype=np.float32)
            set_param(params, var.path, np.ascontiguousarray(value.T) if transposed else value)
    unexpected = sorted(set(tensors) - {var.hf if fmt == "hf" else var.tf for var in table})
    if unexpected:  # first: under another prefix (distilbert.*) every variable is missing, and these say why
        problems.insert(0, f"unexpected variables (not part of a BERT of this config): {unexpected[:_SHOWN]}"
                        + (f" and {len(unexpected) - _SHOWN} more" if len(unexpected) > _SHOWN else ""))
    if problems:  # (a size that differs mis-shapes every layer's variables: the first ones tell)
        shown = problems[:_SHOWN] + ([f"... and {len(problems) - _SHOWN} more"] if len(problems) > _SHOWN else [])
        # (";" ends each: a launcher prints the message on one line)
        raise ValueError(f"{source}: checkpoint does not match the BERT config:\n  " + ";\n  ".join(shown))
    return params


def is_modern(config: BertConfig) -> bool:
    """Whether `config` is the modern encoder (any switch off BERT's), saved in ModernBERT's layout."""
    return (config.position_embedding, config.norm_placement, config.gated_mlp) != ("absolute", "post", False)


def plain_params(params: dict[str, Any]) -> dict[str, Any]:
    """A bare encoder tree (with "embeddings") or a full {"bert": ...} tree, possibly with
    logical-partitioning boxes or scanned layers -> a plain {"bert": unrolled tree, ...}."""
    params = nn.meta.unbox(params)
    params = {"bert": params} if "embeddings" in params else dict(params)
    if "layers" in params.get("bert", {}).get("encoder", {}):
        params["bert"] = unstack_layers(params["bert"])
    return params


def param_heads(params: dict[str, Any], config: BertConfig, export: str = "") -> tuple[tuple[str, ...], int]:
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
                             "the encoder alone is written by --architecture=BertModel (ModernBertModel for the "
                             "modern encoder) in the Hugging Face format")
        return (), 2
    num_labels = np.shape(params["classifier"]["bias"])[0] if "classifier" in params else 2
    return tuple(head for head in HEADS if head in params), num_labels

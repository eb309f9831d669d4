"""BertConfig: the model's hyperparameters, validated at construction."""

from __future__ import annotations

import dataclasses
import json
import math
import logging
from typing import Any

ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")
ATTENTION_IMPLS = ("xla", "fused", "cudnn", "splash")
DTYPES = ("float32", "bfloat16", "float16")
MATMUL_PRECISIONS = ("default", "bfloat16")
FEATURE_COMBINES = ("last", "concat", "weighted_sum")
TAGGING_HEADS = ("linear", "bilstm")
POSITION_EMBEDDINGS = ("absolute", "rope")
NORM_PLACEMENTS = ("post", "pre")
POOLERS = ("tanh", "cls", "mean")
CHOICES = {"position_embedding": POSITION_EMBEDDINGS, "norm_placement": NORM_PLACEMENTS, "pooler": POOLERS,
           "hidden_act": ACTIVATIONS, "dtype": DTYPES, "param_dtype": DTYPES, "matmul_precision": MATMUL_PRECISIONS,
           "remat_policy": REMAT_POLICIES, "attention_impl": ATTENTION_IMPLS, "feature_combine": FEATURE_COMBINES,
           "tagging_head": TAGGING_HEADS}  # a field's allowed values

# What a checkpoint's weights mean: a run initialised from a checkpoint takes these from it,
# and a value the config sets explicitly must agree with the checkpoint's (but a rotary
# model's max_position_embeddings, which holds no weights: a context extension raises it).
ARCHITECTURE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                       "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
                       "position_embedding", "attention_window", "global_attention_every", "norm_placement",
                       "use_bias", "norm_bias", "gated_mlp", "pooler")
# Rotary thetas: the checkpoint's unless the config sets them, as a context extension does (a longer
# run with a larger theta continues from the shorter one's weights).
ROPE_FIELDS = ("rope_theta", "local_rope_theta")
# Fields a checkpoint also records, used when the config leaves them unset.
_INHERITED_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "token_transform",
                     *ROPE_FIELDS)

# What a task head reads and is: a head reused from a checkpoint (config.reuse_head) fits only these.
HEAD_FIELDS = ("feature_layers", "feature_combine", "tagging_head", "lstm_hidden_size")

# (layers, hidden, heads, intermediate) of the released models (google-research/bert's README).
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "medium": (8, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
}
# The modern encoder (ModernBERT, arXiv 2412.13663): its switches, and its sizes as above.
MODERN_ARCHITECTURE: dict[str, Any] = dict(
    position_embedding="rope", rope_theta=160_000.0, local_rope_theta=10_000.0, attention_window=128,
    global_attention_every=3, norm_placement="pre", use_bias=False, norm_bias=False, gated_mlp=True,
    pooler="cls", token_transform=True, type_vocab_size=0, layer_norm_eps=1e-5, hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, max_position_embeddings=8192, vocab_size=50368)
MODERN_PRESETS: dict[str, tuple[int, int, int, int]] = {
    "modernbert-tiny": (4, 128, 2, 192),   # CPU tests: one global, two local, one global layer
    "modernbert-mini": (6, 256, 4, 384),
    "modernbert-base": (22, 768, 12, 1152),
    "modernbert-large": (28, 1024, 16, 2624),
}


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """BERT hyperparameters. Defaults are BERT-base uncased, faithful to the original.

    `hidden_act`: "gelu" is the exact erf form (Hugging Face parity), "gelu_tanh" the
    original TF release's approximation. `dtype` is the compute dtype, `param_dtype`
    the stored (master) dtype. `matmul_precision` "bfloat16": the dense layers (and the
    BiLSTM head's products) multiply bfloat16-rounded operands and accumulate in
    float32 (what a TPU does with float32
    operands by default; on a CPU with AMX-BF16 faster than float32, see
    bertjax.models.bf16_matmul); "default": the products in `dtype`, as XLA does them.
    `scan_layers`/`remat_policy`/`attention_impl` change how the encoder is compiled,
    never what it computes from given weights (a run from scratch with `scan_layers` draws
    its layers' initial weights otherwise: one random key split over the stacked layers).

    What a fine-tuning task head reads (the feature-based approach, BERT paper section 5.3;
    see bertjax.models.heads): `feature_layers`, comma-separated indices into the encoder's
    hidden states [L + 1, ...] (0 = the embeddings, -1 = the last layer), combined by
    `feature_combine` ("last": the one layer named; "concat": along the hidden axis;
    "weighted_sum": a learned softmax-weighted sum, as ELMo); `tagging_head` "bilstm" puts
    a two-layer bidirectional LSTM of `lstm_hidden_size` units per direction under the
    token classifier. The defaults are the plain fine-tuning heads (pre-training ignores these).

    The modern encoder (ModernBERT) is these switches, the defaults being the original BERT:
    `position_embedding` "absolute" (a learned table) or "rope" (rotary: `rope_theta` in
    global layers, `local_rope_theta` in local ones); `attention_window` 0 (every layer sees
    every token) or w > 0: layer i sees the whole row when i % `global_attention_every` == 0,
    else only keys within w // 2 positions; `norm_placement` "post" (LayerNorm after each
    residual sum) or "pre" (before each sublayer, the first layer's attention excepted as the
    embeddings are normalised, and a final norm); `use_bias` / `norm_bias` for the dense
    layers' and norms' biases (task classifiers always have one); `gated_mlp` (GeGLU with
    "gelu", SwiGLU with "silu": act(x W) * (x V)); `pooler` "tanh" (BERT's dense + tanh of
    [CLS]) or "cls" / "mean" (ModernBERT's head: dense, activation, norm over [CLS] or the
    mean of the real tokens); `token_transform`: the tagging and span-QA heads put ModernBERT's
    dense, activation, norm over every token before their output layer (its
    ModernBertForTokenClassification / ModernBertForQuestionAnswering head; BERT's have none);
    `type_vocab_size` 0 for no segment embeddings. Presets
    "modernbert-base" / "-large" (and "-tiny", "-mini" for CPUs) set them all (MODERN_ARCHITECTURE).
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    dtype: str = "float32"
    param_dtype: str = "float32"
    matmul_precision: str = "default"
    scan_layers: bool = False
    remat_policy: str = "none"
    attention_impl: str = "xla"
    feature_layers: str = "-1"
    feature_combine: str = "last"
    tagging_head: str = "linear"
    lstm_hidden_size: int = 768
    position_embedding: str = "absolute"
    rope_theta: float = 10_000.0
    local_rope_theta: float = 10_000.0
    attention_window: int = 0
    global_attention_every: int = 1
    norm_placement: str = "post"
    use_bias: bool = True
    norm_bias: bool = True
    gated_mlp: bool = False
    pooler: str = "tanh"
    token_transform: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "lstm_hidden_size", "global_attention_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BertConfig.{name} must be a positive int, got {value!r}")
        for name in ("type_vocab_size", "attention_window"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"BertConfig.{name} must be an int >= 0, got {value!r}")
        if self.attention_window % 2:
            raise ValueError(f"BertConfig.attention_window must be even (w // 2 keys each side), "
                             f"got {self.attention_window}")
        for name in ("use_bias", "norm_bias", "gated_mlp", "token_transform"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"BertConfig.{name} must be a bool, got {getattr(self, name)!r}")
        self._check_choice("position_embedding")
        self._check_choice("norm_placement")
        self._check_choice("pooler")
        if self.position_embedding == "rope" and self.head_dim % 2:
            raise ValueError(f"BertConfig.position_embedding='rope' needs an even head size, got {self.head_dim}")
        if self.scan_layers and (self.attention_window or self.norm_placement == "pre"):
            raise ValueError("BertConfig.scan_layers needs identical layers: not with attention_window > 0 (local and "
                             "global layers differ) or norm_placement='pre' (the first layer has no attention norm)")
        for name in ("rope_theta", "local_rope_theta"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
                raise ValueError(f"BertConfig.{name} must be a positive number, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"BertConfig.num_attention_heads ({self.num_attention_heads})")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):  # (NaN fails both comparisons: refused)
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
                raise ValueError(f"BertConfig.{name} must be a positive number, got {value!r}")
        self._check_choice("hidden_act")
        self._check_choice("dtype")
        self._check_choice("param_dtype")
        self._check_choice("matmul_precision")
        self._check_choice("remat_policy")
        self._check_choice("attention_impl")
        if self.attention_impl != "xla" and self.attention_probs_dropout_prob > 0:
            raise ValueError(
                f"BertConfig.attention_impl={self.attention_impl!r} needs attention_probs_dropout_prob=0 "
                f"(got {self.attention_probs_dropout_prob}); use attention_impl='xla' for attention dropout")
        if not isinstance(self.scan_layers, bool):
            raise ValueError(f"BertConfig.scan_layers must be a bool, got {self.scan_layers!r}")
        self._check_choice("feature_combine")
        self._check_choice("tagging_head")
        layers = self.feature_layer_indices
        if self.feature_combine == "last" and len(layers) != 1:
            raise ValueError(f"BertConfig.feature_layers={self.feature_layers!r} names "
                             f"{len(layers)} layers but feature_combine='last' reads one: set config.model."
                             "feature_combine to 'concat' or 'weighted_sum'")

    @property
    def feature_layer_indices(self) -> tuple[int, ...]:
        """`feature_layers` as distinct indices in [0, L] of the hidden states [L + 1, ...]."""
        count = self.num_hidden_layers + 1
        last_layers = ",".join(str(-k) for k in range(1, min(4, count - 1) + 1))  # (this model's own example)
        expected = (f"BertConfig.feature_layers must be distinct comma-separated "
                    f"indices in [-{count}, {count - 1}] of the embeddings and the {count - 1} layers (e.g. "
                    f"{last_layers}), got {self.feature_layers!r}")
        try:
            indices = tuple(int(part) for part in str(self.feature_layers).split(","))
        except ValueError:
            raise ValueError(expected) from None
        if any(not -count <= index < count for index in indices):
            raise ValueError(expected)
        normalised = tuple(index % count for index in indices)
        if len(set(normalised)) != len(normalised):
            first, again = next((a, b) for i, (a, m) in enumerate(zip(indices, normalised))
                                for b, n in zip(indices[i + 1:], normalised[i + 1:]) if m == n)
            twice = f"layer {first} is given twice" if first == again else f"{first} and {again} are one layer"
            raise ValueError(f"{expected}: {twice} (of the {count} hidden states, the embeddings' first)")
        return normalised

    @property
    def feature_based(self) -> bool:
        """True when a task head reads other features than the plain heads (see the docstring)."""
        return (self.feature_layer_indices != (self.num_hidden_layers,) or self.feature_combine != "last"
                or self.tagging_head != "linear")

    def _check_choice(self, name: str):
        value = getattr(self, name)
        if value not in CHOICES[name]:
            raise ValueError(f"BertConfig.{name} must be one of {CHOICES[name]}, got {value!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def describe(self) -> str:
        """The architecture in a few words, for a run's start-up line: "4 layers of 128 (2 heads),
        rotary positions, a 16-token window in 2 of 4 layers, pre-norm, a gated MLP"."""
        layers, heads = self.num_hidden_layers, self.num_attention_heads
        parts = [f"{layers} layer{'s' * (layers > 1)} of {self.hidden_size} ({heads} head{'s' * (heads > 1)})"]
        if self.position_embedding != "absolute":
            parts.append("rotary positions")
        local = sum(not self.is_global_layer(i) for i in range(self.num_hidden_layers))
        if self.attention_window and local:
            parts.append(f"a {self.attention_window}-token window in {local} of {self.num_hidden_layers} layers")
        if self.norm_placement != "post":
            parts.append(f"{self.norm_placement}-norm")
        if self.gated_mlp:
            parts.append("a gated MLP")
        return ", ".join(parts)

    @property
    def length_multiple(self) -> int:
        """Every batch's sequence length must be a multiple of this: splash's kernel tiles the
        sequence in blocks of 128 tokens; the other paths take any length."""
        return 128 if self.attention_impl == "splash" else 1

    def check_runnable(self, length: int, key: str = "config.data.max_seq_length") -> None:
        """ValueError naming `key` when `length` is not a whole number of `length_multiple`s, or
        when attention_impl's kernel does not run on this backend or in this dtype (checked
        with the length, at start-up: the kernel's own error comes at the first compile, as a
        traceback; not in __post_init__, as heads build float32 copies of the config)."""
        if length % self.length_multiple:
            raise ValueError(f"{key}={length} must be a multiple of {self.length_multiple} with "
                             f"config.model.attention_impl={self.attention_impl!r}")
        if self.attention_impl == "cudnn" and self.dtype == "float32":  # (heads' float32 logits attend nothing)
            raise ValueError("config.model.attention_impl='cudnn' needs config.model.dtype bfloat16 or float16 "
                             "(cuDNN's fused attention has no float32 form); use 'xla' for float32")
        import jax

        backend = jax.default_backend()
        if (self.attention_impl == "cudnn" and backend != "gpu") or (self.attention_impl == "splash"
                                                                     and backend == "gpu"):
            raise ValueError(f"config.model.attention_impl={self.attention_impl!r} does not run on {backend}: "
                             f"'cudnn' is for GPUs, 'splash' for TPUs, 'xla' for any")

    def is_global_layer(self, index: int) -> bool:
        """Whether layer `index` attends over the whole row (see attention_window)."""
        return self.attention_window == 0 or index % self.global_attention_every == 0

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "BertConfig":
        """A released size (tiny, mini, small, medium, base, large; modernbert-tiny, -mini,
        -base, -large with MODERN_ARCHITECTURE) with optional overrides."""
        if name not in PRESETS and name not in MODERN_PRESETS:
            raise ValueError(f"unknown BERT preset {name!r}; expected one of {sorted(PRESETS) + sorted(MODERN_PRESETS)}")
        layers, hidden, heads, intermediate = PRESETS.get(name) or MODERN_PRESETS[name]
        sizes = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     intermediate_size=intermediate, **(MODERN_ARCHITECTURE if name in MODERN_PRESETS else {}))
        if name == "modernbert-tiny":
            sizes.update(attention_window=16, max_position_embeddings=1024)
        return cls(**{**sizes, **overrides})

    def replace(self, **changes: Any) -> "BertConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config", keys: dict[str, str] | None = None
                  ) -> "BertConfig":
        """Builds a config from a dict, rejecting unknown keys and bad values with the source named;
        keys: {field: the name `source` gives it} for the errors (a Hugging Face config.json's)."""
        check_known_keys(values, source)
        try:
            return cls(**values)
        except ValueError as e:
            message = str(e)
            for field, key in (keys or {}).items():
                message = message.replace(f"BertConfig.{field} ", f"{key} ")
            raise ValueError(f"{source}: {message.replace('BertConfig.', '')}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def check_config_object(values: Any, source: str) -> None:
    """ValueError unless a config file's `values` are a JSON object (its keys)."""
    if not isinstance(values, dict):
        raise ValueError(f"{source}: expected a JSON object of config keys, got a {type(values).__name__}")


def check_known_keys(values: dict[str, Any], source: str) -> None:
    """ValueError naming `source` and the keys of `values` that are no BertConfig field."""
    known = {field.name for field in dataclasses.fields(BertConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{source}: unknown BertConfig keys {unknown}; known keys are {sorted(known)}")


def this_host() -> dict[str, bool]:
    """`resolve`'s platform arguments for the devices this process runs on."""
    import jax

    from bertjax.models import bf16_matmul

    return {"accelerator": jax.default_backend() != "cpu", "bf16_matmul_units": bf16_matmul.has_amx_bf16()}


def checkpoint_fields(checkpoint: BertConfig) -> dict[str, Any]:
    """What a run starting from `checkpoint` takes from it: its architecture, and its dropout,
    initialisation and rotary thetas unless the run sets them."""
    return {name: getattr(checkpoint, name) for name in ARCHITECTURE_FIELDS + _INHERITED_FIELDS}


def resolve(values: dict[str, Any], *, checkpoint: BertConfig | None = None, preset: str | None = None,
            accelerator: bool = False, bf16_matmul_units: bool = False, source: str = "config.model") -> BertConfig:
    """A run's BertConfig from a config section in which None means "not set".

    values: BertConfig fields (and optionally "preset"); None or absent = not set.
    checkpoint: the config of the weights the run starts from, if any. Architecture fields
      (ARCHITECTURE_FIELDS) come from it; an explicitly set value that differs is an error
      naming the field (a rotary checkpoint's max_position_embeddings and thetas may change,
      logged). Dropout and initializer_range come from it when not set. A set value that
      would change nothing (a theta with learned positions, a layer pattern without a
      window) is an error too.
    preset: without a checkpoint, unset sizes come from this released size (else BertConfig's).
    accelerator: `dtype` unset means bfloat16 compute on TPU/GPU, float32 on CPU
      (parameters stay float32 either way unless `param_dtype` says otherwise).
    bf16_matmul_units: the run trains on a CPU with bfloat16 matrix units (AMX):
      `matmul_precision` unset means "bfloat16" there, "default" elsewhere.
    """
    values = {key: value for key, value in values.items() if value is not None and key != "preset"}
    check_known_keys(values, source)
    for name, choices in CHOICES.items():  # (before the checkpoint's: a typo is no other architecture)
        if name in values and values[name] not in choices:
            raise ValueError(f"{source}.{name} must be one of {choices}, got {values[name]!r}")
    if checkpoint is not None:
        rotary = checkpoint.position_embedding == "rope"
        for name in ARCHITECTURE_FIELDS:
            if rotary and name == "max_position_embeddings":  # no weights: a context extension may raise it
                continue
            if name == "pooler" and {values.get(name), checkpoint.pooler} <= {"cls", "mean"}:
                continue  # the same head weights over the [CLS] vector or the tokens' mean (classifier_pooling)
            if name in values and values[name] != getattr(checkpoint, name):
                raise ValueError(f"{source}.{name}={values[name]!r} but the checkpoint has {name}="
                                 f"{getattr(checkpoint, name)!r}; leave {source}.{name} unset to take the checkpoint's")
        base = BertConfig(**checkpoint_fields(checkpoint))
        for name in (*ROPE_FIELDS, "max_position_embeddings"):
            if rotary and values.get(name, getattr(checkpoint, name)) != getattr(checkpoint, name):
                logging.getLogger(__name__).warning(
                    "%s.%s=%g replaces the checkpoint's %g (as a context extension does)", source, name, values[name],
                    getattr(checkpoint, name))
    else:
        base = BertConfig.preset(preset) if preset else BertConfig()
    if "dtype" not in values:
        values["dtype"] = "bfloat16" if accelerator else "float32"
    if "matmul_precision" not in values:
        values["matmul_precision"] = "bfloat16" if bf16_matmul_units and not accelerator else "default"
    try:
        config = base.replace(**values)
    except (TypeError, ValueError) as e:  # named by the key the user sets, not the dataclass's field
        message = str(e).replace("BertConfig.", f"{source}.")
        raise ValueError(message if message.startswith(f"{source}.") else f"{source}: {message}") from None
    if values.get("attention_window") and config.global_attention_every == 1:  # (an import may say so: all global)
        raise ValueError(f"{source}.attention_window={config.attention_window} has no effect with "
                         f"global_attention_every=1 (every layer attends globally); set "
                         f"{source}.global_attention_every (ModernBERT's: 3)")
    # A setting that would change nothing is refused: the run would not be the one asked for.
    for name, why in idle_fields(config).items():
        if name in values and values[name] != getattr(BertConfig(), name):
            raise ValueError(f"{source}.{name}={values[name]!r} has no effect with {why}")
    return config


def idle_fields(config: BertConfig) -> dict[str, str]:
    """The fields that change nothing in `config` -> why: the layer pattern and local theta
    without a window, the thetas with learned positions, the LSTM's size without the BiLSTM."""
    idle = {}
    if config.attention_window == 0:
        idle["global_attention_every"] = "attention_window=0 (every layer global)"
    if config.attention_window == 0 or config.position_embedding != "rope":
        idle["local_rope_theta"] = (f"attention_window={config.attention_window} and position_embedding="
                                    f"{config.position_embedding!r} (local layers with rotary positions only)")
    if config.position_embedding != "rope":
        idle["rope_theta"] = f"position_embedding={config.position_embedding!r} (rotary positions only)"
    if config.tagging_head != "bilstm":
        idle["lstm_hidden_size"] = f"tagging_head={config.tagging_head!r} (the BiLSTM tagging head's size)"
    return idle

"""Using a trained model from Python: load it once, then predict, fill in [MASK]s or extract
features on raw text.

    import bertjax
    model = bertjax.load_model("workdir/reviews")       # any path bertjax.inference.model_source resolves
    model.predict(["the movie was great fun"])
    # [{"label": "good", "probability": 0.98, "probabilities": {"bad": 0.02, "good": 0.98}}]
    lm = bertjax.load_model("workdir/pretrain")         # a checkpoint with a masked-LM head
    lm.fill_mask(["paris is the [MASK] of france."], top_k=3)
    # [[[{"token": "capital", "text": "capital", "token_id": 3007, "probability": 0.91}, ...]]]
    #   one list per [MASK]
    model.features(["a sentence", "a first ||| and a second"], layers=(-1, -2), pooling="mean")

Every call tokenizes its inputs in bulk, sorts them by length into batches padded only to
the smallest bucket that holds them (`inference_buckets`: 8, 16, 24, 32, 48, ...), runs each
batch through a function jit-compiled once per (purpose, bucket, rows: batch_size, or fewer
for a call of fewer inputs) and data-parallel over all local devices, and returns results in
input order. `precision` (load_model) chooses the products: "float32" (the default on CPU),
or "bfloat16" (the default on TPU/GPU) -- bfloat16 operands with float32 sums: on TPU/GPU
the whole network computes in bfloat16 (float32 parameters); on a CPU the activations stay
float32 and only the dense layers' products round their operands (`bf16_matmul`: fast on
CPUs with AMX-BF16 or AVX512_BF16, emulated and slower elsewhere).

`predict` on a fine-tuned model: inputs are parsed, featurized and post-processed by the
model's task family (bertjax/tasks/, the `FAMILY` of each module), with the lengths the run
trained with; bad inputs raise ValueError naming the input's position (1-based):

  classification  "text", "text_a ||| text_b", (text_a, text_b) or {"text_a"/"text", "text_b"}
                  -> {"label", "probability", "probabilities": {label: p}}; regression -> {"value"};
                  "truncated": true when the input was longer than max_seq_length (its start decided)
  tagging         "a raw sentence" (split into words as BERT's basic tokenizer does) or a list of
                  words -> {"words", "tags", "entities": [{"type", "text", "first_word",
                  "last_word", "start", "end" (character offsets; None for word lists)}]}
  squad           {"question", "context", "id" (optional)} -> {"id", "answer", "start", "end"
                  (character offsets into the context; -1 for no answer), "probability",
                  "null_odds" (v2.0 runs)}; options n_best_size, max_answer_length,
                  null_score_diff_threshold
  choice          {"context", "choices": [...]} -> {"choice" (index), "text", "probabilities"}
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from typing import Any, Callable, Iterable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from bertjax import sharding, tasks, tokenization
from bertjax.inference import batch_predict, model_source
from bertjax.models.config import BertConfig
from bertjax.runtime import compilation_cache, fileio
from bertjax.runtime.console import PROCESS_SPECIFIC
from bertjax.tasks import batching
from bertjax.tasks.common import Split, encode_pairs
from bertjax.tasks.family import Family, at_position, parse_checked
from bertjax.tasks.raw_text import not_one_string

PRECISIONS = ("float32", "bfloat16")


def inference_buckets(max_seq_length: int) -> list[int]:
    """Batch lengths: 8 and 16, then the powers of two and the steps halfway between them
    (24, 32, 48, 64, 96, 128, 192, ...) below max_seq_length, then max_seq_length. A batch pads
    to under 1.5x its longest row (above 16), against 2x with powers of two alone: on short
    sentences that saved 12% of the tokens (benchmarks/README.md, Prediction)."""
    rungs = {8, 16} | {base * 2**k for base in (16, 24) for k in range(max_seq_length.bit_length())}
    return sorted({rung for rung in rungs if rung < max_seq_length} | {max_seq_length})


class Model:
    """A loaded model: `source` (its ModelSource), `bert` (the BertConfig it runs with),
    `precision` ("float32" or "bfloat16" products), `tokenizer`, `max_seq_length`,
    `batch_size`, `task_info`; params on the devices.

    Build it with `load_model`. Methods: `features`, `fill_mask`, `predict` (fine-tuned
    models). Safe to call many times: each bucket length compiles once per purpose.
    """

    def __init__(self, source: model_source.ModelSource, params: dict[str, Any], tokenizer: tokenization.Tokenizer,
                 bert: BertConfig, max_seq_length: int, batch_size: int, mesh: jax.sharding.Mesh):
        self.source, self.tokenizer, self.bert = source, tokenizer, bert
        self.task_info = source.task_info
        self.max_seq_length, self.batch_size, self.mesh = max_seq_length, batch_size, mesh
        self.buckets = inference_buckets(max_seq_length)
        replicated = NamedSharding(mesh, PartitionSpec())
        self._params = jax.device_put(params, replicated)
        self._run_params = encoder_kernels_rounded(bert, self._params)  # shares every leaf it does not round
        self._compiled: dict[tuple, Callable] = {}
        self._replicated = replicated

    @property
    def precision(self) -> str:
        """"bfloat16" when the products round their operands to bfloat16, else "float32"."""
        return "bfloat16" if "bfloat16" in (self.bert.dtype, self.bert.matmul_precision) else "float32"

    @property
    def heads(self) -> tuple[str, ...]:
        return tuple(sorted(set(self._params) - {"bert"}))

    @property
    def family(self) -> Family:
        """The fine-tuned model's task family; ValueError for a model without a task, or whose
        weights hold no task head (a Hugging Face config naming a task class over an encoder's
        weights: its features are the encoder's, its predictions would come from nothing)."""
        name = self.task_info.get("family")
        if name not in tasks.FAMILIES:
            raise ValueError(f"{self.source.path} is not a fine-tuned model (no task saved with it); "
                             f"{no_task_advice(self.heads)}")
        family = tasks.FAMILIES[name]
        if set(self.heads) <= {"mlm", "nsp"}:  # pre-training's heads, no task's
            raise ValueError(f"{self.source.path} says it is a {name} model ({family.hf_architecture}), but its "
                             f"weights hold no task head (only {', '.join(['bert', *self.heads])}): an encoder without its "
                             "fine-tuned head; fine-tune it first (launch/finetune.py --config.init_checkpoint=...), "
                             "or take its features")
        return family

    @property
    def params(self) -> dict[str, Any]:
        """The params on the host, as `source.load_params()` gives them (numpy float32, unrolled)."""
        return jax.device_get(self._params)

    # -- The engine: bucketed, jit-compiled batches over the mesh. --

    def run(self, key: tuple, apply: Callable[..., Any], split: Split, progress: Callable[[int], None] = None,
            sequence_outputs: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
        """Runs `apply(params, batch) -> {name: <[B, ...]>}` over every row of `split`.

        Rows are taken in order of length, batched `batch_size` at a time (the last batch
        padded with zero rows), each batch cut to its bucket length (`batching.eval_batches`);
        fewer rows than `batch_size` make one batch of the device count times the smallest
        power of two that holds them (a call with one input computes one row a device, not
        `batch_size`: a loop predicting one input at a time). `apply` is compiled once per
        (key, batch shape): `key` names what `apply` computes.
        Returns {name: <[N, ...]>} in the split's row order, the outputs named in
        `sequence_outputs` (the sequence their last axis) padded back to the split's width
        (`batching.InSplitOrder`). progress(rows done).
        A ValueError when any row's outputs (or, where `apply` gives it, `FINITE_ROWS`: what
        it computed them from) hold NaN or infinity: weights of a run that diverged, whose
        argmax or span choice would read as an answer.
        """
        def checked(params, batch):
            outputs = apply(params, batch)
            return outputs if FINITE_ROWS in outputs else {**outputs, FINITE_ROWS: rows_finite(outputs)}

        gathered = batching.InSplitOrder(split, sequence_outputs)
        rows = self.mesh.devices.size
        while rows < min(len(split), self.batch_size):
            rows *= 2
        for batch, real in batching.eval_batches(split, min(rows, self.batch_size), self.buckets):
            gathered.add(real, self._compiled_for(key, checked, batch)(self._run_params, batch))
            if progress is not None:
                progress(gathered.count)
        outputs = gathered.arrays
        broken = int((~outputs.pop(FINITE_ROWS, np.ones(0, bool))).sum())
        if broken:
            raise ValueError(f"the model's outputs are not finite (NaN or infinity) for {broken} of {len(split)} "
                             "rows: its weights are broken (a run that diverged?)")
        return outputs

    def run_network(self, outputs: Callable[[Any], dict[str, Any]], split: Split,
                    sequence_outputs: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
        """`run` of the fine-tuned network (`family.network`) on `split`'s BERT inputs;
        outputs(network's result) -> {name: array}: a module-level function, compiled once."""
        network = self.family.network(self.bert, self.task_info)

        def apply(params, batch):
            raw = network.apply({"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"])
            return {**outputs(raw), FINITE_ROWS: rows_finite(raw)}  # (outputs may be an argmax of NaNs)

        return self.run(("network", outputs), apply, split, sequence_outputs=sequence_outputs)

    def _compiled_for(self, key: tuple, apply: Callable, batch: dict[str, np.ndarray]) -> Callable:
        key = (key, *batch["input_ids"].shape[1:])
        if key not in self._compiled:
            shardings = {name: sharding.batch_sharding(self.mesh, value.ndim) for name, value in batch.items()}
            jitted = jax.jit(apply, in_shardings=(self._replicated, shardings), out_shardings=self._replicated,
                             compiler_options=compilation_cache.compiler_options())

            def call(params, host_batch, jitted=jitted, shardings=shardings):
                # (put explicitly: jit takes no numpy batch under jax.distributed)
                with sharding.activate(self.mesh), product_precision(self.precision):
                    return jitted(params, jax.device_put(host_batch, shardings))

            self._compiled[key] = call
        return self._compiled[key]

    # -- Encoding raw text. --

    def encode(self, texts_a: Sequence[str], texts_b: Sequence[str] | None = None,
               keep_masks: bool = False) -> tuple[Split, np.ndarray]:
        """Texts (pairs when texts_b is given) -> (a Split of `[CLS] a [SEP] (b [SEP])` rows of
        max_seq_length, <bool>[N] whether each row was truncated to fit). keep_masks: a literal "[MASK]" in
        the text is the mask token (BERT's own tokenizer would split it into "[", "mask", "]")."""
        tokenizer = _MaskKeeping(self.tokenizer) if keep_masks else self.tokenizer
        features, lengths, truncated = encode_pairs(tokenizer, texts_a, texts_b, self.max_seq_length)
        return Split("inputs", features, lengths), truncated

    # -- Features (the feature-based approach). --

    def features(self, texts: Iterable[str | tuple[str, str | None]], layers: Sequence[int] = (-1,),
                 pooling: str = "none") -> list[dict[str, Any]]:
        """The encoder's activations for each text (see `iter_features`), as a list."""
        return list(self.iter_features(texts, layers, pooling))

    def iter_features(self, texts: Iterable[str | tuple[str, str | None]], layers: Sequence[int] = (-1,),
                      pooling: str = "none", on_truncated: Callable[[np.ndarray], None] | None = None,
                      progress: Callable[[int], None] | None = None) -> Iterator[dict[str, Any]]:
        """Contextual features, one dict per input, in input order (`hidden_states.iter_features`)."""
        from bertjax.inference import hidden_states

        return hidden_states.iter_features(self, texts, layers, pooling, on_truncated, progress)

    def layer_indices(self, layers: Sequence[int]) -> tuple[int, ...]:
        """`hidden_state_positions` of this model's layers."""
        return hidden_state_positions(layers, self.bert.num_hidden_layers)

    def encode_texts(self, pairs: list[tuple[str, str | None]],
                     keep_masks: bool = False) -> tuple[Split, np.ndarray]:
        """Single texts and pairs in one Split (rows in input order) and <bool>[N] whether each
        row was truncated; keep_masks as `encode`."""
        single = [i for i, (_, b) in enumerate(pairs) if b is None]
        double = [i for i, (_, b) in enumerate(pairs) if b is not None]
        parts = []
        for rows, has_b in ((single, False), (double, True)):
            if rows:
                split, cut = self.encode([pairs[i][0] for i in rows], [pairs[i][1] for i in rows] if has_b else None,
                                         keep_masks)
                parts.append((rows, split, cut))
        n, width = len(pairs), self.max_seq_length
        features = {name: np.zeros((n, width), np.int32) for name in ("input_ids", "segment_ids", "input_mask")}
        lengths, truncated = np.zeros(n, np.int32), np.zeros(n, bool)
        for rows, split, cut in parts:
            for name in features:
                features[name][rows] = split.features[name]
            lengths[rows], truncated[rows] = split.lengths, cut
        return Split("inputs", features, lengths), truncated

    # -- Fill-mask (bertjax/inference/fill_mask.py). --

    def fill_mask(self, texts: Sequence[str], top_k: int = 5) -> list[list[list[dict[str, Any]] | None]]:
        """For each text (or "a ||| b" pair) with one or more [MASK], the top_k tokens at each
        mask: [{"token", "text", "token_id", "probability"}] ("text" as a reader writes the token:
        `Tokenizer.token_text`), best first, or None for a mask that
        truncation to max_seq_length cut off (`fill_mask.fill_mask`; `fill_mask_rows` also says
        which texts were cut)."""
        from bertjax.inference import fill_mask

        return fill_mask.fill_mask(self, texts, top_k)

    def mask_counts(self, texts: Sequence[str]) -> np.ndarray:
        """<int>[N]: the [MASK] tokens of each text left after truncation to max_seq_length."""
        from bertjax.inference import fill_mask

        return fill_mask.mask_counts(self, texts)

    # -- Task predictions. --

    def predict(self, inputs: Iterable[Any], **options) -> list[dict[str, Any]]:
        """The fine-tuned task's predictions on raw inputs, one dict per input, in order; what
        each family takes and returns: this module's docstring. Options go to the
        family (e.g. squad's n_best_size); a bad input is a ValueError naming its position.
        Every input is tokenized and predicted in one call, its outputs held together: for a
        large input, `iter_predict`."""
        return list(self.iter_predict(inputs, chunk_size=None, **options))

    def iter_predict(self, inputs: Iterable[Any], chunk_size: int | None = batch_predict.CHUNK_INPUTS,
                     **options) -> Iterator[dict[str, Any]]:
        """`predict`'s results one at a time, in input order, the inputs read and predicted
        `chunk_size` at a time (None: all in one call): memory holds one chunk (and span QA's
        ids), so inputs of any number (a generator over a file's lines) stream through. A bad
        input is a ValueError naming its position, raised when its chunk is read (the results
        before that chunk are out); span QA's ids (given, or made from the position) are unique
        over the whole input, not a chunk. A model without a task, `inputs` that are no list
        of inputs (one string, a table) and a bad chunk_size are refused at the call; unknown
        options with the first chunk."""
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer))
                                       or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive int (or None: one call), got {chunk_size!r}")
        family, remaining = self.family, iter(not_one_string(inputs, "inputs"))

        def results() -> Iterator[dict[str, Any]]:
            seen: dict = {}  # span QA's ids so far
            done = 0
            while chunk := list(itertools.islice(remaining, None if chunk_size is None else int(chunk_size))):
                positions = list(range(done + 1, done + len(chunk) + 1))
                parsed = [at_position(position, lambda item: family.parse(item, self.task_info), item)
                          for position, item in zip(positions, chunk)]
                parsed, clashes = family.identify(parsed, positions, seen)
                for index, why in sorted(clashes.items())[:1]:
                    raise ValueError(f"input {positions[index]}: {why}")
                yield from family.predict(self, parsed, **options)
                done += len(chunk)

        return results()

    def check_input(self, item: Any) -> None:
        """Raises the ValueError `predict` would raise for this one input, less its "input N: "
        prefix, without running the model: lets a caller skip bad inputs and keep the good ones."""
        parse_checked(lambda item: self.family.parse(item, self.task_info), item)


FINITE_ROWS = "finite_rows"  # Model.run's check, an output of no caller


def rows_finite(outputs: Any) -> jax.Array:
    """<bool>[B]: whether every floating-point number in each row of `outputs` (a pytree of
    <[B, ...]> arrays) is finite."""
    leaves = jax.tree.leaves(outputs)
    rows = [jnp.isfinite(x.reshape(x.shape[0], -1)).all(1) for x in leaves if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.stack(rows).all(0) if rows else jnp.ones(leaves[0].shape[0], bool)  # (integer outputs only)


def no_task_advice(heads: tuple[str, ...]) -> str:
    """What a model without a task can do, by the heads it has."""
    if "mlm" in heads:
        return "use fill_mask (it has a masked-LM head) or features, or fine-tune it first"
    return "it has no masked-LM head for fill_mask: use features, or fine-tune it first"


class _MaskKeeping:
    """A tokenizer's encode_flat (and the ids encode_pairs needs) with each literal "[MASK]"
    encoded as the mask token: the text is cut at the masks and the pieces tokenized alone."""

    MASK = "[MASK]"

    def __init__(self, tokenizer: tokenization.Tokenizer):
        self.tokenizer = tokenizer
        self.pad_id, self.cls_id, self.sep_id = tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        pieces = [self._pieces(text) for text in texts]
        firsts = self.tokenizer.encode_batch([parts[0][0] for parts in pieces])
        later = [(piece, continues) for parts in pieces for piece, continues in parts[1:]]
        # A piece after a mask continues the text ("[MASK]." is "mat." in running text), unless
        # the mask took in the whitespace after it: the piece then starts a word, as the
        # model's own tokenizer has it.
        continuing = iter(self.tokenizer.encode_batch_continuing([piece for piece, yes in later if yes]))
        alone = iter(self.tokenizer.encode_batch([piece for piece, yes in later if not yes]))
        rows = []
        for first, parts in zip(firsts, pieces):
            row = list(first)
            for _, continues in parts[1:]:
                row += [self.tokenizer.mask_id, *next(continuing if continues else alone)]
            rows.append(row)
        return tokenization.flatten(rows)

    def _pieces(self, text: str) -> list[tuple[str, bool]]:
        """The text between the masks, each with whether it continues the text before it, less
        the whitespace a mask token takes in: its lstrip and rstrip, and where tokens carry the
        space before their word (byte-level BPE, Metaspace) the one space before it (the mask
        stood for 'Ġcat' in pre-training, and 'The Ġ [MASK]' is no text it saw)."""
        parts = text.split(self.MASK)
        lstrip, rstrip = self.tokenizer.mask_strips
        carried = not lstrip and self.tokenizer.trailing_space_is_token
        pieces = []
        for j, part in enumerate(parts):
            if j < len(parts) - 1:  # a mask follows
                part = part.rstrip() if lstrip else part[:-1] if carried and part.endswith(" ") else part
            stripped = rstrip and j > 0 and part[:1].isspace()  # a mask precedes and takes the space
            pieces.append((part.lstrip() if stripped else part, not stripped))
        return pieces


def hidden_state_positions(layers: Sequence[int], num_hidden_layers: int) -> tuple[int, ...]:
    """Layer indices as non-negative positions in the [L + 1] hidden-state stack of a model of
    `num_hidden_layers` layers; a ValueError naming the bad index and the valid range, or two
    naming the same layer."""
    count = num_hidden_layers + 1
    if isinstance(layers, np.ndarray) and layers.ndim == 1:
        layers = layers.tolist()
    if not isinstance(layers, Sequence) or isinstance(layers, str) or not all(map(_is_int, layers)):
        raise ValueError(f"layers: give a list of layer indices (ints), got {layers!r}")
    layers = tuple(int(layer) for layer in layers)
    if not layers:
        raise ValueError("layers: give at least one layer index")
    for layer in layers:
        if not -count <= layer < count:
            raise ValueError(f"layer index {layer} is outside [-{count}, {count - 1}]: the model has "
                             f"{count - 1} layers (0 = the embeddings' output, -1 = the last layer)")
    positions = tuple(layer % count for layer in layers)
    for i, position in enumerate(positions):
        if position in positions[:i]:  # (as config.model.feature_layers must be distinct)
            twice = f"layer {layers[i]} is given twice" if layers[i] in layers[:i] else (
                f"layers {layers[positions.index(position)]} and {layers[i]} are the same one of {count}")
            raise ValueError(f"{twice}; give each layer once")
    return positions


def _is_int(value: Any) -> bool:
    """An int (a numpy integer too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def load_model(path: str | model_source.ModelSource, *, max_seq_length: int | None = None, batch_size: int = 32,
               precision: str | None = None, vocab_path: str = "", do_lower_case: bool | None = None) -> Model:
    """Loads a model for inference from any path `bertjax.inference.model_source` resolves, or its ModelSource.

    max_seq_length: the longest input in tokens (default: the bertjax run's training length, else
      512 or the model's max_position_embeddings if smaller).
    batch_size: examples per compiled batch (rounded up to a multiple of the device count).
    precision: "float32" or "bfloat16" products (default: bfloat16 on TPU/GPU, float32 on CPU;
      see the module docstring and benchmarks/README.md for how often the two agree).
    vocab_path / do_lower_case: the tokenizer for a model that comes without one; for a model
      that names its vocabulary, vocab_path must be the same one (another is refused), and
      do_lower_case another casing than a bertjax run trained with is refused (a release's
      is overridden, with a warning) (`ModelSource.load_tokenizer`).
    """
    if not isinstance(path, (str, os.PathLike, model_source.ModelSource)):
        raise TypeError(f"load_model: path must be a model's path (str or os.PathLike), got {path!r}"[:200])
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} (or None: the platform's default), got {precision!r}")
    vocab_path = os.fspath(vocab_path) if vocab_path else ""
    if vocab_path and fileio.isdir(vocab_path):
        raise ValueError(f"vocab_path={vocab_path} is a folder; give its vocab.txt, tokenizer.json or .model")
    if vocab_path and not fileio.exists(vocab_path):
        raise FileNotFoundError(f"vocab_path={vocab_path}: no such file")
    source = model_source.resolve(path)
    family = tasks.FAMILIES.get(source.task_info.get("family"))
    if family is not None and family.versions and family.version_key not in source.task_info:
        logging.warning("%s does not say which %s it was fine-tuned on (a Hugging Face or TF checkpoint from "
                        "elsewhere): it answers as %s; if it was trained on another (%s), give --%s (Python: "
                        "model_source.with_task_version)", source.path, family.version_key, family.versions[0],
                        ", ".join(family.versions[1:]), family.version_key)
        # (said by the loaded model too: an export's task.json records what it answers as)
        source = model_source.with_task_version(source, family.versions[0])
    tokenizer = source.load_tokenizer(vocab_path, do_lower_case=do_lower_case)
    bert = inference_config(source.bert, precision or ("bfloat16" if jax.default_backend() != "cpu" else "float32"))
    length = max_seq_length if max_seq_length is not None else (
        source.max_seq_length or min(512, bert.max_position_embeddings))
    if not _is_int(length) or not 8 <= length <= bert.max_position_embeddings:
        raise ValueError(f"max_seq_length={length!r} must be an int in [8, the model's max_position_embeddings="
                         f"{bert.max_position_embeddings}]")
    length = int(length)  # (a numpy integer has no bit_length, which the bucket ladder asks)
    untrained = source.untrained_past(length)
    if untrained:  # as fine-tuning warns: outputs of longer inputs would come from untrained weights
        logging.warning("max_seq_length=%d is longer than %s; inputs longer than that meet them (max_seq_length=%d "
                        "keeps to the trained positions)", length, untrained, source.max_seq_length)
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    devices = jax.local_devices()
    batch_size = -(-int(batch_size) // len(devices)) * len(devices)
    mesh = sharding.create_mesh(data=-1, devices=devices)
    params = jax.tree.map(np.asarray, source.load_params())
    return Model(source, params, tokenizer, bert, length, batch_size, mesh)


def encoder_kernels_rounded(bert: BertConfig, params: dict[str, Any]) -> dict[str, Any]:
    """The params the batches run with: `params` itself, or with bfloat16 products on a CPU
    (`matmul_precision` "bfloat16") the encoder's dense kernels stored rounded to bfloat16
    (`primitives.kernels_in_bfloat16`: the same numbers, without rounding them again every
    batch). The heads keep theirs: their few outputs are float32 products, and small."""
    if bert.matmul_precision != "bfloat16":
        return params
    from bertjax.models import BertEncoder, primitives

    ids = np.zeros((1, 8), np.int32)
    return {**params, "bert": primitives.kernels_in_bfloat16(BertEncoder(bert), params["bert"], ids, ids,
                                                             np.ones_like(ids))}


def inference_config(bert: BertConfig, precision: str, backend: str | None = None) -> BertConfig:
    """The BertConfig inference runs with on `backend` (default: this process's): unrolled
    layers, no rematerialisation, XLA attention, and `precision`'s products: float32
    throughout (traced under `product_precision`), or bfloat16 operands with float32 sums
    (bfloat16 compute on TPU/GPU; on a CPU float32 activations around `bf16_matmul` products,
    which its AMX units run and which keep layer norms and softmax exact)."""
    bert = bert.replace(scan_layers=False, remat_policy="none", attention_impl="xla")
    if precision == "float32":
        return bert.replace(dtype="float32", matmul_precision="default")
    if (backend or jax.default_backend()) != "cpu":
        return bert.replace(dtype="bfloat16", matmul_precision="default")
    from bertjax.models import bf16_matmul

    if backend is None and not bf16_matmul.has_bf16_instructions():
        logging.warning("precision='bfloat16' on a CPU without bfloat16 instructions (AMX-BF16, AVX512_BF16): "
                        "the products are emulated, slower than float32 here", extra=PROCESS_SPECIFIC)
    return bert.replace(dtype="float32", matmul_precision="bfloat16")


def product_precision(precision: str):
    """The context a model's programs are traced in. "float32": every product at float32
    precision, where JAX's default would let a TPU multiply one bfloat16 pass and a GPU use
    TF32 (a CPU multiplies float32 either way, as fast); "bfloat16": as the config says."""
    return jax.default_matmul_precision("float32") if precision == "float32" else contextlib.nullcontext()

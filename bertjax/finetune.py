"""BERT fine-tuning: one loop, top to bottom.

Sections: checkpoint, tokenizer and model config (validated before anything is loaded or
compiled: `finetune_setup.py`) -> the task's data -> model, objective and state (resume order) -> the steps,
compiled once per batch shape (bucket length, or packed row count), ahead in a background
thread -> the loop (evaluations keep the best checkpoint) -> predictions with the best
weights. The machinery shared with pre-training (step, shardings, resume order) is in
`trainer.py`, the loop's tail in `training_loop.py`.

Starting point (`config.init_checkpoint`): a bertjax run (pre-training or fine-tuning: its
workdir, checkpoint directory or one step), a Hugging Face BERT directory, or Google's
original TF release. The model's shape comes from it; only the encoder is restored (and
the task head too with `config.reuse_head`); the tokenizer comes with it. No
init_checkpoint: the same model from scratch (`config.model.preset`), the baseline.

The feature-based approach (the BERT paper's section 5.3): `config.train.freeze_encoder`
keeps the encoder's weights fixed (no gradient through them, no optimizer state; it runs
deterministically) and trains the head only; config.model.feature_layers, feature_combine
and tagging_head choose what the head reads (see bertjax.models.heads). The frozen encoder
runs once over the training split before the first step and the steps read its stored
outputs (`config.train.cache_features`, bertjax.tasks.feature_cache).

Workdir: checkpoints/ (the latest, for resume), best/ (the weights with the best
`main_metric` on the first evaluation split), metrics.jsonl and tensorboard/ (eval
metrics prefixed `eval_`, or `eval_<split>_` for further evaluation splits), tokenizer/,
predictions/ (per split, and GLUE submission files).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import math
import os
import shutil
import tempfile
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from bertjax import checkpointing, optim, run_config, sharding, tasks, tokenization, trainer, training_loop
from bertjax.finetune_setup import (check_reused_head, checked_model, checkpoint_source,
                                    load_tokenizer, schedule_config)
from bertjax.inference import model_source
from bertjax.models import BertConfig, FrozenEncoder, stack_layers
from bertjax.models.heads import TOKEN_TRANSFORM
from bertjax.models.variable_table import is_modern
from bertjax.runtime import compilation_cache, compile_ahead, console, fileio
from bertjax.runtime.errors import TrainingDiverged
from bertjax.tasks import batching, feature_cache, packing
from bertjax.tasks.common import SEQUENCE_FEATURES, Split, Task

log = logging.getLogger(__name__)


# ======================================================================================
# The training batches and the starting weights.
# ======================================================================================

def training_batches(config: ml_collections.ConfigDict, train: Split, data_parallel: int,
                     length_multiple: int) -> tuple[batching.TrainBatches, list[int]]:
    """(the run's training batches, the bucket lengths of its evaluation batches).

    Bucket lengths fitted to the training batches' longest rows, multiples of 8 and of the
    model's `length_multiple` (BertConfig.length_multiple); evaluation (never packed)
    adds max_seq_length for longer examples. Packed rows have one length, the longest
    example's, and row counts that split evenly over the data-parallel devices, the
    accumulated micro-batches and the processes."""
    data, batch_size = config.data, config.train.batch_size
    buckets = batching.fitted_bucket_lengths(batching.longest_rows(train, batch_size, data.seed, data.group_by_length),
                                             data.max_seq_length, data.num_buckets,
                                             multiple=math.lcm(8, length_multiple))
    batches = batching.TrainBatches(
        train, batch_size, data.seed, buckets[-1:] if data.pack_examples else buckets, data.group_by_length,
        data.pack_examples, num_row_counts=data.num_buckets,
        row_multiple=math.lcm(data_parallel * config.train.grad_accum_steps, jax.process_count()))
    return batches, sorted({*buckets, data.max_seq_length})


def _init_weights(source: model_source.ModelSource | None, config: ml_collections.ConfigDict, workdir: str) -> str:
    """The step folder fine-tuning starts from ("" from scratch), saved with the run's config: a
    resume whose config.init_checkpoint now names other weights (a pre-training run that went
    on, a folder moved) says so, and that it does not read them (trainer.initial_state); a
    sweep compares it. When that checkpoint is gone and the run resumes from its own
    (`checkpoint_source`), the one it started from."""
    if source is None:
        return ""
    own = run_config.own_checkpoints(workdir)
    if own is not None and source.path == own:
        return (checkpointing.read_meta(own).get("config") or {}).get("init_weights", "")
    return fileio.absolute(source.weights)


def _positions_trained(length: int, source: model_source.ModelSource | None, frozen: bool) -> int | None:
    """The longest length the run's positions will have trained at, saved with its config: a run
    started from it warns of untrained positions past that, not past this run's own length, which
    may be shorter than its starting model's. None when the starting model's is not known (a
    release)."""
    if source is None:
        return length
    if source.positions_trained is None or frozen:
        return source.positions_trained
    return max(length, source.positions_trained)


def pretrained_params(config: ml_collections.ConfigDict, source: model_source.ModelSource, bert: BertConfig,
                      model_params: dict[str, Any]) -> dict[str, Any]:
    """The encoder of config.init_checkpoint (and with config.reuse_head every other part of the
    task model `model_params` has: its head, feature-based and token-transform parts included).

    A token transform (config.model.token_transform, tagging and span QA) starts from the
    checkpoint's own, else its masked-LM head's transform (the same dense, activation, norm), as
    Hugging Face's ModernBertFor<Task> loads the pre-trained `head.*`, unless the head is
    feature-based (its transform reads combined layers or a BiLSTM's outputs); so does the modern
    encoder's pooler (dense, activation, norm) where it never learnt (`pooler_from_masked_lm`)."""
    loaded = source.load_params()
    wanted = tuple(model_params) if config.reuse_head else ("bert",)
    missing = [name for name in wanted if name not in loaded]
    if missing:
        raise ValueError(f"config.init_checkpoint={config.init_checkpoint} has no {missing} weights "
                         f"(config.reuse_head={config.reuse_head}); it has {sorted(loaded)}")
    if bert.scan_layers:
        loaded = {**loaded, "bert": stack_layers(loaded["bert"], bert.num_hidden_layers)}
    params = {name: loaded[name] for name in wanted}
    # (a feature-based head's transform reads other features than the last layer's: it starts fresh)
    if TOKEN_TRANSFORM[0] in model_params and TOKEN_TRANSFORM[0] not in params and not bert.feature_based:
        if TOKEN_TRANSFORM[0] in loaded:
            params.update({name: loaded[name] for name in TOKEN_TRANSFORM})
        elif "mlm" in loaded:
            params.update(zip(TOKEN_TRANSFORM, (loaded["mlm"]["transform"], loaded["mlm"]["transform_norm"])))
    if pooler_from_masked_lm(source, bert) and "mlm" in loaded and "pooler" in params["bert"]:
        params["bert"] = {**params["bert"], "pooler": loaded["mlm"]["transform"],
                          "pooler_norm": loaded["mlm"]["transform_norm"]}
    return params


def pooler_from_masked_lm(source: model_source.ModelSource, bert: BertConfig) -> bool:
    """Whether fine-tuning's pooler starts from the checkpoint's masked-LM transform: the modern
    encoder's pooler (dense, activation, norm: the same shape) where it never learnt (a bertjax
    masked-LM-only run), as an import of that run's Hugging Face export starts it."""
    return bert.pooler != "tanh" and not source.pooler_trained and source.layout == "bertjax"


def pooler_origin(source: model_source.ModelSource, bert: BertConfig) -> str:
    """Where a head reading the pooled [CLS] finds its pooler, for the start-up line (its
    masked-LM transform, or an untrained one); "" for the checkpoint's trained pooler."""
    if pooler_from_masked_lm(source, bert):
        return "; the pooler from its masked-LM transform"
    return "" if source.pooler_trained else "; its pooler never trained (as initialised)"


# ======================================================================================
# Batches and predictions on the host.
# ======================================================================================

def _abstract_batch(example: dict[str, np.ndarray], batch_size: int, length: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes of a global batch cut to bucket `length`, from one batch of the split."""
    def shape(name, value):
        if name == feature_cache.CACHED_TOKENS:  # [B, L, *tail]: the sequence axis second
            return jax.ShapeDtypeStruct((batch_size, length, *value.shape[2:]), value.dtype)
        tail = (*value.shape[1:-1], length) if name in SEQUENCE_FEATURES else value.shape[1:]
        return jax.ShapeDtypeStruct((batch_size, *tail), value.dtype)

    return {name: shape(name, value) for name, value in example.items()}


def _batch_key(batch: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """A batch's (name, shape, dtype name) triples, numpy or abstract: what a step is compiled
    for. (The dtype's name: bfloat16's numpy str is '<V2', a raw two-byte type.)"""
    return tuple((name, tuple(value.shape), np.dtype(value.dtype).name) for name, value in sorted(batch.items()))


def _host(tree: Any) -> Any:
    """Replicated jax.Arrays -> numpy (each process holds a whole copy)."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x.addressable_data(0)), tree)


# What a frozen encoder's cached outputs do not depend on (the head's settings, and dropout,
# which a frozen encoder does not apply): runs that differ only in these share a cache.
_HEAD_ONLY_FIELDS = ("feature_combine", "tagging_head", "lstm_hidden_size", "hidden_dropout_prob",
                     "attention_probs_dropout_prob", "token_transform")


def cache_directory(config: ml_collections.ConfigDict, workdir: str) -> str:
    """config.train.feature_cache_dir, else WORKDIR/feature_cache on a local workdir, else a
    folder of the temporary folder for this workdir (the cache is memory-mapped: it needs a
    local disk), removed when the run (or sweep) ends (`temporary_cache`)."""
    if config.train.feature_cache_dir:
        return config.train.feature_cache_dir
    if not fileio.is_remote(workdir):
        return fileio.join(workdir, "feature_cache")
    own = hashlib.sha256(workdir.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), "bertjax_feature_cache", own)


def temporary_cache(config: ml_collections.ConfigDict, workdir: str) -> bool:
    """Whether `cache_directory` is a folder no one chose (a gs:// workdir's, in the temporary
    folder): left there, every run's caches would fill the machine's disk, unseen."""
    return not config.train.feature_cache_dir and fileio.is_remote(workdir)


def cached_features(config: ml_collections.ConfigDict, workdir: str, split: Split, bert: BertConfig,
                    reads_tokens: bool, encoder_params, encoder_shardings, mesh, batch_size: int,
                    buckets: list[int], weights: str, stop: Callable[[], str | None] = lambda: None
                    ) -> tuple[feature_cache.FeatureCache, str]:
    """The frozen encoder's outputs for every example of `split`, computed (or found) once:
    (the cache, what happened). weights: `checkpointing.weights_digest(encoder_params)`;
    stop: `FeatureCache.compute`'s."""
    encoder = FrozenEncoder(bert, reads_tokens)
    inputs = ("input_ids", "segment_ids", "input_mask")
    apply = lambda params, batch: encoder.apply({"params": {"bert": params}}, *(batch[n] for n in inputs))  # noqa: E731
    first, _ = next(batching.eval_batches(split, batch_size, buckets))
    kept = jax.eval_shape(apply, encoder_params, {n: first[n] for n in inputs})
    example_shape = kept.shape[2:] if reads_tokens else kept.shape[1:]
    encoder_fields = {key: value for key, value in bert.to_dict().items() if key not in _HEAD_ONLY_FIELDS}
    # "rows": caches from before every process fed whole batches (trainer.whole_batch) may hold
    # other examples' features on a mesh that interleaves the processes: not reused.
    identity = {"weights": weights, "model": encoder_fields, "reads_tokens": reads_tokens,
                "kept": [list(example_shape), str(kept.dtype)], "rows": "whole batches"}
    if bert.feature_based and bert.pooler == "mean" and not reads_tokens:
        identity["sentence"] = "token mean"  # caches from before kept the [CLS] position's: not reused
    # Each process keeps a copy of its own (processes sharing a folder would write one file at once).
    own = feature_cache.cache_name(split, {**identity, "process": f"{jax.process_index()} of {jax.process_count()}"})
    copies = tuple(name for name in _names_over_processes(own) if name != own)
    cache = feature_cache.FeatureCache(split, cache_directory(config, workdir), own, reads_tokens, example_shape,
                                       kept.dtype, copies=copies)
    in_shardings = (encoder_shardings, {n: sharding.batch_sharding(mesh, first[n].ndim) for n in inputs})
    encode = jax.jit(apply, in_shardings=in_shardings, out_shardings=NamedSharding(mesh, PartitionSpec()),
                     compiler_options=compilation_cache.compiler_options())
    def encode_batch(batch):
        with sharding.activate(mesh):
            return _host(encode(encoder_params, trainer.whole_batch({n: batch[n] for n in inputs}, mesh)))

    progress = console.Progress(math.ceil(len(split) / batch_size), label="cache features",
                                enabled=jax.process_index() == 0, unit="batches", line_seconds=console.LINE_SECONDS)
    try:
        message = cache.compute(encode_batch, batch_size, buckets, progress=lambda done, _: progress.advance(done),
                                fewest=_fewest_over_processes, stop=stop)
    finally:
        progress.close()
    return cache, message


def _names_over_processes(name: str) -> list[str]:
    """Every process's `name` (of one length on all: each calls this), gathered rather than each
    hashing every process's split again."""
    if jax.process_count() == 1:
        return [name]
    from jax.experimental import multihost_utils

    rows = multihost_utils.process_allgather(np.frombuffer(name.encode(), np.uint8))
    return [bytes(row).decode() for row in np.asarray(rows).reshape(jax.process_count(), -1)]


def _fewest_over_processes(count: int) -> int:
    """The smallest `count` of all processes (each calls this)."""
    if jax.process_count() == 1:
        return count
    from jax.experimental import multihost_utils

    return int(np.min(multihost_utils.process_allgather(np.int64(count))))


# ======================================================================================
# Compiled programs and evaluation.
# ======================================================================================

def _eval_step(params, batch, *, objective: trainer.Objective, task: Task):
    """(sums, counts, the task's per-row predictions) of one evaluation batch."""
    sums, counts, outputs = trainer.eval_sums(params, batch, objective=objective)
    return sums, counts, task.predict(outputs)


class Programs:
    """The run's compiled steps: the train step per batch shape (rows, tokens) and evaluation per
    batch shapes (`_batch_key`), compiled ahead in a background thread in `order`, the order
    the run needs them; `take` hands each over (waiting for it if need be)."""

    def __init__(self, *, mesh, abstract: trainer.TrainState, shardings: trainer.TrainState,
                 objective: trainer.Objective, task: Task, train_cfg, seed: int, frozen: tuple[str, ...],
                 example: dict[str, np.ndarray], eval_example: dict[str, np.ndarray], order: list[tuple]):
        self.mesh, self.abstract, self.shardings, self.example = mesh, abstract, shardings, example
        batch_shardings = lambda batch: {name: sharding.batch_sharding(mesh, value.ndim) for name, value in batch.items()}
        with sharding.activate(mesh):
            self.step_inputs = trainer.step_inputs(train_cfg, seed, mesh)
            self._train_jit = trainer.jit_train_step(mesh, shardings, batch_shardings(example), objective=objective,
                                                     train_config=train_cfg, frozen=frozen)
        self._eval_jit = jax.jit(functools.partial(_eval_step, objective=objective, task=task),
                                 in_shardings=(shardings.params, batch_shardings(eval_example)),
                                 out_shardings=NamedSharding(mesh, PartitionSpec()),
                                 compiler_options=compilation_cache.compiler_options())
        self._taken: dict[tuple, Any] = {}
        self.ahead = compile_ahead.CompileAhead(self._compile, order)

    def _compile(self, key: tuple[str, Any]) -> tuple[Any, float]:
        """("train", (rows, length)) or ("eval", _batch_key(batch)) -> (that step compiled, seconds)."""
        kind, shapes = key
        with sharding.activate(self.mesh):
            if kind == "train":
                return trainer.compile_step(self._train_jit, trainer.with_shardings(self.abstract, self.shardings),
                                            _abstract_batch(self.example, *shapes), self.step_inputs)
            batch = {name: jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for name, shape, dtype in shapes}
            return trainer.compile_step(self._eval_jit, trainer.with_shardings(self.abstract.params,
                                                                               self.shardings.params), batch)

    def is_ready(self, key: tuple) -> bool:
        return key in self._taken

    def take(self, key: tuple) -> tuple[Any, float, float]:
        """(the compiled step for `key`, seconds it took to compile, seconds waited for it); the
        seconds are 0 after the first time."""
        if key in self._taken:
            return self._taken[key], 0.0, 0.0
        self._taken[key], seconds, waited = self.ahead.take(key)
        return self._taken[key], seconds, waited

    def close(self) -> None:
        self.ahead.close()  # the compilations not started are dropped


def eval_keys(task: Task, batch_size: int, buckets: list[int],
              caches: dict[str, feature_cache.FeatureCache]) -> list[tuple]:
    """The evaluation programs the run needs, split by split, shortest first (`caches`: the
    splits' cached features, by split name, when the encoder is frozen)."""
    keys = []
    for split in task.eval_splits + task.test_splits:
        first, real = next(batching.eval_batches(split, batch_size, buckets))
        if split.name in caches:
            first = caches[split.name].add_to_eval_batch(first, real)
        keys += [("eval", _batch_key(_abstract_batch(first, batch_size, length)))
                 for length in batching.eval_lengths(split, batch_size, buckets)]
    return keys


@dataclasses.dataclass
class Evaluator:
    """Evaluation and prediction over the task's splits: batches (never packed) of `batch_size`
    cut to `buckets`, every process holding each whole (each device takes its rows), predictions
    gathered back in split order."""

    task: Task
    programs: Programs
    batch_size: int
    buckets: list[int]
    caches: dict[str, feature_cache.FeatureCache]  # by split name: a frozen encoder's cached features

    def run_split(self, params, split: Split, score: bool = True, between_batches: Callable[[], None] = lambda: None
                  ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """(metrics, predictions [N, ...]) of one split; metrics only for labelled splits when
        `score`. between_batches(): called before each batch (a stop signal's check)."""
        mesh = self.programs.mesh
        totals, gathered = trainer.EvalTotals(), batching.InSplitOrder(split, self.task.sequence_outputs)
        progress = console.Progress(math.ceil(len(split) / self.batch_size), label=f"evaluate {split.name}",
                                    enabled=jax.process_index() == 0, unit="batches", line_seconds=console.LINE_SECONDS)
        try:  # (a stop between batches closes the progress line too)
            with sharding.activate(mesh):
                for index, (batch, real) in enumerate(batching.eval_batches(split, self.batch_size, self.buckets),
                                                      start=1):
                    between_batches()
                    if split.name in self.caches:
                        batch = self.caches[split.name].add_to_eval_batch(batch, real)
                    eval_step, _, _ = self.programs.take(("eval", _batch_key(batch)))
                    sums, counts, predictions = _host(eval_step(params, trainer.whole_batch(batch, mesh)))
                    totals.add(sums, counts)
                    gathered.add(real, predictions)
                    progress.advance(index)  # done (n/n only once the last batch is)
        finally:
            progress.close(keep=False)  # (its result is the next line)
        predictions = gathered.arrays
        if not (score and split.has_labels):
            return {}, predictions
        return {"loss": totals.means()["loss"], **self.task.evaluate(split, predictions)}, predictions

    def evaluate(self, params, between_batches: Callable[[], None] = lambda: None
                 ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, np.ndarray]]]:
        """({split: metrics}, {split: predictions}) over the evaluation splits."""
        done = {split.name: self.run_split(params, split, between_batches=between_batches)
                for split in self.task.eval_splits}
        return {name: metrics for name, (metrics, _) in done.items()}, {name: p for name, (_, p) in done.items()}


def evaluation_digest(task: Task) -> str | None:
    """`splits_digest` of the evaluation split best/ is chosen on (the first: a tagged test file
    scored beside it is no other evaluation of the best): best/ records the evaluation its
    score was measured on. None without evaluation splits."""
    return splits_digest(task.eval_splits[:1]) if task.eval_splits else None


def splits_digest(splits: list[Split]) -> str:
    """SHA-256 (16 hex) of what `splits` hold (names, inputs, labels)."""
    digest = hashlib.sha256()
    for split in splits:
        digest.update(split.name.encode())
        for key in sorted(split.features):
            array = np.ascontiguousarray(split.features[key])
            digest.update(f"{key} {array.dtype} {array.shape}".encode())
            digest.update(array.reshape(-1).view(np.uint8))
    return digest.hexdigest()[:16]


def _set_best_aside(best: str, fresh: bool, finished: bool = False, evaluated_on: str | None = None) -> bool:
    """Moves `best` (a workdir's best/) aside, nothing deleted, when this run cannot build on it:
    to best.stale-<UTC time> when the run starts from step 0 (it must not compare with, or end
    on, weights it did not train), to best.unreadable-<UTC time> when it cannot be read, to
    best.other-evaluation-<UTC time> when a run with steps left is evaluated otherwise than the
    best was chosen (`evaluated_on`, evaluation_digest: another eval_file, another length, or
    none), whose scores do not compare with its. A finished run keeps its best/ whatever its
    evaluation now: its result, scored on the evaluation given (`_finetune`)."""
    # None, or an empty folder a killed run left; or, resuming, only a step a killed replacing
    # save set aside, which the Checkpointer moves back (a fresh run sets that aside too).
    if not checkpointing.is_bertjax_checkpoint(best) and not (fresh and checkpointing.holds_replaced_step(best)):
        return True
    if fresh:
        log.warning("%s holds best weights this run did not train (it starts from step 0, with no checkpoint to "
                    "resume: another run's, or one killed before its first checkpoint): moved aside to %s, nothing "
                    "deleted", best, checkpointing.move_aside(best, "stale"))
        return True
    try:
        chosen = checkpointing.read_meta(best)["extra"]
    except checkpointing.CheckpointUnreadableError as error:
        log.warning("%s is unreadable (%s): moved aside to %s, nothing deleted; the best so far starts again at "
                    "the next evaluation", best, error, checkpointing.move_aside(best, "unreadable"))
        return True
    if finished or not chosen.get("metrics"):  # (no metrics: a run without evaluation's last weights)
        return True
    if evaluated_on is None:
        log.warning("%s holds the best weights by an evaluation this run does not have (no evaluation split now): "
                    "moved aside to %s, nothing deleted; this run's last weights will be its result", best,
                    checkpointing.move_aside(best, "other-evaluation"))
    elif chosen.get("evaluated_on", evaluated_on) != evaluated_on:  # (not recorded: a run from before it was)
        log.warning("%s holds the best weights by another evaluation (its examples as read differ: "
                    "config.data.eval_file, the rows it holds, or how they are cut and tokenized, e.g. "
                    "config.data.max_seq_length): moved aside to %s, nothing deleted; the best so far starts again at "
                    "the next evaluation, on this run's", best, checkpointing.move_aside(best, "other-evaluation"))
    return True


def _train_step(programs: Programs, shape: tuple[int, int], loop: training_loop.Loop, clock: console.PhaseClock):
    """The train step for batches of `shape` (rows, tokens); the first wait for it is paused
    out of the step timing, counted as compile time and reported."""
    key = ("train", shape)
    if programs.is_ready(key):
        return programs.take(key)[0]
    with loop.paused(recurring=False):
        step_fn, seconds, waited = programs.take(key)
    clock.add("compile", waited)
    ahead_of_use = seconds - waited
    loop.console(f"compiled the train step for {shape[0]} x {shape[1]} tokens in {seconds:.1f}s"
                 + (f" ({ahead_of_use:.1f}s of it while training)" if ahead_of_use >= 0.1 else ""))
    return step_fn


def _better(metrics: dict[str, float], best: dict[str, float], main_metric: str) -> bool:
    """Whether an evaluation's `metrics` beat the best's: a higher main metric, or the same with a
    lower loss (as a sweep ranks its runs: a small dev set's accuracy ties often, and the earlier
    step, its loss far higher, was kept)."""
    if metrics[main_metric] != best[main_metric]:
        return metrics[main_metric] > best[main_metric]
    return metrics["loss"] < best.get("loss", math.inf)


def _eval_record(results: dict[str, dict[str, float]]) -> dict[str, float]:
    """{split: metrics} (the first split the main one) -> one record: the main split's metrics
    under their own names, the other splits' prefixed with the split's name."""
    main, *others = results.items()
    return {**main[1], **{f"{split}_{name}": value for split, metrics in others for name, value in metrics.items()}}


def _run_summary(task: Task, train_cfg, train_batches: batching.TrainBatches, packed: bool, how: str,
                 frozen: tuple[str, ...], start_step: int) -> str:
    """The console line that says what the run will do."""
    shape = (f"examples packed into rows of {train_batches.buckets[0]} tokens, {train_batches.row_counts} rows a step"
             if packed else f"batches padded to {train_batches.buckets}")
    splits = (task.train, *task.eval_splits, *task.test_splits)
    names = task.info.get("label_names") or []  # the training file's, sorted, unless given: seen before training
    labels = f"; labels {', '.join(names[:10])}{f', ... ({len(names)})' if len(names) > 10 else ''}" if names else ""
    windowed = [s for s in splits if s.source_examples not in (None, len(s))]
    epoch = ", an epoch" if task.train.epoch_of_windows else ""  # (what the training split's epoch counts)
    cut = [f"{s.name}: " + ", ".join(([f"{len(s)} windows" + (epoch if s is task.train else "")] if s in windowed
                                      else []) + ([s.truncation] if s.truncation else []))
           for s in splits if s.truncation or s in windowed]
    return (f"{task.name}: {task.train.example_count} training examples"
            + "".join(f", {s.example_count} {s.name}" for s in task.eval_splits + task.test_splits)
            + (f" ({'; '.join(cut)})" if cut else "") + labels
            + f"; {train_cfg.num_steps} steps of {train_cfg.batch_size}"
            + f" ({train_cfg.num_steps * train_cfg.batch_size / task.train.examples_per_epoch:.2f} epochs), "
            + f"lr {train_cfg.learning_rate:g}, "
            + f"warmup {train_cfg.warmup_steps}; {shape}; {how}"
            + ("; the encoder frozen" if frozen else "") + f"; starting at step {start_step}")


# ======================================================================================
# The run.
# ======================================================================================

def finetune(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Fine-tunes to the configured length; returns {"best": the best checkpoint's {"step",
    "metrics", "evaluated_on", "scored_beside"}, "rescored": {split: metrics} of its weights
    where the splits differ from those it was scored on (a finished run relaunched with
    another eval_file, or a new tagged test file, whose scores "best" then holds), "last": the
    last logged metrics, "predictions": files written, "main_metric", "seconds"}."""
    with trainer.hold_workdir(workdir):
        run_config.check_sweep_or_run(workdir, sweep=False)  # before anything is written there
        run_config.check_same_kind(workdir, config.to_dict())
        return _finetune(config, workdir)


def warn_if_longer_than_trained(config: ml_collections.ConfigDict, source) -> None:
    """A warning when the run's inputs are longer than its starting bertjax run trained at:
    positions past that length start untrained (SQuAD's 384 from a phase-1 run at 128), as the
    original's README warns; phase2 pre-trains them (a rotary model's context: the modern recipe's long)."""
    length = config.data.max_seq_length
    untrained = source.untrained_past(length) if source is not None else None
    if untrained:
        # ('long' extends a modernbert-* preset's rotary context alone: configs/pretrain.py refuses
        # others; the run's preset is its saved recipe, an export's the modern encoder it holds)
        if source.run_config:
            preset = source.run_config.get("recipe") or ""
        else:
            preset = "modernbert" if is_modern(source.bert) else ""
        longer = ("its 'modern,long' option" if source.bert.position_embedding == "rope"
                  and preset.startswith("modernbert") else "its phase2")
        log.warning("config.data.max_seq_length=%d is longer than %s; pre-train at the longer length first "
                    "(configs/pretrain.py, %s) or fine-tune at %d", length, untrained, longer, source.positions_trained)


def _finetune(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    # -- Checkpoint, tokenizer, model config, mesh: validated before any data or compile. --
    clock = console.PhaseClock()  # where the run's time goes, summed up at the end
    source = checkpoint_source(config, workdir)
    run_config.warn_if_unfinished_start(config.init_checkpoint, workdir)
    tokenizer = trainer.process_zero_first(lambda: load_tokenizer(config, source), "tokenizer")
    run_config.check_same_tokenizer(workdir, tokenizer)
    bert, mesh_shape = checked_model(config, source and source.bert, tokenizer.vocab_size)
    warn_if_longer_than_trained(config, source)
    mesh = sharding.create_mesh(*mesh_shape)

    # -- The task's data, tokenized in memory (every host holds it: batches are cut the same
    #    way everywhere, and each device takes its rows of each). --
    with clock.phase("read and tokenize"):
        # A TFDS dataset not yet prepared: process 0 prepares it first, so that hosts sharing
        # its folder (gs://) find it there rather than all writing it at once (TFDS renames
        # its finished folder into place: all but the first would fail).
        trainer.process_zero_first(lambda: tasks.prepare_tfds(config), "TFDS datasets")
        task = tasks.load_task(config, tokenizer)
    run_config.check_same_task(workdir, task.info)  # before anything is written there
    train_batches, eval_buckets = training_batches(config, task.train, mesh_shape[0] * mesh_shape[1],
                                                   bert.length_multiple)
    train_cfg = schedule_config(config, task.train.examples_per_epoch)
    eval_batch_size = train_cfg.eval_batch_size or train_cfg.batch_size
    # Once per epoch as the schedule counts one: examples, which for span QA are the questions,
    # not their windows (the rows trained on; a short max_seq_length gives several a question).
    eval_every = train_cfg.eval_every or math.ceil(task.train.examples_per_epoch / train_batches.batch_size)

    # -- Model, objective, optimizer, shardings, state (resume order). --
    model = task.make_model(bert)
    # Evaluation and the predictions written at full precision, as `bertjax.load_model` predicts:
    # matmul_precision="bfloat16" speeds up the training steps only.
    eval_model = task.make_model(bert.replace(matmul_precision="default"))
    frozen = ("bert",) if config.train.freeze_encoder else ()  # no gradient, no optimizer state

    def apply(params, batch, rng):
        rngs = None if rng is None else {"dropout": rng}
        return (eval_model if rng is None else model).apply(
            {"params": params}, *task.inputs(batch), deterministic=rng is None, rngs=rngs,
            frozen_encoder=bool(frozen), **packing.model_inputs(batch),
            **feature_cache.model_inputs(batch, bert.feature_based))

    objective = trainer.Objective(apply=apply, sums=task.sums, counts=task.counts, loss_terms=task.loss_terms)
    optimizer = optim.make_optimizer(train_cfg)
    example = train_batches.batch(0)
    dummy = {name: np.zeros(spec.shape, spec.dtype)
             for name, spec in _abstract_batch(example, 1, train_batches.buckets[0]).items()}  # no cached features
    init_params = lambda: model.init(
        jax.random.key(config.seed), *task.inputs(dummy), **packing.model_inputs(dummy))["params"]
    if source and config.reuse_head:  # (before the checkpointer: a refused run writes nothing)
        check_reused_head(source, task.info)
    abstract, shardings = trainer.state_shardings(init_params, optimizer, mesh, frozen)
    # Whether the head reads the pooled [CLS], and whether the pooler it starts from had learnt.
    reads_pooler = not (tasks.family_of_task(config.task).reads_tokens or bert.feature_based)
    pooler_learnt = bool(source and (source.pooler_trained or pooler_from_masked_lm(source, bert)))
    if source and frozen and reads_pooler and not pooler_learnt:
        log.warning("config.train.freeze_encoder: the head reads the pooled [CLS], and %s's pooler never learnt "
                    "(a masked-LM-only run, or a class without one): frozen, it is a fixed random projection. "
                    "config.model.feature_combine=concat reads the last layer's [CLS] itself", config.init_checkpoint)
    pretrained = (lambda: pretrained_params(config, source, bert, abstract.params)) if source else None
    # Whether the pooler learnt, before or here: read back by model_source (a run started from
    # this one warns as above; the Hugging Face export leaves it out of classes without one).
    pooler_trained = pooler_learnt or (reads_pooler and not frozen)
    saved_config = {**config.to_dict(), "model": bert.to_dict(), "train": train_cfg.to_dict(), "task_info": task.info,
                    "init_weights": _init_weights(source, config, workdir), "pooler_trained": pooler_trained,
                    "positions_trained": _positions_trained(config.data.max_seq_length, source, frozen),
                    # (the rows trained on, wherever their file now lies: a finished run relaunched
                    # on other rows would train nothing, run_config.check_finished_unchanged)
                    "train_data_digest": splits_digest([task.train])}
    evaluated_on = evaluation_digest(task)
    scored_beside = splits_digest(task.eval_splits[1:])  # (MNLI's mismatched, a tagged test file)
    scored_on = splits_digest(task.eval_splits) if task.eval_splits else None  # every host scores the same rows
    # (and predicts the same rows: hosts with other test files under one path wrote one file of both)
    tested_on = splits_digest(task.test_splits) if task.test_splits else None
    trainer.check_same_on_every_process({**saved_config, "evaluation_digest": scored_on, "test_digest": tested_on,
                                         "workdir": workdir})  # (else a traceback at the checkpoints' first barrier)
    checkpointer = checkpointing.Checkpointer(
        fileio.join(workdir, "checkpoints"), save_interval_steps=config.checkpoint.every,
        max_to_keep=config.checkpoint.keep, async_save=config.checkpoint.async_save)
    try:
        run_config.check_finished_unchanged(workdir, saved_config, train_cfg.num_steps)
        state, how = trainer.initial_state(checkpointer, abstract, shardings, init_params=init_params,
                                           optimizer=optimizer, mesh=mesh, pretrained=pretrained,
                                           pretrained_source=config.init_checkpoint, config=saved_config, frozen=frozen)
    except BaseException:  # an async checkpointer left open fails in its thread at exit: a second error line
        checkpointer.close()
        raise
    if source and reads_pooler and not int(jax.device_get(state.step)):  # started from the source, not resumed
        how += pooler_origin(source, bert)
    if jax.process_index() == 0:  # only now: a run that cannot restore leaves the workdir as it was
        tokenization.save_tokenizer(tokenizer, fileio.join(workdir, "tokenizer"))
    start_step = int(jax.device_get(state.step))

    # -- The loop's bookkeeping: logs, checkpoints, the best evaluation so far. --
    # (a run stopped in its last evaluation owes it: not finished, it evaluates again)
    finished = start_step >= train_cfg.num_steps and not (
        task.eval_splits and training_loop.evaluation_owed_at(str(checkpointer.directory), start_step))
    # (process 0 alone: another host's passing read error would move aside a best/ process 0 kept)
    trainer.on_process_zero(lambda: _set_best_aside(fileio.join(workdir, "best"), fresh=start_step == 0,
                                                    finished=finished, evaluated_on=evaluated_on), "best/ checked")
    best_checkpointer = checkpointing.Checkpointer(fileio.join(workdir, "best"), save_interval_steps=1, max_to_keep=1,
                                                   async_save=False)
    # (every process reads it, or none: restoring it below is a collective)
    best_meta = checkpointing.read_meta(best_checkpointer.directory) if best_checkpointer.agreed_steps() else None
    # {"step", "metrics"} of the best evaluation so far (a run without evaluation saves its last
    # weights there at the end, with no metrics).
    best = best_meta["extra"] if best_meta and best_meta["extra"].get("metrics") else None
    recorded_length = ((best_meta or {}).get("config") or {}).get("data", {}).get("max_seq_length")
    if finished and recorded_length and recorded_length != config.data.max_seq_length:
        log.warning("this relaunch evaluates and predicts at config.data.max_seq_length=%d; the model records %d "
                    "(best/, which predict, bertjax.load_model and exports read): give predict.py and "
                    "export_model.py --max_seq_length=%d, load_model max_seq_length=%d, for these answers",
                    config.data.max_seq_length, recorded_length, config.data.max_seq_length,
                    config.data.max_seq_length)
    # A finished run relaunched with another evaluation (or none) keeps the best/ it chose: the
    # evaluation given scores those weights at the end (a new labelled eval_file scores the result).
    rescored = best is not None and best.get("evaluated_on", evaluated_on) != evaluated_on
    # The same evaluation beside other scored splits (a new tagged test file): best/'s weights
    # score them all anew, and the result's metrics are those, not the earlier files'.
    # (a best/ from before it was recorded: rescored wherever other splits are scored beside)
    rescored_beside = best is not None and not rescored and best.get(
        "scored_beside", scored_beside if len(task.eval_splits) < 2 else None) != scored_beside
    loop = training_loop.Loop(
        workdir=workdir, checkpointer=checkpointer, saved_config=saved_config, num_steps=train_cfg.num_steps,
        start_step=start_step, log_every=train_cfg.log_every, eval_every=eval_every if task.eval_splits else 0,
        max_consecutive_bad_steps=train_cfg.max_consecutive_bad_steps,
        sequences_per_step=train_cfg.batch_size, console_keys=("loss", "accuracy", "mse"),
        label=f"fine-tune {task.name}")
    loop.console(_run_summary(task, train_cfg, train_batches, bool(config.data.pack_examples), how, frozen,
                              start_step))

    programs = None  # compiled below; closed (its compile thread stopped) whatever ends the run
    diverged = None  # TrainingDiverged after an evaluation: raised once best/'s predictions are written
    try:
        # -- A frozen encoder runs once over each split; the steps and evaluations read what it
        #    gave (evaluation's from float32 products, as it evaluates without a cache). --
        caches: dict[str, feature_cache.FeatureCache] = {}
        if frozen and config.train.cache_features:
            with loop.paused(recurring=False), clock.phase("cache features"):  # not in the first steps' time and rate
                weights = checkpointing.weights_digest(state.params["bert"])
                # (a finished run relaunched, to predict a new test file say, trains no step)
                trains = start_step < train_cfg.num_steps
                for split in [*([task.train] if trains else []), *task.eval_splits, *task.test_splits]:
                    encoder_config = bert if split is task.train else bert.replace(matmul_precision="default")
                    caches[split.name], message = cached_features(
                        config, workdir, split, encoder_config, tasks.family_of_task(config.task).reads_tokens,
                        state.params["bert"], shardings.params["bert"], mesh, eval_batch_size, eval_buckets, weights,
                        stop=loop.watcher.stop_in_step)
                    loop.console(f"{split.name}: {message}")
            if trains:
                example = {**example, **caches[task.train.name].gather(train_batches.examples(0),
                                                                       example["input_ids"].shape[-1])}

        # -- The steps: the train step compiled once per batch shape the batches use, evaluation
        #    (sums and per-row predictions, replicated to every host) once per evaluation shape;
        #    compiled ahead in a background thread, in the order the run needs them. --
        # (any split's batch: the splits share the features' shapes)
        shaped_by = next((split for split in (task.train, *task.eval_splits, *task.test_splits)
                          if split.name in caches), task.train)
        eval_example, real = next(batching.eval_batches(shaped_by, eval_batch_size, eval_buckets))
        if caches:
            eval_example = caches[shaped_by.name].add_to_eval_batch(eval_example, real)
        first_epoch = min(train_cfg.num_steps - start_step, train_batches.steps_per_epoch())
        programs = Programs(
            mesh=mesh, abstract=abstract, shardings=shardings, objective=objective, task=task, train_cfg=train_cfg,
            seed=config.seed, frozen=frozen, example=example, eval_example=eval_example,
            order=[*(("train", shape) for shape in train_batches.shape_order(start_step, first_epoch)),
                   *eval_keys(task, eval_batch_size, eval_buckets, caches)])
        evaluator = Evaluator(task, programs, eval_batch_size, eval_buckets, caches)

        # -- The loop. --
        best_predictions: dict[str, dict[str, np.ndarray]] = {}  # this process's best evaluation's, reused at the end
        not_finite: list[tuple[int, float]] = []  # (step, loss) of this launch's evaluations that were not finite
        step = start_step
        batches = train_batches.batches(start_batch=start_step)
        if task.train.name in caches:
            batches = caches[task.train.name].with_features(batches, train_batches, start_step)
        def evaluate_at(step: int, state) -> None:
            """Evaluates the weights of `state` (after `step`), logs it, keeps them in best/ when
            they are the best."""
            nonlocal best, best_predictions
            params = state.params
            # best/'s save inside: one that fails saves the step too, owing its evaluation.
            with loop.evaluation(step, state), clock.phase("evaluate"):
                results, predictions = evaluator.evaluate(params, lambda: loop.check_stop_during_evaluation(step))
                main = results[task.eval_splits[0].name]
                finite = all(map(math.isfinite, (main["loss"], main[task.main_metric])))
                if not finite:  # weights gone non-finite (diverging): their argmax scores are no result
                    log.warning("the evaluation at step %d is not finite (loss %s): not kept as the best", step,
                                main["loss"])
                    not_finite.append((step, main["loss"]))
                elif best is None or _better(main, best["metrics"], task.main_metric):
                    # replace: a resumed run evaluates a step again, and best/ may hold its
                    # earlier (other) weights and score.
                    # (every split's: a sweep's table shows MNLI's mismatched score beside the matched)
                    best = {"step": step, "metrics": _eval_record(results), "evaluated_on": evaluated_on,
                            "scored_beside": scored_beside}
                    # (two managers saving at once call one cross-host barrier from two threads,
                    # which orbax refuses: a two-host run crashed when a save was still finishing)
                    # (a failed training checkpoint: a warning, the best still saved; the next one retries)
                    checkpointer.wait_reporting(step)
                    best_checkpointer.save(step, {"params": params}, data_position=step, config=saved_config,
                                           force=True, extra_meta=best, replace=True)
                    best_predictions = predictions
            with loop.paused(), clock.phase("evaluate"):
                loop.write_eval(step, _eval_record(results))

        if config.train.eval_at_start and start_step == 0 and task.eval_splits:
            with loop.paused(), clock.phase("evaluate"):  # the starting point, for comparison only: never best/
                loop.write_eval(0, _eval_record(evaluator.evaluate(state.params)[0]))
        loop.check_not_diverged()  # (its best evaluation before it: the result, as when it stopped)
        if loop.owes_evaluation:  # stopped at an evaluation step: saved before evaluating
            evaluate_at(step, state)
        while step < train_cfg.num_steps:
            batch = loop.next_batch(batches, step, state)
            step_fn = _train_step(programs, batching.batch_shape(batch), loop, clock)
            with sharding.activate(mesh):
                state, metrics = step_fn(state, trainer.whole_batch(batch, mesh), programs.step_inputs)
            step += 1
            loop.record(step, metrics, state)
            if loop.evaluates(step):
                evaluate_at(step, state)
            with clock.phase("save"):
                loop.save(step, state)
        if best is None and task.eval_splits and not not_finite:  # relaunched over a best/ moved aside unreadable
            log.warning("no readable best weights and no step left to evaluate: the last weights (step %d) are "
                        "evaluated, to be kept in %s", step, best_checkpointer.directory)
            evaluate_at(step, state)
        if best is None and not_finite:  # (a relaunch counts non-finite steps afresh: it may end so)
            last, loss = not_finite[-1]
            raise TrainingDiverged(
                f"no evaluation of the run in {workdir} is finite (the last, at step {last}: loss {loss}): its weights "
                "are no result, and nothing was predicted with them; train again in a new workdir at a lower "
                "learning rate, or check the data.", resumable=False)
    except BaseException as error:
        if isinstance(error, TrainingDiverged) and best is not None:
            diverged = error  # the best weights evaluated before it are still a result: predicted below
        else:
            if programs is not None:
                programs.close()
            raise
    finally:
        with clock.phase("save"):
            loop.close()

    # -- The result in best/: the best weights, or the last ones without evaluation splits
    #    (what `bertjax.inference.model_source` loads from the workdir); predictions with them. --
    params = state.params
    to_predict = {split.name for split in task.eval_splits + task.test_splits} - set(best_predictions)
    if best is not None and to_predict:
        restored, _ = best_checkpointer.restore({"params": trainer.with_shardings(abstract.params, shardings.params)})
        params = restored["params"]
    elif not task.eval_splits and best is None:
        best_checkpointer.save(step, {"params": state.params}, data_position=step, config=saved_config, force=True,
                               extra_meta={"step": step, "metrics": {}}, replace=True)  # (an earlier launch's)
    best_checkpointer.close()
    written, rescores = [], {}
    directory = fileio.join(workdir, "predictions")
    # An earlier launch's predictions (another test file, a finished run relaunched): said when
    # replaced; one a killed launch left half-written is removed (the workdir is this run's).
    earlier = {}
    for path in fileio.files_under(directory) if jax.process_index() == 0 else ():
        if fileio.INTERRUPTED_WRITE.fullmatch(os.path.basename(path)):
            fileio.remove(path)
        else:
            earlier[path] = fileio.content_hash(path)
    with clock.phase("predict"):
        for split in task.eval_splits + task.test_splits:
            if split.name in to_predict:  # written post-processed once; scored if best/ was chosen otherwise
                scores, predictions = evaluator.run_split(
                    params, split, score=(rescored or rescored_beside) and split in task.eval_splits)
                if scores:
                    rescores[split.name] = scores
            else:  # the best weights' evaluation, run by this process
                predictions = best_predictions[split.name]
            if jax.process_index() == 0:
                written += task.write_predictions(split, predictions, directory)
    programs.close()
    if rescored_beside and set(rescores) == {split.name for split in task.eval_splits}:
        main = task.eval_splits[0].name  # (its scores as recorded: they chose best/ and rank it in a sweep)
        recorded = {key: best["metrics"][key] for key in rescores.pop(main) if key in best["metrics"]}
        best = {**best, "metrics": _eval_record({main: recorded, **rescores}), "scored_beside": scored_beside}
    if best is not None:
        # (the other dev splits' by name: SQuAD v2's HasAns_f1 and best_f1 are the main split's)
        others = "".join(f", {name} {best['metrics'][name]:.4f}" for split in task.eval_splits[1:]
                         if (name := f"{split.name}_{task.main_metric}") in best["metrics"])
        chosen = (f"{task.main_metric} {best['metrics'][task.main_metric]:.4f}{others} at step {best['step']}"
                  + (" on an earlier launch's evaluation" if rescored else ""))
        loop.console(f"best {chosen} (weights in {best_checkpointer.directory})")
        for name, scores in rescores.items():
            loop.console(f"those weights score {task.main_metric} {scores[task.main_metric]:.4f} on {name}: "
                         + " ".join(f"{key} {value:.4f}" for key, value in scores.items()))
    elif not task.eval_splits:
        loop.console(f"no evaluation split: the last weights (step {step}) are the result, in "
                     f"{best_checkpointer.directory}")
    replaced = [path for path in written if earlier.get(path) not in (None, fileio.content_hash(path))]
    if replaced:
        loop.console(f"replaced an earlier launch's predictions with this one's: {', '.join(replaced)}")
    # An earlier launch's file of a split this one has not (its test file, given then) came from
    # the weights of then: after steps trained now they may no longer be the result's.
    kept = sorted(set(earlier) - set(written))
    if kept and step > start_step:
        log.warning("%s: an earlier launch's predictions, from the weights it ended with; this launch trained steps "
                    "%d to %d since, so they may not be best/'s answers: give the file again (config.data.test_file) "
                    "to predict it with them", ", ".join(kept), start_step + 1, step)
    loop.console(f"done: metrics in {fileio.join(workdir, 'metrics.jsonl')}, "
                 + (f"predictions in {directory}" if written else "no predictions (no eval_file or test_file)"))
    # (a run to relaunch keeps it, as a stopped one does; one relaunched finished, or without
    # caching, may find an earlier launch's files there, built for no split of this one)
    if (temporary_cache(config, workdir) and fileio.isdir(cache_directory(config, workdir))
            and not (diverged is not None and diverged.resumable)):
        for cache in caches.values():
            cache.remove()
        shutil.rmtree(cache_directory(config, workdir), ignore_errors=True)
        loop.console(f"removed the cached features from {cache_directory(config, workdir)} (a temporary folder)")
    elif caches:  # (gigabytes at scale: said, as a folder the user may want back)
        own = sum(cache.stored_bytes() for cache in caches.values())  # (the other processes' copies too)
        others = feature_cache.stored_bytes(cache_directory(config, workdir)) - own
        more = f", and {feature_cache.readable_size(others)} of other cache files" if others > 0 else ""
        loop.console(f"the frozen encoder's cached features stay in {cache_directory(config, workdir)} "
                     f"({feature_cache.readable_size(own)} for this run{more}): a run on the same weights and inputs "
                     "reuses them; delete them when none will")
    loop.console(clock.summary(rest="train and start-up"))
    result = {"best": best, "rescored": rescores, "last": loop.last, "predictions": written,
              "main_metric": task.main_metric, "seconds": clock.seconds(rest="train and start-up")}
    if diverged is not None:
        raise TrainingDiverged(f"{diverged} The best evaluation before it (step {best['step']}) is the result: "
                               f"weights in {best_checkpointer.directory}, predictions in {directory}.", result=result,
                               resumable=diverged.resumable)
    return result

"""BERT pre-training (masked LM + next-sentence prediction): one loop, top to bottom.

Sections: tokenizer, model config, mesh (checked first: `pretrain_setup.py`) -> input ->
model, objective and state (resume order) -> the compiled step -> the loop. The machinery
both stages share (step, shardings, resume order) is in `trainer.py`, the loop's tail in
`training_loop.py`.

Resume order (documented, fixed): the workdir's latest checkpoint -> `config.init_checkpoint`
(a bertjax checkpoint, a Hugging Face directory or Google's original TF release; weights
only, step 0) -> scratch. Randomness is derived from `fold_in(seed, step)` and the input
pipeline is a deterministic function of the batch index, so a resumed run replays exactly
the numbers an uninterrupted run would have produced.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import shlex
from typing import Any, Callable

import jax
import ml_collections
import numpy as np

from bertjax import checkpointing, optim, pretrain_setup, run_config, sharding, tokenization, trainer, training_loop
from bertjax.batch_warmup import BatchWarmup
from bertjax.metrics import mean_pretraining_flops, pretraining_flops_per_sequence
from bertjax.models import (BertConfig, BertForPreTraining, pretraining_counts, pretraining_loss_terms,
                            pretraining_sums, stack_layers)
from bertjax.runtime import compilation_cache, compile_ahead, console, fileio, plots

log = logging.getLogger(__name__)


# ======================================================================================
# Model and objective.
# ======================================================================================

def model_inputs(batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """BertForPreTraining's keyword arguments from a batch (packed rows: see data/pretraining.py)."""
    inputs = dict(input_ids=batch["input_ids"], token_type_ids=batch["segment_ids"],
                  attention_mask=batch["input_mask"], masked_lm_positions=batch["masked_lm_positions"])
    if "sequence_ids" in batch:
        inputs.update(position_ids=batch["position_ids"], sequence_ids=batch["sequence_ids"],
                      cls_positions=batch["cls_positions"])
    return inputs


def objective(model: BertForPreTraining) -> trainer.Objective:
    """Masked LM (weighted mean over the real predictions) + NSP (mean over sequences) when the
    model predicts the next sentence."""
    nsp = model.next_sentence_prediction

    def apply(params, batch, rng):
        rngs = None if rng is None else {"dropout": rng}
        return model.apply({"params": params}, **model_inputs(batch), deterministic=rng is None, rngs=rngs)

    return trainer.Objective(apply=apply, sums=lambda outputs, batch: pretraining_sums(*outputs, batch),
                             counts=lambda batch: pretraining_counts(batch, nsp),
                             loss_terms=pretraining_loss_terms(nsp))


def abstract_inputs(config: ml_collections.ConfigDict, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes/dtypes of one batch with the original feature names."""
    seq, pred, pairs = config.data.max_seq_length, config.data.max_predictions_per_seq, config.data.pack_pairs
    if config.data.full_rows and config.data.full_rows_attention == "document":  # one [CLS] per row
        shapes = {"position_ids": (seq,), "sequence_ids": (seq,), "cls_positions": (1,)}
    else:
        shapes = {}
    shapes.update({"input_ids": (seq,), "input_mask": (seq,), "segment_ids": (seq,), "masked_lm_positions": (pred,),
                   "masked_lm_ids": (pred,), "masked_lm_weights": (pred,), "next_sentence_labels": ()})
    if pairs:
        shapes.update(next_sentence_labels=(pairs,), next_sentence_weights=(pairs,), position_ids=(seq,),
                      sequence_ids=(seq,), cls_positions=(pairs,))
    floats = ("masked_lm_weights", "next_sentence_weights")
    return {name: jax.ShapeDtypeStruct((batch_size, *shape), np.float32 if name in floats else np.int32)
            for name, shape in shapes.items()}


def pretrained_params(path: str, bert: BertConfig, model_params: Any) -> dict[str, Any]:
    """The weights of `path` (any layout) that this model has: the encoder, and the MLM/NSP heads
    when the checkpoint holds them (others keep their fresh initialisation)."""
    from bertjax.models.convert import load_pretrained

    _, loaded = load_pretrained(path)
    if bert.scan_layers:
        loaded = {**loaded, "bert": stack_layers(loaded["bert"], bert.num_hidden_layers)}
    unused = sorted(set(loaded) - set(model_params))
    if unused:  # a fine-tuned model's task head, or NSP's where this run has none
        why = ": config.data.next_sentence_prediction=False" if "nsp" in unused else ""
        log.warning("config.init_checkpoint=%s: its %s weights are not used (this run has no such head%s)", path,
                    unused, why)
    return {name: tree for name, tree in loaded.items() if name in model_params}


# ======================================================================================
# Input.
# ======================================================================================

class HostBatches:
    """This process's rows of each global batch, as numpy.

    `config.data.host_split`: "files" -- each host reads its own files (scales to pods);
    "global_batch" -- every host builds the whole global batch and each device takes its
    rows, so the run sees exactly the batches of a one-process run (for verification; costs
    input work).

    With batch-size warmup (`warmup`, training only) the pipeline reads batches of
    `warmup.unit` rows and each step joins as many as its size needs.
    """

    def __init__(self, config: ml_collections.ConfigDict, workdir: str, split: str,
                 warmup: BatchWarmup | None = None):
        from bertjax.data import pipelines  # TensorFlow only for input

        self.warmup = warmup or BatchWarmup(config.train.global_batch_size, 0, 0)
        unit, count, index = self.warmup.unit, jax.process_count(), jax.process_index()
        self.whole_batches = config.data.host_split != "files"
        if self.whole_batches:
            batch_size, pipeline_index, pipeline_count = unit, 0, 1
        else:
            batch_size, pipeline_index, pipeline_count = unit // count, index, count
        self.features = tuple(abstract_inputs(config, batch_size))  # what the step takes, nothing more
        self.pipeline = pipelines.make_pipeline(config.data, workdir, batch_size=batch_size,
                                                process_index=pipeline_index, process_count=pipeline_count,
                                                split=split)
        # Each host lists the files itself and deals them out (host_split="files") or reads them
        # all: a host whose copy differs (a file missing, one cut short) would read other hosts'
        # rows, or none, or other batches than theirs, without a word.
        pattern = "input_pattern" if split == "train" else "eval_input_pattern"
        where = (config.data[pattern] if config.data.source == "original_tfrecord"
                 else os.path.dirname(self.pipeline.paths[0]))  # (the prepared shards' folder)
        trainer.check_same_on_every_process({f"{split}_files": where,
                                             f"{split}_files_digest": [self.pipeline.paths, self.pipeline.sizes]})

    def batches(self, start_step: int = 0, start_unit: int | None = None):
        """This process's rows (or, with whole batches, all rows) of the batch of each step
        from `start_step` on, read from the stream's batch of `warmup.unit` rows `start_unit`
        (default: where the batch settings put step `start_step`; `resume_unit`)."""
        units = self.pipeline.batches(self.warmup.units_before(start_step) if start_unit is None else start_unit)
        for batch in self.warmup.batches(units, start_step):
            yield {name: batch[name] for name in self.features}


def resume_unit(checkpoint_dir: str, start_step: int, warmup: BatchWarmup) -> tuple[int, str]:
    """(the stream's batch of `warmup.unit` rows a run resumed at `start_step` reads first, a
    note when that is not where the current batch settings put the step).

    The checkpoint records the rows read before it (meta["extra"]["rows_read"]): a run that
    resumes with another global_batch_size or batch warmup picks the stream up there, not at
    step x its own batch size, which would skip or repeat data. Rows that are not a whole
    number of unit batches are rounded down (a few rows read twice)."""
    at_step = warmup.units_before(start_step)
    if start_step == 0:
        return at_step, ""
    read = checkpointing.read_meta(fileio.join(checkpoint_dir, str(start_step)))["extra"].get("rows_read")
    if read is None or read == at_step * warmup.unit:  # (a checkpoint from before rows were recorded: None)
        return at_step, ""
    unit = read // warmup.unit
    cut = f" (rounded down to whole batches of {warmup.unit} rows: {read - unit * warmup.unit} read again)" if (
        read % warmup.unit) else ""
    return unit, (f"the training stream resumes after the {read:,} rows read before step {start_step}{cut}, not at "
                  f"row {at_step * warmup.unit:,} where the current batch settings put that step")


def guess_accuracies(batches: list[dict[str, np.ndarray]], vocab_size: int, next_sentence_prediction: bool = True
                     ) -> dict[str, float]:
    """What guessing scores on `batches` (each process's, counted over all processes): always the
    most frequent masked token (`mlm_unigram_accuracy`) and, with NSP, always the majority label
    (`nsp_majority_accuracy`). Processes holding the same whole batches count each P times:
    the same shares."""
    targets = np.concatenate([b["masked_lm_ids"][b["masked_lm_weights"] > 0] for b in batches])
    counts = _summed_over_processes(np.bincount(targets, minlength=vocab_size).astype(np.int32))
    guesses = {"mlm_unigram_accuracy": float(counts.max() / counts.sum())}
    if not next_sentence_prediction:
        return guesses
    labels = np.concatenate([b["next_sentence_labels"].ravel() for b in batches])
    weights = np.concatenate([b.get("next_sentence_weights", np.ones_like(b["next_sentence_labels"],
                                                                        np.float32)).ravel() for b in batches])
    random, total = _summed_over_processes(np.array([np.sum(weights * labels), np.sum(weights)], np.float32))
    random_share = float(random / total)
    return {**guesses, "nsp_majority_accuracy": max(random_share, 1.0 - random_share)}


def _summed_over_processes(values: np.ndarray) -> np.ndarray:
    """The sum of every process's `values` (each calls this)."""
    if jax.process_count() == 1:
        return values
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(values)).sum(0)


class PlateauAlarm:
    """Warns once when held-out MLM accuracy stays at the unigram guess (always the most frequent
    masked token: what a model that learned nothing but token frequencies scores).

    `check(step, mlm_accuracy, mlm_loss)` after each evaluation returns the warning the first
    time `patience` evaluations in a row scored below PLATEAU_MARGIN x `unigram`, else None: a
    model that collapsed onto the frequent tokens (an update too large) gets other fixes than
    one whose loss is still near a uniform guess's, ln(`vocab_size`) (it has barely moved);
    `stalled` says whether the alarm went off and the last evaluation is still there. A resumed
    run `replay`s the evaluations logged before it, so that preemptions do not reset the count.
    """

    PLATEAU_MARGIN = 1.1

    def __init__(self, unigram: float, patience: int, bias_corrected: bool = False, vocab_size: int = 0,
                 num_steps: int = 0):
        """bias_corrected: the run's optimizer already corrects its first updates (no fix to offer);
        num_steps: the run's, said beside the step (a short run may end on the plateau)."""
        self.unigram, self.patience, self.num_steps = unigram, patience, num_steps
        self.uniform_loss = math.log(vocab_size) if vocab_size > 1 else math.inf
        self.fixes = ([] if bias_corrected else ["config.train.adam_bias_correction=True"]) + [
            "a lower config.train.learning_rate", "a longer config.train.warmup_steps"]
        self.steps_at_guess: list[int] = []
        self.warning: str | None = None
        self.warned_at: int | None = None  # the step of the warning
        self.last: tuple[int, float] | None = None  # (step, accuracy) of the last evaluation

    def check(self, step: int, mlm_accuracy: float, mlm_loss: float | None = None) -> str | None:
        self.last = (step, mlm_accuracy)
        if mlm_accuracy >= self.PLATEAU_MARGIN * self.unigram:
            self.steps_at_guess = []
            return None
        self.steps_at_guess.append(step)
        if self.warning or not self.patience or len(self.steps_at_guess) < self.patience:
            return None
        of = f" of this run's {self.num_steps}" if self.num_steps else ""
        if mlm_loss is not None and mlm_loss >= 0.9 * self.uniform_loss:  # near ln(V): the weights barely moved
            why = (f"its held-out loss {mlm_loss:.3f} is still near a uniform guess's {self.uniform_loss:.3f}: the "
                   f"model has barely moved by step {step}{of}. Likely fixes: a higher config.train.learning_rate, "
                   "or more steps (the warmup of config.train.warmup_steps may not be over)")
        else:
            why = (f"the model is not learning past token frequencies, or not yet: step {step}{of} (a short run may "
                   f"end before it gets past this plateau: more steps mend that). Likely fixes otherwise: "
                   f"{', '.join(self.fixes[:-1])} or {self.fixes[-1]}")
        self.warning = (
            f"warning: held-out masked-LM accuracy {mlm_accuracy:.4f} has stayed below {self.PLATEAU_MARGIN}x the "
            f"unigram guess {self.unigram:.4f} (always the most frequent masked token) for {len(self.steps_at_guess)} "
            f"evaluations (steps {self.steps_at_guess[0]}-{step}): {why} (docs/pretraining.md, Pre-training recipes)")
        self.warned_at = step
        return self.warning

    def replay(self, records: list[dict]) -> None:
        """Counts an earlier launch's evaluations (metrics.jsonl's records, in step order), as an
        uninterrupted run would have; a warning they reach was said by that launch."""
        for record in records:
            if "eval_mlm_accuracy" in record:
                self.check(record["step"], record["eval_mlm_accuracy"], record.get("eval_mlm_loss"))

    @property
    def stalled(self) -> bool:
        return bool(self.warning and self.steps_at_guess)

    def ending(self) -> str:
        """The run's closing line when it ended stalled: its last evaluation, not the warning's again."""
        step, accuracy = self.last
        return (f"the run ended at the unigram guess: held-out masked-LM accuracy {accuracy:.4f} at step {step} "
                f"(the guess {self.unigram:.4f}); see the warning at step {self.warned_at}")


# ======================================================================================
# The run.
# ======================================================================================

def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    """Runs pre-training to `config.train.num_steps`; returns the last logged metrics."""
    with trainer.hold_workdir(workdir):
        run_config.check_same_kind(workdir, config.to_dict())  # before anything is written there
        return _train_and_evaluate(config, workdir)


def fixed_eval_batches(config: ml_collections.ConfigDict, workdir: str) -> list[dict[str, np.ndarray]]:
    """The held-out batches every evaluation of the run reads (none without evaluation)."""
    train_cfg = config.train
    if not (train_cfg.eval_every and train_cfg.eval_batches):
        return []
    eval_data = HostBatches(config, workdir, "eval")
    pretrain_setup.warn_if_eval_repeats(eval_data.pipeline, train_cfg.eval_batches)
    stream = eval_data.batches(0)
    return [next(stream) for _ in range(train_cfg.eval_batches)]


def evaluate(eval_fn, params, batches: list[dict[str, np.ndarray]], mesh, place: Callable,
             loss_terms: tuple[str, ...]) -> dict[str, float]:
    """Masked-LM (and NSP) metrics over the fixed eval batches, each made global by
    `place(batch, mesh)`; loss is the sum of `loss_terms`."""
    totals = trainer.EvalTotals()
    with sharding.activate(mesh):
        for batch in batches:
            totals.add(*eval_fn(params, place(batch, mesh)))
    means = totals.means()
    means["loss"] = sum(means[name] for name in loss_terms)
    return means


def _nothing_left(checkpoints: str, num_steps: int) -> bool:
    """Whether the newest checkpoint in `checkpoints` is step `num_steps` with no evaluation
    owed: the run has nothing left to do. Process 0's reading, on every process (they then
    all read the batches, or none); False where its meta does not read (the restore decides)."""
    done = False
    if jax.process_index() == 0:
        latest = checkpointing.latest_step(checkpoints)
        try:
            done = latest == num_steps and not training_loop.evaluation_owed_at(checkpoints, latest)
        except (ValueError, OSError, KeyError):  # an unreadable meta: the restore falls back, or says why
            pass
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        done = bool(multihost_utils.broadcast_one_to_all(np.int32(done)))
    return done


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    from bertjax.data import prepare  # TensorFlow only for input

    train_cfg = config.train
    clock = console.PhaseClock()  # where the run's time went: its last line

    # -- Tokenizer, model config, mesh: validated before data preparation or compiling. --
    bert, mesh_shape, data_dir = pretrain_setup.checked_model(config, workdir)
    mesh = sharding.create_mesh(*mesh_shape)
    # Each host reads its own rows (host_split="files"), or every host the whole batch.
    place = trainer.global_batch if config.data.host_split == "files" else trainer.whole_batch
    if config.data.host_split == "files":
        trainer.check_rows_per_process(mesh, train_cfg.global_batch_size)
    # Only now (it may write the demo vocabulary into data_dir): a refused run writes nothing.
    tokenizer = trainer.process_zero_first(lambda: prepare.load_tokenizer_for(config.data, data_dir), "tokenizer")
    run_config.check_same_tokenizer(workdir, tokenizer)  # before WORKDIR/tokenizer is written again
    devices, processes = jax.device_count(), jax.process_count()
    loop_console = (f"model {bert.describe()}; tokenizer {tokenizer.kind} {str(tokenizer.path).rsplit('/', 1)[-1]} "
                    f"({tokenizer.vocab_size} tokens); batch {train_cfg.global_batch_size} x "
                    f"{config.data.max_seq_length} tokens; mesh data {mesh.shape['data']} x fsdp {mesh.shape['fsdp']} "
                    f"x tensor {mesh.shape['tensor']} over {devices} device{'s' * (devices > 1)} "
                    f"({processes} process{'es' * (processes > 1)})")

    # -- Model, objective, optimizer, shardings (abstract): a resume the run's checkpoints
    #    cannot give is refused now, not after hours of data preparation. --
    nsp = config.data.next_sentence_prediction
    model = BertForPreTraining(bert, next_sentence_prediction=nsp)
    task = objective(model)
    optimizer = optim.make_optimizer(train_cfg)
    batch_abstract = abstract_inputs(config, train_cfg.global_batch_size)
    dummy = {name: np.zeros(spec.shape, spec.dtype) for name, spec in batch_abstract.items()}
    init_params = lambda: model.init(jax.random.key(config.seed), **model_inputs(dummy))["params"]
    abstract, shardings = trainer.state_shardings(init_params, optimizer, mesh)
    pretrained = None
    if config.init_checkpoint:
        pretrained = lambda: pretrained_params(config.init_checkpoint, bert, abstract.params)
    saved_config = {**config.to_dict(), "model": bert.to_dict()}
    if config.data.host_split == "files":  # each host reads its own files: their split follows the host count
        saved_config["data"]["process_count"] = jax.process_count()
    trainer.check_same_on_every_process({**saved_config, "workdir": workdir})  # (another: a barrier's traceback)
    trainer.check_resumable(workdir, abstract, saved_config, train_cfg.num_steps)

    warmup = BatchWarmup(train_cfg.global_batch_size, train_cfg.batch_warmup_start, train_cfg.batch_warmup_steps)

    def read_data(nothing_left: bool = False) -> tuple[HostBatches | None, list[dict[str, np.ndarray]]]:
        """The input: prepared once (process 0 first, the others then find it done), or found
        to be the corpus given; the training stream, and the eval batches read once per run
        (neither for a run with `nothing_left`)."""
        with clock.phase("prepare and read data"):
            if config.data.source != "original_tfrecord":
                trainer.process_zero_first(lambda: prepare.ensure_prepared(config.data, data_dir), "prepared data")
            if nothing_left:
                return None, []
            return HostBatches(config, workdir, "train", warmup), fixed_eval_batches(config, workdir)

    # A run relaunched after its last step, its evaluation done, reads no batches (the held-out
    # ones would be a wait before doing nothing); its corpus is still checked against the one
    # prepared (else a finished run relaunched on another corpus said "done").
    checkpoints = fileio.join(workdir, "checkpoints")
    train_data, eval_batches = read_data(nothing_left=_nothing_left(checkpoints, train_cfg.num_steps))

    # -- The state, in the resume order. --
    checkpointer = checkpointing.Checkpointer(
        checkpoints, save_interval_steps=config.checkpoint.every, max_to_keep=config.checkpoint.keep,
        async_save=config.checkpoint.async_save)
    state, how = trainer.initial_state(checkpointer, abstract, shardings, init_params=init_params,
                                       optimizer=optimizer, mesh=mesh, pretrained=pretrained,
                                       pretrained_source=config.init_checkpoint, config=saved_config)
    log.info("%s", how)
    start_step = int(jax.device_get(state.step))  # (the same on every process)
    if train_data is None and start_step < train_cfg.num_steps:  # the last step unreadable: an earlier one restored
        train_data, eval_batches = read_data()
    guesses = (guess_accuracies(eval_batches, bert.vocab_size, config.data.next_sentence_prediction)
               if eval_batches else {})
    alarm = PlateauAlarm(guesses.get("mlm_unigram_accuracy", 0.0), train_cfg.plateau_evals,
                         bias_corrected=train_cfg.optimizer != "adamw" or bool(train_cfg.get("adam_bias_correction")),
                         vocab_size=tokenizer.vocab_size, num_steps=train_cfg.num_steps)
    if jax.process_index() == 0:  # only now: a run that cannot restore leaves the workdir as it was
        tokenization.save_tokenizer(tokenizer, fileio.join(workdir, "tokenizer"))  # fine-tuning finds it here

    # -- The step, compiled once per batch size with explicit shardings (once, without batch
    #    warmup; with it the first size and the largest the run reaches now, so that a batch too
    #    large for memory fails here rather than hours into the ramp, and the sizes between in a
    #    background thread while the first steps run: below); the state is donated. --
    start_unit, resumed_note = resume_unit(str(checkpointer.directory), start_step, warmup)
    units_at_start = warmup.units_before(start_step)
    if resumed_note:
        log.warning("%s", resumed_note)
    batch_shardings = {name: sharding.batch_sharding(mesh, len(spec.shape)) for name, spec in batch_abstract.items()}
    with sharding.activate(mesh):
        step_inputs = trainer.step_inputs(train_cfg, config.seed, mesh)
        jitted_step = trainer.jit_train_step(mesh, shardings, batch_shardings, objective=task, train_config=train_cfg)
        compile_for = lambda rows: trainer.compile_step(jitted_step, trainer.with_shardings(abstract, shardings),
                                                        abstract_inputs(config, rows), step_inputs)
        # Held-out metrics with float32 products, as fine-tuning evaluates and load_model predicts:
        # matmul_precision="bfloat16" speeds up the training steps only.
        eval_objective = objective(BertForPreTraining(bert.replace(matmul_precision="default"),
                                                      next_sentence_prediction=nsp))
        # In the train step's micro-batches, and compiled now: an evaluation too large for memory
        # fails here, not after the first eval_every steps.
        eval_fn = jax.jit(lambda p, b: trainer.eval_sums_in_parts(p, b, objective=eval_objective,
                                                                  parts=train_cfg.grad_accum_steps),
                          in_shardings=(shardings.params, batch_shardings),
                          compiler_options=compilation_cache.compiler_options())
        # A run relaunched after its last step trains nothing: nothing compiled ahead (an
        # evaluation it still owes compiles when it runs).
        finished = start_step == train_cfg.num_steps
        compiled, compile_seconds = {}, 0.0
        if eval_batches and not finished:
            eval_fn, compile_seconds = trainer.compile_step(
                eval_fn, trainer.with_shardings(abstract.params, shardings.params),
                abstract_inputs(config, train_cfg.global_batch_size))
        for rows in [] if finished else sorted({warmup.rows(start_step), warmup.rows(train_cfg.num_steps - 1)}):
            compiled[rows], seconds = compile_for(rows)
            compile_seconds += seconds
        clock.add("compile", compile_seconds)
    loop = training_loop.Loop(
        workdir=workdir, checkpointer=checkpointer, saved_config=saved_config,
        num_steps=train_cfg.num_steps, start_step=start_step, log_every=train_cfg.log_every,
        eval_every=train_cfg.eval_every if eval_batches else 0,
        max_consecutive_bad_steps=train_cfg.max_consecutive_bad_steps,
        sequences_per_step=train_cfg.global_batch_size, tokens_per_sequence=config.data.max_seq_length,
        flops_per_sequence=pretraining_flops_per_sequence(bert, config.data.max_seq_length,
                                                          config.data.max_predictions_per_seq,
                                                          next_sentence_prediction=nsp),
        console_keys=("loss", "mlm_accuracy", "nsp_accuracy") if nsp else ("loss", "mlm_accuracy"),
        label="pre-train",
        fixed_metrics={"compile_seconds": compile_seconds}, bfloat16_products=bert.matmul_precision == "bfloat16",
        rows_read=lambda at: (start_unit + warmup.units_before(at) - units_at_start) * warmup.unit)
    logged = fileio.join(workdir, "metrics.jsonl")  # (process 0's, trimmed to this launch's start by the loop)
    if start_step and eval_batches and fileio.exists(logged):
        alarm.replay(plots.read_metrics(workdir))
    ramp = (f"; the batch grows {warmup.unit} -> {train_cfg.global_batch_size} rows over the first "
            f"{warmup.warmup_steps} steps" if warmup.active else "")
    sizes = f" at {' and '.join(map(str, compiled))} rows" if len(compiled) > 1 else ""
    evaluation = " and the evaluation" if eval_batches else ""
    if finished:
        loop.console(f"{loop_console}; {how}; at step {start_step} of {train_cfg.num_steps}: nothing left to train")
    else:
        loop.console(f"{loop_console}; {how}; compiled the train step{sizes}{evaluation} in {compile_seconds:.1f}s; "
                     f"starting at step {start_step} of {train_cfg.num_steps}{ramp}")

    # -- The loop. Metrics stay on device until a log step: no host round-trip per step. --
    def evaluate_at(step: int, state) -> None:
        """Evaluates the weights of `state` (after `step`), logs it, and warns of a masked LM stuck
        at the unigram guess."""
        with loop.evaluation(step, state), clock.phase("evaluate"):
            results = {**evaluate(eval_fn, state.params, eval_batches, mesh, place, task.loss_terms), **guesses}
        with loop.paused(), clock.phase("evaluate"):
            loop.write_eval(step, results)
        if alarm.check(step, results["mlm_accuracy"], results["mlm_loss"]):
            loop.console(alarm.warning)
            loop.writer.write(step, {"mlm_plateau_warning": 1.0})

    # The sizes between, compiled in a background thread while the first steps run: compiled
    # where the batch grows, each stopped the loop for its compile, through which a stop signal
    # waited (minutes for a large model on a TPU, past a preemption's grace period).
    def compile_growth(rows: int):
        with sharding.activate(mesh):
            return compile_for(rows)
    growth = dict.fromkeys(warmup.rows(at) for at in range(start_step, min(train_cfg.num_steps, warmup.warmup_steps)))
    growth = [rows for rows in growth if rows not in compiled]
    ahead = compile_ahead.CompileAhead(compile_growth, growth)
    if growth:
        loop.console(f"compiling the step for the {len(growth)} batch size(s) between ({', '.join(map(str, growth))} "
                     "rows) in the background")
    step = start_step
    batches = loop.input(train_data.batches(start_step, start_unit) if train_data else iter(()))  # (nothing left)
    try:
        loop.check_not_diverged()
        if loop.owes_evaluation:  # stopped at an evaluation step: saved before evaluating
            evaluate_at(step, state)
        while step < train_cfg.num_steps:
            rows = warmup.rows(step)
            if step > start_step and rows != warmup.rows(step - 1):
                how_compiled = "compiled at the start"
                if rows not in compiled:
                    with loop.paused(recurring=False), clock.phase("compile"):
                        compiled[rows], seconds, waited = ahead.take(rows)
                    how_compiled = f"compiled its step in {seconds:.1f}s" + (
                        f" ({seconds - waited:.1f}s of it while training)" if seconds - waited >= 0.1 else "")
                # (1-based, as the metrics' rows and checkpoints count steps)
                loop.console(f"step {step + 1}: the batch grows to {rows} rows; {how_compiled}")
            batch = loop.next_batch(batches, step, state)
            if step == start_step and "sequence_ids" in batch:  # packed pairs or documents attend within
                loop.flops_per_sequence = mean_pretraining_flops(   # their own blocks: counted so, as a mean
                    bert, config.data.max_seq_length, config.data.max_predictions_per_seq, batch["sequence_ids"],
                    next_sentence_prediction=nsp)
            batch = place(batch, mesh)
            with sharding.activate(mesh):
                state, metrics = compiled[rows](state, batch, step_inputs)
            step += 1
            loop.record(step, metrics, state, sequences=rows)
            if loop.evaluates(step):
                evaluate_at(step, state)
            with clock.phase("save"):
                loop.save(step, state)
    finally:
        ahead.close()
        with clock.phase("save"):
            loop.close()
    inside = functools.partial(fileio.join, workdir)
    loop.console(f"done: step {step}; checkpoints in {checkpointer.directory} (fine-tuning's "
                 f"config.init_checkpoint={shlex.quote(workdir)}), the tokenizer in {inside('tokenizer')}, metrics in "
                 f"{inside('metrics.jsonl')}, TensorBoard in {inside('tensorboard')}")
    if eval_batches and alarm.stalled:
        loop.console(alarm.ending())
    loop.console(clock.summary(rest="train and start-up"))
    return loop.last

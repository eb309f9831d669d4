"""BERT pre-training (masked LM + next-sentence prediction): one loop, top to bottom.

Sections: config validation -> mesh -> input -> model and optimizer -> shardings and
state -> the train step -> checkpoints (resume order) -> the loop.

Resume order (documented, fixed): the workdir's latest checkpoint -> `config.init_checkpoint`
(a bertjax checkpoint, a Hugging Face directory or Google's original TF release; weights
only, step 0) -> scratch. Randomness is derived from `fold_in(seed, step)` and the input
pipeline is a deterministic function of the batch index, so a resumed run replays exactly
the numbers an uninterrupted run would have produced.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from bertjax import checkpointing, optim, sharding
from bertjax.metrics import MetricsWriter, peak_flops_per_device, pretraining_flops_per_sequence
from bertjax.models import BertConfig, BertForPreTraining, pretraining_loss, stack_layers
from bertjax.preemption import PreemptionWatcher

log = logging.getLogger(__name__)

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")


class TrainingStopped(RuntimeError):
    """The run stopped early on purpose (preemption, non-finite losses); the message says why."""


@flax.struct.dataclass
class TrainState:
    step: jax.Array               # batches consumed so far (= data position)
    params: Any
    opt_state: Any
    bad_steps: jax.Array          # current run of consecutive non-finite steps
    worst_bad_run: jax.Array      # longest such run seen (sticky, checked at log steps)
    skipped_steps: jax.Array      # total steps skipped for a non-finite loss or gradient


# ======================================================================================
# Config validation: everything that can be checked before anything is compiled.
# ======================================================================================

def model_config(config: ml_collections.ConfigDict, vocab_size: int) -> BertConfig:
    """The BertConfig of a run: `config.model` with vocab_size 0 meaning the tokenizer's."""
    fields = dict(config.model)
    if fields["vocab_size"] not in (0, vocab_size):
        raise ValueError(f"config.model.vocab_size={fields['vocab_size']} does not match the tokenizer's "
                         f"vocabulary ({vocab_size} tokens; config.data.vocab_path); use 0 to take it from there")
    fields["vocab_size"] = vocab_size
    try:
        return BertConfig.from_dict(fields, source="config.model")
    except (TypeError, ValueError) as e:
        raise ValueError(f"config.model: {e}") from e


def validate_config(config: ml_collections.ConfigDict, bert: BertConfig, mesh_shape: tuple[int, int, int]) -> None:
    """Raises ValueError naming the key of the first inconsistent or out-of-range value."""
    optim.validate_train_config(config.train)
    data, fsdp, tensor = mesh_shape
    train = config.train
    for key in ("global_batch_size", "grad_accum_steps", "log_every", "eval_every", "eval_batches",
                "max_consecutive_bad_steps"):
        value = train[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key.startswith("eval") else 1):
            raise ValueError(f"config.train.{key} must be a positive int, got {value!r}")
    parallel = data * fsdp
    if train.global_batch_size % (parallel * train.grad_accum_steps):
        raise ValueError(
            f"config.train.global_batch_size={train.global_batch_size} must be divisible by the data-parallel "
            f"size (mesh data x fsdp = {parallel}) times config.train.grad_accum_steps={train.grad_accum_steps}")
    if train.global_batch_size % jax.process_count():
        raise ValueError(f"config.train.global_batch_size={train.global_batch_size} must be divisible by the "
                         f"number of processes ({jax.process_count()})")
    if bert.num_attention_heads % tensor:
        raise ValueError(f"config.mesh.tensor={tensor} must divide the number of attention heads "
                         f"({bert.num_attention_heads})")
    data_config = config.data
    if data_config.max_seq_length > bert.max_position_embeddings:
        raise ValueError(f"config.data.max_seq_length={data_config.max_seq_length} exceeds the model's "
                         f"max_position_embeddings={bert.max_position_embeddings}")
    if not 0.0 < data_config.masked_lm_prob < 1.0:
        raise ValueError(f"config.data.masked_lm_prob must be in (0, 1), got {data_config.masked_lm_prob}")
    if not 0.0 <= data_config.short_seq_prob <= 1.0:
        raise ValueError(f"config.data.short_seq_prob must be in [0, 1], got {data_config.short_seq_prob}")
    checkpoint = config.checkpoint
    if checkpoint.every < 1 or checkpoint.keep < 1:
        raise ValueError(f"config.checkpoint.every and .keep must be >= 1, got {checkpoint.every}, {checkpoint.keep}")


# ======================================================================================
# The train step.
# ======================================================================================

def _model_inputs(batch: dict[str, jax.Array]) -> tuple:
    return (batch["input_ids"], batch["segment_ids"], batch["input_mask"], batch["masked_lm_positions"])


def _init_params(model: BertForPreTraining, rng: jax.Array, batch_abstract: dict) -> Any:
    """Boxed (logically partitioned) parameters, initialised on a dummy batch of the real shapes."""
    dummy = {name: jnp.zeros(spec.shape, spec.dtype) for name, spec in batch_abstract.items()}
    return model.init(rng, *_model_inputs(dummy))["params"]


def train_step(state: TrainState, batch: dict[str, jax.Array], *, model: BertForPreTraining,
               optimizer: optax.GradientTransformation, schedule: optax.Schedule, seed: int,
               grad_accum_steps: int) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer update from one global batch (split into `grad_accum_steps` micro-batches).

    A non-finite loss or gradient leaves params and optimizer state untouched; the step
    still counts (its batch is consumed) and `skipped_steps`/`bad_steps` record it.
    """
    step_rng = jax.random.fold_in(jax.random.key(seed), state.step)

    def loss_fn(params, micro_batch, rng):
        mlm_logits, nsp_logits = model.apply({"params": params}, *_model_inputs(micro_batch),
                                             deterministic=False, rngs={"dropout": rng})
        return pretraining_loss(mlm_logits, nsp_logits, micro_batch)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if grad_accum_steps == 1:
        (loss, metrics), grads = grad_fn(state.params, batch, step_rng)
    else:
        micro_batches = jax.tree_util.tree_map(
            lambda x: x.reshape(grad_accum_steps, x.shape[0] // grad_accum_steps, *x.shape[1:]), batch)

        def accumulate(carry, inputs):
            index, micro_batch = inputs
            (loss, metrics), grads = grad_fn(state.params, micro_batch, jax.random.fold_in(step_rng, index))
            return jax.tree_util.tree_map(jnp.add, carry, (loss, metrics, grads)), None

        zeros = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(grad_fn, state.params, batch, step_rng))
        zeros = (zeros[0][0], zeros[0][1], zeros[1])
        totals, _ = jax.lax.scan(accumulate, zeros, (jnp.arange(grad_accum_steps), micro_batches))
        loss, metrics, grads = jax.tree_util.tree_map(lambda x: x / grad_accum_steps, totals)

    grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, new_opt_state = optimizer.update(grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    keep_if_finite = lambda new, old: jax.tree_util.tree_map(lambda n, o: jnp.where(finite, n, o), new, old)
    bad_steps = jnp.where(finite, 0, state.bad_steps + 1)
    new_state = state.replace(
        step=state.step + 1,
        params=keep_if_finite(new_params, state.params),
        opt_state=keep_if_finite(new_opt_state, state.opt_state),
        bad_steps=bad_steps,
        worst_bad_run=jnp.maximum(state.worst_bad_run, bad_steps),
        skipped_steps=state.skipped_steps + (1 - finite.astype(jnp.int32)))
    metrics = {**metrics, "loss": loss, "grad_norm": grad_norm, "learning_rate": schedule(state.step),
               "skipped": 1.0 - finite.astype(jnp.float32)}
    return new_state, metrics


def eval_step(params: Any, batch: dict[str, jax.Array], *, model: BertForPreTraining) -> dict[str, jax.Array]:
    mlm_logits, nsp_logits = model.apply({"params": params}, *_model_inputs(batch), deterministic=True)
    loss, metrics = pretraining_loss(mlm_logits, nsp_logits, batch)
    return {**metrics, "loss": loss}


# ======================================================================================
# Shardings and state creation.
# ======================================================================================

def abstract_inputs(config: ml_collections.ConfigDict, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes/dtypes of one batch with the original feature names."""
    seq, pred = config.data.max_seq_length, config.data.max_predictions_per_seq
    shapes = {"input_ids": (seq,), "input_mask": (seq,), "segment_ids": (seq,), "masked_lm_positions": (pred,),
              "masked_lm_ids": (pred,), "masked_lm_weights": (pred,), "next_sentence_labels": ()}
    return {name: jax.ShapeDtypeStruct((batch_size, *shape),
                                       jnp.float32 if name == "masked_lm_weights" else jnp.int32)
            for name, shape in shapes.items()}


def state_shardings(model, optimizer, mesh, example_batch) -> tuple[Any, Any]:
    """(abstract TrainState, matching NamedShardings); optimizer slots follow their params."""
    boxed = jax.eval_shape(lambda: _init_params(model, jax.random.key(0), example_batch))
    param_shardings = sharding.logical_shardings(boxed, mesh)
    abstract_params = nn.unbox(boxed)
    abstract_opt = jax.eval_shape(optimizer.init, abstract_params)
    replicated = NamedSharding(mesh, PartitionSpec())
    opt_shardings = optax.tree_map_params(optimizer, lambda _, s: s, abstract_opt, param_shardings,
                                          transform_non_params=lambda _: replicated)
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    abstract = TrainState(step=scalar, params=abstract_params, opt_state=abstract_opt, bad_steps=scalar,
                          worst_bad_run=scalar, skipped_steps=scalar)
    shardings = TrainState(step=replicated, params=param_shardings, opt_state=opt_shardings,
                           bad_steps=replicated, worst_bad_run=replicated, skipped_steps=replicated)
    return abstract, shardings


def new_state(params: Any, optimizer: optax.GradientTransformation) -> TrainState:
    zero = jnp.zeros((), jnp.int32)
    return TrainState(step=zero, params=params, opt_state=optimizer.init(params), bad_steps=zero,
                      worst_bad_run=zero, skipped_steps=zero)


def initial_params(config: ml_collections.ConfigDict, bert: BertConfig, abstract_params: Any) -> Any:
    """Weights from `config.init_checkpoint` (any format `bertjax.load_pretrained` reads), as numpy.

    The checkpoint must hold the encoder; MLM/NSP heads it lacks keep their fresh init
    (returned as None entries, filled by the caller).
    """
    from bertjax.models.convert import load_pretrained

    loaded_config, loaded = load_pretrained(config.init_checkpoint)
    for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "max_position_embeddings", "type_vocab_size"):
        if getattr(loaded_config, field) != getattr(bert, field):
            raise ValueError(f"config.init_checkpoint={config.init_checkpoint}: {field} is "
                             f"{getattr(loaded_config, field)} there but {getattr(bert, field)} in this run's model")
    if "bert" not in loaded:
        raise ValueError(f"config.init_checkpoint={config.init_checkpoint} holds no encoder ('bert') weights")
    if bert.scan_layers:
        loaded = {**loaded, "bert": stack_layers(loaded["bert"], bert.num_hidden_layers)}
    return {name: loaded.get(name) for name in abstract_params}


# ======================================================================================
# The loop.
# ======================================================================================

def _process_zero_first(fn, what: str):
    """Runs fn on process 0, then on the others (shared files are written once, without races)."""
    from jax.experimental import multihost_utils

    result = fn() if jax.process_index() == 0 else None
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"bertjax: {what} ready")
    return fn() if result is None else result


class HostBatches:
    """This process's rows of each global batch, as numpy.

    `config.data.host_split`: "files" -- each host reads its own files (scales to pods);
    "global_batch" -- every host builds the whole global batch and keeps its rows, so the
    run sees exactly the batches of a one-process run (for verification; costs input work).
    """

    def __init__(self, config: ml_collections.ConfigDict, workdir: str, split: str):
        from bertjax.data import pipelines  # TensorFlow only for input

        global_batch, count, index = config.train.global_batch_size, jax.process_count(), jax.process_index()
        self.rows = slice(None)
        if config.data.host_split == "files":
            batch_size, pipeline_index, pipeline_count = global_batch // count, index, count
        elif config.data.host_split == "global_batch":
            batch_size, pipeline_index, pipeline_count = global_batch, 0, 1
            self.rows = slice(index * global_batch // count, (index + 1) * global_batch // count)
        else:
            raise ValueError(f"config.data.host_split must be 'files' or 'global_batch', got {config.data.host_split!r}")
        self.pipeline = pipelines.make_pipeline(config.data, workdir, batch_size=batch_size,
                                                       process_index=pipeline_index, process_count=pipeline_count,
                                                       split=split)

    def batches(self, start_batch: int = 0):
        for batch in self.pipeline.batches(start_batch):
            yield {name: value[self.rows] for name, value in batch.items()}


@dataclasses.dataclass
class StepTimer:
    """Wall time between log steps, excluding evaluation and checkpointing pauses."""
    start: float = dataclasses.field(default_factory=time.perf_counter)
    paused: float = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.paused


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    """Runs pre-training to `config.train.num_steps`; returns the last logged metrics."""
    from bertjax.data import prepare  # TensorFlow only for input

    train_cfg = config.train
    is_writer = jax.process_index() == 0

    # -- Tokenizer, model config, mesh; validation before any compile. --
    data_dir = config.data.prepared_dir or f"{workdir}/data"
    tokenizer = _process_zero_first(lambda: prepare.load_tokenizer_for(config.data, data_dir), "tokenizer")
    bert = model_config(config, tokenizer.vocab_size)
    mesh_shape = sharding.mesh_shape(jax.device_count(), config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    validate_config(config, bert, mesh_shape)
    mesh = sharding.create_mesh(*mesh_shape)
    log.info("mesh %s over %d devices (%d processes); model %s", dict(mesh.shape), jax.device_count(),
             jax.process_count(), bert)

    # -- Input: prepared once (process 0 first, the others then find it done). --
    if config.data.source != "original_tfrecord":
        _process_zero_first(lambda: prepare.ensure_prepared(config.data, data_dir), "prepared data")
    train_data = HostBatches(config, workdir, "train")
    eval_data = HostBatches(config, workdir, "eval") if train_cfg.eval_every and train_cfg.eval_batches else None

    # -- Model, optimizer, shardings, state. --
    model = BertForPreTraining(bert)
    optimizer = optim.make_optimizer(train_cfg)
    schedule = optim.make_schedule(train_cfg)
    batch_abstract = abstract_inputs(config, train_cfg.global_batch_size)
    abstract_state, shardings = state_shardings(model, optimizer, mesh, batch_abstract)
    batch_shardings = {name: sharding.batch_sharding(mesh, len(spec.shape)) for name, spec in batch_abstract.items()}

    checkpointer = checkpointing.Checkpointer(
        f"{workdir}/checkpoints", save_interval_steps=config.checkpoint.every, max_to_keep=config.checkpoint.keep,
        async_save=config.checkpoint.async_save)
    abstract_with_shardings = jax.tree_util.tree_map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_state, shardings)

    # -- Resume order: own latest checkpoint -> init_checkpoint -> scratch. --
    with sharding.activate(mesh):
        init_rng = jax.random.key(config.seed)
        fresh = lambda: nn.unbox(_init_params(model, init_rng, batch_abstract))
        if checkpointer.latest_step() is not None:
            state, meta = checkpointer.restore(abstract_with_shardings)
            log.info("resumed from %s/checkpoints step %d", workdir, meta["step"])
        elif config.init_checkpoint:
            loaded = {k: v for k, v in initial_params(config, bert, abstract_state.params).items() if v is not None}
            state = jax.jit(lambda loaded: new_state({**fresh(), **loaded}, optimizer),
                            out_shardings=shardings)(loaded)
            log.info("initialised %s from %s", sorted(loaded), config.init_checkpoint)
        else:
            state = jax.jit(lambda: new_state(fresh(), optimizer), out_shardings=shardings)()

        step_fn = jax.jit(
            lambda s, b: train_step(s, b, model=model, optimizer=optimizer, schedule=schedule, seed=config.seed,
                                    grad_accum_steps=train_cfg.grad_accum_steps),
            in_shardings=(shardings, batch_shardings), out_shardings=(shardings, None), donate_argnums=0)
        eval_fn = jax.jit(lambda p, b: eval_step(p, b, model=model), in_shardings=(shardings.params, batch_shardings))

        compile_start = time.perf_counter()
        step_fn = step_fn.lower(abstract_with_shardings, batch_abstract).compile()
        compile_seconds = time.perf_counter() - compile_start

    start_step = int(jax.device_get(state.step))
    writer = MetricsWriter(workdir, enabled=is_writer)
    writer.console(f"compiled the train step in {compile_seconds:.1f}s; starting at step {start_step}")
    peak_flops, peak_source = peak_flops_per_device()
    flops_per_seq = pretraining_flops_per_sequence(bert, config.data.max_seq_length,
                                                   config.data.max_predictions_per_seq)
    watcher = PreemptionWatcher()
    saved_config = {**config.to_dict(), "model": bert.to_dict()}  # the model section fully resolved

    def to_global(batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        return {name: jax.make_array_from_process_local_data(batch_shardings[name], batch[name])
                for name in FEATURES}

    def run_eval(step: int) -> dict[str, float]:
        totals: dict[str, float] = {}
        with sharding.activate(mesh):
            for _, batch in zip(range(train_cfg.eval_batches), eval_data.batches(0)):
                for name, value in jax.device_get(eval_fn(state.params, to_global(batch))).items():
                    totals[name] = totals.get(name, 0.0) + float(value) / train_cfg.eval_batches
        writer.write(step, totals, prefix="eval_")
        writer.console(f"eval step {step}: " + " ".join(f"{k} {v:.4f}" for k, v in sorted(totals.items())))
        return totals

    # -- Loop. Metrics stay on device until a log step: no host round-trip per step. --
    pending: list[dict[str, jax.Array]] = []
    timer, last = StepTimer(), {}
    step = start_step
    batches = train_data.batches(start_batch=start_step)
    try:
        while step < train_cfg.num_steps:
            batch = to_global(next(batches))
            with sharding.activate(mesh):
                state, metrics = step_fn(state, batch)
            pending.append(metrics)
            step += 1

            if step % train_cfg.log_every == 0 or step == train_cfg.num_steps:
                fetched = jax.device_get(pending)
                seconds = timer.elapsed() / len(pending)
                last = {name: float(np.mean([m[name] for m in fetched])) for name in fetched[0]}
                sequences_per_second = train_cfg.global_batch_size / seconds
                tflops = flops_per_seq * sequences_per_second / jax.device_count() / 1e12
                last.update(step_time=seconds, sequences_per_second=sequences_per_second,
                            tokens_per_second=sequences_per_second * config.data.max_seq_length,
                            tflops_per_device=tflops, mfu=tflops * 1e12 / peak_flops, compile_seconds=compile_seconds)
                writer.write(step, last)
                writer.console(
                    f"step {step}/{train_cfg.num_steps} loss {last['loss']:.4f} mlm_acc {last['mlm_accuracy']:.3f} "
                    f"nsp_acc {last['nsp_accuracy']:.3f} lr {last['learning_rate']:.2e} gnorm {last['grad_norm']:.2f} "
                    f"{sequences_per_second:.1f} seq/s {tflops:.3f} TFLOP/s/device mfu {last['mfu']:.1%} "
                    f"[{peak_source}]")
                pending, timer = [], StepTimer()
                worst, skipped = jax.device_get((state.worst_bad_run, state.skipped_steps))
                if worst >= train_cfg.max_consecutive_bad_steps:
                    raise TrainingStopped(
                        f"stopping at step {step}: {int(worst)} consecutive steps had a non-finite loss or gradient "
                        f"(config.train.max_consecutive_bad_steps={train_cfg.max_consecutive_bad_steps}); "
                        f"{int(skipped)} skipped in all. Weights were never updated from them: lower the learning "
                        f"rate or check the data, then resume from the last checkpoint.")

            pause = time.perf_counter()
            if eval_data is not None and (step % train_cfg.eval_every == 0 or step == train_cfg.num_steps):
                last.update({f"eval_{k}": v for k, v in run_eval(step).items()})
            checkpointer.save(step, state, data_position=step, config=saved_config, force=step == train_cfg.num_steps)
            if watcher.should_stop(step):
                checkpointer.save(step, state, data_position=step, config=saved_config, force=True)
                checkpointer.wait_until_finished()
                raise TrainingStopped(f"preempted (SIGTERM): saved step {step} to {workdir}/checkpoints; "
                                      f"run the same command again to resume")
            timer.paused += time.perf_counter() - pause
    finally:
        checkpointer.wait_until_finished()
        checkpointer.close()
        writer.close()
    writer.console(f"done: step {step}, metrics in {workdir}/metrics.jsonl")
    return last

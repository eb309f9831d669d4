"""The pieces both training stages share: pre-training (`train.py`) and fine-tuning (`finetune.py`).

    Objective, TrainState    what a stage optimises (pure functions), and the state it carries
    train_step, eval_sums    one optimizer update from a global batch (strided micro-batches,
                             non-finite steps skipped); evaluation sums that average exactly
    step_inputs              the seed and learning-rate schedule, arguments of the compiled
                             step rather than its constants (sweeps share one program)
    jit_train_step           the step under jax.jit with explicit shardings, the state donated
    compile_step             ahead-of-time compilation, timed, the compiler's heap released
    state_shardings,         shardings of the state (optimizer slots follow their parameters),
    initial_state            and the fixed resume order: the run's own latest checkpoint ->
                             pretrained weights (only the subtrees given, e.g. the encoder) -> scratch
    global_batch,            numpy batches -> global jax.Arrays on the mesh: this host's own rows
    whole_batch              (order free), or a batch every host holds whole (row i stays row i)

The tail of each loop (metrics at log steps, the evaluation cadence, checkpoints, SIGTERM,
the progress line) is `training_loop.Loop`.

Frozen parameters (`frozen`: top-level names, e.g. ("bert",) for the feature-based approach)
stay in `TrainState.params`, so checkpoints and loaders see the whole model, but get no
optimizer state and no gradient: the step differentiates the rest only (XLA never builds
the frozen part's backward pass) and passes them through bit for bit.

Losses are sums over examples (or tokens) divided by counts that depend on the batch only
(see bertjax.models.heads), so a global batch cut into micro-batches gives exactly the
update of the whole batch, and an evaluation over batches (a padded last one included)
averages once over all examples of all hosts.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import json
import logging
import os
import shlex
import time
from typing import Any, Callable, Iterator

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from bertjax import checkpointing, models, optim, run_config, sharding
from bertjax.runtime import compilation_cache, preemption

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Objective:
    """What a stage optimises and evaluates, as pure functions.

    apply(params, batch, rng) -> outputs: the model's forward pass; rng None = deterministic.
    sums(outputs, batch) -> {name: <f32>[]}: each metric summed over the batch's examples/tokens.
    counts(batch) -> {name: <f32>[]}: each metric's denominator (same names); a function
      of the batch alone (weights), never of the parameters.
    loss_terms: the names whose sums[name] / counts[name] add up to the loss.
    """

    apply: Callable[[Any, dict, jax.Array | None], Any]
    sums: Callable[[Any, dict], dict]
    counts: Callable[[dict], dict]
    loss_terms: tuple[str, ...]


@flax.struct.dataclass
class TrainState:
    step: jax.Array               # batches consumed so far (= the data position)
    params: Any
    opt_state: Any
    bad_steps: jax.Array          # current run of consecutive non-finite steps
    worst_bad_run: jax.Array      # longest such run since the start or resume (checked at log steps)
    skipped_steps: jax.Array      # total steps skipped for a non-finite loss or gradient


def trainable(params: dict[str, Any], frozen: tuple[str, ...]) -> dict[str, Any]:
    """The top-level subtrees of `params` not named in `frozen` (what the optimizer sees)."""
    return {name: tree for name, tree in params.items() if name not in frozen}


def new_state(params: Any, optimizer: optax.GradientTransformation, frozen: tuple[str, ...] = ()) -> TrainState:
    zero = jnp.zeros((), jnp.int32)
    return TrainState(step=zero, params=params, opt_state=optimizer.init(trainable(params, frozen)), bad_steps=zero,
                      worst_bad_run=zero, skipped_steps=zero)


# ======================================================================================
# The step.
# ======================================================================================

def micro_batches(batch: dict[str, jax.Array], count: int) -> dict[str, jax.Array]:
    """<T>[B, ...] -> <T>[count, B / count, ...] where micro-batch i holds rows i, i + count, ...

    Strided, so every micro-batch spreads over all data-parallel devices (each device's
    contiguous rows split evenly across micro-batches): no data moves, no device idles.
    """
    def split(x):
        strided = jnp.swapaxes(x.reshape(x.shape[0] // count, count, *x.shape[1:]), 0, 1)
        return jax.lax.with_sharding_constraint(strided, sharding.micro_batch_spec(x.ndim))

    return jax.tree_util.tree_map(split, batch)


def step_inputs(train_config: Any, seed: int, mesh: jax.sharding.Mesh) -> dict[str, jax.Array]:
    """What the train step reads at run time instead of holding as constants, replicated on
    `mesh`: "seed" (the dropout key's data, uint32[2] for the default PRNG) and the schedule's
    numbers (`optim.schedule_numbers`). Runs that differ only in these (a sweep's learning
    rates, another seed, a longer run) share one compiled step: in a process, and across
    processes through the compilation cache.
    """
    values = {"seed": np.asarray(jax.random.key_data(jax.random.key(seed))), **optim.schedule_numbers(train_config)}
    replicated = NamedSharding(mesh, PartitionSpec())
    return {name: jax.make_array_from_callback(value.shape, replicated, lambda index, value=value: value[index])
            for name, value in values.items()}


def train_step(state: TrainState, batch: dict[str, jax.Array], inputs: dict[str, jax.Array], *,
               objective: Objective, train_config: Any, grad_accum_steps: int,
               frozen: tuple[str, ...] = ()) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer update from one global batch, cut into `grad_accum_steps` micro-batches.

    `inputs` are `step_inputs`: the seed and the schedule's numbers; `train_config` gives the
    rest of the optimizer (`optim.make_optimizer`). Each micro-batch's loss is its sums divided
    by the *global* batch's counts, so the accumulated gradient equals the whole batch's.
    Dropout keys: fold_in(key(seed), step), then the micro-batch index. A non-finite loss or
    gradient leaves params and optimizer state untouched (so the schedule does not advance);
    the batch still counts as consumed. Parameters named in `frozen` are inputs only: no
    gradient, no update.
    """
    schedule = optim.make_schedule(train_config, inputs)
    optimizer = optim.make_optimizer(train_config, schedule)
    step_rng = jax.random.fold_in(jax.random.wrap_key_data(inputs["seed"]), state.step)
    counts = objective.counts(batch)
    fixed = {name: state.params[name] for name in frozen}

    def loss_fn(params, micro_batch, rng):
        sums = objective.sums(objective.apply({**fixed, **params}, micro_batch, rng), micro_batch)
        return sum(sums[name] / jnp.maximum(counts[name], 1e-5) for name in objective.loss_terms), sums

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    params = trainable(state.params, frozen)
    if grad_accum_steps == 1:
        (loss, sums), grads = grad_fn(params, batch, step_rng)
    else:
        def accumulate(carry, inputs):
            index, micro_batch = inputs
            out = grad_fn(params, micro_batch, jax.random.fold_in(step_rng, index))
            return jax.tree_util.tree_map(jnp.add, carry, out), None

        first = jax.tree_util.tree_map(lambda x: x[0], micro_batches(batch, grad_accum_steps))
        zeros = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(grad_fn, params, first, step_rng))
        ((loss, sums), grads), _ = jax.lax.scan(
            accumulate, zeros, (jnp.arange(grad_accum_steps), micro_batches(batch, grad_accum_steps)))

    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    learning_rate = schedule(optim.update_count(state.opt_state))

    # A branch rather than a select over every leaf: the select kept old and new copies of
    # all parameters and optimizer slots (extra passes over memory); the branch updates the
    # donated buffers in place and a skipped step touches nothing.
    # The norm goes in as an operand: computed again inside the branch, it was one more
    # pass over every gradient.
    def update(operands):
        params, opt_state, grads, grad_norm = operands
        updates, new_opt_state = optimizer.update(grads, opt_state, params, global_norm=grad_norm)
        return optax.apply_updates(params, updates), new_opt_state

    new_params, new_opt_state = jax.lax.cond(finite, update, lambda operands: operands[:2],
                                             (params, state.opt_state, grads, grad_norm))
    bad_steps = jnp.where(finite, 0, state.bad_steps + 1)
    updated = state.replace(
        step=state.step + 1,
        params={**state.params, **new_params},
        opt_state=new_opt_state,
        bad_steps=bad_steps,
        worst_bad_run=jnp.maximum(state.worst_bad_run, bad_steps),
        skipped_steps=state.skipped_steps + (1 - finite.astype(jnp.int32)))
    metrics = {**models.mean_metrics(sums, counts), "loss": loss, "grad_norm": grad_norm, "learning_rate": learning_rate,
               "skipped": 1.0 - finite.astype(jnp.float32)}
    return updated, metrics


def jit_train_step(mesh: jax.sharding.Mesh, state_shardings: TrainState, batch_shardings: dict[str, Any], *,
                   objective: Objective, train_config: Any, frozen: tuple[str, ...] = ()) -> Any:
    """`train_step` under jax.jit with explicit shardings: (state, batch, step_inputs) ->
    (state, metrics). The state keeps `state_shardings` and is donated (updated in place); the
    batch comes as `batch_shardings`, the `step_inputs` replicated over `mesh`."""
    return jax.jit(
        lambda state, batch, inputs: train_step(state, batch, inputs, objective=objective, train_config=train_config,
                                                grad_accum_steps=train_config.grad_accum_steps, frozen=frozen),
        in_shardings=(state_shardings, batch_shardings, NamedSharding(mesh, PartitionSpec())),
        out_shardings=(state_shardings, None), donate_argnums=0, compiler_options=compilation_cache.compiler_options())


def compile_step(jitted: Any, *abstract_args: Any) -> tuple[Any, float]:
    """(jitted.lower(*abstract_args).compile(), its seconds), then the heap the compiler
    freed is handed back to the OS (glibc's malloc_trim): otherwise it stays in the
    process's footprint beside the step's buffers (about 270 MB for BERT-base on CPU)."""
    start = time.perf_counter()
    compiled = jitted.lower(*abstract_args).compile()
    seconds = time.perf_counter() - start
    _trim_heap()
    return compiled, seconds


def _trim_heap() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not Linux with glibc: nothing to trim this way
        pass


def eval_sums(params: Any, batch: dict[str, jax.Array], *, objective: Objective) -> tuple[dict, dict, Any]:
    """(sums, counts, outputs) of one evaluation batch (deterministic); sums and counts add
    up over batches, and rows with weight 0 (padding) count for nothing."""
    outputs = objective.apply(params, batch, None)
    return objective.sums(outputs, batch), objective.counts(batch), outputs


def eval_sums_in_parts(params: Any, batch: dict[str, jax.Array], *, objective: Objective,
                       parts: int) -> tuple[dict, dict]:
    """eval_sums' (sums, counts) of `batch`, run `parts` micro-batches at a time (strided, as
    the train step's): a batch that training cuts to fit memory is evaluated in the same cuts."""
    if parts == 1:
        return eval_sums(params, batch, objective=objective)[:2]

    def add(totals, micro_batch):
        return jax.tree_util.tree_map(jnp.add, totals, eval_sums(params, micro_batch, objective=objective)[:2]), None

    micro = micro_batches(batch, parts)
    first = jax.tree_util.tree_map(lambda x: x[0], micro)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(
        lambda b: eval_sums(params, b, objective=objective)[:2], first))
    return jax.lax.scan(add, zeros, micro)[0]


class EvalTotals:
    """Adds up evaluation sums and counts over batches (float64, on the host)."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add(self, sums: dict, counts: dict) -> None:
        for name, value in jax.device_get(sums).items():
            self.sums[name] = self.sums.get(name, 0.0) + float(value)
        for name, value in jax.device_get(counts).items():
            self.counts[name] = self.counts.get(name, 0.0) + float(value)

    def means(self) -> dict[str, float]:
        return {name: value / max(self.counts[name], 1e-12) for name, value in self.sums.items()}


# ======================================================================================
# Shardings and the initial state (resume order).
# ======================================================================================

def state_shardings(init_params: Callable[[], Any], optimizer: optax.GradientTransformation,
                    mesh: jax.sharding.Mesh, frozen: tuple[str, ...] = ()) -> tuple[TrainState, TrainState]:
    """(abstract TrainState, matching NamedShardings) for boxed params from `init_params()`;
    optimizer slots (none for the `frozen` subtrees) are sharded like their parameters,
    scalars replicated."""
    boxed = jax.eval_shape(init_params)
    param_shardings = sharding.logical_shardings(boxed, mesh)
    whole = sharding.undivided(boxed, mesh)
    if whole:
        log.warning("%d parameter dimension(s) are not split as their mesh axes ask, which do not divide them: %s%s; "
                    "each such parameter and its optimizer slots are held whole by every device of those axes",
                    len(whole), "; ".join(whole[:3]), f"; and {len(whole) - 3} more" if len(whole) > 3 else "")
    abstract_params = nn.unbox(boxed)
    abstract_opt = jax.eval_shape(optimizer.init, trainable(abstract_params, frozen))
    replicated = NamedSharding(mesh, PartitionSpec())
    opt_shardings = optax.tree_map_params(optimizer, lambda _, s: s, abstract_opt, trainable(param_shardings, frozen),
                                          transform_non_params=lambda _: replicated)
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    abstract = TrainState(step=scalar, params=abstract_params, opt_state=abstract_opt, bad_steps=scalar,
                          worst_bad_run=scalar, skipped_steps=scalar)
    shardings = TrainState(step=replicated, params=param_shardings, opt_state=opt_shardings,
                           bad_steps=replicated, worst_bad_run=replicated, skipped_steps=replicated)
    return abstract, shardings


def with_shardings(abstract: Any, shardings: Any) -> Any:
    """Abstract leaves carrying their shardings (what orbax restores onto)."""
    return jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)


def place_params(pretrained: dict[str, Any], abstract_params: dict, param_shardings: dict,
                 source: str) -> dict[str, jax.Array]:
    """Numpy subtrees (e.g. {"bert": encoder}) -> jax.Arrays in the params' dtypes and shardings.

    Each device receives only its own slice (no whole copy goes through a jitted function).
    The subtrees must have exactly the structure and shapes of the model's; a mismatch is a
    ValueError naming up to five paths.
    """
    placed = {}
    for name, tree in pretrained.items():
        if name not in abstract_params:
            raise ValueError(f"{source}: the model has no {name!r} parameters (it has {sorted(abstract_params)})")
        want = {jax.tree_util.keystr(p): leaf for p, leaf in jax.tree_util.tree_leaves_with_path(abstract_params[name])}
        have = {jax.tree_util.keystr(p): leaf for p, leaf in jax.tree_util.tree_leaves_with_path(tree)}
        problems = [f"{name}{path}: missing" for path in sorted(set(want) - set(have))]
        problems += [f"{name}{path}: not in this model" for path in sorted(set(have) - set(want))]
        problems += [f"{name}{path}: shape {np.shape(have[path])}, the model's is {want[path].shape}"
                     for path in sorted(set(want) & set(have)) if np.shape(have[path]) != want[path].shape]
        if problems:
            raise ValueError(f"{source} does not fit the model: " + "; ".join(problems[:5]))

        def put(value, abstract, target):
            value = np.asarray(value, dtype=abstract.dtype)
            return jax.make_array_from_callback(value.shape, target, lambda index: value[index])

        placed[name] = jax.tree_util.tree_map(put, tree, abstract_params[name], param_shardings[name])
    return placed


def check_resumable(workdir: str, abstract: TrainState, config: dict, num_steps: int) -> None:
    """Refuses, before any data is prepared or read, a resume that `workdir`'s checkpoints cannot
    give (nothing when it has none): ValueError when they are past `num_steps` (nothing to
    train: a continuation given its first phase's workdir) or at it with settings that change
    what the run computes (`run_config.check_finished_unchanged`), CheckpointMismatchError, naming the
    settings changed since (`config`: the run's saved_config), when they hold another state tree
    than `abstract` (an optimizer, clipping, scanned layers, the model's shape). Reads metadata
    only; the restore checks what it reads again."""
    directory = run_config.own_checkpoints(workdir)
    if directory is None:
        return
    step = checkpointing.read_meta(directory)["step"]
    if step > num_steps:
        raise ValueError(f"{directory} is at step {step}, past config.train.num_steps={num_steps}: nothing to "
                         f"train. A continuation (phase2, long) runs in a new --workdir with "
                         f"config.init_checkpoint={shlex.quote(workdir)}")
    run_config.check_finished_unchanged(workdir, config, num_steps)
    try:
        checkpointing.check_fits(directory, abstract)
    except checkpointing.CheckpointMismatchError as error:
        raise checkpointing.CheckpointMismatchError(_with_changed_settings(error, directory, config)) from None


def _with_changed_settings(error: Exception, directory: str, config: dict | None) -> str:
    """`error` (the run's state does not fit its latest checkpoint, in `directory`) and the
    settings that changed since that checkpoint, which are what changed the state's tree (an
    optimizer, gradient clipping, scanned layers)."""
    try:
        saved = checkpointing.read_meta(directory).get("config") or {}
    except (OSError, ValueError):
        return str(error)
    changes = run_config.changed_settings(saved, config) if config is not None else []
    if not changes:
        return str(error)
    # The settings that decide the state's tree first (the line had them after pages of tree
    # paths and among harmless changes: a review); then the others, then the paths.
    holding = [change for change in changes if change.split(" ", 1)[0] in _STATE_SETTINGS]
    others = [change for change in changes if change not in holding]
    said = "; ".join((holding or changes)[:8])
    also = f" (changed too: {'; '.join(others[:4])})" if holding and others else ""
    return (f"{directory} holds another state than this run's. Settings changed since that checkpoint: {said}: set "
            f"them back to resume, or give the run a new workdir{also}. The difference: {error}")


# Settings that change what a checkpoint holds (an optimizer's slots, a clipping stage, a head,
# the layers' layout, the model's shapes); dropout or the attention kernel change none of it.
_STATE_SETTINGS = {
    "train.optimizer", "train.max_grad_norm", "train.freeze_encoder", "data.next_sentence_prediction", "task",
    "data.label_names", *(f"model.{key}" for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings", "type_vocab_size", "position_embedding", "use_bias", "norm_bias", "gated_mlp",
        "pooler", "token_transform", "tagging_head", "lstm_hidden_size", "scan_layers", "norm_placement",
        "feature_combine", "feature_layers"))}


def initial_state(checkpointer, abstract: TrainState, shardings: TrainState, *, init_params: Callable[[], Any],
                  optimizer: optax.GradientTransformation, mesh: jax.sharding.Mesh,
                  pretrained: Callable[[], dict[str, Any]] | None = None,
                  pretrained_source: str = "", config: dict | None = None,
                  frozen: tuple[str, ...] = ()) -> tuple[TrainState, str]:
    """The state a run starts from, in the fixed resume order, and a line saying which:

    1. the run's own latest checkpoint (`checkpointer`, None when the run keeps none):
       everything, step and optimizer included; a warning lists the settings of `config`
       (the run's saved_config) that differ from the checkpoint's;
    2. `pretrained()` (called only here): {name: numpy subtree} replacing those parameter
       subtrees of a fresh initialisation (e.g. only "bert" when the head is new); step 0;
    3. scratch: `init_params()` (boxed params, created directly in their shardings).
    A new state has optimizer slots for all but the `frozen` subtrees (as `state_shardings`).
    """
    # A preemption notice during the restore: JAX picks the step after the one each host last
    # told it, so tell it now where the run resumes (see bertjax/runtime/preemption.py).
    newest = checkpointer.agreed_steps()[:1] if checkpointer is not None else []
    preemption.report_start(newest[0] if newest else 0)
    with sharding.activate(mesh):
        if newest:  # (process 0's listing: every process resumes, or none)
            try:
                state, meta = checkpointer.restore(with_shardings(abstract, shardings))
            except checkpointing.CheckpointMismatchError as error:
                raise checkpointing.CheckpointMismatchError(
                    _with_changed_settings(error, str(checkpointer.directory), config)) from None
            # The weights a run started from are not read on a resume: another (or the same moved)
            # is no change to the continuation, said apart. Nor is what evaluates it: fine-tuning's
            # best/ says when its evaluation differs (the same file moved does not).
            left_out = (*run_config.OPERATIONAL_SETTINGS, "init_weights", "positions_trained", "data.eval_file")
            changes = []
            if config is not None:
                changes = run_config.changed_settings(meta["config"], config, left_out)
                changes = run_config.without_moved_training_file(changes, meta["config"] or {}, config)
            if changes:
                log.warning("%s", run_config.describe_changes(changes))
            started, named = (meta["config"] or {}).get("init_weights"), (config or {}).get("init_weights")
            if started and named and started != named:
                log.warning("resumed from the run's own checkpoint: config.init_checkpoint now names %s, not the %s "
                            "it started from, and a resume does not read it", named, started)
            # Non-finite steps count from the resume: a run stopped for them is resumed (at a lower
            # learning rate) from a checkpoint whose count may already be at the limit.
            state = state.replace(bad_steps=state.bad_steps * 0, worst_bad_run=state.worst_bad_run * 0)
            return state, f"resumed from {checkpointer.directory} at step {meta['step']}"
        params = jax.jit(lambda: nn.unbox(init_params()), out_shardings=shardings.params)()
        how = "initialised from scratch"
        if pretrained is not None:
            loaded = place_params(pretrained(), abstract.params, shardings.params, pretrained_source)
            params = {**params, **loaded}
            new = sorted(set(params) - set(loaded))
            how = f"initialised {sorted(loaded)} from {pretrained_source}" + (f"; {new} new" if new else "")
        state = jax.jit(lambda p: new_state(p, optimizer, frozen), out_shardings=shardings, donate_argnums=0)(params)
    return state, how


# ======================================================================================
# Input: host rows -> global arrays.
# ======================================================================================

def global_batch(batch: dict[str, np.ndarray], mesh: jax.sharding.Mesh) -> dict[str, jax.Array]:
    """This process's own rows of a global batch (numpy) -> global jax.Arrays split over (data, fsdp).

    For input that each process reads for itself (pre-training's host_split="files"): every
    process passes B / P rows no other process has (`check_rows_per_process`). Where they land
    in the global batch follows the mesh's device order, which on a TPU slice interleaves the
    processes, so only what does not depend on the order of rows may be read from it (sums).
    """
    return {name: jax.make_array_from_process_local_data(sharding.batch_sharding(mesh, value.ndim), value)
            for name, value in batch.items()}


def whole_batch(batch: dict[str, np.ndarray], mesh: jax.sharding.Mesh) -> dict[str, jax.Array]:
    """A global batch that every process holds whole (numpy) -> global jax.Arrays split over
    (data, fsdp), row i of the batch row i of each array wherever the mesh puts the devices:
    each device takes its own rows. For fine-tuning, whose predictions are matched back to
    examples by row, and for batches that must be a one-process run's."""
    def place(value):
        return jax.make_array_from_callback(value.shape, sharding.batch_sharding(mesh, value.ndim),
                                            lambda index: value[index])

    return {name: place(value) for name, value in batch.items()}


def check_rows_per_process(mesh: jax.sharding.Mesh, batch_size: int) -> None:
    """ValueError unless this process's devices hold exactly batch_size / P rows of a global
    batch: what `global_batch` needs (rows that no other process feeds). A mesh whose tensor
    axis spans processes, with fewer batch splits (data x fsdp) than processes, gives two
    processes the same rows."""
    count = jax.process_count()
    indices = sharding.batch_sharding(mesh, 1).addressable_devices_indices_map((batch_size,))
    rows = set()
    for (index,) in indices.values():
        rows.update(range(*index.indices(batch_size)))
    if len(rows) != batch_size // count:
        raise ValueError(f"config.mesh {dict(mesh.shape)} gives each of the {count} processes {len(rows)} of a "
                         f"batch's {batch_size} rows, not {batch_size // count}: with config.data.host_split="
                         "'files' each process feeds rows of its own; split the batch at least as many ways as "
                         "there are processes (data x fsdp, the tensor axis within a host) or set "
                         "config.data.host_split='global_batch'")


@contextlib.contextmanager
def hold_workdir(workdir: str) -> Iterator[None]:
    """One run per workdir (`hold_lock`). A multi-process run tells JAX's preemption sync point
    where it resumes at once: reading and tokenizing its data can take minutes (see
    bertjax/runtime/preemption.py)."""
    from bertjax.runtime import fileio

    with hold_lock(workdir):
        preemption.report_start(checkpointing.latest_step(fileio.join(workdir, "checkpoints")) or 0)
        yield


@contextlib.contextmanager
def hold_lock(workdir: str) -> Iterator[None]:
    """Process 0 holds `<workdir>/.lock` (the other processes of the run share the workdir); when
    it cannot (another run holds it: WorkdirBusyError; not a folder, not writable), every process
    raises (`on_process_zero`), as it does when one cannot see the workdir process 0 holds
    (`_check_workdir_shared`)."""
    from bertjax.runtime import workdir_lock

    with contextlib.ExitStack() as held:
        on_process_zero(lambda: held.enter_context(workdir_lock.hold(workdir)), f"workdir {workdir}")
        _check_workdir_shared(workdir)
        yield


# How long a process looks for the file process 0 wrote in the workdir: NFS keeps a folder's
# listing up to a minute by default (acdirmax), and a host that looked for the workdir before
# it was made may go on not seeing it until then.
_SHARED_WAIT_SECONDS = 75.0


def _check_workdir_shared(workdir: str) -> None:
    """ValueError on every process when one of them does not see a file process 0 writes in
    `workdir`: the processes of a run must share it (gs://, or a file system every host
    mounts). A path of each host's own disk trains to the end, each host saving its part of
    every checkpoint where no other reads it: found only when the run resumes."""
    if jax.process_count() == 1:
        return
    import secrets

    from jax.experimental import multihost_utils

    from bertjax.runtime import fileio

    name = np.frombuffer(f".shared-{secrets.token_hex(8)}".encode(), np.uint8)  # process 0's is used
    name = bytes(np.asarray(multihost_utils.broadcast_one_to_all(name))).decode()
    marker = fileio.join(workdir, name)
    on_process_zero(lambda: fileio.write_bytes(marker, b""), f"workdir {workdir}")
    deadline = time.monotonic() + _SHARED_WAIT_SECONDS
    while not (seen := _sees(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    every = np.asarray(multihost_utils.process_allgather(np.int32(seen))).reshape(-1)
    if jax.process_index() == 0:
        try:
            fileio.remove(marker)
        except (OSError, *fileio.remote_errors()) as error:  # (an empty file left: harmless)
            log.warning("could not remove %s (%s)", marker, error)
    if not every.all():
        raise ValueError(f"workdir {workdir}: process {int(np.argmin(every))} does not see the files process 0 "
                         "writes there; the processes of a run must share its workdir (gs://, or a file system "
                         "every host mounts), where each saves its part of every checkpoint")


def _sees(path: str) -> bool:
    """Whether `path` exists as this process looks now; False where looking fails (every
    process must reach the gather after it). A local path's folders are listed first: listing
    a folder makes NFS read it again, where a name looked up before it was made stays missing
    until the folder's cached attributes expire."""
    from bertjax.runtime import fileio

    try:
        if not fileio.is_remote(path):
            folder = os.path.dirname(os.path.abspath(path))
            for parent in (os.path.dirname(folder), folder):
                if os.path.isdir(parent):
                    os.listdir(parent)
        return fileio.exists(path)
    except (OSError, *fileio.remote_errors()):
        return False


# Settings each host may set for itself: a sweep's temporary feature cache, under each host's $TMPDIR.
_HOST_LOCAL_SETTINGS = ("train.feature_cache_dir",)


# A digest of the rows every host reads -> the settings naming the files they come from (same
# paths, other contents: a host with its own copy).
_DIGESTED_FILES = {"train_data_digest": ("data.train_file",), "evaluation_digest": ("data.eval_file", "data.test_file"),
                   "test_digest": ("data.test_file",),
                   "train_files_digest": ("train_files",), "eval_files_digest": ("eval_files",)}


# The most of a setting's name that a differing key list names (a config key is far shorter).
_KEY_BYTES = 128


def check_same_on_every_process(settings: dict[str, Any]) -> None:
    """ValueError on every process when the processes of a multi-host run were given other
    `settings` (the run's saved config, with digests of the data every host reads): each would
    train, evaluate and save with its own, silently (process 0's learning rate logged, the
    others' applied), or hang at a barrier one of them never reaches. Names the first setting
    that differs from process 0's. "The same command on every host", checked."""
    if jax.process_count() == 1:
        return
    from flax.traverse_util import flatten_dict
    from jax.experimental import multihost_utils

    flat = flatten_dict(json.loads(json.dumps(settings, default=str)), sep=".")
    keys = sorted(key for key in flat if key not in _HOST_LOCAL_SETTINGS)
    digest = lambda text: np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], np.uint8)  # noqa: E731
    mine = np.stack([digest("\n".join(keys)), *(digest(json.dumps(flat[key], sort_keys=True)) for key in keys)])
    # The key lists first: where they agree, every process gathers arrays of one shape.
    names = np.asarray(multihost_utils.process_allgather(mine[0]))  # [processes, 8]
    other = next((p for p in range(len(names)) if not np.array_equal(names[p], names[0])), None)
    if other is not None:
        raise ValueError(f"process {other} was given other settings than process 0 ({_keys_differing(keys, other)}; "
                         "another bertjax version, or config file): give every host the same command")
    every = np.asarray(multihost_utils.process_allgather(mine))  # [processes, 1 + keys, 8]
    for key_index, key in enumerate(keys, start=1):
        other = next((p for p in range(len(every)) if not np.array_equal(every[p, key_index], every[0, key_index])),
                     None)
        if other is not None:
            files = [f"{name}={flat[name]!r}" for name in _DIGESTED_FILES.get(key, ()) if flat.get(name)]
            what = (f"the data it read ({key}{': ' + ', '.join(files) if files else ''})" if key.endswith("_digest")
                    else f"{key} ({flat[key]!r} on process {jax.process_index()})")
            raise ValueError(f"process {other} differs from process 0 in {what}: give every host the same command, "
                             "and the same files")


def _keys_differing(keys: list[str], other: int) -> str:
    """The first setting process 0 has and process `other` lacks, or else the first the other
    has alone, the same on every process (the names gathered as bytes padded to the longest
    list): "process 1 has no train.x" or "process 1 has train.y, which process 0 has not"."""
    from jax.experimental import multihost_utils

    counts = np.asarray(multihost_utils.process_allgather(np.int32(len(keys)))).reshape(-1)
    padded = np.zeros((int(counts.max()), _KEY_BYTES), np.uint8)
    for row, key in enumerate(keys):
        encoded = key.encode()[:_KEY_BYTES]
        padded[row, :len(encoded)] = np.frombuffer(encoded, np.uint8)
    every = np.asarray(multihost_utils.process_allgather(padded))  # [processes, longest, _KEY_BYTES]
    keys_0, keys_other = ([row.tobytes().rstrip(b"\0").decode(errors="replace") for row in every[p, :counts[p]]]
                         for p in (0, other))
    set_0, set_other = set(keys_0), set(keys_other)
    missing = next((key for key in keys_0 if key not in set_other), None)
    if missing is not None:
        return f"process {other} has no {missing}"
    added = next((key for key in keys_other if key not in set_0), "?")
    return f"process {other} has {added}, which process 0 has not"


def process_zero_first(fn: Callable[[], Any], what: str) -> Any:
    """Runs fn on process 0, then on the others (shared files are written once, without races);
    when it raises on process 0, every process raises (`on_process_zero`)."""
    result = on_process_zero(fn, what)
    return result if jax.process_index() == 0 else fn()


def on_process_zero(fn: Callable[[], Any], what: str) -> Any:
    """fn() on process 0 alone (None elsewhere), then a barrier every process passes. When it
    raised there, every process raises, not process 0 alone (the others would wait at their
    next barrier until the coordinator's timeout): process 0 its error, the others
    WorkdirBusyError when it was one, else a ValueError pointing at process 0's error."""
    from bertjax.runtime import workdir_lock

    result, failed = None, None
    if jax.process_index() == 0:
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 -- every process must hear of it before anyone raises
            failed = e
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        outcome = 0 if failed is None else 1 if isinstance(failed, workdir_lock.WorkdirBusyError) else 2
        outcome = int(multihost_utils.broadcast_one_to_all(np.int32(outcome)))
        if failed is None and outcome == 1:
            raise workdir_lock.WorkdirBusyError(f"{what} is in use by another run (process 0 found its lock held)")
        if failed is None and outcome == 2:
            raise ValueError(f"{what}: process 0 failed (its error says why)")
    if failed is not None:
        raise failed
    return result

"""The paper's fine-tuning grid (section A.3: learning rates, batch sizes, epochs; with
config.train.sweep_seeds its random restarts too), one fine-tuning run per point, each in
WORKDIR/sweep/<values> and resumable; the best by the task's main metric first.

A WORKDIR holds one sweep's settings (WORKDIR/sweep_settings.json: everything but the grid
and where or how often things happen, though how often the runs evaluate counts, the step
folder they start from and the contents of their training and evaluation files, and of a
test file that ranks them, NER's without an evaluation file): a rerun
with other settings is refused once a run has trained under them, since its results (or its
checkpoints, resumed) would be reported as the new settings'. A finished run's row
(WORKDIR/sweep/<values>/sweep_row.json) is reused by a rerun without loading the run again,
unless the rerun names a data.test_file the run has not predicted: then the run writes its
predictions for it, as a finished fine-tuning run relaunched does.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import posixpath
import shutil
from typing import Any

import jax
import ml_collections

from bertjax import checkpointing, finetune, finetune_setup, run_config, sharding, tasks, trainer
from bertjax.inference import model_source
from bertjax.models import convert
from bertjax.runtime import cli, fileio
from bertjax.runtime.errors import RunSettingsError, TrainingDiverged

log = logging.getLogger(__name__)

# What may differ between two invocations of one sweep: the grid (its keys and the three it
# sets) and the operational settings, but for the checkpoint and the vocabulary to start from
# (a finished run's reused row never meets the checks a resumed run makes of them) and how
# often the runs evaluate (each row is its run's best evaluation: more of them, a higher one).
_GRID_SETTINGS = ("train.sweep_", "train.learning_rate", "train.batch_size", "train.num_epochs")
_KEPT_FOR_A_RERUN = ("init_checkpoint", "data.vocab_path", "train.eval_every")
_RERUN_MAY_CHANGE = (*(key for key in run_config.OPERATIONAL_SETTINGS if key not in _KEPT_FOR_A_RERUN),
                     *_GRID_SETTINGS)
SETTINGS_FILE, ROW_FILE, RESULTS_FILE = run_config.SWEEP_SETTINGS_FILE, "sweep_row.json", "sweep_results.json"
# The files whose contents a sweep's rows depend on: compared by content (`_settings`), not by
# path; data.test_file too where it ranks the runs (`_data_files`).
_DATA_FILES = ("train_file", "eval_file")


def _data_files(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """The config.data keys of the files a sweep's rows depend on: the training and evaluation
    files, and a tagged test file where it is the evaluation (NER without an eval_file), which
    chooses each run's best and ranks them; else a test file is predicted, as a rerun may ask."""
    scores_test_file = tasks.family_of_task(config.task).scores_test_file
    return (*_DATA_FILES, "test_file") if scores_test_file and not config.data.eval_file else _DATA_FILES


def _grid_values(train: ml_collections.ConfigDict, key: str, kind: type, smallest: int = 1) -> list:
    """The comma-separated numbers of config.train.<key> (floats positive and finite, ints from `smallest`:
    1, or 0 for seeds), each naming a run of its own."""
    try:
        values = [kind(value) for value in str(train[key]).split(",")]
    except ValueError:
        values = []
    if not values or any(not 0 < value < math.inf if kind is float else not smallest <= value < 2**63
                         for value in values):  # (past 2**63: no seed jax or TensorFlow takes)
        sign = "finite positive" if kind is float else "positive" if smallest > 0 else "non-negative"
        raise ValueError(f"config.train.{key} must be comma-separated {sign} {kind.__name__}s, got {train[key]!r}")
    names = [f"{value:g}" if kind is float else str(value) for value in values]  # as the run folders name them
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:  # one folder: the second run would resume the first and report its result as its own
        raise ValueError(f"config.train.{key}={train[key]!r} names {', '.join(repeated)} more than once"
                         + (" (values are told apart to 6 significant digits)" if kind is float else ""))
    return values


# Each training value a grid sets -> the grid key that lists its values.
_GRID_KEYS = {"learning_rate": "sweep_learning_rates", "batch_size": "sweep_batch_sizes", "num_epochs": "sweep_epochs"}


def _check_every_run(config: ml_collections.ConfigDict, runs: list[tuple[str, ml_collections.ConfigDict]]) -> None:
    """Each grid point's training values and batch sizes checked before the first run trains, so
    that a bad one fails at the start, naming the sweep key, not after the runs before it; then
    the settings no grid point changes, before the sweep writes anything."""
    data, fsdp, _ = sharding.mesh_shape(jax.device_count(), config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    for name, run in runs:
        try:
            finetune_setup.check_train_values(run.train)  # (its message names the key)
        except ValueError as e:
            raise ValueError(f"the sweep's run {name}: {e}") from None
        try:
            finetune_setup.check_batch_sizes(run.train, data * fsdp)
        except ValueError as e:
            raise ValueError(f"the sweep's run {name} (config.train.sweep_batch_sizes="
                             f"{config.train.sweep_batch_sizes!r}): {e}") from None
    finetune_setup.check_run_settings(runs[0][1])


def _trained_before(workdir: str) -> str | None:
    """What runs of the sweep in WORKDIR trained, if any did: a finished run's row, an evaluated
    row of a run that failed later (diverged), or a run's checkpoints (it would resume)."""
    runs = fileio.join(fileio.escape(workdir), "sweep", "*")
    if fileio.glob(fileio.join(runs, ROW_FILE)):
        return "its finished runs"
    results_file = fileio.join(workdir, RESULTS_FILE)
    if fileio.exists(results_file) and any(row.get("best_step") is not None for row in fileio.read_json(results_file)):
        return "its evaluated runs"
    if any(run_config.own_checkpoints(run_dir) for run_dir in fileio.glob(runs)):
        return "its runs' checkpoints (resumed)"
    return None


def _settings(config: ml_collections.ConfigDict, saved: dict[str, Any] | None) -> dict[str, Any]:
    """What a sweep's runs are compared by: `config`; the step folder config.init_checkpoint
    names ("init_weights": a pre-training workdir's newest step when the sweep started, kept
    while that step reads, as `_step_it_started_from` says); the training and evaluation
    files' contents, a test file's where it ranks the runs (`_data_files`; "data_contents",
    SHA-256: a file rewritten at its path gives other results, one moved the same). Where the
    weights or a file no longer read (gone with a recreated machine), the ones `saved` (the
    sweep's recorded settings) name: finished runs are reused, and a run that needs them says
    so itself."""
    saved = saved or {}
    init_weights = ""
    if config.init_checkpoint:
        try:
            init_weights = _absolute(model_source.resolve(config.init_checkpoint).weights)
        except (OSError, ValueError, *fileio.remote_errors()):
            init_weights = saved.get("init_weights", "")
        init_weights = _step_it_started_from(config.init_checkpoint, init_weights, saved.get("init_weights", ""))
    contents = {}
    for key in _data_files(config):  # (every key, "" for none: a file added later is a change too)
        path = config.data[key]
        contents[key] = ("" if not path else fileio.content_hash(path)[:16] if fileio.exists(path)
                         else saved.get("data_contents", {}).get(key, ""))
    return json.loads(json.dumps({**config.to_dict(), "init_weights": init_weights, "data_contents": contents}))


def _absolute(path: str) -> str:
    """A local path made absolute, a remote one as it is (as sweeps have recorded them)."""
    return path if fileio.is_remote(path) else os.path.abspath(path)


def _step_it_started_from(init_checkpoint: str, newest: str, recorded: str) -> str:
    """`recorded` (the step folder the sweep started from) where config.init_checkpoint names a
    checkpoint directory whose `newest` step is another of the same directory and `recorded`
    still reads: a pre-training run still saving moved on, and the sweep resumed after a
    preemption goes on from its own step (it was refused as a sweep of other settings, so a
    scheduler's retries failed every time). Else `newest`: a step named itself, or another
    checkpoint, is compared as given."""
    named = _absolute(init_checkpoint).rstrip("/")
    if not recorded or newest == recorded or newest.rstrip("/") == named or (
            posixpath.dirname(newest.rstrip("/")) != posixpath.dirname(recorded.rstrip("/"))):
        return newest
    try:
        checkpointing.read_meta(recorded)
    except (OSError, ValueError, *fileio.remote_errors()):  # deleted since (keep=3): the sweep cannot go on as it was
        return newest
    log.warning("%s's newest step is now %s: this sweep goes on from %s, the step it started from (a new workdir "
                "starts from the newest)", init_checkpoint, posixpath.basename(newest), recorded)
    return recorded


def _check_same_sweep(config: ml_collections.ConfigDict, workdir: str) -> None:
    """ValueError when WORKDIR holds trained runs of a sweep with other settings than
    `config`'s (`_settings`: the grid and operational settings aside; settings a newer bertjax
    added are not compared); else records these settings there: a sweep none of whose runs
    trained (a typo fixed) takes the new ones, and its failed runs' rows are dropped. Process 0
    alone: every host's runs start from the weights it resolved and recorded."""
    path = fileio.join(workdir, SETTINGS_FILE)
    saved = fileio.read_json(path) if fileio.exists(path) else None
    settings = _settings(config, saved)
    # (settings from before the contents were recorded compare the files' paths)
    paths = tuple(f"data.{key}" for key in _DATA_FILES) if saved and "data_contents" in saved else ()
    changes = saved is not None and run_config.changed_settings(
        saved, settings, left_out=(*_RERUN_MAY_CHANGE, *paths), saved_keys_only=True)
    if not changes:
        if saved is None:
            fileio.write_json(path, settings)
        elif "data_contents" in saved and set(settings["data_contents"]) - set(
                saved["data_contents"]):
            # A file this bertjax compares and the saved settings lack (a test file that ranks): added
            # alone, as the other keys the comparison skipped were never checked.
            contents = {**settings["data_contents"], **saved["data_contents"]}
            fileio.write_json(path, {**saved, "data_contents": contents})
        return
    trained = _trained_before(workdir)
    if trained:
        raise ValueError(f"{workdir} holds a sweep with other settings ({run_config.first_changes(changes)}): "
                         f"{trained} would be reported as this one's; give a new workdir, or the "
                         f"settings of {path}")
    results_file = fileio.join(workdir, RESULTS_FILE)
    if fileio.exists(results_file):  # failures under the old settings, none of them this sweep's
        log.warning("the sweep's settings changed (%s) before any run trained: the failed runs' rows in %s are "
                    "dropped", run_config.first_changes(changes), results_file)
        fileio.remove(results_file)
    fileio.write_json(path, settings)


def _start_every_run_from_the_recorded_weights(config: ml_collections.ConfigDict, workdir: str,
                                               runs: list[tuple[str, ml_collections.ConfigDict]]) -> None:
    """Sets every run's config.init_checkpoint to the step folder the sweep's settings record
    (`_settings`, resolved on process 0) where config.init_checkpoint is a bertjax workdir: each
    run, and each host, resolving it again took a newer step of a pre-training run still saving,
    and a table of runs from several starting points."""
    if not config.init_checkpoint:
        return
    run_config.warn_if_unfinished_start(config.init_checkpoint, workdir)  # (said of the workdir named)
    weights = fileio.read_json(fileio.join(workdir, SETTINGS_FILE)).get("init_weights")
    try:
        pinned = bool(weights) and convert.checkpoint_layout(weights)[0] == "bertjax"
    except (OSError, ValueError, *fileio.remote_errors()):  # gone since: a run that needs them says so
        pinned = False
    for _, run in runs if pinned else ():
        run.init_checkpoint = weights


def sweep(config: ml_collections.ConfigDict, workdir: str) -> list[dict[str, Any]]:
    """Fine-tunes once per (learning rate, batch size, epochs, seed) of the configured grid
    (epochs only when config.train.num_steps is 0; seeds only where config.train.sweep_seeds
    names them: config.seed and config.data.seed both take each), each in
    WORKDIR/sweep/<values> (resumable; a
    finished run's row is reused), prints a table and writes WORKDIR/sweep_results.json
    (with the rows of earlier invocations' other grid points); returns this grid's rows, best
    first by the task's main metric."""
    grid = [_grid_values(config.train, key, kind) for key, kind in zip(_GRID_KEYS.values(), (float, int, float))]
    seeds = _grid_values(config.train, "sweep_seeds", int, smallest=0) if str(config.train.sweep_seeds) else [None]
    fixed_steps = config.train.num_steps  # > 0 (e.g. `quick`): every run has this length, whatever its epochs
    if fixed_steps:
        log.warning("config.train.num_steps=%d fixes each run's length: the epochs grid %s is not used",
                    fixed_steps, grid[2])
        grid[2] = [config.train.num_epochs]
    for (key, grid_key), values in zip(_GRID_KEYS.items(), grid):
        if config.train[key] not in values:  # e.g. a smaller batch_size given to fit memory
            log.warning("the sweep's grid sets %s (config.train.%s=%s): config.train.%s=%s is not used",
                        key, grid_key, values, key, config.train[key])
    runs = []
    cached = config.train.freeze_encoder and config.train.cache_features  # then one feature cache for every run
    for learning_rate, batch_size, epochs, seed in itertools.product(*grid, seeds):
        run = ml_collections.ConfigDict(config.to_dict())
        run.train.update(learning_rate=learning_rate, batch_size=batch_size, num_epochs=epochs, sweep=False,
                         feature_cache_dir=finetune.cache_directory(config, workdir) if cached
                         else config.train.feature_cache_dir)  # (else set to no effect: each run refuses it)
        length = f"steps{fixed_steps}" if fixed_steps else f"epochs{epochs:g}"
        name = f"lr{learning_rate:g}_batch{batch_size}_{length}"
        if seed is not None:  # a restart: another head initialisation, dropout and example order
            run.seed, run.data.seed, name = seed, seed, f"{name}_seed{seed}"
        runs.append((name, run))
    _check_every_run(config, runs)
    family = tasks.family_of_task(config.task)
    scored = config.data.eval_file or (family.scores_test_file and config.data.test_file)
    if config.task in family.own_file_tasks and not scored:
        predicted = config.data.test_file and not family.scores_test_file
        raise ValueError(f"config.task={config.task!r} reads your files and none is to evaluate: a sweep ranks its "
                         "runs by their evaluation (set config.data.eval_file"
                         + ("; a test file is predicted, not scored" if predicted else "") + ")")
    # One sweep per WORKDIR: a second would run the same runs and write its own partial
    # sweep_results.json (each run's folder has a lock of its own).
    with trainer.hold_lock(workdir):
        run_config.check_sweep_or_run(workdir, sweep=True)
        trainer.on_process_zero(lambda: _check_same_sweep(config, workdir), "sweep settings")
        _start_every_run_from_the_recorded_weights(config, workdir, runs)
        results, metric = _run_all(workdir, runs)
    names = {name for name, _ in runs}
    if cached and finetune.temporary_cache(config, workdir):  # its runs' one cache, in a folder no one chose
        if any("error" in row for row in results if row["run"] in names):  # (for the rerun that tries them again)
            _say(f"the cached features stay in {finetune.cache_directory(config, workdir)} for a rerun of the "
                 "failed runs; delete them when none will")
        else:
            shutil.rmtree(finetune.cache_directory(config, workdir), ignore_errors=True)
    results = _ranked(results, metric)  # with the earlier invocations' other points
    if jax.process_index() == 0:
        print("\n" + "\n".join(results_table(results)))
        for row in results:
            if "error" in row:
                print(f"{row['run']}: failed, {row['error']}")
        top = results[0] if metric in results[0] else None
        if top is None:
            print("no run evaluated; ", end="")
        elif "error" in top:  # only failed runs evaluated: ranked after any finished one
            print(f"no run finished; the best evaluation before its run failed: {top['run']} ({metric} "
                  f"{top[metric]:.4f}); ", end="")
        else:
            predictions = fileio.join(workdir, "sweep", top["run"], "predictions")
            print(f"best: {top['run']} ({metric} {top[metric]:.4f}); "
                  + (f"its predictions in {predictions}; " if fileio.exists(predictions) else ""), end="")
        print(f"all in {fileio.join(workdir, RESULTS_FILE)}")
    return [row for row in results if row["run"] in names]  # this grid's (what the launcher judges)


def _test_file_record(run: ml_collections.ConfigDict, finished: dict[str, Any]) -> dict[str, str]:
    """The test file a run predicts, by name and contents (a file rewritten in place is another;
    one gone since, on a new machine, the `finished` row's, as `_settings` takes a data file's)."""
    path = run.data.test_file
    contents = (fileio.content_hash(path)[:16] if path and fileio.exists(path)
                else finished.get("test_file_contents", ""))
    return {"test_file": path, "test_file_contents": contents}


def _run_all(workdir: str, runs: list[tuple[str, ml_collections.ConfigDict]]
             ) -> tuple[list[dict[str, Any]], str | None]:
    """Fine-tunes each (name, config) of `runs` in WORKDIR/sweep/<name> (a finished one's row
    read back, or for another test file its predictions written), writing the rows so far
    after each, with those of grid points run by earlier invocations: (the rows, the main
    metric's column; None when no run evaluated)."""
    results_file = fileio.join(workdir, RESULTS_FILE)
    names = {name for name, _ in runs}
    recorded = fileio.read_json(results_file) if fileio.exists(results_file) else []
    earlier = [row for row in recorded if row["run"] not in names]  # another grid's points: never lost
    # This grid's rows as recorded, written with the new ones until each run's turn: a rerun
    # stopped before it (a run trained again before it, and preempted) loses none of them.
    pending = {row["run"]: row for row in recorded if row["run"] in names}
    # (the main metric as recorded: the rows written before this grid's first evaluation are
    # ranked by it, not by their loss)
    metric = next(filter(None, (_recorded_metric(workdir, row["run"]) for row in recorded)), None)
    results = list(earlier)

    def record(row: dict[str, Any]) -> None:
        results.append(row)
        pending.pop(row["run"], None)

    for number, (name, run) in enumerate(runs, start=1):
        run_dir = fileio.join(workdir, "sweep", name)
        row_file = fileio.join(run_dir, ROW_FILE)
        finished = fileio.read_json(row_file) if fileio.exists(row_file) else None
        # A run of config.train.num_steps steps took no part of num_epochs: its row says its steps.
        length = {"steps": run.train.num_steps} if run.train.num_steps else {"epochs": run.train.num_epochs}
        row = {"run": name, "learning_rate": run.train.learning_rate, "batch_size": run.train.batch_size, **length,
               "seed": run.seed}
        if finished:
            _check_same_point(finished["row"], row, run_dir)
        # A test file the finished run has not predicted, or one rewritten since (a row from
        # before the file was recorded, with one given now, predicts once more; none given now:
        # nothing to write).
        if finished and (not run.data.test_file or _test_file_record(run, finished) == {
                key: finished.get(key) for key in ("test_file", "test_file_contents")}):
            _say(f"the sweep's run {name} finished before: its result is reused")
            record(finished["row"])
            metric = finished["metric"]
            continue
        if finished:
            _say(f"the sweep's run {name} finished before: writing its predictions for "
                 f"config.data.test_file={run.data.test_file!r}")
        else:  # (its own lines say its settings, not which run of the sweep it is)
            _say(f"sweep run {number} of {len(runs)}: {name}")
        cli.new_run_warnings()
        try:
            summary = finetune.finetune(run, run_dir)
        except Exception as e:  # noqa: BLE001 (a run's own failure is recorded; any other is raised)
            failure = _run_failure(e)
            if failure is None:
                raise
            if finished:  # only its predictions failed: its result stands, and a rerun tries them again
                log.warning("the sweep's run %s finished before; its predictions for config.data.test_file=%r "
                            "failed (%s): its result is kept, without them", name, run.data.test_file, failure)
                record(finished["row"])
                metric = finished["metric"]
                continue
            log.warning("the sweep's run %s failed (%s); going on to the next", name, failure)
            summary = getattr(e, "result", None)  # a diverged run's best evaluation before it
            row["error"] = failure
            if summary is None:
                record({**row, "best_step": None})
                _write_results(workdir, [*results, *pending.values()], metric)
                continue
        if summary["best"] is None and "error" not in row:
            raise ValueError(f"the sweep's run {name} evaluated nothing: the task has no evaluation split "
                             "(config.data.eval_file), and a sweep ranks its runs by their evaluation")
        metric = f"eval_{summary['main_metric']}"  # the task's: F1 for MRPC, Spearman for STS-B, ...
        best = summary["best"] or {"metrics": {}, "step": None}
        record({**row, "best_step": best["step"], **{f"eval_{k}": v for k, v in best["metrics"].items()}})
        if "error" not in row and jax.process_index() == 0:  # (a failed run is tried again by a rerun)
            fileio.makedirs(run_dir)
            fileio.write_json(row_file, {"row": results[-1], "metric": metric, **_test_file_record(run, {})})
        # After every run: a sweep that stops keeps what it has.
        _write_results(workdir, [*results, *pending.values()], metric)
    _write_results(workdir, results, metric)  # (every run's row reused: the file may predate one)
    return results, metric


def _check_same_point(finished: dict[str, Any], row: dict[str, Any], run_dir: str) -> None:
    """ValueError when a finished run's row was trained at other grid values than `row` names:
    run folders tell learning rates and epochs apart to 6 significant digits, so 2.0000001e-5 in a
    later invocation's grid met the folder of 2e-5 and reported its result as its own."""
    keys = ("learning_rate", "batch_size", "epochs", "steps", "seed")
    # (keys both rows have: a row from before steps were recorded has epochs, its folder says steps)
    other = {key: finished[key] for key in keys if key in finished and key in row and finished[key] != row[key]}
    if other:
        wanted = {key: row[key] for key in other}
        raise ValueError(f"{run_dir} holds the run of {other}, not {wanted}: the sweep's run folders tell values "
                         "apart to 6 significant digits; give values that differ there, or a new workdir")


def results_table(results: list[dict[str, Any]]) -> list[str]:
    """The rows as lines of a table: run, best step and each evaluation metric, every column as
    wide as its widest cell (a seed's or a failed run's name is longer than most)."""
    columns = ["run", "best_step"] + sorted({key for row in results for key in row if key.startswith("eval_")})

    def cell(row: dict[str, Any], column: str) -> str:
        value = row["run"] + (" (failed)" if "error" in row else "") if column == "run" else row.get(column)
        return f"{value:.4f}" if isinstance(value, float) else "" if value is None else str(value)

    cells = [[cell(row, column) for column in columns] for row in results]
    widths = [max(len(column), *(len(line[k]) for line in cells)) for k, column in enumerate(columns)]
    return ["  ".join(text.ljust(width) if k == 0 else text.rjust(width)
                      for k, (text, width) in enumerate(zip(line, widths))).rstrip()
            for line in [columns, *cells]]


def _say(line: str) -> None:
    """A line for the console (process 0): which run the sweep trains, or what it does with one it
    did not train now."""
    if jax.process_index() == 0:
        print(line, flush=True)


def _recorded_metric(workdir: str, name: str) -> str | None:
    """The main metric's column a finished run of the sweep recorded with its row, or None."""
    row_file = fileio.join(workdir, "sweep", name, ROW_FILE)
    return fileio.read_json(row_file)["metric"] if fileio.exists(row_file) else None


def _ranked(results: list[dict[str, Any]], metric: str | None) -> list[dict[str, Any]]:
    """The rows best first by `metric` (None: no run evaluated yet), the failed ones after every
    finished one: a run that diverged keeps its best evaluation before it, which is no result.
    Ties go to the lower eval loss, then the run's name: never to the order earlier invocations
    ran in, which would change the best run (what predict and export load) on a rerun."""
    def key(row):
        score, loss = row.get(metric, -math.inf), row.get("eval_loss", math.inf)
        return ("error" in row, -score if math.isfinite(score) else math.inf, loss if math.isfinite(loss) else math.inf,
                row["run"])

    return sorted(results, key=key)


def _write_results(workdir: str, results: list[dict[str, Any]], metric: str | None) -> None:
    """The rows so far, ranked, to WORKDIR/sweep_results.json (process 0)."""
    if jax.process_index() == 0:
        fileio.write_json(fileio.join(workdir, RESULTS_FILE), _ranked(results, metric))


def _run_failure(error: Exception) -> str | None:
    """One line for a run that failed by its own settings (non-finite losses; out of device memory
    at a large batch size; a warmup share that gives its length no warmup step), which the sweep
    records and goes past; None for anything else."""
    if isinstance(error, (TrainingDiverged, RunSettingsError)):
        return str(error)
    if cli.out_of_device_memory(error):
        return f"out of device memory ({str(error)[:200]})"
    return None

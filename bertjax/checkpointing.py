"""Checkpoints with orbax: the only module in bertjax that imports it.

Layout of a run's checkpoint directory (orbax `CheckpointManager`, one folder per step)::

    <directory>/<step>/state/   the train state: a pytree of arrays (params, opt_state, step),
                                stored sharded (OCDBT), restorable onto any mesh
    <directory>/<step>/meta/    JSON: {"format": "bertjax", "step", "data_position", "config",
                                "extra"} ("extra": what the caller passed as extra_meta)
    <directory>/<step>.unreadable-<UTC time>/   a step that could not be read, moved aside
    <directory>/<step>.replaced-<UTC time>/     a step being saved again (`save(replace=True)`),
                                                there only while that save runs: one that failed
                                                or was killed is moved back by the next Checkpointer

Atomicity: orbax writes a step into `<step>.orbax-checkpoint-tmp` and renames it to
`<step>` only once every file is written (on GCS, where renames are not atomic, it writes
`commit_success.txt` last instead). A save killed part-way (kill -9, preemption, a full
disk) therefore leaves a tmp folder that is never listed as a step and is deleted by the
next `Checkpointer`; the steps saved before it are untouched. A write that fails raises
CheckpointSaveError (an OSError) naming the step, from `save`, `wait_until_finished` or `close`;
`save` meeting an earlier save's failure warns of it and still saves its own step (a
preemption's save is not lost to a passing gs:// error of the last one), raising if that fails.

Nothing is ever deleted on a read error. `restore` reads a step up to three times
(READ_RETRY_SECONDS apart: a transient gs:// error is not corruption); a step that still
fails is skipped, and once an older step has been restored, the skipped newer ones are
moved aside to `<step>.unreadable-<UTC time>` (a name orbax never lists as a step nor
cleans up), with a warning naming both paths, so the run can save those step numbers
again. When no step can be read, nothing is moved and `restore` raises. Reading another
run's checkpoint (`read_meta`, `load_params`: an init checkpoint, a resumed run's best/) is
retried and falls back the same way to the newest readable step, with the same warning, and
moves nothing.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import logging
import os
import re
import time
from typing import Any, Callable, TypeVar

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils
from orbax.checkpoint import checkpoint_managers

from bertjax.runtime.console import PROCESS_SPECIFIC

STATE, META = "state", "meta"
FORMAT = "bertjax"
# Waits before the 2nd and 3rd attempt to read a step: long enough to ride out a gs:// blip.
READ_RETRY_SECONDS = (2.0, 8.0)
# Waits before listing a checkpoint folder again when the processes list different steps (a
# shared file system whose listings lag behind, NFS's cached attributes after a preemption).
LISTING_RETRY_SECONDS = (2.0, 5.0, 10.0, 20.0)
COMMIT_FILE = "commit_success.txt"  # orbax's "this step is complete" marker on GCS
_REPLACED = re.compile(r"(\d+)\.replaced-\d{8}T\d{6}Z")  # a step a replacing save moved aside

log = logging.getLogger(__name__)
T = TypeVar("T")


def _is_remote(path: str | epath.Path) -> bool:
    return "://" in str(path)


def _path(directory: str) -> epath.Path:
    """Absolute local paths (orbax requires them); URLs such as gs://... as given."""
    return epath.Path(directory if _is_remote(directory) else os.path.abspath(directory))


def _flat_shapes(tree: Any) -> dict[tuple[str, ...], tuple[int, ...]]:
    """{key path: shape} of a pytree. Keys are plain names, so a namedtuple and the dict
    orbax stores it as (or a tuple and a list) give the same paths."""

    def name(entry) -> str:
        return str(getattr(entry, "key", getattr(entry, "name", getattr(entry, "idx", entry))))

    return {tuple(name(entry) for entry in path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


class CheckpointMismatchError(ValueError):
    """The expected tree (leaves, shapes) does not fit a readable checkpoint."""


class _NotThisFormat(ValueError):
    """A step folder that reads, but is no bertjax checkpoint of what was asked: reading it again
    cannot change that (not retried)."""


class CheckpointSaveError(OSError):
    """Writing a checkpoint failed (a full disk, lost permissions); earlier steps are intact."""


class CheckpointUnreadableError(OSError):
    """No checkpoint of a directory could be read (corrupt or truncated files)."""


class CheckpointListingError(OSError):
    """The processes of a run list different steps in its checkpoint folder."""


def brief(error: Exception) -> str:
    """`Type: first line of the message`, at most about 300 characters, its start and its end
    (where the operating system's reason is, "No space left on device"): TensorStore's errors
    carry pages of spec dumps."""
    first_line = (str(error).strip().splitlines() or [""])[0].split(" See full TensorStore details")[0]
    if len(first_line) > 300:
        first_line = f"{first_line[:150]} ... {first_line[-150:]}"
    return f"{type(error).__name__}: {first_line}"


def _check_matches(abstract: Any, saved_metadata: Any, what: str) -> None:
    """Raises CheckpointMismatchError if `abstract` and the saved tree differ in leaves or shapes."""
    want, have = _flat_shapes(abstract), _flat_shapes(saved_metadata)
    missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    if missing or extra:
        raise CheckpointMismatchError(f"{what}: the checkpoint's tree differs from the expected one; "
                         f"not in the checkpoint: {missing[:5]}, only in the checkpoint: {extra[:5]}")
    wrong = [(path, want[path], have[path]) for path in want if want[path] != have[path]]
    if wrong:
        raise CheckpointMismatchError(f"{what}: shape mismatch (path, expected, saved): {wrong[:5]}")


def _check_abstract(abstract: Any, name: str) -> None:
    for path, leaf in jax.tree_util.tree_leaves_with_path(abstract):
        if not isinstance(leaf, jax.ShapeDtypeStruct) or leaf.sharding is None:
            raise ValueError(f"{name}{jax.tree_util.keystr(path)} must be a jax.ShapeDtypeStruct "
                             f"with a sharding, got {leaf!r}")


def _state_handler() -> ocp.PyTreeCheckpointHandler:
    """The train state's handler: orbax's, except that a single process writes each array whole.

    orbax splits every replicated array among its replicas so that several hosts share the
    writing (kept for multi-host runs). In one process that saves nothing and compiles a
    small slicing program per array shape and device, a large part of a short run's time
    (and of a TPU VM's first save).
    """
    if jax.process_count() > 1:
        return ocp.PyTreeCheckpointHandler()
    whole_arrays = ocp.type_handlers.ArrayHandler(use_replica_parallel=False)
    registry = ocp.type_handlers.create_type_handler_registry(*[
        (kind, whole_arrays if kind is jax.Array else ocp.type_handlers.get_type_handler(kind))
        for kind in ocp.type_handlers.supported_types()])
    return ocp.PyTreeCheckpointHandler(type_handler_registry=registry)


class Checkpointer:
    """Orbax CheckpointManager wrapper: async saves, save interval, keep-last-N.

    Every process of a multi-host run creates one and calls `save`/`restore` at the same
    steps (orbax coordinates the writes). `directory` may be local or gs://.
    """

    def __init__(self, directory: str, *, save_interval_steps: int, max_to_keep: int,
                 async_save: bool = True):
        for name, value in (("save_interval_steps", save_interval_steps), ("max_to_keep", max_to_keep)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Checkpointer: {name} must be an int >= 1, got {value!r}")
        self.directory = _path(directory)
        options = ocp.CheckpointManagerOptions(
            save_decision_policy=checkpoint_managers.FixedIntervalPolicy(save_interval_steps),
            preservation_policy=checkpoint_managers.LatestN(max_to_keep),
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=True,  # leftovers of saves killed part-way
        )
        handlers = {STATE: _state_handler(), META: ocp.JsonCheckpointHandler()}
        # Before the manager, whose start cleans up unfinished steps in a thread of its own: a copy
        # moved back meanwhile could be taken for one.
        self._recover_replaced()
        self._manager = ocp.CheckpointManager(self.directory, item_handlers=handlers, options=options)
        # JAX's preemption sync point keeps the last step any caller gave it, and a notice picks the
        # step after the highest a host gave. orbax's save-finalizing thread asks with the saved
        # step while training has moved on: a notice then would pick a step already passed, and a
        # one-process run would never stop for it. preemption.PreemptionWatcher alone asks, with
        # the training step; a preemption's save is a forced one, which needs no answer from orbax.
        self._manager.reached_preemption = lambda step: False
        self._saving: int | None = None  # the step of a save that may still be in flight

    def _recover_replaced(self) -> None:
        """A replacing save (`save(replace=True)`) that was killed or failed left its step only in
        `<step>.replaced-<UTC time>`: moved back (the newest such copy), so that best/ keeps the
        weights it had, over what the killed save left at `<step>` (on gs:// orbax writes a step
        in place, its commit file last); a copy whose step was saved again since is deleted."""
        if jax.process_index() == 0 and self.directory.exists():
            copies = sorted((path for path in self.directory.iterdir() if _REPLACED.fullmatch(path.name)),
                            key=lambda path: path.name, reverse=True)  # newest first within a step
            for path in copies:
                step = self.directory / _REPLACED.fullmatch(path.name).group(1)
                if _is_step_dir(step):
                    path.rmtree()
                else:
                    if step.exists():
                        step.rmtree()
                    _move(path, step)
                    log.warning("%s: a save that replaced step %s did not finish; its earlier copy is back",
                                self.directory, step.name)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"bertjax.checkpointing: {self.directory} replaced steps recovered")

    def due(self, step: int) -> bool:
        """Whether `save(step, ...)` without force saves (a multiple of save_interval_steps)."""
        return bool(self._manager.should_save(step))

    def latest_step(self) -> int | None:
        """The newest finalized step (readable or not), or None."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Finalized steps, oldest first (includes a save still in progress)."""
        return sorted(self._manager.all_steps())

    def agreed_steps(self) -> list[int]:
        """The finalized steps, newest first, as every process lists them (a collective: every
        process must call it). Each process lists the folder itself, and decides its saves by
        its own listing: processes that differ would restore different steps (a mixed state)
        or one would save alone (a hang). A listing that differs from process 0's is read again
        LISTING_RETRY_SECONDS apart, then CheckpointListingError on every process."""
        for wait in (*LISTING_RETRY_SECONDS, None):
            steps = sorted(self._manager.all_steps(), reverse=True)
            agreed = agreed_steps(steps)
            if _on_every_process(steps == agreed):
                return agreed
            if wait is None:
                raise CheckpointListingError(
                    f"the processes list other steps in {self.directory} than process 0 ({agreed}) after "
                    f"{sum(LISTING_RETRY_SECONDS):.0f}s: is it a folder every host shares, on a file system whose "
                    "listings agree? Run again once they do")
            time.sleep(wait)
            self._manager.reload()

    def save(self, step: int, state: Any, *, data_position: int, config: dict, force: bool = False,
             extra_meta: dict | None = None, replace: bool = False) -> bool:
        """Starts saving `state` (a pytree of jax.Arrays) at `step`; returns whether it did.

        Saves only when `step` is a multiple of save_interval_steps, or when `force`
        (preemption, end of training) and the step is not saved yet; with `replace` a saved
        `step` is written again (a best checkpoint re-evaluated after a resume): the saved one is
        moved aside to `<step>.replaced-<UTC time>` and deleted once the new one is on disk (this
        call then waits for it), so a save that fails or is killed leaves it there. Otherwise,
        with async saves the call returns once the arrays are copied off the devices;
        `wait_until_finished` blocks until they are on disk. `config` and `extra_meta` (stored as meta["extra"],
        e.g. a fine-tuning run's best metric) must be JSON-serializable.
        Raises CheckpointSaveError when this step's writing fails. A previous save's failure is a
        warning, and this call then waits for its own step to be on disk.
        """
        if not (force or self._manager.should_save(step)):
            return False
        # This step's own save in flight (a stop at a checkpoint step): listed, whether or not it
        # lands; once it has, a failed one is no saved step.
        earlier = self.wait_reporting(step) if step == self._saving else None
        if step in self._manager.all_steps() and not replace:
            return False
        meta = {"format": FORMAT, "step": int(step), "data_position": int(data_position), "config": config,
                "extra": {} if extra_meta is None else extra_meta}
        if not isinstance(meta["extra"], dict):
            raise ValueError(f"Checkpointer.save: extra_meta must be a dict, got {type(extra_meta).__name__}")
        try:
            json.dumps(meta)
        except TypeError as e:
            raise ValueError(f"Checkpointer.save: config and extra_meta must be JSON-serializable ({e})") from None
        earlier = earlier or self.wait_reporting(step)
        replaced = self._move_aside([step], "replaced")[0] if step in self._manager.all_steps() else None
        self._saving = step
        try:
            saved = self._manager.save(step, args=ocp.args.Composite(
                **{STATE: ocp.args.PyTreeSave(state), META: ocp.args.JsonSave(meta)}), force=True)
        except Exception as e:  # orbax/tensorstore raise many kinds for a failed write
            raise self._save_failed(e) from e
        if replaced is not None or earlier is not None:  # (after a failure: this one known to be on disk)
            self.wait_until_finished()
        if replaced is not None and jax.process_index() == 0:
            replaced.rmtree()
        return saved

    def wait_reporting(self, step: int) -> CheckpointSaveError | None:
        """`wait_until_finished`, a failure a warning (and returned) rather than raised: before
        saving `step`, which may still save (a passing gs:// error of the last save, say)."""
        try:
            self.wait_until_finished()
            return None
        except CheckpointSaveError as e:
            log.warning("%s; saving step %d now", e, step)
            return e

    def wait_until_finished(self) -> None:
        """Blocks until every started save is on disk; CheckpointSaveError if one failed."""
        try:
            self._manager.wait_until_finished()
        except Exception as e:
            raise self._save_failed(e) from e
        self._saving = None

    def _save_failed(self, error: Exception) -> CheckpointSaveError:
        step, self._saving = self._saving, None  # (None: its failure was reported once already)
        what = f"checkpoint step {step}" if step is not None else "a checkpoint"
        return CheckpointSaveError(
            f"saving {what} to {self.directory} failed ({brief(error)}); the steps saved before it are untouched")

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict]:
        """Restores (state, meta) laid out as `abstract_state` says.

        abstract_state: the state's pytree (same structure as saved) of
          jax.ShapeDtypeStruct leaves with NamedShardings, on any mesh.
        step: None restores the newest readable step. A step that still fails after three
          attempts is skipped with a warning; once an older one is restored, the skipped
          ones are moved aside (see the module docstring). An explicit step is restored
          (with the same retries) or raises, and is never moved.
        A tree or shape mismatch with a readable checkpoint raises CheckpointMismatchError
        (a ValueError) at once, without falling back.
        """
        _check_abstract(abstract_state, "abstract_state")
        if step is not None:
            return self._read(abstract_state, step)
        steps = self.agreed_steps()
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        unreadable, error = [], None
        for candidate in steps:
            try:
                restored = self._read(abstract_state, candidate)
            except CheckpointMismatchError:
                raise
            except Exception as e:  # orbax/tensorstore raise many kinds for unreadable files
                restored, error = None, e
                log.warning("checkpoint %s is unreadable (%s); falling back to the previous one",
                            self.directory / str(candidate), brief(e), extra=PROCESS_SPECIFIC)
            if _on_every_process(restored is not None):
                for step, target in zip(unreadable, self._move_aside(unreadable, "unreadable")):
                    if jax.process_index() == 0:  # the one that moved it
                        log.warning("moved unreadable checkpoint %s aside to %s; nothing was deleted (inspect it, "
                                    "then delete it or move it back)", self.directory / str(step), target)
                return restored
            unreadable.append(candidate)
        raise CheckpointUnreadableError(
            f"no readable checkpoint in {self.directory}: steps {steps} are corrupt or truncated (last: "
            f"{brief(error)}); none was moved aside: move them away to start from scratch") from error

    def _read(self, abstract_state: Any, step: int) -> tuple[Any, dict]:
        """Restores one step, trying len(READ_RETRY_SECONDS) + 1 times."""
        return _retried(lambda: self._read_once(abstract_state, step), self.directory / str(step))

    def _read_once(self, abstract_state: Any, step: int) -> tuple[Any, dict]:
        """Restores one step; CheckpointMismatchError = the caller's tree does not fit."""
        saved_tree = self._manager.item_metadata(step)[STATE].tree
        _check_matches(abstract_state, saved_tree, f"checkpoint {self.directory / str(step)}")
        restored = self._manager.restore(step, args=ocp.args.Composite(
            **{STATE: ocp.args.PyTreeRestore(abstract_state, ocp.checkpoint_utils.construct_restore_args(abstract_state)),
               META: ocp.args.JsonRestore()}))
        meta = restored[META]
        if meta.get("format") != FORMAT or meta.get("step") != step:
            raise OSError(f"checkpoint {self.directory / str(step)} has unexpected meta {meta}")
        return restored[STATE], meta

    def _move_aside(self, steps: list[int], why: str) -> list[epath.Path]:
        """Renames saved `steps` to `<step>.<why>-<UTC time>`, a name orbax never lists as a step
        nor cleans up (process 0; the others wait); returns the new paths."""
        if not steps:
            return []
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        targets = [self.directory / f"{step}.{why}-{stamp}" for step in steps]
        if jax.process_index() == 0:
            for step, target in zip(steps, targets):
                _move(self.directory / str(step), target)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"bertjax.checkpointing: steps {steps} of {self.directory} moved aside")
        self._manager.reload()
        return targets

    def close(self) -> None:
        """Waits for pending saves (CheckpointSaveError if one failed) and releases orbax's threads."""
        try:
            self._manager.close()
        except Exception as e:
            raise self._save_failed(e) from e


def weights_digest(params) -> str:
    """sha256 of `params`' values (numpy or jax.Arrays of any sharding; every process calls
    this): weights named by what they are rather than by the path or copy they came from (a
    frozen encoder's feature cache, a features folder)."""
    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        values = np.ascontiguousarray(leaf if getattr(leaf, "is_fully_addressable", True)
                                      else multihost_utils.process_allgather(leaf, tiled=True))
        digest.update(f"{jax.tree_util.keystr(path)}{values.shape}{values.dtype}".encode())
        digest.update(values.tobytes())
    return digest.hexdigest()


def agreed_steps(steps: list[int]) -> list[int]:
    """Process 0's `steps` on every process (a broadcast, so every process must call it)."""
    if jax.process_count() == 1:
        return steps
    count = int(multihost_utils.broadcast_one_to_all(np.int32(len(steps))))
    mine = np.full(count, -1, np.int64)
    mine[:min(count, len(steps))] = steps[:count]
    return [int(step) for step in multihost_utils.broadcast_one_to_all(mine)]


def _on_every_process(ok: bool) -> bool:
    """True when `ok` holds on every process (an all-gather, so every process must call it)."""
    if jax.process_count() == 1:
        return ok
    return bool(np.min(multihost_utils.process_allgather(np.int32(ok))))


def move_aside(directory: str, why: str) -> str:
    """Moves a checkpoint directory (a workdir's best/, say) to `<directory>.<why>-<UTC time>`,
    as unreadable steps are moved (nothing deleted); returns the new name."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = f"{str(directory).rstrip('/')}.{why}-{stamp}"
    _move(epath.Path(directory), epath.Path(target))
    return target


def _move(source: epath.Path, target: epath.Path) -> None:
    """A local rename (atomic); on gs:// a copy with orbax's commit file last, then a delete
    with the source's commit files first (a step's own, or each step's of a moved checkpoint
    directory), so an interrupted move leaves the step complete in at least one place and a
    half-deleted source never reads as a step (which the recovery of a replaced step would
    keep over its intact copy)."""
    if not _is_remote(source):
        source.rename(target)
        return
    _copy_tree(source, target)
    for folder in (source, *(child for child in source.iterdir() if child.is_dir())):
        if (folder / COMMIT_FILE).exists():
            (folder / COMMIT_FILE).unlink()
    source.rmtree()


def _copy_tree(source: epath.Path, target: epath.Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for child in sorted(source.iterdir(), key=lambda child: child.name == COMMIT_FILE):
        if child.is_dir():
            _copy_tree(child, target / child.name)
        else:
            child.copy(target / child.name, overwrite=True)


# ----------------------------------------------------------------------------------------
# Reading the parameters alone (fine-tuning init, bertjax.load_pretrained)
# ----------------------------------------------------------------------------------------

def _is_step_dir(path: epath.Path) -> bool:
    """A finalized (not tmp / uncommitted) folder with both items."""
    return ((path / STATE).is_dir() and (path / META).is_dir()
            and ocp.path.step.is_path_finalized(path))


def _step_dirs(path: str) -> list[epath.Path]:
    """[a step folder itself], or the finalized step folders of a checkpoint directory,
    newest first; FileNotFoundError when there is none."""
    path = _path(path)
    if _is_step_dir(path):
        return [path]
    numbered = sorted(((int(child.name), child) for child in path.iterdir() if child.name.isdigit()),
                      reverse=True) if path.is_dir() else []
    steps = [child for _, child in numbered if _is_step_dir(child)]
    if not steps:
        raise FileNotFoundError(f"{path} is neither a bertjax checkpoint step folder (with {STATE}/ and "
                                f"{META}/) nor a checkpoint directory holding one")
    return steps


def _retried(read: Callable[[], T], step_dir: Any) -> T:
    """read() of the step folder `step_dir`, tried len(READ_RETRY_SECONDS) + 1 times: a passing
    gs:// or NFS error is no corruption. What reading again cannot change raises at once: a
    tree mismatch, another format, a missing file, bytes that are no JSON or UTF-8."""
    for wait in (*READ_RETRY_SECONDS, None):
        try:
            return read()
        except (CheckpointMismatchError, _NotThisFormat, FileNotFoundError, json.JSONDecodeError,
                UnicodeDecodeError):
            raise
        except Exception as e:  # orbax/tensorstore raise many kinds for unreadable files
            if wait is None:
                raise
            log.warning("reading checkpoint %s failed (%s); trying again in %.0f s", step_dir, brief(e), wait,
                        extra=PROCESS_SPECIFIC)
            time.sleep(wait)


def _newest_readable(path: str, read: Callable[[epath.Path], T]) -> T:
    """read(step folder) for a step folder, or for a checkpoint directory its newest step
    that reads: as `Checkpointer.restore`, each step is tried len(READ_RETRY_SECONDS) + 1
    times, and a step that still fails is skipped with a warning naming it (nothing is moved).
    A tree mismatch raises at once; no readable step raises CheckpointUnreadableError."""
    steps = _step_dirs(path)
    if steps == [_path(path)]:  # an explicit step: no fallback
        return _retried(functools.partial(read, steps[0]), steps[0])
    error = None
    for step_dir in steps:
        try:
            return _retried(functools.partial(read, step_dir), step_dir)
        except CheckpointMismatchError:
            raise
        except Exception as e:  # orbax/tensorstore raise many kinds for unreadable files
            error = e
            log.warning("checkpoint %s is unreadable (%s); falling back to the previous one", step_dir, brief(e),
                        extra=PROCESS_SPECIFIC)
    raise CheckpointUnreadableError(
        f"no readable checkpoint in {path}: steps {[int(d.name) for d in steps]} are corrupt or truncated (last: "
        f"{brief(error)})") from error


def check_fits(path: str, abstract_state: Any) -> None:
    """CheckpointMismatchError when the newest readable step of `path` (a step folder or a
    checkpoint directory) holds another tree or other shapes than `abstract_state` (leaves with
    a shape); reads the tree's metadata, no arrays."""
    def read(step_dir: epath.Path) -> None:
        handler = ocp.PyTreeCheckpointHandler()
        try:
            _check_matches(abstract_state, handler.metadata(step_dir / STATE).tree, f"checkpoint {step_dir}")
        finally:
            handler.close()

    _newest_readable(path, read)


def latest_step(directory: str) -> int | None:
    """The newest finalized step in a checkpoint directory (None: none, or no such directory),
    from the folder names alone."""
    try:
        return int(_step_dirs(directory)[0].name)
    except FileNotFoundError:
        return None


def earlier_steps(step_folder: str) -> list[str]:
    """The finalized step folders beside `step_folder` with a smaller step, newest first ([]
    when its parent is no checkpoint directory)."""
    folder = _path(step_folder)
    try:
        siblings = _step_dirs(str(folder.parent))
    except FileNotFoundError:
        return []
    return [str(step_dir) for step_dir in siblings if int(step_dir.name) < int(folder.name)]


def checkpoint_folder_holding(path: str) -> str | None:
    """`path` or the folder above it that is a bertjax checkpoint directory (a run's
    checkpoints/ or best/ with a step, one of its steps) or a run's checkpoints/ or best/ before
    its first save (beside the run's lock file), else None."""
    from bertjax.runtime import fileio, workdir_lock

    path = path.rstrip("/") if fileio.is_remote(path) else os.path.abspath(path)
    while True:
        above = fileio.parent(path)
        if fileio.isdir(path) and (is_bertjax_checkpoint(path) or (
                os.path.basename(path) in ("checkpoints", "best")
                and fileio.exists(fileio.join(above, workdir_lock.LOCK_NAME)))):
            return path
        if above == path or (fileio.is_remote(path) and not fileio.is_remote(above)):  # the root, a bucket's
            return None
        path = above


def refuse_checkpoint_folder(output: str, named: str, written: str) -> None:
    """ValueError when `output` (the setting `named`) is in a run's checkpoint folder
    (`checkpoint_folder_holding`): a run saving there deletes numbered folders it did not write
    (`written`, what the command writes) or reads them as checkpoints."""
    folder = checkpoint_folder_holding(output)
    if folder:
        raise ValueError(f"{named}={output} is in {folder}, a run's checkpoint folder: a run saving there deletes "
                         f"numbered folders it did not write ({written}) or reads them as checkpoints; give a folder "
                         "outside checkpoints/ and best/")


def is_bertjax_checkpoint(path: str) -> bool:
    """True for a bertjax checkpoint step folder or a directory of them."""
    try:
        _step_dirs(path)
    except FileNotFoundError:
        return False
    return True


def holds_replaced_step(directory: str) -> bool:
    """Whether a checkpoint directory holds a step that a killed replacing save left aside
    (`<step>.replaced-<UTC time>`), which `Checkpointer` moves back into place."""
    path = epath.Path(directory)
    return path.is_dir() and any(_REPLACED.fullmatch(child.name) for child in path.iterdir())


def read_meta(path: str) -> dict:
    """The meta JSON ({"format", "step", "data_position", "config", "extra"}) of a step
    folder, or of the newest readable step of a checkpoint directory; reads no arrays."""
    return _newest_readable(path, _read_meta)


def newest_step_folder(path: str) -> str:
    """The step folder `read_meta` and `load_params` read now: `path` itself, or the newest
    step of a checkpoint directory whose meta reads. A run still saving adds newer ones: a
    reader that must read, and name, one set of weights pins it."""
    return str(_newest_readable(path, lambda step_dir: (_read_meta(step_dir), step_dir))[1])


def _read_meta(step_dir: epath.Path) -> dict:
    meta = ocp.JsonCheckpointHandler().restore(step_dir / META, args=ocp.args.JsonRestore())
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _NotThisFormat(f"{step_dir / META}: not a bertjax checkpoint's meta (expected a JSON object with "
                             f"format {FORMAT!r})")
    return meta


def load_params(path: str, *, abstract_params: Any = None) -> tuple[dict, Any]:
    """Reads (meta, params) from a bertjax checkpoint without loading the optimizer state.

    path: a step folder or a checkpoint directory (its newest readable step is used, as
      `Checkpointer.restore` would: a damaged newer step is skipped with a warning).
    abstract_params: None -> params as a nested dict of numpy arrays; or a pytree of
      jax.ShapeDtypeStruct with shardings -> jax.Arrays laid out on that mesh.
    Returns the meta (as `read_meta`) and the params tree.
    """
    return _newest_readable(path, lambda step_dir: _load_params(step_dir, abstract_params))


def _load_params(step_dir: epath.Path, abstract_params: Any) -> tuple[dict, Any]:
    meta = _read_meta(step_dir)
    handler = ocp.PyTreeCheckpointHandler()
    saved_tree = handler.metadata(step_dir / STATE).tree
    if "params" not in saved_tree:
        raise _NotThisFormat(f"{step_dir / STATE} holds no 'params' (keys: {sorted(saved_tree)})")
    if abstract_params is None:
        item = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), saved_tree["params"])
        restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
    else:
        _check_abstract(abstract_params, "abstract_params")
        _check_matches(abstract_params, saved_tree["params"], f"params of {step_dir}")
        item = abstract_params
        restore_args = ocp.checkpoint_utils.construct_restore_args(abstract_params)
    restored = handler.restore(step_dir / STATE, args=ocp.args.PyTreeRestore(
        item={"params": item}, restore_args={"params": restore_args}, partial_restore=True))
    handler.close()
    return meta, restored["params"]

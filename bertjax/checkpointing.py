"""Checkpoints with orbax: the only module in bertjax that imports it.

Layout of a run's checkpoint directory (orbax `CheckpointManager`, one folder per step)::

    <directory>/<step>/state/   the train state: a pytree of arrays (params, opt_state, step),
                                stored sharded (OCDBT), restorable onto any mesh
    <directory>/<step>/meta/    JSON: {"format": "bertjax", "step", "data_position", "config"}

Atomicity: orbax writes a step into `<step>.orbax-checkpoint-tmp` and renames it to
`<step>` only once every file is written (on GCS, where renames are not atomic, it writes
`commit_success.txt` last instead). A save killed part-way (kill -9, preemption) therefore
leaves a tmp folder that is never listed as a step and is deleted by the next
`Checkpointer`. A finalized step that still cannot be read (a lost or truncated file) is
reported by `restore`, which falls back to the previous step; the bad step is deleted by
the next `save`, so the run can write that step number again.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from orbax.checkpoint import checkpoint_managers

STATE, META = "state", "meta"
FORMAT = "bertjax"

log = logging.getLogger(__name__)


def _path(directory: str) -> epath.Path:
    """Absolute local paths (orbax requires them); URLs such as gs://... as given."""
    return epath.Path(directory if "://" in directory else os.path.abspath(directory))


def _flat_shapes(tree: Any) -> dict[tuple[str, ...], tuple[int, ...]]:
    """{key path: shape} of a pytree. Keys are plain names, so a namedtuple and the dict
    orbax stores it as (or a tuple and a list) give the same paths."""

    def name(entry) -> str:
        return str(getattr(entry, "key", getattr(entry, "name", getattr(entry, "idx", entry))))

    return {tuple(name(entry) for entry in path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


class CheckpointMismatchError(ValueError):
    """The expected tree (leaves, shapes) does not fit a readable checkpoint."""


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
        handlers = {STATE: ocp.StandardCheckpointHandler(), META: ocp.JsonCheckpointHandler()}
        self._manager = ocp.CheckpointManager(self.directory, item_handlers=handlers, options=options)
        self._bad_steps: list[int] = []  # unreadable steps found by restore, deleted by save

    def latest_step(self) -> int | None:
        """The newest finalized step (readable or not), or None."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Finalized steps, oldest first (includes a save still in progress)."""
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, *, data_position: int, config: dict, force: bool = False) -> bool:
        """Starts saving `state` (a pytree of jax.Arrays) at `step`; returns whether it did.

        Saves only when `step` is a multiple of save_interval_steps, or when `force`
        (preemption, end of training) and the step is not saved yet. With async saves the
        call returns once the arrays are copied off the devices; `wait_until_finished`
        blocks until they are on disk. `config` must be JSON-serializable.
        """
        if self._bad_steps:
            self._manager.wait_until_finished()
            for bad in self._bad_steps:
                log.warning("deleting unreadable checkpoint %s", self.directory / str(bad))
                self._manager.delete(bad)
            self._bad_steps = []
        if step in self._manager.all_steps() or not (force or self._manager.should_save(step)):
            return False
        meta = {"format": FORMAT, "step": int(step), "data_position": int(data_position), "config": config}
        try:
            json.dumps(meta)
        except TypeError as e:
            raise ValueError(f"Checkpointer.save: config must be JSON-serializable ({e})") from None
        return self._manager.save(step, args=ocp.args.Composite(
            **{STATE: ocp.args.StandardSave(state), META: ocp.args.JsonSave(meta)}), force=True)

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict]:
        """Restores (state, meta) laid out as `abstract_state` says.

        abstract_state: the state's pytree (same structure as saved) of
          jax.ShapeDtypeStruct leaves with NamedShardings, on any mesh.
        step: None restores the newest readable step: an unreadable newer one is logged
          as a warning and skipped. An explicit step is restored or raises.
        A tree or shape mismatch with a readable checkpoint raises CheckpointMismatchError
        (a ValueError) at once, without falling back.
        """
        _check_abstract(abstract_state, "abstract_state")
        if step is not None:
            return self._restore_step(abstract_state, step)
        steps = sorted(self._manager.all_steps(), reverse=True)
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        error = None
        for candidate in steps:
            try:
                return self._restore_step(abstract_state, candidate)
            except CheckpointMismatchError:
                raise
            except Exception as e:  # orbax/tensorstore raise many kinds for unreadable files
                error = e
                self._bad_steps.append(candidate)
                log.warning("checkpoint %s is unreadable (%s: %s); falling back to the previous one",
                            self.directory / str(candidate), type(e).__name__, e)
        self._bad_steps = []  # nothing restored: leave every step for a person to inspect
        raise RuntimeError(f"no restorable checkpoint in {self.directory} (tried steps {steps})") from error

    def _restore_step(self, abstract_state: Any, step: int) -> tuple[Any, dict]:
        """Restores one step; CheckpointMismatchError = the caller's tree does not fit."""
        saved_tree = self._manager.item_metadata(step)[STATE].tree
        _check_matches(abstract_state, saved_tree, f"checkpoint {self.directory / str(step)}")
        restored = self._manager.restore(step, args=ocp.args.Composite(
            **{STATE: ocp.args.StandardRestore(abstract_state), META: ocp.args.JsonRestore()}))
        meta = restored[META]
        if meta.get("format") != FORMAT or meta.get("step") != step:
            raise OSError(f"checkpoint {self.directory / str(step)} has unexpected meta {meta}")
        return restored[STATE], meta

    def wait_until_finished(self) -> None:
        """Blocks until every started save is on disk (and re-raises its error, if any)."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases orbax's threads."""
        self._manager.close()


# ----------------------------------------------------------------------------------------
# Reading the parameters alone (fine-tuning init, bertjax.load_pretrained)
# ----------------------------------------------------------------------------------------

def _is_step_dir(path: epath.Path) -> bool:
    """A finalized (not tmp / uncommitted) folder with both items."""
    return ((path / STATE).is_dir() and (path / META).is_dir()
            and ocp.path.step.is_path_finalized(path))


def _step_dir(path: str) -> epath.Path:
    """A step folder itself, or the newest finalized step of a checkpoint directory."""
    path = _path(path)
    if _is_step_dir(path):
        return path
    if path.is_dir():
        latest = ocp.path.step.latest_step_metadata(path, ocp.path.step.standard_name_format())
        if latest is not None and _is_step_dir(latest.path):
            return latest.path
    raise FileNotFoundError(f"{path} is neither a bertjax checkpoint step folder (with {STATE}/ and "
                            f"{META}/) nor a checkpoint directory holding one")


def is_bertjax_checkpoint(path: str) -> bool:
    """True for a bertjax checkpoint step folder or a directory of them."""
    try:
        _step_dir(path)
    except FileNotFoundError:
        return False
    return True


def load_params(path: str, *, abstract_params: Any = None) -> tuple[dict, Any]:
    """Reads (meta, params) from a bertjax checkpoint without loading the optimizer state.

    path: a step folder or a checkpoint directory (its newest step is used).
    abstract_params: None -> params as a nested dict of numpy arrays; or a pytree of
      jax.ShapeDtypeStruct with shardings -> jax.Arrays laid out on that mesh.
    Returns meta = {"format", "step", "data_position", "config"} and the params tree.
    """
    step_dir = _step_dir(path)
    meta = ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(step_dir / META,
                                                                 args=ocp.args.JsonRestore())
    handler = ocp.PyTreeCheckpointHandler()
    saved_tree = handler.metadata(step_dir / STATE).tree
    if "params" not in saved_tree:
        raise ValueError(f"{step_dir / STATE} holds no 'params' (keys: {sorted(saved_tree)})")
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

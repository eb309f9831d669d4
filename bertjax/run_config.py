"""What a workdir's checkpoints say about the run that wrote them, checked when a run starts.

Every checkpoint's meta holds the config of the run that saved it (`Loop`'s saved_config:
the launcher's config with the resolved model, and for fine-tuning the resolved schedule).
Before a run writes anything into its workdir, `check_same_kind` refuses a workdir whose
checkpoints come from another kind of run (pre-training vs fine-tuning, or fine-tuning
another task), which would otherwise fail later on a tree mismatch. On resume,
`changed_settings` lists what differs from the checkpoint's config, so a resume that is
no longer an exact continuation says so.
"""

from __future__ import annotations

import json
import logging
import shlex
from typing import Any

from flax.traverse_util import flatten_dict

from bertjax import checkpointing, tokenization
from bertjax.data import pretraining_config
from bertjax.runtime import fileio

# Settings that change where or how often things happen, not what the run computes.
OPERATIONAL_SETTINGS = ("checkpoint.", "mesh.", "init_checkpoint", "train.log_every", "train.eval_every",
                        "train.eval_at_start", "train.eval_batches", "train.eval_batch_size",
                        "train.max_consecutive_bad_steps", "train.plateau_evals",
                        "train.sweep", "train.feature_cache_dir", "data.prepared_dir", "data.tfds_data_dir",
                        "data.vocab_path", "data.test_file")
_SHOWN_CHANGES = 8
# Where a fine-tuning sweep's workdir records its settings (bertjax/sweep.py).
SWEEP_SETTINGS_FILE = "sweep_settings.json"
# Fine-tuning settings that lay the training examples into rows, and evaluation's alike.
_ROWS_OF_TRAINING = ("data.pack_examples", "data.group_by_length")
# The data settings that make a pre-training run's rows from its text: its corpus, held-out
# share, lengths, pairing, masking and order. (Not where the text is, its tokenizer, which
# check_same_tokenizer compares, nor how hosts split it: a finished run relaunches on those.)
_PRETRAINING_ROWS = tuple(f"data.{key}" for key in (
    "tfds_name", "tfds_split", "tfds_text_feature", "text_key", "eval_fraction", "max_seq_length", "short_seq_prob",
    "next_sentence_prediction", "full_rows", "full_rows_attention", "pack_pairs", "masked_lm_prob",
    "mask_token_prob", "random_token_prob", "max_predictions_per_seq", "whole_word_mask", "shuffle_buffer",
    "instance_shuffle_buffer"))
# The settings that cut a fine-tuning task's examples into rows.
_ROW_CUTTING = ("data.max_seq_length", "data.doc_stride", "data.max_query_length")
# Model fields a config may leave to the machine (bertjax.models.config.resolve): a finished run
# relaunched on another kind of host (to predict a test file) gets other values, and is the same run.
_HOST_DEFAULTS = ("model.dtype", "model.matmul_precision")


def check_seed(value: Any, key: str, minimum: int = 0) -> None:
    """ValueError naming `key` unless `value` is an int in [minimum, 2**63): jax's keys
    (config.seed: any 64-bit int) and TensorFlow's take 64-bit seeds, numpy's (config.data.seed)
    none below 0. Past that, a traceback from jax.random.key, or TensorFlow's error after the
    data's preparation."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value < 2**63:
        shown = "-2**63" if minimum == -2**63 else minimum
        raise ValueError(f"{key} must be an int in [{shown}, 2**63), got {value!r}")


def run_kind(config: dict[str, Any]) -> str:
    """'pre-training' or "fine-tuning task 'x'", from a run's (saved) config."""
    return f"fine-tuning task {config['task']!r}" if config.get("task") else "pre-training"


_WARNED_UNFINISHED: set[tuple[str, int]] = set()  # (init_checkpoint, step): a sweep's runs warn once


def warn_if_unfinished_start(init_checkpoint: str, workdir: str) -> None:
    """A warning when a new run starts from a bertjax pre-training run that stopped before its
    num_steps (preempted, never relaunched): phase 2 or fine-tuning would start from weights a
    tenth trained without a word. A step folder named on purpose is taken as given. Once per
    process for each start: a sweep's runs share theirs."""
    from bertjax.models.convert import checkpoint_layout

    if not init_checkpoint or own_checkpoints(workdir) or init_checkpoint.rstrip("/").rsplit("/", 1)[-1].isdigit():
        return
    try:
        layout, directory = checkpoint_layout(init_checkpoint)
        meta = checkpointing.read_meta(directory) if layout == "bertjax" else {}
    except (OSError, ValueError):  # (named where its weights are read)
        return
    config = meta.get("config") or {}
    total = (config.get("train") or {}).get("num_steps")
    if (run_kind(config) == "pre-training" and isinstance(total, int) and meta["step"] < total
            and (init_checkpoint, meta["step"]) not in _WARNED_UNFINISHED):
        _WARNED_UNFINISHED.add((init_checkpoint, meta["step"]))
        logging.getLogger(__name__).warning(
            "config.init_checkpoint=%s is at step %d of its run's %d: that run has not finished (relaunch it with its "
            "own workdir to finish it); this run starts from its weights as they are", init_checkpoint, meta["step"],
            total)


def own_checkpoints(workdir: str) -> str | None:
    """`workdir`/checkpoints when the run there has saved a checkpoint (it resumes), else None."""
    directory = fileio.join(workdir, "checkpoints")
    return directory if checkpointing.is_bertjax_checkpoint(directory) else None


def check_sweep_or_run(workdir: str, sweep: bool) -> None:
    """ValueError when `workdir` holds a fine-tuning sweep (SWEEP_SETTINGS_FILE) and this is
    one run, or one run (its checkpoints/ or best/) and this is a sweep: the two would mix in
    one folder, and predict, given it, would take the run's best/ for the sweep's result."""
    if not sweep and fileio.exists(fileio.join(workdir, SWEEP_SETTINGS_FILE)):
        raise ValueError(f"workdir {workdir} holds a fine-tuning sweep ({SWEEP_SETTINGS_FILE}): add ',sweep' to "
                         "--config (configs/finetune.py:<task>,sweep) to go on with it, or give this run a new workdir")
    if not sweep:
        return
    held = ("checkpoints" if own_checkpoints(workdir) else
            "best" if checkpointing.is_bertjax_checkpoint(fileio.join(workdir, "best")) else None)
    if held:
        raise ValueError(f"workdir {workdir} holds a training run ({held}/): a sweep needs a workdir of its "
                         "own (each of its runs goes in WORKDIR/sweep/<run>); give it a new one")


def check_same_kind(workdir: str, config: dict[str, Any]) -> None:
    """ValueError when `workdir`'s checkpoints were written by another kind of run than
    `config`'s; nothing is read but the newest checkpoint's meta (an unreadable one is left
    for the restore to report)."""
    directory = own_checkpoints(workdir)
    if directory is None:
        return
    try:
        saved = checkpointing.read_meta(directory).get("config") or {}
    except (OSError, ValueError):
        return
    if run_kind(saved) != run_kind(config):
        given = config.get("init_checkpoint") or ""
        starts_here = bool(given) and (fileio.absolute(given).rstrip("/") + "/").startswith(
            fileio.absolute(workdir).rstrip("/") + "/")
        advice = ("config.init_checkpoint names that run: a run of another kind needs its own workdir" if starts_here
                  else f"to start from those weights, set config.init_checkpoint={shlex.quote(directory)}")
        raise ValueError(f"workdir {workdir} holds the checkpoints of a {run_kind(saved)} run, and this is a "
                         f"{run_kind(config)} run: give it a new workdir ({advice})")


def changed_settings(saved: dict[str, Any], current: dict[str, Any],
                     left_out: tuple[str, ...] = OPERATIONAL_SETTINGS, saved_keys_only: bool = False) -> list[str]:
    """'key saved -> current' for each setting (dotted key) that differs between two configs,
    the keys starting with `left_out` (operational settings) left out; saved_keys_only: keys
    `saved` lacks (added by a newer bertjax) left out too."""
    old = flatten_dict(saved, sep=".")
    new = flatten_dict(json.loads(json.dumps(current)), sep=".")  # as the checkpoint stored it
    changes = []
    for key in sorted(set(old) if saved_keys_only else set(old) | set(new)):
        if (left_out and key.startswith(left_out)) or old.get(key, "unset") == new.get(key, "unset"):
            continue
        # (also under a prefix: the demo's)
        recorded_later = ("data.process_count", "init_weights", "recipe", "pooler_trained", "train_data_digest",
                          "positions_trained")
        if key not in old and any(key == name or key.endswith("." + name) for name in recorded_later):
            continue  # from before they were recorded
        what = ""
        if key.endswith("train_data_digest"):  # (a digest alone says nothing of the file it digests: a walkthrough)
            file_key = key.replace("train_data_digest", "data.train_file")  # (unset: a built-in task's own data)
            own_file = old.get(file_key) or new.get(file_key)
            # Rows cut at another length digest otherwise from the same file (a walkthrough read
            # the note as the file having changed).
            recut = [cut for cut in _ROW_CUTTING if old.get(key.replace("train_data_digest", cut))
                     != new.get(key.replace("train_data_digest", cut))]
            what = (f" (the rows of {'config.data.train_file' if own_file else 'the training data'}"
                    + (f", cut anew by the changed {' and '.join(recut)})" if recut else ")"))
        changes.append(f"{key} {old.get(key, 'unset')!r} -> {new.get(key, 'unset')!r}{what}")
    return changes


def check_finished_unchanged(workdir: str, config: dict[str, Any], num_steps: int) -> None:
    """ValueError when `workdir`'s run has trained all its `num_steps` steps and `config` (this
    run's saved_config) changes how its weights train (the model, config.train, the seeds, a
    pre-training run's data settings that make its rows, a fine-tuning run's training rows,
    `train_data_digest`, their packing and grouping, and the weights it starts from,
    `init_weights`, where those it started from are still there): relaunched, it would train
    nothing and report the old result under the new settings (the same settings, files moved,
    another evaluation or test file are a finished run relaunched: for its last evaluation, or
    a test file's predictions)."""
    directory = own_checkpoints(workdir)
    if directory is None:
        return
    try:
        meta = checkpointing.read_meta(directory)
    except (OSError, ValueError):  # left for the restore to report
        return
    changes = (changed_settings(meta.get("config") or {}, config, left_out=(*OPERATIONAL_SETTINGS, *_HOST_DEFAULTS))
               if meta["step"] >= num_steps else [])
    # What trains the weights: the model, the training settings, the seeds, the training rows,
    # the starting weights (a folder since moved is the same). Another evaluation file, or none,
    # and label names the task checks itself (check_same_task) are a relaunch's.
    started = (meta.get("config") or {}).get("init_weights")
    # Rows cut otherwise (a finished run relaunched to evaluate at another length) digest
    # otherwise from the same file: the digest says nothing then.
    recut = any(change.split(" ", 1)[0] in _ROW_CUTTING for change in changes)
    pretraining = run_kind(config) == "pre-training"
    # A setting of another source than the run's, which neither run read (one given before such
    # settings were refused, and left out now), changes nothing it computes.
    unread = {f"data.{key}" for run in (meta.get("config") or {}, config)
              for key in pretraining_config.settings_unread(run.get("data") or {})} if pretraining else set()

    def trains(key: str) -> bool:
        # (pre-training's rows: a walkthrough's relaunch changed four, warned and said 'done')
        return (key.startswith(("model.", "train.")) or key in ("seed", "data.seed", *_ROWS_OF_TRAINING)
                or (pretraining and key in _PRETRAINING_ROWS and key not in unread)
                or (key == "train_data_digest" and not recut)
                or (key == "init_weights" and bool(started) and fileio.exists(started)))

    changes = [change for change in changes if trains(change.split(" ", 1)[0])]
    if changes:
        as_it_was = (f"; to relaunch it as it is (a test file to predict), "
                     f"config.init_checkpoint={shlex.quote(started)}"
                     if any(change.startswith("init_weights ") for change in changes) else "")
        trained = (f"all its {num_steps} steps" if meta["step"] == num_steps else
                   f"{meta['step']} steps, past this run's {num_steps}")
        raise ValueError(f"{workdir} has trained {trained}, and this run changes what it computes "
                         f"({first_changes(changes)}): nothing would train, and its old result would stand as this "
                         f"run's; give a new workdir{as_it_was}")


def first_changes(changes: list[str]) -> str:
    """The first few changes and how many more, for one line."""
    more = f"; and {len(changes) - _SHOWN_CHANGES} more" if len(changes) > _SHOWN_CHANGES else ""
    return "; ".join(changes[:_SHOWN_CHANGES]) + more


def without_moved_training_file(changes: list[str], saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`changes` less config.data.train_file's where the training rows digest as they did
    (`train_data_digest`): the same file moved or copied is the same continuation."""
    digest = saved.get("train_data_digest")
    same_rows = digest is not None and digest == current.get("train_data_digest")
    return [change for change in changes if not (same_rows and change.split(" ", 1)[0] == "data.train_file")]


def describe_changes(changes: list[str]) -> str:
    """One line for the console: the first few changes and how many more."""
    return (f"resumed with {len(changes)} setting(s) changed since the checkpoint, so this is not an exact "
            f"continuation: {first_changes(changes)}")


# What a fine-tuned head's outputs mean (a task's info, bertjax.tasks): another value reads them otherwise.
_HEAD_MEANING = ("family", "label_names", "pairs", "squad_version", "multi_label")


def check_same_task(workdir: str, task_info: dict[str, Any]) -> None:
    """ValueError when a fine-tuning run resumes (`workdir` has checkpoints) with a task that
    reads its trained head otherwise: its labels in another order or renamed, pairs for single
    texts, another SQuAD version. Its predictions, scores and best/ would name each output
    otherwise, silently (other changed settings are only warned of)."""
    directory = own_checkpoints(workdir)
    if directory is None:
        return
    try:
        saved = (checkpointing.read_meta(directory).get("config") or {}).get("task_info")
    except (OSError, ValueError):  # left for the restore to report
        return
    current = json.loads(json.dumps(task_info))  # as the checkpoint stored it
    changed = next((key for key in _HEAD_MEANING if isinstance(saved, dict) and key in saved
                    and saved[key] != current.get(key)), None)
    if changed is None:
        return
    was = saved[changed]
    reorder = changed == "label_names" and was and sorted(was) == sorted(current.get(changed) or [])
    fix = f"config.data.label_names={','.join(was)}" if reorder else "the data and settings it trained with"
    raise ValueError(f"workdir {workdir} trained its head with {changed} {was!r}; this run's {current.get(changed)!r} "
                     f"would read its outputs otherwise (its predictions and scores under other names): resume with "
                     f"{fix}, or give a new workdir")


def check_same_tokenizer(workdir: str, tokenizer: tokenization.Tokenizer) -> None:
    """ValueError when a run resumes (`workdir` has checkpoints) with another vocabulary or
    casing than the one it trained with and saved (WORKDIR/tokenizer): its weights would read
    other ids, silently (pre-training and fine-tuning alike)."""
    saved = fileio.join(workdir, "tokenizer")
    if not (own_checkpoints(workdir) and fileio.exists(fileio.join(saved, tokenization.SAVED_TOKENIZER))):
        return
    spec = tokenization.saved_tokenizer_spec(saved)
    if spec["vocab_hash"] != tokenizer.vocab_hash:
        raise ValueError(f"{workdir} trained with the tokenizer saved in {saved} ({spec['kind']}, do_lower_case="
                         f"{spec['do_lower_case']}); this run's ({tokenizer.path}, do_lower_case="
                         f"{tokenizer.do_lower_case}) gives other ids: resume with the run's own (config.data."
                         "vocab_path, do_lower_case) or give a new workdir")

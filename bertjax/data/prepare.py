"""Prepare: a corpus source -> tokenized TFRecord shards + metadata.json (see shards.py).

`ensure_prepared(data_config, output_dir)` is what the pipeline calls: it prepares the
data unless `output_dir` already holds it for the same settings (source, units, tokenizer
and vocabulary hash, eval fraction), and returns the metadata.

  * Parallel: the source's units (sources.list_units) are spread over worker processes;
    unit i writes `train-i-of-N.tfrecord` and `eval-i-of-N.tfrecord`. Workers import no
    TensorFlow (fileio.py, shards.RecordWriter) unless they read gs:// or TFDS.
  * Fast: a batch of documents is tokenized in bulk (Tokenizer.encode_flat) and written
    with a few numpy calls (shards.encode_documents); benchmarks/prepare_speed.py.
  * Streaming: a worker holds one batch of documents at a time, so peak memory does not
    grow with the corpus (benchmarks/prepare_speed.py measures it).
  * Atomic and resumable: a shard is written under `.incomplete/` and renamed into place
    when complete, then the unit's done-marker `done/unit-i.json` (with its counts) is
    written; a re-run skips units with a marker. `metadata.json`, which lists the shards
    and is what readers trust, is written last. A killed run leaves no shard that a
    reader accepts.
  * Eval split: a document goes to eval when the hash of its text falls below
    `eval_fraction`; deterministic, independent of worker count and order, and duplicate
    documents never straddle train and eval.

Layout of `output_dir`: metadata.json, settings.json, train-*.tfrecord, eval-*.tfrecord,
done/, .incomplete/, .prepare.lock (a second prepare into the folder waits for the first,
then reads its data; bertjax.runtime.workdir_lock), and a copy of the vocabulary (or
SentencePiece model, tokenizer.json) under its own name, so that the folder moves with it.
"""

from __future__ import annotations

import collections
from concurrent import futures
import hashlib
import itertools
import json
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from typing import Any, Iterator

import numpy as np
from absl import logging

from bertjax import tokenization
from bertjax.data import shards, sources
from bertjax.data.corpora import demo_corpus
from bertjax.runtime import console, fileio, workdir_lock

FORMAT = "bertjax.prepared.v2"  # v2: raw int32 records (shards.py); v1 held tf.train.Examples
BATCH_DOCUMENTS = 256
SPLITS = ("train", "eval")
SMALL_CORPUS_BYTES = 8 << 20  # prepared in-process by default: starting workers costs more than it saves
# More sentences than a real document holds (a long book has ~10k): likely a file without blank
# lines between its documents.
LONG_DOCUMENT_SENTENCES = 50_000
UNKNOWN_SHARE_WARNED = 0.01  # of the corpus's tokens [UNK]: a vocabulary that does not fit the text
# Version of the text source's reading (2: a line of Unicode spaces ends a document, as the
# original's strip() made it): an interrupted prepare is never resumed with another.
TEXT_READER = 2
# Version of the sentence splitter that cuts JSONL, Parquet and TFDS documents (2: ¿ and ¡ open
# a sentence): likewise.
SENTENCE_SPLITTER = 2
_SPLIT_SOURCES = ("jsonl", "parquet", "tfds")
PREPARE_LOCK = ".prepare.lock"  # not the workdir's .lock: config.data.prepared_dir may be the run's workdir


def load_tokenizer_for(data_config: Any, cache_dir: str) -> tokenization.Tokenizer:
    """The config's tokenizer; `vocab_path == ""` means the (uncased) demo vocabulary,
    written under `cache_dir`, except for `source == "prepared"`: the data's own tokenizer."""
    if data_config.source == "prepared":
        return _prepared_tokenizer(data_config)
    if not data_config.vocab_path:
        if data_config.tokenizer != "wordpiece":
            raise ValueError("config.data.vocab_path='' selects the demo WordPiece vocabulary, but "
                             f"config.data.tokenizer={data_config.tokenizer!r}; give a vocab_path")
        return tokenization.Tokenizer.from_vocab_file(demo_corpus.demo_vocab_path(cache_dir), do_lower_case=True)
    try:
        tokenizer = tokenization.load_tokenizer(data_config.tokenizer, data_config.vocab_path,
                                                data_config.do_lower_case)
    except OSError as e:  # (a file that is not there: FileNotFoundError)
        raise ValueError(f"config.data.vocab_path={data_config.vocab_path}: {e}") from None
    tokenization.check_casing_setting(tokenizer, data_config.do_lower_case)
    return tokenizer


def check_vocabulary_given(data_config: Any) -> None:
    """ValueError when a corpus of the user's comes without config.data.vocab_path: "" means
    the demo's 784-token vocabulary, which would turn their text into [UNK]s and size the
    model to it. The demo corpus and a prepared folder (its own tokenizer) need none."""
    if data_config.source not in ("demo", "prepared") and not data_config.vocab_path:
        made = ("the vocab.txt the records were made with (it sizes the model's embeddings)"
                if data_config.source == "original_tfrecord" else
                "your corpus's vocabulary (launch/train_tokenizer.py trains one), or a released model's")
        raise ValueError(f"config.data.source={data_config.source!r} needs config.data.vocab_path: {made}; an empty "
                         "one is the demo corpus's 784-token vocabulary")


def vocab_size_for(data_config: Any, cache_dir: str) -> int:
    """The vocabulary size of `load_tokenizer_for(data_config, cache_dir)`, with nothing
    written (the demo vocabulary is counted): config checks run on it before a run writes."""
    if data_config.source != "prepared" and not data_config.vocab_path and data_config.tokenizer == "wordpiece":
        return len(demo_corpus.demo_vocab_tokens())
    return load_tokenizer_for(data_config, cache_dir).vocab_size


def _prepared_input(data_config: Any) -> dict:
    """`read_metadata` of the folder a "prepared" source reads, its errors naming the setting."""
    if not data_config.input_pattern:
        raise ValueError("config.data.source='prepared' reads the folder config.data.input_pattern names (a "
                         "prepare_data.py --output_dir), which is unset")
    try:
        return read_metadata(data_config.input_pattern)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"config.data.input_pattern={data_config.input_pattern}: {e}") from None


def _prepared_tokenizer(data_config: Any) -> tokenization.Tokenizer:
    """The tokenizer the directory `input_pattern` was prepared with: the one its metadata
    names (or a file of that name inside the directory, e.g. the demo vocabulary of a folder
    that was moved), or `vocab_path` when set, which must then be the same vocabulary."""
    directory = data_config.input_pattern
    saved = _prepared_input(data_config)["tokenizer"]
    inside = fileio.join(directory, os.path.basename(saved["path"]))
    path = data_config.vocab_path or (inside if fileio.exists(inside) else saved["path"])
    if not data_config.vocab_path and not fileio.exists(path):
        raise FileNotFoundError(f"{directory} was prepared with the vocabulary {path}, which is gone: set "
                                f"config.data.vocab_path to a copy of it")
    kind, do_lower_case = ((data_config.tokenizer, data_config.do_lower_case) if data_config.vocab_path
                           else (saved["kind"], saved["do_lower_case"]))
    tokenizer = tokenization.load_tokenizer(kind, path, do_lower_case)
    if tokenizer.vocab_hash != saved["vocab_hash"] and not data_config.vocab_path:
        raise ValueError(f"{directory} was prepared with the vocabulary {path}, which has changed since (its hash "
                         "differs from the one the data recorded): set config.data.vocab_path to a copy of the "
                         "original")
    if tokenizer.vocab_hash != saved["vocab_hash"]:
        raise ValueError(f"config.data.vocab_path={path} (tokenizer {tokenizer.kind}, do_lower_case "
                         f"{tokenizer.do_lower_case}) is not the tokenizer {directory} was prepared with "
                         f"({saved['path']}, {saved['kind']}, do_lower_case {saved['do_lower_case']}); leave "
                         f"config.data.vocab_path empty to use that one")
    return tokenizer


def ensure_prepared(data_config: Any, output_dir: str, num_workers: int | None = None) -> dict:
    """Prepares `data_config`'s source into `output_dir` unless already done; returns metadata.

    With `source == "prepared"`, `input_pattern` is a directory written earlier and its
    metadata is returned as is. The returned dict has `dir`: where the shards are.
    `num_workers=None`: one process per core, or in-process for a small corpus (the demo;
    text, JSONL or Parquet under 8 MB). Worker processes are spawned, so a script calling
    this needs the `if __name__ == "__main__":` guard.
    Raises ValueError when `output_dir` holds data prepared with other settings.
    """
    if data_config.source == "prepared":
        metadata = _prepared_input(data_config)
        settings = metadata["settings"]
        if (settings.get("tokenizer") == "huggingface" and "sentence_prefix" not in settings
                and _prepared_tokenizer(data_config).word_prefix):
            _warn_unprefixed(data_config.input_pattern)
        return metadata
    if not 0.0 <= data_config.eval_fraction < 1.0:
        raise ValueError(f"config.data.eval_fraction must be in [0, 1), got {data_config.eval_fraction}")
    units = sources.list_units(data_config)  # first: a bad source writes nothing
    prepared = fileio.exists(fileio.join(output_dir, "metadata.json"))
    if not prepared:  # only to prepare (a read of each file)
        sources.check_text_files(units, data_config.source)
        if not data_config.vocab_path:  # (the demo vocabulary is written into the folder next)
            _refuse_other_files(output_dir, demo_corpus.demo_vocab_name())
    tokenizer = load_tokenizer_for(data_config, output_dir)
    # Each unit with a sample of its text: a file edited in place to the same size is other data.
    described = [{**unit, "content": content} if content else unit
                 for unit, content in zip(units, sources.content_samples(units))]
    settings = {
        "source": data_config.source, "units": _with_absolute_paths({"units": described})["units"],
        "eval_fraction": float(data_config.eval_fraction),
        "tokenizer": tokenizer.kind, "vocab_hash": tokenizer.vocab_hash, "do_lower_case": tokenizer.do_lower_case,
        **({"text_reader": TEXT_READER} if data_config.source == "text" else {}),
        **({"sentence_splitter": SENTENCE_SPLITTER} if data_config.source in _SPLIT_SOURCES else {}),
        # A byte-level BPE's sentences after a document's first carry their leading space.
        **({"sentence_prefix": tokenizer.word_prefix} if tokenizer.word_prefix else {}),
    }
    if prepared:
        return _prepared_already(output_dir, settings)
    if fileio.is_remote(output_dir):  # not lockable: two prepares at once there are the user's to avoid
        return _prepare(data_config, output_dir, units, tokenizer, settings, num_workers)
    _clear_leftovers_or_refuse(output_dir, tokenizer, clear=False)
    waiting = lambda holder: print(f"{output_dir} is being prepared by {holder}; waiting for it to finish",  # noqa: E731
                                   file=sys.stderr, flush=True)
    with workdir_lock.hold(output_dir, wait=waiting, lock_name=PREPARE_LOCK, named="the prepared data's folder "):
        if fileio.exists(fileio.join(output_dir, "metadata.json")):  # what the one waited for prepared
            return _prepared_already(output_dir, settings)
        return _prepare(data_config, output_dir, units, tokenizer, settings, num_workers)


def _clear_leftovers_or_refuse(output_dir: str, tokenizer: tokenization.Tokenizer, clear: bool = True) -> None:
    """ValueError when `output_dir`, not yet a prepare's (no settings.json), holds anything but
    what a prepare writes: the locks, the tokenizer load_tokenizer_for may have written there,
    an empty done/ (a prepare killed as it began) and shards, which a prepare that found nothing
    to train on left before this version and are removed here (no record says they are done).
    Else the shards would mix into a folder of other files, and a prepare that finds nothing
    to train on clears its done/. `clear` False: the refusal alone (before the folder's lock is
    taken, so that a folder of other files is left without one)."""
    if not fileio.isdir(output_dir) or fileio.exists(fileio.join(output_dir, "settings.json")):
        return
    inside = fileio.join(output_dir, os.path.basename(tokenizer.path))
    if fileio.exists(inside) and fileio.read_bytes(inside) != fileio.read_bytes(tokenizer.path):
        # The folder carries its tokenizer under that name: the other file would stay, and the
        # data would then read with a vocabulary it was not made with.
        raise ValueError(f"{inside} is not the tokenizer given ({tokenizer.path}), and a prepared folder keeps its own "
                         "under that name: prepare into a new or empty folder (config.data.prepared_dir; "
                         "prepare_data.py's --output_dir)")
    _refuse_other_files(output_dir, os.path.basename(tokenizer.path))
    for name in filter(shards.is_shard_name, fileio.listdir(output_dir)) if clear else ():
        fileio.remove(fileio.join(output_dir, name))


def _refuse_other_files(output_dir: str, tokenizer_name: str) -> None:
    """ValueError when `output_dir`, not yet a prepare's (no settings.json), holds anything but
    what a prepare writes: the locks, its tokenizer file `tokenizer_name`, an empty done/,
    shards."""
    if not fileio.isdir(output_dir) or fileio.exists(fileio.join(output_dir, "settings.json")):
        return
    done = fileio.join(output_dir, "done")
    ours = {PREPARE_LOCK, workdir_lock.LOCK_NAME, ".incomplete", tokenizer_name}
    others = sorted(name for name in fileio.listdir(output_dir) if name not in ours and not shards.is_shard_name(name)
                    and not (name == "done" and fileio.isdir(done) and not fileio.listdir(done)))
    if others:
        raise ValueError(f"{output_dir} holds files that are not prepared data ({', '.join(others[:4])}"
                         f"{', ...' if len(others) > 4 else ''}): prepare into a new or empty folder "
                         "(config.data.prepared_dir; prepare_data.py's --output_dir)")


def _prepared_already(output_dir: str, settings: dict) -> dict:
    """The metadata of `output_dir`, prepared earlier; a ValueError for other settings. A
    finished folder read with an earlier text reader or sentence splitter, or tokenized before
    sentences carried a byte-level BPE's leading space, is whole in itself: used, with a
    warning (only resuming one across versions would mix them at unit boundaries)."""
    metadata = read_metadata(output_dir)
    found = metadata["settings"]
    earlier = []  # the warnings of an earlier version's folder: given once it is found to be this corpus's
    if found.get("source") == settings.get("source") == "text" and found.get("text_reader", 1) < TEXT_READER:
        reader = found.get("text_reader", 1)
        earlier.append(lambda: logging.warning(
            "%s was prepared by an earlier reader of text files (%s): a line of only Unicode spaces (U+00A0, "
            "U+3000) did not end a document there; prepare again to have it end one", output_dir, reader))
        found = {key: value for key, value in found.items() if key != "text_reader"}
        if "text_reader" in settings:
            found["text_reader"] = settings["text_reader"]
    if "sentence_splitter" in settings and found.get("sentence_splitter", 1) < SENTENCE_SPLITTER:
        splitter = found.get("sentence_splitter", 1)
        earlier.append(lambda: logging.warning(
            "%s was prepared by an earlier sentence splitter (%s): '¿' and '¡' did not start a sentence there; "
            "prepare again to have them start one", output_dir, splitter))
        found = {**found, "sentence_splitter": settings["sentence_splitter"]}
    if "sentence_prefix" in settings and "sentence_prefix" not in found:
        earlier.append(lambda: _warn_unprefixed(output_dir))
        found = {**found, "sentence_prefix": settings["sentence_prefix"]}
    _check_same_settings(output_dir, found, settings)  # (another corpus: refused, without the warnings)
    for warn in earlier:
        warn()
    return metadata


def _without_unsampled_content(found: dict, settings: dict) -> dict:
    """`settings` without the units' text samples where `found` has none (a folder prepared
    before units carried them): such a folder is compared by its files' paths and ranges."""
    if any("content" in unit for unit in found.get("units", [])):
        return settings
    return {**settings, "units": [{key: value for key, value in unit.items() if key != "content"}
                                  for unit in settings.get("units", [])]}


def _warn_unprefixed(output_dir: str) -> None:
    logging.warning("%s was prepared before a byte-level BPE's sentences carried their leading space: each "
                    "sentence's first word there lacks its word-start mark (whole-word masking joins it to the "
                    "sentence before); prepare again to have it", output_dir)


def _prepare(data_config: Any, output_dir: str, units: list, tokenizer: tokenization.Tokenizer, settings: dict,
             num_workers: int | None) -> dict:
    """Writes the shards of every unit not yet done, then metadata.json (the caller holds the
    folder: one prepare at a time, as `.incomplete/` is cleared here)."""
    _clear_leftovers_or_refuse(output_dir, tokenizer)
    fileio.makedirs(fileio.join(output_dir, "done"))
    settings_path = fileio.join(output_dir, "settings.json")
    if fileio.exists(settings_path):  # an interrupted run: resume only with the same settings
        _check_same_settings(output_dir, _read_json(settings_path, RESTART), settings)
    else:
        fileio.write_json(settings_path, settings)
    if fileio.exists(fileio.join(output_dir, ".incomplete")):
        fileio.rmtree(fileio.join(output_dir, ".incomplete"))
    fileio.makedirs(fileio.join(output_dir, ".incomplete"))

    jobs = [(data_config.to_dict() if hasattr(data_config, "to_dict") else dict(data_config),
             tokenizer.kind, tokenizer.path, tokenizer.do_lower_case, output_dir, index, len(units), unit)
            for index, unit in enumerate(units) if not fileio.exists(_done_path(output_dir, index))]
    logging.info("prepare: %d of %d units to do in %s", len(jobs), len(units), output_dir)
    num_workers = min(num_workers or _default_workers(units), max(1, len(jobs)))
    start = time.time()
    progress = console.Progress(len(units), len(units) - len(jobs), label="prepare", unit="units",
                                line_seconds=console.LINE_SECONDS, timed_from_start=True)
    kind = "the demo corpus" if data_config.source == "demo" else (
        "text" if data_config.source == "text" else f"{data_config.source} text")
    progress.line(f"preparing {len(jobs)} of {len(units)} units of {kind} into {output_dir} "
                  f"({num_workers} process{'es' if num_workers > 1 else ''})")
    try:
        _prepare_units(jobs, len(units), num_workers, progress)
    except (_Preempted, KeyboardInterrupt) as stop:  # SIGTERM in a pool, Ctrl-C
        from bertjax.runtime.errors import StopSignal, TrainingStopped

        done = len(fileio.listdir(fileio.join(output_dir, "done")))  # (one listing: quick on gs:// too)
        sigterm = isinstance(stop, (_Preempted, StopSignal))
        raise TrainingStopped(f"{'preempted (SIGTERM)' if sigterm else 'interrupted (Ctrl-C)'} "
                              f"while preparing {output_dir}: the units done ({done} of {len(units)} so far) are "
                              "kept; run the same command again to resume") from None
    progress.close()
    logging.info("prepare: units done in %.1fs", time.time() - start)
    fileio.rmtree(fileio.join(output_dir, ".incomplete"))
    try:
        metadata = _collect_metadata(output_dir, units, settings, tokenizer,
                                     data_config.get("next_sentence_prediction", True))
    except NothingToTrainOn:
        # Its settings, units and shards go, so the run the error asks for (another eval_fraction,
        # text key or corpus) prepares afresh instead of being refused as other settings.
        for name in fileio.listdir(output_dir):
            if shards.is_shard_name(name):
                fileio.remove(fileio.join(output_dir, name))
        fileio.rmtree(fileio.join(output_dir, "done"))
        fileio.remove(settings_path)  # last: while it is there, the folder is a prepare's
        raise
    # The folder carries its vocabulary: copied to another machine or a bucket, it still reads
    # with it (`_prepared_tokenizer` looks inside first).
    inside = fileio.join(output_dir, os.path.basename(tokenizer.path))
    if os.path.basename(tokenizer.path) not in ("metadata.json", "settings.json") and not fileio.exists(inside):
        fileio.copy(tokenizer.path, inside + ".tmp")  # whole or not there: a kill mid-copy leaves no short one
        fileio.rename(inside + ".tmp", inside)
    fileio.write_json(fileio.join(output_dir, "metadata.json"), metadata)
    train, held_out = metadata["splits"]["train"], metadata["splits"]["eval"]
    progress.line(f"prepared {train['documents']:,} training documents ({train['tokens']:,} tokens) and "
                  f"{held_out['documents']:,} held out in {time.time() - start:.1f}s")
    return dict(metadata, dir=output_dir)


def _default_workers(units: list[dict]) -> int:
    """One per core, or 1 (in-process) for a small corpus (the demo; text, JSONL or Parquet
    under 8 MB of text), where starting workers costs more than it saves."""
    sizes = [sources.unit_bytes(unit) for unit in units]  # None: TFDS, demo
    small = all("demo" in u for u in units) or (None not in sizes and sum(sizes) < SMALL_CORPUS_BYTES)
    return 1 if small else os.cpu_count() or 1


def read_metadata(directory: str) -> dict:
    """metadata.json of a prepared directory, with `dir` added; clear errors if absent, foreign,
    damaged or missing a shard it lists (found before a run, not when its reader reaches it)."""
    path = fileio.join(directory, "metadata.json")
    if not fileio.exists(path):
        raise FileNotFoundError(f"{path} not found: not a prepared data directory (or preparation never finished)")
    metadata = _read_json(path, REBUILD_METADATA)
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        found = metadata.get("format") if isinstance(metadata, dict) else type(metadata).__name__
        raise ValueError(f"{path}: format {found!r}, expected {FORMAT!r} (written by another bertjax version? "
                         "delete the directory and prepare again)")
    missing = [key for key in ("settings", "tokenizer", "splits") if key not in metadata]
    if missing:
        raise ValueError(f"{path}: damaged, no {missing}; {REBUILD_METADATA}")
    present = set(fileio.listdir(directory))
    gone = [name for split in metadata["splits"].values()  # (a shard of no documents is never read)
            for name, count in zip(split.get("shards", []), split.get("shard_documents", []))
            if count and name not in present]
    if gone:
        listed = ", ".join(gone[:3]) + (", ..." if len(gone) > 3 else "")
        raise FileNotFoundError(f"{directory} lacks {len(gone)} of the shards its metadata.json lists ({listed}): "
                                "copy them back, or delete the folder and prepare again")
    return dict(metadata, dir=directory)


# What to do about a damaged file of a prepared directory. Nothing is overwritten meanwhile.
REBUILD_METADATA = ("delete this metadata.json and prepare again: it is rebuilt from the done/ markers, "
                    "and the shards are kept")
REDO_UNIT = "delete this done-marker and prepare again: its unit is prepared again"
RESTART = "delete the directory and prepare again"


def _read_json(path: str, remedy: str) -> Any:
    """A JSON file that prepare wrote; ValueError naming it, and the remedy, if it is damaged."""
    try:
        return fileio.read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: damaged, not valid JSON ({e}); {remedy}") from None


def _prepare_units(jobs: list, num_units: int, num_workers: int, progress: console.Progress) -> None:
    """Prepares each unit of `jobs` (one process, or a pool of `num_workers`), advancing
    `progress` as each finishes; _Preempted on SIGTERM (a pool's workers then exit)."""
    previous = _stop_on_sigterm()
    try:
        if num_workers == 1:
            for done, job in enumerate(jobs, start=num_units - len(jobs) + 1):
                _prepare_unit(job)
                progress.advance(done)
        else:
            _prepare_in_pool(jobs, num_units, num_workers, progress)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _prepare_in_pool(jobs: list, num_units: int, num_workers: int, progress: console.Progress) -> None:
    # spawn: TF and fork do not mix. A broken pool raises instead of hanging.
    context = multiprocessing.get_context("spawn")
    pool = futures.ProcessPoolExecutor(num_workers, mp_context=context, initializer=_init_worker,
                                       initargs=(os.getpid(),))
    try:
        running = _submit_ignoring_ctrl_c(pool, jobs)
        # As units finish, in any order: one slow unit does not hold the count still.
        for done, finished in enumerate(futures.as_completed(running), start=num_units - len(jobs) + 1):
            finished.result()
            progress.advance(done)
        pool.shutdown()
    except futures.process.BrokenProcessPool as e:
        raise RuntimeError("prepare: a worker process died. If this was called from a script, call it under "
                           "`if __name__ == '__main__':` (workers re-import the main module), or pass "
                           "num_workers=1") from e
    finally:  # units not started are dropped; the workers finish the ones they hold, then exit
        # (waited for here, as the interpreter would wait at its exit: a stop's count of the
        # units done then includes theirs, which it undercounted)
        pool.shutdown(wait=True, cancel_futures=True)


def _submit_ignoring_ctrl_c(pool: futures.ProcessPoolExecutor, jobs: list) -> list[futures.Future]:
    """`jobs` submitted to `pool`, whose workers start as they are submitted, with SIGINT ignored
    (Python keeps an ignored SIGINT ignored): a Ctrl-C, sent to the whole process group, stops
    the main process alone, which says what is kept, where each worker printed a traceback."""
    if threading.current_thread() is not threading.main_thread():
        return [pool.submit(_prepare_unit, job) for job in jobs]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return [pool.submit(_prepare_unit, job) for job in jobs]
    finally:
        signal.signal(signal.SIGINT, previous)


# -- Worker side. --

_TOKENIZERS: dict[tuple, tokenization.Tokenizer] = {}
_ORPHAN_CHECK_SECONDS = 0.5


class _Preempted(BaseException):
    """SIGTERM arrived while units are prepared. A BaseException, as errors.StopSignal is: no
    `except Exception` on its way (a reader's, a library's) takes it for a failure."""


def _raise_preempted(signum, frame) -> None:
    raise _Preempted


def _stop_on_sigterm():
    """SIGTERM raises _Preempted in the main thread (the handler before is returned), so the
    pool is shut down rather than its workers orphaned, and the stop says what is kept. None
    (nothing changed) off the main thread, and in a multi-host run, whose SIGTERM handler JAX
    installs from C for its coordinated preemption save: Python sees it as SIG_DFL, and would
    put that back instead."""
    jax = sys.modules.get("jax")  # (data preparation does not import JAX itself)
    if threading.current_thread() is not threading.main_thread() or (jax and jax.distributed.is_initialized()):
        return None
    return signal.signal(signal.SIGTERM, _raise_preempted) or signal.SIG_DFL


def _init_worker(parent: int) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a signal to the process group: the main process decides
    # ...so a main process killed outright (SIGKILL, the OOM killer) would leave its workers
    # running for good, ignoring SIGTERM: each leaves as soon as it is orphaned.
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_ORPHAN_CHECK_SECONDS)
    os._exit(1)  # its unit unfinished: no done-marker, prepared again on the next run


def _prepare_unit(job: tuple) -> None:
    """Tokenizes one unit into its train and eval shards, then writes its done-marker."""
    config_dict, kind, vocab_path, do_lower_case, output_dir, index, count, unit = job
    start, start_cpu = time.time(), time.process_time()
    key = (kind, vocab_path, do_lower_case)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = tokenization.load_tokenizer(kind, vocab_path, do_lower_case)
    tokenizer = _TOKENIZERS[key]
    data_config = _AttrDict(config_dict)
    drops = sources.DropCounter()
    stats = {split: collections.Counter() for split in SPLITS}
    names = {split: shards.shard_name(split, index, count) for split in SPLITS}
    tmp = {split: fileio.join(output_dir, ".incomplete", f"{names[split]}.{os.getpid()}") for split in SPLITS}
    writers = {split: shards.RecordWriter(tmp[split]) for split in SPLITS}
    threshold = int(data_config.eval_fraction * 2**64)
    for batch in _batches(sources.read_unit(data_config, unit, drops), BATCH_DOCUMENTS):
        sentences = [sentence for document in batch for sentence in document]
        # Each sentence tokenized as it stands in its document's running text: after the first,
        # with the space a byte-level BPE puts on its first word ("ĠThe"), as inference sees it
        # (and whole-word masking needs it: without the mark the word would join the sentence
        # before it).
        token_ids, sentence_lengths = tokenizer.encode_flat(
            [tokenizer.word_prefix + sentence if k else sentence for document in batch
             for k, sentence in enumerate(document)])
        document_of_sentence = np.repeat(np.arange(len(batch)), [len(document) for document in batch])
        for i in np.flatnonzero(sentence_lengths == 0):  # e.g. only control characters, which the tokenizer removes
            drops.drop("sentence_without_tokens", sources.unit_name(unit), repr(sentences[i][:80]))
        kept = sentence_lengths > 0
        document_sentences = np.bincount(document_of_sentence[kept], minlength=len(batch))
        document_tokens = np.bincount(document_of_sentence, weights=sentence_lengths, minlength=len(batch))
        unknown = np.bincount(np.repeat(document_of_sentence, sentence_lengths), weights=token_ids == tokenizer.unk_id,
                              minlength=len(batch))
        document_characters = np.bincount(document_of_sentence, weights=[len(s) for s in sentences],
                                          minlength=len(batch))
        has_tokens = document_sentences > 0
        for d in np.flatnonzero(~has_tokens):  # every sentence dropped: the document is gone too, and counted
            drops.drop("document_without_tokens", sources.unit_name(unit), repr(" ".join(batch[d])[:80]))
        document_sentences, document_tokens, document_characters, unknown = (
            counts[has_tokens] for counts in (document_sentences, document_tokens, document_characters, unknown))
        records = shards.encode_documents(token_ids, sentence_lengths[kept], document_sentences)
        is_eval = np.array([_hash64(document) < threshold for document in itertools.compress(batch, has_tokens)],
                           dtype=bool)
        for record, in_eval in zip(records, is_eval.tolist()):
            writers["eval" if in_eval else "train"].write(record)
        for split, in_split in (("eval", is_eval), ("train", ~is_eval)):
            counts = stats[split]
            counts["documents"] += int(in_split.sum())
            counts["sentences"] += int(document_sentences[in_split].sum())
            counts["tokens"] += int(document_tokens[in_split].sum())
            counts["unknown_tokens"] += int(unknown[in_split].sum())
            counts["characters"] += int(document_characters[in_split].sum())
            counts["single_sentence_documents"] += int((document_sentences[in_split] == 1).sum())
            counts["longest_document"] = max(counts["longest_document"],
                                             int(document_sentences[in_split].max(initial=0)))
    for split in SPLITS:
        writers[split].close()
        fileio.rename(tmp[split], fileio.join(output_dir, names[split]))
    fileio.write_json(_done_path(output_dir, index),
                     {"unit": unit, "shards": names, "stats": stats, "dropped": dict(drops.counts),
                      "seconds": time.time() - start, "cpu_seconds": time.process_time() - start_cpu})


def _hash64(document: list[str]) -> int:
    """A document's text -> a uniform 64-bit integer (decides its split)."""
    return int.from_bytes(hashlib.blake2b("\n".join(document).encode("utf-8"), digest_size=8).digest(), "little")


def _batches(documents: Iterator[list[str]], size: int) -> Iterator[list[list[str]]]:
    batch = []
    for document in documents:
        batch.append(document)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class _AttrDict(dict):
    """A plain dict (picklable across processes) read like a ConfigDict."""
    __getattr__ = dict.__getitem__


# -- Metadata. --

class NothingToTrainOn(ValueError):
    """Prepared units that hold no training document (all held out, or every row dropped)."""


def _collect_metadata(output_dir: str, units: list, settings: dict, tokenizer: tokenization.Tokenizer,
                      next_sentence_prediction: bool) -> dict:
    """metadata.json's content from the units' records; warns of what the corpus lacks for
    the run preparing it (NSP's random sentences need other documents)."""
    splits = {split: {"shards": [], "shard_documents": [], "documents": 0, "sentences": 0, "tokens": 0,
                      "unknown_tokens": 0, "characters": 0, "single_sentence_documents": 0} for split in SPLITS}
    dropped, longest = collections.Counter(), 0
    for index in range(len(units)):
        done = _read_json(_done_path(output_dir, index), REDO_UNIT)
        dropped.update(done["dropped"])
        for split in SPLITS:
            entry, counts = splits[split], done["stats"][split]
            entry["shards"].append(done["shards"][split])
            entry["shard_documents"].append(counts.get("documents", 0))
            for key in ("documents", "sentences", "tokens", "unknown_tokens", "characters",
                        "single_sentence_documents"):
                entry[key] += counts.get(key, 0)
            longest = max(longest, counts.get("longest_document", 0))
    for reason, count in sorted(dropped.items()):
        logging.warning("prepare: dropped %d x %s (the log above says where the first ones are)", count, reason)
    documents = splits["train"]["documents"] + splits["eval"]["documents"]
    text = settings["source"] == "text"  # where a blank line parts documents (JSONL and Parquet: a row each)
    more = "give more documents" + (" (a blank line separates them)" if text else "")
    if splits["train"]["documents"] == 0 and splits["eval"]["documents"]:
        raise NothingToTrainOn(f"prepare: all {documents} document(s) of the source fell into the held-out split "
                         f"(config.data.eval_fraction={settings['eval_fraction']}: each document is held out by a "
                         f"hash of its text), none is left to train on; {more} or set config.data.eval_fraction=0")
    if splits["train"]["documents"] == 0:
        raise NothingToTrainOn(f"prepare: the source gave no training documents ({documents} in all; "
                         f"dropped: {dict(dropped) or 'nothing'}); check config.data.source/input_pattern")
    if splits["eval"]["documents"] == 0 and settings["eval_fraction"] > 0:  # (else: pre-training's error, later)
        logging.warning("prepare: none of the %d document(s) fell into the held-out split (config.data.eval_fraction="
                        "%s: each document is held out by a hash of its text): a pre-training run that evaluates "
                        "will stop at its start; %s or set config.train.eval_every=0", documents,
                        settings["eval_fraction"], more)
    if documents < 2 and next_sentence_prediction:
        logging.warning("prepare: a one-document corpus; NSP draws its random B from that document, so "
                        "IsNext and NotNext differ only in order%s", " (is there a blank line between documents?)"
                        if text else "")
    tokens = splits["train"]["tokens"] + splits["eval"]["tokens"]
    unknown = splits["train"]["unknown_tokens"] + splits["eval"]["unknown_tokens"]
    if unknown > UNKNOWN_SHARE_WARNED * tokens:  # a vocabulary of another language or casing, or too few characters
        logging.warning("prepare: %.1f%% of the corpus's %d tokens are [UNK]: does the vocabulary (%s, "
                        "do_lower_case=%s) fit this text?", 100 * unknown / tokens, tokens, tokenizer.path,
                        tokenizer.do_lower_case)
    single = splits["train"]["single_sentence_documents"] + splits["eval"]["single_sentence_documents"]
    if single > documents / 2:
        logging.warning("prepare: %d of %d documents have one sentence: %s", single, documents,
                        "is there a blank line after every sentence? BERT format is one sentence per line, a blank "
                        "line between documents" if text else
                        "the sentence splitter (bertjax/data/sources.py: split_sentences) found no sentence end in "
                        "most documents; next-sentence prediction needs documents of several sentences")
    if longest > LONG_DOCUMENT_SENTENCES:
        logging.warning("prepare: a document of %d sentences%s; the pipeline pads each batch of documents to its "
                        "longest, so one this long costs memory in every batch it is in", longest,
                        ": is there a blank line between documents?" if text else "")
    return {
        "format": FORMAT,
        "settings": settings,
        "tokenizer": {"kind": tokenizer.kind, "do_lower_case": tokenizer.do_lower_case,
                      "path": fileio.absolute(tokenizer.path),
                      "vocab_hash": tokenizer.vocab_hash, "vocab_size": tokenizer.vocab_size,
                      "pad_id": tokenizer.pad_id, "unk_id": tokenizer.unk_id, "cls_id": tokenizer.cls_id,
                      "sep_id": tokenizer.sep_id, "mask_id": tokenizer.mask_id},
        "splits": splits,
        "dropped": dict(sorted(dropped.items())),
    }


class _Absent:
    def __repr__(self) -> str:
        return "nothing"


def _first_difference(found: Any, wanted: Any, where: str) -> tuple[str, Any, Any]:
    """(where, found, wanted) at the first place two JSON values differ, e.g. units[0].text_key
    (a key one side lacks: `_Absent` there)."""
    if isinstance(found, dict) and isinstance(wanted, dict):
        key = next(key for key in sorted(set(found) | set(wanted))
                   if (key in found, found.get(key)) != (key in wanted, wanted.get(key)))
        return _first_difference(found.get(key, _Absent()), wanted.get(key, _Absent()), f"{where}.{key}")
    if isinstance(found, list) and isinstance(wanted, list):
        if len(found) != len(wanted):
            return f"{where} (count)", len(found), len(wanted)
        index = next(i for i, (a, b) in enumerate(zip(found, wanted)) if a != b)
        return _first_difference(found[index], wanted[index], f"{where}[{index}]")
    return where, found, wanted


_UNIT_PATH_KEYS = ("path", "jsonl", "parquet", "data_dir")  # (TFDS's data_dir: "" for its default)


def _with_absolute_paths(settings: dict) -> dict:
    """`settings` with its units' local files named by their real path: a corpus named "a.txt" from
    its folder and by its full path from another is the same corpus (a relative path saved by an
    earlier version reads from the current folder)."""
    def absolute(unit: dict) -> dict:
        return {key: value if key not in _UNIT_PATH_KEYS or not value or fileio.is_remote(value)
                else os.path.realpath(value) for key, value in unit.items()}
    return {**settings, "units": [absolute(unit) for unit in settings.get("units", [])]}


def _check_same_settings(output_dir: str, found: dict, wanted: dict) -> None:
    if wanted.get("tokenizer") != "wordpiece" and "do_lower_case" in found:
        # A SentencePiece model's or tokenizer.json's casing is its file's, which vocab_hash covers;
        # code before recorded False for every such tokenizer, whatever it did.
        found = {**found, "do_lower_case": wanted.get("do_lower_case")}
    found, wanted = _with_absolute_paths(found), _with_absolute_paths(_without_unsampled_content(found, wanted))
    if found != wanted:
        short = lambda value: repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."  # noqa: E731
        differences = [_first_difference(found.get(key, _Absent()), wanted.get(key, _Absent()), key)
                       for key in sorted(set(found) | set(wanted))
                       if (key in found, found.get(key)) != (key in wanted, wanted.get(key))]
        differ = "; ".join(f"{where} {short(there)} there, {short(now)} now{_unit_named(where, wanted)}"
                           for where, there, now in differences)
        raise ValueError(f"{output_dir} holds data prepared with other settings ({differ}): prepare into another "
                         "folder (config.data.prepared_dir; prepare_data.py's --output_dir), or delete that one")


def _unit_named(where: str, settings: dict) -> str:
    """" (in corpus.txt bytes 0-67108864)" for a unit's text that changed ("units[3].content"),
    else ""."""
    match = re.fullmatch(r"units\[(\d+)\]\.content", where)
    return "" if match is None else f" (in {sources.unit_name(settings['units'][int(match.group(1))])})"


def _done_path(output_dir: str, index: int) -> str:
    return fileio.join(output_dir, "done", f"unit-{index:05d}.json")

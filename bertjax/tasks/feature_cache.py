"""Features computed once: a frozen encoder's outputs for every example of the training and
evaluation splits, stored before the first step and read by every step of every epoch, every
evaluation (and every run of a sweep).

The paper's case for the feature-based approach is that the expensive representation is
computed once and many cheap task models train on it; a frozen encoder that runs again at
every step throws that away. With config.train.freeze_encoder (and cache_features, the
default) fine-tuning runs the encoder once over each split (`FeatureCache.compute`,
length-sorted batches as evaluation cuts them), keeps what the head reads of each example
(`models.heads.encode`: before any head parameter, so a learned layer mix still learns) and
adds it to each training and evaluation batch (`gather`, `add_to_eval_batch`), where the head
takes it instead of running the encoder (`model_inputs`). The maths is the same as running
the frozen encoder every step: the encoder is deterministic when frozen, the head's dropout
still draws its masks; the evaluation splits' features come from float32 products, as
evaluation without a cache computes them.

What is kept per example: for heads that read every token (`Family.reads_tokens`: tagging,
span QA) each real token's features, rows end to end (<dtype>[T, *tail], T = the split's
real tokens, tail = (H,) or (K, H) for K feature layers); for sentence-level heads
(classification, multiple choice) the pooled [CLS] vector (H,) or the K layers at [CLS]
(K, H), per example (and choice).

Where: one file in `directory` (a local disk), memory-mapped: the operating system keeps it
in memory when it fits and reads it from disk when it does not, so a cache larger than the
host's memory still trains (the process never holds it whole). Its name is a digest of what
decides its contents (the split's inputs, the encoder's weights and configuration, what is
kept), so a resumed run, or the next run of a sweep, finds it ready; `compute` writes
`<name>.json` as it goes (batches done, of which size) and a killed computation resumes there
when its batches are the same.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import random
import shutil
import time
from typing import Any, Callable, Iterator

import numpy as np

from bertjax.runtime import preemption, workdir_lock
from bertjax.runtime.console import PROCESS_SPECIFIC
from bertjax.runtime.errors import TrainingStopped
from bertjax.tasks.batching import TrainBatches, eval_batches
from bertjax.tasks.common import Split

CACHED_TOKENS = "cached_tokens"      # <dtype>[B, L, *tail]: every token's features (reads_tokens heads)
CACHED_SENTENCE = "cached_sentence"  # <dtype>[B, (C,) *tail]: the sentence vector of each example (and choice)
_SAVE_SECONDS = 30.0                 # how often `compute` records its progress

log = logging.getLogger(__name__)


def cache_name(split: Split, identity: dict[str, Any]) -> str:
    """A digest of the split's model inputs and `identity` (the encoder's weights and config, what
    is kept, the process): the cache's file name."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    for name in ("input_ids", "segment_ids", "input_mask"):
        values = np.ascontiguousarray(split.features[name])
        digest.update(f"{name}{values.shape}{values.dtype}".encode())
        digest.update(values.tobytes())
    return f"{split.name}-{digest.hexdigest()[:20]}"


def readable_size(nbytes: int) -> str:
    """1.5 GiB, 3.0 MiB, 12.0 KiB: a size in the unit that shows it."""
    for unit, power in (("GiB", 30), ("MiB", 20)):
        if nbytes >= 2**power:
            return f"{nbytes / 2**power:.1f} {unit}"
    return f"{nbytes / 2**10:.1f} KiB"


def stored_bytes(directory: str) -> int:
    """The bytes of every cache file in `directory` (this run's and any other's: earlier launches'
    for other inputs or settings, finished or stopped while computing, or a run's computing now)."""
    total = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(".bin"):
                with contextlib.suppress(FileNotFoundError):  # (removed meanwhile by another run)
                    total += entry.stat().st_size if entry.is_file() else 0
    return total


class FeatureCache:
    """The stored encoder outputs of one split (see the module docstring).

    reads_tokens: kept per token (offsets from split.lengths) or per example.
    example_shape: one example's kept shape without the token axis: tail, or (C, *tail).
    copies: the names of the same run's other processes' copies (each process keeps its own).
    """

    def __init__(self, split: Split, directory: str, name: str, reads_tokens: bool,
                 example_shape: tuple[int, ...], dtype: Any, copies: tuple[str, ...] = ()):
        self.split, self.reads_tokens = split, reads_tokens
        self.copy_paths = [os.path.join(directory, copy + ".bin") for copy in copies]
        self.example_shape, self.dtype = tuple(example_shape), np.dtype(dtype)
        self.path = os.path.join(directory, name + ".bin")
        self.lock_name = name + ".bin.lock"  # (held while it computes: `compute`)
        self.manifest_path = os.path.join(directory, name + ".json")
        lengths = split.lengths.astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]) if reads_tokens else None
        rows = int(self.offsets[-1]) if reads_tokens else len(split)
        self.shape = (rows, *self.example_shape)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.values: np.memmap | None = None

    def stored_bytes(self) -> int:
        """The bytes of this cache and of its other processes' copies in its folder (a shared one)."""
        total = 0
        for path in [self.path, *self.copy_paths]:
            with contextlib.suppress(FileNotFoundError):
                total += os.path.getsize(path)
        return total

    def batches_done(self, batch_size: int, buckets: list[int]) -> int:
        """How many of `compute`'s batches of `batch_size` cut to `buckets` are done: all of them
        when an earlier computation finished, whatever its batches (a sweep over batch sizes
        computes once); else what one with the same batches (they decide which examples each
        holds) finished; 0 for none, with a warning where other batches had begun."""
        manifest = self._manifest()
        if manifest is None:
            return 0
        if manifest["batches_done"] >= -(-len(self.split) // manifest["batch_size"]):
            return -(-len(self.split) // batch_size)
        same = (manifest.get("batch_size"), manifest.get("buckets")) == (batch_size, list(buckets))
        if not same and manifest["batches_done"]:
            log.warning("%s: the %d batches of %d computed so far were of another batch size or lengths (now %d; "
                        "lengths %s, then %s): computed again from the start (the evaluation batch size, "
                        "config.train.eval_batch_size, and the length buckets as before would resume them)",
                        self.path, manifest["batches_done"], manifest.get("batch_size"), batch_size, list(buckets),
                        manifest.get("buckets"), extra=PROCESS_SPECIFIC)
        return manifest["batches_done"] if same else 0

    def _manifest(self) -> dict[str, Any] | None:
        """The manifest of a cache file of this one's shape, its size whole; None for none (a
        file cut short, by a full disk or a copy, is computed anew rather than mapped)."""
        if not (os.path.exists(self.manifest_path) and os.path.exists(self.path)):
            return None
        try:  # one cut short or emptied (a copy, a full disk, a crash while written): none
            with open(self.manifest_path) as f:
                manifest = json.load(f)
        except ValueError:
            return None
        if (not isinstance(manifest, dict) or manifest.get("shape") != list(self.shape)
                or not manifest.get("batch_size") or not isinstance(manifest.get("batches_done"), int)
                or os.path.getsize(self.path) != self.nbytes):
            return None
        return manifest

    def _complete(self) -> bool:
        manifest = self._manifest()
        return manifest is not None and manifest["batches_done"] >= -(-len(self.split) // manifest["batch_size"])

    def compute(self, encode: Callable[[dict[str, np.ndarray]], np.ndarray], batch_size: int, buckets: list[int],
                progress: Callable[[int, int], None] | None = None,
                fewest: Callable[[int], int] = lambda count: count,
                stop: Callable[[], str | None] = lambda: None) -> str:
        """Runs `encode(batch) -> <[B, ...]>` (the frozen encoder's kept outputs for an evaluation
        batch of the split: [B, L, *tail] per token, or [B, *example_shape]) over the split, from
        where an earlier computation stopped, and opens the result. progress(done, total) after
        each batch. fewest(count) -> the smallest count of all the run's processes (each calls
        it: a collective), for where every process starts (several processes run `encode`
        together, so all must run the same batches) and whether all hold their locks. stop() ->
        a stop signal's name after a batch, or while waiting for another run (TrainingStopped, the
        batches done kept), else None.
        Returns what happened, for the console.

        Another run computing the same cache (a sweep's runs started together, or runs sharing
        config.train.feature_cache_dir) is waited for: its file is locked while it computes, so
        neither truncates the rows the other wrote. A run's processes lock their files together
        or not at all: one holding its lock while waiting in a collective for a process blocked
        by another run (which holds that lock and waits for this run's) would wait for ever.

        A process whose own copy is finished while another's is not (a host's disk replaced, a
        copy cut short) runs the encoder with the others and writes nothing: its file, which
        other runs may be reading, is never rewritten, and may lie in a folder it cannot write."""
        directory = os.path.dirname(self.path)
        # A finished cache (every process's) is read without its lock: a folder that cannot be
        # written (shared, read-only) serves it.
        complete = self._complete()
        if fewest(int(complete)):
            self.values = np.memmap(self.path, self.dtype, "r", shape=self.shape)
            return f"reusing the cached features in {self.path} ({readable_size(self.nbytes)})"
        waited = False
        while True:
            with contextlib.ExitStack() as held:
                locked, failure = 1, None  # (said to the others before raising: they would wait for ever)
                try:
                    if not complete:
                        held.enter_context(workdir_lock.hold(directory, lock_name=self.lock_name,
                                                             named="config.train.feature_cache_dir="))
                except workdir_lock.WorkdirBusyError as busy:
                    locked, holder = 0, busy.holder
                except OSError as error:  # a read-only folder, no permission
                    locked, failure = -1, ValueError(
                        f"config.train.feature_cache_dir={directory}: cannot write the cached features there "
                        f"({error.strerror or error}); give a folder that can be written or set "
                        "config.train.cache_features=False")
                except ValueError as error:  # the folder is a file, or cannot be made
                    locked, failure = -1, error
                agreed = fewest(locked)
                if agreed < 0:
                    raise failure or _another_process_failed()
                if agreed:
                    return self._compute(encode, batch_size, buckets, progress, fewest, stop, write=not complete)
            if not waited:  # (a warning: a run that waits minutes says why)
                if locked:
                    log.warning("another process of this run waits for another run computing its copy of %s: "
                                "waiting with it", os.path.basename(self.path), extra=PROCESS_SPECIFIC)
                else:
                    log.warning("%s is being computed by %s: waiting for it", self.path, holder,
                                extra=PROCESS_SPECIFIC)
                waited = True
            signal_name = stop()  # (a wait as long as the other run's computation: Ctrl-C stops it)
            if signal_name:
                raise TrainingStopped(f"{preemption.stopped_by(signal_name)} while waiting for another run's cached "
                                      f"features in {self.path}; run the same command again to go on")
            time.sleep(random.uniform(0.5, 2.0))  # random: two runs that let go together try again apart

    def _compute(self, encode, batch_size, buckets, progress, fewest, stop, write: bool) -> str:
        """`compute`'s batches from the fewest any process has done; write: whether this
        process stores them (not when its own copy is finished: the others need its encoder)."""
        total = -(-len(self.split) // batch_size)
        self.batch_size, self.buckets = batch_size, list(buckets)
        start = fewest(self.batches_done(batch_size, buckets))
        if start < total:
            values, failure = None, None
            if write:
                try:
                    if start == 0:
                        self._write_manifest(0)  # first: an earlier manifest does not describe the zeroed file
                    self._reserve(zeroed=start == 0)
                    values = np.memmap(self.path, self.dtype, "r+", shape=self.shape)
                except (OSError, ValueError) as error:  # (a full disk: said to the others, who would wait)
                    failure = error
            if not fewest(0 if failure else 1):
                raise failure or _another_process_failed()
            saved = time.monotonic()
            for index, (batch, real) in enumerate(eval_batches(self.split, batch_size, buckets)):
                if index < start:
                    continue
                outputs = np.asarray(encode(batch))
                if write:
                    self._store(values, real, outputs)
                # (a signal in a split's last batch is left for the next split's first, or the first step)
                signal_name = stop() if index + 1 < total else None
                if write and (index + 1 == total or time.monotonic() - saved > _SAVE_SECONDS or signal_name):
                    values.flush()
                    self._write_manifest(index + 1)
                    saved = time.monotonic()
                if signal_name:
                    raise TrainingStopped(f"{preemption.stopped_by(signal_name)} while caching the frozen encoder's "
                                          f"features: {index + 1} of {total} batches kept in {self.path}; run the "
                                          "same command again to resume")
                if progress is not None:
                    progress(index + 1, total)
            del values
        self.values = np.memmap(self.path, self.dtype, "r", shape=self.shape)
        size = readable_size(self.nbytes)
        if start >= total or not write:
            return f"reusing the cached features in {self.path} ({size})" + (
                "" if write else "; another process of this run computed its copy")
        return f"cached the frozen encoder's features in {self.path} ({size})" + (
            f", resumed at batch {start} of {total}" if start else "")

    def _reserve(self, zeroed: bool) -> None:
        """The file at its full size with its disk blocks allocated (`zeroed`: its values zeros,
        else kept): a disk that fills up under a memory-mapped write kills the process with
        SIGBUS and no message, so the space is taken, or refused, before the first write. Where
        the file system cannot allocate ahead (or Python cannot: macOS), the free space is
        checked instead and the file left sparse."""
        with open(self.path, "wb" if zeroed else "r+b") as f:
            try:
                if not hasattr(os, "posix_fallocate"):
                    raise OSError(errno.EOPNOTSUPP, "no posix_fallocate")
                os.posix_fallocate(f.fileno(), 0, self.nbytes)
                return
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                    no_room = os.strerror(e.errno)
                elif e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    no_room = None
                else:
                    raise
            if no_room is None:
                allocated = os.fstat(f.fileno()).st_blocks * 512
                if self.nbytes - allocated <= 0.95 * shutil.disk_usage(os.path.dirname(self.path)).free:
                    f.truncate(self.nbytes)
                    return
                no_room = "not enough free space"
            if zeroed:
                f.truncate(0)  # the blocks taken so far, given back
        free = shutil.disk_usage(os.path.dirname(self.path)).free
        raise ValueError(f"config.train.feature_cache_dir={os.path.dirname(self.path)}: the cached features need "
                         f"{readable_size(self.nbytes)}, the disk has {readable_size(free)} free ({no_room}); give a "
                         "folder with room or set config.train.cache_features=False")

    def _store(self, values: np.memmap, real: np.ndarray, outputs: np.ndarray) -> None:
        if not self.reads_tokens:
            values[real] = outputs[:len(real)]
            return
        for row, example in enumerate(real):
            first, last = self.offsets[example], self.offsets[example + 1]
            values[first:last] = outputs[row, :last - first]

    def _write_manifest(self, batches_done: int) -> None:
        partial = self.manifest_path + ".partial"
        with open(partial, "w") as f:
            json.dump({"batches_done": batches_done, "shape": list(self.shape), "dtype": self.dtype.name,
                       "batch_size": self.batch_size, "buckets": self.buckets}, f)
        os.replace(partial, self.manifest_path)

    def remove(self) -> None:
        """Deletes the stored features, their progress and lock, and the folder if that leaves it
        empty (the lock file with them: its folder belongs to one run)."""
        self.values = None
        for path in (self.path, self.manifest_path, os.path.join(os.path.dirname(self.path), self.lock_name)):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(self.path))

    def gather(self, examples: np.ndarray, length: int) -> dict[str, np.ndarray]:
        """The kept features of `examples` <int>[B] for a batch cut to `length` tokens:
        {CACHED_TOKENS: [B, length, *tail]} (zeros past each example's tokens) or
        {CACHED_SENTENCE: [B, *example_shape]}."""
        if not self.reads_tokens:
            return {CACHED_SENTENCE: np.asarray(self.values[np.asarray(examples)])}
        examples = np.asarray(examples)
        positions = np.arange(length)[None, :]
        real = positions < self.split.lengths[examples][:, None]                           # [B, L]
        tokens = np.where(real, self.offsets[examples][:, None] + positions, 0)
        out = np.asarray(self.values[tokens.reshape(-1)]).reshape(len(examples), length, *self.example_shape)
        out[~real] = 0
        return {CACHED_TOKENS: out}

    def add_to_eval_batch(self, batch: dict[str, np.ndarray], real: np.ndarray) -> dict[str, np.ndarray]:
        """An `eval_batches` batch of this split (real rows `real`, then padding rows) with each
        row's kept features; padding rows get the first example's (their weight is 0)."""
        examples = np.zeros(len(batch["input_ids"]), np.int64)
        examples[:len(real)] = real
        return {**batch, **self.gather(examples, batch["input_ids"].shape[-1])}

    def with_features(self, batches: Iterator[dict[str, np.ndarray]], train_batches: TrainBatches,
                      start_batch: int) -> Iterator[dict[str, np.ndarray]]:
        """`train_batches.batches(start_batch)` with each batch's kept features added."""
        for index, batch in enumerate(batches, start=start_batch):
            yield {**batch, **self.gather(train_batches.examples(index), batch["input_ids"].shape[-1])}


def _another_process_failed() -> ValueError:
    return ValueError("another process of this run could not store its cached features (its log says why): this "
                      "one stops with it")


def model_inputs(batch: dict[str, Any], feature_based: bool) -> dict[str, Any]:
    """The head's `encoded` argument from a batch's kept features ({} without them): what
    `models.heads.encode` would have returned (a sentence-level head's [CLS] features as a
    sequence of one token)."""
    if CACHED_TOKENS in batch:
        return {"encoded": (batch[CACHED_TOKENS], None)}
    if CACHED_SENTENCE not in batch:
        return {}
    kept = batch[CACHED_SENTENCE]
    return {"encoded": (kept[..., None, :, :], None) if feature_based else (None, kept)}

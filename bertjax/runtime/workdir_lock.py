"""One run per workdir: an exclusive lock on `<workdir>/.lock`.

Two runs writing the same checkpoints, metrics and prepared data would corrupt each other
without any error. `hold(workdir)` takes the lock for the length of a run; a second run
gets WorkdirBusyError naming the workdir and the holder.

Local workdirs: `fcntl.flock` on the open lock file. The kernel releases it when the
holder exits, however it exits (kill -9 included), so a crash never leaves a stale lock;
the file itself stays and says who held it last (pid@host and start time). NFS and other
network file systems may not honour flock across machines; one that refuses locks outright
(Lustre mounted without flock, NFSv3 without lockd) runs unlocked, with a warning.

gs:// workdirs are not locked (a warning says so). GCS can create an object only if it
does not exist yet, but an object cannot be released by a process that is killed, so a
preempted run would lock out its own resume; a lease with heartbeats is what that needs.

In a multi-process run only process 0 should hold the lock: the other processes of the
same run share the workdir.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import logging
import os
import socket
import time
from typing import Callable, Iterator

from bertjax.runtime import fileio
from bertjax.runtime.console import PROCESS_SPECIFIC

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
# flock's errors on file systems without locks, as opposed to a lock another run holds.
_NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


class WorkdirBusyError(ValueError):
    """Another run holds the workdir; `holder` says who (pid@host since when), as its lock file does."""

    def __init__(self, message: str, holder: str = "another run"):
        super().__init__(message)
        self.holder = holder


def holder(workdir: str, lock_name: str = LOCK_NAME) -> str | None:
    """Who holds `workdir`'s lock now (pid@host since when), told by taking it shared for an
    instant (a run starting then tries again: `_try_lock`); None when no run does, or none can
    be told (a gs:// workdir, no lock file, a file system without locks, a lock file this
    process cannot read)."""
    if fileio.is_remote(workdir):
        return None
    try:
        with open(os.path.join(workdir, lock_name), encoding="utf-8") as lock_file:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _holder_named(lock_file)
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    except OSError:
        return None
    return None


def _holder_named(lock_file) -> str:
    """What the holder wrote in the lock file (pid@host since when); it writes once it holds it."""
    return lock_file.read().strip() or "another process (starting up)"


def _first_missing(path: str) -> str | None:
    """The outermost folder of `path` (absolute) that does not exist yet; None if `path` exists."""
    path, missing = os.path.abspath(path), None
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _empty_folders(workdir: str, lock_name: str) -> list[str] | None:
    """The folders inside `workdir`, innermost first, when its lock file is its only file (a
    run refused after making its checkpoints/ folder); None when it holds anything else."""
    if os.listdir(workdir) == [lock_name]:
        return []

    def unreadable(error: OSError):  # (os.walk skips a folder it cannot list: taken for empty)
        raise error

    folders = []
    for root, dirs, files in os.walk(workdir, topdown=False, onerror=unreadable):
        if files != ([lock_name] if root == workdir else []) or any(
                os.path.islink(os.path.join(root, name)) for name in dirs):
            return None
        folders += [os.path.join(root, name) for name in dirs]
    return folders


def _remove_if_unused(workdir: str, lock_name: str, made: str) -> None:
    """Removes `workdir`'s lock file and the folders up to `made` when the lock file and empty
    folders are all they hold. Best effort: a run starting there meanwhile keeps them."""
    try:
        folders = _empty_folders(workdir, lock_name)
        if folders is None:
            return
        for folder in folders:
            os.rmdir(folder)  # (only while empty)
        os.remove(os.path.join(workdir, lock_name))
        path = os.path.abspath(workdir)
        while True:
            os.rmdir(path)  # (only while empty)
            if path == made:
                return
            path = os.path.dirname(path)
    except OSError:
        pass


def _why_not_made(path: str, error: OSError) -> str:
    """What stops a folder being made at `path`: the file on its way, else the OS's reason."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return f"{parent} is a file" if os.path.isfile(parent) else error.strerror or str(error)


@contextlib.contextmanager
def hold(workdir: str, wait: Callable[[str], None] | None = None, lock_name: str = LOCK_NAME,
         named: str = "workdir ") -> Iterator[None]:
    """Holds `<workdir>/<lock_name>` (creating the workdir) until the block ends. Without
    `wait`, a workdir made here that holds nothing else by then (empty folders aside) is
    removed with its lock: a run refused at start-up (a config error) leaves no folder behind.
    (A waiter would go on to hold a lock file no longer there, beside a new one.)

    Raises WorkdirBusyError when another process holds it; with `wait`, calls wait(holder)
    once instead and blocks until the holder lets go (or dies). A lock of another name in the
    same folder is another lock (a run may prepare data into its own workdir). `named`: how
    an error names the folder ("workdir ", "config.train.feature_cache_dir=").
    """
    if fileio.is_remote(workdir):
        log.warning("%s is not locked against a second run at the same time (gs:// workdirs cannot be locked)",
                    workdir)
        yield
        return
    if not workdir:
        raise ValueError("the workdir must be a folder's path, got ''")
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise ValueError(f"{named}{workdir} is a file; give a folder")
    made = _first_missing(workdir) if wait is None else None
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as error:  # a file on its path (Errno 20), no permission
        raise ValueError(f"{named}{workdir}: cannot make the folder ({_why_not_made(workdir, error)})") from None
    with _held(workdir, lock_name, wait, made):
        yield


@contextlib.contextmanager
def _held(workdir: str, lock_name: str, wait: Callable[[str], None] | None, made: str | None) -> Iterator[None]:
    """The lock held for the block; then, still held, the folders up to `made` (those `hold` made)
    removed when the lock file is all they hold."""
    path = os.path.join(workdir, lock_name)
    with _open_lock_file(workdir, path) as lock_file:
        locked = _try_lock(lock_file, workdir)
        if locked is None:
            yield
            return
        if not locked:
            lock_file.seek(0)
            holder = _holder_named(lock_file)
            if wait is None:
                raise WorkdirBusyError(f"workdir {workdir} is in use by {holder}; wait for that run to end or stop "
                                       f"it, or choose another --workdir (lock file: {path})", holder)
            wait(holder)
            fcntl.flock(lock_file, fcntl.LOCK_EX)
        lock_file.truncate(0)
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        lock_file.write(f"{os.getpid()}@{socket.gethostname()} since {started}\n")
        lock_file.flush()
        try:
            yield
        finally:
            if made is not None:  # (held: a run that starts meanwhile locks a new file, which stays)
                _remove_if_unused(workdir, lock_name, made)
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _open_lock_file(workdir: str, path: str):
    try:
        return open(path, "a+", encoding="utf-8")
    except FileNotFoundError:  # the folder removed just now by a run that made it and wrote nothing
        os.makedirs(workdir, exist_ok=True)
        return open(path, "a+", encoding="utf-8")


def _try_lock(lock_file, workdir: str) -> bool | None:
    """True: locked; False: another process holds the lock; None: the file system has no locks
    (Lustre without -o flock, NFSv3 without lockd), where a run must still start: it warns."""
    try:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # once more: `holder` takes the lock for an instant to read it
            time.sleep(0.1)
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno not in _NO_LOCKS:
            raise
        log.warning("%s is not locked against a second run at the same time: its file system does not support "
                    "locks (%s)", workdir, os.strerror(e.errno), extra=PROCESS_SPECIFIC)
        return None

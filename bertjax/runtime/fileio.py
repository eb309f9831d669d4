"""File operations on local paths and remote URLs (gs://...).

Local paths go through the standard library; anything with a scheme goes through
`tf.io.gfile`, imported only then. So a process that touches only local files never
imports TensorFlow: prepare's worker processes stay small and start fast, which matters on
hosts with hundreds of cores.
"""

from __future__ import annotations

import errno
import glob as glob_lib
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import socket
import stat
import sys
import tempfile
from typing import IO, Any, Callable


def is_remote(path: str) -> bool:
    return "://" in path


def _gfile():
    from bertjax.runtime.tf_cpu import tf
    return tf.io.gfile


def remote_errors() -> tuple[type[BaseException], ...]:
    """TensorFlow's errors for a remote file missing or unreadable (gfile raises them, and they
    are no OSError), once TensorFlow is loaded (a remote path loads it); () before."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not hasattr(tf, "errors"):
        return ()
    return tf.errors.NotFoundError, tf.errors.PermissionDeniedError, tf.errors.UnauthenticatedError


def join(*parts: str) -> str:
    return posixpath.join(*parts) if is_remote(parts[0]) else os.path.join(*parts)


def absolute(path: str) -> str:
    """A local `path` made absolute (a record of it names the same file from any folder); a
    remote one as it is."""
    return path if is_remote(path) else os.path.abspath(path)


def parent(path: str) -> str:
    """The directory holding `path` (for remote paths, the prefix before the last '/')."""
    if is_remote(path):
        return posixpath.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(path))


def check_can_make(folder: str, named: str) -> None:
    """ValueError unless the local `folder` exists or can be made: its nearest existing ancestor
    a folder a file can be made in, said before the work whose output it holds (the write's own
    error came after it, a traceback). Tried by making and removing a file: permission bits do
    not stop root (os.access says yes), and some folders refuse files whatever their bits
    (/proc). `named`: the setting, for the message. A remote folder: no check."""
    if not folder:  # (else the current folder's files, or an errno after the work)
        raise ValueError(f"{named} is empty; give a folder")
    if is_remote(folder):
        return
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"{named}={folder}: {existing} is a file; give a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".bertjax-write-check-", dir=existing)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise ValueError(f"{named}={folder}: cannot write in {existing} ({e.strerror or e})") from None


def open_file(path: str, mode: str = "r") -> IO:
    """Like open(path, mode) (text modes are UTF-8)."""
    if is_remote(path):
        return _gfile().GFile(path, mode)
    return open(path, mode) if "b" in mode else open(path, mode, encoding="utf-8")


def exists(path: str) -> bool:
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def makedirs(path: str) -> None:
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def rmtree(path: str) -> None:
    if is_remote(path):
        _gfile().rmtree(path)
    else:
        shutil.rmtree(path)


def remove(path: str) -> None:
    """Deletes file `path`; nothing if there is none."""
    if is_remote(path):
        if _gfile().exists(path):
            _gfile().remove(path)
    elif os.path.exists(path):
        os.remove(path)


def rename(source: str, target: str) -> None:
    """Moves `source` to `target`, replacing it (atomic on local file systems)."""
    if is_remote(source):
        _gfile().rename(source, target, overwrite=True)
    else:
        os.replace(source, target)


def same_file(path: str, other: str) -> bool:
    """Whether `other` exists and is `path` (local: after resolving links; remote: by name), so
    that writing it would overwrite `path`."""
    if is_remote(path) or is_remote(other):
        return path.rstrip("/") == other.rstrip("/")
    return os.path.exists(path) and os.path.exists(other) and os.path.samefile(path, other)


def can_read_twice(path: str) -> bool:
    """False for a pipe, a socket or a terminal (/dev/stdin, bash's <(...)): what a first
    reading takes, a second does not see. Anything else (a file, an object store's, a
    folder or a missing path, which their readers name): True."""
    if is_remote(path):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return True
    return not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode))


def isdir(path: str) -> bool:
    return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def listdir(path: str) -> list[str]:
    """Names in directory `path` (sub-directories without a trailing slash)."""
    if is_remote(path):
        return [name.rstrip("/") for name in _gfile().listdir(path)]
    return os.listdir(path)


def copy(source: str, target: str) -> None:
    """Copies file `source` to `target` (either may be remote), replacing it."""
    if is_remote(source) or is_remote(target):
        _gfile().copy(source, target, overwrite=True)
    else:
        shutil.copyfile(source, target)


def read_bytes(path: str) -> bytes:
    with open_file(path, "rb") as f:
        return f.read()


def glob(pattern: str) -> list[str]:
    """The paths `pattern` matches; locally `**` matches any depth of folders (gs://'s glob has
    no `**`: `sources.expand_patterns` refuses it there)."""
    return _gfile().glob(pattern) if is_remote(pattern) else glob_lib.glob(pattern, recursive=True)


def escape(path: str) -> str:
    """`path` as a glob pattern matching itself only: a folder named "run[1]" is not the
    pattern "run1". Python's glob has no escape character, so its wildcards go in brackets;
    TensorFlow's remote glob is C fnmatch, where a backslash escapes the next character (and
    so must itself be escaped: "a\\b" as given would match "ab")."""
    if is_remote(path):
        return "".join("\\" + c if c in "\\*?[" else c for c in path)
    return glob_lib.escape(path)


def size(path: str) -> int:
    """Bytes in the file; FileNotFoundError if there is none."""
    if not is_remote(path):
        return os.path.getsize(path)
    gfile = _gfile()
    if not gfile.exists(path):
        raise FileNotFoundError(path)
    return gfile.stat(path).length


def read_json(path: str) -> Any:
    """The JSON value in `path` (UTF-8, a leading byte-order mark allowed); a
    UnicodeDecodeError or JSONDecodeError that names the file when it is not UTF-8 or JSON."""
    data = read_bytes(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UnicodeDecodeError(e.encoding, e.object, e.start, e.end, f"{e.reason} in {path}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise json.JSONDecodeError(f"{path}: not valid JSON ({e.msg})", e.doc, e.pos) from None


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically (to a temporary name, then renamed): a reader sees
    the old file or the whole new one."""
    write_with(path, lambda f: f.write(data))


# A file before its rename (write_with's NAME.tmp-<pid>-<random>, temporary_name's
# NAME.tmp-<host>-<pid>): one that a killed process (kill -9) left behind.
INTERRUPTED_WRITE = re.compile(r".+\.tmp-[\w.-]+")


def write_with(path: str, write: Callable[[Any], Any]) -> None:
    """write(binary file) to `path` atomically, as `write_bytes`. A local file is written as
    `write` goes (large output is never held whole in memory) and reaches the disk before it
    takes its name (else a machine that stops, as a preempted VM past its grace period, can
    leave an empty file under the name: a 'not valid JSON' on every later run); a remote one is
    built in memory first, since a remote file being written cannot seek, which zip formats
    (.npz) do."""
    # The pid alone is not unique: processes of a multi-host run on gs:// may write the same file
    # (host_split=global_batch's epoch sizes) and have the same pid (1, in containers).
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"  # (INTERRUPTED_WRITE: one a kill left)
    try:
        if is_remote(path):
            buffer = io.BytesIO()
            write(buffer)
            with open_file(tmp, "wb") as f:
                f.write(buffer.getvalue())
            rename(tmp, path)
        else:
            with open_file(tmp, "wb") as f:
                write(f)
            finish_write(tmp, path)
    except BaseException as e:  # a full disk, an interrupt: no partial file left beside `path`
        if exists(tmp):
            remove(tmp)
        if isinstance(e, OSError) and e.errno and e.filename is None:  # (a write's error names no file)
            raise OSError(e.errno, e.strerror, path) from None
        raise


def finish_write(tmp: str, path: str) -> None:
    """Renames the complete file `tmp` (closed) to `path`. A local one reaches the disk before it
    takes the name, and the rename after: a machine that stops (a preempted VM past its grace
    period) leaves no `path` or the whole file, never an empty or cut one under the name."""
    if not is_remote(path):
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    rename(tmp, path)
    if not is_remote(path):
        _sync_folder(os.path.dirname(os.path.abspath(path)))


def _sync_folder(folder: str) -> None:
    """The folder's entries (a rename) to disk, where its file system can (some network and
    virtual ones refuse a folder's fsync: the file is in place all the same)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def write_json(path: str, value: Any) -> None:
    """Writes `value` as JSON atomically."""
    write_bytes(path, json.dumps(value, indent=1, sort_keys=True).encode("utf-8"))


def files_under(folder: str) -> list[str]:
    """The files under `folder`, walked, named as join(folder, ...) names them; [] for none."""
    if not isdir(folder):
        return []
    walk = _gfile().walk if is_remote(folder) else os.walk
    return [join(top, name) for top, _, names in walk(folder) for name in names]


def content_hash(path: str) -> str:
    """SHA-256 of a file's bytes (read in 1 MB blocks), hex."""
    digest = hashlib.sha256()
    with open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(path: str) -> str:
    """What identifies the files under `path` (a file or a folder, walked) without reading
    them: SHA-256 of each one's relative name, size and modification time, hex. A file
    rewritten, added or removed changes it."""
    entries = []
    if is_remote(path):
        gfile = _gfile()
        walked = ((top, files) for top, _, files in gfile.walk(path)) if gfile.isdir(path) else [("", [path])]
        for top, files in walked:
            for name in files:
                stat = gfile.stat(join(top, name) if top else name)
                entries.append((posixpath.relpath(join(top, name), path) if top else "", stat.length, stat.mtime_nsec))
    else:
        walked = ((top, files) for top, _, files in os.walk(path)) if os.path.isdir(path) else [("", [path])]
        for top, files in walked:
            for name in files:
                full = os.path.join(top, name) if top else name
                stat = os.stat(full)
                entries.append((os.path.relpath(full, path) if top else "", stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(json.dumps(sorted(entries)).encode()).hexdigest()


def temporary_name(output: str, pid: int | str | None = None) -> str:
    """The name a file `output` is written under until complete: the host and the process (a
    second run writing the same output, here or on another host, has a file of its own).
    pid: another process's (default: this one's; "": the name's part before any pid)."""
    return f"{output}.tmp-{socket.gethostname()}-{os.getpid() if pid is None else pid}"


def remove_killed_runs_files(output: str, log: Callable[[str], None], hidden: bool = False) -> None:
    """Removes the `temporary_name` file (or folder; `hidden`: its name after a dot) of a run on
    this host killed where it could not clean up (kill -9, the out-of-memory killer), whose
    process is gone: it can hold gigabytes nothing will read. A running process's (another run
    writing the same output) is left alone, and so is every other host's (a shared folder: its
    processes cannot be asked from here)."""
    folder = os.path.dirname(os.path.abspath(output))
    if is_remote(output) or not os.path.isdir(folder):
        return
    prefix = ("." if hidden else "") + os.path.basename(temporary_name(output, pid=""))
    for name in os.listdir(folder):
        pid = name[len(prefix):]
        if not (name.startswith(prefix) and pid.isdigit() and len(pid) < 10):
            continue
        try:
            os.kill(int(pid), 0)
            continue  # running (here): its own run's file
        except ProcessLookupError:
            pass
        except PermissionError:  # another user's process, running
            continue
        left = os.path.join(folder, name)
        try:  # (best effort: another user's, in a shared folder, may not be ours to remove)
            shutil.rmtree(left) if os.path.isdir(left) and not os.path.islink(left) else os.remove(left)
        except OSError:
            continue
        log(f"removed {left}, left by a killed run (process {pid}, gone)")


# The first bytes of files that are not text, and what they are: read as text, their bytes
# would give garbage lines (a corpus's "documents" and a count of dropped lines), or a
# "not UTF-8" that says nothing of why.
_NOT_TEXT = {b"\x1f\x8b": "gzip-compressed", b"BZh": "bzip2-compressed", b"\x28\xb5\x2f\xfd": "zstd-compressed",
             b"\xfd7zXZ\x00": "xz-compressed", b"PK\x03\x04": "a zip archive", b"PAR1": "Parquet",
             b"\x89PNG": "a PNG image", b"%PDF": "a PDF",
             # Windows' "Unicode" text: each line would read as ASCII with NULs between, and no
             # blank line would end a document.
             b"\xff\xfe": "UTF-16 or UTF-32 (byte-order mark FF FE)", b"\xfe\xff": "UTF-16 (byte-order mark FE FF)",
             b"\x00\x00\xfe\xff": "UTF-32 (byte-order mark 00 00 FE FF)"}


def not_text(head: bytes) -> str | None:
    """What a file whose first bytes are `head` is, where they say it is no text ("gzip-compressed",
    "a PDF", ...), else None."""
    return next((what for magic, what in _NOT_TEXT.items() if head.startswith(magic)), None)


# A write's errors that are the disk's (full, over quota, too large a file, read-only, not
# permitted), not the program's.
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM)


def write_folder_whole(target: str, write: Callable[[str], None], named: str, last: str = "") -> None:
    """write(folder) so that `target` (absent or empty: checked before) appears whole or not at
    all: locally into a hidden sibling renamed into place, so nothing reads a half-written folder
    (TensorFlow Serving watching for versions, a model path, a rerun refused as not empty);
    remote (gs://, where folders cannot be renamed), written locally, then uploaded with `last`
    (the file that makes the folder loadable) last, and removed if the upload fails. A local
    write that fails for the disk (full, read-only: `DISK_ERRNOS`) is a ValueError naming
    `named` (the setting) and the target, with nothing left; other errors pass as they are."""
    if is_remote(target):
        with tempfile.TemporaryDirectory(prefix="bertjax-write-") as local:
            write(local)
            files = sorted(os.path.relpath(os.path.join(top, name), local)
                           for top, _, names in os.walk(local) for name in names)
            try:
                for relative in sorted(files, key=lambda name: name == last):  # (a stable sort)
                    makedirs(parent(join(target, relative)))
                    copy(os.path.join(local, relative), join(target, relative))
            except BaseException:
                if exists(target):
                    rmtree(target)
                raise
        return
    target = os.path.abspath(target)  # (without a trailing slash: the folder's own name)
    # Hidden, named by host and process: a killed run's is removed by the next (a random name
    # left it for good); one of this pid is a killed run's too.
    tmp = os.path.join(os.path.dirname(target), "." + os.path.basename(temporary_name(target)))
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        remove_killed_runs_files(target, lambda line: print(line, file=sys.stderr), hidden=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.mkdir(tmp)
    except OSError as e:
        raise ValueError(f"{named}: cannot make a folder in {os.path.dirname(target)} ({e.strerror})") from None
    try:
        write(tmp)
        if os.path.isdir(target):
            os.rmdir(target)  # empty: checked before anything was written
        os.replace(tmp, target)
    except OSError as e:
        if e.errno not in DISK_ERRNOS:
            raise
        raise ValueError(f"{named}: cannot write {target} ({e.strerror or e}); nothing of it was left") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left once renamed; a failed write's files

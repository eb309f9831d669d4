"""Tests for bertjax.runtime.workdir_lock: one run per workdir, released however the holder ends."""

import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from bertjax.runtime import workdir_lock

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_HOLDER = textwrap.dedent("""
    import sys
    from bertjax.runtime import workdir_lock
    with workdir_lock.hold(sys.argv[1]):
        print("holding", flush=True)
        sys.stdin.read()  # until the test closes stdin, or kills this process
    print("released", flush=True)
""")


def _start_holder(workdir):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(workdir)], env=dict(os.environ, PYTHONPATH=REPO),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "holding\n"
    return holder


@pytest.mark.parametrize("ending", ["exits", "killed"])
def test_a_second_run_is_refused_until_the_first_ends(tmp_path, ending):
    workdir = tmp_path / "run"
    holder = _start_holder(workdir)
    with pytest.raises(workdir_lock.WorkdirBusyError) as refused:
        with workdir_lock.hold(str(workdir)):
            pytest.fail("entered a workdir another process holds")
    message = str(refused.value)
    assert f"workdir {workdir} is in use by {holder.pid}@{socket.gethostname()} since " in message
    assert "\n" not in message and str(workdir / ".lock") in message
    if ending == "exits":
        holder.stdin.close()
        assert holder.stdout.read() == "released\n"
    else:
        holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock
    assert holder.wait(timeout=60) == (0 if ending == "exits" else -signal.SIGKILL)
    with workdir_lock.hold(str(workdir)):
        assert (workdir / ".lock").read_text().startswith(f"{os.getpid()}@")


def test_the_same_process_cannot_enter_twice_and_may_enter_again_after(tmp_path):
    with workdir_lock.hold(str(tmp_path)):
        with pytest.raises(workdir_lock.WorkdirBusyError, match=f"in use by {os.getpid()}@"):
            with workdir_lock.hold(str(tmp_path)):
                pass
    with workdir_lock.hold(str(tmp_path)):
        pass


def test_a_workdir_made_for_a_run_that_wrote_nothing_is_removed(tmp_path):
    """A launcher refused at start-up (a config error, after taking the lock) left a new folder
    holding only its .lock (a walkthrough). The folders the lock made go when nothing else was
    written; a folder that was there, or one written in, stays; so does a waited-for lock's."""
    with pytest.raises(ValueError, match="refused"):
        with workdir_lock.hold(str(tmp_path / "new" / "run")):
            raise ValueError("refused")
    assert os.listdir(tmp_path) == []
    # Refused once its empty checkpoints/ was made (fine-tuning's reuse_head check: a walkthrough).
    with pytest.raises(ValueError, match="refused"):
        with workdir_lock.hold(str(tmp_path / "new" / "run")):
            (tmp_path / "new" / "run" / "checkpoints" / "tmp").mkdir(parents=True)
            raise ValueError("refused")
    assert os.listdir(tmp_path) == []
    with workdir_lock.hold(str(tmp_path / "new" / "run")):
        (tmp_path / "new" / "run" / "checkpoints" / "1").mkdir(parents=True)
        (tmp_path / "new" / "run" / "checkpoints" / "1" / "meta.json").write_text("{}\n")
    assert sorted(os.listdir(tmp_path / "new" / "run")) == [".lock", "checkpoints"]
    shutil.rmtree(tmp_path / "new")
    with workdir_lock.hold(str(tmp_path / "new" / "run")):
        (tmp_path / "new" / "run" / "metrics.jsonl").write_text("{}\n")
    assert sorted(os.listdir(tmp_path / "new" / "run")) == [".lock", "metrics.jsonl"]
    (tmp_path / "there").mkdir()
    with workdir_lock.hold(str(tmp_path / "there")):
        pass
    assert os.listdir(tmp_path / "there") == [".lock"]
    with workdir_lock.hold(str(tmp_path / "waited"), wait=lambda holder: None, lock_name=".prepare.lock"):
        pass
    assert os.listdir(tmp_path / "waited") == [".prepare.lock"]


def test_a_run_refused_as_busy_removes_nothing(tmp_path, monkeypatch):
    """A second launch that saw the workdir missing, then found it locked by the first, removed
    the first's lock and folder on its way out (a review): only a run that held the lock removes
    what it made."""
    workdir = tmp_path / "run"
    holder = _start_holder(workdir)
    monkeypatch.setattr(workdir_lock, "_first_missing", lambda path: str(workdir))  # (as if it were missing)
    with pytest.raises(workdir_lock.WorkdirBusyError):
        with workdir_lock.hold(str(workdir)):
            pytest.fail("entered a workdir another process holds")
    assert os.listdir(workdir) == [".lock"] and f"{holder.pid}@" in (workdir / ".lock").read_text()
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0


def test_gs_workdirs_are_not_locked_and_say_so(caplog):
    with caplog.at_level(logging.WARNING, logger="bertjax.runtime.workdir_lock"):
        with workdir_lock.hold("gs://bucket/run"):
            with workdir_lock.hold("gs://bucket/run"):
                pass
    assert "gs://bucket/run is not locked against a second run" in caplog.text


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_file_system_without_locks_runs_unlocked_and_says_so(tmp_path, monkeypatch, caplog, code):
    """Lustre without -o flock (ENOSYS) and NFSv3 without lockd (ENOLCK) refuse flock itself;
    the run stopped with "[Errno 38] Function not implemented", naming neither file nor folder."""
    def refuse(file, operation):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(workdir_lock.fcntl, "flock", refuse)
    with caplog.at_level(logging.WARNING, logger="bertjax.runtime.workdir_lock"):
        with workdir_lock.hold(str(tmp_path / "run")):
            pass
    assert f"{tmp_path / 'run'} is not locked against a second run at the same time: its file system does not " \
           f"support locks ({os.strerror(code)})" in caplog.text


def test_other_lock_errors_still_stop_the_run(tmp_path, monkeypatch):
    def fail(file, operation):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(workdir_lock.fcntl, "flock", fail)
    with pytest.raises(OSError, match="Input/output error"):
        with workdir_lock.hold(str(tmp_path / "run")):
            pass


def test_the_holder_is_read_without_keeping_the_lock_and_a_run_starting_meanwhile_starts(tmp_path, monkeypatch):
    """An export of a run still training said it had stopped (a walkthrough): `holder` tells who
    holds a workdir; the instant it takes the lock shared to tell does not refuse a run starting."""
    workdir = tmp_path / "run"
    assert workdir_lock.holder(str(workdir)) is None  # no lock file
    holder = _start_holder(workdir)
    assert workdir_lock.holder(str(workdir)).startswith(f"{holder.pid}@{socket.gethostname()} since ")
    holder.stdin.close()
    assert holder.stdout.readline() == "released\n" and holder.wait(30) == 0
    assert workdir_lock.holder(str(workdir)) is None  # released: the file stays, naming the last holder
    # A run that starts while `holder` holds the lock for its instant tries again and starts.
    import fcntl

    flock, calls = fcntl.flock, []

    def busy_once(lock_file, operation):
        calls.append(operation)
        if len(calls) == 1:
            raise BlockingIOError(errno.EWOULDBLOCK, "held shared by holder()")
        return flock(lock_file, operation)

    monkeypatch.setattr(fcntl, "flock", busy_once)
    with workdir_lock.hold(str(workdir)):
        assert len(calls) == 2

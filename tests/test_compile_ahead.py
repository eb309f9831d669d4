"""CompileAhead: the background thread compiles in the given order, `take` never queues a key
behind the others, errors reach the caller of `take`."""

import threading
import time

import pytest

from bertjax.runtime.compile_ahead import CompileAhead, compiling


class Recorder:
    """A stand-in compiler: records which thread compiled which key; `gate` holds key "slow"."""

    def __init__(self):
        self.compiled: list[tuple[str, str]] = []
        self.gate = threading.Event()
        self.started = threading.Event()

    def __call__(self, key):
        if key == "slow":
            self.started.set()
            assert self.gate.wait(10)
        if key == "broken":
            raise ValueError("cannot compile 'broken'")
        self.compiled.append((key, threading.current_thread().name))
        return f"program {key}", 0.25


def test_keys_compile_in_order_in_the_background_and_are_handed_over_once_ready():
    compiler = Recorder()
    with CompileAhead(compiler, ["a", "b", "c"]) as ahead:
        deadline = time.time() + 10
        while len(compiler.compiled) < 3 and time.time() < deadline:
            time.sleep(0.01)
        assert [key for key, _ in compiler.compiled] == ["a", "b", "c"]
        assert all(thread.startswith("bertjax-compile") for _, thread in compiler.compiled)
        program, seconds, waited = ahead.take("b")
        assert (program, seconds, waited) == ("program b", 0.25, 0.0)
        # Idle and open, its thread alive, it compiles nothing: interpreter shutdown ends the
        # thread at once (counted, one process of a multi-host run left by os._exit: a walkthrough).
        while compiling() and time.time() < deadline:
            time.sleep(0.01)
        assert not compiling()
        assert any(thread.name.startswith("bertjax-compile") and thread.is_alive() for thread in threading.enumerate())
    assert len(compiler.compiled) == 3  # nothing compiled twice


def test_a_key_not_started_is_compiled_by_the_caller_at_once_and_a_running_one_is_waited_for():
    compiler = Recorder()
    ahead = CompileAhead(compiler, ["slow", "later", "a"])
    assert compiler.started.wait(10)  # the thread is held in "slow"
    assert compiling()  # what cli._exit asks before it lets the interpreter's shutdown wait
    program, _, _ = ahead.take("later")  # not queued behind "slow"
    assert program == "program later" and compiler.compiled == [("later", threading.current_thread().name)]
    assert ahead.take("unlisted")[0] == "program unlisted"
    threading.Timer(0.3, compiler.gate.set).start()
    program, _, waited = ahead.take("slow")
    assert program == "program slow" and waited >= 0.2
    ahead.close()
    assert ahead.take("a")[0] == "program a"  # after close: compiled by the caller if the thread had not
    assert [key for key, _ in compiler.compiled].count("later") == 1
    deadline = time.time() + 10
    while compiling() and time.time() < deadline:  # closed and idle: the thread ends
        time.sleep(0.01)
    assert not compiling()


def test_an_error_while_compiling_is_raised_by_take_for_that_key():
    compiler = Recorder()
    with CompileAhead(compiler, ["broken", "a"]) as ahead:
        with pytest.raises(ValueError, match="cannot compile 'broken'"):
            ahead.take("broken")
        assert ahead.take("a")[0] == "program a"


def test_a_stopped_multi_host_process_leaves_jaxs_shutdown_barrier_before_any_os_exit(monkeypatch):
    """Every process of a multi-host run stops at the same step; one that then ended by os._exit
    (a compile under way there) skipped JAX's shutdown barrier, and process 0, waiting there,
    aborted later with a C++ stack instead of exit 3 (a walkthrough). A stop passes the
    barrier first, whatever each process does next; an error alone does not wait for the others."""
    import jax

    from bertjax.runtime import cli, compile_ahead

    calls = []

    def os_exit(code):
        calls.append(("os._exit", code))
        raise SystemExit(code)

    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(jax.distributed, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(cli.os, "_exit", os_exit)
    monkeypatch.setattr(compile_ahead, "compiling", lambda: True)
    for code, expected in ((cli.EXIT_STOPPED, ["shutdown", ("os._exit", cli.EXIT_STOPPED)]),
                           (cli.EXIT_ERROR, [("os._exit", cli.EXIT_ERROR)])):
        calls.clear()
        with pytest.raises(SystemExit):
            cli._exit(code)
        assert calls == expected


def test_a_collective_whose_peer_has_gone_is_one_line_and_an_exit_at_once(monkeypatch):
    """A process of a two-process run that failed alone (a file missing on its host) or was killed
    left the other with an 88-line traceback ("Gloo AllGather failed: ... Connection closed by
    peer"), then a wait at JAX's shutdown barrier and a C++ abort (a walkthrough)."""
    import jax

    from bertjax.runtime import cli

    error = RuntimeError("UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/pair.cc:547] "
                         "Connection closed by peer [127.0.0.1]:11186")
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    assert cli.expected_failure(error) is None  # one process: no peer, a bug's traceback
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    assert cli.expected_failure(error).startswith(
        "another process of this run has gone (its own output says why): this one stops too (UNKNOWN: Gloo")
    # A peer killed inside a training step's all-reduce resets the connection (a walkthrough: a
    # traceback, then a 90 s wait for the heartbeat timeout and an abort).
    reset = RuntimeError("UNKNOWN: Gloo all-reduce failed: [external/gloo/gloo/transport/tcp/pair.cc:538] Read error "
                         "[127.0.0.1]:39088: Connection reset by peer")
    assert cli.expected_failure(reset).startswith("another process of this run has gone")
    assert cli.expected_failure(RuntimeError("gs://b/x: Connection reset by peer")) is None  # a remote read's
    # ...and one multihost_utils raises as a ValueError (a peer refused at start-up: a walkthrough).
    assert cli.input_error_line(ValueError(reset.args[0])).startswith("another process of this run has gone")
    assert cli.input_error_line(ValueError("config.train.num_steps must be >= 1")) == (
        "config.train.num_steps must be >= 1")

"""bertjax.runtime.console: durations, the rate and ETA of a phase with pauses (a fake clock),
and one copy of a multi-process run's logs."""

import io
import os
import signal
import sys

import pytest

from bertjax.runtime import console


@pytest.fixture
def clock(monkeypatch):
    """A settable time.perf_counter for bertjax.runtime.console: clock[0] is now, in seconds."""
    now = [100.0]
    monkeypatch.setattr(console.time, "perf_counter", lambda: now[0])
    return now


def test_format_duration():
    assert [console.format_duration(s) for s in (5, 62, 3725, -3, 59.6)] == ["5s", "1m02s", "1h02m", "0s", "1m00s"]


def test_the_rate_leaves_pauses_out_and_the_eta_counts_them(clock):
    """Evaluations and checkpoints (pauses) come again: an ETA without them fell short by every
    evaluation still to come (a review); the rate is the steps' own."""
    progress = console.Progress(total=101, stream=io.StringIO())
    assert progress.eta_seconds() is None
    clock[0] += 30.0  # the first step compiles
    progress.advance(1)
    assert progress.eta_seconds() is None
    for step in range(2, 52):
        clock[0] += 0.5
        progress.advance(step)
    progress.pause()
    clock[0] += 40.0  # an evaluation
    progress.resume()
    progress.pause(recurring=False)
    clock[0] += 30.0  # a compile for a new batch shape: once
    progress.resume()
    assert progress.steps_per_second() == pytest.approx(2.0)
    assert progress.eta_seconds() == pytest.approx(65.0)  # 50 steps left at 1.3 s each (0.5 + an evaluation's 0.8)
    progress.pause()
    clock[0] += 20.0  # inside the next evaluation: neither the rate nor the ETA moves
    assert progress.steps_per_second() == pytest.approx(2.0) and progress.eta_seconds() == pytest.approx(65.0)


def test_a_pool_of_workers_is_timed_from_its_start(clock):
    """Data preparation's 64 workers finish their first 64 units together after 60 s: skipped
    as if a compilation, the rate was 64 units over no time and the ETA a fraction of the true
    one (a review: 9.6 s shown for 900 s left). Timed from the start: 1.07 units/s, 900 s."""
    progress = console.Progress(total=1024, stream=io.StringIO(), timed_from_start=True)
    for round_ in (1, 2):
        clock[0] += 60.0
        for unit in range(64 * (round_ - 1) + 1, 64 * round_ + 1):
            progress.advance(unit)
        if round_ == 1:
            assert progress.steps_per_second() == pytest.approx(64 / 60) and progress.eta_seconds() == \
                pytest.approx(900.0)
    assert progress.eta_seconds() == pytest.approx(840.0)


def test_a_pause_before_the_first_step_does_not_count(clock):
    """Compiling ahead (fine-tuning's length buckets) before step 1 used to be subtracted from
    the timed window, so the rate was huge and the ETA 0s for the first hundred steps."""
    progress = console.Progress(total=375, stream=io.StringIO())
    progress.pause()
    clock[0] += 7.0
    progress.resume()
    progress.advance(1)
    for step in range(2, 51):
        clock[0] += 0.1
        progress.advance(step)
    assert progress.steps_per_second() == pytest.approx(10.0)
    assert progress.eta_seconds() == pytest.approx(32.5)


def test_plain_lines_off_a_terminal(clock):
    stream = io.StringIO()
    progress = console.Progress(total=10, stream=stream)
    progress.show("loss 1.0")
    progress.advance(1)
    progress.line("step 1/10 loss 1.0")
    progress.close()
    assert stream.getvalue() == "step 1/10 loss 1.0\n"  # no redraws, no escape codes
    quiet = io.StringIO()
    console.Progress(total=10, stream=quiet, enabled=False).line("not shown")
    assert quiet.getvalue() == ""


def test_status_lines_off_a_terminal_every_line_seconds(clock):
    stream = io.StringIO()
    progress = console.Progress(total=10, label="examples", unit="examples", stream=stream, line_seconds=30.0)
    for step in range(1, 6):
        clock[0] += 10.0
        progress.advance(step)
    assert stream.getvalue() == "examples 3/10 0.1 examples/s ETA 1m10s\n"  # at 30 s; the next is due at 60 s


def test_phase_clock_sums_phases_and_the_rest(clock):
    phases = console.PhaseClock()
    with phases.phase("compile"):
        clock[0] += 12.0
    clock[0] += 30.0  # unnamed: the rest (less the 3 s added to compile below)
    phases.add("compile", 3.0)
    with pytest.raises(KeyError), phases.phase("evaluate"):  # a phase that fails still counts
        clock[0] += 5.0
        raise KeyError
    assert phases.seconds("train") == {"compile": 15.0, "evaluate": 5.0, "train": 27.0, "total": 47.0}
    assert phases.summary("train") == "time: 47s = 15s compile + 5s evaluate + 27s train"


def test_the_live_line_cuts_the_values_not_the_rate_and_eta(clock, monkeypatch):
    """On a narrow terminal the logged values pushed the rate and ETA off the line, leaving
    a number's first digits (a review): the values give way, whole pairs, the last first."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(console.shutil, "get_terminal_size", lambda fallback: os.terminal_size((90, 24)))
    stream = Terminal()
    progress = console.Progress(total=60, label="fine-tune demo", stream=stream)
    progress.advance(1)
    for step in range(2, 23):
        clock[0] += 0.1
        progress.advance(step)
    progress.show("loss 0.6951 accuracy 0.4688 mse 0.1234 something 1.0000")
    drawn = stream.getvalue().split("\r\x1b[K")[-1]
    assert drawn == "fine-tune demo 22/60 [=======             ]  37% loss 0.6951 10.0 steps/s ETA 4s", drawn


def test_a_live_line_whose_result_follows_is_cleared(clock):
    """An evaluation's finished bar stayed above its own result line on a terminal, two lines
    for every evaluation (a review)."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for keep, ending in ((True, "\n"), (False, "\r\x1b[K")):
        stream = Terminal()
        progress = console.Progress(total=2, label="evaluate dev", stream=stream)
        progress.advance(1), progress.advance(2)
        progress.close(keep=keep)
        written = stream.getvalue()
        assert written.endswith(ending) and "evaluate dev 2/2" in written.split("\r\x1b[K")[-1 - (not keep)]


def test_the_phase_summary_adds_up(clock):
    """Parts under half a second were dropped and each rounded alone: '10s = 5s compile + 2s
    evaluate + 2s train and start-up' (a review). The rest takes what the shown parts leave."""
    phases = console.PhaseClock()
    for name, seconds in (("compile", 4.4), ("evaluate", 1.4), ("save", 0.4), ("predict", 0.45)):
        phases.add(name, seconds)
    clock[0] += 9.7
    assert phases.summary("train") == "time: 10s = 4s compile + 2s evaluate + 1s predict + 3s train"
    thirds = console.PhaseClock()  # three phases of 0.6 s: 1 + 1 + 1 was more than the 2 s total
    for name in ("compile", "evaluate", "save"):
        thirds.add(name, 0.6)
    clock[0] += 1.8
    assert thirds.summary() == "time: 2s = 1s compile + 1s save"


def test_an_orbax_error_keeps_its_line_but_not_its_traceback():
    """A failed save makes orbax log four errors with tracebacks (some 300 lines) before
    bertjax's own one-line error: quiet, their lines stay and the tracebacks go."""
    import logging

    from bertjax.runtime import cli

    try:
        raise OSError("disk full")
    except OSError:
        import sys

        exc_info = sys.exc_info()
    orbax = logging.LogRecord("absl", logging.ERROR, "/x/orbax/checkpoint/async_checkpointer.py", 1,
                              "save failed", None, exc_info)
    ours = logging.LogRecord("bertjax", logging.ERROR, "/x/bertjax/trainer.py", 1, "step failed", None, exc_info)
    noise = cli._LibraryNoise()
    assert noise.filter(orbax) and noise.filter(ours)
    assert orbax.exc_info is None and ours.exc_info is exc_info
    assert logging.Formatter().format(orbax) == "save failed"
    # A second Ctrl-C while orbax waits for a save: "error: ... Save Finalize thread failed"
    # said a save failed that had not (a walkthrough). The launcher's "interrupted" line says it.
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = logging.LogRecord("absl", logging.ERROR, "/x/orbax/checkpoint/checkpoint_manager.py", 1,
                                        "Save Finalize thread (save_finalize) failed.", None, sys.exc_info())
    assert not noise.filter(interrupted)


def test_the_one_line_keeps_an_escaped_line_feed_the_user_is_told_to_type():
    """The advice for a file of carriage returns read "tr '\\r' ' '", which joins the whole file
    into one line (a review): only real line breaks become spaces."""
    from bertjax.runtime import cli

    error = ValueError("a.txt: ends lines in a carriage return;\n convert them first (tr '\\r' '\\n')")
    assert cli.error_line(error) == "a.txt: ends lines in a carriage return; convert them first (tr '\\r' '\\n')"


def test_out_of_memory_and_unreadable_remote_paths_are_one_line_errors():
    """Out of device memory and a gs:// path that is missing or forbidden are the user's to fix
    but are neither ValueError nor OSError: they ended in a traceback (a review). Any other
    runtime error stays a bug, with its traceback."""
    import jax
    import tensorflow as tf

    from bertjax.runtime import cli

    oom = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 96.00GiB.")
    assert cli.expected_failure(oom).startswith("out of device memory: lower the batch size")
    assert "allocate 96.00GiB" in cli.expected_failure(oom)
    missing = tf.errors.NotFoundError(None, None, "gs://bucket/vocb.txt; No such file or directory")
    assert cli.expected_failure(missing) == "gs://bucket/vocb.txt; No such file or directory"
    forbidden = tf.errors.PermissionDeniedError(None, None, "Error executing an HTTP request: gs://b/x 403")
    assert cli.expected_failure(forbidden).endswith("gs://b/x 403")
    # No network: libcurl's failure (a walkthrough: a 30-line traceback, exit 1, for every launcher)
    unreached = tf.errors.FailedPreconditionError(None, None, "Error executing an HTTP request: libcurl code 6 "
                                                  "meaning 'Could not resolve hostname' when reading gs://b/x")
    assert cli.expected_failure(unreached).endswith("when reading gs://b/x")
    assert cli.expected_failure(tf.errors.UnavailableError(None, None, "gs://b/x: try again")) == "gs://b/x: try again"
    assert cli.expected_failure(tf.errors.FailedPreconditionError(None, None, "a graph's op")) is None
    assert cli.expected_failure(jax.errors.JaxRuntimeError("INTERNAL: a compiler bug")) is None
    assert cli.expected_failure(RuntimeError("RESOURCE_EXHAUSTED")) is None
    assert cli.expected_failure(tf.errors.NotFoundError(None, None, "op not found")) is None  # not a path


def test_a_ctrl_c_that_quits_at_once_is_one_line_not_a_traceback(tmp_path):
    """A second Ctrl-C (the first saves and stops) raises KeyboardInterrupt, which went past the
    launchers' error handling as a traceback, and the interpreter's shutdown then waited for a
    step still compiling ahead (a review)."""
    import subprocess

    program = ("import sys, threading, time; sys.path.insert(0, {root!r})\n"
               "from bertjax.runtime import cli\n"
               "def main(argv):\n"
               "    threading.Thread(target=time.sleep, args=(600,), name='compile ahead').start()\n"
               "    raise KeyboardInterrupt\n"
               "cli.run(main)\n").format(root=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stderr.strip().splitlines() == ["interrupted (Ctrl-C)"], done.stderr
    # A Ctrl-C that lands in a destructor (TensorFlow's clean-up of its functions) is one all the
    # same: Python printed it and went on, so a second Ctrl-C saved and stopped (a walkthrough).
    program = program.replace("    raise KeyboardInterrupt\n", "    class Function:\n"
                                                                "        def __del__(self): raise KeyboardInterrupt\n"
                                                                "    Function()\n"
                                                                "    for _ in range(40): time.sleep(0.05)\n"
                                                                "    print('went on')\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stderr.strip().splitlines() == ["interrupted (Ctrl-C)"], done.stderr
    assert "went on" not in done.stdout
    # ...also where the launcher's main returns before it lands again (a review).
    returning = program.replace("    for _ in range(40): time.sleep(0.05)\n", "")
    done = subprocess.run([sys.executable, "-c", returning], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stderr.strip().splitlines() == ["interrupted (Ctrl-C)"], done.stderr
    # ...and before run(), as a launcher imports JAX and TensorFlow (a walkthrough: the imports'
    # traceback, and the interpreter's SIGINT exit).
    launcher = tmp_path / "launch" / "importing.py"  # (a launcher's: a program of the user's keeps Python's)
    launcher.parent.mkdir()
    launcher.write_text(program.replace("cli.run(main)\n", "raise KeyboardInterrupt  # in an import\n"))
    done = subprocess.run([sys.executable, str(launcher)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stderr.strip().splitlines() == ["interrupted (Ctrl-C)"], done.stderr
    (tmp_path / "mine.py").write_text(launcher.read_text())
    done = subprocess.run([sys.executable, str(tmp_path / "mine.py")], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGINT and "Traceback" in done.stderr, done.stderr


def test_the_eta_of_a_growing_batch_prices_the_steps_left_by_their_work(clock):
    """A batch warmup's early steps are small: priced by their number, the ETA at the end of a
    ramp from 1 to 4 units was under half the true one (a review)."""
    rows = lambda step: step if step <= 50 else 50 + 4 * (step - 50)  # noqa: E731  (rows before `step`)
    progress = console.Progress(total=100, stream=io.StringIO(), work=rows)
    progress.advance(1)
    for step in range(2, 51):  # 1 row a step, 0.1 s a row
        clock[0] += 0.1
        progress.advance(step)
    assert progress.eta_seconds() == pytest.approx(20.0)  # 50 steps of 4 rows at 0.1 s a row
    assert console.Progress(total=100, stream=io.StringIO()).work(7) == 7  # without: steps


def test_other_processes_log_only_what_is_their_own():
    """Every process of a multi-host run logged the same warnings (a review: N copies of each);
    process 0 now logs for all, another only what its host alone meets, and errors, named once
    however many handlers a record passes; process 0's own host's lines are named too."""
    import logging

    from bertjax.runtime import cli

    def logged(index):
        streams = [io.StringIO(), io.StringIO()]
        log = logging.getLogger(f"bertjax.test_one_copy_{index}")
        log.propagate = False
        handlers = [logging.StreamHandler(stream) for stream in streams]
        for handler in handlers:
            handler.addFilter(cli._OneCopy(index, 4))
            log.addHandler(handler)
        try:
            log.warning("config.checkpoint.every is past num_steps")
            log.warning("checkpoint %s is unreadable", "ckpt/8", extra=console.PROCESS_SPECIFIC)
            log.error("the evaluation after step %d failed", 4)
        finally:
            for handler in handlers:
                log.removeHandler(handler)
        return [stream.getvalue().splitlines() for stream in streams]

    assert logged(1) == [["process 1 of 4: checkpoint ckpt/8 is unreadable",
                          "process 1 of 4: the evaluation after step 4 failed"]] * 2
    assert logged(0) == [["config.checkpoint.every is past num_steps",
                          "process 0 of 4: checkpoint ckpt/8 is unreadable", "the evaluation after step 4 failed"]] * 2


def test_a_warning_is_given_once_a_run():
    """Set-up code run once a split said the same warning two or three times (a review); a
    sweep's next run (one process) gives its own, though the words are the same."""
    import logging

    from bertjax.runtime import cli

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)  # (on the root logger, as the launchers' handlers are)
    handler.addFilter(cli._SaidOnce())
    log = logging.getLogger("bertjax.test_said_once")
    logging.getLogger().addHandler(handler)
    try:
        for step in (4, 4, 8):
            log.warning("the evaluation at step %d is not finite", step)
        cli.new_run_warnings()
        log.warning("the evaluation at step %d is not finite", 4)
    finally:
        logging.getLogger().removeHandler(handler)
    assert stream.getvalue().splitlines() == [f"the evaluation at step {step} is not finite" for step in (4, 8, 4)]


def test_a_warning_named_by_its_process_is_given_once_on_every_handler():
    """With two handlers, the second saw the first's process-named copy, recorded that, and let
    the bare repeat through (a review): each handler gives a warning once, named once."""
    import logging

    from bertjax.runtime import cli

    streams = [io.StringIO(), io.StringIO()]
    log = logging.getLogger("bertjax.test_said_once_named")
    log.propagate = False
    handlers = [logging.StreamHandler(stream) for stream in streams]
    for handler in handlers:
        handler.addFilter(cli._SaidOnce())
        handler.addFilter(cli._OneCopy(1, 2))
        log.addHandler(handler)
    try:
        for _ in range(3):
            log.warning("checkpoint %s is unreadable", "ckpt/8", extra=console.PROCESS_SPECIFIC)
    finally:
        for handler in handlers:
            log.removeHandler(handler)
    assert [stream.getvalue().splitlines() for stream in streams] == [
        ["process 1 of 2: checkpoint ckpt/8 is unreadable"]] * 2


def test_a_launchers_flags_name_its_settings_in_errors_and_warnings_once_each():
    """A warning named config.data.text_key where train_tokenizer's user typed --text_key; the
    renaming, done by each handler in turn, gave '----vocab_size' with two handlers, and
    renamed inside longer names ('type_vocab_size=') and flags already given (a review)."""
    import logging

    from bertjax.runtime import cli

    streams = [io.StringIO(), io.StringIO()]
    root = logging.getLogger()
    handlers = [logging.StreamHandler(stream) for stream in streams]
    for handler in handlers:
        root.addHandler(handler)
    message = "vocab_size=9 (config.data.text_key); type_vocab_size=2, --vocab_size=9, config.model.vocab_size=9"
    try:
        with pytest.raises(ValueError) as raised:
            with cli.settings_as_flags({"config.data.text_key": "--text_key", "vocab_size=": "--vocab_size="}):
                logging.getLogger("bertjax.test_flags").warning(message)
                raise ValueError(message)
    finally:
        for handler in handlers:
            root.removeHandler(handler)
    renamed = "--vocab_size=9 (--text_key); type_vocab_size=2, --vocab_size=9, config.model.vocab_size=9"
    assert str(raised.value) == renamed
    assert [stream.getvalue() for stream in streams] == [renamed + "\n"] * 2
    assert not any(handler.filters for handler in handlers)

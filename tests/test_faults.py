"""Fault injection through the launchers: each test asserts that nothing written before the
fault is lost and that the run can go on (or refuses clearly).

kill -9 during prepare, kill -9 during an async checkpoint save, a full disk during a save,
a damaged metadata.json of prepared data, two runs on one workdir at the same time, and
SIGTERM to one host of a two-process run.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from test_train import SMALL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bertjax import checkpointing  # noqa: E402
from bertjax.data.corpora import demo_corpus  # noqa: E402
from small_runs import xla_flags  # noqa: E402


def _env(**extra):
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(),
            "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT, **extra}


def _pretrain(workdir, prepared_dir, *extra):
    return [sys.executable, os.path.join(ROOT, "launch", "pretrain.py"),
            "--config=" + os.path.join(ROOT, "configs", "pretrain.py") + ":tiny", f"--workdir={workdir}",
            f"--config.data.prepared_dir={prepared_dir}", *SMALL, *extra]


def _wait_for(condition, process, what, timeout=300):
    deadline = time.time() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the process ended ({process.returncode}) before {what}:\n"
                                 f"{process.stderr.read()[-3000:] if process.stderr else ''}")
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def _files(directory, suffixes):
    return {name: open(os.path.join(directory, name), "rb").read()
            for name in sorted(os.listdir(directory)) if name.endswith(suffixes)}


# ---------------------------------------------------------------------------------------
# (a) kill -9 during prepare: the rerun's shards and metadata equal an uninterrupted run's.
# ---------------------------------------------------------------------------------------

def _prepare_command(tmp_path):
    """command(output_dir) -> prepare_data.py with 3 workers on a 16-unit corpus in tmp_path."""
    corpus, vocab = tmp_path / "corpus", tmp_path / "vocab"
    corpus.mkdir()
    documents = ["\n".join(document) for document in demo_corpus.entity_paragraphs(0, 2000)]
    for i in range(16):  # one unit per file, about 1 MB each
        chunk = documents[i * 125:(i + 1) * 125] * 2
        (corpus / f"part{i:02d}.txt").write_text("\n\n".join(f"Part {i}. {d}" for d in chunk) + "\n")
    vocab_path = demo_corpus.demo_vocab_path(str(vocab))

    def command(output_dir):
        return [sys.executable, os.path.join(ROOT, "launch", "prepare_data.py"),
                "--config=" + os.path.join(ROOT, "configs", "pretrain.py") + ":tiny", f"--output_dir={output_dir}",
                "--config.data.source=text", f"--config.data.input_pattern={corpus}/*.txt",
                f"--config.data.vocab_path={vocab_path}", "--num_workers=3"]

    return command


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def _units_done(directory):
    done = directory / "done"
    return len([n for n in os.listdir(done) if n.endswith(".json")]) if done.exists() else 0


def test_sigterm_during_prepare_stops_the_workers_and_exits_3(tmp_path):
    command = _prepare_command(tmp_path)
    output = tmp_path / "out"
    process = subprocess.Popen(command(output), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    _wait_for(lambda: _units_done(output) >= 1, process, "a unit was done")
    process.send_signal(signal.SIGTERM)  # the main process only, as a scheduler's first notice
    stderr = process.communicate(timeout=120)[1]
    assert process.returncode == 3, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("stopped: preempted (SIGTERM) while preparing"), stderr[-3000:]
    deadline = time.time() + 10  # no worker (nor multiprocessing's resource tracker) is left behind
    while time.time() < deadline and _group_alive(process.pid):
        time.sleep(0.2)
    assert not _group_alive(process.pid), subprocess.run(["ps", "-o", "pid,args", "-g", str(process.pid)],
                                                           capture_output=True, text=True).stdout
    assert _units_done(output) < 16 and not (output / "metadata.json").exists()
    result = subprocess.run(command(output), env=_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and (output / "metadata.json").exists(), result.stderr[-3000:]


def test_ctrl_c_during_prepare_says_the_units_done_are_kept(tmp_path):
    """Ctrl-C (SIGINT to the whole foreground group, workers too) said only "interrupted", after a
    traceback from each worker, where SIGTERM says the units done are kept and the same command
    resumes (a walkthrough): it stops as SIGTERM does."""
    command = _prepare_command(tmp_path)
    output = tmp_path / "out"
    process = subprocess.Popen(command(output), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    _wait_for(lambda: _units_done(output) >= 1, process, "a unit was done")
    os.killpg(process.pid, signal.SIGINT)
    stderr = process.communicate(timeout=120)[1]
    assert process.returncode == 3, stderr[-3000:]
    [said] = stderr.strip().splitlines()
    kept = int(said.split("(")[2].split(" of")[0])
    assert said == (f"stopped: interrupted (Ctrl-C) while preparing {output}: the units done ({kept} of 16 so far) are "
                    "kept; run the same command again to resume") and 1 <= kept < 16, stderr[-3000:]
    assert kept == _units_done(output)  # the workers' units in hand counted too (a walkthrough: fewer were)
    result = subprocess.run(command(output), env=_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and (output / "metadata.json").exists(), result.stderr[-3000:]
    [resumed] = [line for line in (result.stdout + result.stderr).splitlines() if " of 16 units of" in line]
    assert int(resumed.split("preparing ")[1].split(" of")[0]) <= 16 - kept, resumed  # the kept ones not redone


def test_kill_9_during_prepare_then_rerun_gives_identical_shards(tmp_path):
    command = _prepare_command(tmp_path)
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    subprocess.run(command(reference), env=_env(), check=True, capture_output=True, timeout=600)

    # The whole process group dies at once, workers included, as when the machine is reclaimed.
    process = subprocess.Popen(command(interrupted), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    done = interrupted / "done"
    _wait_for(lambda: _units_done(interrupted) >= 2, process, "two units were done")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()
    markers = _files(done, (".json",))  # a unit's marker holds its timings: rewritten if it were redone
    assert len(markers) < 16 and not (interrupted / "metadata.json").exists(), "the kill should land mid-way"

    result = subprocess.run(command(interrupted), env=_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {name: data for name, data in _files(done, (".json",)).items() if name in markers} == markers
    shards = (".tfrecord", "metadata.json")
    assert _files(interrupted, shards) == _files(reference, shards)
    assert len(_files(reference, (".tfrecord",))) == 32
    assert sorted(os.listdir(interrupted)) == sorted(os.listdir(reference))  # no .incomplete/, no leftovers


# ---------------------------------------------------------------------------------------
# (b) kill -9 while an async checkpoint save is in flight.
# ---------------------------------------------------------------------------------------

def _complete_steps(checkpoints):
    return sorted(int(name) for name in os.listdir(checkpoints) if name.isdigit())


# 70-100 s on two cores: run with --runslow. The default suite keeps kill -9 during an async save at the
# Checkpointer (tests/test_checkpointing.py::test_kill_9_during_async_save_leaves_previous_checkpoint) and the
# launcher's exact resume (tests/test_train.py::test_sigterm_then_resume_replays_the_uninterrupted_run_bitwise).
@pytest.mark.slow
def test_kill_9_during_an_async_save_resumes_from_the_previous_checkpoint(tmp_path, prepared_dir):
    steps = ["--config.train.num_steps=40", "--config.checkpoint.keep=10"]
    for attempt in range(3):  # the kill must land while a save is in flight; retried if it just missed
        workdir = tmp_path / f"run{attempt}"
        checkpoints = workdir / "checkpoints"
        process = subprocess.Popen(_pretrain(workdir, prepared_dir, *steps), env=_env(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        in_flight = lambda: checkpoints.exists() and any(  # noqa: E731
            ".orbax-checkpoint-tmp" in name and int(name.split(".")[0]) >= 10 for name in os.listdir(checkpoints))
        _wait_for(in_flight, process, "a save of step 10 or later started")
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stderr.close()
        if any(".orbax-checkpoint-tmp" in name for name in os.listdir(checkpoints)):
            break
    else:
        pytest.fail("three kills all landed between saves")
    complete = _complete_steps(checkpoints)
    assert complete and complete[-1] >= 5
    metas = {step: checkpointing.read_meta(str(checkpoints / str(step))) for step in complete}
    assert all(meta["step"] == meta["data_position"] == step for step, meta in metas.items())
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) > complete[-1]  # the killed run logged steps it did not save

    result = subprocess.run(_pretrain(workdir, prepared_dir, *steps), env=_env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 41))  # one timeline, each step once
    assert _complete_steps(checkpoints)[-1] == 40
    assert not any("tmp" in name for name in os.listdir(checkpoints))


# ---------------------------------------------------------------------------------------
# (c) A full disk during a save: a real one, a small tmpfs in a user namespace (no root);
#     and, where user namespaces are missing (many containers), the kernel's per-process
#     file size limit (RLIMIT_FSIZE), which fails the same writes with EFBIG.
# ---------------------------------------------------------------------------------------

def _tmpfs_available():
    try:
        probe = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                               capture_output=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


_FULL_DISK = textwrap.dedent("""
    import os, resource, signal, sys, time
    import jax, jax.numpy as jnp, numpy as np
    from bertjax import checkpointing

    if sys.argv[2] == "file_size_limit":  # a write past 1 MB fails with EFBIG instead of a signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    directory = os.path.join(sys.argv[1], "checkpoints")
    replicated = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = {"w": jax.ShapeDtypeStruct((1000,), jnp.float32, sharding=replicated)}
    ckpt = checkpointing.Checkpointer(directory, save_interval_steps=1, max_to_keep=1, async_save=True)
    ckpt.save(1, {"w": jnp.arange(1000.0)}, data_position=1, config={})
    ckpt.wait_until_finished()
    try:  # 8 MB of float32 on a 4 MB disk; max_to_keep=1 would retire step 1 once step 2 is complete
        ckpt.save(2, {"w": jax.random.normal(jax.random.key(0), (2_000_000,))}, data_position=2, config={})
        ckpt.wait_until_finished()
    except checkpointing.CheckpointSaveError as e:
        print("error:", e, flush=True)
    ckpt.close()
    print("after:", sorted(os.listdir(directory)), flush=True)
    reopened = checkpointing.Checkpointer(directory, save_interval_steps=1, max_to_keep=1)
    state, meta = reopened.restore(abstract)
    assert meta["step"] == 1 and np.array_equal(np.asarray(state["w"]), np.arange(1000.0)), meta
    for _ in range(100):  # orbax removes tmp folders in the background (a future the new manager starts)
        if "2.orbax-checkpoint-tmp" not in os.listdir(directory):
            break
        time.sleep(0.1)
    print("restored step", meta["step"], "steps", reopened.all_steps(), "dir", sorted(os.listdir(directory)))
""")


@pytest.mark.parametrize("failure", [
    pytest.param("tmpfs", marks=pytest.mark.skipif(not _tmpfs_available(),
                                                   reason="needs unprivileged user namespaces to mount a small tmpfs")),
    "file_size_limit"])
def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(tmp_path, failure):
    disk = tmp_path / "disk"
    disk.mkdir()
    if failure == "tmpfs":
        script = f'mount -t tmpfs -o size=4m tmpfs "$1" && exec {sys.executable} -c "$0" "$1" tmpfs'
        command = ["unshare", "-Urm", "sh", "-c", script, _FULL_DISK, str(disk)]
    else:
        command = [sys.executable, "-c", _FULL_DISK, str(disk), failure]
    result = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    [error] = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert f"saving checkpoint step 2 to {disk}/checkpoints failed" in error
    assert ("No space left on device" if failure == "tmpfs" else "File too large") in error
    assert "the steps saved before it are untouched" in error
    assert "after: ['1', '2.orbax-checkpoint-tmp']" in result.stdout  # the partial save is only a tmp folder
    assert "restored step 1 steps [1] dir ['1']" in result.stdout  # the next Checkpointer cleans the tmp folder


def test_a_full_disk_names_the_file_an_atomic_write_was_for(tmp_path):
    """A write refused for the disk raised '[Errno 28] No space left on device', naming no file
    (a walkthrough): fileio's atomic writes name the file they were writing, and leave the
    earlier one as it was."""
    from small_runs import on_a_full_disk

    path = tmp_path / "metrics.json"
    path.write_text("earlier")
    code = textwrap.dedent("""
        import errno, sys
        from bertjax.runtime import fileio

        try:
            fileio.write_bytes(sys.argv[1], b"x" * (1 << 13))
        except OSError as e:
            print(errno.errorcode[e.errno], e.filename)
    """)
    result = on_a_full_disk(["-c", code, str(path)], limit=1 << 12)
    assert result.returncode == 0 and result.stdout == f"EFBIG {path}\n", result.stderr[-2000:]
    assert os.listdir(tmp_path) == ["metrics.json"] and path.read_text() == "earlier"


# ---------------------------------------------------------------------------------------
# (d) A damaged metadata.json of prepared data: one line naming it, shards untouched.
# ---------------------------------------------------------------------------------------

def test_a_damaged_prepared_metadata_json_is_named_and_shards_are_untouched(tmp_path, prepared_dir):
    damaged = tmp_path / "prepared"
    shutil.copytree(prepared_dir, damaged)
    metadata = damaged / "metadata.json"
    metadata.write_bytes(metadata.read_bytes()[:100])  # a truncated write
    shards = {name: (data, os.stat(damaged / name).st_mtime_ns)
              for name, data in _files(damaged, (".tfrecord",)).items()}
    result = subprocess.run(_pretrain(tmp_path / "run", damaged, "--config.train.num_steps=2"), env=_env(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = [line for line in result.stderr.splitlines() if str(metadata) in line]
    assert "damaged, not valid JSON" in line and "delete this metadata.json and prepare again" in line
    assert "Traceback" not in result.stderr
    assert {name: (data, os.stat(damaged / name).st_mtime_ns)
            for name, data in _files(damaged, (".tfrecord",)).items()} == shards
    assert not (tmp_path / "run" / "checkpoints").exists()


# ---------------------------------------------------------------------------------------
# (e) Two runs on one workdir at the same time: the second refuses in one line.
# ---------------------------------------------------------------------------------------

# Two launcher runs: run with --runslow. The default suite keeps the lock's refusal and release
# (tests/test_workdir_lock.py) and a launcher's SIGTERM, save and exit 3
# (tests/test_train.py::test_sigterm_then_resume_replays_the_uninterrupted_run_bitwise).
@pytest.mark.slow
def test_a_second_run_on_the_same_workdir_refuses(tmp_path, prepared_dir):
    workdir = tmp_path / "run"
    first = subprocess.Popen(_pretrain(workdir, prepared_dir, "--config.train.num_steps=100000"), env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # metrics.jsonl is opened before the first step: wait for a logged step (a SIGTERM while the
        # first batch is still being made stops the run with nothing to save).
        _wait_for(lambda: (workdir / "metrics.jsonl").exists() and (workdir / "metrics.jsonl").read_text().strip(),
                  first, "the first run trained a step")
        second = subprocess.run(_pretrain(workdir, prepared_dir, "--config.train.num_steps=2"), env=_env(),
                                capture_output=True, text=True, timeout=600)
        assert second.returncode == 2, second.stderr[-3000:]
        [line] = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert f"workdir {workdir} is in use by {first.pid}@{socket.gethostname()}" in line
        assert first.poll() is None  # the first run goes on
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=300) == 3  # preempted: saved and stopped
        assert checkpointing.read_meta(str(workdir / "checkpoints"))["step"] >= 1
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


# ---------------------------------------------------------------------------------------
# SIGTERM to one host of a two-process run: both save the same step and stop.
# ---------------------------------------------------------------------------------------

# 70-80 s on two cores: run with --runslow. The default suite keeps the hosts' stop decision
# (tests/test_preemption.py::test_all_hosts_stop_at_the_same_step_when_one_is_signalled) and a two-process
# launcher run (tests/test_train.py::test_two_processes_match_one_process_with_eight_devices).
@pytest.mark.slow
def test_sigterm_to_one_of_two_processes_stops_both_at_one_saved_step(tmp_path, prepared_dir):
    workdir = tmp_path / "run"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    processes = [subprocess.Popen(
        _pretrain(workdir, prepared_dir, "--config.train.num_steps=100000", "--config.checkpoint.every=100000",
                  "--config.mesh.fsdp=2", f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                  f"--process_id={i}"),
        env=_env(XLA_FLAGS=xla_flags(2)), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        metrics = workdir / "metrics.jsonl"
        _wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3, processes[0],
                  "three steps were logged")
        processes[1].send_signal(signal.SIGTERM)
        errors = [process.communicate(timeout=300)[1] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [process.returncode for process in processes] == [3, 3], errors[0][-2000:] + errors[1][-2000:]
    saved = _complete_steps(workdir / "checkpoints")
    assert len(saved) == 1 and saved[0] >= 3  # no scheduled save: this one is the preemption's
    assert all(f"saved step {saved[0]}" in error for error in errors)

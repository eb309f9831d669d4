"""launch/tpu_vm.sh with a fake `gcloud` that records its arguments; the commands it would
run on a worker are then run here, in a directory standing in for the worker's checkout."""

import json
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "launch", "tpu_vm.sh")

# Records its arguments. `describe` prints GCLOUD_STATE (none: no such TPU, exit 1); with
# GCLOUD_RUN=1 an ssh call runs its --command here and exits with its status.
FAKE_GCLOUD = f"""#!{sys.executable}
import json, os, subprocess, sys
with open(os.environ["GCLOUD_CALLS"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if "describe" in sys.argv:
    print(os.environ.get("GCLOUD_STATE", ""))
    sys.exit(0 if os.environ.get("GCLOUD_STATE") else 1)
commands = [arg[len("--command="):] for arg in sys.argv if arg.startswith("--command=")]
if commands and os.environ.get("GCLOUD_RUN") == "1":
    sys.exit(subprocess.run(["bash", "-c", commands[0]]).returncode)
"""

# Stands in for the worker's .venv/bin/python: records its arguments, runs until SIGTERM.
FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$@" > args.tmp && mv args.tmp args.txt  # whole when it appears: the test polls for it
echo "pid $$"
trap 'echo "SIGTERM: saving"; exit 3' TERM
while true; do sleep 0.1; done
"""


@pytest.fixture
def tpu_vm(tmp_path):
    """Runs tpu_vm.sh with a fake gcloud; returns (run, calls): run(*args, **env) -> CompletedProcess,
    calls() -> the argument lists gcloud got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(FAKE_GCLOUD)
    (bin_dir / "gcloud").chmod(0o755)
    calls_file = tmp_path / "gcloud_calls.jsonl"
    # (no BERTJAX_* of the test run's own: `run` passes those on to the workers)
    base_env = {name: value for name, value in os.environ.items() if not name.startswith("BERTJAX_")}
    base_env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", GCLOUD_CALLS=str(calls_file), TPU_NAME="bert-pod",
                    ZONE="us-central2-b", REMOTE_DIR=str(tmp_path / "worker"))

    def run(*args, **env):
        return subprocess.run(["bash", SCRIPT, *args], env={**base_env, **env}, capture_output=True, text=True,
                              timeout=60)

    def calls():
        return [json.loads(line) for line in calls_file.read_text().splitlines()] if calls_file.exists() else []

    return run, calls


def test_syntax_and_usage(tpu_vm):
    assert subprocess.run(["bash", "-n", SCRIPT]).returncode == 0
    run, calls = tpu_vm
    for args in ((), ("help",)):
        result = run(*args)
        assert result.returncode == 2
        commands = [line.split()[0] for line in result.stderr.splitlines()[1:]]
        assert commands == ["create", "install", "run", "logs", "stop", "delete"]
    assert calls() == []


@pytest.mark.parametrize("accelerator, runtime", [
    ("v4-32", "tpu-ubuntu2204-base"), ("v3-8", "tpu-ubuntu2204-base"), ("v5litepod-16", "v2-alpha-tpuv5-lite"),
    ("v5p-8", "v2-alpha-tpuv5"), ("v6e-8", "v2-alpha-tpuv6e"),
])
def test_create_picks_the_runtime_image_from_the_accelerator(tpu_vm, accelerator, runtime):
    run, calls = tpu_vm
    assert run("create", ACCELERATOR=accelerator, SPOT="1").returncode == 0
    assert calls()[-1] == ["compute", "tpus", "tpu-vm", "create", "bert-pod", f"--accelerator-type={accelerator}",
                           f"--version={runtime}", "--spot", "--zone=us-central2-b"]


def test_create_names_v5e_as_the_tpu_api_does(tpu_vm):
    """The TPU API has no v5e-16; it is v5litepod-16 (the docs' name for the chip is v5e)."""
    run, calls = tpu_vm
    result = run("create", ACCELERATOR="v5e-16")
    assert result.returncode == 0 and "creating v5litepod-16, the TPU API's name for it" in result.stderr
    assert calls()[-1][5:7] == ["--accelerator-type=v5litepod-16", "--version=v2-alpha-tpuv5-lite"]
    assert "v5litepod" not in run("stop", ACCELERATOR="v5e-16").stderr  # (said where it creates one)


@pytest.mark.parametrize("state, deleted", [("", False), ("READY", False), ("PREEMPTED", True)])
def test_create_deletes_a_preempted_slice_of_the_name_first(tpu_vm, state, deleted):
    """A preempted spot slice keeps its name until deleted: `create` after a preemption failed with
    'already exists' (a review)."""
    run, calls = tpu_vm
    result = run("create", ACCELERATOR="v4-32", GCLOUD_STATE=state)
    assert result.returncode == 0
    verbs = [call[3] for call in calls()]
    assert verbs == (["describe", "delete", "create"] if deleted else ["describe", "create"])
    assert ("bert-pod was preempted: deleting it" in result.stderr) == deleted


def test_create_with_an_explicit_runtime_or_an_unknown_accelerator(tpu_vm):
    run, calls = tpu_vm
    assert run("create", ACCELERATOR="v6e-8", RUNTIME="v2-alpha-tpuv6e-next").returncode == 0
    assert "--version=v2-alpha-tpuv6e-next" in calls()[-1]
    result = run("create", ACCELERATOR="v9-8")
    assert result.returncode == 2 and "no default runtime for ACCELERATOR=v9-8; set RUNTIME" in result.stderr


def test_install_makes_a_python_3_11_venv_with_uv(tpu_vm, tmp_path):
    run, calls = tpu_vm
    assert run("install", TMPDIR=str(tmp_path)).returncode == 0
    scp, ssh = calls()
    archive = str(tmp_path / "bertjax.tgz")
    assert scp[:6] == ["compute", "tpus", "tpu-vm", "scp", archive, "bert-pod:/tmp/bertjax.tgz"]
    assert "--worker=all" in scp
    # Every package file goes: an unanchored --exclude='workdir*' dropped bertjax/runtime/workdir_lock.py.
    with tarfile.open(archive) as tar:
        shipped = {os.path.normpath(name) for name in tar.getnames()}
    package = {os.path.relpath(os.path.join(top, name), ROOT)
               for top, _, names in os.walk(os.path.join(ROOT, "bertjax")) for name in names if name.endswith(".py")}
    assert package and package <= shipped, sorted(package - shipped)
    assert not any(name.startswith((".git/", ".venv/")) for name in shipped)
    command = ssh[ssh.index("--worker=all") + 1]
    assert "python3 -m uv venv -q --python 3.11 .venv" in command and "[ ! -x .venv/bin/python3.11 ]" in command
    assert "uv pip install -q --python .venv/bin/python -e '.[tpu]'" in command


def test_install_removes_the_files_the_last_install_unpacked_and_this_one_does_not(tpu_vm, tmp_path):
    """tar unpacked over the last install: a module removed here stayed there, importable (a
    review). Only the last install's own files go; the venv, logs, a user's files stay; nothing
    is installed under a run still going."""
    run, calls = tpu_vm
    worker = tmp_path / "worker"
    for name in ("bertjax/removed_module.py", "bertjax/trainer.py", "my_data.txt", ".venv/bin/python3.11",
                 "logs/run.log", "outputs/x"):
        (worker / name).parent.mkdir(parents=True, exist_ok=True)
        (worker / name).write_text("#!/bin/sh\n")
    (worker / ".venv" / "bin" / "python3.11").chmod(0o755)
    (worker / ".bertjax-installed-files").write_text("bertjax/removed_module.py\nbertjax/trainer.py\n")
    fake_bin = tmp_path / "fake_bin"  # the worker's python3: pip and uv do nothing here
    fake_bin.mkdir()
    (fake_bin / "python3").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "python3").chmod(0o755)
    assert run("install", TMPDIR=str(tmp_path)).returncode == 0
    command = _worker_command(calls()[-1])[1].replace("/tmp/bertjax.tgz", str(tmp_path / "bertjax.tgz"))
    installed = subprocess.run(["bash", "-c", command], env=dict(os.environ, PATH=f"{fake_bin}:{os.environ['PATH']}"),
                               capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
    assert (worker / "bertjax" / "trainer.py").read_text().startswith('"""')  # this install's
    assert (worker / "launch" / "tpu_vm.sh").exists()
    assert not (worker / "bertjax" / "removed_module.py").exists()
    assert all((worker / name).exists() for name in ("my_data.txt", ".venv/bin/python3.11", "logs/run.log",
                                                     "outputs/x"))
    (tmp_path / "bertjax.tgz").write_bytes(b"not an archive")  # (a full disk at the copy, say): stops at once
    broken = subprocess.run(["bash", "-c", command], env=dict(os.environ, PATH=f"{fake_bin}:{os.environ['PATH']}"),
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode != 0 and (worker / "bertjax" / "trainer.py").exists()  # nothing removed
    listed = (worker / ".bertjax-installed-files").read_text().splitlines()
    assert "bertjax/trainer.py" in listed and listed == sorted(listed) and not any(n.startswith("./") for n in listed)
    old = subprocess.Popen(["sleep", "60"])  # a run going: nothing installed
    try:
        (worker / "logs" / "run.pid").write_text(str(old.pid))
        refused = subprocess.run(["bash", "-c", command], env=dict(os.environ, PATH=f"{fake_bin}:{os.environ['PATH']}"),
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and f"a run is still going (pid {old.pid}); stop it first" in refused.stderr
    finally:
        old.kill()


def _worker_python(worker, script):
    """Puts `script` where a worker's .venv/bin/python is."""
    (worker / ".venv" / "bin").mkdir(parents=True)
    (worker / ".venv" / "bin" / "python").write_text(script)
    (worker / ".venv" / "bin" / "python").chmod(0o755)


def _worker_command(call):
    """The --command a gcloud ssh call would run on the workers, and which workers."""
    assert call[:5] == ["compute", "tpus", "tpu-vm", "ssh", "bert-pod"], call
    [workers] = [arg for arg in call if arg.startswith("--worker=")]
    [command] = [arg[len("--command="):] for arg in call if arg.startswith("--command=")]
    return workers, command


def _on_worker(command):
    """Runs a worker's command here, in an environment without this test run's settings (as a worker's)."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("BERTJAX_", "XLA_FLAGS", "LIBTPU_INIT_ARGS", "TFDS_DATA_DIR"))}
    return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60)


def test_run_detaches_the_chosen_launcher_then_logs_and_stop(tpu_vm, tmp_path):
    run, calls = tpu_vm
    worker = tmp_path / "worker"
    _worker_python(worker, FAKE_PYTHON)
    flags = ["--config=configs/finetune.py:sst2", "--workdir=gs://bucket/sst2 run",
             "--config.data.input_pattern=gs://bucket/text/*.txt", "--config.note=it's \"quoted\" $HOME"]
    assert run("run", "finetune", *flags).returncode == 0
    workers, command = _worker_command(calls()[-1])
    assert workers == "--worker=all" and "setsid nohup" in command
    started = _on_worker(command)
    assert started.returncode == 0, started.stderr
    assert "started, log" in started.stdout
    pid = None
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not all((worker / name).exists() for name in ("args.txt", "logs/run.pid")):
            time.sleep(0.05)
        pid = int((worker / "logs" / "run.pid").read_text())
        assert (worker / "args.txt").read_text().splitlines() == ["launch/finetune.py", "--distributed=on", *flags]
        assert os.getsid(pid) == pid  # its own session: a dropped ssh connection does not reach it
        assert (worker / "logs" / "latest.log").read_text() == f"pid {pid}\n"
        assert os.readlink(worker / "logs" / "latest.log").startswith("finetune-")

        assert run("run", "--config=configs/pretrain.py:base").returncode == 0
        again = _on_worker(_worker_command(calls()[-1])[1])
        assert again.returncode == 1 and f"a run is still going (pid {pid}); stop it first" in again.stderr

        assert run("logs", "--worker=3").returncode == 0
        workers, command = _worker_command(calls()[-1])
        assert workers == "--worker=3" and _on_worker(command).stdout == f"pid {pid}\n"
        assert run("logs", "-n", "5", "-f").returncode == 0
        assert _worker_command(calls()[-1]) == ("--worker=all", f"cd {worker} && tail -n 5 -f logs/latest.log")

        assert run("stop").returncode == 0
        stopped = _on_worker(_worker_command(calls()[-1])[1])
        assert stopped.returncode == 0 and f"SIGTERM sent to {pid}" in stopped.stdout and "stopped" in stopped.stdout
        assert (worker / "logs" / "latest.log").read_text() == f"pid {pid}\nSIGTERM: saving\n"
        pid = None
        assert "no run going" in _on_worker(_worker_command(calls()[-1])[1]).stdout
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


def test_run_defaults_to_pretrain(tpu_vm):
    run, calls = tpu_vm
    assert run("run", "--config=configs/pretrain.py:base").returncode == 0
    command = _worker_command(calls()[-1])[1]
    assert "launch/pretrain.py --distributed=on --config=configs/pretrain.py:base" in command
    assert "log=logs/pretrain-" in command
    assert run("run", "finetune").returncode == 2  # no flags: the usage


def test_run_gives_every_worker_the_compilation_cache_named(tpu_vm, tmp_path):
    """JAX writes cache entries from process 0 only: a cache on each worker's disk helps none of
    the others, so a shared (gs://) cache named here reaches every worker's trainer."""
    run, calls = tpu_vm
    worker = tmp_path / "worker"
    _worker_python(worker,
                   '#!/usr/bin/env bash\nprintf %s "$BERTJAX_COMPILATION_CACHE" > cache.tmp && mv cache.tmp cache.txt\n')
    assert run("run", "--config=configs/pretrain.py:base", BERTJAX_COMPILATION_CACHE="gs://b/xla cache").returncode == 0
    assert _on_worker(_worker_command(calls()[-1])[1]).returncode == 0
    deadline = time.time() + 30
    while time.time() < deadline and not (worker / "cache.txt").exists():
        time.sleep(0.05)
    assert (worker / "cache.txt").read_text() == "gs://b/xla cache"
    assert run("run", "--config=configs/pretrain.py:base", BERTJAX_COMPILATION_CACHE="").returncode == 0
    assert "BERTJAX_COMPILATION_CACHE" not in _worker_command(calls()[-1])[1]


def test_stop_gives_up_waiting_and_says_how_to_end_the_run(tpu_vm, tmp_path):
    """A run that does not reach a training step (preparing data, compiling, hung in a
    collective) never exited on SIGTERM, and `stop` waited forever (a review)."""
    run, calls = tpu_vm
    (tmp_path / "worker" / "logs").mkdir(parents=True)
    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 60 & wait"])
    try:
        (tmp_path / "worker" / "logs" / "run.pid").write_text(str(stubborn.pid))
        assert run("stop", STOP_TIMEOUT="2").returncode == 0
        stopped = _on_worker(_worker_command(calls()[-1])[1])
        assert stopped.returncode == 1 and f"{stubborn.pid} still running after 2 s" in stopped.stdout
        assert f"kill -9 {stubborn.pid} ends it now" in stopped.stdout
    finally:
        stubborn.kill()


def test_run_starts_nothing_while_any_worker_has_a_run_going(tpu_vm, tmp_path):
    """Each worker checked for itself as it started: one with an old run refused while the others
    started and waited for a coordinator the old run held (a review)."""
    run, calls = tpu_vm
    result = run("run", "--config=configs/pretrain.py:base", GCLOUD_RUN="1")  # a worker without an install
    assert result.returncode == 1 and "no install in" in result.stderr and len(calls()) == 1
    _worker_python(tmp_path / "worker", "#!/usr/bin/env bash\n")
    (tmp_path / "worker" / "logs").mkdir(parents=True)
    old = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "worker" / "logs" / "run.pid").write_text(str(old.pid))
        result = run("run", "--config=configs/pretrain.py:base", GCLOUD_RUN="1")
        assert result.returncode == 1 and f"a run is still going (pid {old.pid}); stop it first" in result.stderr
        assert "nothing started" in result.stderr
        assert len(calls()) == 2 and "setsid" not in _worker_command(calls()[-1])[1]
    finally:
        old.kill()


def test_run_passes_the_settings_named_on_to_every_worker(tpu_vm, tmp_path):
    """ssh carries no environment: BERTJAX_VERBOSE=1 (every host's logs, as the docs say) or
    XLA_FLAGS given to `run` reached no worker (a review)."""
    run, calls = tpu_vm
    worker = tmp_path / "worker"
    _worker_python(worker, "#!/usr/bin/env bash\n"
                           "env | grep -E '^(BERTJAX|XLA|LIBTPU|TFDS|OTHER)' | sort > env.tmp && mv env.tmp env.txt\n")
    settings = {"BERTJAX_VERBOSE": "1", "XLA_FLAGS": "--xla_dump_to=/tmp/d --xla_dump_hlo_as_text",
                "LIBTPU_INIT_ARGS": "--xla_tpu_x=1", "TFDS_DATA_DIR": "gs://b/tfds", "OTHER_SETTING": "x",
                "BERTJAX_COMPILATION_CACHE": ""}
    result = run("run", "--config=configs/pretrain.py:base", **settings)
    assert result.returncode == 0
    assert "passing on to every worker: BERTJAX_VERBOSE LIBTPU_INIT_ARGS TFDS_DATA_DIR XLA_FLAGS" in result.stderr
    assert _on_worker(_worker_command(calls()[-1])[1]).returncode == 0
    deadline = time.time() + 30
    while time.time() < deadline and not (worker / "env.txt").exists():
        time.sleep(0.05)
    assert (worker / "env.txt").read_text().splitlines() == sorted(
        f"{name}={value}" for name, value in settings.items() if value and name != "OTHER_SETTING")


def test_run_removes_the_tpu_lock_a_killed_run_left(tpu_vm, tmp_path):
    """`stop` says kill -9 ends a run that does not stop: libtpu's lock file then stays, and the
    next run failed with "TPU is already in use by process N" (a review). With no run going and
    no process holding the TPU, `run` removes it."""
    run, calls = tpu_vm
    _worker_python(tmp_path / "worker", "#!/usr/bin/env bash\n")
    lock = tmp_path / "libtpu_lockfile"
    lock.write_text("")
    assert run("run", "--config=configs/pretrain.py:base", LIBTPU_LOCKFILE=str(lock)).returncode == 0
    started = _on_worker(_worker_command(calls()[-1])[1])
    assert started.returncode == 0 and f"removed {lock}, a killed run's" in started.stdout and not lock.exists()
    assert "removed" not in _on_worker(_worker_command(calls()[-1])[1]).stdout  # none left: nothing said

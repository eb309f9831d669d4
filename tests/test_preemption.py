"""Tests for bertjax.runtime.preemption: the SIGTERM and Ctrl-C flag, and the cross-host stop decision through
JAX's preemption sync point (no device collective)."""

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from bertjax.runtime.preemption import PreemptionWatcher
from small_runs import xla_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_sigterm_sets_the_flag_and_close_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    watcher = PreemptionWatcher()
    try:
        assert not watcher.coordinated
        assert not watcher.should_stop(1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert watcher.signalled
        assert watcher.should_stop(2)  # single process: checked at every step
        assert watcher.stopped_by == "preempted (SIGTERM)"
    finally:
        watcher.close()
    assert signal.getsignal(signal.SIGTERM) == before


def test_ctrl_c_stops_with_a_checkpoint_and_a_second_one_quits(capsys, caplog):
    """... said as an interruption, once: a Ctrl-C printed three lines, the last calling it a
    preemption (a review)."""
    before = signal.getsignal(signal.SIGINT)
    watcher = PreemptionWatcher()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert watcher.should_stop(1) and watcher.signal_name == "SIGINT"
        assert "stopping after this step or batch, with what is done saved" in capsys.readouterr().err
        assert watcher.stopped_by == "interrupted (Ctrl-C)" and "preemption" not in caplog.text
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        watcher.close()
    assert signal.getsignal(signal.SIGINT) == before


# Host 1 signals itself at step `signal_at` (0: before the first step, as during a restore
# or a compile). Host 1 runs its steps half as fast, so the hosts are at different steps
# when the notice arrives. Device collectives are made to fail: the decision must not use one.
_TWO_HOSTS = textwrap.dedent("""
    import os, signal, sys, time
    import jax
    from jax.experimental import multihost_utils
    jax.distributed.initialize(f"127.0.0.1:{sys.argv[1]}", num_processes=2, process_id=int(sys.argv[2]))
    first_step, signal_at, orbax_asks = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"

    def no_collective(*args, **kwargs):
        raise AssertionError("a device collective was issued")

    multihost_utils.process_allgather = multihost_utils.sync_global_devices = no_collective
    multihost_utils.broadcast_one_to_all = no_collective
    from bertjax.runtime.preemption import PreemptionWatcher, report_start

    host = jax.process_index()
    if signal_at == -2:  # a sweep: a first run of 5 steps ends, orbax's final save reporting step 5
        report_start(0)
        first = PreemptionWatcher(0)
        assert not any(first.should_stop(step) for step in range(1, 5))  # never asked at the last step
        multihost_utils.reached_preemption_sync_point(5)
        first.close()
    if signal_at < 0:  # before anything was reported: while the data are read, say (or between runs)
        if host == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(3)
    report_start(first_step - 1)  # as trainer.hold_workdir and trainer.initial_state do
    if signal_at == 0:  # during the restore, before the watcher exists
        if host == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(3)  # the notice reaches every host before its first step
    watcher = PreemptionWatcher(first_step - 1)
    assert watcher.coordinated
    stopped = None
    for step in range(first_step, first_step + 1000):
        if host == 1 and step == first_step + signal_at and signal_at > 0:
            os.kill(os.getpid(), signal.SIGTERM)
        if orbax_asks:  # as orbax's save policy does every step, with the step
            multihost_utils.reached_preemption_sync_point(step)
        if watcher.should_stop(step):
            stopped = step
            break
        time.sleep(0.01 * (1 + host))
    watcher.close()
    print(f"stopped at {stopped}", flush=True)  # one write: Gloo logs to the same stream
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_steps(first_step, signal_at, orbax_asks=False):
    env = dict(os.environ, PYTHONPATH=REPO, XLA_FLAGS=xla_flags(), JAX_PLATFORMS="cpu")
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-c", _TWO_HOSTS, str(port), str(i), str(first_step), str(signal_at),
                               str(int(orbax_asks))],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    steps = []
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
        steps.append(re.search(r"stopped at (\w+)", out).group(1))
    return steps


def test_all_hosts_stop_at_the_same_step_when_one_is_signalled():
    host0, host1 = _stop_steps(first_step=1001, signal_at=20)  # a resumed run: steps do not start at 1
    assert host0 == host1 != "None"
    assert int(host0) > 1001 + 20


def test_hosts_stop_together_when_orbax_also_asks_with_the_step():
    """orbax asks JAX the same question with the training step (its save policy, every step);
    JAX keeps the last value either caller gave, so the watcher asks with the step too."""
    host0, host1 = _stop_steps(first_step=1001, signal_at=20, orbax_asks=True)
    assert host0 == host1 != "None"


def test_a_signal_before_the_first_step_stops_every_host_at_its_first_step():
    assert _stop_steps(first_step=501, signal_at=0) == ["501", "501"]


def test_a_signal_before_the_start_was_reported_stops_every_host_at_its_first_step():
    """JAX fixed the sync point at 1 (nothing reported yet), which a run resuming at 1,001 never
    reaches: it trained on until killed, without a checkpoint (a review)."""
    assert _stop_steps(first_step=1001, signal_at=-1) == ["1001", "1001"]


def test_a_signal_between_two_runs_of_a_sweep_stops_the_next_at_its_first_step():
    """JAX fixed the sync point one past the first run's last step (orbax's final save reports
    it), which the next run, counting from 1, never reached (a review)."""
    assert _stop_steps(first_step=1, signal_at=-2) == ["1", "1"]


def test_only_the_watcher_asks_jaxs_sync_point(tmp_path, monkeypatch):
    """JAX keeps the last step any caller gave its sync point. orbax's save-finalizing thread
    asked with the saved step after training had moved on: a notice then picked a step already
    passed, and a one-process coordinated run (tpu_vm.sh on one host) never stopped (a review)."""
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    from bertjax import checkpointing

    asked = []
    monkeypatch.setattr(multihost_utils, "reached_preemption_sync_point", lambda step: asked.append(step) or False)
    checkpointer = checkpointing.Checkpointer(str(tmp_path), save_interval_steps=2, max_to_keep=2)
    for step in range(1, 6):
        checkpointer.due(step)
        checkpointer.save(step, {"w": jnp.full(3, step)}, data_position=step, config={})
    checkpointer.save(5, {"w": jnp.zeros(3)}, data_position=5, config={}, force=True)
    checkpointer.wait_until_finished()
    assert checkpointer.all_steps() == [4, 5]
    checkpointer.close()
    assert asked == []


# Processes 0 and 1 ask `stop_in_step` at the same points (as the feature cache's batches do);
# process 0 is sent SIGTERM after its fourth question.
_STOP_IN_STEP = textwrap.dedent("""
    import os
    import signal
    import sys
    import time
    from bertjax.runtime import distributed
    assert distributed.initialize("auto", f"127.0.0.1:{sys.argv[1]}", 2, int(sys.argv[2]))
    import jax
    from jax.experimental import multihost_utils
    from bertjax.runtime.preemption import PreemptionWatcher
    watcher = PreemptionWatcher(0)
    for batch in range(400):
        name = watcher.stop_in_step()
        if name:
            print(f"stopped after {batch} batches by {name}, heeded {watcher.heeded}", flush=True)
            break
        if batch == 3 and jax.process_index() == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.02)
    multihost_utils.sync_global_devices("done")
    os._exit(0)
""")


def test_a_sigterm_stops_work_before_the_first_step_on_every_host_at_the_same_point():
    """On several hosts a SIGTERM during the frozen encoder's caching was heeded only at the
    first step, after every split was cached (a walkthrough: 63 to 122 s after the signal,
    past a TPU VM's notice). JAX's coordination service learns of the notice; the hosts ask it
    at the same points and agree, so all stop together, within a point or two of the signal."""
    from small_runs import two_cpu_processes

    results = two_cpu_processes(_STOP_IN_STEP, devices_each=1)
    stops = []
    for returncode, out, err in results:
        assert returncode == 0, err[-3000:]
        stops += re.findall(r"stopped after (\d+) batches by SIGTERM, heeded True", out)
    assert len(stops) == 2 and stops[0] == stops[1] and 4 <= int(stops[0]) < 100, (stops, [r[1] for r in results])

"""Tests for bertjax.preemption: the SIGTERM flag and the cross-host stop decision."""

import os
import signal
import socket
import subprocess
import sys
import textwrap

from bertjax.preemption import PreemptionWatcher

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_sigterm_sets_the_flag_and_close_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    watcher = PreemptionWatcher()
    try:
        assert not watcher.should_stop(1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert watcher.signalled and watcher.signal_name == "SIGTERM"
        assert watcher.should_stop(2)  # single process: checked at every step
    finally:
        watcher.close()
    assert signal.getsignal(signal.SIGTERM) == before


_TWO_HOSTS = textwrap.dedent("""
    import os, signal, sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{sys.argv[1]}", num_processes=2, process_id=int(sys.argv[2]))
    from bertjax.preemption import PreemptionWatcher

    watcher = PreemptionWatcher(sync_every_steps=5)
    if jax.process_index() == 1:
        os.kill(os.getpid(), signal.SIGTERM)
    print("decisions", [watcher.should_stop(step) for step in (4, 5)], flush=True)
""")


def test_all_hosts_stop_at_the_same_step_when_one_is_signalled():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=REPO, XLA_FLAGS="", JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", _TWO_HOSTS, str(port), str(i)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
        # Step 4 is not a sync step: nobody stops. Step 5: both stop, host 0 too.
        assert "decisions [False, True]" in out, out

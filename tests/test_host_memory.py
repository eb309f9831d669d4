"""bertjax.host_memory: with BERTJAX_KEEP_FREED_MEMORY=1 a large block freed on a worker
thread is reused by the next allocation instead of being faulted in again (what XLA:CPU
does with each step's temporary buffer); off by default, refused on accelerators and once
JAX is imported."""

import os
import platform
import subprocess
import sys

import pytest

from bertjax import host_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A child process (malloc settings are process-wide) that sets the mode first thing, as the
# launchers do, then allocates, touches and frees 256 MB on a worker thread 4 times and
# prints the minor page faults of the last 3 rounds.
CHILD = """
import ctypes, resource, sys, threading
sys.path.insert(0, {root!r})
from bertjax import host_memory
print(host_memory.keep_freed_memory())
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def round_trip():
    block = libc.malloc(256 * 2**20)
    ctypes.memset(block, 1, 256 * 2**20)
    libc.free(block)

faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    thread = threading.Thread(target=round_trip)
    thread.start()
    thread.join()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[1:]))
"""


def _child(code: str, keep: str) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    env.update(BERTJAX_KEEP_FREED_MEMORY=keep, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc malloc")
def test_kept_memory_is_reused_without_page_faults():
    pages = 3 * 256 * 2**20 // 4096  # three rounds of 256 MB in 4 KB pages
    applied, faults = _child(CHILD.format(root=ROOT), "0").stdout.split()
    assert applied == "False" and int(faults) > 0.9 * pages  # each block mapped afresh, unmapped on free
    applied, faults = _child(CHILD.format(root=ROOT), "1").stdout.split()
    assert applied == "True" and int(faults) < 0.02 * pages


def test_refused_once_jax_is_imported():
    code = f"import sys; sys.path.insert(0, {ROOT!r}); import jax; from bertjax import host_memory; " \
           "print(host_memory.keep_freed_memory())"
    result = _child(code, "1")
    assert result.stdout.split() == ["False"]
    assert "BERTJAX_KEEP_FREED_MEMORY=1 ignored: JAX is already imported" in result.stderr


def test_only_when_asked_and_only_on_the_cpu(monkeypatch, capsys):
    monkeypatch.delenv("BERTJAX_KEEP_FREED_MEMORY", raising=False)
    assert not host_memory.keep_freed_memory()
    monkeypatch.setenv("BERTJAX_KEEP_FREED_MEMORY", "1")
    for platforms, on_cpu in (("cpu", True), ("tpu", False), ("cuda,cpu", False), ("cpu,cuda", True)):
        monkeypatch.setenv("JAX_PLATFORMS", platforms)
        assert host_memory.computes_on_cpu() is on_cpu
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    assert not host_memory.keep_freed_memory()
    assert "ignored: JAX computes on an accelerator here" in capsys.readouterr().err

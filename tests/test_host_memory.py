"""bertjax.host_memory: with BERTJAX_KEEP_FREED_MEMORY=1 a large block freed on a worker
thread is reused by the next allocation instead of being faulted in again (what XLA:CPU
does with each step's temporary buffer); off by default and on accelerators."""

import os
import subprocess
import sys

import pytest

from bertjax import host_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A child process (malloc settings are process-wide): imports bertjax.cli as every launcher
# does first, then allocates, touches and frees 256 MB on a worker thread 4 times and
# prints the minor page faults of the last 3 rounds.
CHILD = """
import ctypes, resource, sys, threading
sys.path.insert(0, {root!r})
from bertjax import cli
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


def _faults(keep: str) -> int:
    env = {**os.environ, "BERTJAX_KEEP_FREED_MEMORY": keep, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT)], env=env, capture_output=True, text=True,
                            timeout=120, check=True)
    return int(result.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_kept_memory_is_reused_without_page_faults():
    pages = 3 * 256 * 2**20 // 4096  # three rounds of 256 MB in 4 KB pages
    assert _faults("0") > 0.9 * pages  # glibc maps each block afresh and unmaps it on free
    assert _faults("1") < 0.02 * pages


def test_only_when_asked_and_only_on_the_cpu(monkeypatch):
    monkeypatch.delenv("BERTJAX_KEEP_FREED_MEMORY", raising=False)
    assert not host_memory.keep_freed_memory()
    monkeypatch.setenv("BERTJAX_KEEP_FREED_MEMORY", "1")
    for platforms, on_cpu in (("cpu", True), ("tpu", False), ("cuda,cpu", False), ("cpu,cuda", True)):
        monkeypatch.setenv("JAX_PLATFORMS", platforms)
        assert host_memory.computes_on_cpu() is on_cpu
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    assert not host_memory.keep_freed_memory()  # asked, but not on the CPU

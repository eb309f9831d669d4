"""bertjax.runtime.host_memory: with BERTJAX_KEEP_FREED_MEMORY=1 a large block freed on a worker
thread is reused by the next allocation instead of being faulted in again (what XLA:CPU
does with each step's temporary buffer); off by default, refused on accelerators and once
JAX is imported. Transparent huge pages (a restart with glibc's hugetlb tunable): a fresh
large block faults in 2 MB at a time; on by default, BERTJAX_HUGE_PAGES=0 turns them off."""

import os
import platform
import subprocess
import sys

import pytest

from bertjax.runtime import host_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A child process (malloc settings are process-wide) that sets the mode first thing, as the
# launchers do, then allocates, touches and frees 256 MB on a worker thread 4 times and
# prints the minor page faults of the last 3 rounds.
CHILD = """
import ctypes, resource, sys, threading
sys.path.insert(0, {root!r})
from bertjax.runtime import host_memory
print("started", flush=True)
{setup}
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


def _child(code: str, keep: str, **variables: str) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("MALLOC_", "GLIBC_TUNABLES", "BERTJAX_HUGE_PAGES"))}
    env.update(BERTJAX_KEEP_FREED_MEMORY=keep, JAX_PLATFORMS="cpu", **variables)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc malloc")
def test_kept_memory_is_reused_without_page_faults():
    pages = 3 * 256 * 2**20 // 4096  # three rounds of 256 MB in 4 KB pages
    code = CHILD.format(root=ROOT, setup="print(host_memory.keep_freed_memory())")
    _, applied, faults = _child(code, "0").stdout.split()
    assert applied == "False" and int(faults) > 0.9 * pages  # each block mapped afresh, unmapped on free
    _, applied, faults = _child(code, "1").stdout.split()
    assert applied == "True" and int(faults) < 0.02 * pages


@pytest.mark.skipif(not host_memory.huge_pages_possible(), reason="glibc >= 2.35 and transparent huge pages")
def test_huge_pages_restart_once_and_fault_a_fresh_block_in_2_mb_at_a_time():
    """A fresh 256 MB block each round, as without the tunable, but in far fewer faults."""
    pages = 3 * 256 * 2**20 // 4096
    code = CHILD.format(root=ROOT, setup="host_memory.configure(); import os; print(os.environ['GLIBC_TUNABLES'])")
    first, second, tunables, faults = _child(code, "0", GLIBC_TUNABLES="glibc.malloc.check=0").stdout.split()
    assert first == second == "started"  # printed before the restart and after it
    assert tunables == "glibc.malloc.check=0:glibc.malloc.hugetlb=1"  # the caller's tunables kept
    assert int(faults) < 0.1 * pages
    started, tunables, faults = _child(code.replace("os.environ['GLIBC_TUNABLES']", "os.environ.get('GLIBC_TUNABLES')"),
                                       "0", BERTJAX_HUGE_PAGES="0").stdout.split()
    assert started == "started" and tunables == "None" and int(faults) > 0.9 * pages  # turned off: no restart


def test_refused_once_jax_is_imported():
    code = f"import sys; sys.path.insert(0, {ROOT!r}); import jax; from bertjax.runtime import host_memory; " \
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


@pytest.mark.parametrize("launcher", ["pretrain", "finetune", "demo", "benchmark", "predict", "extract_features"])
def test_launchers_that_run_the_model_set_host_memory_up_before_anything_else(launcher):
    """Inference allocates as training does: every call's temporaries (BERT-base at 32 x 128:
    about 260,000 fresh 4 KB pages a forward without huge pages). Only the standard library
    comes before `host_memory.configure()`."""
    import ast

    with open(os.path.join(ROOT, "launch", f"{launcher}.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = []
    for statement in tree.body:
        if isinstance(statement, ast.Expr) and ast.unparse(statement) == "host_memory.configure()":
            break
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            imported += [statement.module] if isinstance(statement, ast.ImportFrom) else [
                alias.name for alias in statement.names]
    else:
        pytest.fail(f"launch/{launcher}.py never calls host_memory.configure()")
    assert imported[-1] == "bertjax.runtime" and all(
        name.split(".")[0] in sys.stdlib_module_names for name in imported[:-1]), imported

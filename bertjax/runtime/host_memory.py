"""Host memory for XLA's CPU backend: transparent huge pages, and an opt-in mode that keeps
freed buffers for the next step.

XLA:CPU allocates a step's temporary buffer (over a gigabyte for BERT-base) with malloc on
one of its worker threads. glibc serves a block that large from a fresh
mmap in a thread arena and unmaps it on free, so every step faults in and zeroes the whole
buffer again, hundreds of thousands of page faults a step. With one malloc arena, no mmap
for large blocks and no trimming of the heap's top, the freed buffer is reused in place (no
faults) and steps are faster. The price is memory: nothing freed goes back to the system,
and the one heap can fragment (a higher and more variable peak RSS), so it is off unless
BERTJAX_KEEP_FREED_MEMORY=1 (launch/demo.sh sets it). Figures: benchmarks/README.md#host-memory.

The launchers that run a model (pretrain, finetune, demo, benchmark, predict, extract_features)
call `configure()` (which calls `keep_freed_memory()`) before they import anything else of
bertjax: it must run before any thread other than the main one allocates (glibc fixes the
arena limit when the first extra arena is made, and a thread keeps the arena it has), so it
refuses, with a warning, once JAX is imported. It acts only when JAX will compute on the CPU
(JAX_PLATFORMS=cpu, or no TPU or GPU plugin installed) and on glibc.

Transparent huge pages, on by default (`use_huge_pages`, BERTJAX_HUGE_PAGES=0 turns them off):
the launchers restart themselves once with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc
reads its tunables only at start-up), so glibc asks the kernel for 2 MB pages for every
large block. A fresh buffer then takes one fault per 2 MB instead of one per 4 KB, and
nothing is kept: faster steps at the same peak RSS, faster even than keeping freed memory
(benchmarks/README.md#host-memory). `configure` does both, first thing in a launcher.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import sys

# glibc <malloc.h>; a trim threshold of -1 becomes SIZE_MAX (never trim).
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"  # glibc >= 2.35: madvise(MADV_HUGEPAGE) on large blocks
THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"


def computes_on_cpu() -> bool:
    """Whether JAX's default backend will be the CPU, decided without importing JAX."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return importlib.util.find_spec("libtpu") is None and importlib.util.find_spec("jax_plugins") is None


def keep_freed_memory() -> bool:
    """With BERTJAX_KEEP_FREED_MEMORY=1: glibc malloc with one arena, no mmap for large
    blocks, no trimming (see the module docstring). True when set; a warning on stderr
    when asked for but not possible here."""
    if os.environ.get("BERTJAX_KEEP_FREED_MEMORY", "") != "1":
        return False
    if not computes_on_cpu():
        reason = "JAX computes on an accelerator here"
    elif "jax" in sys.modules:
        reason = "JAX is already imported (call it first thing in the process)"
    elif platform.libc_ver()[0] != "glibc":
        reason = "the C library is not glibc"
    else:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
        if all(mallopt(option, value) == 1 for option, value in
               ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1))):
            return True
        reason = "glibc refused the settings"
    print(f"warning: BERTJAX_KEEP_FREED_MEMORY=1 ignored: {reason}", file=sys.stderr)
    return False


def huge_pages_possible() -> bool:
    """glibc >= 2.35 (the hugetlb tunable) and a kernel that gives transparent huge pages to
    regions that ask for them (THP 'madvise' or 'always')."""
    name, version = platform.libc_ver()
    try:
        if name != "glibc" or tuple(int(part) for part in version.split(".")[:2]) < (2, 35):
            return False
        with open(THP_SETTING) as setting:
            return "[never]" not in setting.read()
    except (OSError, ValueError):  # no THP setting to read, or a version that is not numbers
        return False


def use_huge_pages() -> None:
    """Restarts this process (os.execv: the same pid, interpreter and arguments) with
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 added, when JAX will compute on the CPU and
    `huge_pages_possible()`; returns where it has nothing to do: already set, turned off by
    BERTJAX_HUGE_PAGES=0, or a script read from stdin (it cannot be read again)."""
    if (HUGE_PAGES_TUNABLE.split("=")[0] in os.environ.get("GLIBC_TUNABLES", "")
            or os.environ.get("BERTJAX_HUGE_PAGES", "") == "0" or sys.argv[0] in ("", "-")
            or not computes_on_cpu() or not huge_pages_possible()):
        return
    tunables = os.environ.get("GLIBC_TUNABLES")
    os.environ["GLIBC_TUNABLES"] = f"{tunables}:{HUGE_PAGES_TUNABLE}" if tunables else HUGE_PAGES_TUNABLE
    sys.stdout.flush(), sys.stderr.flush()
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError as error:  # the process goes on as it is
        print(f"warning: no restart with transparent huge pages: {error}", file=sys.stderr)


def configure() -> None:
    """What a launcher calls first thing: `use_huge_pages()`, then `keep_freed_memory()`."""
    use_huge_pages()
    keep_freed_memory()

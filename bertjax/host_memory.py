"""Host memory for XLA's CPU backend: an opt-in mode that keeps freed buffers for the next step.

XLA:CPU allocates a step's temporary buffer (1.3 GB for BERT-base at batch 8, length 128)
with malloc on one of its worker threads. glibc serves a block that large from a fresh
mmap in a thread arena and unmaps it on free, so every step faults in and zeroes the whole
buffer again: about 360,000 page faults and 0.6 s of kernel time per BERT-base step on a
2-core machine. With one malloc arena, no mmap for large blocks and no trimming of the
heap's top, the freed buffer is reused in place (no faults): BERT-base steps 1.2x faster,
the demo 1.8x. The price is memory: nothing freed goes back to the system, and the one
heap can fragment (peak RSS: BERT-base 3.3 GB in most runs, 4.7 to 6.3 GB in about one of
four; the demo's tiny model 1.2 -> 1.9 GB), so it is off unless BERTJAX_KEEP_FREED_MEMORY=1
(launch/demo.sh sets it).

The launchers that run steps (pretrain, finetune, demo, benchmark) call
`keep_freed_memory()` before they import anything else of bertjax: it must run before any
thread other than the main one allocates (glibc fixes the arena limit when the first extra
arena is made, and a thread keeps the arena it has), so it refuses, with a warning, once
JAX is imported. It acts only when JAX will compute on the CPU (JAX_PLATFORMS=cpu, or no
TPU or GPU plugin installed) and on glibc.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import sys

# glibc <malloc.h>; a trim threshold of -1 becomes SIZE_MAX (never trim).
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8


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

"""Host memory for XLA's CPU backend: an opt-in mode that keeps freed buffers for the next step.

XLA:CPU allocates a step's temporary buffer (1.3 GB for BERT-base at batch 8, length 128)
with malloc on one of its worker threads. glibc serves a block that large from a fresh
mmap in a thread arena and unmaps it on free, so every step faults in and zeroes the whole
buffer again: about 360,000 page faults and 0.6 s of kernel time per BERT-base step on a
2-core machine. With one malloc arena, no mmap for large blocks and no trimming of the
heap's top, the freed buffer is reused in place (no faults): BERT-base steps 1.2x faster,
the demo 1.8x. The price is memory: nothing freed goes back to the system, and the one heap
fragments (peak RSS: BERT-base 3.3 -> 4.7 to 6.3 GB; the demo's tiny model 1.2 -> 1.9 GB),
so it is off unless BERTJAX_KEEP_FREED_MEMORY=1 (launch/demo.sh sets it).

`keep_freed_memory()` sets it with glibc's mallopt. It must run before any thread other
than the main one allocates (glibc fixes the arena limit when the first extra arena is
made), so `bertjax.cli`, which every launcher imports first, calls it on import. It acts
only when asked, when JAX will compute on the CPU (JAX_PLATFORMS=cpu, or no TPU or GPU
plugin installed) and on glibc.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os

# glibc <malloc.h>; a trim threshold of -1 becomes SIZE_MAX (never trim).
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8


def computes_on_cpu() -> bool:
    """Whether JAX's default backend will be the CPU, decided without importing JAX."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return importlib.util.find_spec("libtpu") is None and importlib.util.find_spec("jax_plugins") is None


def keep_freed_memory() -> bool:
    """glibc malloc: one arena, no mmap for large blocks, no trimming (see the module
    docstring); True when set."""
    if os.environ.get("BERTJAX_KEEP_FREED_MEMORY", "") != "1" or not computes_on_cpu():
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not Linux with glibc
        return False
    return all(mallopt(option, value) == 1 for option, value in
               ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1)))

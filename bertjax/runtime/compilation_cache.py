"""XLA's persistent compilation cache, on for every launcher, and the options bertjax compiles with.

A second run that compiles the same functions (a resumed or repeated run, each run of a
sweep or of several seeds, predictions from the same model, the demo run again) loads the
compiled code from disk instead of compiling it again: on a CPU that is most of a short
fine-tuning run's fixed cost. (The train step takes the seed and the learning-rate schedule's
numbers as arguments, `trainer.step_inputs`, so runs that differ only in them share it.)
The cache lives in $BERTJAX_COMPILATION_CACHE, else
$XDG_CACHE_HOME/bertjax/xla (~/.cache/bertjax/xla); BERTJAX_COMPILATION_CACHE=off turns it
off. Entries are keyed by the program, the compiler options and the devices, so a stale
entry is never used; delete the folder to reclaim the space. From Python, call `enable()`.
JAX writes entries from process 0 only: a multi-host run needs a folder every host reads (gs://).
"""

from __future__ import annotations

import os
from typing import Any

ENV = "BERTJAX_COMPILATION_CACHE"
CPU_OPTIONS = {"xla_backend_optimization_level": 1}


def directory() -> str | None:
    """The cache folder in use by default (None: turned off)."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "false") else value
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bertjax", "xla")


def enable(path: str | None = None) -> str | None:
    """Points JAX's persistent compilation cache at `path` (default: `directory()`) for every
    compilation that takes over a second; returns the folder (None when turned off)."""
    import jax

    path = path or directory()
    if path:
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    return path


def compiler_options() -> dict[str, Any] | None:
    """XLA options for bertjax's train, evaluation and prediction steps (`jax.jit(...,
    compiler_options=...)`): on CPU, LLVM at -O1 instead of -O2 for XLA's own loops (the
    matmuls are library calls either way): compiles are faster and the steps run as fast
    (benchmarks/README.md#cpu-compile-level). None on other backends, or when XLA_FLAGS chooses the level."""
    import jax

    if jax.default_backend() != "cpu" or "xla_backend_optimization_level" in os.environ.get("XLA_FLAGS", ""):
        return None
    return dict(CPU_OPTIONS)

"""XLA's persistent compilation cache, on for every launcher.

A second run that compiles the same functions (a resumed or repeated run, each run of a
sweep or of several seeds, predictions from the same model, the demo run again) loads the
compiled code from disk instead of compiling it again: on a CPU that is most of a short
fine-tuning run's fixed cost. (The train step takes the seed and the learning-rate schedule's
numbers as arguments, `trainer.step_inputs`, so runs that differ only in them share it.)
The cache lives in $BERTJAX_COMPILATION_CACHE, else
$XDG_CACHE_HOME/bertjax/xla (~/.cache/bertjax/xla); BERTJAX_COMPILATION_CACHE=off turns it
off. Entries are keyed by the program, the compiler options and the devices, so a stale
entry is never used; delete the folder to reclaim the space. From Python, call `enable()`.
"""

from __future__ import annotations

import os

ENV = "BERTJAX_COMPILATION_CACHE"


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

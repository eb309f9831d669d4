"""Compiling the programs a loop will need in a background thread, while the loop runs.

Fine-tuning compiles its train step once per bucket length and its evaluation step once per
evaluation length. Compiled on first use, each one stops the loop where the first batch of a
new length comes; compiled ahead, in the order of first use, they overlap the steps that run
meanwhile (XLA's compiler works mostly on one thread; on an accelerator the host's cores are
otherwise idle during a step).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, Callable, Hashable, Iterable

THREAD_PREFIX = "bertjax-compile"
_running = 0  # compiles under way in background threads
_running_lock = threading.Lock()


def compiling() -> bool:
    """Whether a background thread is compiling: interpreter shutdown would wait for it to
    finish (`cli._exit` ends the process with os._exit instead). An idle thread does not count:
    the shutdown ends it at once (counted, a multi-host run's processes left by different
    exits, and the one waiting at JAX's shutdown barrier aborted)."""
    return _running > 0


def _counted(compile_fn: Callable[[Hashable], tuple[Any, float]], key: Hashable) -> tuple[Any, float]:
    global _running
    with _running_lock:
        _running += 1
    try:
        return compile_fn(key)
    finally:
        with _running_lock:
            _running -= 1


class CompileAhead:
    """`compile_fn(key) -> (compiled, seconds)` for each of `keys`, in that order, in one
    background thread. `take(key)` hands over a key's compiled program once:

    - one the thread has finished is returned at once;
    - one it is compiling is waited for;
    - one it has not reached yet, or a key not given, is compiled in the caller's thread at
      once (it does not queue behind the others).

    An error while compiling a key is raised by `take` for that key. `close()` drops the keys
    not started; `take` still works after it (compiling in the caller's thread).
    """

    def __init__(self, compile_fn: Callable[[Hashable], tuple[Any, float]], keys: Iterable[Hashable]):
        self._compile_fn = compile_fn
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=THREAD_PREFIX)
        self._futures = {key: self._pool.submit(_counted, compile_fn, key) for key in dict.fromkeys(keys)}

    def take(self, key: Hashable) -> tuple[Any, float, float]:
        """(the compiled program, the seconds its compilation took, the seconds the caller
        waited for it: 0 when it was ready, all of its compilation when not started)."""
        start = time.perf_counter()
        future = self._futures.pop(key, None)
        if future is None or future.cancel():
            compiled, seconds = self._compile_fn(key)
        else:
            ready = future.done()
            compiled, seconds = future.result()
            if ready:
                return compiled, seconds, 0.0
        return compiled, seconds, time.perf_counter() - start

    def close(self) -> None:
        """Drops the compilations not started; one under way finishes in the background."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "CompileAhead":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

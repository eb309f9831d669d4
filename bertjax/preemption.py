"""SIGTERM handling: stop training at a step every host agrees on.

TPU VM maintenance and spot/preemptible reclaims send SIGTERM, then kill the VM some
seconds later. The trainer polls `should_stop(step)` after each step; once it returns
True (on every host at the same step) the trainer saves with `force=True`, waits for the
save, and exits non-zero.
"""

from __future__ import annotations

import logging
import signal

import jax
import numpy as np
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)


class PreemptionWatcher:
    """Installs a SIGTERM handler that sets a flag; `should_stop` turns it into a decision.

    In a multi-process run the hosts agree through an all-gather of their flags (stop if
    any host was signalled). That all-gather is a collective that waits for the device,
    so it runs only every `sync_every_steps` steps (the same steps on every host, which
    must all call `should_stop` with the same steps). A single process checks its flag
    at every step for free.
    """

    def __init__(self, sync_every_steps: int = 10, signals: tuple[int, ...] = (signal.SIGTERM,)):
        if not isinstance(sync_every_steps, int) or sync_every_steps < 1:
            raise ValueError(f"PreemptionWatcher: sync_every_steps must be an int >= 1, got {sync_every_steps!r}")
        self.sync_every_steps = sync_every_steps
        self.signalled = False  # set by the handler on this host
        self.signal_name: str | None = None
        self._previous = {sig: signal.signal(sig, self._handle) for sig in signals}

    def _handle(self, signum, frame) -> None:
        del frame
        self.signalled = True
        self.signal_name = signal.Signals(signum).name

    def should_stop(self, step: int) -> bool:
        """True when this host (single process) or any host (multi-process) was signalled."""
        if jax.process_count() == 1:
            stop = self.signalled
        elif step % self.sync_every_steps:
            return False
        else:
            flags = multihost_utils.process_allgather(np.int32(self.signalled))
            stop = bool(np.max(flags))
        if stop:
            source = f"{self.signal_name} received" if self.signalled else "another host was signalled"
            log.warning("preemption: %s; stopping at step %d", source, step)
        return stop

    def close(self) -> None:
        """Puts back the signal handlers that were installed before."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

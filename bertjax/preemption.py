"""SIGTERM (and, single process, Ctrl-C) handling: stop training at a step every host agrees on.

TPU VM maintenance, spot/preemptible reclaims and SLURM send SIGTERM, then kill the
process some seconds later. The trainer calls `should_stop(step)` once per step on every
host; once it returns True (on every host at the same step) the trainer saves with
`force=True`, waits for the save, and exits non-zero.

Single process: a Python SIGTERM handler sets a flag, checked at every step for free.
Ctrl-C (SIGINT) does the same, so an interrupted run saves and resumes; a second Ctrl-C
quits at once (KeyboardInterrupt), without saving.

Multi-process (jax.distributed initialised): JAX's preemption sync point. The distributed
runtime installs its own SIGTERM handler at `jax.distributed.initialize`; the signalled
host tells the coordination service, which has every host report how far it got (in a
background thread) and picks the step after the furthest one. Until a signal arrives,
`should_stop` is a local counter comparison: no device collective, nothing that waits
for the device or for other hosts, so the step pipeline is never stalled. The rule JAX
sets: every host calls it once per step, counting from the same start. This class passes
its own call count (1, 2, ...), so a signal that arrives before the first step (during
restore or compilation) stops every host at its first step.
"""

from __future__ import annotations

import logging
import signal
import sys

import jax
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)


class PreemptionWatcher:
    """Create one after `jax.distributed.initialize` (if any); call `should_stop` every step.

    Multi-process runs need JAX's preemption service (`jax_enable_preemption_service`, on
    by default); without it `should_stop` raises RuntimeError.
    """

    def __init__(self):
        self.coordinated = jax.distributed.is_initialized()
        self.signalled = None  # single process: the name of the signal the handler received
        self._calls = 0
        self._installed = not self.coordinated  # a Python handler would replace the runtime's
        if self._installed:
            # None: the handler before was not set from Python; SIG_DFL is then the best guess.
            self._previous = {number: signal.signal(number, self._handle) or signal.SIG_DFL
                              for number in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum, frame) -> None:
        del frame
        if signum == signal.SIGINT:
            if self.signalled:
                raise KeyboardInterrupt  # a second Ctrl-C: quit now
            print("\ninterrupted: stopping with a checkpoint after this step (Ctrl-C again quits without saving)",
                  file=sys.stderr, flush=True)
        self.signalled = self.signalled or signal.Signals(signum).name

    def should_stop(self, step: int) -> bool:
        """True when some host was sent SIGTERM; then True on every host at the same step."""
        self._calls += 1
        if self.coordinated:
            stop = multihost_utils.reached_preemption_sync_point(self._calls)
        else:
            stop = self.signalled
        if stop:
            log.warning("preemption: %s received%s; stopping at step %d", self.signal_name,
                        " by a host of this run" if self.coordinated else "", step)
        return bool(stop)

    @property
    def signal_name(self) -> str:
        """The signal that stops the run: SIGTERM, or SIGINT (Ctrl-C, single process)."""
        return self.signalled or "SIGTERM"

    def close(self) -> None:
        """Puts back the SIGTERM and SIGINT handlers installed before (single process)."""
        if self._installed:
            for number, handler in self._previous.items():
                signal.signal(number, handler)
            self._installed = False

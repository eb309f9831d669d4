"""SIGTERM (and, single process, Ctrl-C) handling: stop training at a step every host agrees on.

Spot/preemptible reclaims and SLURM send SIGTERM, then kill the
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
sets: every host calls it once per step, counting from the same start, and JAX keeps the
last number any caller gave, so nothing else may ask (checkpointing.Checkpointer keeps orbax
from asking with a saved step) and this class passes the training step; `report_start` tells JAX
the step a run resumes from as soon as its workdir is held (trainer.hold_workdir), before the
data are read, and again before its restore (trainer.initial_state), so a signal during
start-up stops every host at its first step. Long work before the first step that the hosts
do in step (the frozen encoder's caching) asks `stop_in_step` instead: the notice key JAX's
service keeps, agreed by a collective.

A step waits for its batch: `interruptible(batches, watcher)` produces them in a
background thread and waits for each in short, interruptible waits, so a stalled input
pipeline (an iterator stuck in TensorFlow's C++, where Python signal handlers never run)
still stops on SIGTERM or Ctrl-C (single process: the flag) with InputInterrupted.
"""

from __future__ import annotations

import logging
import queue
import signal
import sys
import threading
import time
from typing import Iterator

import jax
import numpy as np
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)


_reported = 0  # the last step this process gave JAX's sync point (JAX's counter starts at 0)
_notice_before_start = False  # a notice came before report_start: stop at the first step


def _reached(step: int) -> bool:
    global _reported
    _reported = step
    return bool(multihost_utils.reached_preemption_sync_point(step))


def report_start(step: int) -> None:
    """Tells JAX's preemption sync point the step this host starts from (multi-process runs;
    nothing otherwise), so a notice before the first step stops every host at it.

    A notice that came before this call has fixed the sync point at the step after the one
    reported last (none: 1; a sweep's previous run: its last step, which orbax's final save
    reports, one past the last this module asked about), which a run resuming further on
    would never reach: every host (they report the same steps) then stops at its first step."""
    global _notice_before_start
    if jax.distributed.is_initialized():
        last = _reported
        if _reached(last + 1) or _reached(last + 2):
            _notice_before_start = True
        _reached(step)


_unheeded: str | None = None  # a signal a closed watcher received and its run finished without heeding
# The key JAX's preemption sync manager sets in the coordination service when a host is sent
# SIGTERM (its C++ handler, which a Python one would replace, tells Python nothing else).
_NOTICE_KEY = "RECEIVED_PREEMPTION_NOTICE"


def _notice_received() -> bool:
    """Whether some host of this multi-process run was sent SIGTERM: JAX's notice key is set.
    False where this JAX keeps no such key (its internals changed): the run then stops at its
    first step, as `should_stop` decides."""
    try:
        from jax._src import distributed

        distributed.global_state.client.key_value_try_get(_NOTICE_KEY)
        return True
    except Exception:  # noqa: BLE001 (NOT_FOUND: no notice; or no such client in this JAX)
        return False


def stopped_by(signal_name: str) -> str:
    """How a stop is told: 'preempted (SIGTERM)', or for SIGINT 'interrupted (Ctrl-C)' (a person,
    not a scheduler)."""
    return "interrupted (Ctrl-C)" if signal_name == "SIGINT" else f"preempted ({signal_name})"


class PreemptionWatcher:
    """Create one after `jax.distributed.initialize` (if any); call `should_stop` every step.

    Multi-process runs need JAX's preemption service (`jax_enable_preemption_service`, on
    by default); without it the watcher raises RuntimeError.
    """

    def __init__(self, start_step: int = 0):
        """start_step: the step the run starts from (restored), the one before its first."""
        global _unheeded
        self.coordinated = jax.distributed.is_initialized()
        report_start(start_step)
        # Single process: the name of the signal the handler received (or an earlier watcher's
        # that its run finished without stopping for: the next run in this process stops).
        self.signalled, _unheeded = _unheeded, None
        self._decided: tuple[int, bool] | None = None  # multi-process: (step, JAX's answer) last given
        self.heeded = False  # the run stopped for the signal (a step, an input wait, a second Ctrl-C)
        self._installed = not self.coordinated  # a Python handler would replace the runtime's
        if self._installed:
            # None: the handler before was not set from Python; SIG_DFL is then the best guess.
            self._previous = {number: signal.signal(number, self._handle) or signal.SIG_DFL
                              for number in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum, frame) -> None:
        del frame
        if signum == signal.SIGINT:
            if self.signalled:
                self.heeded = True
                raise KeyboardInterrupt  # a second Ctrl-C: quit now
            # (the same watcher stops the caching of a frozen encoder's features, batch by batch)
            print("\ninterrupted: stopping after this step or batch, with what is done saved (Ctrl-C again quits "
                  "without saving)",
                  file=sys.stderr, flush=True)
        self.signalled = self.signalled or signal.Signals(signum).name

    def should_stop(self, step: int) -> bool:
        """True when some host was sent SIGTERM; then True on every host at the same step
        (multi-process: asked again for a step, the same answer)."""
        global _notice_before_start
        if self.coordinated:  # JAX's answer for a step holds (a notice now stops a later step)
            if self._decided is not None and self._decided[0] == step:
                return self._decided[1]
            stop = _reached(step) or _notice_before_start
            _notice_before_start = False
            self._decided = (step, bool(stop))
        else:  # a signal that came since the last question stops this step
            stop = self.signalled
        if stop and not self.heeded:  # (asked again for the step it stops at)
            self.heeded = True
            if self.signal_name != "SIGINT":  # (a Ctrl-C's handler has said so on the console)
                log.warning("preemption: %s received%s; stopping at step %d", self.signal_name,
                            " by a host of this run" if self.coordinated else "", step)
        return bool(stop)

    def stop_now(self) -> str | None:
        """For work before the first step, which has no step to stop at: the signal received
        (single process), marked heeded, else None; a multi-process run stops only at a step
        every host agrees on (`should_stop`), so None there."""
        if self.coordinated or not self.signalled:
            return None
        self.heeded = True
        return self.signal_name

    def stop_in_step(self) -> str | None:
        """`stop_now` for work before the first step that every process does in step with the
        others (the frozen encoder's caching: each calls this at the same points; a collective
        on several processes), where a multi-process run can stop too: "SIGTERM" on every
        process once any host's notice reached JAX's coordination service, marked heeded."""
        if not self.coordinated:
            return self.stop_now()
        noticed = np.int64(_notice_received())
        if jax.process_count() > 1:
            noticed = np.max(multihost_utils.process_allgather(noticed))
        if not noticed:
            return None
        self.heeded = True
        return self.signal_name

    @property
    def signal_name(self) -> str:
        """The signal that stops the run: SIGTERM, or SIGINT (Ctrl-C, single process)."""
        return self.signalled or "SIGTERM"

    @property
    def stopped_by(self) -> str:
        """How the stop is told (`stopped_by`): 'preempted (SIGTERM)', 'interrupted (Ctrl-C)'."""
        return stopped_by(self.signal_name)

    def close(self) -> None:
        """Puts back the SIGTERM and SIGINT handlers installed before (single process). A signal
        received that the run did not stop for (it came at the last step) is handed to the next
        watcher of this process: the demo's next stage, a sweep's next run stop at their first
        step rather than run on until the scheduler's SIGKILL."""
        global _unheeded
        if self._installed:
            for number, handler in self._previous.items():
                signal.signal(number, handler)
            self._installed = False
            if self.signalled and not self.heeded:
                _unheeded = self.signalled


class InputInterrupted(Exception):
    """A stop signal arrived while the loop waited for its next batch; `waited` seconds."""

    def __init__(self, signal_name: str, waited: float):
        super().__init__(f"{signal_name} while waiting {waited:.0f}s for the next batch")
        self.signal_name, self.waited = signal_name, waited


_END = object()


INPUT_THREAD = "bertjax-input"
JOIN_SECONDS = 10.0  # how long closing waits for the thread to finish the item it is making


def input_thread_alive() -> bool:
    """Whether an `interruptible` thread is still making an item (a stalled input): the
    process must then end with os._exit, as interpreter shutdown would abort inside TensorFlow."""
    return any(thread.name == INPUT_THREAD and thread.is_alive() for thread in threading.enumerate())


def interruptible(batches: Iterator, watcher: PreemptionWatcher, poll_seconds: float = 0.5) -> Iterator:
    """`batches`' items, produced one ahead by a background thread; while the caller waits
    for one, `watcher.signalled` (SIGTERM, Ctrl-C) is checked every `poll_seconds` and
    raises InputInterrupted. Errors of `batches` are raised here, in the caller's thread.
    Closing the generator (or finishing it) stops the thread: it waits up to JOIN_SECONDS for
    the item in the making (a thread killed inside TensorFlow at exit aborts the process);
    after InputInterrupted it does not wait, as the caller's save must fit in the notice's grace
    period."""
    ready: queue.Queue = queue.Queue(maxsize=1)
    closed = threading.Event()

    def hand_over(item, error=None) -> bool:  # False once the caller is gone
        while not closed.is_set():
            try:
                ready.put((item, error), timeout=poll_seconds)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        try:
            for item in batches:
                if not hand_over(item):
                    return
            hand_over(_END)
        except BaseException as error:  # noqa: BLE001 -- handed to the caller's thread
            hand_over(None, error)

    producer = threading.Thread(target=produce, name=INPUT_THREAD, daemon=True)
    producer.start()
    interrupted = False
    try:
        while True:
            start = time.monotonic()
            while True:
                try:
                    item, error = ready.get(timeout=poll_seconds)
                    break
                except queue.Empty:
                    if watcher.signalled:
                        interrupted = watcher.heeded = True
                        raise InputInterrupted(watcher.signal_name, time.monotonic() - start) from None
            if error is not None:
                raise error
            if item is _END:
                return
            yield item
    finally:  # the caller is done (exhausted, stopped, or `close()`d): let the thread finish its item
        closed.set()
        if not interrupted:  # a stalled input: the save comes first (the process then ends with
            producer.join(timeout=JOIN_SECONDS)  # os._exit while the thread runs: input_thread_alive)

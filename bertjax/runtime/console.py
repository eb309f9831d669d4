"""The console, for people: a live progress line on a terminal, plain lines elsewhere.

On a terminal, `Progress` keeps one line at the bottom up to date (step/total, a bar, the
last logged values, rate and ETA) and prints permanent lines above it, one per log step. Not
on a terminal (CI logs, `> file`), nothing is redrawn: only the permanent lines appear.

On a run of several processes (hosts), every process runs the same code and would log the
same warnings: the launchers leave them to process 0 (bertjax.runtime.cli). A warning only
its own host can meet (its disk, its files, its CPU) is logged with `extra=PROCESS_SPECIFIC`
and comes from whichever process meets it, named.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from typing import Callable, TextIO

_REDRAW_SECONDS = 0.2
LINE_SECONDS = 30.0  # a long phase's permanent progress line this often off a terminal (a log file)
PROCESS_SPECIFIC = {"process_specific": True}  # a log record's `extra`: what this host alone may meet


def format_duration(seconds: float) -> str:
    """62 -> '1m02s', 3725 -> '1h02m', 5 -> '5s'."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Step progress of one phase (`label`), from `start` to `total`.

    advance(step): after each step (cheap: redraws at most every 0.2 s on a terminal).
    show(text): the values shown in the live line, "name value" pairs: "loss 3.21 acc 0.40".
    line(text): a permanent line (printed above the live line).
    line_seconds: off a terminal, `advance` also prints a permanent status line (step/total,
    rate, ETA) this often.
    The rate counts only time between `advance` calls outside `pause()`d stretches (the steps'
    own speed); the ETA adds the recurring pauses' share of the time so far (evaluations and
    checkpoints come again; `pause(recurring=False)`, a compile wait, does not). Both skip the
    first step (compilation); pauses before it (e.g. compiling ahead) do not count.
    timed_from_start: time from the start instead, for work without a compilation (a pool of
    workers, whose first round of units ends at once: skipped, the rate was that round's
    count over seconds and the ETA a fraction of the true one).
    work(step): the work before `step` (rows, where the batch grows): the ETA prices the steps
    left by their work at the pace so far, not by their number (the small early steps of a
    batch warmup made it a fraction of the true one); None: steps.
    """

    def __init__(self, total: int, start: int = 0, *, label: str = "step", stream: TextIO | None = None,
                 enabled: bool = True, unit: str = "steps", line_seconds: float | None = None,
                 work: Callable[[int], float] | None = None, timed_from_start: bool = False):
        self.total, self.step, self.label, self.unit = total, start, label, unit
        self.work = work or (lambda step: step)
        self.line_seconds = line_seconds
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self.text = ""
        self._first_step: int | None = None
        self._clock_start = 0.0
        self._paused = self._recurring_paused = 0.0
        self._pause_start: float | None = None
        self._pause_recurs = True
        self._last_draw = 0.0
        self._last_line = time.perf_counter()
        if timed_from_start:  # no compilation to leave out; a pool's first round finishes together
            self._first_step, self._clock_start = start, self._last_line

    def advance(self, step: int) -> None:
        now = time.perf_counter()
        if self._first_step is None:  # timing starts after the first step (compilation)
            self._first_step, self._clock_start, self._paused, self._recurring_paused = step, now, 0.0, 0.0
        self.step = step
        if self.live and (now - self._last_draw >= _REDRAW_SECONDS or step >= self.total):
            self._draw(now)
        elif not self.live and self.line_seconds is not None and now - self._last_line >= self.line_seconds:
            self._last_line = now
            self.line(self._status(bar=False))

    def _active_seconds(self) -> float:
        """Time since the first step outside pauses (an open one too)."""
        now = time.perf_counter()
        open_pause = 0.0 if self._pause_start is None else now - self._pause_start
        return now - self._clock_start - self._paused - open_pause

    def steps_per_second(self) -> float | None:
        if self._first_step is None or self.step <= self._first_step:
            return None
        return (self.step - self._first_step) / max(self._active_seconds(), 1e-9)

    def eta_seconds(self) -> float | None:
        if self._first_step is None or self.step <= self._first_step:
            return None
        done = self.work(self.step) - self.work(self._first_step)  # the work of the timed steps
        per_work = (self._active_seconds() + self._recurring_paused) / max(done, 1e-9)
        return (self.work(self.total) - self.work(self.step)) * per_work

    def pause(self, recurring: bool = True) -> None:
        if self._pause_start is None:
            self._pause_start, self._pause_recurs = time.perf_counter(), recurring

    def resume(self) -> None:
        if self._pause_start is not None:
            seconds = time.perf_counter() - self._pause_start
            self._paused += seconds
            self._recurring_paused += seconds if self._pause_recurs else 0.0
            self._pause_start = None

    def show(self, text: str) -> None:
        self.text = text
        if self.live:
            self._draw(time.perf_counter())

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.live:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        if self.live:
            self._draw(time.perf_counter())
        self.stream.flush()

    def close(self, keep: bool = True) -> None:
        """Ends the live line: kept on screen, or (`keep` False: a phase whose result is the next
        line, as an evaluation's) cleared."""
        if self.live:
            self.stream.write("\n" if keep else "\r\x1b[K")
            self.stream.flush()
        self.live = False

    def _status(self, bar: bool, width: int | None = None) -> str:
        """'label step/total [bar] percent text rate ETA' (the bar and percent only if `bar`);
        within `width` characters, the text ("name value" pairs) is what gives way."""
        head = [f"{self.label} {self.step}/{self.total}"]
        if bar:
            fraction = min(1.0, self.step / max(self.total, 1))
            bar_width = 20
            filled = int(fraction * bar_width)
            head += ["[" + "=" * filled + " " * (bar_width - filled) + "]", f"{fraction:4.0%}"]
        tail = []
        rate, eta = self.steps_per_second(), self.eta_seconds()
        if rate:
            tail.append(f"{rate:.1f} {self.unit}/s")
        if eta is not None:
            tail.append(f"ETA {format_duration(eta)}")
        text = self.text
        if width is not None:  # whole "name value" pairs give way, the last first (a cut value would misread)
            words = text.split()
            while words and len(" ".join(head + words + tail)) > width:
                words = words[:-2]
            text = " ".join(words)
        status = " ".join(part for part in head + [text] + tail if part)
        return status if width is None else status[:width]

    def _draw(self, now: float) -> None:
        self._last_draw = now
        width = shutil.get_terminal_size((100, 20)).columns
        self.stream.write("\r\x1b[K" + self._status(bar=True, width=width - 1))
        self.stream.flush()


class PhaseClock:
    """Where a run's wall time went: `with clock.phase("evaluate"):` (or `clock.add(name,
    seconds)`) sums named phases; `seconds()` adds "other" (the rest since the clock started:
    for a training loop, the steps themselves and the host work between them)."""

    def __init__(self):
        self.start = time.perf_counter()
        self.totals: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def seconds(self, rest: str = "other") -> dict[str, float]:
        """{phase: seconds, ..., rest: the remainder, "total": since the clock started}."""
        total = time.perf_counter() - self.start
        return {**self.totals, rest: max(0.0, total - sum(self.totals.values())), "total": total}

    def summary(self, rest: str = "other") -> str:
        """'time: 41s = 3s tokenize + 12s compile + ...' for the console: whole seconds that add
        up to the total (rounded as running sums, so no part's rounding piles up; 0s parts left out)."""
        seconds = self.seconds(rest)
        total, so_far, shown = round(seconds.pop("total")), 0.0, {}
        seconds.pop(rest)  # (what the phases leave of the total)
        for name, value in seconds.items():
            shown[name] = round(so_far + value) - round(so_far)
            so_far += value
        shown[rest] = max(0, total - round(so_far))  # (0 where phases overlapped: a compile in the background)
        parts = " + ".join(f"{format_duration(value)} {name}" for name, value in shown.items() if value)
        return f"time: {format_duration(total)}" + (f" = {parts}" if parts else "")

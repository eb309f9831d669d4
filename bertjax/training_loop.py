"""What happens around each step of a training loop, the same for both stages: metrics at
log steps, the evaluation cadence, checkpoints, SIGTERM and the progress line (`Loop`). The
step itself, shardings and resume order are in trainer.py."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Callable, Iterator

import jax
import numpy as np

from bertjax import checkpointing
from bertjax.metrics import MetricsWriter, peak_flops_per_device
from bertjax.runtime import console, preemption
from bertjax.runtime.errors import TrainingDiverged, TrainingStopped
from bertjax.trainer import TrainState

log = logging.getLogger(__name__)


_EVALUATION_OWED = "evaluation_owed"  # checkpoint meta "extra": the step's evaluation was put off
_DIVERGED = "diverged"  # checkpoint meta "extra": the run stopped there for non-finite steps (why)


# Batches of an evaluation between two questions "has any host been told to stop?" of a
# multi-process run: each is a collective, cheap beside a batch, and a grace period's
# seconds are many batches.
COORDINATED_EVALUATION_CHECK = 8


class EvaluationInterrupted(Exception):
    """A stop signal came during an evaluation (`Loop.check_stop_during_evaluation`)."""


def evaluation_owed_at(directory: str, step: int) -> bool:
    """Whether the checkpoint of `step` in `directory` was saved by a stop that put off its
    evaluation."""
    return bool(_saved_extra(directory, step).get(_EVALUATION_OWED))


def _saved_extra(directory: str, step: int) -> dict[str, Any]:
    """The meta "extra" of the checkpoint of `step` in `directory` ({} when there is none)."""
    from bertjax.runtime import fileio

    folder = fileio.join(directory, str(step))
    return checkpointing.read_meta(folder)["extra"] if fileio.exists(folder) else {}


class Loop:
    """What happens around each step of a loop, the same for both stages.

    record(step, metrics, state): metrics stay on device until a log step (every `log_every`
      steps and the last), then are averaged, written (metrics.jsonl, TensorBoard, console)
      and the run stops (saved there) if `max_consecutive_bad_steps` non-finite steps came in a row.
    evaluates(step), evaluation(step, state), paused(): the evaluation cadence; time inside
      `paused()` (evaluation, checkpoints) is not counted in the throughput. An evaluation due
      at a step where a stop signal has come is left for the resumed run (`owes_evaluation`):
      the save comes first, within the notice's grace period; one that fails saves first too.
    save(step, state, extra_meta): a checkpoint when due (`checkpointer`'s interval, or the
      last step), and on SIGTERM a forced one, then TrainingStopped.
    The logged sequences/s counts `sequences_per_step`, or each step's own `sequences` passed
    to `record` (a growing batch): rows in pre-training (packed or not), examples in
    fine-tuning (with packed rows, an epoch's average number per step).
    """

    def __init__(self, *, workdir: str, checkpointer, saved_config: dict, num_steps: int, start_step: int,
                 log_every: int, eval_every: int, max_consecutive_bad_steps: int, sequences_per_step: float,
                 tokens_per_sequence: int | None = None, flops_per_sequence: float | None = None,
                 console_keys: tuple[str, ...] = ("loss",), label: str = "train",
                 fixed_metrics: dict[str, float] | None = None, bfloat16_products: bool = False,
                 rows_read: Callable[[int], int] | None = None):
        """rows_read(step): the rows of the training stream read before `step`, saved with each
        checkpoint as meta["extra"]["rows_read"] (where a resume with other batch settings
        picks the stream up)."""
        self.workdir, self.checkpointer, self.saved_config = workdir, checkpointer, saved_config
        self.rows_read = rows_read
        self.num_steps, self.start_step, self.log_every, self.eval_every = num_steps, start_step, log_every, eval_every
        self.max_consecutive_bad_steps = max_consecutive_bad_steps
        self.sequences_per_step, self.tokens_per_sequence = sequences_per_step, tokens_per_sequence
        self.flops_per_sequence, self.console_keys = flops_per_sequence, console_keys
        self.fixed_metrics = dict(fixed_metrics or {})  # logged with every record, e.g. compile time
        # A run stopped at an evaluation step saved first: its evaluation comes before the first
        # step, under this run's cadence or not (else those weights could never be the best).
        self.owes_evaluation = bool(start_step and eval_every
                                    and evaluation_owed_at(str(checkpointer.directory), start_step))
        # A run that stopped for non-finite steps at its last step has none left to resume: relaunched, it
        # is still no result (`check_not_diverged`).
        self.diverged_at_end = (_saved_extra(str(checkpointer.directory), start_step).get(_DIVERGED)
                                if start_step and start_step >= num_steps else None)
        self._diverged: str | None = None  # why this run stopped, saved with its step
        is_writer = jax.process_index() == 0
        # (A run killed after logging the owed evaluation owes it still: logged once, not twice.)
        self.writer = MetricsWriter(workdir, enabled=is_writer, start_step=start_step,
                                    redone="eval_" if self.owes_evaluation else "")
        self.progress = console.Progress(num_steps, start_step, label=label, enabled=is_writer, work=rows_read)
        self.peak_flops, self.peak_source = (peak_flops_per_device(bfloat16_products) if flops_per_sequence
                                             else (None, ""))
        self.watcher = preemption.PreemptionWatcher(start_step)
        self._evaluation_left: int | None = None  # the step whose evaluation a stop put off
        self._evaluation_batches = 0  # between-batch checks so far (`check_stop_during_evaluation`)
        self._input: Iterator | None = None  # the read-ahead input (`input`), stopped by `close`
        self.pending: list[dict[str, jax.Array]] = []
        self.pending_rows: list[float] = []  # each pending step's sequences: its weight in the logged mean
        self.window_start, self.window_paused = time.perf_counter(), 0.0
        self.last: dict[str, float] = {}

    def console(self, line: str) -> None:
        self.progress.line(line)

    def record(self, step: int, metrics: dict[str, jax.Array], state: TrainState,
               sequences: float | None = None) -> None:
        self.pending.append(metrics)
        self.pending_rows.append(self.sequences_per_step if sequences is None else sequences)
        self.progress.advance(step)
        if step % self.log_every == 0 or step == self.num_steps:
            self._log(step, state)

    def _log(self, step: int, state: TrainState) -> None:
        """Writes the steps recorded since the last log as one row at `step`: their mean, each
        weighted by its sequences (a growing batch's small steps count less), and the learning
        rate of the last. A step skipped for a non-finite loss counts in `skipped` (the share of
        the window's rows) and nowhere else: its loss would make the whole row's mean NaN."""
        fetched = jax.device_get(self.pending)
        seconds = (time.perf_counter() - self.window_start - self.window_paused) / len(self.pending)
        rows = np.asarray(self.pending_rows, np.float64)
        skipped = np.asarray([float(m.get("skipped", 0.0)) for m in fetched])
        every = np.ones(len(fetched), bool)
        updated = skipped < 1.0 if skipped.sum() < len(fetched) else every  # (all skipped: NaN shows)

        def mean(name: str, steps: np.ndarray) -> float:
            return float(np.average(np.asarray([m[name] for m in fetched])[steps], weights=rows[steps]))

        last = {name: mean(name, every if name == "skipped" else updated) for name in fetched[0]}
        if "learning_rate" in last:
            last["learning_rate"] = float(fetched[-1]["learning_rate"])
        last.update(self.fixed_metrics, step_time=seconds,
                    sequences_per_second=sum(self.pending_rows) / len(self.pending) / seconds)
        if self.tokens_per_sequence:
            last["tokens_per_second"] = last["sequences_per_second"] * self.tokens_per_sequence
        if self.flops_per_sequence:
            tflops = self.flops_per_sequence * last["sequences_per_second"] / jax.device_count() / 1e12
            last.update(tflops_per_device=tflops, mfu=tflops * 1e12 / self.peak_flops)
        self.writer.write(step, last)
        shown = " ".join(f"{key} {last[key]:.4f}" for key in self.console_keys if key in last)
        self.progress.show(shown)
        # A line per log step (on a terminal too, above the live line): the run's history.
        rate = f"{last['sequences_per_second']:.1f} seq/s"
        mfu = f" mfu {last['mfu']:.1%} [{self.peak_source}]" if "mfu" in last else ""
        eta = self.progress.eta_seconds()
        eta = f" ETA {console.format_duration(eta)}" if eta is not None else ""
        dropped = f" ({int(skipped.sum())} of {len(fetched)} steps skipped: non-finite)" if skipped.sum() else ""
        self.console(f"step {step}/{self.num_steps} {shown} lr {last['learning_rate']:.2e} "
                     f"gnorm {last['grad_norm']:.2f} {rate}{mfu}{eta}{dropped}")
        self.pending, self.pending_rows = [], []
        self.window_start, self.window_paused = time.perf_counter(), 0.0
        self.last.update(last)
        worst, skipped = jax.device_get((state.worst_bad_run, state.skipped_steps))
        if worst >= self.max_consecutive_bad_steps:
            # The weights were never updated from the bad steps: they are the good ones before them, kept
            # (owing this step's evaluation, if it has one and steps are left to resume).
            last = step >= self.num_steps
            if self.is_eval_step(step) and not last:
                self._evaluation_left = step
            self._diverged = (
                f"stopping at step {step}: {int(worst)} consecutive steps had a non-finite loss or gradient "
                f"(config.train.max_consecutive_bad_steps={self.max_consecutive_bad_steps}); {int(skipped)} skipped "
                f"in all. Weights were never updated from them (saved at step {step}): "
                + ("it was the run's last step, so none is left to resume: train again in a new workdir at a lower "
                   "learning rate, or check the data." if last else
                   "lower the learning rate or check the data, then run the same command again to resume."))
            self._save_now(step, state)
            if not last and self.watcher.should_stop(step):  # a stop signal too: it wins
                raise TrainingStopped(f"{self.watcher.stopped_by}: saved step {step} to "
                                      f"{self.checkpointer.directory} (its last {int(worst)} steps had a non-finite "
                                      f"loss or gradient); run the same command again to resume")
            raise TrainingDiverged(self._diverged, resumable=not last)

    def check_not_diverged(self) -> None:
        """TrainingDiverged (not resumable) when the run, relaunched after its last step, had
        stopped there for non-finite steps: its weights and evaluations are no result."""
        if self.diverged_at_end:
            raise TrainingDiverged(
                f"the run in {self.workdir} stopped at its last step ({self.start_step}) for non-finite losses or "
                "gradients, so none is left to resume: train again in a new workdir at a lower learning rate, or "
                "check the data.", resumable=False)

    def is_eval_step(self, step: int) -> bool:
        return bool(self.eval_every) and (step % self.eval_every == 0 or step == self.num_steps)

    def evaluates(self, step: int) -> bool:
        """Whether to evaluate after `step`: an evaluation step, unless the run stops there (the
        checkpoint's meta then says the evaluation is owed, and the resumed run runs it)."""
        if not self.is_eval_step(step):
            return False
        if step < self.num_steps and self.watcher.should_stop(step):
            self._evaluation_left = step
            return False
        return True

    def check_stop_during_evaluation(self, step: int) -> None:
        """Between an evaluation's batches (every process at each of the same batches):
        EvaluationInterrupted when a stop signal came; a dev set can take minutes, past a
        notice's grace period. Several processes ask each other every
        `COORDINATED_EVALUATION_CHECK` batches (a collective) and stop together."""
        if not self.watcher.coordinated:
            if self.watcher.signalled and self.watcher.should_stop(step):
                raise EvaluationInterrupted
            return
        self._evaluation_batches += 1
        if self._evaluation_batches % COORDINATED_EVALUATION_CHECK == 0 and self.watcher.stop_in_step():
            raise EvaluationInterrupted

    @contextlib.contextmanager
    def evaluation(self, step: int, state: TrainState):
        """Around the evaluation after `step` (paused): one that fails (out of device memory,
        a bad evaluation file) or that a stop signal interrupts (`check_stop_during_evaluation`)
        first saves `state` at `step` with the evaluation owed, so the steps since the last
        checkpoint are not lost and the resumed run evaluates first. The save is collective:
        only work every process does belongs inside (not process 0's metrics writes), so that a
        failure here is every process's."""
        with self.paused():
            try:
                yield
            except EvaluationInterrupted:
                self._evaluation_left = step
                self._log_before_stopping(step, state)
                self._save_now(step, state)
                raise TrainingStopped(f"{self.watcher.stopped_by} during the evaluation after step "
                                      f"{step}: saved step {step} to {self.checkpointer.directory}; run the same "
                                      "command again to resume (it evaluates first)") from None
            except Exception:
                self._evaluation_left = step
                try:  # the evaluation's error is the one to report, whatever the save does
                    self._log_before_stopping(step, state)
                    self._save_now(step, state)
                    log.error("the evaluation after step %d (or keeping its weights as the best) failed; saved step "
                              "%d to %s (the resumed run evaluates it first)", step, step, self.checkpointer.directory)
                except Exception:  # noqa: BLE001
                    log.exception("the evaluation after step %d (or keeping its weights as the best) failed, and so "
                                  "did saving the step", step)
                raise

    @contextlib.contextmanager
    def paused(self, recurring: bool = True, drain: bool = True):
        """Time out of the steps' rate: evaluations and checkpoints, which come again and count
        in the ETA, or (`recurring` False) a one-off wait such as a compile, which does not. With
        `drain`, the steps still queued on the device finish first: their time is the steps', not
        the pause's (else an evaluation's clock took it in, and the row after it showed several
        times the rate). Without, the host goes on queueing steps ahead of the device."""
        if drain:
            jax.block_until_ready(self.pending)
        start = time.perf_counter()
        self.progress.pause(recurring)
        try:
            yield
        finally:
            self.progress.resume()
            self.window_paused += time.perf_counter() - start

    def write_eval(self, step: int, metrics: dict[str, float], prefix: str = "eval_") -> None:
        self.writer.write(step, metrics, prefix=prefix)
        self.last.update({f"{prefix}{k}": v for k, v in metrics.items()})
        self.console(f"eval step {step}: " + " ".join(f"{prefix}{k} {v:.4f}" for k, v in sorted(metrics.items())))

    def input(self, batches: Iterator) -> Iterator:
        """`batches` read ahead in a thread, so that waiting for one still honours SIGTERM and
        Ctrl-C (preemption.interruptible); take each with `next_batch`."""
        self._input = preemption.interruptible(batches, self.watcher)
        return self._input

    def next_batch(self, batches: Iterator, step: int, state: TrainState) -> Any:
        """The next item of `batches` (`input(...)`'s, or any iterator). A stop signal while the
        input stalls saves `state` (at `step`, if not saved yet) and raises TrainingStopped
        (`input(...)`'s read-ahead hears it while waiting). The first logged row's time
        starts when the first batch is there: the input pipeline's start-up (files opened,
        shuffle buffers filled) is not the steps' pace."""
        try:
            batch = next(batches)
            if step == self.start_step:
                self.window_start, self.window_paused = time.perf_counter(), 0.0
            return batch
        except preemption.InputInterrupted as stopped:
            with self.paused():
                self._log_before_stopping(step, state)
                self._save_now(step, state)
            saved = self.checkpointer.latest_step()
            raise TrainingStopped(
                f"{preemption.stopped_by(stopped.signal_name)} at step {step} after waiting {stopped.waited:.0f}s "
                f"for the input pipeline; " + (f"saved step {saved} to {self.checkpointer.directory}; run the same "
                                               f"command again to resume" if saved is not None else "nothing was saved")
            ) from None

    def _log_before_stopping(self, step: int, state: TrainState) -> None:
        """The steps since the last log step as a row at `step`, written out before a stop: the
        resumed run starts after `step` and never logs them."""
        if self.pending:
            self._log(step, state)
        self.writer.flush()

    def _save_now(self, step: int, state: TrainState, extra_meta: dict | None = None) -> None:
        """A checkpoint of `state` at `step` now, due or not (unless saved already, or the run
        started there), waited for."""
        if step > self.start_step:
            self.checkpointer.save(step, state, data_position=step, config=self.saved_config, force=True,
                                   extra_meta=self._extra_meta(step, extra_meta))
        self.checkpointer.wait_until_finished()

    def _extra_meta(self, step: int, extra_meta: dict | None) -> dict | None:
        extra = dict(extra_meta or {})
        if self.rows_read is not None:
            extra["rows_read"] = int(self.rows_read(step))
        if self._evaluation_left == step:
            extra[_EVALUATION_OWED] = True
        if self._diverged:
            extra[_DIVERGED] = self._diverged
        return extra or extra_meta

    def save(self, step: int, state: TrainState, extra_meta: dict | None = None) -> None:
        due = self.checkpointer.due(step) or step == self.num_steps
        if due:
            # A gs:// metrics.jsonl is written every 30 s: first the rows up to this checkpoint,
            # which a resume from it never logs again.
            self.writer.flush()
        with self.paused(drain=due):  # (a step that saves nothing leaves the steps queued)
            if due:
                self.checkpointer.save(step, state, data_position=step, config=self.saved_config,
                                       force=step == self.num_steps, extra_meta=self._extra_meta(step, extra_meta))
            # At the last step the run is complete (saved above): it finishes rather than reporting
            # a preemption that a scheduler would retry.
            if step < self.num_steps and self.watcher.should_stop(step):
                self._log_before_stopping(step, state)
                self._save_now(step, state, extra_meta)
                raise TrainingStopped(f"{self.watcher.stopped_by}: saved step {step} to "
                                      f"{self.checkpointer.directory}; run the same command again to resume")

    def close(self) -> None:
        try:
            if self._input is not None:
                self._input.close()  # stops the read-ahead thread (see preemption.interruptible)
            self.progress.close()
            self.checkpointer.wait_until_finished()
            self.checkpointer.close()
        finally:  # a failed last save must not lose the metrics logged before it, nor keep the handlers
            self.watcher.close()
            self.writer.close()

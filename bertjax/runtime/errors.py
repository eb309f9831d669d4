"""Exceptions shared across layers, so that a lower layer (data preparation) can raise what the
launchers catch without importing the training code above it."""


class TrainingStopped(RuntimeError):
    """The run stopped early on purpose (preemption, non-finite losses); the message says why."""


class StopSignal(KeyboardInterrupt):
    """SIGTERM to a training launcher outside its loop's steps (`cli.stop_on_sigterm`): not an
    Exception, so that no `except Exception` on its way takes it for a failure (a checkpoint
    read retried, a step set aside as unreadable, a save reported failed), and a
    KeyboardInterrupt, which asyncio passes on: raised in a callback of orbax's event loop,
    any other BaseException is logged and dropped (the signal lost, or the read waiting for
    that callback's result forever). The launcher stops with exit code 3, as for
    TrainingStopped."""


class TrainingDiverged(TrainingStopped):
    """Stopped after too many non-finite steps in a row: the run's settings, not the machine
    (a sweep records it and goes on to its next run). `result`: a fine-tuning run's summary
    when it had evaluated before (its best weights and their predictions are written), else None.
    `resumable`: False when it stopped at its last step (no step is left to resume at a lower
    learning rate): the launchers end with an error, not the exit code a scheduler retries."""

    def __init__(self, message: str, result: dict | None = None, resumable: bool = True):
        super().__init__(message)
        self.result, self.resumable = result, resumable


class RunSettingsError(ValueError):
    """A run's settings that do not work with its data, known only once the data is read (a
    warmup share that gives no warmup step, a batch larger than the training split): a sweep
    records it and goes on to its next run."""

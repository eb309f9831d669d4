"""Exceptions shared across layers, so that a lower layer (data preparation) can raise what the
launchers catch without importing the training code above it."""


class TrainingStopped(RuntimeError):
    """The run stopped early on purpose (preemption, non-finite losses); the message says why."""


class TrainingDiverged(TrainingStopped):
    """Stopped after too many non-finite steps in a row: the run's settings, not the machine
    (a sweep records it and goes on to its next run). `result`: a fine-tuning run's summary
    when it had evaluated before (its best weights and their predictions are written), else None."""

    def __init__(self, message: str, result: dict | None = None):
        super().__init__(message)
        self.result = result


class RunSettingsError(ValueError):
    """A run's settings that do not work with its data, known only once the data is read (a
    warmup share that gives no warmup step, a batch larger than the training split): a sweep
    records it and goes on to its next run."""

"""Exceptions shared across layers, so that a lower layer (data preparation) can raise what the
launchers catch without importing the training code above it."""


class TrainingStopped(RuntimeError):
    """The run stopped early on purpose (preemption, non-finite losses); the message says why."""


class TrainingDiverged(TrainingStopped):
    """Stopped after too many non-finite steps in a row: the run's settings, not the machine
    (a sweep records it and goes on to its next run)."""

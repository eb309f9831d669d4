"""Downstream (fine-tuning) tasks by name: data, tokenization, and turning outputs into predictions.

`load_task(config, tokenizer)` builds the configured task (`config.task`) as a
`common.Task`: its tokenized splits, head, loss and official evaluation.
"""

from __future__ import annotations

from bertjax.tasks import classification


def task_names() -> tuple[str, ...]:
    return classification.TASKS


def load_task(config, tokenizer):
    """config.task -> its family's Task (classification: GLUE, demo, your own files)."""
    if config.task in classification.TASKS:
        return classification.load_task(config, tokenizer)
    raise ValueError(f"config.task={config.task!r} is not a known task; expected one of {task_names()}")

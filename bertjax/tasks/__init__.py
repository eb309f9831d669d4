"""Downstream (fine-tuning) tasks by name: data, tokenization, and turning outputs into predictions.

`load_task(config, tokenizer)` builds the configured task (`config.task`) as a
`common.Task`: its tokenized splits, head, loss and official evaluation. Families:
classification.py (GLUE, demo, your CSV/TSV/JSONL), squad.py (span QA), tagging.py (NER),
choice.py (multiple choice).
"""

from __future__ import annotations

from bertjax.tasks import choice, classification, squad, tagging

_FAMILIES = (classification, squad, tagging, choice)


def task_names() -> tuple[str, ...]:
    return tuple(name for family in _FAMILIES for name in family.TASKS)


def load_task(config, tokenizer):
    """config.task -> its family's Task."""
    for family in _FAMILIES:
        if config.task in family.TASKS:
            return family.load_task(config, tokenizer)
    raise ValueError(f"config.task={config.task!r} is not a known task; expected one of {task_names()}")

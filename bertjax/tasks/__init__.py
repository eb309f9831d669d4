"""Downstream (fine-tuning) tasks by name: data, tokenization, and turning outputs into predictions.

`load_task(config, tokenizer)` builds the configured task (`config.task`) as a
`common.Task`: its tokenized splits, head, loss and official evaluation. Families:
classification.py (GLUE, demo, your CSV/TSV/JSONL), squad.py (span QA), tagging.py (NER),
choice.py (multiple choice).
"""

from __future__ import annotations

from bertjax.tasks import choice, classification, squad, tagging

_FAMILIES = (classification, squad, tagging, choice)
# The tasks of each family that read your own files (config.data.train_file, ...); the
# others read their dataset (TFDS, or the demo's).
OWN_FILE_TASKS = {classification: ("classification", "regression"), squad: ("squad",), tagging: ("ner",),
                  choice: ("choice",)}
_OWN_FILE_KEYS = ("train_file", "eval_file", "test_file")


def task_names() -> tuple[str, ...]:
    return tuple(name for family in _FAMILIES for name in family.TASKS)


def load_task(config, tokenizer):
    """config.task -> its family's Task."""
    for family in _FAMILIES:
        if config.task in family.TASKS:
            check_own_files(config, OWN_FILE_TASKS[family])
            return family.load_task(config, tokenizer)
    raise ValueError(f"config.task={config.task!r} is not a known task; expected one of {task_names()}")


def check_own_files(config, own_file_tasks: tuple[str, ...]) -> None:
    """ValueError when a task that reads a dataset is given your own files (which it would
    ignore), naming the task of the same family that reads them."""
    given = [f"config.data.{key}" for key in _OWN_FILE_KEYS if config.data[key]]
    if given and config.task not in own_file_tasks:
        instead = " or ".join(repr(task) for task in own_file_tasks)
        raise ValueError(f"config.task={config.task!r} reads its own dataset and would ignore {', '.join(given)}: for "
                         f"your own files use the task {instead} (--config=configs/finetune.py:{own_file_tasks[0]})")

"""Downstream (fine-tuning) tasks by name: data, tokenization, heads, prediction and serving.

Each family module exports `FAMILY` (the protocol in family.py): classification.py (GLUE, the
demo, your CSV/TSV/JSONL), squad.py (span QA; squad_examples.py reads its files,
squad_answers.py decodes spans, squad_serving.py in the SavedModel), tagging.py (NER),
choice.py (multiple choice).
`FAMILIES` below is the registry; `load_task(config, tokenizer)` builds the configured task
(`config.task`) as a `common.Task`: its tokenized splits, head, loss and official evaluation;
`prepare_tfds(config)` prepares the TFDS datasets it reads.
"""

from __future__ import annotations

import inspect
from typing import Any

from absl import logging

from bertjax.data.sources import prepared_tfds_builder
from bertjax.tasks import choice, classification, squad, tagging
from bertjax.tasks.family import Family

FAMILIES: dict[str, Family] = {family.name: family for family in (
    classification.FAMILY, squad.FAMILY, tagging.FAMILY, choice.FAMILY)}
_OWN_FILE_KEYS = ("train_file", "eval_file", "test_file")


def task_names() -> tuple[str, ...]:
    return tuple(name for family in FAMILIES.values() for name in family.tasks)


def family_of_task(task: str) -> Family:
    """The family serving config.task=`task`; ValueError naming the known tasks otherwise."""
    for family in FAMILIES.values():
        if task in family.tasks:
            return family
    raise ValueError(f"config.task={task!r} is not a known task; expected one of {task_names()}")


def family_of_architecture(architecture: str) -> Family | None:
    """The family whose Hugging Face class is `architecture` (BertFor<Task>, or ModernBERT's
    ModernBertFor<Task>), or None."""
    bert_class = architecture.removeprefix("Modern")
    return next((family for family in FAMILIES.values() if family.hf_architecture == bert_class), None)


def predict_options(family: str) -> tuple[str, ...]:
    """The options a family's `predict` takes by name (span QA's n_best_size...: those its
    `check_options` checks); none for another name (fill-mask)."""
    if family not in FAMILIES:
        return ()
    parameters = inspect.signature(FAMILIES[family].check_options).parameters.values()
    return tuple(p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)


def load_task(config, tokenizer):
    """config.task -> its family's Task."""
    family = family_of_task(config.task)
    check_own_files(config)
    return family.load_task(config, tokenizer)


def prepare_tfds(config) -> None:
    """Downloads and prepares, where they are not yet, the TFDS datasets config.task reads
    (`sources.prepared_tfds_builder`): `finetune` has process 0 do it before the others look,
    so that on a folder they share (gs://) one process writes it, not every host at once. One
    that cannot be is a ValueError naming the others that cannot (MNLI reads glue/mnli and
    glue/ax: one launch says both)."""
    names, failed = family_of_task(config.task).tfds_datasets(config), []
    for name in names:
        try:
            prepared_tfds_builder(name, config.data.tfds_data_dir or None)
        except ValueError as error:
            failed.append((name, error))
    if failed:
        others = [name for name, _ in failed[1:]]
        also = f" (config.task={config.task!r} reads {', '.join(names)}; {', '.join(others)} cannot be read here " \
               "either: prepare every one)" if others else ""
        raise ValueError(f"{failed[0][1]}{also}") from None


def warn_of_other_families_settings(config) -> None:
    """Warns of each config.data setting given away from its default that only other families'
    tasks read (a SQuAD window's stride for NER, a column's name for SQuAD): config.task ignores
    it. A warning, not an error: one config may serve the tasks of several families."""
    family = family_of_task(config.task)
    readers: dict[str, list[Family]] = {}
    defaults: dict[str, Any] = {}
    for other in FAMILIES.values():
        for key, default in {**other.own_file_settings, **other.family_settings}.items():
            readers.setdefault(key, []).append(other)
            defaults.setdefault(key, default)
    for key, those in readers.items():
        if family not in those and config.data.get(key, defaults[key]) != defaults[key]:
            logging.warning("config.data.%s=%r is read by %s tasks only: config.task=%r ignores it", key,
                            config.data[key], " and ".join(other.name for other in those), config.task)


def check_own_files(config) -> None:
    """ValueError when a task that reads a dataset is given your own files, or a setting only
    your files' tasks read (a column's name, label names), which it would ignore; naming the
    task of the same family that reads them."""
    family = family_of_task(config.task)
    if config.task in family.own_file_tasks:
        return
    given = [f"config.data.{key}" for key in _OWN_FILE_KEYS if config.data[key]]
    given += [f"config.data.{key}={config.data.get(key, unset)!r}" for key, unset in family.own_file_settings.items()
              if config.data.get(key, unset) != unset]
    if given:
        instead = " or ".join(repr(task) for task in family.own_file_tasks)
        raise ValueError(f"config.task={config.task!r} reads its own dataset and would ignore {', '.join(given)}: for "
                         f"your own files use the task {instead} (--config=configs/finetune.py:"
                         f"{family.own_file_tasks[0]})")

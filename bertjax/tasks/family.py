"""The task-family protocol: everything the rest of bertjax needs from a family, in one object.

Each family module (classification, tagging, squad, choice) exports `FAMILY`, an instance of a
`Family` subclass, and `bertjax.tasks` keeps the registry. Training (`load_task`), prediction
on raw inputs (`parse`, `predict`), prediction over files (`read_line`, `from_row`), the
serving export (`serving_inputs`, `serve`) and model resolution (`hf_architecture`,
`task_info_from_hf`) look the family up by name and call it; no module outside `tasks/`
branches on a family's name. A new family is one module with its `FAMILY` and one line in
the registry (`bertjax/tasks/__init__.py`).

`task_info` (saved with every fine-tuned model): {"family": name, ...} with what the family
needs to rebuild its head and read its outputs (label names, pairs, the SQuAD version).
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn

from bertjax.models.config import BertConfig


def column_text(row: dict, column: str, role: str) -> str:
    """A file row's `column`, which holds the input's `role` (its question, context, ...), as
    text; a ValueError naming the column otherwise (KeyError for a missing one). A row's error
    names its own columns, not the role's key in a raw input, which the file may not use."""
    value = row[column]
    if not isinstance(value, str):
        raise ValueError(f"column {column!r} holds {value!r}, not text (the {role})"[:300])
    return value


class Family:
    """One task family. Subclasses set the class attributes and implement the methods."""

    name: str = ""                      # task_info["family"]
    tasks: tuple[str, ...] = ()         # the config.task names it serves
    own_file_tasks: tuple[str, ...] = ()  # those that read your files (config.data.train_file, ...)
    scores_test_file: bool = False      # their labelled test_file is scored, as an eval_file is (else predicted)
    own_file_settings: dict[str, Any] = {}  # config.data keys only those read, and the values that leave them unset
    family_settings: dict[str, Any] = {}  # config.data keys no other family reads, and their defaults
    hf_architecture: str = ""           # its Hugging Face class (BertFor<Task>)
    packs_examples: bool = False        # several examples per row (config.data.pack_examples)
    token_level: bool = False           # a label per token (config.model.tagging_head applies)
    reads_tokens: bool = False          # its head reads every token's features, not just the sentence's
    pair_inputs: bool = False           # one text or a pair, as task_info["pairs"] says
    versions: tuple[str, ...] = ()      # the task's versions, as task_info[version_key] says (SQuAD's)
    version_key: str = ""
    choice_axis: bool = False           # the network's inputs are [batch, choices, length]
    serves_words: bool = False          # its serving graph works on words (offsets, tags)
    text_lines: bool = True             # one input per line of text (predict --text / a .txt file)
    extensions: dict[str, str] = {}     # file extension -> an input format of its own (`read_formatted`)

    # -- Training. --

    def load_task(self, config, tokenizer):
        """config.task of this family -> its `tasks.common.Task`."""
        raise NotImplementedError

    def tfds_datasets(self, config) -> tuple[str, ...]:
        """The TFDS datasets `load_task` reads for config.task; () for a task of your own files."""
        return ()

    def network(self, bert: BertConfig, task_info: dict) -> nn.Module:
        """The encoder with this family's head, for prediction and export."""
        raise NotImplementedError

    def task_info_from_hf(self, hf_config: dict) -> tuple[str, dict]:
        """A Hugging Face `config.json` of `hf_architecture` -> (task name, task_info)."""
        return self.own_file_tasks[0], {"family": self.name}

    def head_kind(self, task_info: dict) -> str:
        """What a trained head of this family answers, for refusing one reused by another kind
        of task (config.reuse_head): the family's name."""
        return self.name

    def hf_config_keys(self, task_info: dict) -> dict:
        """The `config.json` keys (besides the labels) that `task_info_from_hf` reads back."""
        return {}

    # -- Prediction on raw inputs (`Model.predict`). --

    def parse(self, item: Any, task_info: dict) -> Any:
        """One raw input -> what `predict` takes; ValueError saying what was expected."""
        raise NotImplementedError

    def identify(self, parsed: list, positions: list[int], seen: dict,
                 places: list[str] | None = None) -> tuple[list, dict[int, str]]:
        """Parsed inputs told apart over a whole input (positions: each one's number, its line in
        a file or its 1-based place among the inputs; places: how messages name each, "input
        <position>" unless given, e.g. "file:line") -> (the inputs with what that takes,
        {index: why} for those that cannot be). An input read in parts calls this once a part
        with the same `seen`, the record of the parts before (updated here)."""
        return parsed, {}

    def predict(self, model, parsed: list, **options) -> list[dict[str, Any]]:
        """Parsed inputs -> one result dict each, in order (`model` is an `inference.engine.Model`)."""
        raise NotImplementedError

    def check_options(self, task_info: dict, **options) -> None:
        """ValueError, naming the option first, for `predict` options a model of `task_info`
        cannot take (a launcher checks them before the model loads); none are taken here."""
        no_options(self, options)

    # -- Prediction over files (`inference.batch_predict`). --

    def read_line(self, line: str) -> Any:
        """One line of a text file (or --text), its ending removed -> a raw input, or a
        ValueError saying why not. Whitespace around a text means nothing to it."""
        return line.strip()

    def input_keys(self, data: dict, task_info: dict) -> dict[str, str]:
        """The columns a CSV/TSV/JSONL row's input is read from: the run's config.data names,
        else BERT's ({role: column}; "" for a role the model does not read)."""
        raise NotImplementedError

    def optional_roles(self, task_info: dict) -> tuple[str, ...]:
        """The roles of `input_keys` a row may lack, its input read without them (a second text
        for a classifier that does not say whether it reads pairs); every other is required."""
        return ()

    def from_row(self, row: dict, keys: dict[str, str]) -> Any:
        """A CSV/TSV/JSONL row -> a raw input; KeyError for a missing column."""
        return {role: row[column] for role, column in keys.items() if column}

    def columns(self, keys: dict[str, str]) -> str:
        """The columns a row is read from, for an error message."""
        return " and ".join(repr(column) for column in keys.values() if column)

    def read_formatted(self, path: str, input_format: str, data: dict):
        """The (where, raw input) pairs of a file in one of the family's own formats (`extensions`)."""
        raise ValueError(f"input format {input_format!r} is not one a {self.name} model reads")

    def format_of_text(self, lines: list[str]) -> str:
        """One of the family's own formats (`extensions`) that a file's first `lines` (blank ones
        as "") are plainly written in, else "": a file whose name says text but whose lines are not.
        A ValueError saying what to do for a format the family reads only once converted."""
        return ""

    # -- The serving export (`inference.export`): TensorFlow ops. --

    def serving_inputs(self, task_info: dict) -> tuple[tuple[str, int], ...]:
        """The signature's inputs: (name, rank) of each <string> tensor, rank 1 = [batch]."""
        raise NotImplementedError

    def check_length(self, max_seq_length: int, data: dict | None = None) -> str | None:
        """Why a model of this family cannot read inputs at `max_seq_length` (its run's
        config.data: `data`), or None."""
        return None

    def check_export(self, tokenizer, max_seq_length: int = 512, data: dict | None = None) -> str | None:
        """Why a model with this tokenizer, exported at `max_seq_length` (its run's config.data:
        `data`), cannot be exported, or None: a family whose serving graph reads words
        (`serves_words`) needs WordPiece, whose split TF Text reproduces."""
        if self.serves_words and tokenizer.kind != "wordpiece":
            return (f"the export of {self.name} reads words (BERT's split) and needs a WordPiece vocabulary, "
                    f"not {tokenizer.kind}")
        return self.check_length(max_seq_length, data)

    def serving_settings(self, data: dict) -> dict:
        """The run's settings (its config.data: `data`) that `serve` bakes into the graph beyond
        the layout, recorded in the export's task.json: a client of a token-id export applies
        them itself; none by default."""
        return {}

    def token_id_client(self, model) -> dict:
        """What a client of a token-id export needs beyond the layout to build `model`'s rows as
        `predict` does (task.json's keys); none by default."""
        return {}

    def serve(self, serving, inputs: dict) -> dict:
        """The signature's body: {name: <string> input} -> {name: output}, in TensorFlow ops.
        `serving` is an `inference.export.ServingContext`: the tokenizer in TF Text, the
        [CLS] a [SEP] b [SEP] layout, the network, task_info and the run's config.data."""
        raise NotImplementedError


def hf_label_names(hf_config: dict) -> list[str]:
    """A Hugging Face config's id2label as a list (keys may be ints or their strings); without
    one, transformers' names for its num_labels (default 2): LABEL_0, LABEL_1, ..."""
    id2label = hf_config.get("id2label") or {}
    count = len(id2label) if id2label else hf_config.get("num_labels", 2)
    return [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(count)]


def parse_checked(parse: Callable[[Any], Any], item: Any) -> Any:
    """parse(item), a text in it that is not valid Unicode a ValueError first (before a
    tokenizer would name it by its place in a batch)."""
    _check_unicode(item)
    return parse(item)


def at_position(position: int, parse: Callable[[Any], Any], item: Any) -> Any:
    """`parse_checked(parse, item)` for the input at `position` (1-based), which its ValueError names."""
    try:
        return parse_checked(parse, item)
    except ValueError as e:
        raise ValueError(f"input {position}: {e}"[:300]) from None  # 300 characters at most


def _check_unicode(item: Any) -> None:
    """ValueError for a str in `item` (a text, or texts in lists, tuples, dict values) that UTF-8
    cannot hold: a lone surrogate, as JSON's "\\ud83d" gives."""
    if isinstance(item, str):
        try:
            item.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"not valid Unicode: a lone surrogate ({e.object[e.start]!r}) at character "
                             f"{e.start}") from None
    elif isinstance(item, (list, tuple)):
        for part in item:
            _check_unicode(part)
    elif isinstance(item, dict):
        for part in item.values():
            _check_unicode(part)


def no_options(family: Family, options: dict) -> None:
    if options:
        raise ValueError(f"unknown options {sorted(options)} for {family.name}")

"""What every fine-tuning task family shares: a tokenized split, and BERT's text-pair encoding.

A `Split` holds one split of a task as numpy arrays with a leading [N] axis (N examples,
or N features when one example becomes several windows), ready to batch:

    input_ids, segment_ids, input_mask   <int32>[N, S]  (or [N, C, S] for multiple choice)
    <the family's labels>                e.g. label <int32|float32>[N], label_ids <int32>[N, S]
    lengths                              <int32>[N] tokens used (max over choices): batches
                                         are padded only to a bucket that fits their longest

`encode_pairs` is the original run_classifier.py layout, vectorised over a whole split:
`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, segment ids 0 then 1, the longer side trimmed
one token at a time from its end (ties trim b) until the pair fits.

`sliding_windows` and `max_context_flags` are run_squad.py's doc spans and "max context"
rule, shared by SQuAD contexts (squad.py) and long tagged sentences (tagging.py).
"""

from __future__ import annotations

import codecs
import collections
import csv
import dataclasses
import json
import logging
import math
import re
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from bertjax import ragged
from bertjax.runtime import fileio

# Model inputs with a sequence axis last; batching pads and trims them to a bucket length.
SEQUENCE_FEATURES = ("input_ids", "segment_ids", "input_mask", "label_ids", "label_weights", "position_ids",
                     "sequence_ids")


@dataclasses.dataclass
class Split:
    """One split of a task, tokenized (see the module docstring for the arrays).

    name: the split's name as the source calls it ("train", "validation_matched", "dev").
    features: model inputs and labels, each with a leading [N] axis.
    lengths: <int32>[N] tokens used per row (for length bucketing).
    examples: whatever the task needs to turn outputs back into predictions (ids, texts,
      window-to-example maps); opaque to the trainer.
    has_labels: False for test splits (GLUE test labels are -1): predicted, not scored.
    truncation: what was cut to fit, for the run's summary ("12 of 3,000 examples cut to 128
      tokens"); "" when nothing was.
    source_examples: the examples the rows are windows of (span QA's questions, tagging's
      sentences); None when each row is one example.
    epoch_of_windows: whether an epoch is the rows all the same (tagging, as token
      classification's recipes count it), not the source examples (span QA: run_squad.py's
      questions).
    """

    name: str
    features: dict[str, np.ndarray]
    lengths: np.ndarray
    examples: Any = None
    has_labels: bool = True
    truncation: str = ""
    source_examples: int | None = None
    epoch_of_windows: bool = False

    def __post_init__(self):
        n = len(self.lengths)
        for key, value in self.features.items():
            if len(value) != n:
                raise ValueError(f"split {self.name!r}: feature {key!r} has {len(value)} rows, lengths has {n}")

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def examples_per_epoch(self) -> int:
        """What an epoch counts: the source examples, else the rows."""
        return len(self) if self.source_examples is None or self.epoch_of_windows else self.source_examples

    @property
    def example_count(self) -> int:
        """The examples the split holds: the source examples, else the rows."""
        return len(self) if self.source_examples is None else self.source_examples


@dataclasses.dataclass
class Task:
    """A fine-tuning task ready to train: its splits, its head, its loss and its evaluation.

    train: the training split. eval_splits: scored after training and every eval_every
      steps; the first one's `main_metric` (higher is better) picks the best checkpoint.
    test_splits: predicted only (no labels).
    make_model(bert_config) -> a flax module whose params are {"bert": ..., <head_names>}.
    inputs(batch) -> the module's positional inputs.
    sums(outputs, batch), counts(batch), loss_terms: the loss, as in trainer.Objective.
    predict(outputs) -> {name: <[B, ...]>}: per row, what the host needs (on device, jitted);
      names in `sequence_outputs` have a sequence axis, padded back to the split's width.
    evaluate(split, predictions) -> {metric: value}: the official metrics, predictions being
      predict's arrays for every row of the split ([N, ...]).
    write_predictions(split, predictions, directory) -> the files written.
    info: what using the model later needs beyond the run's config (saved with its
      checkpoints as "task_info", see bertjax.inference.model_source): "family" and, per family,
      "label_names", "pairs" (classification) or "squad_version".
    """

    name: str
    train: Split
    eval_splits: list[Split]
    test_splits: list[Split]
    make_model: Callable[[Any], Any]
    inputs: Callable[[dict], tuple]
    sums: Callable[[Any, dict], dict]
    counts: Callable[[dict], dict]
    loss_terms: tuple[str, ...]
    predict: Callable[[Any], dict]
    evaluate: Callable[[Split, dict], dict]
    write_predictions: Callable[[Split, dict, str], list[str]]
    main_metric: str
    head_names: tuple[str, ...]
    sequence_outputs: tuple[str, ...] = ()
    info: dict = dataclasses.field(default_factory=dict)


def bert_inputs(batch: dict) -> tuple:
    """The BERT model inputs of a batch: (input_ids, segment_ids, input_mask)."""
    return batch["input_ids"], batch["segment_ids"], batch["input_mask"]


# -- Config checks and files shared by the task families. --

def check_int(data_config, key: str, minimum: int) -> None:
    """ValueError naming config.data.<key> unless it is an int >= minimum."""
    value = data_config[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"config.data.{key} must be an int >= {minimum}, got {value!r}")


def own_files(config) -> list[tuple[str, str]]:
    """[(split name, path)] of your own files: ("train", config.data.train_file), then
    ("eval", eval_file) and ("test", test_file) where set. Errors name the key: no
    train_file, or a file that does not exist or is a folder."""
    data = config.data
    if not data.train_file:
        raise ValueError(f"config.task={config.task!r} needs config.data.train_file (and eval_file)")
    files = []
    for name, key in (("train", "train_file"), ("eval", "eval_file"), ("test", "test_file")):
        if data[key]:
            if not fileio.exists(data[key]):
                raise ValueError(f"config.data.{key}={data[key]}: no such file")
            if fileio.isdir(data[key]):
                raise ValueError(f"config.data.{key}={data[key]} is a folder; give a file")
            files.append((name, data[key]))
    return files


def check_nonempty(sources: list[tuple[str, Any]], noun: str) -> None:
    """ValueError '<source>: no <noun>' for the first (split name, examples) with no examples."""
    for _, examples in sources:
        if not len(examples):
            raise ValueError(f"{examples.source}: no {noun}")


def write_lines(path: str, lines: list[str]) -> str:
    """Writes `lines` (newline-terminated, UTF-8) to `path` atomically, local or gs://: a full
    disk or a stopped machine leaves the earlier file or none, and no half one beside it;
    returns path."""
    fileio.makedirs(fileio.parent(path))
    fileio.write_bytes(path, "".join(line + "\n" for line in lines).encode("utf-8"))
    return path


_MAX_FIELD_CHARS = 2**31 - 1  # a CSV/TSV field's longest (the csv module's default is 131,072)


class NotUtf8(ValueError):
    """A line that is not UTF-8 (`user_lines` with bad_lines="yield"): what is wrong, and `text`,
    the line decoded with U+FFFD for its bad bytes (a CSV record's quotes and commas kept)."""

    def __init__(self, why: str, text: str):
        super().__init__(why)
        self.text = text


def user_lines(path: str, bad_lines: str = "raise", one_input_a_line: bool = False) -> Iterator[str | ValueError]:
    """The lines of a user's text file (local or gs://), streamed, UTF-8, with a leading
    byte-order mark (as Excel writes) dropped. Lines end at \\n, \\r\\n or a lone \\r (old Mac
    files, as the csv module reads them), endings kept (as the csv module needs); with
    one_input_a_line (a text file of inputs, output line k for input line k; JSON Lines)
    at \\n and \\r\\n only, as `wc -l` and the original count them, a stray \\r left inside
    the line (the tokenizers' and JSON's whitespace), unless the file has no \\n at all (an old
    Mac file: its lines end at \\r). A line that is not UTF-8 is a ValueError naming file:line,
    raised, or with bad_lines="yield" yielded in its place (saying what is wrong only).
    Predict, features and fine-tuning all read text this way."""
    number, kind = 0, None  # kind: what the file's first bytes say it is, where no text (a .gz, a PDF)
    with fileio.open_file(path, "rb") as f:
        for chunk in f:  # up to each \n; a lone \r inside it ends a line too, unless one_input_a_line
            # (or the file has no \n at all: its lines end at \r, as old Mac files do)
            whole_file_in_one = number == 0 and not chunk.endswith(b"\n") and b"\r" in chunk.rstrip(b"\r")
            for raw in ([chunk] if one_input_a_line and not whole_file_in_one
                        else chunk.splitlines(keepends=True)):
                number += 1
                if number == 1:
                    raw, kind = raw.removeprefix(codecs.BOM_UTF8), fileio.not_text(raw)
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    why = (f"{kind}, not UTF-8 text; decompress or convert it first" if kind else
                           f"not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); save the file as UTF-8")
                    if bad_lines != "yield":
                        raise ValueError(f"{path}:{number}: {why}") from None
                    yield NotUtf8(why, raw.decode("utf-8", errors="replace"))


ROW_FORMATS = ("csv", "tsv", "jsonl")  # config.data.file_format's values ("" = by the file's extension)
JSONL_EXTENSIONS = {"jsonl": "jsonl", "json": "jsonl", "ndjson": "jsonl", "jsonlines": "jsonl"}  # JSON Lines' names


def file_format(path: str, chosen: str = "", extensions: dict[str, str] | None = None) -> str:
    """The format a user's input file is read in: `chosen`, else from the file name: .csv, .tsv,
    .jsonl (and .json, .ndjson, .jsonlines) are rows (`read_records`), `extensions` a task family's own formats
    (SQuAD's .json, CoNLL), anything else lines of text (`user_lines`)."""
    if chosen:
        return chosen
    extension = _extension(path)
    return (extensions or {}).get(extension) or {"csv": "csv", "tsv": "tsv", **JSONL_EXTENSIONS}.get(extension, "text")


def _extension(path: str) -> str:
    """The file name's extension, lower-cased ("" for none: a dot in a folder's name is not one)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


def read_records(path: str, file_format: str = "", bad_rows: str = "raise") -> Iterator[tuple[str, dict | ValueError]]:
    """('file:line', row) for each row of a CSV, TSV (both with a header line) or JSONL file;
    the line is where the row starts (a quoted CSV field may hold line breaks). bad_rows
    "yield": a row that does not read is a ValueError in its place (saying what is wrong) and
    the rows after it are read on (prediction's --on_error=skip); a bad header still raises.

    file_format: "csv", "tsv" or "jsonl"; "" = from the file name's extension (.json is
    read as JSONL). TSV fields are taken literally (no quoting, as GLUE's files need); a
    field may be of any length. Blank lines are not rows, except in a file of one column,
    where a blank line followed by more rows is an empty text (so row k is still line k + 1;
    blank lines at the end are not rows). Errors name file:line: a JSONL line that is not a
    JSON object, a CSV/TSV row with more or fewer fields than the header, a row of several
    columns that repeats the header (files joined with theirs), a header that repeats a column
    name, malformed CSV quoting (the line its record starts on), bytes that are not UTF-8.
    """
    extension = _extension(path)
    file_format = file_format or JSONL_EXTENSIONS.get(extension, extension)
    if file_format not in ROW_FORMATS:
        found = f"format {file_format!r}" if file_format else "extension"
        raise ValueError(f"{path}: unknown file {found}; expected .csv, .tsv or .jsonl "
                         "(or set config.data.file_format)")
    if file_format == "jsonl":
        yield from _jsonl_records(path, bad_rows)
        return
    csv.field_size_limit(_MAX_FIELD_CHARS)
    # bad_rows="yield": line number -> why. The line is read with U+FFFD for its bad bytes, so
    # that a record it is part of (a quoted field over several lines) stays one record, refused whole.
    not_utf8: dict[int, ValueError] = {}

    def readable_lines() -> Iterator[str]:
        for number, line in enumerate(user_lines(path, bad_lines=bad_rows), start=1):
            if isinstance(line, NotUtf8):
                not_utf8[number] = line
                line = line.text
            yield line

    def not_utf8_in(first: int, last: int) -> ValueError | None:
        """Why the first of lines first..last that is not UTF-8 is not (each forgotten), or None."""
        bad = sorted(number for number in not_utf8 if first <= number <= last)
        errors = [not_utf8.pop(number) for number in bad]
        if not errors:
            return None
        return errors[0] if bad[0] == first else ValueError(f"line {bad[0]} (inside this record): {errors[0]}")

    lines = readable_lines()
    # strict: a malformed quoted CSV field (a quote left open at the end) is an error, not text.
    reader = (csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE) if file_format == "tsv"
              else csv.reader(lines, strict=True))
    try:
        header = next(reader, None)
        if header is None:
            return
        repeated = sorted({name for name in header if name and header.count(name) > 1})  # '': Excel's empty columns
        if repeated:
            raise ValueError(f"{path}:1: the header names {repeated} more than once")
        if 1 in not_utf8:
            raise ValueError(f"{path}:1: {not_utf8[1]}")
    except csv.Error as e:
        raise ValueError(f"{path}:1: not valid {file_format.upper()} ({e})") from None
    blank_lines = []  # of a one-column file, not yet known to be followed by a row
    quoted_warned = False
    while True:
        first = reader.line_num + 1
        try:
            fields = next(reader, None)
        except csv.Error as e:
            to = f"; the record starting here runs to line {reader.line_num}" if reader.line_num > first else ""
            error = ValueError(f"not valid {file_format.upper()} ({e}{to})")
            encoding_error = not_utf8_in(first, reader.line_num)
            if encoding_error:  # both said at once: one fix, one rerun
                error = ValueError(f"{encoding_error}; and {error}")
        else:
            if fields is None:
                return
            error = not_utf8_in(first, reader.line_num)
            if not fields and error is None:
                if len(header) == 1:
                    blank_lines.append(first)
                continue
            if error is None and len(fields) != len(header):
                quoted = file_format == "tsv" and any(field.startswith('"') for field in fields)
                error = ValueError(f"{len(fields)} fields, the header has {len(header)} ({header})" + (
                    "; a field starts with a quote: TSV fields are read literally, so a CSV writer's quoted tab "
                    "splits it (write the file as .csv, or set config.data.file_format=csv)" if quoted else ""))
            elif error is None and len(header) > 1 and [fields[0].removeprefix("\ufeff"), *fields[1:]] == header:
                # files joined with cat (each with a byte order mark, as Excel writes CSV: only line 1's is read)
                error = ValueError(f"the header again ({header}), as a row: remove it (files joined with their "
                                   "headers?)")
        for line in blank_lines:  # rows before this one, in their place (an error's too)
            yield f"{path}:{line}", {header[0]: ""}
        blank_lines.clear()
        if error is not None:
            if bad_rows != "yield":
                raise ValueError(f"{path}:{first}: {error}") from None
            yield f"{path}:{first}", error
            continue
        if file_format == "tsv" and not quoted_warned and any(_csv_quoted(field) for field in fields):
            quoted_warned = True
            logging.warning("%s:%d: a field quoted as a CSV writer quotes it (\"...\"\"...\"); TSV fields are read "
                            "literally, quotes kept: write the file as .csv, or read it as one "
                            "(config.data.file_format=csv; predict and extract_features: --input_format=csv)",
                            path, first)
        yield f"{path}:{first}", dict(zip(header, fields))


# The columns that name a row, first found first: "id", "idx", and GLUE's test files' "index".
ID_COLUMNS = ("id", "idx", "index")


def row_id(row: dict):
    """The row's id (`ID_COLUMNS`), or None where it has none."""
    return next((row[column] for column in ID_COLUMNS if column in row), None)


def example_ids(given: list, locations: list[str]) -> list | None:
    """The ids (`row_id`) of the rows of a file whose predictions are written, for the
    predictions' index column; None when no row gives one. ValueError naming file:line for a
    file where some rows give one and others not (a row's place could be another's id), an
    empty id, a repeated one (the predictions of the two could not be told apart), or an id a
    TSV field cannot hold. (A training file's ids are never read: they are written nowhere.)"""
    if all(value is None for value in given):
        return None
    first_at: dict[str, str] = {}
    for value, where in zip(given, locations):
        if value is None:
            raise ValueError(f"{where}: no id, where other rows have one: give every row an id (a column "
                             f"{' or '.join(map(repr, ID_COLUMNS))}), or none")
        shown = str(value)
        if not shown.strip():
            raise ValueError(f"{where}: an empty id: give every row an id, or none")
        if shown in first_at:
            raise ValueError(f"{where}: id {value!r} again (first at {first_at[shown]}): the predictions of the two "
                             "could not be told apart; give each row its own id")
        first_at[shown] = where
        if any(c in shown for c in "\t\n\r"):
            raise ValueError(f"{where}: id {value!r} holds a tab or a line break, which the predictions' TSV cannot "
                             "hold")
    return given


def _csv_quoted(field: str) -> bool:
    """Whether a TSV field looks quoted by a CSV writer (pandas' to_csv(sep="\\t"), csv.writer):
    in quotes, with a quote inside doubled."""
    return len(field) > 3 and field[0] == field[-1] == '"' and '""' in field[1:-1]


def _jsonl_records(path: str, bad_rows: str) -> Iterator[tuple[str, dict | ValueError]]:
    """`read_records` of a JSONL file: one JSON object a line (ending at \\n: a \\r is JSON's
    whitespace), blank lines skipped."""
    for number, line in enumerate(user_lines(path, bad_lines=bad_rows, one_input_a_line=True), start=1):
        row = line if isinstance(line, ValueError) else json_object(line, number)
        if row is None:
            continue
        if isinstance(row, ValueError) and bad_rows != "yield":
            raise ValueError(f"{path}:{number}: {row}")
        yield f"{path}:{number}", row


def first_lines(path: str, count: int = 20, blank: bool = False) -> list[str]:
    """Up to `count` non-blank lines from the start of `path` (its first 64 KiB, or up to the end
    of its first line, within 64 MiB), split where the text reader splits them: at line feeds
    (at carriage returns in a file without one), not at U+2028 or U+0085, which a JSON line may
    hold unescaped; a byte order mark is not part of the first. `blank`: the blank lines among
    them too, as ""."""
    with fileio.open_file(path, "rb") as f:
        head = f.read(1 << 16)
        ended = len(head) < 1 << 16
        while not ended and b"\n" not in head and len(head) < 1 << 26:
            more = f.read(1 << 20)
            head, ended = head + more, not more
    text = head.decode("utf-8-sig", errors="replace")
    lines = [line.removesuffix("\r") for line in text.split("\n")] if "\n" in text else text.split("\r")
    whole = lines if ended else lines[:-1]  # the last may be cut
    found, written = [], 0
    for line in whole:
        if written == count:
            break
        written += bool(line.strip())
        if line.strip() or blank:
            found.append(line if line.strip() else "")
    return found


_COLUMN_NAME = re.compile(r"[\w .#()/'\"+-]{0,60}")  # empty too: pandas' index column


def header_format(first: list[str], columns: Iterable[str]) -> str | None:
    """"tsv" or "csv" when a file's first lines (`first_lines`) start with a header: several
    fields (as the table's reader splits them), each a column name (no sentence punctuation),
    one of them among `columns` (those the task reads). Read one input a line, the header and
    each row's other fields would be texts. None otherwise: a sentence that starts with a
    column's name and a comma ("text, images and [MASK] are supported.") is text."""
    columns = {column for column in columns if column}
    lines = [line for line in first if line.strip()][:1]
    for separator, csv_format, quoting in (("\t", "tsv", csv.QUOTE_NONE), (",", "csv", csv.QUOTE_MINIMAL)):
        try:
            header = [field.strip() for field in next(csv.reader(lines, delimiter=separator, quoting=quoting), [])]
        except csv.Error:
            continue
        if len(header) > 1 and columns & set(header) and all(_COLUMN_NAME.fullmatch(field) for field in header):
            return csv_format
    return None


def json_lines(first: list[str]) -> bool:
    """Whether a file's first lines (`first_lines`) are each a JSON object: JSON Lines, which read
    as lines of text would make each line's raw JSON an input. As Python's json reads them (NaN,
    a repeated key): such a file is JSON Lines to refuse, not text."""
    def an_object(line: str) -> bool:
        try:
            return isinstance(json.loads(line), dict)
        except ValueError:
            return False
    return bool(first) and all(an_object(line) for line in first)


def _not_json_constant(name: str):
    """Python's json reads NaN and Infinity (which its writer emits for a missing float); JSON
    has neither: a NaN label read on as a class of its own, "nan"."""
    raise ValueError(f"{name} is not JSON (a missing number: leave the row out)")


def _finite_float(text: str) -> float:
    """A JSON number as a float; one past float's range (1e999) would read as infinity."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past a float's range")
    return value


def _object_of_unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are each given once: json keeps the last of a repeated key, a
    value dropped without a word (a CSV header naming a column twice is refused too)."""
    repeated = sorted(key for key, count in collections.Counter(key for key, _ in pairs).items() if count > 1)
    if repeated:
        raise ValueError(f"the object gives {', '.join(map(repr, repeated))} more than once")
    return dict(pairs)


def json_object(line: str, number: int) -> dict | ValueError | None:
    """JSONL line `number` -> its object (None: a blank line), or a ValueError saying what is wrong."""
    if not line.strip():
        return None
    line = line.rstrip("\r\n")  # (parsed with its newline, an error was placed at column 1 of a line after it)
    try:
        row = json.loads(line, parse_constant=_not_json_constant, parse_float=_finite_float,
                         object_pairs_hook=_object_of_unique_keys)
    except json.JSONDecodeError as e:
        why = e.msg.removesuffix(" at")  # some of json's messages end in "at"
        # A document over several lines breaks its first line after an opening or a separator
        # ('{', '{"data": [', '"version": "1.1",'); a one-line object cut short, after a value.
        opened = line.rstrip()[-1:] in ("{", "[", ",", ":")
        hint = ("; expected JSON Lines, one object a line: this looks like a JSON document over several "
                "lines" if number == 1 and opened and line.lstrip()[:1] in ("[", "{") else
                # (a CSV or TSV with its header, as SWAG's files are, or plain text)
                f"; expected JSON Lines, one object a line: this looks like "
                f"{'CSV or TSV' if ',' in line or chr(9) in line else 'text'}"
                if number == 1 and line.lstrip()[:1] not in ("[", "{") else "")
        return ValueError(f"not JSON ({why} at column {e.colno}){hint}")
    except ValueError as e:  # from the two hooks
        return e
    if not isinstance(row, dict):
        hint = " (JSON Lines: one object a line, not an array of them)" if isinstance(row, list) else ""
        return ValueError(f"expected a JSON object, got {type(row).__name__}{hint}")
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:  # JSON can escape a lone surrogate, which no text can hold
        return ValueError(f"a lone surrogate ({e.object[e.start]!r}) in a string; the text must be valid Unicode")
    return row


def truncation(cut: np.ndarray, what: str, tokens: int) -> str:
    """Split.truncation for <bool>[N] `cut`: "12 of 3,000 examples cut to 128 tokens" or ""."""
    return f"{int(cut.sum()):,} of {len(cut):,} {what} cut to {tokens} tokens" if cut.any() else ""


def truncated_pair_lengths(len_a: np.ndarray, len_b: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths after the original `_truncate_seq_pair`: while a + b > budget, drop the last
    token of the longer side (of b on a tie). <int>[N] each -> kept lengths <int64>[N] each.

    Closed form: a pair that fits is kept; otherwise the shorter side keeps its length if it
    is under half the budget and the longer gets the rest, else a gets ceil(budget / 2) and
    b floor(budget / 2).
    """
    len_a, len_b = np.asarray(len_a, np.int64), np.asarray(len_b, np.int64)
    fits = len_a + len_b <= budget
    half_up, half_down = (budget + 1) // 2, budget // 2
    short_a = (len_a <= len_b) & (len_a < half_up)  # a is kept whole, b gets the rest
    short_b = (len_b < len_a) & (len_b <= half_down)
    keep_a = np.where(short_a, len_a, np.where(short_b, budget - len_b, half_up))
    keep_b = np.where(short_a, budget - len_a, np.where(short_b, len_b, half_down))
    return np.where(fits, len_a, keep_a), np.where(fits, len_b, keep_b)


def encode_pairs(tokenizer, texts_a: Sequence[str], texts_b: Sequence[str] | None,
                 max_seq_length: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Texts -> (features, lengths, truncated).

    features: input_ids (pad_id-padded), segment_ids, input_mask, each <int32>[N, max_seq_length].
    lengths: <int32>[N] tokens used, [CLS] and [SEP]s included.
    truncated: <bool>[N] whether the row was cut to fit max_seq_length.
    texts_b None: single sentences `[CLS] a [SEP]`; so is a row whose second text has no
    tokens (the original's `if tokens_b:`).
    """
    if texts_b is not None and len(texts_b) != len(texts_a):
        raise ValueError(f"encode_pairs: {len(texts_a)} first texts but {len(texts_b)} second texts")
    ids_a, len_a = tokenizer.encode_flat(texts_a)
    if texts_b is None:
        ids_b, len_b = np.zeros(0, np.int32), np.zeros(len(texts_a), np.int64)
    else:
        ids_b, len_b = tokenizer.encode_flat(texts_b)
    has_b = len_b > 0                                                                       # [N]
    pair_a, keep_b = truncated_pair_lengths(len_a, len_b, max_seq_length - 3)
    keep_a = np.where(has_b, pair_a, np.minimum(len_a, max_seq_length - 2))
    truncated = (keep_a < len_a) | (keep_b < len_b)
    lengths = keep_a + keep_b + 2 + has_b
    n = len(texts_a)
    input_ids = np.full((n, max_seq_length), tokenizer.pad_id, np.int32)
    segment_ids = np.zeros((n, max_seq_length), np.int32)
    rows = np.arange(n)
    input_ids[:, 0] = tokenizer.cls_id
    _scatter_rows(input_ids, ragged.gather_ranges(ids_a, ragged.row_starts(len_a), keep_a), keep_a, first_column=1)
    input_ids[rows, keep_a + 1] = tokenizer.sep_id
    if has_b.any():
        first_b = keep_a + 2
        _scatter_rows(input_ids, ragged.gather_ranges(ids_b, ragged.row_starts(len_b), keep_b), keep_b,
                      first_column=first_b)
        input_ids[rows[has_b], (first_b + keep_b)[has_b]] = tokenizer.sep_id
        columns = np.arange(max_seq_length)[None, :]
        segment_ids[(columns >= first_b[:, None]) & (columns < lengths[:, None])] = 1
    input_mask = (np.arange(max_seq_length)[None, :] < lengths[:, None]).astype(np.int32)
    features = {"input_ids": input_ids, "segment_ids": segment_ids, "input_mask": input_mask}
    return features, lengths.astype(np.int32), truncated


def _scatter_rows(target: np.ndarray, values: np.ndarray, counts: np.ndarray, first_column) -> None:
    """Writes the flat `values` into `target`: row r gets counts[r] values from column
    first_column (an int or <int>[N]) on."""
    counts = np.asarray(counts, np.int64)
    rows = np.repeat(np.arange(len(counts)), counts)
    within = np.arange(len(rows)) - np.repeat(ragged.row_starts(counts), counts)
    first = np.broadcast_to(np.asarray(first_column, np.int64), counts.shape)
    target[rows, np.repeat(first, counts) + within] = values


# -- Sliding windows over long token sequences (SQuAD contexts, tagged sentences). --

def sliding_windows(num_tokens: np.ndarray, window, stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """run_squad.py's doc spans, for many rows at once: windows of `window` tokens (an int or
    <int>[R]) starting every min(window, stride) tokens, until one reaches the row's end; an
    empty row gets one empty window.

    num_tokens <int>[R] -> (row, start, length), each <int64>[W], rows' windows consecutive.
    """
    num_tokens = np.asarray(num_tokens, np.int64)
    window = np.broadcast_to(np.asarray(window, np.int64), num_tokens.shape)
    step = np.minimum(window, stride)
    count = 1 + np.maximum(0, -(-(num_tokens - window) // step))  # ceil((tokens - window) / step)
    row = np.repeat(np.arange(len(num_tokens)), count)
    start = (np.arange(len(row)) - np.repeat(ragged.row_starts(count), count)) * step[row]
    return row, start, np.minimum(num_tokens[row] - start, window[row])


def max_context_flags(row: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """<bool>[W, max(length)]: [w, j] is True when token start[w] + j of row[w] lies in window
    w and w is the window where it has the most context: the highest
    min(tokens left, tokens right) + 0.01 * window length over the row's windows, the first
    on ties (run_squad.py's `_check_is_max_context`). Windows as `sliding_windows` gives them.
    """
    n = len(row)
    token = start[:, None] + np.arange(int(length.max(initial=0)))[None, :]
    end = start + length  # exclusive
    best = token < end[:, None]

    def score(w):
        return np.minimum(token - start[w, None], end[w, None] - 1 - token) + 0.01 * length[w, None]

    own = score(np.arange(n))
    for distance in range(1, n):
        overlapping = False
        for other, beats in ((np.arange(n) + distance, np.greater), (np.arange(n) - distance, np.greater_equal)):
            other_c = np.clip(other, 0, n - 1)
            same_row = (other == other_c) & (row[other_c] == row)
            contains = same_row[:, None] & (token >= start[other_c, None]) & (token < end[other_c, None])
            if contains.any():
                overlapping = True
                best &= ~(contains & beats(score(other_c), own))
        if not overlapping:  # windows are ordered: farther ones overlap even less
            break
    return best

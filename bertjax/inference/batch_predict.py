"""Predictions over a file (launch/predict.py): inputs read in the formats fine-tuning reads,
each one checked, predicted in chunks by `Model.predict` / `Model.fill_mask`, one JSONL line
out per input, in input order.

Input formats ("auto": from the file name; .json is SQuAD's layout for a span-QA model):
  text        one input per line (a blank line is an empty text, so output line k answers input
              line k): classification "text" or "text_a ||| text_b", tagging a raw sentence,
              span QA "question ||| context", fill_mask a line with [MASK]s
  csv, tsv, jsonl   rows read by tasks.common.read_records; the columns are the run's
              (config.data.text_a_key, text_b_key, context_key, choices_key) unless keys say otherwise
  squad_json  SQuAD's official layout (tasks.squad_examples.read_json): every question, with its id
  conll       CoNLL (tasks.tagging.read_conll): each sentence's words; a tag column is ignored

A bad input (a missing side of " ||| ", no [MASK] or none left within max_seq_length, an
empty context, a missing column) is named by file:line. on_error "fail": a ValueError naming
it (a file's inputs are all checked before the first prediction; stdin's a chunk at a time
as they arrive); "skip": its output line is {"error": message, "where": "file:line"}, so
that output line k still answers input k. Inputs are read, predicted and written
CHUNK_INPUTS at a time: a file of any size, or a stream, in bounded memory (but for
squad_json and conll files, read whole, and span QA's ids, kept to refuse a repeat).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import stat
import sys
import time
from typing import Any, Callable, Iterable, Iterator

from bertjax import tasks
from bertjax.runtime import console, fileio
from bertjax.tasks import common, raw_text
from bertjax.tasks.family import column_text

FORMATS = ("auto", "text", "csv", "tsv", "jsonl", "squad_json", "conll")
CHUNK_INPUTS = 1024  # inputs predicted per call: bounds memory, and the progress line's step
SHOWN_ERRORS = 5  # skipped inputs named on stderr; the rest are counted


class _FillMask:
    """How a pre-trained model's fill-mask inputs are read: a text with [MASK]s a line or row.
    Beside the task families (`tasks.FAMILIES`), whose methods of the same names it has."""

    name = "fill_mask"
    extensions: dict[str, str] = {}
    text_lines = True

    def read_line(self, line: str):
        return line.strip() or ValueError("a blank line (this task has no empty input)")

    def input_keys(self, data: dict, task_info: dict) -> dict[str, str]:
        return {"text_a": "text"}

    def optional_roles(self, task_info: dict) -> tuple[str, ...]:
        return ()

    def from_row(self, row: dict, keys: dict[str, str]):
        return column_text(row, keys["text_a"], "text")

    def columns(self, keys: dict[str, str]) -> str:
        return repr(keys["text_a"])


FILL_MASK = _FillMask()


def input_reader(family: str):
    """The task family named `family` ("fill_mask": a pre-trained model's masks)."""
    return FILL_MASK if family == FILL_MASK.name else tasks.FAMILIES[family]


def default_keys(family: str, data: dict | None, task_info: dict | None = None) -> dict[str, str]:
    """The columns a row's inputs are read from ({role: column}): the fine-tuning run's own
    (its config.data, `ModelSource.data`), else BERT's names; none for a role its model does
    not read (`task_info`: a single-text classifier's second text)."""
    return input_reader(family).input_keys(data or {}, task_info or {})


def required_roles(family: str, keys: dict[str, str], task_info: dict | None = None) -> list[str]:
    """The roles of `keys` whose columns every row must have for this model (`read_inputs`'
    `required`): all but those its family takes as optional for it (`Family.optional_roles`)."""
    optional = input_reader(family).optional_roles(task_info or {})
    return [role for role in keys if role not in optional]


def file_format(path: str, family: str, chosen: str = "auto", keys: dict[str, str] | None = None) -> str:
    """The format an input file (path "": stdin) is read in (see the module docstring); "auto"
    for a family whose inputs are not one line of text (multiple choice): JSONL, not text.
    keys: the columns the model's inputs are read from, which a CSV or TSV header names."""
    reader = input_reader(family)
    # (a multiple-choice row is no line of text: each line read as one failed)
    readable = (*(["text"] if reader.text_lines else []), "csv", "tsv", "jsonl", *reader.extensions.values())
    if chosen not in ("auto", *readable):
        raise ValueError(f"--input_format={chosen}: a {reader.name} model reads {', '.join(readable)}")
    found = common.file_format(path, "" if chosen == "auto" else chosen, reader.extensions)
    # A file (stdin too when it is one) read ahead: a pipe's first lines would be lost to the predictions.
    peekable = path or ("/dev/stdin" if _stdin_is_a_file() else "")
    if (found == "text" and chosen == "auto" and reader.text_lines and peekable and fileio.exists(peekable)
            and fileio.can_read_twice(peekable)):
        _refuse_other_formats(common.first_lines(peekable, count=LOOKED_AHEAD, blank=True), reader, path or "stdin",
                              keys)
    return "jsonl" if found == "text" and chosen == "auto" and not reader.text_lines else found


LOOKED_AHEAD = 100  # lines: enough for a CoNLL file's first blank line after a long sentence


def _refuse_other_formats(first: list[str], reader, name: str, keys: dict[str, str] | None = None) -> None:
    """ValueError when the first lines (a blank one "") of what would be read one input a line
    are JSON Lines, the family's own format (CoNLL) or CSV/TSV under a header naming one of
    `keys`' columns: each line read as a text would get an answer, silently wrong (the header
    and the rows' ids too)."""
    written_in = "jsonl" if common.json_lines([line for line in first if line]) else None
    if not written_in and reader.extensions:
        try:
            written_in = reader.format_of_text(first)
        except ValueError as e:  # a format the family reads once converted
            file = name if name != "stdin" else "FILE"  # (a command's file, not the word stdin)
            raise ValueError(f"{name} looks like {str(e).replace('FILE', file)}") from None
    if not written_in and first:
        written_in = common.header_format(first, (keys or {}).values())
    if written_in:
        raise ValueError(f"{name} looks like {written_in}, not one input a line: pass --input_format={written_in} "
                         "(or --input_format=text to read each line as an input)")


def _stdin_is_a_file() -> bool:
    """Whether stdin is a regular file (`< file`), which can be read ahead, unlike a pipe."""
    try:
        return stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # no stdin, or one without a file descriptor
        return False


def read_inputs(path: str, family: str, input_format: str, keys: dict[str, str],
                data: dict | None = None, required: Iterable[str] = (), check_lines: bool = False,
                warned: set[str] | None = None, ids: dict[str, str] | None = None) -> Iterator[tuple[str, Any]]:
    """(where, item) per input, in file order; item is what Model.predict (fill_mask: a text)
    takes, or a ValueError for a row that does not have the columns the task reads. data: the
    run's config.data (CoNLL's tag_column). required: roles a row without which is an error
    even where the family's reader takes it as optional (one the user named with --text_b_key,
    or a pair classifier's second text: its absence would otherwise make a pair a single text);
    another absent from the rows is warned of once (`warned`: the columns so warned of, shared
    by the readings of one file, which predict reads more than once). check_lines: text whose
    format was taken from its name: its first lines are checked as `file_format` checks a
    file's, before any is an input (a pipe, which `file_format` cannot read ahead). Stdin
    (/dev/stdin) is named "stdin" in each input's place. ids: filled with {where: the row's
    "id" (or "idx", or GLUE test files' "index": `common.row_id`)} for CSV, TSV and JSONL rows
    that have one (`predict_all` writes it)."""
    required = [role for role in required if keys.get(role)]
    warned = set() if warned is None else warned
    reader = input_reader(family)
    name = "stdin" if path == "/dev/stdin" else path  # as inputs are named in messages
    if input_format == "text":
        lines = common.user_lines(path, bad_lines="yield", one_input_a_line=True)
        if check_lines and reader.text_lines:
            head = list(itertools.islice(lines, LOOKED_AHEAD))
            # As first_lines gives a file's: a line of spaces is a blank one, "".
            first = [line.rstrip("\r\n") if line.strip() else "" for line in head if isinstance(line, str)]
            _refuse_other_formats(first, reader, name, keys)
            lines = itertools.chain(head, lines)
        for number, line in enumerate(lines, start=1):
            yield f"{name}:{number}", line if isinstance(line, ValueError) else reader.read_line(line.rstrip("\r\n"))
    elif input_format in ("csv", "tsv", "jsonl"):
        for where, row in common.read_records(path, input_format, bad_rows="yield"):
            where = name + where[len(path):]
            if isinstance(row, ValueError):  # a row that does not read: an error in its place
                yield where, row
                continue
            given = common.row_id(row)
            if ids is not None and given is not None:
                ids[where] = str(given)
            try:
                missing = next((keys[role] for role in required if keys[role] not in row), None)
                if missing is not None:
                    raise KeyError(missing)
                item = reader.from_row(row, keys)
            except KeyError as e:
                role = next((role for role, column in keys.items() if column == e.args[0]), None)
                flag = f"; --{role}_key names another" if role else ""
                yield where, ValueError(f"no {e.args[0]!r} column (the task reads {reader.columns(keys)}; "
                                        f"the row has {sorted(row)}{flag})")
                continue
            except ValueError as e:  # a value of a column the task reads that is not one
                yield where, e
                continue
            absent = [role for role, column in keys.items() if column and column not in row]
            if absent and keys[absent[0]] not in warned:  # an optional role: the rows are read without it
                warned.add(keys[absent[0]])
                logging.getLogger(__name__).warning(
                    "%s: no %r column, so the inputs are read without their %s (--%s_key names its column)", where,
                    keys[absent[0]], absent[0], absent[0])
            yield where, item
    elif input_format in FORMATS:  # (read whole: a bad file's error names it, as each input's place does)
        try:
            examples = list(reader.read_formatted(path, input_format, data or {}))
        except ValueError as e:
            if not str(e).startswith(path):
                raise
            raise ValueError(name + str(e)[len(path):]) from None
        for where, item in examples:
            yield (name + where[len(path):] if where.startswith(path) else where), item
    else:
        raise ValueError(f"input format {input_format!r} is not one of {FORMATS}")


def command_line_inputs(texts: list[str], family: str) -> list[tuple[str, Any]]:
    """("--text #k", item) per --text value; one whose bytes are not UTF-8 (Python holds them
    as lone surrogates) is a ValueError in its place, as a file's bad line is."""
    records = []
    for k, text in enumerate(texts, start=1):
        raw = os.fsencode(text)  # the bytes as given
        try:
            item = read_line(raw.decode("utf-8"), family)
        except UnicodeDecodeError as e:
            item = ValueError(f"not UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1}); give UTF-8 text")
        records.append((f"--text #{k}", item))
    return records


def read_line(line: str, family: str) -> Any:
    """One line of text (or --text) -> the item for the family (span QA: "question ||| context")."""
    return input_reader(family).read_line(line)


def check(model, family: str, item: Any) -> str | None:
    """Why the model cannot take `item` (one line), or None."""
    if isinstance(item, ValueError):
        return str(item)
    if family == FILL_MASK.name:
        if isinstance(item, str) and "[MASK]" in item:
            return None
        hint = raw_text.mask_case_hint(item, model.tokenizer) if isinstance(item, str) else ""
        return f"no [MASK] in {str(item)[:80]!r}{hint}"
    try:
        tasks.FAMILIES[family].parse(item, model.task_info)
    except ValueError as e:
        return str(e)
    return None


class Reread:
    """Inputs that can be read again (a file, not stdin): `predict_all` checks them all before
    its first prediction. reader() -> a fresh iterator of (where, item)."""

    def __init__(self, reader: Callable[[], Iterator[tuple[str, Any]]]):
        self.reader = reader

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return self.reader()


def _checked_chunks(model, family: str, records: Iterable[tuple[str, Any]]
                    ) -> Iterator[tuple[list[tuple[str, Any]], list[str | None]]]:
    """(records, why each cannot be predicted or None) CHUNK_INPUTS at a time, in input order:
    `check`, fill-mask inputs whose every [MASK] lies past max_seq_length tokens, and the
    family's `identify` over the whole input (e.g. SQuAD's ids, unique and made up from the
    line number if absent)."""
    seen: dict = {}
    records = iter(records)
    offset = 0
    while chunk := list(itertools.islice(records, CHUNK_INPUTS)):
        problems = [check(model, family, item) for _, item in chunk]
        good = [i for i, why in enumerate(problems) if not why]
        if family == FILL_MASK.name:
            counts = model.mask_counts([chunk[i][1] for i in good]) if good else []
            for i, count in zip(good, counts):
                if count == 0:
                    problems[i] = (f"no [MASK] within the first {model.max_seq_length} tokens (the text is "
                                   "truncated there; raise --max_seq_length or shorten it)")
        else:
            items, clashes = tasks.FAMILIES[family].identify(
                [chunk[i][1] for i in good], [_number(chunk[i][0], offset + i + 1) for i in good], seen,
                [chunk[i][0] for i in good])
            for k, i in enumerate(good):
                chunk[i] = (chunk[i][0], items[k])
                if k in clashes:
                    problems[i] = clashes[k]
        yield chunk, problems
        offset += len(chunk)


def _forgetting(records: Iterable[tuple[str, Any]], ids: dict[str, str]) -> Iterator[tuple[str, Any]]:
    """`records`, each row id `read_inputs` recorded in `ids` dropped once the next is read: a
    pass that writes nothing holds none."""
    for record in records:
        ids.clear()
        yield record
    ids.clear()


def _refusal(first: tuple[str, str], bad: int) -> ValueError:
    where, why = first
    more = f" ({bad - 1} more bad inputs)" if bad > 1 else ""
    return ValueError(f"{where}: {why}{more}; --on_error=skip writes an error line for each and goes on")


def predict_all(model, family: str, records: Iterable[tuple[str, Any]], write: Callable[[dict], None],
                on_error: str = "fail", top_k: int = 5, progress: Callable[[int, int | None], None] | None = None,
                options: dict | None = None, ids: dict[str, str] | None = None) -> dict[str, Any]:
    """Predicts (where, item) records CHUNK_INPUTS at a time and calls write with one dict per
    input, in order; memory holds one chunk. on_error "fail": a bad input is a ValueError
    naming it, before the first prediction when the records can be read twice (a list, a
    `Reread`), else (stdin) before its own chunk's. Returns {"inputs", "predicted", "skipped":
    the count, "errors": the first SHOWN_ERRORS (where, why), "truncated": results so marked}.
    progress(done, total or None); options go to `model.predict` (span QA's n_best_size...);
    ids: {where: the row's id} (`read_inputs`), written first in each line that has none."""
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    total = None
    if not isinstance(records, Iterator):  # read twice: the total (for the ETA), and "fail" checks all first
        # A file's ids, read again with each chunk when predicted, are forgotten as they pass.
        checked = _forgetting(records, ids) if isinstance(records, Reread) and ids is not None else records
        if on_error == "skip":
            total = sum(1 for _ in checked)
        else:
            total, bad, first = 0, 0, None
            for chunk, problems in _checked_chunks(model, family, checked):
                total += len(chunk)
                for (where, _), why in zip(chunk, problems):
                    if why:
                        bad, first = bad + 1, first or (where, why)
            if first:
                raise _refusal(first, bad)
    inputs, predicted, skipped, truncated, errors = 0, 0, 0, 0, []
    for chunk, problems in _checked_chunks(model, family, records):
        bad = [(where, why) for (where, _), why in zip(chunk, problems) if why]
        if bad and on_error == "fail":
            raise _refusal(bad[0], len(bad))
        good = [i for i, why in enumerate(problems) if not why]
        items = [chunk[i][1] for i in good]
        if family == FILL_MASK.name:
            from bertjax.inference import fill_mask  # JAX and Flax: only once a model runs

            results = fill_mask.fill_mask_rows(model, items, top_k) if items else []
        else:
            results = model.predict(items, **(options or {})) if items else []
        answers = dict(zip(good, results))
        truncated += sum(bool(result.get("truncated")) for result in results)
        for i, (where, _) in enumerate(chunk):
            line = answers[i] if i in answers else {"error": problems[i], "where": where}
            given = ids.pop(where, None) if ids else None  # (popped: memory holds the rows not yet written)
            write(line if given is None or "id" in line else {"id": given, **line})
        inputs, predicted, skipped = inputs + len(chunk), predicted + len(good), skipped + len(bad)
        errors.extend(bad[:SHOWN_ERRORS - len(errors)])
        if progress is not None:
            progress(inputs, total)
    if total is not None and inputs != total:  # e.g. a file still being written to
        raise ValueError(f"the input held {total} inputs when checked and {inputs} when predicted; did it change "
                         "meanwhile?")
    return {"inputs": inputs, "predicted": predicted, "skipped": skipped, "errors": errors, "truncated": truncated}


def _number(where: str, position: int) -> int:
    """An input's number: its line in its file ("file:line"), else its 1-based place among the inputs."""
    line = re.search(r":(\d+)$", where)
    return int(line.group(1)) if line else position


def progress_line() -> Callable[[int, int | None], None]:
    """A progress reporter for predict_all: stderr lines on inputs of more than one chunk (a
    stream's: from its second), one a chunk on a terminal, else (a log file) the first, then
    at most one every console.LINE_SECONDS and, where the total is known, the last; with the
    rate and, where the total is known, the time left, both from the first chunk's end on:
    the time before it went to reading and checking the inputs and compiling, which later
    chunks do not repeat."""
    first: list[tuple[float, int]] = []  # (time, inputs done) at the first report
    last_line = [0.0]

    def report(done: int, total: int | None) -> None:
        if not (done > CHUNK_INPUTS or (total or 0) > CHUNK_INPUTS):
            return
        now, of = time.time(), "" if total is None else f"/{total}"
        if not first:
            first.append((now, done))
            last_line[0] = now
            print(f"predicted {done}{of} inputs", file=sys.stderr, flush=True)
            return
        if not sys.stderr.isatty() and now - last_line[0] < console.LINE_SECONDS and done != total:
            return
        last_line[0] = now
        rate = (done - first[0][1]) / max(now - first[0][0], 1e-9)
        left = "" if total is None else f", ETA {console.format_duration((total - done) / max(rate, 1e-9))}"
        print(f"predicted {done}{of} inputs ({rate:.0f}/s{left})", file=sys.stderr, flush=True)

    return report


def jsonl_writer(path: str | None, log: Callable[[str], None] | None = None):
    """(write(dict), close(completed)) for JSONL lines to `path` (local or gs://), or stdout when
    None. The lines go to `fileio.temporary_name(path)`, opened now (a folder that cannot be
    written is a ValueError before any work), renamed to `path` by close(True) (no lines: an
    empty file, never an older one left in place): a run that fails (close(False)) leaves
    neither a half file nor a changed `path`; a `path` another run wrote meanwhile is kept, and
    close(True) says where this run's lines are. A killed run's file is removed first (`log`,
    default stderr, says so). (On gs:// the file is made at the first write: a bucket that
    cannot be written fails there.)"""
    opened = []
    tmp = None if path is None else fileio.temporary_name(path)
    if path is not None:
        try:
            fileio.remove_killed_runs_files(path, log or (lambda line: print(line, file=sys.stderr)))
            opened.append(fileio.open_file(tmp, "w"))
        except (OSError, *fileio.remote_errors()) as e:
            raise ValueError(f"cannot write in {fileio.parent(path)} ({getattr(e, 'strerror', None) or e})") from None

    def write(record: dict) -> None:
        if not opened:
            opened.append(sys.stdout)
        try:  # JSON has no NaN, which a strict reader refuses (Model.run stops a model's NaN outputs first)
            line = json.dumps(record, ensure_ascii=False, default=_plain, allow_nan=False)
        except ValueError:
            raise ValueError(f"the model answered with a number that is not finite (NaN or infinity): "
                             f"{str(record)[:160]}; its weights are broken (a run that diverged?)") from None
        try:
            opened[0].write(line + "\n")
        except (OSError, *fileio.remote_errors()) as e:  # (a full disk: the error names no file)
            if path is None:
                raise
            raise ValueError(f"--output={path}: cannot write ({getattr(e, 'strerror', None) or e})") from None

    def close(completed: bool = True) -> None:
        for out in opened:
            if path is None:
                out.flush()
                continue
            try:
                out.close()  # (the last lines reach the file here: a full disk can refuse them)
            except (OSError, *fileio.remote_errors()) as e:
                with contextlib.suppress(OSError, *fileio.remote_errors()):  # (not to hide the error before)
                    fileio.remove(tmp)
                if completed:
                    raise ValueError(f"--output={path}: cannot write ({getattr(e, 'strerror', None) or e}); "
                                     "nothing of it was left") from None
                continue
            if completed and fileio.exists(path):
                raise ValueError(f"--output={path} was written by another run while this one ran; kept, and "
                                 f"this run's predictions are in {tmp}")
            if completed:
                fileio.rename(tmp, path)
            else:
                fileio.remove(tmp)

    return write, close


def _plain(value):
    """numpy scalars (SQuAD's scores) as Python numbers."""
    return value.item()

"""Corpus sources: documents (lists of sentence strings) from text, JSONL or Parquet files,
TFDS, or the demo.

A source is cut into *units*, small JSON-able descriptions that worker processes read
independently (`list_units`, then `read_unit` for each); `iter_documents` reads them all.
Files come from comma-separated globs (`input_pattern`), local or gs:// (fileio.py).

  text:    BERT-format files (one sentence per line, a blank line between documents). A
           unit is a byte range of one file (`TEXT_UNIT_BYTES`); it owns the documents
           whose preceding blank line (or the file start) lies in the range, so big files
           are split across workers.
  jsonl:   one JSON object per line, one document per row: its `text_key` string, cut
           into sentences by `split_sentences`. A unit is a byte range of one file; it
           owns the rows whose line starts in the range. Blank lines are not rows.
  parquet: one document per row, like jsonl, from the `text_key` column. A unit is a run
           of whole row groups of one file holding about `TEXT_UNIT_BYTES` of (uncompressed)
           text; it is read a batch of rows at a time (pyarrow), never the whole file.
  tfds:    a TFDS dataset by name and text feature; a unit is an even split of it. Each
           example is one document, cut into sentences by `split_sentences`.
  demo:    the embedded demo corpus (`demo_corpus.py`); a unit is a range of documents.

Bad input never crashes and is never silent: a dropped line, row or document is counted in
a `DropCounter` under a reason, and the first few per reason are logged with `file:line`
(Parquet: `file:row N`, N counted from 0 as pyarrow and pandas do). Text files:
  * non-UTF-8 line -> dropped ("non_utf8_line"); the rest of its document is kept;
  * a line of only whitespace, Unicode spaces included (U+3000, U+00A0), is blank: it ends
    the document, as the original's `line.strip()` made it;
  * empty file / file with only blank lines -> no documents ("empty_file", "blank_file"); one
    with no document, where lines were dropped as non-UTF-8 -> "non_utf8_file" (several such
    lines among the first 64 KiB refuse it first, `check_text_files`);
  * a blank line after every sentence -> every sentence is a one-sentence document; they
    are kept (NSP then always draws B from another document) and prepare warns when
    most documents have one sentence, since the file is probably not in BERT format;
  * control characters, 10,000-character words -> kept here; the tokenizer removes the
    former and turns the latter into [UNK]. Preparing then drops a sentence left with no
    token ("sentence_without_tokens") and a document left with none ("document_without_tokens").
JSONL and Parquet rows (and TFDS examples, where it applies):
  * a line that is not UTF-8 -> "non_utf8_line"; Parquet text that is not UTF-8, or JSON
    text with a lone surrogate (an unpaired \\ud800-style escape) -> "non_utf8_document";
  * a line that is not JSON -> "invalid_json"; a JSON value other than an object ->
    "row_not_object"; an object without `text_key` -> "missing_text_key";
  * text that is not a string (null, a number, ...) -> "text_not_string";
  * empty text, or text with no sentences -> "blank_document"; a Parquet or JSONL file
    without rows -> "empty_file" (a JSONL file of blank lines: "blank_file"; of lines that are
    not UTF-8: "non_utf8_file").
  A Parquet file without the `text_key` column, with a column that is not strings, or that
  is not readable Parquet is a ValueError naming the file.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
from concurrent import futures
import functools
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import socket
from typing import Any, Callable, Iterator

from absl import logging

from bertjax.data.corpora import demo_corpus
from bertjax.runtime import fileio

SOURCES = ("demo", "text", "jsonl", "parquet", "tfds")
TEXT_UNIT_BYTES = 64 << 20  # per unit of text, JSONL or Parquet (its text column, uncompressed)
DEMO_UNIT_DOCUMENTS = 25
TFDS_EXAMPLES_PER_UNIT = 10_000
LOGGED_PER_REASON = 5
_READ_BLOCK_BYTES = 1 << 20
_PARQUET_BATCH_ROWS = 256


class DropCounter:
    """Counts dropped input by reason; logs the first few occurrences of each with a location."""

    def __init__(self):
        self.counts: collections.Counter[str] = collections.Counter()

    def drop(self, reason: str, where: Callable[[], str] | str, detail: str = "") -> None:
        """Counts one `reason`; `where` (or a function computing it lazily) is e.g. 'file:line'."""
        self.counts[reason] += 1
        if self.counts[reason] <= LOGGED_PER_REASON:
            location = where() if callable(where) else where
            logging.warning("%s: dropped (%s)%s", location, reason, f": {detail}" if detail else "")
            if self.counts[reason] == LOGGED_PER_REASON:
                logging.warning("further '%s' drops in this unit are counted, not logged", reason)


# -- Sentence splitting (TFDS text). --

# A sentence ends at . ! ? (or the Devanagari danda and the Arabic question mark), optionally
# followed by closing quotes or brackets, then whitespace, then opening quotes, brackets or
# Spanish inverted marks (¿ ¡) and a letter that is not lower case: a capital in any cased
# script (Latin, Greek, Cyrillic, ...) or a letter of a script without case (Arabic,
# Devanagari, Hebrew, CJK). The CJK full stops (。！？) end a sentence with or without space,
# whatever follows. Newlines always end a sentence. Abbreviations ("Dr. Smith") are split
# too: simple and predictable beats clever here, and BERT's NSP tolerates it.
_SENTENCE_END = re.compile(
    r"(?<=[.!?\u0964\u061f])[\"'\u201d\u2019)\]\u00bb]*\s+(?=[\"'\u201c\u2018\u201e(\[\u00ab\u00bf\u00a1]*(\w))"
    r"|(?<=[\u3002\uff01\uff1f])(?![\u3002\uff01\uff1f])[\u201d\u2019\u300d\u300f\uff09]*\s*(?=\S)")


def _ends_sentence(match: re.Match) -> bool:
    """Whether a candidate end is one: the next letter (none after a CJK full stop) is not
    lower case, nor a digit ("3. 5" and "e.g. lower" stay whole)."""
    letter = match.group(1)
    return letter is None or not (letter.islower() or letter.isdigit() or letter == "_")


def split_sentences(text: str) -> list[str]:
    """Text -> non-empty stripped sentences: split at newlines, at [.!?] + space + a letter
    that is not lower case, and after the CJK full stops."""
    sentences = []
    for paragraph in text.splitlines():
        start = 0
        for match in filter(_ends_sentence, _SENTENCE_END.finditer(paragraph)):
            sentences.append(paragraph[start:match.start() + len(match.group(0).rstrip())].strip())
            start = match.end()
        sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


# -- Units. --

def list_units(data_config: Any) -> list[dict]:
    """The source named by `data_config.source` cut into independently readable units."""
    source = data_config.source
    if source == "demo":
        return [{"demo": [start, min(start + DEMO_UNIT_DOCUMENTS, demo_corpus.NUM_DOCUMENTS)]}
                for start in range(0, demo_corpus.NUM_DOCUMENTS, DEMO_UNIT_DOCUMENTS)]
    if source == "text":
        return [{"path": path, "range": [start, end]} for path, start, end in _text_ranges(data_config.input_pattern)]
    if source == "jsonl":
        return [{"jsonl": path, "range": [start, end], "text_key": data_config.text_key}
                for path, start, end in _text_ranges(data_config.input_pattern)]
    if source == "parquet":
        return _parquet_units(expand_patterns(data_config.input_pattern), data_config.text_key)
    if source == "tfds":
        return _tfds_units(data_config)
    raise ValueError(f"config.data.source={source!r} has no text to read; expected one of {', '.join(SOURCES)}")


CONTENT_BLOCK = 4096  # bytes of each of the four blocks `content_samples` hashes


def content_samples(units: list[dict]) -> list[str | None]:
    """A sample of each file unit's text (text, JSONL, Parquet; None for others: a TFDS unit
    carries its dataset's version as its "content"): SHA-256 (16 hex)
    of four 4 KiB blocks of its range, the first, the last and two evenly between (Parquet: of its
    text column's stored bytes, with each row group's stored size). Its path and range say which
    bytes a prepared folder holds; this says that they are still the same text, where an edit
    kept the file's size or the text's length (case folded, tabs as spaces, names masked),
    without reading a corpus whole at every start. An edit inside none of the blocks goes
    unseen. Read in parallel (cheap on GCS too)."""
    def sample(unit: dict) -> str | None:
        path = unit.get("path") or unit.get("jsonl") or unit.get("parquet")
        if path is None:
            return None
        digest = hashlib.sha256()
        with fileio.open_file(path, "rb") as f:
            if "parquet" in unit:  # the text column's chunks, end to end
                ranges = _parquet_text_ranges(f, unit)
                digest.update(";".join(str(end - start) for start, end in ranges).encode())
            else:
                ranges = [tuple(unit["range"])]
            size = sum(end - start for start, end in ranges)
            for at in sorted({0, size // 3, 2 * size // 3, max(0, size - CONTENT_BLOCK)}):
                for start, end in ranges:  # the block from `at` bytes into the ranges, to its range's end
                    if at < end - start:
                        f.seek(start + at)
                        digest.update(f.read(min(CONTENT_BLOCK, end - start - at)))
                        break
                    at -= end - start
        return digest.hexdigest()[:16]

    with futures.ThreadPoolExecutor(32) as pool:
        return list(pool.map(sample, units))


def unit_name(unit: dict) -> str:
    """Where a unit from `list_units` lies, for messages: 'corpus.txt bytes 0-67108864',
    'rows.parquet row groups 0-3', 'tfds:wikipedia[train[0:25000]]', 'demo documents 0-100'."""
    if "demo" in unit:
        return "demo documents {}-{}".format(*unit["demo"])
    if "parquet" in unit:
        return "{} row groups {}-{}".format(unit["parquet"], *unit["row_groups"])
    if "tfds" in unit:
        return f"tfds:{unit['tfds']}[{unit['tfds_split']}]"
    return "{} bytes {}-{}".format(unit.get("path") or unit["jsonl"], *unit["range"])


def unit_bytes(unit: dict) -> int | None:
    """The bytes of text a unit from `list_units` holds: its byte range (text, JSONL), its text
    column uncompressed (Parquet); None where unknown (TFDS, demo)."""
    if "range" in unit:
        return unit["range"][1] - unit["range"][0]
    return unit.get("bytes")


def read_unit(data_config: Any, unit: dict, drops: DropCounter) -> Iterator[list[str]]:
    """The documents of one unit from `list_units`, each a non-empty list of sentences."""
    if "demo" in unit:
        return demo_corpus.demo_documents(*unit["demo"])
    if "path" in unit:
        return _read_text_range(unit["path"], *unit["range"], drops)
    if "jsonl" in unit:
        return _read_jsonl_range(unit["jsonl"], *unit["range"], unit["text_key"], drops)
    if "parquet" in unit:
        return _read_parquet(unit["parquet"], *unit["row_groups"], unit["text_key"], drops)
    return _read_tfds(unit["tfds"], unit["tfds_split"], unit["text_feature"], unit["data_dir"], drops)


def iter_documents(data_config: Any, drops: DropCounter | None = None) -> Iterator[list[str]]:
    """Every document of the source, unit after unit."""
    drops = drops if drops is not None else DropCounter()
    for unit in list_units(data_config):
        yield from read_unit(data_config, unit, drops)


# -- Text files. --

def expand_patterns(patterns: str, key: str = "config.data.input_pattern", files: str = "text files") -> list[str]:
    """Comma-separated globs (the setting `key`) -> sorted unique paths (overlapping globs, or
    a local file named two ways, "x.txt" and "./x.txt" or a link, name it once: by its first
    spelling); a glob matching nothing is an error (a typo would drop its files), as is a remote
    one with `**` (read as `*` there: the deeper files would be dropped). A local `**` reads
    every level (`corpus/**` every file below `corpus`), its folders passed over."""
    paths: dict[str, str] = {}  # the file -> how the patterns first named it
    for pattern in (p.strip() for p in patterns.split(",")):
        if not pattern:
            continue
        if fileio.is_remote(pattern) and "**" in pattern:
            raise ValueError(f"{key}: {pattern!r}: a remote glob has no recursive '**' (it would match one folder "
                             "level only); give a glob for each level (comma-separated)")
        # (a local "**" matches the folders too, "corpus/**" the top one: their files are read)
        matches = [path for path in fileio.glob(pattern) if "**" not in pattern or not os.path.isdir(path)]
        if not matches:
            raise FileNotFoundError(f"{key}: {pattern!r} matches no file")
        for path in matches:
            if not fileio.is_remote(path) and os.path.isdir(path):  # read as a file: "[Errno 21] Is a directory"
                raise ValueError(f"{key}: {pattern!r} matches the folder {path}; give globs of files ("
                                 f"{os.path.join(path, '*')})")
            paths.setdefault(path if fileio.is_remote(path) else os.path.realpath(path), path)
    if not paths:
        raise ValueError(f"{key} is empty; give comma-separated globs of {files}")
    return sorted(paths.values())


_HEAD_BYTES = 1 << 16  # what `check_text_files` reads of each file first
_FOREIGN_LINES = 3  # lines with non-ASCII bytes, none of them UTF-8, that refuse a file as another encoding


def _first_line(f, head: bytes) -> bytes:
    """The first line, stripped and without a byte order mark, of the open binary file `f` whose
    first bytes were `head`: one that opens a JSON object is read on to its end (within 64 MiB),
    as a JSONL row holding a whole document runs past the first few KiB."""
    head = head.removeprefix(codecs.BOM_UTF8)
    while head.lstrip().startswith(b"{") and b"\n" not in head and len(head) < 1 << 26:
        more = f.read(1 << 20)
        if not more:
            break
        head += more
    return head.split(b"\n", 1)[0].strip()


def check_text_files(units: list[dict], source: str) -> None:
    """Before a text or JSONL corpus is prepared: ValueError naming a file whose first bytes say
    it is compressed or binary, or (text) that its lines end in a carriage return alone, or
    (JSONL) whose first rows lack the text key (`_check_jsonl_key`: in every file, as files
    written by other jobs may name the text otherwise), and how many other files are refused
    too (the next few named); a warning when a `source` "text" corpus's first line is a JSON
    object (a JSONL file: each row would be a sentence of JSON syntax)."""
    paths = sorted({unit.get("path") or unit.get("jsonl") for unit in units} - {None})
    json_rows = []  # text files whose first line is a JSON object: every file is looked at
    problems = {}  # path -> why it is refused
    for path in paths:
        with fileio.open_file(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
            problem = _not_text(path, head, source)
            first = _first_line(f, head) if source == "text" and not problem else b""
        if problem:
            problems[path] = problem
            continue
        if first.startswith(b"{") and first.endswith(b"}"):
            try:
                if isinstance(json.loads(first), dict):
                    json_rows.append(path)
            except ValueError:
                pass
    if source == "jsonl" and units:  # (in parallel, a few KiB each: cheap on GCS too)
        def key_problem(path: str) -> str | None:
            try:
                _check_jsonl_key(path, units[0]["text_key"])
            except ValueError as e:
                return str(e)
            return None

        with futures.ThreadPoolExecutor(32) as pool:
            readable = [path for path in paths if path not in problems]
            problems.update((path, problem) for path, problem in zip(readable, pool.map(key_problem, readable))
                            if problem)
    if problems:
        refused = [path for path in paths if path in problems]
        others = (f" (and {len(refused) - 1} more of the {len(paths)} files: {', '.join(refused[1:4])}"
                  f"{', ...' if len(refused) > 4 else ''})") if len(refused) > 1 else ""
        raise ValueError(problems[refused[0]] + others)
    if json_rows:
        more = f" (and {len(json_rows) - 1} more of the {len(paths)} files)" if len(json_rows) > 1 else ""
        logging.warning("%s%s: its first line is a JSON object, read as a sentence of text "
                        "(config.data.source='text'); for JSONL rows set config.data.source=jsonl", json_rows[0], more)


def _not_text(path: str, head: bytes, source: str) -> str | None:
    """Why `path`, whose first bytes are `head`, cannot be read as UTF-8 text (`source` text:
    nor as lines), or None."""
    what = fileio.not_text(head)
    if what:
        hint = " (source=parquet)" if what == "Parquet" else ""
        return f"{path}: {what}{hint}, not UTF-8 text; decompress or convert it first"
    nuls = head.count(b"\x00")
    if nuls > len(head) // 4:  # (a stray NUL is cleaning's to drop, as BERT's does)
        return (f"{path}: {nuls} of its first {len(head)} bytes are NUL (UTF-16 without a byte-order mark, or "
                "binary?), not UTF-8 text; convert it first")
    if source == "text" and head.count(b"\r") > 1 and b"\n" not in head:  # the whole file one sentence
        return (f"{path}: its lines end in a carriage return alone (classic Mac OS), where the reader splits at line "
                "feeds only (one sentence a line, a blank line between documents); convert them first "
                "(tr '\\r' '\\n')")
    # A file in another encoding had every line dropped as non-UTF-8 and the file counted as
    # blank. Judged by its lines with non-ASCII bytes (an ASCII title decodes in any encoding),
    # several of them (one stray line of another encoding in a UTF-8 file is dropped and counted);
    # the last line may be cut, in a character too.
    lines = head.split(b"\n")[:-1] if len(head) == _HEAD_BYTES else head.split(b"\n")
    non_ascii = [line for line in lines if not line.isascii()]
    if len(non_ascii) >= _FOREIGN_LINES and all(isinstance(_decode_line(line), UnicodeDecodeError)
                                                for line in non_ascii):
        return (f"{path}: none of the {len(non_ascii)} lines with non-ASCII bytes among its first {len(lines)} is "
                "UTF-8 (another encoding: GBK, Shift-JIS, Latin-1?); convert it first (iconv -f <encoding> -t UTF-8)")
    return None


def _text_ranges(patterns: str) -> list[tuple[str, int, int]]:
    ranges = []
    for path in expand_patterns(patterns):
        size = fileio.size(path)
        pieces = max(1, math.ceil(size / TEXT_UNIT_BYTES))
        ranges += [(path, i * TEXT_UNIT_BYTES, min((i + 1) * TEXT_UNIT_BYTES, size)) for i in range(pieces)]
    return ranges


def _read_text_range(path: str, start: int, end: int, drops: DropCounter) -> Iterator[list[str]]:
    """Documents of `path` whose preceding blank line (or the file start) begins in [start, end)."""
    with fileio.open_file(path, "rb") as f:
        position = _first_line_at(f, start)
        where = _line_locator(path, position)
        owning, document, documents, index, undecoded = start == 0, [], 0, -1, False
        for lines, past_end in _line_blocks(f, position, end):
            if past_end and not owning:  # the next blank line begins a document of a later range
                return
            for line in lines:
                index += 1
                if isinstance(line, UnicodeDecodeError):
                    undecoded = True
                    if owning:
                        drops.drop("non_utf8_line", functools.partial(where, index),
                                   f"{line.reason} at byte {line.start}")
                    continue
                text = line.strip()
                if text:
                    if owning:
                        document.append(text)
                    continue
                if document:  # a blank line (str.strip()'s whitespace: U+3000, no-break spaces too) ends it
                    documents += 1
                    yield document
                    document = []
                if past_end:  # the next document belongs to the next range
                    return
                owning = True
        if document:
            documents += 1
            yield document
        if start == 0 and not documents and not f.read(1):
            drops.drop(_no_document_reason(f, undecoded), path)


def _no_document_reason(f, undecoded: bool) -> str:
    """Why a whole file read to its end (`f`) gave no document: empty, its lines dropped as not
    UTF-8 (`undecoded`), or blank."""
    return "empty_file" if f.tell() == 0 else "non_utf8_file" if undecoded else "blank_file"


def _first_line_at(f, start: int) -> int:
    """Seeks binary file `f` to the first line that starts at or after byte `start`; returns
    that position (the line holding byte start-1 began in an earlier range)."""
    if start == 0:
        return 0
    f.seek(start - 1)
    return start - 1 + len(f.readline())


def _line_locator(path: str, position: int) -> Callable[[int], str]:
    """index -> 'path:line' of the index-th line read from byte `position` of `path`; the
    lines before `position` are counted once, when first needed."""
    base_line = []

    def where(index: int) -> str:
        if not base_line:
            base_line.append(_count_newlines(path, position))
        return f"{path}:{base_line[0] + index + 1}"

    return where


def _line_blocks(f, position: int, end: int) -> Iterator[tuple[list, bool]]:
    """(lines, past_end) from binary file `f` at byte `position`: blocks of the whole lines
    that start before `end`, then one line at a time. Lines are decoded, without their
    newline; a line that is not UTF-8 is given as its UnicodeDecodeError. A UTF-8 byte-order
    mark at the file's start (as Windows tools write) is dropped."""
    at_start = position == 0
    while position < end:
        block = f.read(min(_READ_BLOCK_BYTES, end - position))
        if not block:
            return
        if not block.endswith(b"\n"):
            block += f.readline()
        position += len(block)
        if at_start:
            block, at_start = block.removeprefix(codecs.BOM_UTF8), False
        yield _decode_lines(block), False
    for line in iter(f.readline, b""):
        yield _decode_lines(line), True


def _decode_lines(block: bytes) -> list:
    try:
        lines = block.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        lines = [_decode_line(raw) for raw in block.split(b"\n")]
    if block.endswith(b"\n"):
        lines.pop()
    return lines


def _decode_line(raw: bytes) -> str | UnicodeDecodeError:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return e


def _count_newlines(path: str, stop: int) -> int:
    count = 0
    with fileio.open_file(path, "rb") as f:
        while stop > 0:
            block = f.read(min(stop, 1 << 20))
            if not block:
                break
            count += block.count(b"\n")
            stop -= len(block)
    return count


# -- Rows: JSONL and Parquet files, one document per row. --

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}


def _sentences_of(text: Any, key: str, where: Callable[[], str] | str, drops: DropCounter) -> list[str]:
    """One document's text (str, or UTF-8 bytes) -> its sentences; [] when it has none or is
    not text, counted in `drops` (`key` names the text's field in the message)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            drops.drop("non_utf8_document", where, f"{e.reason} at byte {e.start}")
            return []
    if not isinstance(text, str):
        drops.drop("text_not_string", where, f"{key!r} is {_JSON_TYPES.get(type(text), type(text).__name__)}")
        return []
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # JSON can escape a lone surrogate, which UTF-8 cannot hold
        drops.drop("non_utf8_document", where, f"{e.reason} at character {e.start}")
        return []
    sentences = split_sentences(text)
    if not sentences:
        drops.drop("blank_document", where)
    return sentences


def _read_jsonl_range(path: str, start: int, end: int, text_key: str, drops: DropCounter) -> Iterator[list[str]]:
    """Documents of the rows of JSONL file `path` whose line starts in [start, end)."""
    with fileio.open_file(path, "rb") as f:
        position = _first_line_at(f, start)
        where = _line_locator(path, position)
        index, nonblank, undecoded = -1, False, False
        for lines, past_end in _line_blocks(f, position, end):
            if past_end:
                return
            for line in lines:
                index += 1
                line_where = functools.partial(where, index)
                if isinstance(line, UnicodeDecodeError):
                    undecoded = True
                    drops.drop("non_utf8_line", line_where, f"{line.reason} at byte {line.start}")
                    continue
                if not line.strip():
                    continue
                nonblank = True
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    drops.drop("invalid_json", line_where, f"{e.msg.removesuffix(' at')} at column {e.colno}")
                    continue
                if not isinstance(row, dict):
                    drops.drop("row_not_object", line_where, f"{_JSON_TYPES.get(type(row))}, expected an object")
                    continue
                if text_key not in row:
                    drops.drop("missing_text_key", line_where,
                               f"no key {text_key!r} (config.data.text_key); it has {sorted(row)[:10]}")
                    continue
                sentences = _sentences_of(row[text_key], text_key, line_where, drops)
                if sentences:
                    yield sentences
        if start == 0 and not nonblank:  # a whole file without a row, as a text file's
            drops.drop(_no_document_reason(f, undecoded), path)


_KEY_CHECK_ROWS = 100  # rows of each JSONL file in which config.data.text_key must appear


def _check_jsonl_key(path: str, text_key: str) -> None:
    """ValueError when none of the first _KEY_CHECK_ROWS rows (JSON objects) of `path` has
    `text_key` holding a string: a misspelt key, or one of a list or an object, would otherwise
    drop every row of the corpus, found only after a whole pass; so would a file none of whose
    first lines is a JSON object (a JSON array, CSV or text named .jsonl). Some lines that are
    not such rows, among rows, are left to the reader's counted drops."""
    seen: set[str] = set()
    kinds: set[str] = set()  # what the key holds where it is not text
    rows = lines = 0
    with fileio.open_file(path, "rb") as f:
        for raw in itertools.islice(f, 10 * _KEY_CHECK_ROWS):
            lines += bool(raw.strip())
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(row, dict):
                if isinstance(row.get(text_key), str):
                    return
                if text_key in row:
                    kinds.add("null" if row[text_key] is None else type(row[text_key]).__name__)
                seen.update(row)
                rows += 1
                if rows == _KEY_CHECK_ROWS:
                    break
    if lines and not rows:
        raise ValueError(f"{path}: none of its first {lines} lines is a JSON object, one a line as JSON Lines "
                         "has them (a JSON array, CSV or text named .jsonl?)")
    if kinds:
        raise ValueError(f"{path}: the key {text_key!r} (config.data.text_key) of its first {rows} rows holds "
                         f"{' and '.join(sorted(kinds))}, never text")
    if rows and text_key not in seen:
        raise ValueError(f"{path}: none of its first {rows} rows has the key {text_key!r} (config.data.text_key); "
                         f"they have {sorted(seen)[:20]}")


def _parquet_units(paths: list[str], text_key: str) -> list[dict]:
    """Runs of whole row groups, each about TEXT_UNIT_BYTES of text; a file without rows is
    one empty unit (so that it is counted). Footers are read in parallel (cheap on GCS too)."""
    with futures.ThreadPoolExecutor(32) as pool:
        files = list(pool.map(functools.partial(_text_bytes_per_row_group, text_key=text_key), paths))
    units = []
    for path, sizes in zip(paths, files):
        first, total = 0, 0
        for index, size in enumerate(sizes):
            total += size
            if total >= TEXT_UNIT_BYTES or index == len(sizes) - 1:
                units.append({"parquet": path, "row_groups": [first, index + 1], "bytes": total, "text_key": text_key})
                first, total = index + 1, 0
        if not sizes:
            units.append({"parquet": path, "row_groups": [0, 0], "bytes": 0, "text_key": text_key})
    return units


def _parquet_text_ranges(f, unit: dict) -> list[tuple[int, int]]:
    """The byte ranges of the text column's chunks (compressed, as stored) in a Parquet unit's
    row groups, in file order (none for a unit without rows)."""
    parquet = _parquet_file(f, unit["parquet"], unit["text_key"])
    column = _text_column(parquet, unit["text_key"])
    ranges = []
    for group in range(*unit["row_groups"]):
        chunk = parquet.metadata.row_group(group).column(column)
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        ranges.append((start, start + chunk.total_compressed_size))
    return sorted(ranges)


def _text_bytes_per_row_group(path: str, text_key: str) -> list[int]:
    """Uncompressed bytes of the `text_key` column in each row group of Parquet file `path`."""
    with fileio.open_file(path, "rb") as f:
        parquet = _parquet_file(f, path, text_key)
        column = _text_column(parquet, text_key)
        return [parquet.metadata.row_group(i).column(column).total_uncompressed_size
                for i in range(parquet.num_row_groups)]


def _text_column(parquet, text_key: str) -> int:
    """The index of column `text_key` in a ParquetFile's row groups' column chunks."""
    return [parquet.schema.column(i).path for i in range(len(parquet.schema))].index(text_key)


def _parquet_file(f, path: str, text_key: str):
    """pyarrow.parquet.ParquetFile over open file `f`, checked to have a string `text_key` column."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        parquet = pq.ParquetFile(f)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from None
    schema = parquet.schema_arrow
    if text_key not in schema.names:
        raise ValueError(f"{path}: no column {text_key!r} (config.data.text_key); it has columns {schema.names}")
    kind = schema.field(text_key).type
    if pa.types.is_dictionary(kind):  # e.g. a pandas category column: its values are what counts
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
            or pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind)
            or pa.types.is_null(kind)):
        raise ValueError(f"{path}: column {text_key!r} (config.data.text_key) holds {kind}, expected strings")
    return parquet


def _read_parquet(path: str, first: int, stop: int, text_key: str, drops: DropCounter) -> Iterator[list[str]]:
    """Documents of row groups [first, stop) of Parquet file `path`, a batch of rows at a time."""
    import pyarrow as pa
    with fileio.open_file(path, "rb") as f:
        parquet = _parquet_file(f, path, text_key)
        if parquet.metadata.num_rows == 0:
            drops.drop("empty_file", path)
        row = sum(parquet.metadata.row_group(i).num_rows for i in range(first))
        batches = parquet.iter_batches(_PARQUET_BATCH_ROWS, row_groups=range(first, stop), columns=[text_key])
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as e:
                raise ValueError(f"{path}: unreadable Parquet data near row {row} ({e})") from None
            if batch is None:
                return
            column = batch.column(0)
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            for text in column.cast(pa.large_binary()).to_pylist():  # bytes: UTF-8 is checked per row
                sentences = _sentences_of(text, text_key, f"{path}:row {row}", drops)
                if sentences:
                    yield sentences
                row += 1


# -- TFDS. --

def tfds_builder(name: str, data_dir: str | None, key: str = ""):
    """TFDS's builder of `name` ("dataset/config:version"; a dataset prepared in `data_dir`
    from code not in TFDS is found there), prepared or not; a name TFDS cannot build is a
    ValueError naming `key` (the setting that gave the name, if one did) and what TFDS has
    instead (its configs, its versions)."""
    named = f"{key}={name!r}" if key else f"TFDS dataset {name!r}"
    from bertjax.runtime import tf_cpu

    tfds = tf_cpu.datasets()
    from google.protobuf import json_format
    from tensorflow_datasets.core.dataset_info import DatasetInfoFileError

    try:
        return tfds.builder(name, data_dir=data_dir)
    except json_format.ParseError as error:  # (its message names neither the dataset nor the file)
        damaged = _unreadable_records(name, data_dir)
        why = str(error).split('": ', 1)[-1].splitlines()[0].rstrip(".")  # (less TFDS's "Failed to construct")
        folders = (" and ".join(os.path.dirname(path) for path in damaged)
                   or f"its folder in {data_dir or 'TFDS_DATA_DIR'}")
        raise ValueError(f"TFDS dataset {name!r}: {' and '.join(damaged) or 'its dataset_info.json'} "
                         f"{'are' if len(damaged) > 1 else 'is'} not the record TFDS writes ({why}), as a copy cut "
                         f"short or an edit leaves it: remove {folders} and prepare it again") from None
    except DatasetInfoFileError as error:  # a dataset read from its folder alone, whose record is gone
        folder = re.search(r"from (.*)/dataset_info\.json", str(error))
        raise ValueError(f"TFDS dataset {name!r} is incomplete ({error}), as a preparation stopped or a copy cut "
                         f"short leaves it: remove {folder.group(1) if folder else 'its folder'} and prepare it "
                         "again") from None
    except tfds.core.registered.DatasetNotFoundError:  # its message lists every dataset TFDS has
        where = f", nor one prepared in {data_dir} under that name and version" if data_dir else ""
        raise ValueError(f"{named} is not a TFDS dataset (names: https://www.tensorflow.org/datasets/catalog)"
                         f"{where}") from None
    except (AssertionError, ValueError) as error:  # a version or config it lacks
        why = str(error).split('": ', 1)[-1].strip().rstrip(":")  # (less TFDS's "Failed to construct ..." prefix)
        why = " ".join(why.split())
        if "BuilderConfig" in why:
            why = why.split(". Here are", 1)[0]
            try:
                configs = [config.name for config in tfds.builder_cls(name.split("/")[0].split(":")[0]).BUILDER_CONFIGS]
                why += f"; its configs: {', '.join(configs)}"
            except Exception:  # noqa: BLE001 (a name of a community namespace: its configs are not listed)
                pass
        raise ValueError(f"{named}: {why}") from None


def _unreadable_records(name: str, data_dir: str | None) -> list[str]:
    """The dataset_info.json files of dataset `name` (in `data_dir`, or TFDS's default folders)
    that TFDS cannot read ([] where they cannot be listed: the message then names the folder)."""
    from google.protobuf import json_format
    from tensorflow_datasets.core import naming
    from tensorflow_datasets.core.proto import dataset_info_pb2
    from tensorflow_datasets.core.utils import file_utils

    try:  # (TFDS's own parsing: "namespace:dataset/config:version")
        dataset = naming.parse_builder_name_kwargs(name)[0].name
        roots = file_utils.list_data_dirs(given_data_dir=data_dir)
    except Exception:  # noqa: BLE001 (TFDS's internals changed: not to hide the error being named)
        return []
    found = []
    for root in roots:
        # (dataset/version/ or dataset/config/version/)
        for path in [*fileio.glob(fileio.join(str(root), dataset, "*", "dataset_info.json")),
                     *fileio.glob(fileio.join(str(root), dataset, "*", "*", "dataset_info.json"))]:
            try:
                json_format.Parse(fileio.read_bytes(path), dataset_info_pb2.DatasetInfo())
            except (json_format.ParseError, ValueError, OSError):  # (not JSON or UTF-8, other fields, unreadable)
                found.append(path)
    return sorted(found)


def prepared_tfds_builder(name: str, data_dir: str | None, check: Callable[[Any], None] = lambda builder: None,
                          key: str = ""):
    """The TFDS builder of `name`, prepared in `data_dir` (None: TFDS's default folder),
    downloaded and prepared there first when it is not; check(builder) runs first, on what
    TFDS knows of the dataset before its download (its features), so that a wrong setting
    does not wait for one; key: `tfds_builder`'s. A prepared folder missing a file or with one
    cut short is a ValueError saying to prepare it again (`_damage`).

    The download is tried once first: with no network (no connection is made: the host does
    not resolve, refuses, or the proxy cannot be reached) a ValueError names the dataset, the
    folder and how to prepare it elsewhere, within seconds rather than after TFDS's ten retries
    (about 3.5 minutes); once the host answered, TFDS's own retries apply.
    """
    from tensorflow_datasets.core.download import downloader

    builder = tfds_builder(name, data_dir, key)
    check(builder)
    with _absl_errors_only():  # (TFDS warns of the dataset's folder it found not prepared: what is asked)
        prepared = builder.is_prepared()
    if prepared:
        return _whole(builder, name)
    # What a failed attempt makes there: the dataset's folders down to its version's (and the
    # folders above, where the given one does not exist), the name's .config, downloads/;
    # those that were not there are removed after it.
    root, path, folders = str(builder.data_dir_root), str(builder.data_dir), []
    while path.startswith(root + os.sep):
        folders.append(path)
        path = os.path.dirname(path)
    above, path = [], root
    while not fileio.is_remote(root) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
        above.append(path)
    candidates = (*reversed(above), root, *reversed(folders), os.path.join(root, builder.name, ".config"),
                  os.path.join(root, "downloads"))
    made = [path for path in candidates if not fileio.is_remote(path) and not os.path.exists(path)]
    missing_root = root in made
    retries = downloader.MAX_RETRIES
    downloader.MAX_RETRIES = 0
    try:
        builder.download_and_prepare()  # (its output shown: a dataset without downloads prepares offline)
        return _whole(builder, name)  # (TFDS takes a version folder without its record for one prepared)
    except OSError as error:  # requests' errors are OSErrors
        if error.filename and str(error.filename).startswith(root):  # the folder, not the network
            _remove_made(made)
            raise ValueError(f"TFDS's folder {root} (config.data.tfds_data_dir) cannot hold dataset {name!r}: "
                             f"{error.strerror or type(error).__name__}: {error.filename}") from None
        unreached = _no_connection(error)
        if unreached is None:
            downloader.MAX_RETRIES = retries
            builder.download_and_prepare()  # the host answered: with TFDS's retries
            return _whole(builder, name)
        _remove_made(made)  # (empty folders, a metadata file: litter in the user's TFDS folder)
        there = _versions_there(builder)
        found = (f"; the folder {root} does not exist" if missing_root else
                 f"; {os.path.dirname(builder.data_dir)} holds version {', '.join(there)} only, not the "
                 f"{builder.version} this tensorflow-datasets reads" if there else "")
        raise ValueError(
            f"TFDS dataset {name!r} is not prepared in {builder.data_dir}{found}, and cannot be downloaded here (no "
            f"network: {unreached}). Prepare it where there is one: python -c \"import tensorflow_datasets as tfds; "
            f"tfds.builder('{name}', data_dir='DIR').download_and_prepare()\", copy DIR here (on a TPU VM, to "
            f"gs://your-bucket/tfds) and set config.data.tfds_data_dir to it") from None
    finally:
        downloader.MAX_RETRIES = retries


def read_tfds_split(builder, split: str, batch_size: int = 0, feature: str = "") -> Iterator[Any]:
    """The examples (batches of batch_size: numpy) of a prepared builder's split, in order (only
    their `feature`, when one is named: the others are not decoded); a split it lacks, or a file
    missing or cut short under it, is a ValueError naming the dataset and its folder (TFDS's
    and TensorFlow's own errors name neither, or come as tracebacks)."""
    from bertjax.runtime import tf_cpu

    tfds, tf = tf_cpu.datasets(), tf_cpu.tf
    name = f"{builder.name}/{builder.builder_config.name}" if builder.builder_config else builder.name
    try:
        dataset = builder.as_dataset(split=split, shuffle_files=False)
        if feature:
            dataset = dataset.map(lambda example: example[feature])
    except ValueError as error:  # "Unknown split 'test'. Should be one of [...]"
        raise ValueError(f"TFDS dataset {name!r} in {builder.data_dir}: {error}") from None
    try:
        yield from tfds.as_numpy(dataset.batch(batch_size) if batch_size else dataset)
    except (tf.errors.NotFoundError, tf.errors.DataLossError) as error:
        why = error.message.splitlines()[0][:300]
        raise ValueError(f"TFDS dataset {name!r} in {builder.data_dir} is incomplete (reading {split!r}: {why}): "
                         "remove that folder and prepare it again") from None


def _whole(builder, name: str):
    """`builder`, or a ValueError when its prepared folder is incomplete (`_damage`)."""
    damage = _damage(builder)
    if damage:
        raise ValueError(f"TFDS dataset {name!r} in {builder.data_dir} is incomplete ({damage}), as a preparation "
                         "stopped or a copy cut short leaves it: remove that folder and prepare it again")
    return builder


def _damage(builder) -> str | None:
    """What a prepared TFDS folder lacks: its splits' record (dataset_info.json), a split's
    file, or (TFRecord files, whose size the record fixes) a file's full size; None when whole.
    Not checked where the version's folder is not a local one (a mocked dataset, gs://:
    listing a bucket's every shard at start-up costs more than reading them finds)."""
    folder = str(builder.data_dir)
    if fileio.is_remote(folder) or not os.path.isdir(folder):
        return None
    if not os.path.exists(os.path.join(folder, "dataset_info.json")):
        return "no dataset_info.json"
    if not builder.info.splits:
        return "dataset_info.json lists no split"
    tfrecord = str(getattr(builder.info, "file_format", "")).lower().endswith("tfrecord")
    for split_name, split in builder.info.splits.items():
        sizes = []
        for file in split.filenames:
            path = os.path.join(folder, file)
            if not os.path.exists(path):
                return f"split {split_name!r} has no file {file}"
            sizes.append(os.path.getsize(path))
        # The record's bytes: the examples' (TFDS's writer; TFRecord files add 16 bytes of framing
        # to each), or the files' (other writers): files holding fewer were cut short.
        if tfrecord and split.num_bytes and sum(sizes) < int(split.num_bytes):
            return (f"the files of split {split_name!r} hold {sum(sizes):,} bytes, fewer than the "
                    f"{int(split.num_bytes):,} its record counts")
    return None


def _versions_there(builder) -> list[str]:
    """The versions prepared beside the one `builder` reads (another tensorflow-datasets')."""
    parent = os.path.dirname(str(builder.data_dir))
    if fileio.is_remote(parent) or not os.path.isdir(parent):
        return []
    return sorted(name for name in os.listdir(parent) if re.fullmatch(r"\d+\.\d+\.\d+", name)
                  and os.path.exists(os.path.join(parent, name, "dataset_info.json")))


def _remove_made(made: list[str]) -> None:
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def _no_connection(error: BaseException) -> str | None:
    """How a download failed to connect at all (the host does not resolve, refused, or the
    proxy cannot be reached; no host answered), or None: it answered, and TFDS's retries may help."""
    chain, cause = [], error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    host = next(filter(None, (re.search(r"host='([^']+)'", str(cause)) for cause in chain)), None)
    host = host.group(1) if host else "the host"
    for cause in chain:
        kind = type(cause).__name__
        if isinstance(cause, socket.gaierror):
            return f"{host} does not resolve"
        if kind == "ProxyError":  # requests' and urllib3's
            return f"the proxy for {host} cannot be reached"
        if isinstance(cause, (ConnectionRefusedError, socket.timeout)) or kind in ("NewConnectionError",
                                                                                  "ConnectTimeoutError"):
            return f"{host} cannot be reached ({kind})"
    return None


@contextlib.contextmanager
def _absl_errors_only() -> Iterator[None]:
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)


def _tfds_units(data_config: Any) -> list[dict]:
    """The TFDS split as units of about TFDS_EXAMPLES_PER_UNIT examples (at most 256), each naming
    its dataset, slice ("train[0:25000]": plain strings, which the prepared folder's settings
    hold and compare), text feature and data_dir."""
    if not data_config.tfds_name:  # before TensorFlow's import: a bad flag fails at once
        raise ValueError("config.data.source='tfds' needs config.data.tfds_name, e.g. 'wikipedia/20230601.en'")
    from bertjax.runtime import tf_cpu

    data_dir = data_config.get("tfds_data_dir") or None
    name, feature, split = data_config.tfds_name, data_config.tfds_text_feature, data_config.tfds_split

    def check(builder) -> None:  # before a download: the features are known without one
        features = builder.info.features
        texts = sorted(key for key, spec in features.items() if spec.tf_dtype == tf_cpu.tf.string and not spec.shape)
        if feature not in features:
            raise ValueError(f"TFDS dataset {name!r} has no feature {feature!r} (config.data.tfds_text_feature); "
                             f"it has {sorted(features)}" + (f", of which text: {texts}" if texts else ""))
        if feature not in texts:
            kind = getattr(features[feature].tf_dtype, "name", "several features")
            raise ValueError(f"feature {feature!r} of TFDS dataset {name!r} (config.data.tfds_text_feature) is not "
                             f"one text a document (it is {type(features[feature]).__name__} of {kind}); its text "
                             f"features: {texts or 'none'}")

    builder = prepared_tfds_builder(name, data_dir, check, key="config.data.tfds_name")
    splits = builder.info.splits
    named = (part.split("[")[0].strip() for part in split.split("+"))
    unknown = [part for part in named if part not in splits and part != "all"]  # "all": TFDS's every split
    if splits and unknown:  # (a builder with no split information, as under tfds.testing.mock_data: unchecked)
        raise ValueError(f"TFDS dataset {name!r} has no split {unknown[0]!r} "
                         f"(config.data.tfds_split={split!r}); it has {sorted(splits)}")
    tfds = tf_cpu.datasets()
    try:  # a slice TFDS cannot read ("train[:200%]", "train[:1000]" of 300) is refused here, not when first read
        tfds.core.ReadInstruction.from_spec(split)
        if isinstance(splits, tfds.core.SplitDict) and splits:
            splits[split]
    except (ValueError, AssertionError) as error:
        raise ValueError(f"config.data.tfds_split={split!r}: {' '.join(str(error).split())}") from None
    examples = splits[split].num_examples if split in splits else 0  # a slice ("train[:10%]") is one unit
    parts = min(256, max(1, examples // TFDS_EXAMPLES_PER_UNIT))
    slices = [f"{split}[{k * examples // parts}:{(k + 1) * examples // parts}]" for k in range(parts)] \
        if parts > 1 else [split]
    # Its text's stand-in for `content_samples`: the version TFDS reads, which a newer
    # tensorflow-datasets may change under the same name.
    version = f"version {builder.version}"
    return [{"tfds": data_config.tfds_name, "tfds_split": part, "text_feature": feature, "data_dir": data_dir,
             "content": version} for part in slices]


def _read_tfds(name: str, split: str, feature: str, data_dir: str | None, drops: DropCounter) -> Iterator[list[str]]:
    for index, example in enumerate(read_tfds_split(tfds_builder(name, data_dir), split, feature=feature)):
        sentences = _sentences_of(example, feature, f"{name}[{split}]#{index}", drops)
        if sentences:
            yield sentences

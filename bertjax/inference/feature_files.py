"""Features of a whole input file written to disk: what launch/extract_features.py runs.

Inputs (`read_inputs`): a text file as google-research/bert's extract_features.py reads it
(one example per line, "text_a ||| text_b" for a pair; a blank line is an empty example, so
example i is line i + 1), or a CSV/TSV/JSONL file with named text columns (read as your own
fine-tuning files are, bertjax.tasks.common.read_records).

Outputs (`extract`), by the name given:
* `*.jsonl`: the original's layout, one line per example:
    pooling "none": {"linex_index": i, "features": [{"token": "[CLS]", "layers":
                     [{"index": -1, "values": [H floats, 6 places]}, ...]}, ...]}
    pooling "cls"/"mean": {"linex_index": i, "pooling": "mean", "layers":
                     [{"index": -1, "values": [H floats]}, ...]}
    and "truncated": true in an example cut to max_seq_length (its first tokens only);
  written to `<name>.tmp-<host>-<pid>` and renamed when complete (removed if the run fails, or
  by the next run on that host if it was killed; kept, with an error, if another run wrote
  `<name>` meanwhile).
* anything else: a folder of shards, each holding `shard_size` consecutive examples (fewer
  where that many at full length would hold over SHARD_BYTES of values: `shard_examples`),
  in bounded memory, resumable after a kill:
    shard-00000.npz  line_index <int64>[n] (the examples' 0-based numbers in the input),
                     truncated <bool>[n] (cut to max_seq_length: its first tokens only),
                     layers <int32>[K] (as asked, e.g. -1), and
                     pooling "none": values <dtype>[T, K, H] (the shard's tokens end to end),
                       offsets <int64>[n + 1] (example j is rows offsets[j]:offsets[j + 1]),
                       token_ids <int32>[T], tokens <str>[T];
                     pooling "cls"/"mean": values <dtype>[n, K, H].
    manifest.json    the settings, the shards written, examples done, truncated count,
                     "complete"; rewritten atomically after each shard (the shard first).
  A run with the same settings on that folder resumes after the last shard in the
  manifest; `read_features(folder)` yields the examples back.

Several JAX processes (a multi-host run, jax.distributed started; shard folders only: a
JSONL output is refused): shard k (examples k * shard_size on) is written by process
k % P (P = jax.process_count()). Each process reads the input, featurizes only its shards'
examples on its own devices (no communication but a check that every process has the same
settings, input and weights, and two barriers) and keeps its progress
in manifest-process{p}-of-{P}.json (the fields of manifest.json, and "processes": P); a
run resumes process by process, and only with the same P. After its last shard each
process waits for the others, then process 0 writes manifest.json, their manifests
together (shards in input order, counts summed), so `read_features` reads the folder as
a one-process run's. The folder must be one every host sees (gs://, a shared file system).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import time
import zipfile
import zlib
from typing import Any, Callable, Iterator, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from bertjax import checkpointing
from bertjax.inference import hidden_states
from bertjax.runtime import console, fileio
from bertjax.tasks import common
from bertjax.tasks.raw_text import original_pair

FORMAT = "bertjax-features/1"
MANIFEST = "manifest.json"
_PROGRESS_FILE = re.compile(r"manifest-process\d+-of-\d+\.json")  # a multi-process run's own progress
_SHARD_FILE = re.compile(r"shard-\d{5,}\.npz")  # (see _shard_name)
INPUT_FORMATS = ("text", "csv", "tsv", "jsonl")
SHARD_BYTES = 512 << 20  # a shard's values at most, whatever --shard_size asks


# -- Inputs. --

def input_format(path: str, file_format: str = "", columns: Sequence[str] = ()) -> str:
    """"text", "csv", "tsv" or "jsonl": file_format, else from the extension (.json is JSONL,
    anything not CSV/TSV/JSON(L) is text); a ValueError for a file that does not exist, and for
    one so read as text whose first lines are JSON objects, or CSV/TSV under a header naming
    one of `columns` (each line's raw JSON, or the header and the rows' other fields, would be
    in an example), as predict refuses them."""
    if file_format and file_format not in INPUT_FORMATS:
        raise ValueError(f"--input_format must be one of {', '.join(INPUT_FORMATS)}, got {file_format!r}")
    if fileio.isdir(path):
        raise ValueError(f"--input_file={path} is a folder; give a file of inputs")
    if path == "-" and not fileio.exists(path):
        raise ValueError("--input_file=-: no such file (stdin is not read: features read their input more than "
                         "once; save it to a file)")
    if not fileio.exists(path):
        raise ValueError(f"--input_file={path}: no such file")
    found = common.file_format(path, file_format)
    if found != "text" or file_format or not fileio.can_read_twice(path):
        return found
    first = common.first_lines(path)
    written_in = "jsonl" if common.json_lines(first) else common.header_format(first, columns)
    if written_in:
        also = " (and --text_a_key)" if written_in == "jsonl" else ""
        raise ValueError(f"--input_file={path} looks like {written_in}, not one input a line: pass --input_format="
                         f"{written_in}{also} or --input_format=text to read each line as an input")
    return found


def read_inputs(path: str, file_format: str = "", text_a_key: str = "text", text_b_key: str = "") -> Iterator[Any]:
    """The examples of `path` in order, streamed, as (a, b) tuples (b None: a single text): a text
    file's lines ("a ||| b" a pair, `raw_text.original_pair`) or the columns text_a_key and text_b_key
    ("" = single texts) of a CSV/TSV/JSONL file, read as predict reads them (`tasks.common`).
    Errors name file:line: a missing column, a field that is not text, bytes that are not UTF-8."""
    file_format = input_format(path, file_format)
    if file_format == "text":
        for line in common.user_lines(path, one_input_a_line=True):
            yield original_pair(line.rstrip("\r\n"))
        return
    for where, row in common.read_records(path, file_format):
        texts = []
        for flag, column in (("--text_a_key", text_a_key), ("--text_b_key", text_b_key)):
            if not column:
                texts.append(None)
                continue
            if column not in row:
                raise ValueError(f"{where}: no column {column!r} ({flag}); the row has {sorted(row)}")
            if not isinstance(row[column], str):
                raise ValueError(f"{where}: column {column!r} should be text, got {row[column]!r}"[:300])
            texts.append(row[column])
        yield tuple(texts)


def count_inputs(path: str, file_format: str = "", text_a_key: str = "text", text_b_key: str = "") -> int:
    """The number of examples in `path` (a first pass, checking them); ValueError if it has
    none (an empty file, or only blank lines)."""
    count = nonblank = 0
    for example in read_inputs(path, file_format, text_a_key, text_b_key):
        count += 1
        nonblank += bool(example[0] or example[1])
    if not nonblank and (not count or file_format == "text"):
        raise ValueError(f"--input_file={path}: no examples (an empty file, or blank lines only?)")
    if not nonblank:  # (rows of a table or JSON Lines, every one's text empty)
        raise ValueError(f"--input_file={path}: every one of its {count} examples is empty text")
    return count


def _check_unchanged(path: str, counted_bytes: int) -> None:
    """A ValueError when the input's size is not what it was when counted (another program still
    writing it): the features would lack its new lines, yet be reported whole."""
    now = fileio.size(path)
    if now != counted_bytes:
        raise ValueError(f"--input_file={path}: {counted_bytes} bytes when its examples were counted, {now} now: it "
                         "changed during the extraction (is another program still writing it?); extract again once "
                         "it is complete")


def _check_all_read(path: str, got: int, wanted: int) -> None:
    """A ValueError when the extraction read fewer examples than the count found (the file
    changed or shrank meanwhile): never a short output reported as whole."""
    if got != wanted:
        raise ValueError(f"--input_file={path}: {wanted} examples counted but {got} read for extraction; did it "
                         "change meanwhile?")


def input_location(path: str, file_format: str, index: int) -> str:
    """"path:line" where example `index` (0-based) of `path` is (text: line index + 1)."""
    if file_format == "text":
        return f"{path}:{index + 1}"
    return next(itertools.islice(common.read_records(path, file_format), index, None))[0]


# -- Outputs. --

def jsonl_line(index: int, feature: dict[str, Any], layers: tuple[int, ...], pooling: str) -> str:
    """One example (an `iter_features` dict) as a line of the original's JSONL layout."""
    values = np.round(feature["values"].astype(np.float64), 6)  # [K, T, H] or [K, H]
    if pooling == "none":
        record = {"linex_index": index, "features": [
            {"token": token, "layers": [{"index": layer, "values": values[k, t].tolist()}
                                        for k, layer in enumerate(layers)]}
            for t, token in enumerate(feature["tokens"])]}
    else:
        record = {"linex_index": index, "pooling": pooling,
                  "layers": [{"index": layer, "values": values[k].tolist()} for k, layer in enumerate(layers)]}
    if feature.get("truncated"):
        record["truncated"] = True
    return json.dumps(record, ensure_ascii=False)


def _shard_name(number: int) -> str:
    return f"shard-{number:05d}.npz"


def _write_shard(path: str, first: int, features: list[dict[str, Any]], layers: tuple[int, ...], pooling: str,
                 dtype: str) -> None:
    """Writes the .npz of consecutive examples first, first + 1, ... (layout in the module
    docstring) atomically, streamed to the file."""
    arrays = {"line_index": np.arange(first, first + len(features), dtype=np.int64),
              "truncated": np.array([bool(f.get("truncated")) for f in features]),
              "layers": np.asarray(layers, np.int32)}
    with np.errstate(over="ignore"):  # (a value float16 cannot hold is refused below, naming its example)
        if pooling == "none":
            tokens = [token for feature in features for token in feature["tokens"]]
            # Cast as joined: a float32 copy of the whole shard beside it would double its memory.
            arrays["values"] = np.concatenate([np.swapaxes(f["values"], 0, 1) for f in features], dtype=dtype)
            arrays["offsets"] = np.cumsum([0] + [len(f["tokens"]) for f in features], dtype=np.int64)
            arrays["token_ids"] = np.concatenate([f["token_ids"] for f in features]).astype(np.int32)
            arrays["tokens"] = np.asarray(tokens, dtype=str)
        else:
            arrays["values"] = np.stack([f["values"] for f in features], dtype=dtype)
    _refuse_overflow(arrays, first)
    fileio.write_with(path, lambda f: np.savez(f, **arrays))


def _refuse_overflow(arrays: dict[str, np.ndarray], first: int) -> None:
    """ValueError naming the first example (its line_index) whose values float16 cannot hold
    (past 65,504: inf, silently, in a cast); the model's own were checked finite before."""
    if arrays["values"].dtype != np.float16:
        return
    finite = np.isfinite(arrays["values"]).reshape(len(arrays["values"]), -1).all(axis=1)
    if finite.all():
        return
    row = int(np.argmin(finite))
    example = int(np.searchsorted(arrays["offsets"], row, side="right") - 1) if "offsets" in arrays else row
    raise ValueError(f"example {first + example} (line_index): a feature value past float16's range (65,504), "
                     "written as inf: give --output_dtype=float32, and a new --output (a folder keeps its settings)")


def shard_examples(model, layers: tuple[int, ...], pooling: str, dtype: str, shard_size: int) -> int:
    """Examples a shard holds: `shard_size`, fewer where that many at the model's full length
    would hold over SHARD_BYTES of values (a shard is gathered in memory before it is written)."""
    per_token = len(layers) * model.bert.hidden_size * np.dtype(dtype).itemsize
    example = per_token * (model.max_seq_length if pooling == "none" else 1)
    return max(1, min(shard_size, SHARD_BYTES // example))


def input_columns(source, text_a_key: str | None, text_b_key: str | None) -> tuple[str, str]:
    """The columns a CSV/TSV/JSONL input's texts are read from: those given (None: not given),
    else those predict reads for the run's task family (`batch_predict.default_keys`: a
    classifier's own columns, the second only for a model trained on pairs; a tagger's
    'text'), else 'text' alone."""
    from bertjax.inference import batch_predict

    info = source.task_info or {}
    keys = batch_predict.default_keys(info["family"], source.data, info) if info.get("family") else {}
    if text_a_key is None:
        text_a_key = keys.get("text_a") or "text"
    if text_b_key is None:
        text_b_key = (keys.get("text_b") or "") if info.get("pairs") else ""
    return text_a_key, text_b_key


def read_features(folder: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The examples of a shard folder, in input order: {"index": line index, "values":
    <[K, T, H]> with "tokens", "token_ids" (pooling "none"), or <[K, H]>; "truncated": whether
    it was cut to max_seq_length (absent in shards written before it was recorded)}. A ValueError for a
    folder whose extraction has not finished (a killed run's shards are part of the input)."""
    folder = os.fspath(folder)  # (pathlib's paths too)
    path = fileio.join(folder, MANIFEST)
    if fileio.exists(folder) and not fileio.isdir(folder):
        raise ValueError(f"{folder} is a file: read_features reads an extraction's folder of shards (a .jsonl "
                         "extraction is JSON lines, one example a line)")
    if not fileio.exists(path):
        raise ValueError(f"{folder}: no {MANIFEST}, so no finished extraction (a multi-process run writes it when "
                         "every process is done)")
    manifest = fileio.read_json(path)
    if not manifest.get("complete"):
        raise ValueError(f"{folder}: an unfinished extraction ({manifest.get('examples_done', 0)} of "
                         f"{manifest.get('num_examples', '?')} examples); run the same command again to finish it")
    for shard in manifest["shards"]:
        arrays = _load_shard(folder, shard["file"])
        for j, index in enumerate(arrays["line_index"]):
            example = {"index": int(index)}
            if "truncated" in arrays:
                example["truncated"] = bool(arrays["truncated"][j])
            if "offsets" in arrays:
                rows = slice(arrays["offsets"][j], arrays["offsets"][j + 1])
                # Copies: a view would keep the whole shard (up to SHARD_BYTES) alive while any
                # example's values are kept.
                yield {**example, "tokens": arrays["tokens"][rows].tolist(),
                       "token_ids": arrays["token_ids"][rows].copy(),
                       "values": np.swapaxes(arrays["values"][rows], 0, 1).copy()}
            else:
                yield {**example, "values": arrays["values"][j].copy()}


def _load_shard(folder: str, name: str, keys: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The arrays of shard `name` of `folder` (`keys` alone, where they are there, read from the
    file as needed; else all, read whole); a ValueError naming it for a file that is no whole
    shard (cut short by a copy interrupted after the manifest, which sorts first)."""
    path = fileio.join(folder, name)
    try:
        if keys:
            with fileio.open_file(path, "rb") as f, np.load(f) as arrays:
                return {key: arrays[key] for key in keys if key in arrays.files}
        with np.load(io.BytesIO(fileio.read_bytes(path))) as arrays:
            return dict(arrays)
    except (zipfile.BadZipFile, EOFError, ValueError, zlib.error) as e:
        raise ValueError(f"{path}: not a whole shard ({e}); copy the folder again, or extract again") from None


def progress_file(process: int, processes: int) -> str:
    """Where a process keeps its progress: manifest.json for one process, else its own file."""
    return MANIFEST if processes == 1 else f"manifest-process{process}-of-{processes}.json"


def input_identity(path: str) -> dict[str, Any]:
    """What identifies an input file's text: its size and content hash (a file touched but not
    changed still resumes)."""
    return {"bytes": fileio.size(path), "sha256": fileio.content_hash(path)}


# BertConfig fields that leave an encoder's hidden states as they are at inference: how it
# runs, dropout, initialisation, the task heads.
_NOT_IN_FEATURES = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "scan_layers",
                    "remat_policy", "attention_impl", "feature_layers", "feature_combine", "tagging_head",
                    "lstm_hidden_size", "pooler", "token_transform")


def _model_identity(bert) -> dict[str, Any]:
    """The encoder's configuration that makes the numbers with its weights (its activation,
    layer norm, positions, attention): the same weights read as another model give others."""
    return {key: value for key, value in bert.to_dict().items() if key not in _NOT_IN_FEATURES}


def _own_casing_as_now(saved: dict[str, Any], key: str, now: dict[str, Any]) -> dict[str, Any]:
    """`saved` with the recorded casing of a tokenizer that normalises by itself (not WordPiece:
    its file, which the vocabulary's digest covers, decides) taken as `now` records it: code
    before recorded False for every such tokenizer, whatever it did."""
    recorded, current = saved.get(key), now.get(key)
    if not (isinstance(recorded, dict) and isinstance(current, dict) and current.get("kind") != "wordpiece"):
        return saved
    return {**saved, key: {**recorded, "do_lower_case": current.get("do_lower_case")}}


def _tokenizer_identity(tokenizer) -> dict[str, Any]:
    """The tokenizer that makes the numbers: its kind, vocabulary (by content) and casing."""
    return {"kind": tokenizer.kind, "vocabulary": fileio.content_hash(tokenizer.path),
            "do_lower_case": tokenizer.do_lower_case}


# Paths as typed, for people: "input" and "weights" identify what they hold (./in.txt is in.txt).
_RECORDED_ONLY = ("input_file", "checkpoint")
# Settings whose values are fingerprints: named by what they stand for.
_IDENTITIES = {"input": "the input file's text changed", "weights": "the checkpoint's weights changed",
               "tokenizer": "the tokenizer changed (its vocabulary or casing)"}


def _difference(key: str, saved: Any, now: Any) -> str:
    """What changed in setting `key`, for people: a fingerprint by what it stands for, a
    configuration by its first field that differs."""
    if key in _IDENTITIES:
        return _IDENTITIES[key]
    if isinstance(saved, dict) and isinstance(now, dict):
        field = next(field for field in sorted(saved.keys() | now.keys()) if saved.get(field) != now.get(field))
        return f"{key} {field}: {saved.get(field)!r} there, {now.get(field)!r} now"
    return f"{key}: {saved!r} there, {now!r} now"


def _check_settings(output: str, manifest: dict[str, Any], settings: dict[str, Any],
                    earlier_weights: Callable[[], tuple[str, ...]]) -> None:
    """A ValueError naming what differs between a folder's features and this run's.
    `earlier_weights()`: the identities folders written before the weights were known by
    their encoder's values recorded for the same files (the model's whole folder, its weight
    files', then every value, heads too), also accepted."""
    saved = _own_casing_as_now(manifest.get("settings", {}), "tokenizer", settings)
    unused = ("text_a_key", "text_b_key") if settings.get("input_format") == "text" else ()  # (lines: no columns)
    changed = [key for key in settings if key in saved and saved[key] != settings[key]  # (keys added since: unknown)
               and key not in _RECORDED_ONLY + unused]
    changed.sort(key=lambda key: key not in (*_IDENTITIES, "model"))  # what makes the numbers, first
    if changed.count("weights") and saved["weights"] in earlier_weights():
        changed.remove("weights")
    if manifest.get("format") != FORMAT or changed:
        shown = [_difference(k, saved[k], settings[k]) for k in changed[:3]]
        raise ValueError(f"the output folder {output} holds features made with other settings ("
                         + ", ".join(shown) + "); give a new folder or the same settings and files")


def _resume_point(output: str, settings: dict[str, Any], process: int, processes: int,
                  examples_per_shard: int, earlier_weights: Callable[[], tuple[str, ...]]
                  ) -> tuple[dict[str, Any], bool, list[dict[str, Any]]]:
    """(this process's manifest to continue from, whether the folder is complete, the folder's
    manifests): the folder's (same settings, same process count) or a fresh one of
    `examples_per_shard` examples a shard. A ValueError for a folder
    of other settings, of another process count or of other files. Every process reads
    every progress file, so all of them reach the same verdict."""
    if fileio.exists(output) and not fileio.isdir(output):
        raise ValueError(f"--output={output} is a file; give a folder for shards or a name ending in .jsonl")
    present = sorted(name for name in (fileio.listdir(output) if fileio.isdir(output) else [])
                     if not fileio.INTERRUPTED_WRITE.fullmatch(name))
    manifests = {name: fileio.read_json(fileio.join(output, name)) for name in present
                 if name == MANIFEST or _PROGRESS_FILE.fullmatch(name)}
    fresh = {"format": FORMAT, "settings": settings, "shards": [], "examples_done": 0, "truncated": 0,
             "complete": False, "examples_per_shard": examples_per_shard,
             **({"processes": processes} if processes > 1 else {})}
    if not manifests:
        # Shards alone: a run killed between its first shard and its first progress file.
        others = [name for name in present if not _SHARD_FILE.fullmatch(name)]
        if others:
            raise ValueError(f"--output={output} is not empty and has no {MANIFEST} (it has {', '.join(others[:4])}"
                             "); give a new or empty folder")
        return fresh, False, []
    for name, manifest in manifests.items():
        if not (isinstance(manifest, dict) and "format" in manifest):  # another tool's file of that name
            raise ValueError(f"--output={output}: its {name} is no features manifest of bertjax's; give a new or "
                             "empty folder")
        _check_settings(output, manifest, settings, earlier_weights)
    if manifests.get(MANIFEST, {}).get("complete"):
        return manifests[MANIFEST], True, list(manifests.values())
    other = sorted({manifest.get("processes", 1) for manifest in manifests.values()} - {processes})
    if other:
        raise ValueError(f"--output={output} holds the progress of a run of {other[0]} process(es), this run has "
                         f"{processes}; resume it with {other[0]} or give a new folder")
    return manifests.get(progress_file(process, processes), fresh), False, list(manifests.values())


def _first_truncated(output: str, manifests: list[dict[str, Any]]) -> int | None:
    """The first example the folder's written shards hold cut to max_seq_length (its 0-based
    number in the input), or None. Shards are opened only when a manifest counts one, and then
    in input order up to it, each for its flags alone."""
    if not any(manifest.get("truncated") for manifest in manifests):
        return None
    shards = {shard["file"]: shard for manifest in manifests for shard in manifest["shards"]}
    for shard in sorted(shards.values(), key=lambda shard: shard["first"]):
        arrays = _load_shard(output, shard["file"], keys=("truncated", "line_index"))
        if "truncated" in arrays and arrays["truncated"].any():
            return int(arrays["line_index"][np.argmax(arrays["truncated"])])
    return None


def _check_same_everywhere(settings: dict[str, Any] | None, processes: int) -> None:
    """A ValueError on every process when their settings differ (a host with another copy of
    the input, another checkpoint, other flags): each would write its shards into one folder.
    settings None: this process could not read its own (it raises its error; the others
    raise here instead of waiting for it)."""
    if processes == 1:
        return
    mine = np.zeros(33, np.uint8)  # a digest of the settings, then 1 where they could not be read
    if settings is None:
        mine[32] = 1
    else:
        compared = {key: value for key, value in settings.items() if key not in _RECORDED_ONLY}
        mine[:32] = np.frombuffer(hashlib.sha256(json.dumps(compared, sort_keys=True).encode()).digest(), np.uint8)
    every = np.asarray(multihost_utils.process_allgather(mine))  # [processes, 33]: each process decides alike
    if settings is None:
        return
    failed = [process for process in range(processes) if every[process, 32]]
    if failed:
        raise ValueError(f"process {failed[0]} could not read its input or model (its own error says why): every "
                         "host stops")
    differing = [process for process in range(processes) if not np.array_equal(every[process], every[0])]
    if differing:
        raise ValueError(f"process {differing[0]}'s settings differ from process 0's (another input file, checkpoint "
                         "or tokenizer, or other flags): every host must extract the same")


def _merge(output: str, processes: int, total: int) -> dict[str, Any]:
    """The manifest.json of a multi-process run: its processes' manifests together (shards in
    input order, counts summed)."""
    parts = []
    for process in range(processes):
        path = fileio.join(output, progress_file(process, processes))
        if not fileio.exists(path):
            raise ValueError(f"--output={output}: process {process}'s {progress_file(process, processes)} is not "
                             "there; a multi-host run needs a folder every host sees (gs:// or a shared file system)")
        parts.append(fileio.read_json(path))
    done = sum(part["examples_done"] for part in parts)
    return {"format": FORMAT, "settings": parts[0]["settings"], "processes": processes,
            "shards": sorted((shard for part in parts for shard in part["shards"]), key=lambda shard: shard["first"]),
            "examples_done": done, "truncated": sum(part["truncated"] for part in parts), "complete": done == total,
            "num_examples": total}


# Names a user means as one file; anything but *.jsonl is a shard folder, which such a name
# would be without a word.
_FILE_SUFFIXES = (".json", ".npz", ".npy", ".txt", ".csv", ".tsv", ".h5", ".parquet", ".gz", ".bz2", ".zst", ".xz",
                  ".zip", ".ndjson", ".pkl", ".pt", ".bin", ".arrow")


def writes_jsonl(output: str) -> bool:
    """Whether `output` is one JSONL file (a name ending in .jsonl, in any case) rather than a
    folder of shards; a ValueError for a name of another kind of file."""
    name = os.path.basename(output.rstrip("/")).lower()
    if name.endswith(_FILE_SUFFIXES) and not fileio.isdir(output):  # (a folder of shards so named before: resumed)
        raise ValueError(f"--output={output}: the features are one JSONL file (a name ending in .jsonl) or a folder "
                         f"of .npz shards (any other name), not a {os.path.splitext(name)[1]} file")
    return name.endswith(".jsonl")


@contextlib.contextmanager
def _naming_output(output: str):
    """An OSError writing `output` (a full disk's names no file) as a ValueError naming it."""
    try:
        yield
    except (OSError, *fileio.remote_errors()) as e:
        raise ValueError(f"--output={output}: cannot write ({getattr(e, 'strerror', None) or e}); nothing of it "
                         "was left") from None


def check_output(input_file: str, output: str) -> None:
    """A ValueError naming --output where `extract` could not write it: the input itself, an
    existing JSONL file, a folder that is a file, missing (JSONL) or refuses files. Cheap: the
    launcher asks before the model loads."""
    if fileio.same_file(input_file, output):
        raise ValueError(f"--output={output} is the input file; give another name (it would be overwritten)")
    to_jsonl = writes_jsonl(output)
    if to_jsonl and fileio.exists(output):  # an earlier run's features are not replaced unasked
        raise ValueError(f"--output={output} exists; remove it or give another name")
    folder = os.path.dirname(output)
    if folder and not fileio.is_remote(output) and os.path.isfile(folder):
        raise ValueError(f"--output={output}: {folder} is a file, not a folder")
    if to_jsonl and folder and not fileio.is_remote(output) and not os.path.isdir(folder):
        raise ValueError(f"--output={output}: the folder {folder} does not exist; create it first")
    fileio.check_can_make(output, "--output")  # (a new JSONL file is made where a folder would be)


def extract(model, input_file: str | os.PathLike, output: str | os.PathLike, *,
            layers: tuple[int, ...] = (-1, -2, -3, -4),
            pooling: str = "none", input_format_name: str = "", text_a_key: str = "text", text_b_key: str = "",
            dtype: str = "float32", shard_size: int = 1024, fail_on_truncation: bool = False,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Writes the features of every example of `input_file` to `output` (`*.jsonl`, else a
    shard folder; see the module docstring) with `model` (an inference.Model), showing
    progress. With several JAX processes each writes its share of the shards (module
    docstring). Returns {"examples", "truncated" (of the whole input), "new" (examples this
    process featurized in this call), "seconds"}.

    dtype: the shards' values, "float32" or "float16" (JSONL: 6 decimal places).
    fail_on_truncation: an input longer than the model's max_seq_length is a ValueError
      naming it (otherwise it is truncated and counted); so is a shard folder that holds one
      already, written without the flag.
    """
    input_file, output = os.fspath(input_file), os.fspath(output)  # (pathlib's paths too)
    model.layer_indices(layers)  # a bad index fails before any input is read
    layers = tuple(map(int, layers))  # (numpy's ints too: written to JSON, the manifest and lines)
    if pooling not in hidden_states.POOLINGS:
        raise ValueError(f"--pooling must be one of {hidden_states.POOLINGS}, got {pooling!r}")
    if dtype not in ("float32", "float16"):
        raise ValueError(f"--output_dtype must be float32 or float16, got {dtype!r}")
    if not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError(f"--shard_size must be a positive int, got {shard_size!r}")
    check_output(input_file, output)
    to_jsonl = writes_jsonl(output)
    process, processes = jax.process_index(), jax.process_count()
    if to_jsonl and processes > 1:
        raise ValueError(f"--output={output}: JSONL is written by one process; give a folder for a multi-host run")
    try:  # what each host reads for itself: one that cannot read its copy stops every host (below)
        if not fileio.can_read_twice(input_file):
            raise ValueError(f"--input_file={input_file} is a pipe or stream: features read their input more than "
                             "once (to count it, to know it again on resume, to extract); save it to a file first")
        file_format = input_format(input_file, input_format_name, (text_a_key, text_b_key))
        counted_bytes = fileio.size(input_file)
        total = count_inputs(input_file, file_format, text_a_key, text_b_key)
        encoder = checkpointing.weights_digest(model.params["bert"])  # (a head never changes a feature)
        settings = {"input_file": input_file, "input": input_identity(input_file), "input_format": file_format,
                    "text_a_key": text_a_key, "text_b_key": text_b_key, "checkpoint": model.source.path,
                    "weights": encoder, "model": _model_identity(model.bert),
                    "tokenizer": _tokenizer_identity(model.tokenizer), "precision": model.precision,
                    "activations": model.bert.dtype, "max_seq_length": model.max_seq_length, "layers": list(layers),
                    "pooling": pooling, "dtype": dtype, "shard_size": shard_size}
    except (ValueError, OSError, *fileio.remote_errors()):
        _check_same_everywhere(None, processes)  # the others learn of it, rather than wait at the check
        raise
    who = f"process {process} of {processes}: " if processes > 1 else ""
    if to_jsonl:  # one piece: the whole input
        manifest, unit, pieces = {"examples_done": 0, "truncated": 0}, total, range(1)
        fileio.remove_killed_runs_files(output, log)
    else:
        _check_same_everywhere(settings, processes)
        manifest, finished, written = _resume_point(output, settings, process, processes,
                                                    shard_examples(model, layers, pooling, dtype, shard_size),
                                                    lambda: (fileio.fingerprint(model.source.weights),
                                                             model.source.weights_fingerprint(),
                                                             checkpointing.weights_digest(model.params)))
        # A run without the flag may have cut some already; every process reads the same shards.
        first = _first_truncated(output, written) if fail_on_truncation else None
        if first is not None:
            remedy = "" if finished else ", or drop the flag to finish this one"
            raise ValueError(f"--fail_on_truncation: {output} already holds example {first + 1} ("
                             f"{input_location(input_file, file_format, first)}) cut to --max_seq_length="
                             f"{model.max_seq_length} tokens by a run without the flag; give a new --output{remedy}")
        if finished:
            log(f"{output} is complete ({total} examples); nothing to do")
            return {"examples": total, "truncated": manifest["truncated"], "new": 0, "seconds": 0.0}
        # This process's shards (k % processes == process) from its next one on, as many examples
        # a shard as the folder was started with (a folder older than the byte bound: shard_size).
        unit = manifest.get("examples_per_shard", shard_size)
        pieces = range(process, -(-total // unit), processes)[len(manifest["shards"]):]
    start = manifest["examples_done"]
    own = start + sum(min(unit, total - piece * unit) for piece in pieces)  # this process's examples in all
    if start:
        log(f"{who}resuming {output} at example {start} of {own} ({len(manifest['shards'])} shards written)")
    progress = console.Progress(own, start, label=f"{who}examples", unit="examples",  # (each process its own)
                                line_seconds=console.LINE_SECONDS)

    def example_number(position: int) -> int:
        """This call's position-th example -> its 0-based number in the input."""
        return pieces[position // unit] * unit + position % unit

    def on_truncated(positions: np.ndarray) -> None:
        if fail_on_truncation:
            first = example_number(int(positions[0]))
            where = input_location(input_file, file_format, first)
            raise ValueError(f"--fail_on_truncation: example {first + 1} ({where}) is longer than --max_seq_length="
                             f"{model.max_seq_length} tokens; raise it, or drop the flag to truncate and count such "
                             "examples")
        truncated_at.extend(int(position) for position in positions)  # counted as their shards are written

    truncated_at: list[int] = []  # this call's positions of truncated examples, increasing
    began = time.perf_counter()
    examples = (example for i, example in enumerate(read_inputs(input_file, file_format, text_a_key, text_b_key))
                if i // unit in pieces)
    features = model.iter_features(examples, layers, pooling, on_truncated=on_truncated,
                                   progress=lambda done: progress.advance(start + done))
    try:
        if to_jsonl:
            tmp = fileio.temporary_name(output)
            try:
                written = 0
                with fileio.open_file(tmp, "w") as f:
                    for written, feature in enumerate(features, start=1):
                        line = jsonl_line(written - 1, feature, layers, pooling)
                        with _naming_output(output):
                            f.write(line + "\n")
                    with _naming_output(output):  # (the last lines reach the disk here)
                        f.flush()
                _check_all_read(input_file, written, total)
                _check_unchanged(input_file, counted_bytes)
            except BaseException:  # an error or Ctrl-C: no half-written file left behind
                fileio.remove(tmp)
                raise
            if fileio.exists(output):
                raise ValueError(f"--output={output} was written by another run while this one ran; kept, and "
                                 f"this run's features are in {tmp}")
            fileio.finish_write(tmp, output)
            manifest["examples_done"], manifest["truncated"] = total, len(truncated_at)
        else:
            if processes > 1:  # every process has checked the folder before any writes to it
                multihost_utils.sync_global_devices(f"bertjax features start {output}")
            path = fileio.join(output, progress_file(process, processes))
            shards = zip(pieces, iter(lambda: list(itertools.islice(features, unit)), []))
            for k, (number, batch) in enumerate(shards):
                if k == 0:  # made once there is a shard to write: a first example refused leaves no empty folder
                    fileio.makedirs(output)
                name, first = _shard_name(number), number * unit
                lo, hi = k * unit, k * unit + len(batch)  # its positions in this call
                manifest["truncated"] += bisect.bisect_left(truncated_at, hi) - bisect.bisect_left(truncated_at, lo)
                _write_shard(fileio.join(output, name), first, batch, layers, pooling, dtype)
                manifest["shards"].append({"file": name, "first": first, "count": len(batch)})
                manifest["examples_done"] += len(batch)
                manifest["complete"] = manifest["examples_done"] == own
                if manifest["complete"]:  # never marked whole short of lines added meanwhile
                    _check_unchanged(input_file, counted_bytes)  # (a rerun refuses: the folder records the text)
                fileio.write_json(path, {**manifest, "num_examples": total})
            _check_all_read(input_file, manifest["examples_done"] - start, own - start)
    finally:
        progress.close()
    done = {"examples": total, "truncated": manifest["truncated"], "new": manifest["examples_done"] - start,
            "seconds": time.perf_counter() - began}
    if processes > 1:
        manifest["complete"] = manifest["examples_done"] == own  # (written also by a process without shards)
        fileio.makedirs(output)
        fileio.write_json(path, {**manifest, "num_examples": total})
        multihost_utils.sync_global_devices(f"bertjax features done {output}")
        merged = _merge(output, processes, total)
        if process == 0:
            fileio.write_json(fileio.join(output, MANIFEST), merged)
        done["truncated"] = merged["truncated"]
    if not to_jsonl and process == 0:  # every process is done writing: a killed run's leftovers can go
        listed = {shard["file"] for shard in (merged if processes > 1 else manifest)["shards"]}
        for name in fileio.listdir(output):
            if fileio.INTERRUPTED_WRITE.fullmatch(name) or (_SHARD_FILE.fullmatch(name) and name not in listed):
                fileio.remove(fileio.join(output, name))
    return done

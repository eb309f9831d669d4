"""Hugging Face's model files: model.safetensors (or its shards) read into numpy whatever its
floating-point type, and a model folder's model.safetensors + config.json (+
tokenizer_config.json) written.

`safetensors.numpy` cannot load bfloat16 tensors (numpy has no such type), the type many
checkpoints are published in, and it raises its own errors for a cut-off file. The format
is small and documented (an 8-byte little-endian header length, a JSON header of
{name: {"dtype", "shape", "data_offsets"}}, then the bytes), so it is read here directly:
bfloat16 through ml_dtypes (which JAX ships), every floating-point tensor returned as float32
(bertjax's params on the host), and a file that is not whole is a ValueError naming it.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any, Callable

import ml_dtypes
import numpy as np

from bertjax.runtime import fileio

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_FLOATS = ("F64", "F32", "F16", "BF16")  # read as float32, bertjax's host params
_MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
SHARD_INDEX = "model.safetensors.index.json"
# config.json's (and bert_config.json's) key for what using a bertjax run's model needs of its
# config.data and no layout has a place for: the length it trained at (inputs past it are
# warned of, as the run's own), span QA's windows and answer settings. model_source reads it back.
RUN_DATA = "bertjax_data"


def trained_length(settings: dict) -> int | None:
    """The length a run trained at, as a config.json (bert_config.json) `settings` records it."""
    return (settings.get(RUN_DATA) or {}).get("max_seq_length")


def safetensors_shapes(file: str) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of a safetensors `file` (local or gs://), from its header alone."""
    with fileio.open_file(file, "rb") as f:
        header, _ = _header(file, f.read)
    return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}


def _header(file: str, read: Callable[[int], bytes]) -> tuple[dict, int]:
    """(a safetensors file's JSON header, the byte where its data starts), reading from its start."""
    start = read(8)
    if len(start) < 8:
        raise ValueError(f"{file}: not a safetensors file ({len(start)} bytes)")
    if start.startswith(b"version "):  # "version https://git-lfs.github.com/spec/v1"
        raise ValueError(f"{file}: a Git LFS pointer, not the weights (fetch them: git lfs pull)")
    (header_size,) = struct.unpack("<Q", start)
    if header_size > _MAX_HEADER_BYTES:  # read() would try to allocate it
        raise ValueError(f"{file}: not a safetensors file (its first 8 bytes give a header of {header_size} bytes)")
    try:
        header = json.loads(read(header_size))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{file}: not a safetensors file, or cut off (its header does not read as JSON)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{file}: a damaged header: a JSON {type(header).__name__}, expected an object of tensors")
    for name, entry in header.items():
        if name != "__metadata__" and not (
                isinstance(entry, dict) and isinstance(entry.get("dtype"), str)
                and _ints(entry.get("shape")) and all(size >= 0 for size in entry["shape"])
                and _ints(entry.get("data_offsets")) and len(entry["data_offsets"]) == 2):
            raise ValueError(f"{file}: a damaged header: tensor {name!r} is {entry!r}, expected {{dtype: a string, "
                             "shape: sizes, data_offsets: [start, end]}")
    return header, 8 + header_size


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value)


def read_safetensors(file: str) -> dict[str, np.ndarray]:
    """`file` (local or gs://) -> {name: array}; floating-point tensors as float32."""
    data = fileio.read_bytes(file)
    header, start = _header(file, io.BytesIO(data).read)  # (shares `data`; reads copy the header only)
    body = memoryview(data)[start:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry.get("dtype") not in _DTYPES:
            raise ValueError(f"{file}: tensor {name!r} has dtype {entry.get('dtype')!r}; bertjax reads "
                             f"{sorted(_DTYPES)}")
        start, end = entry["data_offsets"]
        if end > len(body):
            raise ValueError(f"{file}: cut off: tensor {name!r} ends at byte {end} of the data, the file holds "
                             f"{len(body)} (copy it again)")
        dtype = np.dtype(_DTYPES[entry["dtype"]])
        size = int(np.prod(entry["shape"], dtype=np.int64)) * dtype.itemsize
        if not 0 <= start <= end or end - start != size:
            raise ValueError(f"{file}: tensor {name!r} has data_offsets [{start}, {end}], which do not hold its shape "
                             f"{entry['shape']} of {entry['dtype']} ({size} bytes): a damaged header")
        array = np.frombuffer(body[start:end], _DTYPES[entry["dtype"]]).reshape(entry["shape"])
        tensors[name] = array.astype(np.float32) if entry["dtype"] in _FLOATS else array.copy()
    return tensors


def weight_files(directory: str) -> list[str]:
    """The files holding a Hugging Face folder's weights: its model.safetensors, else the
    shards its model.safetensors.index.json names (save_pretrained's past max_shard_size)."""
    single, index = fileio.join(directory, "model.safetensors"), fileio.join(directory, SHARD_INDEX)
    if fileio.exists(single) or not fileio.exists(index):
        return [single]
    values = fileio.read_json(index)
    weight_map = values.get("weight_map") if isinstance(values, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(name, str) and "/" not in name for name in weight_map.values()):
        raise ValueError(f"{index}: expected a 'weight_map' object of tensor names to shard files of this folder")
    files = [fileio.join(directory, name) for name in sorted(set(weight_map.values()))]
    absent = [file for file in files if not fileio.exists(file)]
    if absent:  # (else a bare errno naming the shard alone)
        raise ValueError(f"{index} names {len(absent)} shard(s) not in the folder ({absent[0]}"
                         f"{', ...' if len(absent) > 1 else ''}): an incomplete copy or download?")
    return files


def read_weights(directory: str) -> tuple[str, dict[str, np.ndarray]]:
    """(what errors name the weights by, {name: array}) of a Hugging Face folder, its shards
    read as one (`weight_files`)."""
    files = weight_files(directory)
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        for name, value in read_safetensors(file).items():
            if name in tensors:
                raise ValueError(f"{file}: tensor {name!r} is in another shard too")
            tensors[name] = value
    return (files[0] if len(files) == 1 else fileio.join(directory, SHARD_INDEX)), tensors


def weight_shapes(directory: str) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of a Hugging Face folder's weights, from the headers alone."""
    return {name: shape for file in weight_files(directory) for name, shape in safetensors_shapes(file).items()}


def label_keys(architecture: str, num_labels: int, label_names: list[str] | None) -> dict[str, Any]:
    """The config.json keys that say what a classifier of `num_labels` outputs answers (0: none):
    id2label/label2id (default names LABEL_<i>) and, for one output that is no multiple-choice
    score, problem_type "regression", which Hugging Face must be told (else its pipeline reads
    the value through a sigmoid)."""
    keys: dict[str, Any] = {}
    if num_labels == 1 and not label_names and not architecture.endswith("ForMultipleChoice"):
        keys["problem_type"] = "regression"
    if num_labels:
        names = list(label_names) if label_names else [f"LABEL_{i}" for i in range(num_labels)]
        if len(names) != num_labels:
            raise ValueError(f"{len(names)} label names for a classifier of {num_labels} outputs")
        keys["id2label"] = {str(i): name for i, name in enumerate(names)}
        keys["label2id"] = {name: i for i, name in enumerate(names)}
    return keys


def write_huggingface_files(out_dir: str, tensors: dict[str, np.ndarray], hf_config: dict[str, Any],
                            num_labels: int, label_names: list[str] | None) -> None:
    """Writes model.safetensors and config.json (`hf_config`, its "architectures" set), with
    id2label/label2id for a classifier of `num_labels` outputs (0: none; default names LABEL_<i>)."""
    from safetensors.numpy import save

    hf_config.update(label_keys(hf_config["architectures"][0], num_labels, label_names))
    fileio.makedirs(out_dir)
    with fileio.open_file(fileio.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(save(tensors, metadata={"format": "pt"}))
    with fileio.open_file(fileio.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2, sort_keys=True)



_NO_TOKEN_TYPES = {"model_input_names": ["input_ids", "attention_mask"]}


def write_tokenizer_config(out_dir: str, do_lower_case: bool | None, model_max_length: int,
                           token_types: bool = True) -> None:
    """Writes tokenizer_config.json for a vocab.txt beside it: transformers' BertTokenizer
    lower-cases unless told otherwise, so a cased model needs it (bertjax reads it back; None:
    unknown, not written). token_types: as `write_fast_tokenizer_config`."""
    fileio.write_json(fileio.join(out_dir, "tokenizer_config.json"), {
        "tokenizer_class": "BertTokenizer", "model_max_length": model_max_length,
        **({} if do_lower_case is None else {"do_lower_case": do_lower_case}),
        **({} if token_types else _NO_TOKEN_TYPES)})


def write_fast_tokenizer_config(out_dir: str, tokenizer, model_max_length: int, token_types: bool = True) -> None:
    """Writes tokenizer_config.json for a tokenizer.json beside it that is not BERT's WordPiece
    (a BPE, a Unigram, a WordPiece normalising otherwise): without it transformers builds a
    BERT model's tokenizer as BertTokenizerFast, which resets the normaliser to BERT's, and
    knows no mask or separator token. `tokenizer`: the file as a bertjax Tokenizer.
    token_types: False for a model without token type embeddings (ModernBERT), whose
    tokenizer must not give token_type_ids (ModernBertModel's forward takes none)."""
    names = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
    ids = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id)
    fileio.write_json(fileio.join(out_dir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
        **({} if token_types else _NO_TOKEN_TYPES),
        **{name: tokenizer.id_to_token(token_id) for name, token_id in zip(names, ids)}})

"""Reading a Hugging Face model.safetensors into numpy, whatever its floating-point type.

`safetensors.numpy` cannot load bfloat16 tensors (numpy has no such type), the type many
checkpoints are published in, and it raises its own errors for a cut-off file. The format
is small and documented (an 8-byte little-endian header length, a JSON header of
{name: {"dtype", "shape", "data_offsets"}}, then the bytes), so it is read here directly:
bfloat16 through ml_dtypes (which JAX ships), every floating-point tensor returned as float32
(bertjax's params on the host), and a file that is not whole is a ValueError naming it.
"""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np

from bertjax.runtime import fileio

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_FLOATS = ("F64", "F32", "F16", "BF16")  # read as float32, bertjax's host params


def read_safetensors(file: str) -> dict[str, np.ndarray]:
    """`file` (local or gs://) -> {name: array}; floating-point tensors as float32."""
    data = fileio.read_bytes(file)
    if len(data) < 8:
        raise ValueError(f"{file}: not a safetensors file ({len(data)} bytes)")
    (header_size,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + header_size])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{file}: not a safetensors file, or cut off (its header does not read as JSON)") from None
    body = memoryview(data)[8 + header_size:]
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
        array = np.frombuffer(body[start:end], _DTYPES[entry["dtype"]]).reshape(entry["shape"])
        tensors[name] = array.astype(np.float32) if entry["dtype"] in _FLOATS else array.copy()
    return tensors

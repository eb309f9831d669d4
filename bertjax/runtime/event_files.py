"""TensorBoard event files of scalars, written and trimmed without TensorFlow.

An event file is a sequence of TFRecords (bertjax/runtime/tfrecord.py), each an `Event`
protocol buffer; TensorBoard reads every file in a folder whose name holds
"tfevents". The few messages a scalar needs are encoded here by hand, field numbers from
TensorFlow's event.proto, summary.proto and tensor.proto, the same records
`tf.summary.write` makes (tests/test_metrics.py compares them): a fine-tuning run reads its
data without TensorFlow, so it need not load TensorFlow only to log.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from typing import Iterator

import numpy as np

from bertjax.runtime import fileio, tfrecord

FILE_PATTERN = "events.out.tfevents.*"
_FILE_VERSION = b"brain.Event:2"
WRITER = "bertjax.runtime.event_files"  # the file's source_metadata (TensorFlow's names its events_writer)
_DT_FLOAT = 1  # TensorFlow's DataType enum
_WRITERS = itertools.count()  # two writers opened in one second by one process get two files, in order


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _message_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): a string, bytes, an embedded message or a packed list."""
    return _key(number, 2) + _varint(len(payload)) + payload


# SummaryMetadata{plugin_data: PluginData{plugin_name: "scalars"}}: what TensorBoard's scalar tab reads.
_SCALARS_METADATA = _message_field(1, _message_field(1, b"scalars"))


def scalar_event(tag: str, value: float, step: int, wall_time: float) -> bytes:
    """Event{wall_time, step, summary{value{tag, tensor: a float32 scalar, metadata: scalars}}}."""
    # TensorProto{dtype, tensor_shape: [] (a scalar), tensor_content: its little-endian bytes}; a
    # value beyond float32's range becomes an infinity, as in tf.constant (a diverged run's MSE).
    with np.errstate(over="ignore"):
        content = np.asarray(value, "<f4").tobytes()
    tensor = _key(1, 0) + _varint(_DT_FLOAT) + _message_field(2, b"") + _message_field(4, content)
    summary_value = _message_field(1, tag.encode("utf-8")) + _message_field(8, tensor) + _message_field(
        9, _SCALARS_METADATA)
    step_field = _key(2, 0) + _varint(step) if step else b""  # proto3 leaves a zero out
    return _key(1, 1) + struct.pack("<d", wall_time) + step_field + _message_field(5, _message_field(1, summary_value))


def _version_event(wall_time: float) -> bytes:
    """The event that opens every file: Event{wall_time, file_version, source_metadata{writer}}."""
    return (_key(1, 1) + struct.pack("<d", wall_time) + _message_field(3, _FILE_VERSION)
            + _message_field(10, _message_field(1, WRITER.encode())))


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        shift += 7
        if byte < 0x80:
            return value, position


def _fields(message: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of a protocol buffer: varints as ints, the rest as bytes."""
    position = 0
    while position < len(message):
        key, position = _read_varint(message, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _read_varint(message, position)
        elif wire_type == 2:
            length, position = _read_varint(message, position)
            value, position = message[position:position + length], position + length
        elif wire_type in (1, 5):
            width = 8 if wire_type == 1 else 4
            value, position = message[position:position + width], position + width
        else:
            raise ValueError(f"an event record with a field of wire type {wire_type}, which events do not use")
        yield number, value


def step_and_values(event: bytes) -> tuple[int, int]:
    """(the event's step, how many summary values it holds)."""
    step, values = 0, 0
    for number, value in _fields(event):
        if number == 2:
            step = value
        elif number == 5:
            values += sum(1 for field, _ in _fields(value) if field == 1)
    return step, values


def _tags(event: bytes) -> list[str]:
    """The tags of the event's summary values."""
    return [next((tag.decode("utf-8") for number, tag in _fields(value) if number == 1), "")
            for number, summary in _fields(event) if number == 5
            for field, value in _fields(summary) if field == 1]


def trim(directory: str, step: int, redone: str = "") -> None:
    """Rewrites the event files in `directory` (local or remote) without their summaries after
    `step` (all of them at step 0), nor (`redone`, a prefix) those at `step` whose tags the run
    logs again there, and without a record a killed run left cut short: a resumed run logs those
    steps again, and a reader would see both (TensorBoard's purge on a restart needs a
    SessionLog event, which TF2's summary API does not write)."""
    for path in fileio.glob(fileio.join(fileio.escape(directory), FILE_PATTERN)):
        records, complete = tfrecord.read_records(fileio.read_bytes(path))
        kept = []
        for record in records:
            event_step, values = step_and_values(record)
            redone_here = redone and event_step == step and any(tag.startswith(redone) for tag in _tags(record))
            if not values or 0 < step and event_step <= step and not redone_here:
                kept.append(record)
        if not (complete and len(kept) == len(records)):
            _replace(path, b"".join(map(tfrecord.frame, kept)))


def _replace(path: str, data: bytes) -> None:
    """Writes `data` as the file `path`, whole: to a temporary name in its folder that
    TensorBoard does not read (no "tfevents" in it), then renamed over `path`."""
    temporary = fileio.join(fileio.parent(path), "writing.tmp")
    fileio.remove(temporary)  # (some file systems append to a file opened for writing)
    with fileio.open_file(temporary, "wb") as f:
        f.write(data)
    fileio.rename(temporary, path)


class EventFileWriter:
    """Scalars to a new event file in `directory`. A local file gets each `add_scalars` at
    once; a remote one (gs://, which cannot be appended to) is written whole at `flush`, when
    anything was added since the last. Files of one process and second sort in opening order."""

    def __init__(self, directory: str):
        fileio.makedirs(directory)
        name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}."
                f"{next(_WRITERS):05d}.v2")
        self.path = fileio.join(directory, name)
        self._records = bytearray()  # remote: the whole file
        self._unwritten = False  # remote: records added since the last flush
        self._file = None if fileio.is_remote(self.path) else open(self.path, "ab")
        self._closed = False
        self._append(_version_event(time.time()))
        self.flush()

    def add_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """One event per scalar, as tf.summary.write logs them."""
        now = time.time()
        for tag, value in scalars.items():
            self._append(scalar_event(tag, value, step, now))
        if self._file is not None:
            self._file.flush()

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
        elif self._unwritten:
            _replace(self.path, bytes(self._records))
            self._unwritten = False

    def close(self) -> None:
        """Flushes and closes; a second close does nothing."""
        if self._closed:
            return
        self.flush()
        if self._file is not None:
            self._file.close()
        self._closed = True

    def _append(self, event: bytes) -> None:
        if self._file is not None:
            self._file.write(tfrecord.frame(event))
        else:
            self._records += tfrecord.frame(event)
            self._unwritten = True

"""The TFRecord file format without TensorFlow: per record, its uint64 length, the masked
CRC-32C of the length, the bytes, their masked CRC-32C (what tf.data.TFRecordDataset reads)."""

from __future__ import annotations

import struct


def _masked_crc(data: bytes) -> int:
    import google_crc32c  # (here: what imports this module, the metrics, runs on images without it)

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    """One record as the file holds it."""
    length = struct.pack("<Q", len(record))
    return b"".join([length, struct.pack("<I", _masked_crc(length)), record, struct.pack("<I", _masked_crc(record))])


def read_records(data: bytes) -> tuple[list[bytes], bool]:
    """(the records of a file's bytes, whether the file ends with a whole one): a killed
    writer can leave its last record cut short, which is not returned, nor is anything after
    a record whose checksum fails (as TensorFlow's reader stops there)."""
    records, position = [], 0
    while position + 12 <= len(data):
        length_bytes = data[position:position + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        end = position + 12 + length + 4
        if struct.unpack_from("<I", data, position + 8)[0] != _masked_crc(length_bytes) or end > len(data):
            break
        record = data[position + 12:end - 4]
        if struct.unpack_from("<I", data, end - 4)[0] != _masked_crc(record):
            break
        records.append(record)
        position = end
    return records, position == len(data)

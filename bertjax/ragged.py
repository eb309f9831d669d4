"""Vectorised helpers for ragged data held as numpy (flat values + per-row lengths)."""

from __future__ import annotations

import numpy as np


def gather_ranges(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """values[starts[i] : starts[i] + lengths[i]] for every i, concatenated, in one gather.

    values: [V]; starts, lengths: <int>[R] (lengths >= 0) -> [sum(lengths)].
    """
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    shift = np.repeat(starts - row_starts(lengths), lengths)
    return values[np.arange(len(shift), dtype=np.int64) + shift]


def row_starts(lengths: np.ndarray) -> np.ndarray:
    """<int>[R] row lengths -> <int64>[R] where each row starts in the flat values."""
    lengths = np.asarray(lengths, np.int64)
    return np.cumsum(lengths) - lengths

"""Synthetic shards and a stand-in tokenizer for pipeline tests.

Every token of sentence s of document d is `sentence_token(d, s)`, so a sequence's ids
tell which document and sentence each of its tokens came from.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from bertjax.data import shards

FIRST_ID = 1000
MAX_SENTENCES = 64


def sentence_token(doc: int, sentence: int) -> int:
    return FIRST_ID + doc * MAX_SENTENCES + sentence


def decode_token(token) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (>= FIRST_ID) -> (document, sentence) arrays."""
    token = np.asarray(token) - FIRST_ID
    return token // MAX_SENTENCES, token % MAX_SENTENCES


@dataclasses.dataclass
class FakeTokenizer:
    vocab_size: int
    pad_id: int = 0
    unk_id: int = 1
    cls_id: int = 2
    sep_id: int = 3
    mask_id: int = 4
    continuation: np.ndarray | None = None

    def continuation_mask(self) -> np.ndarray:
        if self.continuation is None:
            return np.zeros([self.vocab_size], bool)
        return self.continuation

    def id_to_token(self, i: int) -> str:
        return {0: "[PAD]", 1: "[UNK]", 2: "[CLS]", 3: "[SEP]", 4: "[MASK]"}.get(int(i), f"t{int(i)}")

    def decode(self, ids) -> str:
        return " ".join(self.id_to_token(i) for i in ids)


def write_shards(directory: str, num_docs: int, num_shards: int, *, seed: int = 0, min_sentences: int = 1,
                 max_sentences: int = 20, min_len: int = 3, max_len: int = 12, split: str = "train") -> list[str]:
    """Writes documents round-robin into shards; returns the shard paths."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, shards.shard_name(split, i, num_shards)) for i in range(num_shards)]
    writers = [shards.RecordWriter(p) for p in paths]
    for d in range(num_docs):
        n = int(rng.integers(min_sentences, max_sentences + 1))
        doc = [[sentence_token(d, s)] * int(rng.integers(min_len, max_len + 1)) for s in range(n)]
        writers[d % num_shards].write(shards.encode_document(doc))
    for w in writers:
        w.close()
    return paths


def tokenizer_for(num_docs: int) -> FakeTokenizer:
    return FakeTokenizer(vocab_size=FIRST_ID + num_docs * MAX_SENTENCES)

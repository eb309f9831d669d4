"""The feature-based approach on raw text: the encoder's hidden states of chosen layers, per
token or pooled (`Model.features`, `Model.iter_features`; files: feature_files.py)."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator, Sequence

import jax.numpy as jnp
import numpy as np

from bertjax.models import BertEncoder
from bertjax.tasks.family import at_position
from bertjax.tasks.raw_text import not_one_string, original_pair, text_pair

POOLINGS = ("none", "cls", "mean")
CHUNK_EXAMPLES = 4096  # examples tokenized and sorted together: bounds host memory on long inputs
# Per-token features of a chunk are gathered padded to max_seq_length ([N, K, H, S] float32):
# a chunk holds at most this many bytes of them (BERT-large, 4 layers at 512: 128 examples).
CHUNK_BYTES = 1 << 30


def read_text(item: Any) -> tuple[str, str | None]:
    """One input of `iter_features` -> (text_a, text_b or None): "a ||| b" split as the
    original extract_features.py splits a line (`raw_text.original_pair`), so that a text gives
    the features its line in a file gives (feature_files.py)."""
    return text_pair(item, split=original_pair)


def iter_features(model, texts: Iterable[str | tuple[str, str | None]], layers: Sequence[int] = (-1,),
                  pooling: str = "none", on_truncated: Callable[[np.ndarray], None] | None = None,
                  progress: Callable[[int], None] | None = None) -> Iterator[dict[str, Any]]:
    """Contextual features, one dict per input, in input order, computed in chunks of
    CHUNK_EXAMPLES (bounded memory on long inputs).

    texts: strings ("a ||| b" is a pair, `read_text`) or (a, b) tuples (b None: single text).
    layers: indices into the hidden-state stack [embeddings, layer 1, ..., layer L]
      (-1 = the last layer, 0 = the embeddings' output), as Hugging Face's hidden_states.
    pooling: "none" -> {"tokens": [str] (with [CLS]/[SEP]), "token_ids": <int32>[T],
      "values": <float32>[len(layers), T, H]};
      "cls" -> {"values": [len(layers), H]} (the [CLS] token's vector);
      "mean" -> {"values": [len(layers), H]} (the mean over the input's tokens, [CLS] and
      [SEP] included, padding excluded: sentence-transformers' mean pooling).
    Inputs longer than max_seq_length are truncated (as fine-tuning does) and their dicts say
    "truncated": True; on_truncated gets their 0-based positions in `texts` (<int64>[k],
    k >= 1), a chunk at a time, before that chunk's features are computed.
    """
    indices = model.layer_indices(layers)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    bert = model.bert

    def apply(params, batch):
        _, _, hidden = BertEncoder(bert).apply({"params": params["bert"]}, batch["input_ids"],
                                               batch["segment_ids"], batch["input_mask"], True,
                                               output_hidden_states=True)
        chosen = hidden[jnp.asarray(indices)].astype(jnp.float32)  # [K, B, S, H]
        if pooling == "cls":
            return {"pooled": jnp.swapaxes(chosen[:, :, 0], 0, 1)}
        if pooling == "mean":
            mask = batch["input_mask"].astype(jnp.float32)[None, :, :, None]
            mean = (chosen * mask).sum(2) / jnp.maximum(mask.sum(2), 1.0)
            return {"pooled": jnp.swapaxes(mean, 0, 1)}
        return {"hidden": jnp.moveaxis(chosen, 0, 1).swapaxes(-1, -2)}  # [B, K, H, S]: sequence axis last

    chunk_size = CHUNK_EXAMPLES
    if pooling == "none":
        example_bytes = len(indices) * bert.hidden_size * model.max_seq_length * 4
        chunk_size = min(CHUNK_EXAMPLES, max(model.batch_size, CHUNK_BYTES // example_bytes))
    remaining = iter(not_one_string(texts))  # (refused here, at the call, as bad layers and pooling are)

    def features() -> Iterator[dict[str, Any]]:
        done = 0
        for chunk in iter(lambda: list(itertools.islice(remaining, chunk_size)), []):
            pairs = [at_position(done + i, read_text, text) for i, text in enumerate(chunk, start=1)]
            split, truncated = model.encode_texts(pairs)
            if truncated.any() and on_truncated is not None:
                on_truncated(done + np.flatnonzero(truncated))
            outputs = model.run(("features", indices, pooling), apply, split,
                                progress=None if progress is None else lambda k, done=done: progress(done + k),
                                sequence_outputs=("hidden",))
            for i in range(len(split)):
                length = int(split.lengths[i])
                cut = {"truncated": True} if truncated[i] else {}
                if pooling == "none":
                    ids = split.features["input_ids"][i, :length]
                    values = outputs["hidden"][i, :, :, :length].swapaxes(-1, -2)
                    yield {"tokens": [model.tokenizer.id_to_token(int(t)) for t in ids], "token_ids": ids,
                           "values": np.ascontiguousarray(values), **cut}
                else:
                    yield {"values": outputs["pooled"][i], **cut}
            done += len(split)

    return features()

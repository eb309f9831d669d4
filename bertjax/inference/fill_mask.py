"""Fill-mask: a pre-trained model's masked-LM head on raw text with [MASK]s (`Model.fill_mask`).

Each literal "[MASK]" in a text is the mask token; a text whose masks all fall past
max_seq_length tokens is refused by name."""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import numpy as np

from bertjax.models import BertEncoder
from bertjax.models.config import BertConfig
from bertjax.models.heads import MaskedLMHead, gather_positions
from bertjax.models.variable_table import is_modern
from bertjax.tasks.common import Split
from bertjax.tasks.family import at_position
from bertjax.tasks.raw_text import mask_case_hint, not_one_string, text_pair


_MASK = "[MASK]"


class _MaskedLM(nn.Module):
    """The encoder and its masked-LM head: <int>[B, S] x3, positions <int>[B, P] -> <float32>[B, P, vocab] logits."""

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids, attention_mask, positions):
        encoder = BertEncoder(self.config, name="bert")
        sequence, _ = encoder(input_ids, token_type_ids, attention_mask, True)
        head = MaskedLMHead(self.config, float32_logits=True, name="mlm")  # reported probabilities
        return head(gather_positions(sequence, positions), encoder.attend)


def fill_mask(model, texts: Sequence[str], top_k: int = 5) -> list[list[list[dict[str, Any]] | None]]:
    """For each text (or "a ||| b" pair) with one or more [MASK], one entry per [MASK] in
    order: the top_k tokens there, [{"token", "text", "token_id", "probability"}] best first
    ("token" the vocabulary's entry, "text" as a reader writes it: `Tokenizer.token_text`), or None
    for a mask that truncation to max_seq_length cut off (`fill_mask_rows` also says which
    texts were cut). The masked-LM head must be in the checkpoint (pre-training runs, Google's
    releases, Hugging Face BertForPreTraining/BertForMaskedLM); ValueError naming the input
    without a [MASK] within the limit."""
    return [row["masks"] for row in fill_mask_rows(model, texts, top_k)]


def fill_mask_rows(model, texts: Sequence[str], top_k: int = 5) -> list[dict[str, Any]]:
    """`fill_mask`'s answers as one dict a text: {"masks": the text's entries} and
    "truncated": True when the text was longer than max_seq_length (the model saw its first
    tokens only, so context after a mask may be missing even when every mask is answered)."""
    if "mlm" not in model.heads:
        hugging_face = "ModernBertForMaskedLM" if is_modern(model.bert) else "BertForMaskedLM/BertForPreTraining"
        raise ValueError(f"{model.source.path} has no masked-LM head (it has {list(model.heads) or 'only the encoder'})"
                         f"; fill-mask needs a pre-training checkpoint or a Hugging Face {hugging_face}")
    known = model.tokenizer.vocab_size  # (a table padded past the tokenizer: rows no token reads)
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or not 1 <= top_k <= known:
        raise ValueError(f"top_k must be an int in [1, {known}], got {top_k!r}")
    texts = list(not_one_string(texts))
    split, counts, pairs, truncated = _masked(model, texts)
    ids = split.features["input_ids"]
    for i in np.flatnonzero(counts == 0)[:1]:
        text = " ".join(filter(None, pairs[i]))
        if "[MASK]" in text:  # every one past the tokens kept
            raise ValueError(f"input {i + 1}: no [MASK] within the first {model.max_seq_length} tokens (the text is "
                             "truncated there; raise max_seq_length or shorten it)")
        raise ValueError(f"input {i + 1} has no [MASK] token: {str(texts[i])[:80]!r}"
                         f"{mask_case_hint(text, model.tokenizer)}")
    # Gathered positions a row: the most masks of any text, rounded up to a power of two, so that
    # calls (the command line's blocks of lines) with other counts reuse the compiled buckets.
    width = 1 << (int(counts.max(initial=1)) - 1).bit_length()
    positions = np.zeros((len(texts), width), np.int32)
    for i, row in enumerate(ids):
        found = np.flatnonzero(row == model.tokenizer.mask_id)
        positions[i, :len(found)] = found
    split.features["mask_positions"] = positions
    bert, k = model.bert, top_k

    def apply(params, batch):
        logits = _MaskedLM(bert).apply({"params": {"bert": params["bert"], "mlm": params["mlm"]}},
                                       batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                                       batch["mask_positions"])[..., :known]
        probabilities, tokens = jax.lax.top_k(jax.nn.softmax(logits, -1), k)
        return {"probabilities": probabilities, "tokens": tokens}

    outputs = model.run(("fill_mask", k, width), apply, split)
    results = []
    for i, (text_a, text_b) in enumerate(pairs):
        answers = [[{"token": model.tokenizer.id_to_token(int(token)), "text": model.tokenizer.token_text(int(token)),
                     "token_id": int(token), "probability": float(p)}
                    for token, p in zip(outputs["tokens"][i, m], outputs["probabilities"][i, m])]
                   for m in range(int(counts[i]))]
        # Truncation cuts each side's end: its first masks are kept, the rest are None.
        kept_a = int(((ids[i] == model.tokenizer.mask_id) & (split.features["segment_ids"][i] == 0)).sum())
        in_a, in_b = text_a.count(_MASK), (text_b or "").count(_MASK)
        masks = (answers[:kept_a] + [None] * (in_a - kept_a)
                 + answers[kept_a:] + [None] * (in_b - (len(answers) - kept_a)))
        results.append({"masks": masks, **({"truncated": True} if truncated[i] else {})})
    return results


def mask_counts(model, texts: Sequence[str]) -> np.ndarray:
    """<int>[N]: the [MASK] tokens of each text left after truncation to max_seq_length."""
    return _masked(model, list(not_one_string(texts)))[1]


def _masked(model, texts: list) -> tuple[Split, np.ndarray, list[tuple[str, str | None]], np.ndarray]:
    """(texts encoded with each literal [MASK] the mask token, <int>[N] masks left after
    truncation to max_seq_length in each, the texts as (a, b) pairs, <bool>[N] whether each
    was truncated)."""
    pairs = [at_position(i, text_pair, text) for i, text in enumerate(texts, start=1)]
    split, truncated = model.encode_texts(pairs, keep_masks=True)
    return split, (split.features["input_ids"] == model.tokenizer.mask_id).sum(1), pairs, truncated

"""SQuAD's answers from a model's start and end logits, as run_squad.py: the n-best spans of
each question over all its windows, the null answer of v2.0, and the official prediction files."""

from __future__ import annotations

import unicodedata

import numpy as np

from bertjax.runtime import fileio
from bertjax.tasks.common import Split

N_BEST_SIZE, MAX_ANSWER_LENGTH, NULL_SCORE_DIFF_THRESHOLD = 20, 30, 0.0
NO_SPAN_NULL_ODDS = 1e9  # v2.0 null_odds of a question with no valid non-null span at all


def _is_edge(character: str) -> bool:
    """Whitespace, or an invisible format character (zero-width space, soft hyphen, BOM)."""
    return character.isspace() or unicodedata.category(character) == "Cf"


def postprocess(split: Split, start_logits: np.ndarray, end_logits: np.ndarray, n_best_size: int = N_BEST_SIZE,
                max_answer_length: int = MAX_ANSWER_LENGTH,
                null_score_diff_threshold: float = NULL_SCORE_DIFF_THRESHOLD):
    """Model outputs <float>[N, S] (the split's rows) -> (predictions, nbest, null_odds).

    As run_squad.py's write_predictions: in each window the n_best_size highest start and
    end logits (over the whole sequence, padding excluded) pair into candidate spans that
    lie in the context, start <= end, at most max_answer_length tokens, the start token
    having its max context in that window; a question's candidates from all its windows
    are ranked by start + end logit and deduplicated by text. v2.0 adds the null answer
    scored by the smallest start[0] + end[0] over the question's windows, and predicts ""
    when null - best non-null score > null_score_diff_threshold.

    predictions: id -> answer text ("" = no answer). nbest: id -> [{"text", "probability",
    "start_logit", "end_logit", "start", "end"}] (probabilities: softmax over the n-best
    scores; start/end: the answer's character offsets in the context, -1 for no answer).
    null_odds: id -> null - best non-null score (v2.0; NO_SPAN_NULL_ODDS when no valid span),
    None for v1.1. A question with no valid span in v1.1 predicts "".
    """
    windows = split.examples  # squad.SquadWindows
    examples, v2 = windows.examples, windows.examples.version == "v2.0"
    n, width = split.features["input_ids"].shape
    for name, logits in (("start_logits", start_logits), ("end_logits", end_logits)):
        if np.shape(logits) != (n, width):
            raise ValueError(f"postprocess: {name} has shape {np.shape(logits)}, the split {split.name!r} "
                             f"needs ({n}, {width})")
    padding = split.features["input_mask"] == 0
    start_logits = np.where(padding, -np.inf, np.asarray(start_logits, np.float64))
    end_logits = np.where(padding, -np.inf, np.asarray(end_logits, np.float64))
    k = min(n_best_size, width)
    top_start = np.argsort(-start_logits, axis=1, kind="stable")[:, :k]  # [N, k]
    top_end = np.argsort(-end_logits, axis=1, kind="stable")[:, :k]
    starts, ends = top_start[:, :, None], top_end[:, None, :]  # pairs [N, k, k]
    in_context = lambda p: ((p >= windows.doc_position[:, None, None])
                            & (p < (windows.doc_position + windows.doc_length)[:, None, None]))
    valid = (in_context(starts) & in_context(ends) & (ends >= starts) & (ends - starts < max_answer_length)
             & np.take_along_axis(windows.max_context, top_start, axis=1)[:, :, None])
    scores = (np.take_along_axis(start_logits, top_start, axis=1)[:, :, None]
              + np.take_along_axis(end_logits, top_end, axis=1)[:, None, :])
    spans = windows.token_offsets()
    char_start = np.take_along_axis(spans[..., 0], top_start, axis=1)  # [N, k]
    char_end = np.take_along_axis(spans[..., 1], top_end, axis=1)
    null_scores = start_logits[:, 0] + end_logits[:, 0]

    predictions, nbest, null_odds = {}, {}, ({} if v2 else None)
    bounds = np.flatnonzero(np.diff(windows.example_index)) + 1
    for group in np.split(np.arange(n), bounds) if n else []:
        q = int(windows.example_index[group[0]])
        context = examples.contexts[examples.context_index[q]]
        f, i, j = np.nonzero(valid[group])
        order = np.argsort(-scores[group][f, i, j], kind="stable")
        entries, seen = [], set()
        null_feature = group[np.argmin(null_scores[group])]
        null_entry = {"text": "", "start_logit": float(start_logits[null_feature, 0]),
                      "end_logit": float(end_logits[null_feature, 0]), "start": -1, "end": -1}
        null_score = null_entry["start_logit"] + null_entry["end_logit"]
        for c in order:
            if len(entries) >= n_best_size:
                break
            row, a, b = group[f[c]], i[c], j[c]
            score = scores[row, a, b]
            if v2 and null_score > score and "" not in seen:  # the null candidate ranks here
                entries.append(null_entry), seen.add("")
                if len(entries) >= n_best_size:
                    break
            start, end = int(char_start[row, a]), int(char_end[row, b])
            # Whitespace and invisible characters at the edges are no part of an answer: a
            # byte-level BPE or SentencePiece piece that is only a space ("Ġ", "▁") spans up to the
            # word after it, and a zero-width space is pieces of its own there (SQuAD's scoring
            # keeps it: "word\u200b" is not "word").
            text = context[start:end]
            left = next((k for k, c in enumerate(text) if not _is_edge(c)), len(text))
            right = next((k for k in range(len(text), left, -1) if not _is_edge(text[k - 1])), left)
            start, text = start + left, text[left:right]
            if text and text not in seen:
                seen.add(text)
                entries.append({"text": text, "start_logit": float(start_logits[row, top_start[row, a]]),
                                "end_logit": float(end_logits[row, top_end[row, b]]),
                                "start": start, "end": start + len(text)})
        if v2 and "" not in seen:
            entries.append(null_entry)
        if not entries:
            entries.append({"text": "", "start_logit": 0.0, "end_logit": 0.0, "start": -1, "end": -1})
        totals = np.array([e["start_logit"] + e["end_logit"] for e in entries])
        probabilities = np.exp(totals - totals.max())
        probabilities /= probabilities.sum()
        nbest[examples.ids[q]] = [{"text": e["text"], "probability": _number(p),
                                   "start_logit": _number(e["start_logit"]), "end_logit": _number(e["end_logit"]),
                                   "start": e["start"], "end": e["end"]}
                                  for e, p in zip(entries, probabilities)]
        best_span = next((e for e in entries if e["text"]), None)
        if not v2:
            predictions[examples.ids[q]] = entries[0]["text"]
            continue
        diff = (NO_SPAN_NULL_ODDS if best_span is None else
                null_score - best_span["start_logit"] - best_span["end_logit"])
        if not np.isfinite(diff):  # a diverged model's NaN scores: no answer, and odds JSON can hold
            diff = NO_SPAN_NULL_ODDS
        null_odds[examples.ids[q]] = float(diff)
        no_answer = best_span is None or diff > null_score_diff_threshold  # (a threshold past the no-span odds too)
        predictions[examples.ids[q]] = "" if no_answer else best_span["text"]
    return predictions, nbest, null_odds


def _number(value: float) -> float | None:
    """`value`, or None (JSON's null) for a diverged model's NaN or infinity, which JSON has no
    form for: Python writes a bare NaN that strict readers refuse."""
    return float(value) if np.isfinite(value) else None


def write_predictions(directory: str, predictions: dict, nbest: dict, null_odds: dict | None = None) -> dict[str, str]:
    """Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json under
    `directory` (local or gs://), each atomically; returns {name: path}."""
    fileio.makedirs(directory)
    files = {"predictions.json": predictions, "nbest_predictions.json": nbest}
    if null_odds is not None:
        files["null_odds.json"] = null_odds
    paths = {}
    for name, value in files.items():
        paths[name] = fileio.join(directory, name)
        fileio.write_json(paths[name], value)
    return paths

"""SQuAD exact match and F1, with the numbers of the official evaluate-v1.1.py / evaluate-v2.0.py.

Both versions normalise an answer the same way: lower-case, drop ASCII punctuation, replace
the words a/an/the by spaces, collapse whitespace. EM = equal normalised strings; F1 = the
overlap of the normalised token bags; a question scores the max over its gold answers.

v1.1 -> {"exact_match", "f1"}, 0-100: every question counts and a missing prediction
  scores 0 (logged as a warning with the count); F1 is 0 when no token is shared, even
  when both sides are empty.
v2.0 -> {"exact", "f1", "total", "HasAns_*", "NoAns_*"}, and with no-answer probabilities
  also best_exact(_thresh), best_f1(_thresh). Gold answers that normalise to "" are
  dropped and a question left without any has the single gold ""; when either side has no
  token, F1 = EM = (both empty). A question *has an answer* when its `answers` list is
  non-empty. With probabilities, a question whose value exceeds `na_prob_thresh` is scored
  as predicted "" (1 if it has no answer, else 0).

Missing predictions in v2.0 (choice made): the official script skips them when scoring
but then looks every question up for HasAns_*/NoAns_* and crashes (KeyError), and its
best-threshold search starts from all no-answer questions while dividing by the predicted
ones. Here a question without a prediction is left out of every total alike (logged as a
warning with the count); when every question is predicted the numbers are the official's,
but for one: where "all null" scores best and some probability is <= 0 (bertjax's null odds
often are), best_*_thresh is below the lowest one, not the official 0.0, which would answer
those questions and score otherwise (`_best_threshold`).

    python -m bertjax.evaluation.squad DATA.json PRED.json [--na-prob-file F]
        [--na-prob-thresh T] [--version 1.1|2.0]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import re
import string
import sys

from bertjax.runtime import fileio

log = logging.getLogger(__name__)

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, articles -> spaces, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> int:
    """1 when the normalised strings are equal, else 0."""
    return int(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str, version: str = "2.0") -> float:
    """F1 of the normalised token bags (a repeated token counts as often as both sides have it).

    No shared token -> 0.0. In "2.0" an empty side first gives 1.0 if both are empty, else
    0.0; in "1.1" empty-vs-empty is 0.0 like any other answer with nothing in common.
    """
    prediction_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if _version(version) == "2.0" and (not prediction_tokens or not gold_tokens):
        return float(prediction_tokens == gold_tokens)
    shared = sum((collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(prediction_tokens), shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def evaluate(dataset: list, predictions: dict[str, str], version: str = "2.0",
             na_probs: dict[str, float] | None = None, na_prob_thresh: float = 1.0) -> dict:
    """Official scores of `predictions` (question id -> answer text) on `dataset`, the
    official file's `data` list. version: "1.1" | "2.0" (a leading "v" is accepted);
    na_probs (v2.0 only): question id -> probability of no answer, for every predicted question.
    """
    questions = _questions(dataset)
    if not questions:
        raise ValueError("the dataset has no questions")
    for qid, _ in questions:
        if qid in predictions and not isinstance(predictions[qid], str):
            found = predictions[qid]
            shown = repr(found) if len(repr(found)) <= 60 else repr(found)[:57] + "..."
            nbest = isinstance(found, list) and bool(found) and all(isinstance(entry, dict) and "text" in entry
                                                                    for entry in found)
            raise ValueError(f"question {qid!r}: the prediction is a {type(found).__name__} ({shown}), not an "
                             "answer's text" + ("; an n-best file? give the predictions file (question id -> "
                                                "answer text)" if nbest else ""))
    if _version(version) == "1.1":
        if na_probs is not None:
            raise ValueError("no-answer probabilities need version 2.0")
        return _evaluate_v1(questions, predictions)
    return _evaluate_v2(dict(questions), predictions, na_probs, na_prob_thresh)


def _evaluate_v1(questions: list[tuple[str, list[str]]], predictions: dict[str, str]) -> dict:
    exact = f1 = 0.0
    missing = 0
    for qid, golds in questions:
        if not golds:
            raise ValueError(f"question {qid!r} has no gold answer: SQuAD v1.1 needs one (use version 2.0)")
        if qid not in predictions:
            missing += 1
            continue
        exact += max(exact_match(predictions[qid], gold) for gold in golds)
        f1 += max(token_f1(predictions[qid], gold, "1.1") for gold in golds)
    if missing:
        log.warning("%d of %d questions have no prediction: they score 0", missing, len(questions))
    return {"exact_match": 100.0 * exact / len(questions), "f1": 100.0 * f1 / len(questions)}


def _evaluate_v2(questions: dict[str, list[str]], predictions: dict[str, str],
                 na_probs: dict[str, float] | None, na_prob_thresh: float) -> dict:
    # the scored questions: those with a prediction -> whether they have an answer
    has_answer = {qid: bool(golds) for qid, golds in questions.items() if qid in predictions}
    if len(has_answer) < len(questions):
        log.warning("%d of %d questions have no prediction: left out of the totals",
                    len(questions) - len(has_answer), len(questions))
    if not has_answer:
        raise ValueError("no question of the dataset has a prediction")
    unscored = [qid for qid in has_answer
                if na_probs is not None and not isinstance(na_probs.get(qid), (int, float))]
    if unscored:
        raise ValueError(f"{len(unscored)} predicted questions have no numeric no-answer probability, "
                         f"e.g. {unscored[0]!r}")

    exact_raw, f1_raw = {}, {}
    for qid in has_answer:
        golds = [gold for gold in questions[qid] if normalize_answer(gold)] or [""]
        exact_raw[qid] = max(exact_match(predictions[qid], gold) for gold in golds)
        f1_raw[qid] = max(token_f1(predictions[qid], gold, "2.0") for gold in golds)

    def thresholded(raw: dict[str, float]) -> dict[str, float]:
        probs = na_probs or {}
        return {qid: float(not has_answer[qid]) if probs.get(qid, 0.0) > na_prob_thresh else score
                for qid, score in raw.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    result = _totals(exact, f1, list(has_answer))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        subset = [qid for qid, answered in has_answer.items() if answered == wanted]
        if subset:
            result.update({f"{prefix}_{key}": value for key, value in _totals(exact, f1, subset).items()})
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = best_threshold(exact_raw, predictions, na_probs,
                                                                           has_answer)
        result["best_f1"], result["best_f1_thresh"] = best_threshold(f1_raw, predictions, na_probs, has_answer)
    return result


def _totals(exact: dict[str, float], f1: dict[str, float], qids: list[str]) -> dict:
    return {"exact": 100.0 * sum(exact[qid] for qid in qids) / len(qids),
            "f1": 100.0 * sum(f1[qid] for qid in qids) / len(qids), "total": len(qids)}


def best_threshold(scores: dict[str, float], predictions: dict[str, str], na_probs: dict[str, float],
                   has_answer: dict[str, bool]) -> tuple[float, float]:
    """(best score 0-100, its threshold) over the no-answer thresholds, as find_best_thresh.

    Start from "all null" (every no-answer question right: their count, threshold 0.0, or
    below the lowest value where some are <= 0, as bertjax's null odds are: 0.0 would answer
    those, and the threshold must give the best it is reported with); walk the scored
    questions by ascending probability (ties in `na_probs` order) and answer each in turn:
    + its raw score if it has an answer, - 1 if it has none but a non-empty prediction (the
    raw string, not normalised, as the official). Keep the best running score and the
    probability where it was first reached; best = 100 * best / len(scores).
    """
    score = best = sum(1 for qid in scores if not has_answer[qid])
    walked = sorted((qid for qid in na_probs if qid in scores), key=lambda qid: na_probs[qid])
    lowest = float(na_probs[walked[0]]) if walked else 1.0
    best_thresh = 0.0 if lowest > 0.0 else lowest - 1.0
    for qid in walked:
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best:
            best, best_thresh = score, float(na_probs[qid])
    return 100.0 * best / len(scores), best_thresh


def _questions(dataset: list) -> list[tuple[str, list[str]]]:
    """(question id, gold answer texts) of every question in file order; ValueError naming
    the position of an entry that is not the official layout."""
    questions, where = [], "data"
    try:
        for a, article in enumerate(dataset):
            where = f"data[{a}]"
            for p, paragraph in enumerate(article["paragraphs"]):
                where = f"data[{a}].paragraphs[{p}]"
                for q, qa in enumerate(paragraph["qas"]):
                    where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                    golds = [answer["text"] for answer in qa.get("answers", [])]  # none: no answer (v2.0)
                    if not all(isinstance(gold, str) for gold in golds):
                        raise TypeError("an answer text is not a string")
                    questions.append((str(qa["id"]), golds))
    except (KeyError, TypeError) as error:
        raise ValueError(f"{where}: not the SQuAD layout ({type(error).__name__}: {error})") from None
    return questions


def file_version(squad_file: dict) -> str:
    """"v1.1" or "v2.0" of an official-layout file (the JSON object with its "data" list), read
    the same way by training (bertjax.tasks.squad) and by this scorer: its "version" field where
    that says 1.x or 2.x, else "v2.0" when any question has "is_impossible", else "v1.1". A 1.x
    file with an unanswerable question is a ValueError naming it."""
    questions = file_questions(squad_file)
    stated = str(squad_file.get("version", "")).removeprefix("v")
    if stated.startswith("1"):
        impossible = next((qa for qa in questions if qa.get("is_impossible") is True), None)
        if impossible is not None:
            raise ValueError(f"question id {impossible.get('id')!r} is_impossible, but the file says version "
                             f"{squad_file['version']!r} (SQuAD 1.x has no unanswerable questions; say 2.0)")
        return "v1.1"
    if stated.startswith("2") or any("is_impossible" in qa for qa in questions):
        return "v2.0"
    return "v1.1"


def file_questions(squad_file: dict) -> list[dict]:
    """The question objects of an official-layout file, whatever else it holds."""
    return [qa for article in squad_file.get("data") or [] if isinstance(article, dict)
            for paragraph in article.get("paragraphs") or [] if isinstance(paragraph, dict)
            for qa in paragraph.get("qas") or [] if isinstance(qa, dict)]


def _version(version: str) -> str:
    if str(version).removeprefix("v") not in ("1.1", "2.0"):
        raise ValueError(f"SQuAD version {version!r}: expected 1.1 or 2.0")
    return str(version).removeprefix("v")


def _load_json(path: str):
    """The JSON in `path` (local or gs://: a fine-tuning run's predictions on a gs:// workdir)."""
    try:
        return fileio.read_json(path)
    except Exception as error:  # noqa: BLE001 (OSError, bad JSON, and gs://'s own errors, which are no OSError)
        raise ValueError(f"{path}: cannot read JSON ({error})") from None


def main(argv: list[str] | None = None) -> int:
    """The command line; prints the scores as JSON. Exit code 2 and one line on bad input."""
    parser = argparse.ArgumentParser(prog="python -m bertjax.evaluation.squad", description=__doc__.split("\n")[0])
    parser.add_argument("data_file", help="the official SQuAD JSON file (with its 'data' list)")
    parser.add_argument("pred_file", help="JSON object: question id -> predicted answer text")
    parser.add_argument("--na-prob-file", help="JSON object: question id -> probability of no answer")
    parser.add_argument("--na-prob-thresh", type=float, default=1.0,
                        help='score as "" when the no-answer probability exceeds this (default 1.0)')
    parser.add_argument("--version", choices=("1.1", "2.0"),
                        help="default: as training reads the file: its 'version' field where that says 1.x or 2.x, "
                             "else 2.0 when any question has 'is_impossible', else 1.1")
    args = parser.parse_args(argv)
    try:
        data = _load_json(args.data_file)
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise ValueError(f"{args.data_file}: no 'data' list, not a SQuAD file")
        predictions = _load_json(args.pred_file)
        if not isinstance(predictions, dict):
            raise ValueError(f"{args.pred_file}: not a JSON object of question id -> answer text")
        na_probs = _load_json(args.na_prob_file) if args.na_prob_file else None
        if na_probs is not None and not isinstance(na_probs, dict):
            raise ValueError(f"{args.na_prob_file}: not a JSON object of question id -> probability")
        try:
            version = args.version or file_version(data)
        except ValueError as error:
            raise ValueError(f"{args.data_file}: {error}") from None
        try:
            result = evaluate(data["data"], predictions, version, na_probs, args.na_prob_thresh)
        except ValueError as error:
            raise ValueError(f"{args.pred_file} on {args.data_file}: {error}") from None
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""SQuAD questions read into `SquadExamples`: the official JSON layout (`read_json`, local
or gs://) or TFDS `squad/v1.1`, `squad/v2.0` (`read_tfds`), each keeping the official
`data` list that `bertjax.evaluation.squad.evaluate` scores. Windowing them into features:
`bertjax.tasks.squad`."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from absl import logging

from bertjax.data.sources import DropCounter, prepared_tfds_builder, read_tfds_split
from bertjax.evaluation import squad as squad_metrics
from bertjax.runtime import fileio
from bertjax.tasks.raw_text import has_text


@dataclasses.dataclass
class SquadExamples:
    """The questions of one split. Q questions over P distinct contexts.

    source: the file or "tfds:<name>[<split>]" (for messages); strict: bad training answers
    raise (JSON) rather than being skipped (TFDS); version: "v1.1" | "v2.0"; data: the
    official layout for evaluation; answers[q]: [(text, answer_start), ...].
    """

    source: str
    version: str
    data: list
    ids: list[str]
    questions: list[str]
    contexts: list[str]
    context_index: np.ndarray  # <int64>[Q] question -> its context
    answers: list[list[tuple[str, int]]]
    is_impossible: np.ndarray  # <bool>[Q]
    strict: bool = True

    def __len__(self) -> int:
        return len(self.ids)


def warn_if_versions_differ(sources: list[tuple[str, SquadExamples]]) -> None:
    """A warning when training and evaluation files are of different SQuAD versions: a model
    trained on v1.1 never learns to abstain, one trained on v2.0 is scored without abstaining."""
    (_, train), *others = sources
    for name, examples in others:
        if examples.version != train.version:
            logging.warning("%s is SQuAD %s but the training file %s is %s: %s", examples.source, examples.version,
                            train.source, train.version, "the model never learns to answer 'no answer'"
                            if train.version == "v1.1" else "v1.1 scoring ignores the model's 'no answer'")


def read_json(path: str, version: str | None = None) -> SquadExamples:
    """An official-layout SQuAD JSON file (local or gs://) -> SquadExamples.

    version None: `squad_metrics.file_version` (the "version" field where it says 1.x or 2.x,
    else "v2.0" when any question has "is_impossible", else "v1.1"), as the scorer's command
    line reads it. A question without "id" or "question", a repeated id, a malformed answer
    or an "is_impossible" that is not true or false raises ValueError naming the file and the
    position or id. "answers" may be missing (prediction-only files; in v2.0, no answer: a v2.0
    question without answers or "is_impossible", in a file with either elsewhere, is
    unanswerable, as the scorer reads it).
    """
    jsonl_hint = ("; one JSON object a line is JSON Lines, not the SQuAD layout (fine-tuning reads only the "
                  "SQuAD layout; predict reads JSON Lines with --input_format=jsonl)")
    try:
        raw = fileio.read_json(path)
    except json.JSONDecodeError as e:  # "Extra data" at line 2: JSON Lines named .json
        hint = jsonl_hint if e.msg.endswith("(Extra data)") else ""
        raise ValueError(f"{e.msg} at line {e.lineno} column {e.colno}{hint}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        hint = jsonl_hint if isinstance(raw, dict) and "question" in raw else ""
        raise ValueError(f"{path}: expected a JSON object with a 'data' list (the SQuAD layout){hint}")
    if version is None:
        try:
            version = squad_metrics.file_version(raw)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
    elif f"v{str(version).removeprefix('v')}" not in ("v1.1", "v2.0"):
        raise ValueError(f"read_json: version must be 'v1.1' or 'v2.0' (or None: the file's), got {version!r}")
    else:  # "2.0" as the scorer takes it: "v2.0"
        version = f"v{str(version).removeprefix('v')}"
    # A v2.0 question with no answer and no "is_impossible" is unanswerable, as the official
    # scorer reads it (its gold answer is ""), in a file that is labelled at all: one with no
    # answer and no "is_impossible" anywhere is unlabelled (a test file), not all unanswerable.
    unanswered_means_impossible = version.removeprefix("v") == "2.0" and any(
        qa.get("answers") or "is_impossible" in qa for qa in squad_metrics.file_questions(raw))
    builder = ExampleBuilder(path, strict=True)
    empty_questions = []
    for a, article in enumerate(raw["data"]):
        for p, paragraph in enumerate(_objects(article, "paragraphs", f"{path}: data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph.get("context"), str):
                raise ValueError(f"{path}: {where} has no 'context' string")
            _check_unicode(paragraph["context"], f"{path}: {where}.context")
            for k, qa in enumerate(_objects(paragraph, "qas", f"{path}: {where}")):
                qid = qa.get("id")
                if not isinstance(qid, (str, int)) or isinstance(qid, bool) or qid == "":
                    raise ValueError(f"{path}: {where}.qas[{k}] has no 'id'")
                qid = str(qid)
                if not isinstance(qa.get("question"), str):
                    raise ValueError(f"{path}: question id {qid!r} has no 'question' string")
                answers = qa.get("answers", [])
                # Strict types (not str()/int()): the scorer reads the same file and refuses them,
                # which would surface only at the first evaluation, after training.
                if not isinstance(answers, list) or not all(
                        isinstance(x, dict) and isinstance(x.get("text"), str)
                        and isinstance(x.get("answer_start"), int) and not isinstance(x["answer_start"], bool)
                        for x in answers):
                    raise ValueError(f"{path}: question id {qid!r}: each answer needs a 'text' string and an "
                                     f"integer 'answer_start'")
                answers = [(x["text"], x["answer_start"]) for x in answers]
                for text, name in [(qa["question"], "question"), *((text, "answer") for text, _ in answers)]:
                    _check_unicode(text, f"{path}: question id {qid!r}: its {name}")
                impossible = qa.get("is_impossible", unanswered_means_impossible and not answers)
                if not isinstance(impossible, bool):  # bool("false") would be True
                    raise ValueError(f"{path}: question id {qid!r}: 'is_impossible' must be true or false (a JSON "
                                     f"boolean), not {impossible!r}")
                # Trained to abstain, scored as answerable: both silently (an empty text, a converter's
                # placeholder, the scorer reads as no answer).
                if impossible and any(text.strip() for text, _ in answers):
                    raise ValueError(f"{path}: question id {qid!r}: 'is_impossible' is true, yet it has 'answers' "
                                     "(which the scorer would hold it to): move them to 'plausible_answers', as SQuAD "
                                     "2.0 keeps them, or set 'is_impossible' false")
                if not has_text(qa["question"]):
                    empty_questions.append(qid)
                builder.add(qid, qa["question"], paragraph["context"], answers, impossible)
    if empty_questions:  # kept, as run_squad.py keeps them; predict refuses one typed in
        logging.warning("%s: %d question(s) with no text (ids %s), read as [CLS] [SEP] context", path,
                        len(empty_questions), ", ".join(map(repr, empty_questions[:5]))
                        + (", ..." if len(empty_questions) > 5 else ""))
    return builder.build(version, data=raw["data"])


def _check_unicode(text: str, where: str) -> None:
    """ValueError naming `where` for a lone surrogate, which JSON can escape ("\\ud83d") but no
    text holds (the tokenizer fails on it, naming nothing)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{where} holds a lone surrogate ({e.object[e.start]!r}); the text must be valid "
                         "Unicode") from None


def _objects(parent, key: str, where: str) -> list[dict]:
    """parent[key], checked to be a list of JSON objects (an empty list: none). A missing key
    is an error: a misspelt one ("paragraph", "qa") lost its questions without a word, and
    the official scorer fails on it at the first evaluation."""
    if not isinstance(parent, dict):
        raise ValueError(f"{where} is not a JSON object")
    if key not in parent:
        raise ValueError(f"{where} has no {key!r} list (keys: {sorted(parent)})")
    children = parent[key]
    if not isinstance(children, list) or not all(isinstance(c, dict) for c in children):
        raise ValueError(f"{where}: {key!r} must be a list of JSON objects")
    return children


def read_tfds(name: str = "squad/v1.1", split: str = "train", data_dir: str | None = None) -> SquadExamples:
    """TFDS `squad/v1.1` or `squad/v2.0` -> SquadExamples, the official `data` rebuilt by
    grouping the questions by title and context. Examples with an empty or repeated id are
    counted, logged skips."""
    if name.split("/")[-1] not in ("v1.1", "v2.0"):
        raise ValueError(f"unknown SQuAD TFDS dataset {name!r}; expected 'squad/v1.1' or 'squad/v2.0'")
    builder = ExampleBuilder(f"tfds:{name}[{split}]", strict=False)
    text = lambda value: value.decode("utf-8", errors="replace")
    for index, ex in enumerate(read_tfds_split(prepared_tfds_builder(name, data_dir), split)):
        answers = [(text(t), int(s)) for t, s in zip(ex["answers"]["text"], ex["answers"]["answer_start"])]
        builder.add(text(ex["id"]), text(ex["question"]), text(ex["context"]), answers,
                    bool(ex.get("is_impossible", False)), title=text(ex["title"]), index=index)
    return builder.build(name.split("/")[-1])


class ExampleBuilder:
    """Collects questions, interning contexts; rebuilds the official `data` if asked."""

    def __init__(self, source: str, strict: bool):
        self.source, self.strict, self.skips = source, strict, DropCounter()
        self.ids, self.questions, self.answers, self.impossible, self.context_of = [], [], [], [], []
        self.contexts, self.titles, self.seen = {}, [], {}

    def add(self, qid, question, context, answers, impossible, title="", index=None):
        where = f"{self.source}#{index}" if index is not None else self.source
        if not qid:
            self.skips.drop("missing_id", where)
            return
        if qid in self.seen:
            if self.strict:
                raise ValueError(f"{self.source}: question id {qid!r} appears twice")
            self.skips.drop("repeated_id", where, repr(qid))
            return
        self.seen[qid] = len(self.ids)
        if context not in self.contexts:
            self.contexts[context] = len(self.contexts)
            self.titles.append(title)
        self.ids.append(qid), self.questions.append(question), self.answers.append(answers)
        self.impossible.append(impossible), self.context_of.append(self.contexts[context])

    def build(self, version: str, data: list | None = None) -> SquadExamples:
        log_skips(self.source, self.skips)
        contexts = list(self.contexts)
        if data is None:  # TFDS: one article per title, one paragraph per context
            articles, paragraphs = {}, {}
            for q, c in enumerate(self.context_of):
                if c not in paragraphs:
                    paragraphs[c] = {"context": contexts[c], "qas": []}
                    articles.setdefault(self.titles[c], []).append(paragraphs[c])
                qa = {"id": self.ids[q], "question": self.questions[q],
                      "answers": [{"text": t, "answer_start": s} for t, s in self.answers[q]]}
                if version == "v2.0":
                    qa["is_impossible"] = self.impossible[q]
                paragraphs[c]["qas"].append(qa)
            data = [{"title": title, "paragraphs": pars} for title, pars in articles.items()]
        return SquadExamples(self.source, version, data, self.ids, self.questions, contexts,
                             np.array(self.context_of, np.int64), self.answers, np.array(self.impossible, bool),
                             self.strict)


def log_skips(source: str, skips: DropCounter) -> None:
    if skips.counts:
        logging.warning("%s: skipped %d questions (%s)", source, sum(skips.counts.values()),
                        ", ".join(f"{k}: {v}" for k, v in sorted(skips.counts.items())))

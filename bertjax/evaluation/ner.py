"""Entity-level precision, recall and F1, as seqeval's default mode (conlleval's for IOB1,
IOB2 and IOE).

Entities are (type, start, end) spans, matched exactly and micro-averaged over all
sentences. A tag is "O" or "<P>-<type>", P one of B, I (IOB1, IOB2) or E, S (IOBES), or L, U
(BILOU, as some Hugging Face taggers name them: read as E and S, bertjax's own mapping;
conlleval knows neither letter, and seqeval reads BILOU only in its strict mode). The
chunk rules are seqeval's default mode's, which are conlleval's where conlleval knows the
prefixes (it has no S, and an E-X before B-X ends no entity in it: IOBES is scored as
seqeval scores it, as its IOB2 form would be):
  an entity starts at B-X or S-X, at I-X or E-X after O, E- or S-, and at any tag whose
  type differs from the previous tag's;
  it ends before O, B- or S-, after E- or S-, and before a change of type.
So `O I-PER` is one PER entity, `I-PER I-LOC` two, `B-PER B-PER` two (of one token each),
and the IOB1 and IOB2 encodings of the same entities give the same spans and scores.

Empty denominators give 0 (seqeval's zero_division=0): precision with no predicted entity,
recall with no gold entity, and F1 when precision + recall = 0.
"""

from __future__ import annotations

import collections

_PREFIXES = ("B", "I", "E", "S", "L", "U")
_BILOU = {"L": "E", "U": "S"}  # (last, unit: end and single)


def extract_entities(tags: list[str], sentence: int = 0) -> list[tuple[str, int, int]]:
    """The entities of one sentence's tags as (type, start, end), end exclusive
    (`tags[start:end]` is the entity), in order. sentence: its index, for error messages."""
    entities = []
    previous, previous_type, start = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):  # a final "O" closes an entity still open
        prefix, type_ = _parse(tag, sentence)
        if _ends(previous, prefix, previous_type, type_):
            entities.append((previous_type, start, i))
        if _starts(previous, prefix, previous_type, type_):
            start = i
        previous, previous_type = prefix, type_
    return entities


def entity_scores(gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
    """Micro-averaged {"precision", "recall", "f1"} (fractions) of the predicted tags of
    every sentence against the gold ones."""
    correct, predicted, actual = _counts(gold, pred)
    return _scores(sum(correct.values()), sum(predicted.values()), sum(actual.values()))


def per_type_scores(gold: list[list[str]], pred: list[list[str]]) -> dict[str, dict[str, float]]:
    """{type: {"precision", "recall", "f1", "support"}} for every type seen in gold or
    predictions, sorted by name; support = the number of gold entities of the type."""
    correct, predicted, actual = _counts(gold, pred)
    return {type_: {**_scores(correct[type_], predicted[type_], actual[type_]), "support": actual[type_]}
            for type_ in sorted(set(actual) | set(predicted))}


def _counts(gold: list[list[str]], pred: list[list[str]]) -> tuple[collections.Counter, ...]:
    """Per type: (correctly predicted, predicted, gold) entity counts."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted: sentence "
                         f"{min(len(gold), len(pred))} has no counterpart")
    correct, predicted, actual = collections.Counter(), collections.Counter(), collections.Counter()
    for i, (gold_tags, pred_tags) in enumerate(zip(gold, pred)):
        if len(gold_tags) != len(pred_tags):
            raise ValueError(f"sentence {i}: {len(gold_tags)} gold tags but {len(pred_tags)} predicted")
        gold_entities, pred_entities = set(extract_entities(gold_tags, i)), set(extract_entities(pred_tags, i))
        actual.update(type_ for type_, _, _ in gold_entities)
        predicted.update(type_ for type_, _, _ in pred_entities)
        correct.update(type_ for type_, _, _ in gold_entities & pred_entities)
    return correct, predicted, actual


def _scores(correct: int, predicted: int, actual: int) -> dict[str, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / actual if actual else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


TAG_FORMS = "B-, I-, E-, S-, L- or U-<type>"  # what an entity tag may be, for messages


def is_tag(tag: str) -> bool:
    """Whether `tag` is "O" or <B|I|E|S|L|U>-<type>."""
    prefix, dash, type_ = tag.partition("-")
    return tag == "O" or (prefix in _PREFIXES and bool(dash) and bool(type_))


def _parse(tag: str, sentence: int) -> tuple[str, str]:
    """(prefix, type) of a tag: ("O", "") for "O"; ValueError for anything malformed."""
    if tag == "O":
        return "O", ""
    if not isinstance(tag, str) or not is_tag(tag):
        raise ValueError(f"sentence {sentence}: tag {tag!r} is neither 'O' nor {TAG_FORMS}")
    prefix, _, type_ = tag.partition("-")
    return _BILOU.get(prefix, prefix), type_


def _ends(previous: str, prefix: str, previous_type: str, type_: str) -> bool:
    """Whether an entity ends just before a tag (prefixes "O", "B", "I", "E", "S")."""
    return (previous in ("E", "S") or (previous in ("B", "I") and prefix in ("B", "S", "O"))
            or (previous != "O" and previous_type != type_))


def _starts(previous: str, prefix: str, previous_type: str, type_: str) -> bool:
    """Whether an entity starts at a tag."""
    return (prefix in ("B", "S") or (prefix in ("I", "E") and previous in ("O", "E", "S"))
            or (prefix != "O" and previous_type != type_))

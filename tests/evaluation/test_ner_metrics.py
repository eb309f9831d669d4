"""Entity-level NER scores (conlleval rules) against numbers worked out by hand."""

import pytest

from bertjax.evaluation import ner


@pytest.mark.parametrize("tags, entities", [
    (["O", "I-PER", "I-PER", "O"], [("PER", 1, 3)]),  # I- after O starts an entity
    (["I-PER", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 2)]),  # a type change ends one, starts another
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3)]),
    (["B-ORG"], [("ORG", 0, 1)]),  # single token, closed by the end of the sentence
    (["O", "B-MISC", "O"], [("MISC", 1, 2)]),
    (["B-PER", "B-PER"], [("PER", 0, 1), ("PER", 1, 2)]),  # B- after B- of one type: two entities
    (["B-PER", "I-PER", "B-PER", "I-PER"], [("PER", 0, 2), ("PER", 2, 4)]),
    (["S-PER", "B-LOC", "E-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3), ("LOC", 3, 4)]),  # IOBES
    # BILOU, IOBES's other letters (a review: a Hugging Face tagger with them found no entity)
    (["U-PER", "B-LOC", "L-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3), ("LOC", 3, 4)]),
    (["B-GEO-LOC", "I-GEO-LOC"], [("GEO-LOC", 0, 2)]),  # the type is everything after the first "-"
    (["O", "O"], []),
    ([], []),
])
def test_extract_entities(tags, entities):
    assert ner.extract_entities(tags) == entities


def test_iob1_and_iob2_encodings_agree():
    # the same entities PER[0, 2), PER[2, 3), LOC[4, 5)
    iob2 = ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC"]  # B- only between touching entities of one type
    assert ner.extract_entities(iob1) == ner.extract_entities(iob2) == [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)]
    assert ner.entity_scores([iob2], [iob1]) == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    # against one prediction (PER[0, 2) right, PER[2, 3) missed, LOC[3, 5) wrong span): 1 of 2 predicted,
    # 1 of 3 gold, whichever encoding the gold uses
    pred = ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]
    assert ner.entity_scores([iob1], [pred]) == ner.entity_scores([iob2], [pred]) == pytest.approx(
        {"precision": 1 / 2, "recall": 1 / 3, "f1": 2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3)})


GOLD = [["B-PER", "I-PER", "O", "B-LOC"],  # PER[0, 2) LOC[3, 4)
        ["B-ORG", "I-ORG", "O", "B-ORG"],  # ORG[0, 2) ORG[3, 4)
        ["B-MISC", "O"]]  # MISC[0, 1)
PRED = [["B-PER", "I-PER", "O", "B-ORG"],  # PER[0, 2) right, ORG[3, 4) wrong type
        ["B-ORG", "I-ORG", "O", "B-LOC"],  # ORG[0, 2) right, LOC[3, 4) wrong type
        ["O", "O"]]  # MISC missed


def test_micro_averaged_scores():
    # 2 right of 4 predicted and 5 gold: precision 1/2, recall 2/5, F1 = 2 (1/2)(2/5) / (1/2 + 2/5) = 4/9
    assert ner.entity_scores(GOLD, PRED) == pytest.approx({"precision": 1 / 2, "recall": 2 / 5, "f1": 4 / 9})


def test_per_type_scores():
    assert ner.per_type_scores(GOLD, PRED) == {  # halves are exact in binary floating point
        "LOC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},  # 0 of 1 predicted, 0 of 1 gold
        "MISC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},  # none predicted
        "ORG": {"precision": 1 / 2, "recall": 1 / 2, "f1": 1 / 2, "support": 2},  # 1 of 2 predicted, 1 of 2 gold
        "PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1},
    }
    # a type only predicted appears with support 0
    assert ner.per_type_scores([["O"]], [["B-DATE"]]) == {
        "DATE": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}}


def test_empty_denominators_give_zero():
    assert ner.entity_scores([["O", "O"]], [["O", "O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert ner.entity_scores([["B-PER"]], [["O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert ner.entity_scores([["O"]], [["B-PER"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_mismatched_lengths_name_the_sentence():
    with pytest.raises(ValueError, match="sentence 1: 2 gold tags but 1 predicted"):
        ner.entity_scores([["O"], ["O", "O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match="2 gold sentences but 1 predicted: sentence 1"):
        ner.entity_scores([["O"], ["O"]], [["O"]])


@pytest.mark.parametrize("tag", ["B", "I", "B-", "X-PER", "o", "", "PER", 3])
def test_malformed_tags_name_the_sentence_and_tag(tag):
    with pytest.raises(ValueError, match=f"sentence 1: tag {tag!r} is neither"):
        ner.entity_scores([["O"], ["O", "O"]], [["O"], ["B-PER", tag]])

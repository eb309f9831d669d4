"""SQuAD v1.1 / v2.0 scores against numbers worked out by hand, and the command line."""

import json
import logging
import pathlib
import subprocess
import sys

import pytest

from bertjax.evaluation import squad

REPO = pathlib.Path(__file__).parents[2]


def _data(*questions):
    """The official `data` list: one article, one paragraph, questions (id, [answer texts])."""
    qas = [{"id": qid, "question": "?", "answers": [{"text": text, "answer_start": 0} for text in texts],
            "is_impossible": not texts} for qid, texts in questions]
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def test_normalize_answer():
    assert squad.normalize_answer("The  Cat!") == "cat"
    assert squad.normalize_answer("An apple,\ta pear\nand THE plum.") == "apple pear and plum"
    assert squad.normalize_answer("theater anthem") == "theater anthem"  # whole words only
    assert squad.normalize_answer("Don't stop-believing") == "dont stopbelieving"  # punctuation dropped, not spaced
    assert squad.normalize_answer("The") == ""
    assert squad.normalize_answer("café—Über") == "café—über"  # only ASCII punctuation goes


def test_token_f1_counts_repeated_tokens_once_per_match():
    # pred "the cat cat sat" -> cat cat sat; gold "cat sat on the mat" -> cat sat on mat
    # shared: cat min(2, 1) = 1, sat 1 -> 2; precision 2/3, recall 2/4
    # F1 = 2 (2/3)(1/2) / (2/3 + 1/2) = (2/3) / (7/6) = 4/7
    for version in ("1.1", "2.0"):
        assert squad.token_f1("the cat cat sat", "cat sat on the mat", version) == pytest.approx(4 / 7)
    assert squad.exact_match("The  Cat!", "cat") == 1 and squad.exact_match("cats", "cat") == 0


def test_v11_missing_prediction_scores_zero(caplog):
    data = _data(("q1", ["Paris", "the city of Paris"]), ("q2", ["blue whale"]), ("q3", ["x"]))
    predictions = {"q1": "Paris!", "q2": "whale"}  # q3 missing
    with caplog.at_level(logging.WARNING):
        result = squad.evaluate(data, predictions, version="1.1")
    # q1: EM 1, F1 1; q2: EM 0, F1 = 2 * 1 * (1/2) / (1 + 1/2) = 2/3; q3: 0, 0 -- all over 3 questions
    assert result == {"exact_match": pytest.approx(100 * 1 / 3), "f1": pytest.approx(100 * (1 + 2 / 3) / 3)}
    assert "1 of 3 questions have no prediction" in caplog.text


def test_v11_empty_against_empty_is_f1_zero_but_v20_one():
    data = _data(("q", ["the"]))  # normalises to ""
    # v1.1: EM compares "" with "" -> 1; F1 has no common token -> 0
    assert squad.evaluate(data, {"q": ""}, version="1.1") == {"exact_match": 100.0, "f1": 0.0}
    # v2.0: the gold "the" is dropped, the question gets the gold "", both empty -> EM = F1 = 1;
    # it still counts as a has-answer question: its answers list is not empty
    assert squad.evaluate(data, {"q": ""}, version="v2.0") == {
        "exact": 100.0, "f1": 100.0, "total": 1, "HasAns_exact": 100.0, "HasAns_f1": 100.0, "HasAns_total": 1}


def test_v11_needs_gold_answers():
    with pytest.raises(ValueError, match="'q' has no gold answer"):
        squad.evaluate(_data(("q", [])), {"q": ""}, version="1.1")


def test_v20_no_answer_questions_and_missing_predictions(caplog):
    data = _data(("a", ["Denver Broncos"]), ("b", []), ("c", []), ("d", ["x"]))
    predictions = {"a": "Broncos", "b": "", "c": "Carolina"}  # d missing: left out everywhere
    with caplog.at_level(logging.WARNING):
        result = squad.evaluate(data, predictions)
    # a: EM 0, F1 = 2 * 1 * (1/2) / (3/2) = 2/3; b: no answer, empty prediction -> 1, 1; c: 0, 0
    assert result == pytest.approx({
        "exact": 100 * 1 / 3, "f1": 100 * (2 / 3 + 1) / 3, "total": 3,
        "HasAns_exact": 0.0, "HasAns_f1": 100 * 2 / 3, "HasAns_total": 1,
        "NoAns_exact": 100 * 1 / 2, "NoAns_f1": 100 * 1 / 2, "NoAns_total": 2})
    assert "1 of 4 questions have no prediction" in caplog.text


def test_v20_gold_answers_normalising_to_empty_are_dropped():
    data = _data(("q", ["The", "a dog"]))  # golds: "dog" only
    assert squad.evaluate(data, {"q": "dog"})["exact"] == 100.0
    assert squad.evaluate(data, {"q": ""})["f1"] == 0.0  # "" no longer matches "The"


def test_v20_na_prob_threshold_scores_as_empty():
    data = _data(("a", ["Denver Broncos"]), ("b", []), ("c", []))
    predictions = {"a": "Denver Broncos", "b": "", "c": "Carolina"}
    na_probs = {"a": 0.9, "b": 0.1, "c": 0.7}
    result = squad.evaluate(data, predictions, na_probs=na_probs, na_prob_thresh=0.5)
    # a: 0.9 > 0.5 -> scored as "", but it has an answer -> 0; b: 0.1 kept -> 1; c: 0.7 -> "" -> 1
    assert result["exact"] == pytest.approx(100 * 2 / 3) and result["f1"] == pytest.approx(100 * 2 / 3)
    assert (result["HasAns_exact"], result["NoAns_exact"]) == (0.0, 100.0)
    # a value equal to the threshold does not exceed it: a keeps its raw score 1
    assert squad.evaluate(data, predictions, na_probs=na_probs, na_prob_thresh=0.9)["exact"] == pytest.approx(
        100 * 2 / 3)  # a 1, b 1, c 0


def test_v20_best_threshold_search():
    data = _data(("q1", ["Paris"]), ("q2", []), ("q3", ["Rome"]), ("q4", []), ("q5", ["big red dog"]))
    predictions = {"q1": "Paris", "q2": "Oslo", "q3": "Rome", "q4": "", "q5": "red cat"}
    # ascending order: q1 0.1, q3 0.3, q4 0.4, q5 0.5, q2 0.6 (given in another order)
    na_probs = {"q2": 0.6, "q5": 0.5, "q4": 0.4, "q3": 0.3, "q1": 0.1}
    # raw EM: q1 1, q2 0, q3 1, q4 1, q5 0; raw F1: the same but q5: pred red cat, gold big red dog
    #   -> 1 shared, precision 1/2, recall 1/3, F1 = 2 (1/6) / (5/6) = 0.4
    # best EM: start from all null = 2 (q2, q4) at 0.0; q1 +1 -> 3 (0.1); q3 +1 -> 4 (0.3);
    #   q4 no answer, empty prediction +0 -> 4; q5 +0 -> 4; q2 no answer, "Oslo" -1 -> 3. best 4 of 5 at 0.3
    # best F1: 2; 3 (0.1); 4 (0.3); 4; q5 +0.4 -> 4.4 (0.5); q2 -1 -> 3.4. best 4.4 of 5 at 0.5
    result = squad.evaluate(data, predictions, na_probs=na_probs)
    assert result == pytest.approx({
        "exact": 100 * 3 / 5, "f1": 100 * 3.4 / 5, "total": 5,
        "HasAns_exact": 100 * 2 / 3, "HasAns_f1": 100 * 2.4 / 3, "HasAns_total": 3,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
        "best_exact": 80.0, "best_exact_thresh": 0.3, "best_f1": 88.0, "best_f1_thresh": 0.5})
    # every answer wrong and non-empty: answering never beats all null (2 of 5 at 0.0)
    wrong = {qid: "zzz" for qid in predictions}
    result = squad.evaluate(data, wrong, na_probs=na_probs)
    assert (result["best_exact"], result["best_exact_thresh"]) == (40.0, 0.0)
    # bertjax's null odds (null score minus the best span's) go below 0: "all null" is a threshold
    # below the lowest, or scoring again at the reported threshold gives another number (a review).
    odds = {"q1": -3.0, "q2": -2.0, "q3": -1.0, "q4": -0.5, "q5": 0.5}
    result = squad.evaluate(data, wrong, na_probs=odds)
    assert (result["best_f1"], result["best_f1_thresh"]) == (40.0, -4.0)
    assert squad.evaluate(data, wrong, na_probs=odds, na_prob_thresh=result["best_f1_thresh"])["f1"] == 40.0


def test_v20_unanswerable_questions_may_leave_out_their_answers():
    data = _data(("a", ["x"]), ("b", []))
    del data[0]["paragraphs"][0]["qas"][1]["answers"]  # as training reads it: no answer
    assert squad.evaluate(data, {"a": "x", "b": ""}) == squad.evaluate(_data(("a", ["x"]), ("b", [])),
                                                                       {"a": "x", "b": ""})


def test_v20_na_probs_must_cover_the_predictions():
    with pytest.raises(ValueError, match="no numeric no-answer probability, e.g. 'b'"):
        squad.evaluate(_data(("a", ["x"]), ("b", [])), {"a": "x", "b": ""}, na_probs={"a": 0.5})


def test_bad_layout_and_version():
    with pytest.raises(ValueError, match=r"data\[0\].paragraphs\[0\].qas\[0\]: not the SQuAD layout"):
        squad.evaluate([{"paragraphs": [{"qas": [{"question": "no id", "answers": []}]}]}], {})
    with pytest.raises(ValueError, match="SQuAD version '3.0'"):
        squad.evaluate(_data(("a", ["x"])), {"a": "x"}, version="3.0")
    with pytest.raises(ValueError, match="no question of the dataset has a prediction"):
        squad.evaluate(_data(("a", ["x"])), {})


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bertjax.evaluation.squad", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO)


def test_command_line(tmp_path):
    data = _data(("a", ["Denver Broncos"]), ("b", []))
    (tmp_path / "v2.json").write_text(json.dumps({"version": "v2.0", "data": data}))
    (tmp_path / "v1.json").write_text(json.dumps({"version": "1.1", "data": _data(("a", ["Denver Broncos"]))}))
    (tmp_path / "pred.json").write_text(json.dumps({"a": "Broncos", "b": "Carolina"}))
    (tmp_path / "na.json").write_text(json.dumps({"a": 0.2, "b": 0.8}))

    run = _cli(tmp_path / "v2.json", tmp_path / "pred.json", "--na-prob-file", tmp_path / "na.json",
               "--na-prob-thresh", "0.5")
    assert run.returncode == 0, run.stderr
    # a: EM 0, F1 2/3; b: 0.8 > 0.5 -> scored as "" -> 1, 1
    assert json.loads(run.stdout) == pytest.approx(squad.evaluate(
        data, {"a": "Broncos", "b": "Carolina"}, na_probs={"a": 0.2, "b": 0.8}, na_prob_thresh=0.5))
    assert json.loads(run.stdout)["exact"] == 50.0

    run = _cli(tmp_path / "v1.json", tmp_path / "pred.json")  # the file's version: 1.1
    assert run.returncode == 0 and json.loads(run.stdout) == pytest.approx({"exact_match": 0.0, "f1": 100 * 2 / 3})
    run = _cli(tmp_path / "v1.json", tmp_path / "pred.json", "--version", "2.0")
    assert set(json.loads(run.stdout)) == {"exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total"}


def test_command_line_bad_input(tmp_path):
    (tmp_path / "pred.json").write_text("{}")
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "nodata.json").write_text(json.dumps({"version": "v2.0"}))
    for bad in ("missing.json", "garbage.json", "nodata.json"):
        run = _cli(tmp_path / bad, tmp_path / "pred.json")
        assert run.returncode == 2 and run.stdout == ""
        assert len(run.stderr.strip().splitlines()) == 1 and str(tmp_path / bad) in run.stderr, run.stderr
    run = _cli(tmp_path / "nodata.json", tmp_path / "missing.json")  # the data file is read first
    assert run.returncode == 2 and str(tmp_path / "nodata.json") in run.stderr
    # The n-best file given for the predictions: named as such, its 20 entries not printed (a walkthrough).
    (tmp_path / "v1.json").write_text(json.dumps({"version": "1.1", "data": _data(("a", ["Denver Broncos"]))}))
    (tmp_path / "nbest.json").write_text(json.dumps({"a": [{"text": f"answer {k}", "probability": 0.05}
                                                           for k in range(20)]}))
    run = _cli(tmp_path / "v1.json", tmp_path / "nbest.json")
    assert run.returncode == 2 and run.stderr.strip() == (
        f"error: {tmp_path}/nbest.json on {tmp_path}/v1.json: question 'a': the prediction is a list ([{{'text': "
        "'answer 0', 'probability': 0.05}, {'text': 'ans...), not an answer's text; an n-best file? give "
        "the predictions file (question id -> answer text)"), run.stderr


@pytest.mark.parametrize("stated, impossible, want", [
    (None, None, "v1.1"), (None, False, "v2.0"), ("1.1", False, "v1.1"), ("v1.1", None, "v1.1"),
    ("v2.0", None, "v2.0"), ("2.0", False, "v2.0"), ("my data", True, "v2.0"), ("my data", None, "v1.1")])
def test_training_and_the_command_line_read_a_files_version_alike(tmp_path, stated, impossible, want):
    """The version decides the scores ("the" against "The" / "cat": v1.1 EM 100, v2.0 drops the
    gold that normalises to "", EM 0): training and the command line must agree on it."""
    from bertjax.tasks import squad as squad_task

    qa = {"id": "a", "question": "Who?", "answers": [{"text": "The", "answer_start": 0},
                                                     {"text": "cat", "answer_start": 4}]}
    qas = [qa]
    if impossible is False:
        qa["is_impossible"] = False
    elif impossible:  # another question's: an unanswerable one has no answers (answered "")
        qas.append({"id": "b", "question": "Why?", "answers": [], "is_impossible": True})
    content = {"data": [{"title": "t", "paragraphs": [{"context": "The cat sat.", "qas": qas}]}]}
    if stated is not None:
        content["version"] = stated
    (tmp_path / "dev.json").write_text(json.dumps(content))
    (tmp_path / "pred.json").write_text(json.dumps({"a": "the", **({"b": ""} if impossible else {})}))
    assert squad.file_version(content) == squad_task.read_json(str(tmp_path / "dev.json")).version == want
    run = _cli(tmp_path / "dev.json", tmp_path / "pred.json")
    assert run.returncode == 0, run.stderr
    scores = json.loads(run.stdout)
    assert (scores["exact_match"] if want == "v1.1" else scores["exact"]) == (
        100.0 if want == "v1.1" else 50.0 if impossible else 0.0)


def test_a_version_1_file_with_an_unanswerable_question_is_an_error(tmp_path):
    from bertjax.tasks import squad as squad_task

    content = {"version": "1.1", "data": _data(("a", ["x"]), ("b", []))}  # b: is_impossible true
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(content))
    (tmp_path / "pred.json").write_text(json.dumps({"a": "x", "b": ""}))
    with pytest.raises(ValueError, match=f"{path}: question id 'b' is_impossible, but the file says version '1.1'"):
        squad_task.read_json(str(path))
    run = _cli(path, tmp_path / "pred.json")
    assert run.returncode == 2 and f"{path}: question id 'b' is_impossible" in run.stderr

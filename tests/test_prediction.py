"""Model.predict on raw inputs for every task family: the answers equal the ones the fine-tuning
run itself wrote for its evaluation file (same weights, same post-processing), whatever the
batch and bucket; bad inputs are named by position."""

import csv
import json
import os

import numpy as np
import pytest
from small_runs import REVIEWS
from test_finetune_tasks import squad_json, write_conll


def test_classification_predicts_labels_and_probabilities(minilm_classifier_run):
    import bertjax

    model = bertjax.load_model(minilm_classifier_run, batch_size=2)
    texts = [text for text, _ in REVIEWS]
    results = model.predict(texts + ["a dull and boring film"])
    assert [r["label"] for r in results] == [label for _, label in REVIEWS] + ["bad"]
    for result in results:
        assert set(result["probabilities"]) == {"bad", "good"}
        assert sum(result["probabilities"].values()) == pytest.approx(1.0, abs=1e-6)
        assert result["probability"] == max(result["probabilities"].values()) > 0.5
    # A text that is not valid Unicode is named by its input's place (the tokenizer's own error
    # counted from 0 within a batch's texts: a review), pairs' second texts too.
    with pytest.raises(ValueError, match=r"^input 3: not valid Unicode: a lone surrogate \('\\ud800'\) at character 2"):
        model.predict([texts[0], texts[1], ("ok", "a \ud800")])
    # The same text gets the same numbers alone (another batch, another bucket) and in a crowd.
    alone = model.predict([texts[1]])[0]
    assert alone["probabilities"]["bad"] == pytest.approx(results[1]["probabilities"]["bad"], abs=1e-5)
    # An input longer than max_seq_length says so (issue 46, 6); the others carry no such field.
    long = model.predict(["a dull film " * 200, texts[0]])
    assert long[0]["truncated"] is True and "truncated" not in long[1] and "truncated" not in results[0]
    with pytest.raises(ValueError, match="input 2: the model was trained on single texts"):
        model.predict(["fine", "a ||| b"])
    with pytest.raises(ValueError, match="input 1: expected a text"):
        model.predict([42])
    # A dict's misspelt second text made a pair one text, silently (a walkthrough).
    for item in ({"text": "a", "textb": "b"}, {"text_a": "x", "text": "y"}, {"text_a": "x", "Text_B": "y"}):
        with pytest.raises(ValueError, match=r"input 1: a dict input reads 'text_a' \(or 'text'\) and 'text_b'; got "
                                             r"the keys \["):
            model.predict([item])
    [row] = model.predict([{"text": texts[0], "id": 7, "label": "good", "textID": "t1"}])  # other keys: the row's own
    assert row["probability"] == pytest.approx(results[0]["probability"], abs=1e-5)
    with open(os.path.join(minilm_classifier_run, "predictions", "eval.tsv")) as f:
        written = [row["prediction"] for row in csv.DictReader(f, delimiter="\t")]
    assert [r["label"] for r in model.predict([text for text, _ in REVIEWS * 8])] == written


def test_iter_predict_streams_a_generator_a_chunk_at_a_time(minilm_classifier_run):
    """Model.predict held every input and result at once, and a user splitting a large input
    into calls got span QA ids counted afresh each call (a review): iter_predict reads a chunk,
    yields its results and only then reads the next, with positions over the whole input.
    A table (a DataFrame iterates over its column names) and arrays of other shapes were read
    as inputs; check_input let through a text predict refuses."""
    import bertjax

    model = bertjax.load_model(minilm_classifier_run, batch_size=2)
    texts = [text for text, _ in REVIEWS] * 2 + ["a dull and boring film"]
    pulled = []

    def stream():
        for i, text in enumerate(texts, start=1):
            pulled.append(i)
            yield text

    streamed = []
    for result in model.iter_predict(stream(), chunk_size=3):
        streamed.append(result)
        assert len(pulled) == min(-(-len(streamed) // 3) * 3, len(texts))  # only this result's chunk read
    whole = model.predict(texts)
    assert [r["label"] for r in streamed] == [r["label"] for r in whole]
    np.testing.assert_allclose([r["probability"] for r in streamed], [r["probability"] for r in whole], atol=1e-5)
    bad = iter(model.iter_predict(texts[:4] + [42], chunk_size=2))
    assert [next(bad)["label"] for _ in range(4)] == [label for _, label in REVIEWS]
    with pytest.raises(ValueError, match=r"^input 5: expected a text"):  # its place in the whole input
        next(bad)
    for chunk_size in (0, 2.0, True):
        with pytest.raises(ValueError, match="chunk_size must be a positive int"):
            model.iter_predict(texts, chunk_size=chunk_size)

    class Table:  # what matters of a pandas DataFrame: iterating it gives its column names
        columns = ["review"]

        def __iter__(self):
            return iter(self.columns)

    with pytest.raises(ValueError, match=r"not a table .* one column \(df\['text'\]\)"):
        model.predict(Table())
    with pytest.raises(ValueError, match=r"an array of shape \(2, 1\)"):
        model.predict(np.array([[texts[0]], [texts[1]]]))
    with pytest.raises(ValueError, match=r"an array of shape \(\)"):
        model.predict(np.array(texts[0]))
    assert [r["label"] for r in model.predict(np.array(texts[:2]))] == [r["label"] for r in whole[:2]]
    model.check_input(texts[0])
    with pytest.raises(ValueError, match=r"^not valid Unicode: a lone surrogate"):
        model.check_input("good \ud83d film")


def _assert_entity_offsets(sentence, result):
    """Each entity's offsets are its first word's start and its last word's end in `sentence`,
    the words found there apart from the prediction."""
    spans, position = [], 0
    for word in result["words"]:
        start = sentence.index(word, position)
        spans.append((start, start + len(word)))
        position = start + len(word)
    for entity in result["entities"]:
        assert (entity["start"], entity["end"]) == (spans[entity["first_word"]][0], spans[entity["last_word"]][1])
        assert sentence[entity["start"]:entity["end"]] == entity["text"]


@pytest.mark.parametrize("run", ["ner", "ner_bilstm"])
def test_tagging_predicts_the_runs_own_tags_and_entity_spans(runs, run, tmp_path):
    import bertjax
    from bertjax.evaluation import ner
    from bertjax.inference import batch_predict

    workdir, dev = runs[run]
    model = bertjax.load_model(workdir, batch_size=4)
    assert model.max_seq_length == 16
    results = model.predict([tokens for tokens, _ in dev])
    lines = open(os.path.join(workdir, "predictions", "eval.conll")).read().split("\n\n")
    written = [[line.split()[-1] for line in block.splitlines()] for block in lines if block.strip()]
    assert [r["tags"] for r in results] == written
    for result in results:
        assert [(e["type"], e["first_word"], e["last_word"] + 1) for e in result["entities"]] == \
            ner.extract_entities(result["tags"])
    # Raw text is split into words as BERT's basic tokenizer does; entity offsets point into it.
    sentence = "Anna Smith moved to Oslo, then Paris."
    raw = model.predict([sentence])[0]
    assert raw["words"] == ["Anna", "Smith", "moved", "to", "Oslo", ",", "then", "Paris", "."]
    assert raw["tags"] == model.predict([raw["words"]])[0]["tags"]
    _assert_entity_offsets(sentence, raw)
    # ... each CJK character a word of its own (as the serving export and Hugging Face split),
    # case and accents as written, control characters dropped.
    sentence = "Zoë Ångström lives in 北京\x00 now"
    raw = model.predict([sentence])[0]
    assert raw["words"] == ["Zoë", "Ångström", "lives", "in", "北", "京", "now"]
    assert len(raw["tags"]) == 7 and raw["tags"] == model.predict([raw["words"]])[0]["tags"]
    _assert_entity_offsets(sentence, raw)
    # A tagger whose labels are not entity tags (a part-of-speech tagger from Hugging Face, say):
    # its tags, and no entities to find in them.
    upos = ["ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT"]
    names = model.task_info["label_names"]
    model.task_info = {**model.task_info, "label_names": upos[:len(names)]}
    tagged = model.predict([sentence])[0]
    assert tagged["tags"] == [upos[names.index(tag)] for tag in raw["tags"]] and tagged["entities"] == []
    # Labels that are no entity tags beside one that is (old BERT-NER exports' X, [CLS]): they are
    # O in the entities, which were all dropped for them (a review).
    most = max(names, key=raw["tags"].count)
    others = iter(["X", "[CLS]", "[SEP]", "[PAD]", *(f"X{i}" for i in range(len(names)))])
    model.task_info = {**model.task_info, "label_names": ["B-LOC" if name == most else next(others) for name in names]}
    tagged = model.predict([sentence])[0]
    assert [(e["type"], e["first_word"]) for e in tagged["entities"]] == [
        ("LOC", i) for i, tag in enumerate(raw["tags"]) if tag == most] != []
    # A line of a file is the sentence as given (issue 46, 1): offsets count from its first character.
    (tmp_path / "lines.txt").write_text("   Anna Smith moved to Oslo .\r\n")
    records = list(batch_predict.read_inputs(str(tmp_path / "lines.txt"), "tagging", "text", {}))
    assert records == [(f"{tmp_path}/lines.txt:1", "   Anna Smith moved to Oslo .")]
    written = []
    batch_predict.predict_all(model, "tagging", records, written.append)
    assert written == model.predict(["   Anna Smith moved to Oslo ."])
    with pytest.raises(ValueError, match="inputs: give a list of inputs, not one string"):
        model.predict(sentence)
    with pytest.raises(ValueError, match="input 1: not valid Unicode"):
        model.predict(["a \ud800 b"])
    with pytest.raises(ValueError, match="input 1: expected a sentence or a list of non-empty words"):
        model.predict([["ok", ""]])


def test_span_qa_predicts_the_runs_own_answers_with_offsets(runs, tmp_path, caplog):
    import subprocess
    import sys

    import bertjax

    workdir, dev = runs["squad"]
    model = bertjax.load_model(workdir, batch_size=8)
    assert model.task_info == {"family": "squad", "squad_version": "v2.0"}
    inputs = [{"id": qid, "question": question, "context": context} for qid, context, question, _, _ in dev]
    results = model.predict(inputs)
    written = json.load(open(os.path.join(workdir, "predictions", "eval", "predictions.json")))
    odds = json.load(open(os.path.join(workdir, "predictions", "eval", "null_odds.json")))
    assert {r["id"]: r["answer"] for r in results} == written
    for result, item in zip(results, inputs):
        assert result["null_odds"] == pytest.approx(odds[result["id"]], abs=1e-4)
        if result["answer"]:
            assert item["context"][result["start"]:result["end"]] == result["answer"]
            # ... and the span starts and ends where tokens do (found apart from the prediction).
            _, offsets = model.tokenizer.encode_with_offsets(item["context"])
            assert result["start"] in offsets[:, 0] and result["end"] in offsets[:, 1]
        else:
            assert (result["start"], result["end"]) == (-1, -1)
    # Made to answer (the null answer never wins), every question's span is checked, whatever a
    # two-step model chose above (it may answer nothing at all).
    forced = model.predict(inputs, null_score_diff_threshold=1e12)
    assert all(result["answer"] for result in forced)
    for result, item in zip(forced, inputs):
        assert item["context"][result["start"]:result["end"]] == result["answer"]
    with pytest.raises(ValueError, match="input 2: an empty context"):
        model.predict([inputs[0], {"question": "why?", "context": "  "}])
    # Only characters the tokenizer drops: no context at all, which was answered "no answer" with
    # probability 1.0 (a review).
    for item, empty in (({"question": "why?", "context": "\u200b\u200b"}, "context"),
                        ({"question": "\x00", "context": inputs[0]["context"]}, "question")):
        with pytest.raises(ValueError, match=rf"input 2: an empty {empty} \(only whitespace, control or invisible"):
            model.predict([inputs[0], item])
    with pytest.raises(ValueError, match="null_score_diff_threshold must be a finite number, got '1'"):
        model.predict(inputs[:1], null_score_diff_threshold="1")  # (a TypeError from math.isfinite)
    # A length that leaves no room for the context: said so (it was a featurize error); the
    # features of such a model at that length are no question's (a review: refused at load).
    short = bertjax.load_model(workdir, max_seq_length=8)
    with pytest.raises(ValueError, match="max_seq_length 8 leaves no room for a context after a question of up to"):
        short.predict(inputs[:1])
    assert short.features(["a context"], pooling="mean")[0]["values"].shape[0] == 1
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    refused = subprocess.run([sys.executable, os.path.join(root, "launch", "predict.py"), f"--model={workdir}",
                              "--text=who? ||| a context", "--max_seq_length=8"], capture_output=True, text=True,
                             env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(
        "error: --max_seq_length 8 leaves no room for a context"), refused.stderr[-2000:]
    # Options that select no span are refused, not answered "" with null odds 1e9 (a review);
    # given as the run's own values, the answers are the defaults'.
    for options, name in (({"n_best_size": -1}, "n_best_size"), ({"max_answer_length": 0}, "max_answer_length")):
        with pytest.raises(ValueError, match=f"{name} must be a whole number >= 1, got"):
            model.predict(inputs[:1], **options)
    with pytest.raises(ValueError, match="null_score_diff_threshold must be a finite number, got nan"):
        model.predict(inputs[:1], null_score_diff_threshold=float("nan"))
    from bertjax.tasks import squad

    run = squad.settings(model.source.data)
    assert model.predict(inputs[:3], n_best_size=int(run["n_best_size"]),
                         max_answer_length=int(run["max_answer_length"])) == results[:3]
    # The context is read in windows, never cut; a question past max_query_length is, and says so.
    limit = int(model.source.data["max_query_length"])
    long_question = {**inputs[0], "id": "long", "question": " ".join(["where"] * (limit + 1))}
    assert [r.get("truncated") for r in model.predict([inputs[0], long_question])] == [None, True]
    # Converted to Hugging Face and read back, it still answers SQuAD 2.0 ("no answer", null odds).
    subprocess.run([sys.executable, os.path.join(root, "launch", "convert_checkpoint.py"), f"--input={workdir}",
                    f"--output={tmp_path}/hf"], check=True, capture_output=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    converted = bertjax.load_model(str(tmp_path / "hf"), batch_size=8)
    assert converted.task_info["squad_version"] == "v2.0"
    subprocess.run([sys.executable, os.path.join(root, "launch", "convert_checkpoint.py"), f"--input={workdir}",
                    f"--output={tmp_path}/tf", "--format=tf"], check=True, capture_output=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert bertjax.load_model(str(tmp_path / "tf"), batch_size=8).predict(inputs[:3]) == results[:3]
    # The run's length and windows go with it (config.json's bertjax_data): the run's own answers.
    assert converted.max_seq_length == model.max_seq_length
    again = converted.predict(inputs)
    assert [r["answer"] for r in again] == [r["answer"] for r in results]
    assert [r["null_odds"] for r in again] == pytest.approx([r["null_odds"] for r in results], abs=1e-4)
    # A Hugging Face SQuAD 2.0 model from elsewhere: config.json without squad_version reads as
    # v1.1 (a span for every question); the caller can say v2.0 (--squad_version).
    from bertjax.inference import model_source

    # (one that says its version is not answered as another: a walkthrough found it silently so)
    with pytest.raises(ValueError, match=r"was fine-tuned on squad_version v2.0, not v1.1 \(its config says so\)"):
        model_source.with_task_version(model_source.resolve(str(tmp_path / "tf")), "v1.1")
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    del hf_config["squad_version"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(hf_config))
    elsewhere = model_source.resolve(str(tmp_path / "hf"))
    assert "squad_version" not in elsewhere.task_info
    caplog.clear()
    told = bertjax.load_model(model_source.with_task_version(elsewhere, "v2.0"), batch_size=8)
    answers = told.predict(inputs)
    assert [r["null_odds"] for r in answers] == [r["null_odds"] for r in converted.predict(inputs)]
    assert "does not say which squad_version" not in caplog.text
    # Read as v1.1 without a word, a SQuAD 2.0 model answered every question (a review).
    as_v1 = bertjax.load_model(elsewhere, batch_size=8)
    assert not any("null_odds" in r for r in as_v1.predict(inputs))
    assert as_v1.task_info["squad_version"] == "v1.1"  # what it answers as (an export's task.json records it)
    with pytest.raises(ValueError, match="null_score_diff_threshold is for a SQuAD v2.0 model"):
        as_v1.predict(inputs[:1], null_score_diff_threshold=-5.0)  # (ignored without a word: a review)
    assert (f"{elsewhere.path} does not say which squad_version it was fine-tuned on (a Hugging Face or TF "
            "checkpoint from elsewhere): it answers as v1.1; if it was trained on another (v2.0), give --squad_version"
            ) in caplog.text
    assert model_source.with_task_version(elsewhere, None) is elsewhere
    with pytest.raises(ValueError, match="was fine-tuned on squad_version v2.0, not v1.1"):
        model_source.with_task_version(model_source.resolve(workdir), "v1.1")
    with pytest.raises(ValueError, match="a task version is for a squad model, not tagging"):
        model_source.with_task_version(model_source.resolve(runs["ner"][0]), "v2.0")


def test_span_qa_ids_are_unique_over_a_whole_input_and_every_input_gets_its_line(runs, tmp_path, monkeypatch):
    """Issue 46, 4: an input without an id gets its position (over the whole input, not a
    chunk); an empty id or one seen before is named up front, and every input has its line."""
    import bertjax
    from bertjax.inference import batch_predict

    workdir, dev = runs["squad"]
    model = bertjax.load_model(workdir, batch_size=8)
    (_, context, question, _, _), *_ = dev
    lines = [f"{question} ||| {context}"] * 5
    (tmp_path / "qa.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(batch_predict, "CHUNK_INPUTS", 2)  # ids 1..5 over three chunks
    records = list(batch_predict.read_inputs(str(tmp_path / "qa.txt"), "squad", "text", {}))
    written = []
    summary = batch_predict.predict_all(model, "squad", records, written.append)
    assert summary["predicted"] == 5 and [line["id"] for line in written] == ["1", "2", "3", "4", "5"]
    one = model.predict([{"question": question, "context": context}])[0]
    assert all({**line, "id": "1"} == one for line in written)

    rows = [{"id": "a", "question": question, "context": context}, {"id": "", "question": question, "context": context},
            {"question": question, "context": context}, {"id": "a", "question": question, "context": context}]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    records = list(batch_predict.read_inputs(str(tmp_path / "qa.jsonl"), "squad", "jsonl",
                                             batch_predict.default_keys("squad", None)))
    written = []
    summary = batch_predict.predict_all(model, "squad", records, written.append, "skip")
    assert [line.get("id") for line in written] == ["a", None, "3", None]
    assert written[1] == {"error": "an id must be a non-empty text, got ''", "where": f"{tmp_path}/qa.jsonl:2"}
    assert written[3] == {"error": f"the id 'a' is that of {tmp_path}/qa.jsonl:1 too; ids must be unique",
                          "where": f"{tmp_path}/qa.jsonl:4"}
    with pytest.raises(ValueError, match=r"qa.jsonl:2: an id must be a non-empty text, got '' \(1 more bad inputs\)"):
        batch_predict.predict_all(model, "squad", records, written.append)
    with pytest.raises(ValueError, match="input 2: the id 'a' is that of input 1 too"):
        model.predict([rows[0], rows[3]])
    # Streamed from Python, a chunk at a time: numbers and clashes count over the whole input.
    streamed = model.iter_predict([{"question": question, "context": context}] * 3, chunk_size=2)
    assert [result["id"] for result in streamed] == ["1", "2", "3"]
    with pytest.raises(ValueError, match="input 3: the id 'a' is that of input 1 too"):
        list(model.iter_predict([rows[0], rows[2], rows[3]], chunk_size=2))
    with pytest.raises(ValueError, match=r"unknown options \['bogus'\] for squad"):
        model.predict([rows[0]], bogus=1)
    # An id that is another question's number: the message says where that id came from.
    with pytest.raises(ValueError, match=r"input 2: the id '1' is the number of input 1 \(it has no id\); ids must be "
                                         r"unique; give every question an id, or none"):
        model.predict([rows[2], {**rows[0], "id": "1"}])
    # A question without an id gets its line number, whatever blank lines or headers come before.
    (tmp_path / "gaps.jsonl").write_text(f"\n{json.dumps({**rows[0], 'id': '2'})}\n\n{json.dumps(rows[2])}\n")
    records = list(batch_predict.read_inputs(str(tmp_path / "gaps.jsonl"), "squad", "jsonl",
                                             batch_predict.default_keys("squad", None)))
    written = []
    batch_predict.predict_all(model, "squad", records, written.append)
    assert [line["id"] for line in written] == ["2", "4"]


def test_multiple_choice_predicts_the_runs_own_choices(runs):
    import bertjax

    workdir, dev = runs["choice"]
    model = bertjax.load_model(workdir, batch_size=4)
    results = model.predict([{"context": context, "choices": choices} for context, choices, _ in dev])
    with open(os.path.join(workdir, "predictions", "eval.tsv")) as f:
        written = [int(row["prediction"]) for row in csv.DictReader(f, delimiter="\t")]
    assert [r["choice"] for r in results] == written
    for result, (_, choices, _) in zip(results, dev):
        assert len(result["probabilities"]) == len(choices) and result["text"] == choices[result["choice"]]
        assert np.argmax(result["probabilities"]) == result["choice"]
    with pytest.raises(ValueError, match="at least 2 texts"):
        model.predict([{"context": "x", "choices": ["only one"]}])
    for blank in (" \t", "\u200b", "\x00"):  # (scored on no tokens: a review; a zero-width space, a walkthrough)
        with pytest.raises(ValueError, match=r"input 1: choice 1 is only whitespace, control or invisible characters"):
            model.predict([{"context": "x", "choices": ["one", blank, "two"]}])
    context, choices, _ = dev[0]  # a tuple of choices is as good as a list (a review: refused)
    assert model.predict([{"context": context, "choices": tuple(choices)}]) == results[:1]
    # "" is no choice, as in the SavedModel's padded rows: probability 0, the others as without it.
    context, choices, _ = dev[0]
    padded = model.predict([{"context": context, "choices": ["", *choices, ""]}])[0]
    assert padded["probabilities"][0] == padded["probabilities"][-1] == 0.0
    np.testing.assert_allclose(padded["probabilities"][1:-1], results[0]["probabilities"], atol=1e-6)
    assert padded["choice"] == results[0]["choice"] + 1 and padded["text"] == results[0]["text"]
    with pytest.raises(ValueError, match="at least 2 texts"):
        model.predict([{"context": "x", "choices": ["one", ""]}])
    word, choice = (len(model.tokenizer.encode_flat([text])[0]) for text in ("word", "a"))
    fits = (model.max_seq_length - 3 - choice) // word  # with [CLS] and two [SEP]
    longest = model.predict([{"context": "word " * fits, "choices": ["a", "a"]},
                             {"context": "word " * (fits + 1), "choices": ["a", "a"]}])
    assert [result.get("truncated") for result in longest] == [None, True]


def test_an_evaluation_example_longer_than_every_training_one_is_read_whole(tmp_path):
    """Training buckets are fitted to the training examples (here all within 8 tokens);
    evaluation adds max_seq_length (32), so a longer evaluation text is read whole: the run's
    own value for it equals model.predict's."""
    import bertjax
    from small_runs import tiny_finetune_run

    short = ["a cat sat", "the dog ran", "hello there", "good day"] * 4
    (tmp_path / "train.csv").write_text("text,score\n" + "".join(f"{t},{len(t) % 3}\n" for t in short))
    dev = [short[0], "the quick brown fox jumps over the lazy dog " * 3, short[1]]
    (tmp_path / "dev.csv").write_text("text,score\n" + "".join(f"{t},1.0\n" for t in dev))
    workdir = tiny_finetune_run("regression", tmp_path, train_file=str(tmp_path / "train.csv"),
                                eval_file=str(tmp_path / "dev.csv"), text_a_key="text", text_b_key="", label_key="score")
    with open(os.path.join(workdir, "predictions", "eval.tsv")) as f:
        written = [float(row["prediction"]) for row in csv.DictReader(f, delimiter="\t")]
    model = bertjax.load_model(workdir)
    assert len(model.tokenizer.encode(dev[1])) > 8
    np.testing.assert_allclose(written, [r["value"] for r in model.predict(dev)], rtol=1e-5, atol=1e-6)


def test_a_pretrained_model_has_no_task_to_predict(small_pretrained_run):
    import bertjax

    with pytest.raises(ValueError, match="is not a fine-tuned model"):
        bertjax.load_model(small_pretrained_run).predict(["hello"])


def test_every_family_predicts_its_training_files_format_as_the_api_does(runs, tmp_path):
    """batch_predict (launch/predict.py's engine) on the CoNLL, SQuAD JSON and JSONL files the
    runs evaluated: the same answers as Model.predict, one line per input, in order."""
    import bertjax
    from bertjax.inference import batch_predict

    ner_dir, ner_dev = runs["ner"]
    write_conll(tmp_path / "ner.conll", ner_dev)
    squad_dir, squad_dev = runs["squad"]
    (tmp_path / "qa.json").write_text(json.dumps(squad_json(squad_dev, "v2.0")))
    choice_dir, choice_dev = runs["choice"]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps({"context": c, "choices": o}) + "\n"
                                               for c, o, _ in choice_dev))
    for workdir, path, expected_inputs in (
            (ner_dir, tmp_path / "ner.conll", [tokens for tokens, _ in ner_dev]),
            (squad_dir, tmp_path / "qa.json", [{"id": qid, "question": q, "context": c}
                                               for qid, c, q, _, _ in squad_dev]),
            (choice_dir, tmp_path / "mc.jsonl", [{"context": c, "choices": o} for c, o, _ in choice_dev])):
        model = bertjax.load_model(workdir, batch_size=4)
        family = model.task_info["family"]
        keys = batch_predict.default_keys(family, model.source.data)
        records = list(batch_predict.read_inputs(str(path), family, batch_predict.file_format(str(path), family,
                       "conll" if family == "tagging" else "auto"), keys, model.source.data))
        assert [item for _, item in records] == expected_inputs
        written = []
        summary = batch_predict.predict_all(model, family, records, written.append)
        assert summary["predicted"] == len(expected_inputs) and written == model.predict(expected_inputs)


def test_a_model_whose_outputs_are_not_finite_stops_every_family(runs, minilm_classifier_run, small_pretrained_run):
    """Weights gone NaN (a run that diverged): tagging's argmax read its NaN logits as tag 0 and
    span QA's candidates as "no answer", each written with exit 0 (a review); classification's
    and choice's NaN probabilities came back from Python as numbers. Every family, fill-mask
    and features now raise at the network's output."""
    import jax

    import bertjax
    from bertjax.inference import engine

    def broken(model, head):
        params = model.params
        params[head] = jax.tree.map(lambda x: x * np.float32("nan"), params[head])
        return engine.Model(model.source, params, model.tokenizer, model.bert, model.max_seq_length,
                            model.batch_size, model.mesh)

    inputs = {"ner": ["Anna lives in Oslo"], "squad": [{"question": "who?", "context": "Anna lives in Oslo"}],
              "choice": [{"context": "Anna lives", "choices": ["in Oslo", "in Bergen"]}]}
    message = r"the model's outputs are not finite \(NaN or infinity\) for 1 of 1 rows: its weights are broken"
    for name, given in inputs.items():
        model = bertjax.load_model(runs[name][0], batch_size=4)
        assert model.predict(given)  # finite weights answer
        head = next(head for head in model.heads if head != "bert")
        with pytest.raises(ValueError, match=message):
            broken(model, head).predict(given)
    classifier = broken(bertjax.load_model(minilm_classifier_run, batch_size=4), "bert")
    with pytest.raises(ValueError, match=message):
        classifier.predict(["a fine film"])
    with pytest.raises(ValueError, match=message):
        classifier.features(["a fine film"])
    language_model = broken(bertjax.load_model(small_pretrained_run, batch_size=4), "mlm")
    with pytest.raises(ValueError, match=message):
        language_model.fill_mask(["the [MASK] sat"])


def test_a_byte_level_bpe_models_answers_hold_no_edge_whitespace():
    """A ModernBERT span-QA model's tokenizer has pieces that are only a space ("Ġ"), whose span
    runs up to the next word: an answer ending on one was "||| " (its end past the space) and
    its n-best held both "|||" and "||| " (a review). Answers are cut to their text."""
    import bertjax

    model = bertjax.load_model(os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "hf_modernbert",
                                            "question_answering"))
    contexts = ["x ||| y", "alpha  beta   gamma    delta", "one , two ,  three ;   four", "a\u00a0 b  \t c d  e   f",
                "say\u200b word\u200b here\u200b y\u200b zero\u200b", "\u200bx\u200b\u200by\u00ad z\ufeff w"]
    inputs = [{"question": question, "context": context} for question in ("q1", "q2", "what?", "who is it")
              for context in contexts]
    results = model.predict(inputs)
    assert any(result["answer"] for result in results)
    for given, result in zip(inputs, results):  # (nor a zero-width space, soft hyphen or BOM: a review)
        answer = result["answer"]
        assert answer == answer.strip("\u200b\u00ad\ufeff").strip() and \
            given["context"][result["start"]:result["end"]] == answer, result

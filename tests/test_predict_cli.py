"""launch/predict.py and bertjax/inference/batch_predict.py: inputs read in every format fine-tuning reads
(and lines of text), bad ones named by file:line and skipped or fatal, one JSONL line per
input in input order, the same answers as the Python API."""

import errno
import json
import os
import socket
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
from small_runs import REVIEWS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREDICT = os.path.join(ROOT, "launch", "predict.py")


def _fake(family, **info):
    """What batch_predict.check reads of a model, without loading one."""
    return types.SimpleNamespace(task_info={"family": family, **info}, source=types.SimpleNamespace(path="run"))


def _read(path, family, input_format="auto", warned=None, **keys):
    from bertjax.inference import batch_predict

    chosen = {**batch_predict.default_keys(family, None), **keys}
    return list(batch_predict.read_inputs(str(path), family, batch_predict.file_format(str(path), family,
                                                                                       input_format), chosen,
                                          warned=warned))


def test_a_rows_id_is_read_from_id_idx_or_glues_index(tmp_path):
    """GLUE's test.tsv names its rows "index", which predict's output lines did not carry: a
    file's answers could be joined back only by counting lines (a walkthrough)."""
    from bertjax.inference import batch_predict

    (tmp_path / "test.tsv").write_text("index\tsentence\n0\ta fine film\n1\ta dull one\n")
    (tmp_path / "rows.jsonl").write_text('{"idx": 3, "index": 9, "text": "a"}\n{"id": "x", "idx": 4, "text": "b"}\n')
    for name, keys, want in (("test.tsv", {"text_a": "sentence"}, ["0", "1"]), ("rows.jsonl", {}, ["3", "x"])):
        path, ids = str(tmp_path / name), {}
        chosen = {**batch_predict.default_keys("classification", None), **keys}
        read = list(batch_predict.read_inputs(path, "classification", batch_predict.file_format(path, "classification"),
                                              chosen, ids=ids))
        assert [ids[where] for where, _ in read] == want, ids


def test_every_format_is_read_and_bad_inputs_are_named_by_line(tmp_path):
    from bertjax.inference import batch_predict
    from bertjax.tasks.raw_text import split_pair

    # A blank line is an input (an empty text): output line k answers input line k.
    (tmp_path / "pairs.txt").write_text("a cat ||| a dog\n\nonly one side ||| \nx ||| y ||| z\n")
    records = _read(tmp_path / "pairs.txt", "classification")
    assert records == [(f"{tmp_path}/pairs.txt:{line}", item) for line, item in enumerate(
        ["a cat ||| a dog", "", "only one side |||", "x ||| y ||| z"], start=1)]
    pairs = _fake("classification", pairs=True)
    assert [batch_predict.check(pairs, "classification", item) for _, item in records] == [
        None, "the model was trained on pairs; give 'text_a ||| text_b'", "the second text of the pair is empty", None]
    # A side of characters tokenizers drop is as empty (a walkthrough: read as a single text).
    assert [batch_predict.check(pairs, "classification", item) for item in ("a ||| \u200b", "\u200b ||| b")] == [
        "the second text of the pair is empty", "the first text of the pair is empty"]
    # A file's row with an empty second text is data, read as fine-tuning read it (a review: the
    # model's own dev file was refused by predict).
    (tmp_path / "dev.csv").write_text("text_a,text_b,label\na cat,,1\n")
    [(_, item)] = _read(tmp_path / "dev.csv", "classification")
    assert item == ("a cat", "") and batch_predict.check(pairs, "classification", item) is None
    (tmp_path / "one_column.csv").write_text("text_a,other\na cat,a dog\n")  # a pair model's rows, text_b missing
    [(_, item)] = _read(tmp_path / "one_column.csv", "classification")
    assert batch_predict.check(pairs, "classification", item) == (
        "the model was trained on pairs; this input has no second text (a file's rows: the column --text_b_key names)")
    # Google's rule (extract_features.py): spaces around the separator, the last one splits
    # (span QA: the first, since a context may hold one); at either end it still separates.
    assert [split_pair(text) for text in ("x ||| y ||| z", "a|||b", "a |||", "||| b")] == [
        ("x ||| y", "z"), ("a|||b", None), ("a", ""), ("", "b")]
    assert batch_predict.read_line("who? ||| a ||| b", "squad") == {"question": "who?", "context": "a ||| b"}
    # Answer offsets count from the context as written after "||| " (a review found them off by
    # the spaces the context's start had lost).
    assert batch_predict.read_line("who lives here |||    Bob lives here  ", "squad") == {
        "question": "who lives here", "context": "   Bob lives here"}
    for family in ("squad", "fill_mask"):
        assert batch_predict.check(None, family, batch_predict.read_line("", family)) == \
            "a blank line (this task has no empty input)"
    assert batch_predict.check(_fake("classification", pairs=False), "classification", records[0][1]) == \
        "the model was trained on single texts; give one text (no ' ||| ')"
    # A model that trained on single texts because its training file's text_b column was empty
    # (its config still names the column) reads the same files' rows as single texts.
    single = _fake("classification", pairs=False)
    (tmp_path / "empty_b.csv").write_text("text_a,text_b,label\ngood film,,1\n")
    keys = batch_predict.default_keys("classification", {"text_a_key": "text_a", "text_b_key": "text_b"},
                                      single.task_info)
    [(_, item)] = batch_predict.read_inputs(str(tmp_path / "empty_b.csv"), "classification", "csv", keys)
    assert item == ("good film", None) and batch_predict.check(single, "classification", item) is None
    [(_, named_pair)] = _read(tmp_path / "empty_b.csv", "classification")  # --text_b_key named: refused, saying so
    assert batch_predict.check(single, "classification", named_pair) == (
        "the model was trained on single texts; this input has a second text (a file's rows: leave --text_b_key out)")

    # A column the user named (--text_b_key) and the row lacks: an error, never a single text
    # (a Hugging Face classifier does not say whether it reads pairs, so nothing else would say).
    (tmp_path / "mrpc.csv").write_text("sentence1,sentence_2\nA man sings.,A man is singing.\n")
    chosen = {**batch_predict.default_keys("classification", None), "text_a": "sentence1", "text_b": "sentence2"}
    [(_, error)] = batch_predict.read_inputs(str(tmp_path / "mrpc.csv"), "classification", "csv", chosen,
                                             required=["text_a", "text_b"])
    assert str(error).startswith("no 'sentence2' column (the task reads 'sentence1', and 'sentence2' for a pair;")
    [(_, item)] = batch_predict.read_inputs(str(tmp_path / "mrpc.csv"), "classification", "csv", chosen)
    assert item == ("A man sings.", None)  # unnamed, the second text is optional
    (tmp_path / "rows.csv").write_text("review,stars\ngood film,5\n")
    [(where, item)] = _read(tmp_path / "rows.csv", "classification", text_a="review", text_b="")
    assert (where, item) == (f"{tmp_path}/rows.csv:2", ("good film", None))
    [(_, missing)] = _read(tmp_path / "rows.csv", "classification")
    assert batch_predict.check(pairs, "classification", missing) == \
        "no 'text_a' column (the task reads 'text_a', and 'text_b' for a pair; the row has ['review', 'stars']; " \
        "--text_a_key names another)"

    (tmp_path / "tab.jsonl").write_text('{"text": "a\tb"}\n')
    [(where, error)] = _read(tmp_path / "tab.jsonl", "tagging")  # an error in the line's place
    assert where == f"{tmp_path}/tab.jsonl:1" and str(error) == "not JSON (Invalid control character at column 12)"
    (tmp_path / "surrogate.jsonl").write_text('{"text": "ok"}\n{"text": "a \\ud800 b"}\n')
    (_, fine), (where, error) = _read(tmp_path / "surrogate.jsonl", "tagging")
    assert where == f"{tmp_path}/surrogate.jsonl:2" and str(error).startswith("a lone surrogate ('\\ud800') in a")
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": 7, "question": "who?", "context": "anna."}) + "\n"
                                       + json.dumps({"question": "who?", "context": " "}) + "\n")
    records = _read(tmp_path / "qa.jsonl", "squad")
    assert records[0][1] == {"id": "7", "question": "who?", "context": "anna."}
    assert [batch_predict.check(_fake("squad"), "squad", item) for _, item in records] == [None, "an empty context"]
    (tmp_path / "qa.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": "anna lives in oslo.", "qas": [
        {"id": "q1", "question": "where?"}, {"id": "q2", "question": "who?"}]}]}]}))
    assert _read(tmp_path / "qa.json", "squad") == [
        (f"{tmp_path}/qa.json: id q1", {"id": "q1", "question": "where?", "context": "anna lives in oslo."}),
        (f"{tmp_path}/qa.json: id q2", {"id": "q2", "question": "who?", "context": "anna lives in oslo."})]

    (tmp_path / "ner.conll").write_text("-DOCSTART- O\n\nAnna B-PER\nsings O\n\nOslo B-LOC\n")
    assert _read(tmp_path / "ner.conll", "tagging") == [(f"{tmp_path}/ner.conll:3", ["Anna", "sings"]),
                                                       (f"{tmp_path}/ner.conll:6", ["Oslo"])]
    (tmp_path / "pos.conll").write_text("EU NNP B-NP\nrejects VBZ I-VP\n")  # other columns: not read as tags
    assert _read(tmp_path / "pos.conll", "tagging") == [(f"{tmp_path}/pos.conll:1", ["EU", "rejects"])]
    # A CoNLL file named .txt (as the fine-tuning configs name theirs) read as one sentence a
    # line would tag "EU B-ORG" as four words, and a blank line as a sentence: refused.
    # So would an untagged test file (each word a sentence), or one of words and POS tags.
    for name, text in (("test.txt", "-DOCSTART- O\n\nEU B-ORG\nrejects O\n"), ("dev", "EU NNP B-NP\nsays VBZ O\n"),
                       ("untagged.txt", "\nEU\nrejects\nGerman\n\n\nPeter\nBlackburn\n"),
                       ("long.txt", "word\n" * 40 + "\nPeter\n"),  # a first sentence past 20 words
                       ("pos.txt", "EU NNP\nrejects VBZ\n\nPeter NNP\n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=rf"{name} looks like conll, not one input a line: pass "
                                             r"--input_format=conll \(or --input_format=text"):
            batch_predict.file_format(str(tmp_path / name), "tagging")
        assert batch_predict.file_format(str(tmp_path / name), "tagging", "text") == "text"
    # Sentences a line, some of them a word or blank, are sentences.
    for name, text in (("words.txt", "Paris\nLondon\nOslo\n"), ("spaced.txt", "Anna sings\n\nin Oslo today\n"),
                       ("singles.txt", "Paris\n\nLondon\n")):
        (tmp_path / name).write_text(text)
        assert batch_predict.file_format(str(tmp_path / name), "tagging") == "text"
    # JSON Lines in a .txt would be tagged token by token ({, ", text, ...): refused as every family refuses it.
    (tmp_path / "rows.txt").write_text(json.dumps({"text": "John lives in Paris"}) + "\n")
    for family in ("tagging", "squad"):
        with pytest.raises(ValueError, match=r"rows.txt looks like jsonl, not one input a line"):
            batch_predict.file_format(str(tmp_path / "rows.txt"), family)
    # Word lists a line, blank lines between: JSON Lines too (blocks of lines of one width, as CoNLL's).
    (tmp_path / "words.txt").write_text('{"words": ["EU"]}\n{"words": ["rejects"]}\n\n{"words": ["Peter"]}\n')
    with pytest.raises(ValueError, match=r"words.txt looks like jsonl, not one input a line"):
        batch_predict.file_format(str(tmp_path / "words.txt"), "tagging")
    # As JSON Lines are written too: a byte order mark first, U+2028 unescaped, CRLF endings, a
    # first line longer than the 64 KiB read first (each passed for text lines: a review).
    for name, rows in (("bom.txt", "\ufeff{}\n{}\n"), ("separator.txt", '{"text": "a\u2028b"}\n{}\n'),
                       ("windows.txt", "{}\r\n{}\r\n"), ("long.txt", json.dumps({"text": "w " * 50000}) + "\n{}"),
                       # as Python's json writes a missing float, and a key twice: JSON Lines to refuse, not text
                       ("nan.txt", '{"text": "a", "score": NaN}\n{"text": "b", "text": "c"}\n')):
        (tmp_path / name).write_text(rows, newline="")
        with pytest.raises(ValueError, match=rf"{name} looks like jsonl, not one input a line"):
            batch_predict.file_format(str(tmp_path / name), "classification")
    # A CSV or TSV under a header naming the model's text column: its header and its rows' ids
    # were classified as text (a walkthrough). A sentence with a comma is no header.
    keys = {"text_a": "review", "text_b": ""}
    for name, rows, written_in in (("rows.csv.txt", 'id,"review"\nt0,a fox\n', "csv"),
                                   ("rows.tsv.txt", "review\tid\na fox\tt0\n", "tsv")):
        (tmp_path / name).write_text(rows)
        with pytest.raises(ValueError, match=rf"{name} looks like {written_in}, not one input a line: pass "
                                             rf"--input_format={written_in}"):
            batch_predict.file_format(str(tmp_path / name), "classification", keys=keys)
        assert batch_predict.file_format(str(tmp_path / name), "classification", "text", keys) == "text"
    (tmp_path / "prose.txt").write_text("A fox, a cat and a dog.\nreviews, mostly good\n")
    assert batch_predict.file_format(str(tmp_path / "prose.txt"), "classification", keys=keys) == "text"
    # A sentence that starts with the column's name and a comma is text (a review: refused as
    # CSV, and reading it as CSV failed every row).
    (tmp_path / "mask.txt").write_text("review, images and [MASK] are supported.\na fox\n")
    assert batch_predict.file_format(str(tmp_path / "mask.txt"), "classification", keys=keys) == "text"
    # A header over rows of other field counts (a quoted field's lines, a loose comma) is one
    # all the same, as is pandas' empty index column.
    for name, rows in (("indexed.csv.txt", ",review,label\n0,a fox,1\n"),
                       ("quoted.csv.txt", 'review,label\n"A great film,\nreally great",1\n'),
                       ("loose.csv.txt", "review,label\nA great, great film,1\n")):
        (tmp_path / name).write_text(rows)
        with pytest.raises(ValueError, match=rf"{name} looks like csv"):
            batch_predict.file_format(str(tmp_path / name), "classification", keys=keys)
    (tmp_path / "piped.txt").write_text("id,review\nt0,a fox\n")  # as a pipe's lines are checked, in reading
    lines = batch_predict.read_inputs(str(tmp_path / "piped.txt"), "classification", "text", keys, check_lines=True)
    with pytest.raises(ValueError, match=r"piped.txt looks like csv"):
        next(lines)
    # A pipe (stdin, <(zcat ...)) is never read ahead: its first lines would be lost to the predictions.
    import threading

    os.mkfifo(tmp_path / "pipe")
    writer = threading.Thread(target=lambda: (tmp_path / "pipe").write_text("EU B-ORG\nrejects O\n"), daemon=True)
    writer.start()
    assert batch_predict.file_format(str(tmp_path / "pipe"), "tagging") == "text"
    assert (tmp_path / "pipe").read_text() == "EU B-ORG\nrejects O\n"
    writer.join(10)
    (tmp_path / "sentences.txt").write_text("EU rejects German call\nPeter Blackburn O\n")
    assert batch_predict.file_format(str(tmp_path / "sentences.txt"), "tagging") == "text"
    (tmp_path / "choice.jsonl").write_text(json.dumps({"context": "x", "choices": ["a"]}) + "\n")
    [(_, item)] = _read(tmp_path / "choice.jsonl", "choice")
    assert "at least 2 texts" in batch_predict.check(_fake("choice"), "choice", item)
    # Multiple choice has no one-line form: stdin (or a .txt file) is JSONL for it, text for the others.
    assert [batch_predict.file_format(path, family) for path in ("", "in.txt") for family in ("choice", "squad")] \
        == ["jsonl", "text", "jsonl", "text"]
    # A format of another family's: refused, never read as something else.
    # Nor is text for multiple choice, whose rows are no line of text (a review: each line failed).
    for family, chosen, reads in (("fill_mask", "conll", "text, csv, tsv, jsonl"),
                                  ("tagging", "squad_json", "text, csv, tsv, jsonl, conll"),
                                  ("choice", "text", "csv, tsv, jsonl")):
        with pytest.raises(ValueError, match=f"--input_format={chosen}: a {family} model reads {reads}$"):
            batch_predict.file_format("in.txt", family, chosen)
    # A line that is not UTF-8 is one bad input, skippable like any other (issue 46, 11).
    (tmp_path / "latin1.txt").write_bytes(b"good film\ncaf\xe9 ok\nbad film\n")
    records = _read(tmp_path / "latin1.txt", "classification")
    assert [batch_predict.check(_fake("classification"), "classification", item) for _, item in records] == [
        None, "not UTF-8 (byte 0xe9 at column 4); save the file as UTF-8", None]
    # A RoBERTa-style tokenizer names its mask "<mask>": [MASK] marks it all the same, which a
    # text written with the tokenizer's own name was not told (a walkthrough).
    (tmp_path / "masks.txt").write_text("the [MASK] sat .\nno mask\nthe [mask] sat .\nthe <mask> sat .\n")
    # A JSONL row's text that is no text: named as the other families name it (a walkthrough: "no
    # [MASK] in 'None'").
    (tmp_path / "masks.jsonl").write_text('{"text": null}\n{"text": 5}\n{"text": ["a [MASK]"]}\n')
    assert [str(item) for _, item in batch_predict.read_inputs(
        str(tmp_path / "masks.jsonl"), "fill_mask", "jsonl", batch_predict.default_keys("fill_mask", None))] == [
        "column 'text' holds None, not text (the text)", "column 'text' holds 5, not text (the text)",
        "column 'text' holds ['a [MASK]'], not text (the text)"]
    model = types.SimpleNamespace(tokenizer=types.SimpleNamespace(mask_id=0, id_to_token=["<mask>"].__getitem__))
    assert [batch_predict.check(model, "fill_mask", item) for _, item in _read(tmp_path / "masks.txt", "fill_mask")] \
        == [None, "no [MASK] in 'no mask'",
            "no [MASK] in 'the [mask] sat .' ([MASK] is matched in capitals: '[mask]' is text)",
            "no [MASK] in 'the <mask> sat .' (write the mask as [MASK], whatever the tokenizer names its own: "
            "'<mask>')"]


def test_a_stray_carriage_return_does_not_start_another_input(tmp_path):
    """A lone \\r inside a line (common in scraped text) made two inputs of one line, so every
    later output line answered the input before it (a review): a text file of inputs ends
    lines at \\n and \\r\\n only, as wc -l and the original's readline; CSV keeps the csv
    module's reading."""
    from bertjax.inference import feature_files

    (tmp_path / "in.txt").write_bytes(b"first half\rsecond half\nnext line\r\nlast\n")
    records = _read(tmp_path / "in.txt", "classification")
    assert records == [(f"{tmp_path}/in.txt:1", "first half\rsecond half"), (f"{tmp_path}/in.txt:2", "next line"),
                       (f"{tmp_path}/in.txt:3", "last")]
    assert list(feature_files.read_inputs(str(tmp_path / "in.txt"))) == [("first half\rsecond half", None),
                                                                         ("next line", None), ("last", None)]
    (tmp_path / "in.jsonl").write_bytes(b'{"text": "x",\r"label": 1}\n{"text": "y"}\r\n')  # JSON's whitespace
    assert _read(tmp_path / "in.jsonl", "classification", text_a="text") == [
        (f"{tmp_path}/in.jsonl:1", ("x", None)), (f"{tmp_path}/in.jsonl:2", ("y", None))]
    (tmp_path / "in.csv").write_bytes(b"text\r\na\rb\r\n")  # the csv module: \\r ends a row
    assert [row for _, row in _read(tmp_path / "in.csv", "classification", text_a="text")] == [("a", None), ("b", None)]


def test_predict_all_keeps_input_order_across_chunks_and_skips_or_fails(minilm_classifier_run, monkeypatch):
    import bertjax
    from bertjax.inference import batch_predict

    model = bertjax.load_model(minilm_classifier_run, batch_size=2)
    records = [(f"f.txt:{i}", text) for i, (text, _) in enumerate(REVIEWS, start=1)]
    records.insert(2, ("f.txt:9", "a ||| b"))
    monkeypatch.setattr(batch_predict, "CHUNK_INPUTS", 2)
    written, seen = [], []
    summary = batch_predict.predict_all(model, "classification", records, written.append, "skip",
                                        progress=lambda done, total: seen.append((done, total)))
    assert seen == [(2, 5), (4, 5), (5, 5)]
    assert summary == {"inputs": 5, "predicted": 4, "skipped": 1, "errors": [
        ("f.txt:9", "the model was trained on single texts; give one text (no ' ||| ')")], "truncated": 0}
    expected = model.predict([text for text, _ in REVIEWS])
    # (equal to rounding: a chunk's last, smaller batch multiplies fewer rows at once)
    assert [row["label"] for row in written[:2] + written[3:]] == [row["label"] for row in expected]
    np.testing.assert_allclose([row["probability"] for row in written[:2] + written[3:]],
                               [row["probability"] for row in expected], atol=1e-6)
    assert written[2] == {"error": summary["errors"][0][1], "where": "f.txt:9"}
    with pytest.raises(ValueError, match=r"^f.txt:9: the model was trained on single texts"):
        batch_predict.predict_all(model, "classification", records, written.append, "fail")
    # --text values arrive as Python holds command-line bytes: not UTF-8 is that value's bad input.
    given = ["a fine film", b"caf\xe9 noir".decode("utf-8", "surrogateescape"), "caf\u00e9 noir"]
    records = batch_predict.command_line_inputs(given, "classification")
    assert [where for where, _ in records] == ["--text #1", "--text #2", "--text #3"]
    assert records[2][1] == "caf\u00e9 noir" and isinstance(records[1][1], ValueError)
    with pytest.raises(ValueError, match=r"^--text #2: not UTF-8 \(byte 0xe9 at byte 4\); give UTF-8 text; --on_error"):
        batch_predict.predict_all(model, "classification", records, written.append, "fail")


def test_inputs_are_predicted_a_chunk_at_a_time_from_a_stream(minilm_classifier_run, monkeypatch, tmp_path):
    """predict_all held every input in memory before its first prediction (a review): a
    stream's chunk is predicted and written before the next is read; a bad input fails a
    stream at its own chunk, a file before the first prediction; skips are counted, the first
    few named."""
    import bertjax
    from bertjax.inference import batch_predict

    model = bertjax.load_model(minilm_classifier_run, batch_size=2)
    monkeypatch.setattr(batch_predict, "CHUNK_INPUTS", 2)
    texts = [text for text, _ in REVIEWS] * 2  # 8 inputs: 4 chunks
    pulled, pulled_at_write = [], []

    def stream(bad_at=None):
        for i, text in enumerate(texts, start=1):
            pulled.append(i)
            yield f"-:{i}", ValueError("a bad line") if i == bad_at else text

    written = []
    summary = batch_predict.predict_all(model, "classification", stream(), lambda row: (
        written.append(row), pulled_at_write.append(len(pulled))), "fail")
    assert summary == {"inputs": 8, "predicted": 8, "skipped": 0, "errors": [], "truncated": 0}
    assert pulled_at_write == [2, 2, 4, 4, 6, 6, 8, 8]  # one chunk read ahead of its lines, no more
    assert written == model.predict(texts)
    written, pulled[:] = [], []
    with pytest.raises(ValueError, match=r"^-:6: a bad line; --on_error=skip"):
        batch_predict.predict_all(model, "classification", stream(bad_at=6), written.append, "fail")
    assert len(written) == 4 and pulled == [1, 2, 3, 4, 5, 6]  # the two chunks before it are out
    written = []
    with pytest.raises(ValueError, match=r"^-:6: a bad line; --on_error=skip"):
        batch_predict.predict_all(model, "classification", list(stream(bad_at=6)), written.append, "fail")
    assert written == []  # a list (or a Reread file) is checked whole first
    reads = []

    def shrinking():  # a file whose second reading (the prediction) finds 3 of its 4 lines
        reads.append(1)
        return iter([(f"-:{i}", text) for i, text in enumerate(texts[:4 if len(reads) == 1 else 3], start=1)])

    with pytest.raises(ValueError, match=r"held 4 inputs when checked and 3 when predicted; did it change"):
        batch_predict.predict_all(model, "classification", batch_predict.Reread(shrinking), [].append, "skip")
    # A file's ids, read whole by the check before the first prediction, were all held until
    # their lines were written (a walkthrough): memory holds a chunk's, in both passes.
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"id": f"r{i}", "text_a": text}) + "\n"
                                                 for i, text in enumerate(texts)))
    for on_error in ("fail", "skip"):
        ids, held, written = {}, [], []

        def read():
            for record in batch_predict.read_inputs(str(tmp_path / "rows.jsonl"), "classification", "jsonl",
                                                    batch_predict.default_keys("classification", None), ids=ids):
                held.append(len(ids))
                yield record

        batch_predict.predict_all(model, "classification", batch_predict.Reread(read), written.append, on_error,
                                  ids=ids)
        assert [row["id"] for row in written] == [f"r{i}" for i in range(8)]
        assert len(held) == 16 and max(held) <= 2, held
    monkeypatch.setattr(batch_predict, "SHOWN_ERRORS", 2)
    bad = [(f"-:{i}", ValueError(f"bad {i}")) for i in range(1, 6)]
    summary = batch_predict.predict_all(model, "classification", iter(bad), written.append, "skip")
    assert summary == {"inputs": 5, "predicted": 0, "skipped": 5, "errors": [("-:1", "bad 1"), ("-:2", "bad 2")],
                       "truncated": 0}


def test_an_output_folder_that_cannot_be_written_fails_before_the_model_loads(tmp_path, monkeypatch):
    """A read-only folder failed at the first batch's write, after the input was read and the
    model loaded, with an OS error naming the temporary file (a walkthrough): the launcher makes
    the writer first, and the writer opens its file at once, naming the folder."""
    from bertjax.inference import batch_predict
    from bertjax.runtime import fileio

    def read_only(path, mode="r"):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

    monkeypatch.setattr(fileio, "open_file", read_only)
    with pytest.raises(ValueError, match=rf"^cannot write in {tmp_path} \(Read-only file system\)$"):
        batch_predict.jsonl_writer(str(tmp_path / "out.jsonl"))
    assert os.listdir(tmp_path) == []


def test_a_full_disk_is_named_and_leaves_no_half_file(tmp_path):
    """A full disk was '[Errno 28] No space left on device', naming no file (a walkthrough):
    the error names --output, and neither a half file nor a changed earlier one is left."""
    from small_runs import on_a_full_disk

    out = tmp_path / "out.jsonl"
    out.write_text("earlier\n")
    code = textwrap.dedent("""
        import sys
        from bertjax.inference import batch_predict

        write, close = batch_predict.jsonl_writer(sys.argv[1])
        try:
            for _ in range(10_000):
                write({"label": "good", "probability": 0.5})
        except ValueError as e:
            print(e)
        close(False)  # as the launcher's finally does
        write, close = batch_predict.jsonl_writer(sys.argv[1])
        write({"label": "x" * 6000})  # (buffered: the file refuses it when it is closed)
        try:
            close(True)
        except ValueError as e:
            print(e)
    """)
    result = on_a_full_disk(["-c", code, str(out)], limit=1 << 12)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [f"--output={out}: cannot write (File too large)",
                                          f"--output={out}: cannot write (File too large); nothing of it was left"]
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"] and out.read_text() == "earlier\n"


def test_predictions_reach_their_file_whole_or_not_at_all(tmp_path):
    """JSONL lines go to NAME.tmp-<host>-<pid>, renamed at the end (issue 46, 3): a run that fails
    midway leaves no half file and an earlier NAME as it was; a NAME another run wrote while
    this one ran is kept (two runs shared NAME.tmp and the later replaced the earlier: a review)."""
    from bertjax.inference import batch_predict

    out = tmp_path / "out.jsonl"
    out.write_text("earlier\n")
    write, close = batch_predict.jsonl_writer(str(out))
    write({"label": "good"})
    assert out.read_text() == "earlier\n"
    close(False)  # failed midway
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"] and out.read_text() == "earlier\n"
    write, close = batch_predict.jsonl_writer(str(out))
    write({"label": "good"}), write({"value": 1.5})
    mine = f"out.jsonl.tmp-{socket.gethostname()}-{os.getpid()}"
    with pytest.raises(ValueError, match=r"out.jsonl was written by another run while this one ran; kept, and this "
                                         rf"run's predictions are in .*{mine}"):
        close(True)
    assert out.read_text() == "earlier\n"
    assert (tmp_path / mine).read_text() == '{"label": "good"}\n{"value": 1.5}\n'
    os.remove(tmp_path / mine)
    out.unlink()
    write, close = batch_predict.jsonl_writer(str(out))
    write({"label": "good"}), write({"value": 1.5})
    close(True)
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"]
    assert out.read_text() == '{"label": "good"}\n{"value": 1.5}\n'
    out.unlink()
    write, close = batch_predict.jsonl_writer(str(out))
    close(False)  # failed before its first line: nothing written
    assert sorted(os.listdir(tmp_path)) == []
    write, close = batch_predict.jsonl_writer(str(out))
    close(True)  # no inputs: an empty file
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"] and out.read_text() == ""
    # A run killed outright (kill -9, out of memory) left its NAME.tmp for good: removed by the next
    # run, said; a running process's is left (a walkthrough; extract_features already did this).
    out.unlink()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"out.jsonl.tmp-{socket.gethostname()}-{dead.pid}").write_text('{"label": "go')
    alive = tmp_path / f"out.jsonl.tmp-{socket.gethostname()}-{os.getppid()}"
    alive.write_text("")
    said = []
    write, close = batch_predict.jsonl_writer(str(out), log=said.append)
    close(False)
    assert said == [f"removed {tmp_path}/out.jsonl.tmp-{socket.gethostname()}-{dead.pid}, left by a killed run "
                    f"(process {dead.pid}, gone)"] and sorted(os.listdir(tmp_path)) == [alive.name]
    alive.unlink()
    # A model whose outputs went NaN: JSON has none (a strict reader refuses the line) and its
    # label was an argmax over NaNs; the run fails, writing nothing (a review: exit 0, 'NaN').
    write, close = batch_predict.jsonl_writer(str(out))
    write({"label": "good", "probability": 0.9})
    with pytest.raises(ValueError, match=r"the model answered with a number that is not finite \(NaN or infinity\): "
                                         r"\{'label': 'bad', 'probability': nan\}; its weights are broken"):
        write({"label": "bad", "probability": float("nan")})
    close(False)
    assert sorted(os.listdir(tmp_path)) == []


def test_a_reader_that_leaves_ends_the_launcher_quietly(tmp_path):
    """`predict ... | head -1`: the closed pipe ends the run with the shells' SIGPIPE code and no
    error line (a review: 'error: [Errno 32] Broken pipe', exit 2)."""
    script = tmp_path / "lines.py"
    script.write_text("import sys\nsys.path.insert(0, %r)\nfrom bertjax.runtime import cli\n"
                      "def main(argv):\n    for i in range(200000):\n        print(i)\n"
                      "cli.run(main)\n" % ROOT)
    result = subprocess.run(f"{sys.executable} {script} | head -1", shell=True, capture_output=True, text=True,
                            executable="/bin/bash", env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
    assert result.stdout == "0\n" and "error" not in result.stderr and "Traceback" not in result.stderr
    status = subprocess.run(f"set -o pipefail; {sys.executable} {script} | head -1 > /dev/null", shell=True,
                            executable="/bin/bash", env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
    assert status.returncode == 141
    # A broken pipe that is not stdout's (a remote file's connection) stays an error.
    script.write_text("import sys\nsys.path.insert(0, %r)\nfrom bertjax.runtime import cli\n"
                      "def main(argv):\n    raise BrokenPipeError(32, 'Broken pipe')\n"
                      "cli.run(main)\n" % ROOT)
    other = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert other.returncode == 2 and "error: " in other.stderr and "Broken pipe" in other.stderr


def test_a_fill_mask_input_whose_masks_are_cut_off_is_named_and_skipped(small_pretrained_run):
    """Every [MASK] past max_seq_length tokens: that input's own line is named, the others are
    predicted (found by a review: the error named the wrong input and ignored skip)."""
    import bertjax
    from bertjax.inference import batch_predict

    model = bertjax.load_model(small_pretrained_run, max_seq_length=16)
    records = [("f.txt:1", "the [MASK] sat ."), ("f.txt:2", "word " * 30 + "[MASK]"), ("f.txt:3", "a [MASK] .")]
    assert model.mask_counts([text for _, text in records]).tolist() == [1, 0, 1]
    written = []
    summary = batch_predict.predict_all(model, "fill_mask", records, written.append, "skip", top_k=2)
    why = ("no [MASK] within the first 16 tokens (the text is truncated there; raise --max_seq_length or "
           "shorten it)")
    assert summary == {"inputs": 3, "predicted": 2, "skipped": 1, "errors": [("f.txt:2", why)], "truncated": 0}
    assert written[1] == {"error": why, "where": "f.txt:2"}
    assert [written[0]["masks"], written[2]["masks"]] == model.fill_mask(["the [MASK] sat .", "a [MASK] ."], top_k=2)
    # Every [MASK] is answered or named (issue 46, 6): one entry per mask, None where truncation cut it.
    some_cut = "a [MASK] " + "word " * 30 + "[MASK] end"
    written = []
    summary = batch_predict.predict_all(model, "fill_mask", [("f.txt:4", some_cut)], written.append, top_k=2)
    assert summary["truncated"] == 1 and len(written[0]["masks"]) == 2
    assert written[0]["masks"][1] is None and written[0]["truncated"]
    assert [sorted(entry) for entry in written[0]["masks"][0]] == [["probability", "text", "token", "token_id"]] * 2
    # Context cut after the only [MASK]: answered, and still said to be truncated (the model
    # never saw the rest); a text that fits says nothing.
    context_cut = "a [MASK] " + "word " * 30
    written = []
    batch_predict.predict_all(model, "fill_mask", [("f.txt:5", context_cut), ("f.txt:6", "a [MASK] .")],
                              written.append, top_k=2)
    assert written[0]["truncated"] is True and written[0]["masks"][0] is not None and "truncated" not in written[1]
    assert [row["masks"] for row in written] == model.fill_mask([context_cut, "a [MASK] ."], top_k=2)
    pair = model.fill_mask(["[MASK] " + "word " * 30 + "[MASK] ||| the [MASK] ."], top_k=2)[0]
    assert [entry is None for entry in pair] == [False, True, False]  # a's end was cut, b's mask kept
    # A pre-training run's own length is the default: positions past it were never trained.
    from bertjax.inference import model_source

    trained = model_source.resolve(small_pretrained_run).run_config["data"]["max_seq_length"]
    assert trained < 512 and bertjax.load_model(small_pretrained_run).max_seq_length == trained
    with pytest.raises(ValueError, match=r"^f.txt:2: no \[MASK\] within the first 16 tokens"):
        batch_predict.predict_all(model, "fill_mask", records, written.append, "fail")


def test_a_text_file_with_old_mac_line_endings_is_one_input_a_line(tmp_path):
    """A file whose lines end at a lone \\r was one input, three sentences under one prediction
    (a review); a stray \\r inside a file of \\n lines stays inside its line."""
    (tmp_path / "mac.txt").write_bytes(b"great fun\rboring film\rawful plot\r")
    assert _read(tmp_path / "mac.txt", "classification") == [
        (f"{tmp_path}/mac.txt:{k}", text) for k, text in enumerate(["great fun", "boring film", "awful plot"], 1)]
    (tmp_path / "stray.txt").write_bytes(b"a\rb\nc\n")
    assert [item for _, item in _read(tmp_path / "stray.txt", "classification")] == ["a\rb", "c"]


@pytest.mark.parametrize("name, content, bad", [
    ("rows.csv", b'text\n"a good film"\ngreat, fun\n\xff broken\nx,"y"z\nlast one\n', {3, 4, 5}),
    ("rows.tsv", b"text\na good film\ngreat\tfun\n\xff broken\nlast one\n", {3, 4}),
    ("rows.jsonl", b'{"text": "a good film"}\n{"text": "broken"\n\xff\n{"text": "last one"}\n', {2, 3}),
])
def test_a_row_that_does_not_read_is_an_error_in_its_place_and_the_rest_are_read(tmp_path, name, content, bad):
    """A CSV row with a stray comma, bad quoting, a JSONL line cut short or a line that is not
    UTF-8 stopped the whole run, with --on_error=skip too (a review): each is an error in its
    place, named by its line, and the rows after it are read."""
    (tmp_path / name).write_bytes(content)
    records = _read(tmp_path / name, "classification", text_a="text")
    errors = {int(where.rsplit(":", 1)[1]) for where, item in records if isinstance(item, ValueError)}
    assert errors == bad, records
    assert records[0][1] == ("a good film", None) and records[-1][1] == ("last one", None)
    jsonl_error = next(item for _, item in records if isinstance(item, ValueError))
    assert "JSON document over several lines" not in str(jsonl_error)  # line 2 is no document's start


def _predict(*args, stdin=None):
    return subprocess.run([sys.executable, PREDICT, *args], input=stdin, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})


def test_the_command_line_predicts_a_jsonl_file_and_names_bad_lines(minilm_classifier_run, launchers, tmp_path):
    import bertjax

    def forked_predict(*args):  # forked (tests/conftest.py): five launches of the same launcher
        return launchers.run([PREDICT, *args])

    # (a row's id comes with its answer, as fine-tuning's predictions name rows: a review found no
    # way to join a file's answers back but counting its lines)
    rows = [{"review": text, **({"id": f"r{i}"} if i < 2 else {})} for i, (text, _) in enumerate(REVIEWS)]
    rows.append({"text": "no review column", "idx": 9})
    (tmp_path / "new.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = forked_predict(f"--model={minilm_classifier_run}", f"--input={tmp_path}/new.jsonl",
                      f"--output={tmp_path}/o.jsonl", "--on_error=skip")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [line.get("id") for line in lines] == ["r0", "r1", None, None, "9"]
    expected = bertjax.load_model(minilm_classifier_run).predict([text for text, _ in REVIEWS])
    assert [line["label"] for line in lines[:4]] == [label for _, label in REVIEWS]
    for line, want in zip(lines, expected):
        assert line["probabilities"] == pytest.approx(want["probabilities"], abs=1e-5)
    why = "no 'review' column (the task reads 'review'; the row has ['idx', 'text']; --text_a_key names another)"
    assert lines[4] == {"id": "9", "error": why, "where": f"{tmp_path}/new.jsonl:5"}
    assert "skipped 1 of 5 inputs" in result.stderr

    failed = forked_predict(f"--model={minilm_classifier_run}", f"--input={tmp_path}/new.jsonl",
                      f"--output={tmp_path}/f.jsonl")
    assert failed.returncode == 2 and failed.stderr.strip().splitlines() == [
        f"error: {tmp_path}/new.jsonl:5: {why}; --on_error=skip writes an error line for each and goes on"]
    assert not (tmp_path / "f.jsonl").exists()
    before = (tmp_path / "new.jsonl").read_bytes()
    onto_input = forked_predict(f"--model={minilm_classifier_run}", f"--input={tmp_path}/new.jsonl",
                          f"--output={tmp_path}/new.jsonl", "--on_error=skip")
    assert onto_input.returncode == 2 and onto_input.stderr.strip().splitlines() == [
        f"error: --output={tmp_path}/new.jsonl is the input file; give another name (it would be overwritten)"]
    assert (tmp_path / "new.jsonl").read_bytes() == before
    nowhere = forked_predict(f"--model={minilm_classifier_run}", f"--input={tmp_path}/new.jsonl",
                       f"--output={tmp_path}/nodir/o.jsonl")
    assert nowhere.returncode == 2 and nowhere.stderr.strip().splitlines() == [
        f"error: --output={tmp_path}/nodir/o.jsonl: no folder {tmp_path}/nodir to write it in"]
    if sys.platform == "linux":  # a folder no file can be made in, even by root (a walkthrough: an OS error late)
        unwritable = forked_predict(f"--model={minilm_classifier_run}", f"--input={tmp_path}/new.jsonl",
                                    "--output=/proc/o.jsonl")
        assert unwritable.returncode == 2 and unwritable.stderr.strip().splitlines() == [
            "error: --output=/proc/o.jsonl: cannot write in /proc (No such file or directory)"]
    written = (tmp_path / "o.jsonl").read_bytes()
    again = forked_predict(f"--model={minilm_classifier_run}", f"--text={REVIEWS[0][0]}", f"--output={tmp_path}/o.jsonl")
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"error: --output={tmp_path}/o.jsonl exists; remove it or give another name"]
    assert (tmp_path / "o.jsonl").read_bytes() == written
    # --output=- is stdout, as --input=- is stdin (a review: a file named "-", refused as existing next time)
    dash = launchers.run([PREDICT, f"--model={minilm_classifier_run}", f"--text={REVIEWS[0][0]}", "--output=-"],
                         cwd=tmp_path)
    assert dash.returncode == 0 and json.loads(dash.stdout)["label"] == lines[0]["label"], dash.stderr
    assert not (tmp_path / "-").exists()
    # Flags that would change nothing for this model or input are refused, not ignored (a review).
    for flags, error in (
            (["--top_k=1"], "--top_k: the tokens per [MASK] of --task=fill_mask, not a classification model's"),
            ([f"--input={tmp_path}/new.jsonl", "--text_b_key=other"],
             "--text_b_key=other: this classification model reads no text_b (its inputs: text_a)"),
            (["--input_format=csv", "--text_a_key=review"], "--input_format, --text_a_key: how to read --input (or "
                                                             "stdin), not --text")):
        ignored = forked_predict(f"--model={minilm_classifier_run}", *flags,
                                 *([] if any(f.startswith("--input=") for f in flags) else ["--text=fun"]))
        assert ignored.returncode == 2 and ignored.stderr.strip().splitlines() == [f"error: {error}"]
    # An input cut to the model's length is counted at the end, not only marked in its line.
    (tmp_path / "long.txt").write_text("a fine film\n" + "a fine film " * 20 + "\n")
    cut = forked_predict(f"--model={minilm_classifier_run}", f"--input={tmp_path}/long.txt",
                         f"--output={tmp_path}/long.jsonl")
    assert cut.returncode == 0 and cut.stderr.strip().splitlines()[-1].endswith(
        '; 1 input was truncated to fit the model (marked "truncated": true)')
    assert [json.loads(line).get("truncated") for line in (tmp_path / "long.jsonl").read_text().splitlines()] == [
        None, True]


def test_the_command_line_fills_masks_of_a_huggingface_export_from_stdin(small_pretrained_run, tmp_path):
    import bertjax
    from bertjax.inference import model_source
    from bertjax.models import convert

    source = model_source.resolve(small_pretrained_run)
    convert.export_huggingface(source.bert, source.load_params(), str(tmp_path / "hf"),
                               source.tokenizer_spec["path"], do_lower_case=True)
    texts = ["the [MASK] lives in a city .", "[MASK] works for a [MASK] ."]
    result = _predict(f"--model={tmp_path}/hf", "--task=fill_mask", "--top_k=3", "--max_seq_length=32",
                      stdin="\n".join(texts) + "\n")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    expected = bertjax.load_model(small_pretrained_run, max_seq_length=32).fill_mask(texts, top_k=3)
    assert [len(line["masks"]) for line in lines] == [1, 2]
    for line, want in zip(lines, expected):
        for got, wanted in zip(line["masks"], want):
            assert [t["token"] for t in got] == [t["token"] for t in wanted]
            assert [t["probability"] for t in got] == pytest.approx([t["probability"] for t in wanted], abs=1e-5)
    # A pipe given as --input (bash's <(...), /dev/stdin) is read once, as it arrives: reading
    # it twice (to check, then to predict) would find it empty the second time.
    piped = _predict(f"--model={tmp_path}/hf", "--task=fill_mask", "--top_k=3", "--max_seq_length=32",
                     "--input=/dev/stdin", stdin="\n".join(texts) + "\n")
    assert piped.returncode == 0 and piped.stdout == result.stdout, piped.stderr
    # "-" is stdin, as most tools read it ("--input=-: no such file" before: a walkthrough).
    dash = _predict(f"--model={tmp_path}/hf", "--task=fill_mask", "--top_k=3", "--max_seq_length=32", "--input=-",
                    stdin="\n".join(texts) + "\n")
    assert dash.returncode == 0 and dash.stdout == result.stdout, dash.stderr


def test_json_lines_named_json_for_a_span_qa_model_are_named_as_such(tmp_path):
    """A JSONL file named .json was read as SQuAD's layout: 'not valid JSON (Extra data)' or
    'expected ... a data list', neither saying JSON Lines (a review)."""
    from bertjax.tasks import squad_examples

    (tmp_path / "q.json").write_text('{"question": "who", "context": "bob"}\n{"question": "who", "context": "al"}\n')
    with pytest.raises(ValueError, match=r"q.json: not valid JSON \(Extra data\) at line 2 column 1; one JSON object "
                                         r"a line is JSON Lines, not the SQuAD layout \(fine-tuning reads only the "
                                         r"SQuAD layout; predict reads JSON Lines with --input_format=jsonl\)"):
        squad_examples.read_json(str(tmp_path / "q.json"))
    (tmp_path / "one.json").write_text('{"question": "who", "context": "bob"}\n')
    with pytest.raises(ValueError, match=r"one.json: expected a JSON object with a 'data' list \(the SQuAD layout\); "
                                         r"one JSON object a line is JSON Lines"):
        squad_examples.read_json(str(tmp_path / "one.json"))


def test_json_lines_or_conll_from_a_pipe_are_refused_and_text_loses_no_line(tmp_path):
    """A pipe (cat in.jsonl | predict.py) is never read ahead by file_format, so JSON Lines and
    CoNLL from one were read as texts, an answer for each, silently wrong (a review). Its first
    lines are checked as they are read, before any is an input; text keeps every line."""
    import threading

    from bertjax.inference import batch_predict

    def piped(text, family, check_lines=True):
        os.mkfifo(tmp_path / "pipe")
        writer = threading.Thread(target=lambda: (tmp_path / "pipe").write_text(text), daemon=True)
        writer.start()
        try:
            keys = batch_predict.default_keys(family, None)
            return list(batch_predict.read_inputs(str(tmp_path / "pipe"), family, "text", keys,
                                                  check_lines=check_lines))
        finally:
            writer.join(10)
            os.remove(tmp_path / "pipe")

    for text, family, written_in in (('{"text": "great fun"}\n{"text": "dull"}\n', "classification", "jsonl"),
                                     ("EU B-ORG\nrejects O\n\nPeter B-PER\nBlackburn I-PER\n",
                                      "tagging", "conll")):
        with pytest.raises(ValueError, match=rf"pipe looks like {written_in}, not one input a line"):
            piped(text, family)
    lines = [f"line {k}" for k in range(250)]
    assert [item for _, item in piped("\n".join(lines) + "\n", "tagging")] == lines
    # A line of spaces is a blank one, as in a file's first lines (a review of this check: a traceback).
    assert len(piped("John lives in Paris\n   \nMary works\n", "tagging")) == 3
    assert len(piped('{"text": "x"}\n', "classification", check_lines=False)) == 1  # --input_format=text


def test_conll_and_squad_from_stdin_are_named_stdin():
    """Stdin's CoNLL and SQuAD inputs, and their errors, were named /dev/stdin where every other
    format's are named stdin (a walkthrough)."""
    script = ("import sys; from bertjax.inference import batch_predict as b\n"
              "family, form = sys.argv[1:]\n"
              "keys = b.default_keys(family, None)\n"
              "try:\n"
              "    print([where for where, _ in b.read_inputs('/dev/stdin', family, form, keys)])\n"
              "except ValueError as e:\n"
              "    print(e)\n")

    def read(family, input_format, text):
        return subprocess.run([sys.executable, "-c", script, family, input_format], input=text, capture_output=True,
                              text=True, timeout=300, cwd=ROOT, check=True).stdout.strip()

    assert read("tagging", "conll", "EU\nrejects\n\nPeter\n") == "['stdin:1', 'stdin:4']"
    assert read("tagging", "conll", "EU B-ORG\nrejects\n") == (
        "stdin:2: 1 columns, but the file's first token line has 2: 'rejects' against line 1: 'EU B-ORG'; columns "
        "are split at spaces and tabs, so a token holding a space adds one")
    squad = {"data": [{"paragraphs": [{"context": "Bob sleeps.", "qas": [{"id": "q1", "question": "Who?"}]}]}]}
    assert read("squad", "squad_json", json.dumps(squad)) == "['stdin: id q1']"


def test_a_pair_models_second_text_is_never_dropped_without_a_word(tmp_path, caplog):
    """A Hugging Face classifier (pairs unknown) read rows without the default 'text_b' column, or
    with a null one, as single texts without a word (a review): a null is refused in its row, as
    fine-tuning refuses it, and a column the rows lack is warned of once."""
    from bertjax.inference import batch_predict

    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in (
        {"sentence1": "a", "sentence2": "b"}, {"sentence1": "c", "sentence2": None})))
    [(_, first), (where, second)] = _read(tmp_path / "pairs.jsonl", "classification", text_a="sentence1",
                                          text_b="sentence2")
    assert first == ("a", "b") and where.endswith("pairs.jsonl:2")
    assert isinstance(second, ValueError) and "column 'sentence2' holds None, not text" in str(second)
    warned = set()  # (predict reads a file twice, or three times: one warning)
    with caplog.at_level("WARNING"):
        rows = _read(tmp_path / "pairs.jsonl", "classification", warned=warned, text_a="sentence1")
        again = _read(tmp_path / "pairs.jsonl", "classification", warned=warned, text_a="sentence1")
    assert [item for _, item in rows] == [item for _, item in again] == [("a", None), ("c", None)]
    assert caplog.text.count("no 'text_b' column, so the inputs are read without their text_b") == 1
    # A bertjax pair classifier needs the second text: a row without its column is refused,
    # naming it, with no warning first that the rows are read as single texts.
    keys = batch_predict.default_keys("classification", {"text_a_key": "sentence1"}, {"pairs": True})
    required = batch_predict.required_roles("classification", keys, {"pairs": True})
    caplog.clear()
    with caplog.at_level("WARNING"):
        [(_, error), _] = batch_predict.read_inputs(str(tmp_path / "pairs.jsonl"), "classification", "jsonl", keys,
                                                    required=required)
    assert str(error) == ("no 'text_b' column (the task reads 'sentence1', and 'text_b' for a pair; the row has "
                          "['sentence1', 'sentence2']; --text_b_key names another)") and not caplog.text
    # A single-text model reads no second text, whatever columns the rows have (pandas' index: "").
    (tmp_path / "indexed.csv").write_text(",text_a,label\n0,good film,pos\n")
    assert [item for _, item in _read(tmp_path / "indexed.csv", "classification", text_b="")] == [("good film", None)]


def test_a_rows_bad_value_is_named_by_its_own_column(tmp_path):
    """Rows read through the run's columns (context_key "passage", ...) were refused as
    "expected {'context': text, 'choices': [...]}": keys the user's file never had (a review)."""
    rows = {"squad": [{"q": "who", "passage": 5}, {"q": ["who"], "passage": "bob"}],
            "choice": [{"passage": None, "opts": ["a", "b"]}, {"passage": "p", "opts": "a|b"},
                       {"passage": "p", "opts": ["a", ""]}],
            "classification": [{"sentence": 3}],
            "tagging": [{"sentence": {"w": 1}}, {"sentence": ["EU", ""]}]}
    keys = {"squad": dict(question="q", context="passage"), "choice": dict(context="passage", choices="opts"),
            "classification": dict(text_a="sentence"), "tagging": dict(text_a="sentence")}
    expected = {"squad": ["column 'passage' holds 5, not text (the context)",
                          "column 'q' holds ['who'], not text (the question)"],
                "choice": ["column 'passage' holds None, not text (the context)",
                           "column 'opts' holds 'a|b', not a list of at least 2 texts",
                           "column 'opts' holds ['a', ''], not a list of at least 2 texts"],
                "classification": ["column 'sentence' holds 3, not text (the text)"],
                "tagging": ["column 'sentence' holds {'w': 1}, not a sentence or a list of non-empty words",
                            "column 'sentence' holds ['EU', ''], not a sentence or a list of non-empty words"]}
    for family, family_rows in rows.items():
        (tmp_path / f"{family}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in family_rows))
        read = _read(tmp_path / f"{family}.jsonl", family, **keys[family])
        assert all(isinstance(item, ValueError) for _, item in read), (family, read)
        assert [str(item).split(" (the choices")[0] for _, item in read] == expected[family]
    (tmp_path / "good.jsonl").write_text(json.dumps({"passage": "p", "opts": ["a", "b", ""]}) + "\n")
    assert _read(tmp_path / "good.jsonl", "choice", **keys["choice"])[0][1] == {"context": "p", "choices": ["a", "b", ""]}


def test_span_qa_rows_keep_their_idx_as_fine_tuning_does(tmp_path):
    """A row's "idx" named it in fine-tuning's files but not in predict's output (a review)."""
    (tmp_path / "qa.jsonl").write_text(json.dumps({"idx": 7, "question": "who", "context": "bob"}) + "\n")
    [(_, item)] = _read(tmp_path / "qa.jsonl", "squad")
    assert item["id"] == "7"


def test_json_lines_given_as_text_are_refused_for_their_format(minilm_classifier_run, tmp_path):
    """JSON Lines redirected into stdin (or in a .txt file) had each line's JSON classified as
    text, {"review": ...} and all (a review): refused, naming --input_format=jsonl. A pipe is
    never read ahead (its first lines would be lost)."""
    (tmp_path / "rows.txt").write_text("".join(json.dumps({"review": text}) + "\n" for text, _ in REVIEWS))
    with open(tmp_path / "rows.txt") as stdin:
        redirected = subprocess.run([sys.executable, PREDICT, f"--model={minilm_classifier_run}"], stdin=stdin,
                                    capture_output=True, text=True, timeout=300,
                                    env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert redirected.returncode == 2 and redirected.stderr.strip().splitlines() == [
        "error: stdin looks like jsonl, not one input a line: pass --input_format=jsonl (or --input_format=text to "
        "read each line as an input)"]
    piped = subprocess.run([sys.executable, PREDICT, f"--model={minilm_classifier_run}", "--input_format=jsonl"],
                           input='{"review": "ok"}\n{"review":\n', capture_output=True, text=True, timeout=300,
                           env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert piped.returncode == 2 and piped.stderr.strip().splitlines()[-1].startswith(
        "error: stdin:2: not JSON")  # named as the refusal above names it, not /dev/stdin:2
    from bertjax.inference import batch_predict

    with pytest.raises(ValueError, match=r"rows.txt looks like jsonl, not one input a line"):
        batch_predict.file_format(str(tmp_path / "rows.txt"), "classification")
    assert batch_predict.file_format(str(tmp_path / "rows.txt"), "classification", "text") == "text"


def test_the_progress_rate_counts_from_the_first_chunk(monkeypatch, capsys):
    """Reading, checking and compiling come before the first chunk's answers: a rate since the
    start made the first ETA several times too long (a review: 214/s said, 1,500/s true)."""
    from bertjax.inference import batch_predict

    clock = iter([100.0, 120.0, 140.0, 150.0])
    monkeypatch.setattr(batch_predict.time, "time", lambda: next(clock))
    report = batch_predict.progress_line()
    for done in (1024, 2048, 3072, 4096):
        report(done, 4096)
    # Off a terminal (a log file: a line a chunk was 60 lines for 60,000 inputs, a review): the
    # first, one at most every 30 s, the last.
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["predicted 1024/4096 inputs", "predicted 3072/4096 inputs (51/s, ETA 20s)",
                     "predicted 4096/4096 inputs (61/s, ETA 0s)"]


def test_sigterm_leaves_no_half_written_output(minilm_classifier_run, tmp_path):
    """Stopped by SIGTERM (a job scheduler, `timeout`), predict left its temporary file for good
    (each run's has its process id) and said nothing; Ctrl-C cleaned up (a review). It unwinds
    as Ctrl-C does: one line, exit 143, nothing written."""
    import glob
    import signal
    import time

    (tmp_path / "in.txt").write_text("a fine film, truly\n" * 60_000)
    process = subprocess.Popen([sys.executable, PREDICT, f"--model={minilm_classifier_run}",
                                f"--input={tmp_path / 'in.txt'}", f"--output={tmp_path / 'out.jsonl'}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "JAX_PLATFORMS": "cpu"})
    deadline = time.time() + 240
    while not glob.glob(str(tmp_path / "out.jsonl.tmp-*")) and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143 and stderr.strip().splitlines()[-1] == "interrupted (SIGTERM)", stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def test_span_qa_options_reach_the_model_from_the_command_line(launchers, tmp_path):
    """--n_best_size and --max_answer_length answer as Python's `predict` given them (the command
    line had no way to set them); another family's model refuses them before it loads."""
    import bertjax

    model_dir = os.path.join(ROOT, "tests", "models", "hf_modernbert", "question_answering")
    inputs = [{"question": "who", "context": context} for context in (
        "alpha beta gamma delta epsilon zeta eta theta", "one two three four five six seven")]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(item) + "\n" for item in inputs))
    options = {"n_best_size": 3, "max_answer_length": 1}
    result = launchers.run([PREDICT, f"--model={model_dir}", f"--input={tmp_path}/qa.jsonl",
                            *(f"--{name}={value}" for name, value in options.items())])
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    model = bertjax.load_model(model_dir)
    assert [line["answer"] for line in lines] == [row["answer"] for row in model.predict(inputs, **options)]
    assert [line["answer"] for line in lines] != [row["answer"] for row in model.predict(inputs)]
    # A threshold for a model answering as v1.1: refused before it loads, by its flag's name.
    v1 = launchers.run([PREDICT, f"--model={model_dir}", f"--input={tmp_path}/qa.jsonl",
                        "--null_score_diff_threshold=1"])
    assert v1.returncode == 2 and v1.stderr.strip().splitlines()[-1] == (
        "error: --null_score_diff_threshold is for a SQuAD v2.0 model, which may answer 'no answer'; this one answers "
        "as v1.1, a span for every question")
    refused = launchers.run([PREDICT, f"--model={model_dir}", "--task=fill_mask", "--text=a [MASK]",
                             "--max_answer_length=4"])
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == ("error: --max_answer_length: an option of span-QA models, "
                                                       "not a fill_mask model's")

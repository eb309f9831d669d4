"""Classification data: GLUE under TFDS mock data (every task), your own CSV/TSV/JSONL files
(and bad ones), the GLUE submission files, and the padding that length bucketing saves."""

import json
import os
import re
import unicodedata

import numpy as np
import pytest
import tensorflow_datasets as tfds

from bertjax import tokenization
from bertjax.data.corpora import demo_corpus
from bertjax.tasks import batching, classification
from bertjax.tasks.common import Split, read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tokenization.Tokenizer.from_vocab_file(demo_corpus.demo_vocab_path(str(tmp_path_factory.mktemp("v"))))


def _config(task, **data):
    import sys
    sys.path.insert(0, ROOT)
    from configs import finetune as finetune_config

    config = finetune_config.get_config(task)
    config.data.update(data)
    return config


def test_tfds_can_find_a_builders_checksums():
    # download_and_prepare looks up the builder's code (its checksums) through
    # importlib_resources, which tensorflow-datasets imports but does not install.
    assert tfds.builder_cls("glue").code_path.name == "glue.py"


@pytest.mark.parametrize("task", sorted(classification.GLUE))
def test_every_glue_task_loads_under_mock_data(task, tokenizer):
    with tfds.testing.mock_data(num_examples=6):
        loaded = classification.load_task(_config(task, max_seq_length=32), tokenizer)
    spec = classification.GLUE[task]
    assert [s.name for s in loaded.eval_splits] == list(spec.eval_splits)
    assert len(loaded.train) == 6 and loaded.train.features["input_ids"].shape == (6, 32)
    label = loaded.train.features["label"]
    if spec.labels is None:
        assert loaded.main_metric == "spearman" and label.dtype == np.float32
    else:
        assert label.dtype == np.int32 and 0 <= label.min() and label.max() < len(spec.labels)
    tests = [s.examples.examples.submission_file for s in loaded.test_splits]
    assert tests == [file for _, _, file in spec.test_splits]
    if task == "mnli":
        assert [s.name for s in loaded.test_splits] == ["test_matched", "test_mismatched", "ax_test"]
        assert loaded.eval_splits[0].examples.label_names == ("entailment", "neutral", "contradiction")


def test_a_glue_split_with_some_labels_missing_is_refused():
    import tensorflow as tf

    def as_dataset(self, *args, **kwargs):  # SST-2 rows labelled 1, -1 ("no label"), 0
        return tf.data.Dataset.from_tensor_slices({"sentence": [b"good", b"what", b"bad"], "label": [1, -1, 0],
                                                   "idx": [0, 1, 2]})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        with pytest.raises(ValueError, match=r"TFDS glue/sst2\[train\]: example idx 1 has label -1, expected 0..1"):
            classification.read_glue("sst2", "", "train", None)

    def scores(self, *args, **kwargs):  # STS-B: -1 beside real scores would be trained on as a score
        return tf.data.Dataset.from_tensor_slices({"sentence1": [b"a", b"b"], "sentence2": [b"c", b"d"],
                                                   "label": [3.2, -1.0], "idx": [0, 1]})

    with tfds.testing.mock_data(as_dataset_fn=scores):
        with pytest.raises(ValueError, match=r"TFDS glue/stsb\[train\]: example idx 1 has label -1.0, expected a "
                                             r"score in \[0, 5\]"):
            classification.read_glue("stsb", "", "train", None)


def test_glue_submission_files_use_glue_label_strings(tmp_path, tokenizer):
    with tfds.testing.mock_data(num_examples=4):
        mnli = classification.load_task(_config("mnli", max_seq_length=32), tokenizer)
        wnli = classification.load_task(_config("wnli", max_seq_length=32), tokenizer)
        stsb = classification.load_task(_config("stsb", max_seq_length=32), tokenizer)
    ax = mnli.test_splits[2]
    classification.write_predictions(ax, {"prediction": np.array([0, 1, 2, 2])}, str(tmp_path))
    lines = (tmp_path / "glue" / "AX.tsv").read_text().splitlines()
    ids = ax.examples.examples.ids
    assert lines == ["index\tprediction"] + [f"{index}\t{label}" for index, label in sorted(zip(
        ids, ["entailment", "neutral", "contradiction", "contradiction"]))]
    classification.write_predictions(wnli.test_splits[0], {"prediction": np.array([1, 0, 1, 1])}, str(tmp_path))
    assert (tmp_path / "glue" / "WNLI.tsv").read_text().splitlines()[1:] == [
        f"{index}\t{label}" for index, label in sorted(zip(wnli.test_splits[0].examples.examples.ids, [1, 0, 1, 1]))]
    classification.write_predictions(stsb.test_splits[0], {"prediction": np.array([5.7, -0.2, 2.345, 3.0])},
                                     str(tmp_path))
    scores = dict(line.split("\t") for line in (tmp_path / "glue" / "STS-B.tsv").read_text().splitlines()[1:])
    assert [scores[str(index)] for index in stsb.test_splits[0].examples.examples.ids] == [
        "5.000", "0.000", "2.345", "3.000"]  # clipped to STS-B's [0, 5]
    dev = (tmp_path / "validation_matched.tsv")
    assert not dev.exists()
    classification.write_predictions(mnli.eval_splits[0], {"prediction": np.zeros(4, np.int64)}, str(tmp_path))
    assert dev.read_text().splitlines()[0] == "index\tprediction\tlabel"


def test_glue_submission_rows_follow_the_index_and_scores_read_as_written(tmp_path, tokenizer):
    """TFDS shuffles a GLUE split's rows when it prepares it: the submission files came out in
    that order, not test.tsv's; and STS-B's float32 gold scores were written 3.319999933242798
    (a review)."""
    import tensorflow as tf

    def as_dataset(self, *args, **kwargs):  # rows in TFDS's (shuffled) order
        return tf.data.Dataset.from_tensor_slices({"sentence1": [b"a b", b"c", b"d e f"],
                                                   "sentence2": [b"g", b"h", b"i"],
                                                   "label": np.float32([3.32, 1.1, 4.0]), "idx": [2, 0, 1]})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        stsb = classification.load_task(_config("stsb", max_seq_length=32), tokenizer)
    [test] = stsb.test_splits  # (mock data labels the test split too; scored submission or not, the file's rows)
    classification.write_predictions(test, {"prediction": np.float32([2.5, 0.5, 1.5])}, str(tmp_path))
    assert (tmp_path / "glue" / "STS-B.tsv").read_text().splitlines() == [
        "index\tprediction", "0\t0.500", "1\t1.500", "2\t2.500"]
    classification.write_predictions(stsb.eval_splits[0], {"prediction": np.float32([2.5, 0.5, 1.5])}, str(tmp_path))
    assert (tmp_path / "validation.tsv").read_text().splitlines()[1:] == [
        "2\t2.5\t3.32", "0\t0.5\t1.1", "1\t1.5\t4.0"]
    # A value's every digit (1234567 was written 1.23457e+06: a walkthrough).
    classification.write_predictions(stsb.eval_splits[0], {"prediction": np.float32([1234567.0, 0.1, 3.0])},
                                     str(tmp_path))
    assert [line.split("\t")[1] for line in (tmp_path / "validation.tsv").read_text().splitlines()[1:]] == [
        "1234567", "0.1", "3"]


def _write(path, rows, fmt):
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        sep = "\t" if fmt == "tsv" else ","
        keys = list(rows[0])
        path.write_text("\n".join([sep.join(keys)] + [sep.join(str(row[k]) for k in keys) for row in rows]) + "\n")
    return str(path)


ROWS = [{"review": "the fox lives in rivers", "other": "it eats fish", "stars": "good"},
        {"review": "the owl hoots at night", "other": "it is grey", "stars": "bad"},
        {"review": "a cold city", "other": "rainy days", "stars": "good"}]


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_own_files_pairs_and_single_sentences(tmp_path, tokenizer, fmt):
    train = _write(tmp_path / f"train.{fmt}", ROWS, fmt)
    test = _write(tmp_path / f"test.{fmt}", [{k: v for k, v in row.items() if k != "stars"} for row in ROWS], fmt)
    config = _config("classification", train_file=train, eval_file=train, test_file=test, text_a_key="review",
                     text_b_key="other", label_key="stars", max_seq_length=16)
    loaded = classification.load_task(config, tokenizer)
    assert loaded.train.examples.label_names == ("bad", "good")  # sorted
    assert loaded.train.features["label"].tolist() == [1, 0, 1]
    assert tokenizer.decode(loaded.train.features["input_ids"][2][:loaded.train.lengths[2]]) == \
        "[CLS] a cold city [SEP] rainy days [SEP]"
    assert not loaded.test_splits[0].has_labels and loaded.eval_splits[0].has_labels
    config.data.max_seq_length = 10  # 11, 11 and 8 tokens
    assert loaded.train.truncation == "" and \
        classification.load_task(config, tokenizer).train.truncation == "2 of 3 examples cut to 10 tokens"
    config.data.update(text_b_key="", label_names="good,bad", max_seq_length=16)
    single = classification.load_task(config, tokenizer)
    assert single.train.features["label"].tolist() == [0, 1, 0]
    assert tokenizer.decode(single.train.features["input_ids"][2][:single.train.lengths[2]]) == "[CLS] a cold city [SEP]"


def test_regression_files(tmp_path, tokenizer):
    rows = [{"text_a": "a", "text_b": "b", "label": 1.5}, {"text_a": "c", "text_b": "d", "label": 4}]
    path = _write(tmp_path / "train.jsonl", rows, "jsonl")
    loaded = classification.load_task(_config("regression", train_file=path, eval_file=path), tokenizer)
    np.testing.assert_array_equal(loaded.train.features["label"], np.float32([1.5, 4.0]))
    assert loaded.main_metric == "pearson"


def test_an_evaluation_file_of_one_score_is_warned_of(tmp_path, tokenizer, caplog):
    """Every dev score 2.5: Pearson and Spearman logged 0 at every step and best/ kept the first
    evaluation, without a word (a walkthrough)."""
    import logging

    train = _write(tmp_path / "train.jsonl", [{"text_a": "a", "label": 1.5}, {"text_a": "c", "label": 4}], "jsonl")
    dev = _write(tmp_path / "dev.jsonl", [{"text_a": "a", "label": 2.5}, {"text_a": "c", "label": 2.5}], "jsonl")
    with caplog.at_level(logging.WARNING):
        classification.load_task(_config("regression", train_file=train, eval_file=dev, text_b_key=""), tokenizer)
    assert (f"{dev}: every score is 2.5: Pearson's and Spearman's correlations are undefined there (logged as 0), so "
            "the best checkpoint is picked by the dev loss alone") in caplog.text


def test_a_csv_without_a_header_is_told_its_first_row_was_read_as_one(tmp_path, tokenizer):
    """A CSV of rows only lost its first row to the header, and the error showed that row as the
    columns, without saying why (a review)."""
    (tmp_path / "train.csv").write_text("great movie,pos\nawful,neg\n")
    with pytest.raises(ValueError, match=r"train.csv:2: no column 'text_a' .*the row has \['great movie', 'pos'\]"
                                         r"; line 1 is read as the header, the column names"):
        classification.load_task(_config("classification", train_file=str(tmp_path / "train.csv"), eval_file=""),
                                 tokenizer)


@pytest.mark.parametrize("rows, fmt, options, message", [
    ([{"text": "x", "label": "a"}], "jsonl", {}, r"train.jsonl:1: no column 'text_a' \(config.data.text_a_key\)"),
    ([{"text_a": "x", "text_b": "y"}], "csv", {}, r"train.csv:2: no column 'label' \(config.data.label_key\)"),
    ([{"text_a": "x", "label": "a"}], "csv", {}, r"train.csv:2: no column 'text_b' \(config.data.text_b_key\); the "
     r"row has \['label', 'text_a'\]; config.data.text_b_key='' reads single texts"),
    ([{"text_a": "x", "text_b": "y", "label": 1}, {"text_a": "x", "text_b": "y", "label": "b"}], "jsonl", {},
     r"the 'label' column mixes types \(number at .*train.jsonl:1, str at .*train.jsonl:2\)"),
    ([{"text_a": "x", "text_b": "y", "label": "1.5"}, {"text_a": "x", "text_b": "y", "label": "high"}], "csv",
     {"task": "regression"}, r"train.csv:3: label 'high' is not a number"),
    ([{"text_a": "x", "text_b": "y", "label": True}], "jsonl", {"task": "regression"},
     r"train.jsonl:1: label True should be a class name or a number"),
    # Scores float() reads otherwise, or not at all (a review: '1_5' was 15.0; a huge integer a traceback).
    ([{"text_a": "x", "text_b": "y", "label": "1_5"}], "csv", {"task": "regression"},
     r"train.csv:2: label '1_5' is not a number"),
    ([{"text_a": "x", "text_b": "y", "label": "\u0663"}], "jsonl", {"task": "regression"},
     r"train.jsonl:1: label '\u0663' is not a number"),
    ([{"text_a": "x", "text_b": "y", "label": 10 ** 400}], "jsonl", {"task": "regression"},
     r"train.jsonl:1: label 1000000000.* is not a number"),
    # A class name the predictions' TSV cannot hold in one field.
    ([{"text_a": "x", "text_b": "y", "label": "pos\tx"}], "jsonl", {},
     r"train.jsonl:1: label 'pos\\tx' holds a tab or a line break"),
    ([{"text_a": "x", "text_b": "y", "label": ["a"]}], "jsonl", {}, r"train.jsonl:1: label \['a'\] should be a class"),
    ([{"text_a": 5, "text_b": "y", "label": "a"}], "jsonl", {}, r"train.jsonl:1: column 'text_a' should be text"),
    ([{"text_a": "x", "text_b": "y", "label": "a"}], "csv", {"label_key": ""},
     r"config.data.label_key must name a column of .*train.csv"),
    ([{"text_a": "x", "text_b": "y", "label": "a"}], "csv", {"label_names": "a,b,a"},
     r"config.data.label_names='a,b,a': expected distinct, non-empty names"),
    ([{"text_a": "x", "text_b": "y", "label": "a"}], "csv", {"label_names": "a,b,"}, "expected distinct, non-empty"),
    # Class names given to a regression were dropped without a word (a review).
    ([{"text_a": "x", "text_b": "y", "label": 1.5}], "jsonl", {"task": "regression", "label_names": "neg,pos"},
     r"config.data.label_names='neg,pos' names classes, and this is a regression"),
])
def test_bad_files_name_the_file_line_and_key(tmp_path, tokenizer, rows, fmt, options, message):
    path = _write(tmp_path / f"train.{fmt}", rows, fmt)
    config = _config(options.pop("task", "classification"), train_file=path, **options)
    with pytest.raises(ValueError, match=message):
        classification.load_task(config, tokenizer)


def test_whole_number_labels_are_classes_in_their_order_and_numbers_written_two_ways_are_named(tmp_path, tokenizer):
    """Labels 0..10 from JSONL were ordered as text, '10' class 2: logits and exports did not
    match the labels by index; an evaluation file's 1 against training's 1.0 read as unknown
    (a review)."""
    train = _write(tmp_path / "train.jsonl", [{"text_a": f"text {k}", "label": k} for k in (10, 2, 0, 1, -1, 2)],
                   "jsonl")
    loaded = classification.load_task(_config("classification", train_file=train, text_b_key=""), tokenizer)
    assert loaded.train.examples.label_names == ("-1", "0", "1", "2", "10")
    assert loaded.train.features["label"].tolist() == [4, 3, 1, 2, 0, 3]
    mixed = _write(tmp_path / "mixed.jsonl", [{"text_a": "x", "label": label} for label in ("b", "10", "2")], "jsonl")
    loaded = classification.load_task(_config("classification", train_file=mixed, text_b_key=""), tokenizer)
    assert loaded.train.examples.label_names == ("10", "2", "b")  # not all numbers: as text
    floats = _write(tmp_path / "floats.jsonl", [{"text_a": "x", "label": label} for label in (0.0, 1.0)], "jsonl")
    whole = _write(tmp_path / "dev.csv", [{"text_a": "x", "label": 1}], "csv")
    with pytest.raises(ValueError, match=r"dev.csv:2: label '1' is not among the task's labels \['0.0', '1.0'\] .*; "
                                         r"it is the number of label '1.0' written another way"):
        classification.load_task(_config("classification", train_file=floats, eval_file=whole, text_b_key=""),
                                 tokenizer)


@pytest.mark.parametrize("rows, fmt, message", [
    # An id the predictions' TSV cannot hold in one field; ids on some rows only (a row's place
    # could be another's id).
    ([{"id": "q\tz", "text_a": "x", "text_b": "y", "label": "a"}], "jsonl", r"rows.jsonl:1: id 'q\\tz' holds a tab"),
    ([{"id": 1, "text_a": "x", "text_b": "y", "label": "a"}, {"text_a": "x", "text_b": "y", "label": "a"}], "jsonl",
     r"rows.jsonl:2: no id, where other rows have one: give every row an id \(a column 'id' or 'idx' or 'index'\)"),
    # Empty ids went into predictions/<split>.tsv, rows no one could tell apart.
    ([{"id": "a", "text_a": "x", "text_b": "y", "label": "a"}, {"id": " ", "text_a": "x", "text_b": "y", "label": "a"}],
     "csv", r"rows.csv:3: an empty id"),
])
def test_ids_are_checked_where_predictions_are_written_and_only_there(tmp_path, tokenizer, rows, fmt, message):
    """A training file's ids are written nowhere: a blank id there stopped the run (a review)."""
    path = _write(tmp_path / f"rows.{fmt}", rows, fmt)
    train = _write(tmp_path / "train.csv", [{"text_a": "x", "text_b": "y", "label": label} for label in "ab"], "csv")
    for key in ("eval_file", "test_file"):
        with pytest.raises(ValueError, match=message):
            classification.load_task(_config("classification", train_file=train, **{key: path}), tokenizer)
    loaded = classification.load_task(_config("classification", train_file=path, label_names="a,b"), tokenizer)
    assert loaded.train.examples.examples.ids == list(range(len(rows)))


def test_ids_repeated_in_a_file_whose_predictions_are_written_are_refused(tmp_path, tokenizer):
    """Two rows with id 'a' went into predictions/<split>.tsv, rows no one could tell apart (a
    walkthrough); a training file's ids may repeat (oversampled rows), its predictions are not
    written (the review of that fix). GLUE's test files name their rows "index"."""
    rows = [{"id": "a", "text_a": "x", "text_b": "y", "label": "a"}, {"id": "b", "text_a": "x", "text_b": "y",
                                                                      "label": "b"},
            {"id": "a", "text_a": "z", "text_b": "y", "label": "b"}]
    repeated = _write(tmp_path / "repeated.csv", rows, "csv")
    distinct = _write(tmp_path / "distinct.csv", rows[:2], "csv")
    glue_test = _write(tmp_path / "test.tsv", [{"index": 9, "text_a": "x", "text_b": "y"},
                                               {"index": 5, "text_a": "z", "text_b": "y"}], "tsv")
    loaded = classification.load_task(_config("classification", train_file=repeated, eval_file=distinct,
                                              test_file=glue_test), tokenizer)
    assert loaded.train.examples.examples.ids == [0, 1, 2]
    assert loaded.eval_splits[0].examples.examples.ids == ["a", "b"]
    assert loaded.test_splits[0].examples.examples.ids == ["9", "5"]
    for key in ("eval_file", "test_file"):
        config = _config("classification", train_file=distinct, **{key: repeated})
        with pytest.raises(ValueError, match=r"repeated.csv:4: id 'a' again \(first at .*repeated.csv:2\): the "
                                             r"predictions of the two could not be told apart"):
            classification.load_task(config, tokenizer)


def test_a_text_b_column_empty_in_every_row_reads_single_texts(tmp_path, tokenizer, caplog):
    """A template's text_b column left empty made a pair model (info pairs: True) that prediction
    then refused both one text and a pair with an empty second (a review); a null id was 'None'."""
    rows = [{"id": None, "text_a": "a warm city", "text_b": "", "label": "good"},
            {"id": None, "text_a": "a cold city", "text_b": " ", "label": "bad"}]
    path = _write(tmp_path / "train.jsonl", rows, "jsonl")
    dev = _write(tmp_path / "dev.jsonl", [{**rows[0], "text_b": "a second text"}], "jsonl")
    with caplog.at_level("WARNING"):
        loaded = classification.load_task(_config("classification", train_file=path, eval_file=dev), tokenizer)
    assert "column 'text_b' (config.data.text_b_key) is empty in every row: single texts, in every file" in caplog.text
    assert loaded.info["pairs"] is False and loaded.train.examples.examples.ids == [0, 1]
    # Every file as the model trains: the dev file's second texts are not read.
    for split in (loaded.train, loaded.eval_splits[0]):
        assert tokenizer.decode(split.features["input_ids"][0][:split.lengths[0]]) == "[CLS] a warm city [SEP]"


def test_empty_file_and_unknown_eval_labels(tmp_path, tokenizer, caplog):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.csv: no examples"):
        classification.load_task(_config("classification", train_file=str(empty)), tokenizer)
    train = _write(tmp_path / "train.jsonl", [{"text_a": "x", "text_b": "y", "label": "a"},
                                              {"text_a": "x", "text_b": "y", "label": "b"}], "jsonl")
    dev = _write(tmp_path / "dev.jsonl", [{"text_a": "x", "text_b": "y", "label": "a"},
                                          {"text_a": "x", "text_b": "y", "label": "c"}], "jsonl")
    with pytest.raises(ValueError, match=r"dev.jsonl:2: label 'c' is not among the task's labels \['a', 'b'\]") as \
            error:
        classification.load_task(_config("classification", train_file=train, eval_file=dev), tokenizer)
    assert "normal form" not in str(error.value)
    # The same label with its accent as a combining mark: two strings that print alike (a walkthrough).
    accents = [_write(tmp_path / f"{name}.jsonl", [{"text_a": "x", "label": unicodedata.normalize(form, label)}
                                                   for label in ("caf\u00e9", "th\u00e9")], "jsonl")
               for name, form in (("nfc", "NFC"), ("nfd", "NFD"))]
    mixed = _write(tmp_path / "mixed.jsonl", [{"text_a": "x", "label": label} for label in ("c", "cafe\u0301")],
                   "jsonl")
    with pytest.raises(ValueError, match="mixed.jsonl:1: label 'c' is not among") as error:  # (the hint: another's)
        classification.load_task(_config("classification", train_file=accents[0], eval_file=mixed, text_b_key=""),
                                 tokenizer)
    assert "normal form" not in str(error.value)
    with pytest.raises(ValueError, match=r"nfd.jsonl:1: label 'cafe\u0301' is not among .* it differs from a label "
                                         r"of the task only in its Unicode normal form \(an accent as a separate "
                                         r"combining mark, NFD"):
        classification.load_task(_config("classification", train_file=accents[0], eval_file=accents[1],
                                         text_b_key=""), tokenizer)
    # Scores read as classes (label_kind left 'class'): warned, and an unseen score says what to set.
    scores = _write(tmp_path / "scores.jsonl", [{"text_a": "x", "text_b": "y", "label": value}
                                                for value in ("3.8", "2.5", "0")], "jsonl")
    unseen = _write(tmp_path / "unseen.jsonl", [{"text_a": "x", "text_b": "y", "label": "4.2"}], "jsonl")
    with caplog.at_level("WARNING"), pytest.raises(ValueError, match=r"label '4.2' is not among the task's labels "
                                                                     r".*; scores to predict are config.data.label_kind="
                                                                     r"'float' \(regression\)"):
        classification.load_task(_config("classification", train_file=scores, eval_file=unseen), tokenizer)
    assert "look like scores; they are classes unless config.data.label_kind='float'" in caplog.text
    bad = tmp_path / "bad.tsv"
    bad.write_text("text_a\ttext_b\tlabel\nx\ty\n")
    with pytest.raises(ValueError, match=r"bad.tsv:2: 2 fields, the header has 3 \(\['text_a', 'text_b', 'label'\]\)$"):
        classification.load_task(_config("classification", train_file=str(bad)), tokenizer)
    # A CSV writer's quoted field holding a tab, in a TSV: the quote named as the cause (a walkthrough).
    bad.write_text('text_a\ttext_b\tlabel\n"x\ty"\tz\tpos\n')
    with pytest.raises(ValueError, match=r"bad.tsv:2: 4 fields, the header has 3 .*; a field starts with a quote: TSV "
                                         r"fields are read literally, so a CSV writer's quoted tab splits it"):
        classification.load_task(_config("classification", train_file=str(bad)), tokenizer)
    # Files joined with `cat`, headers and all: the second header is no example of a class 'label'
    # (a review: it became a third class, said only at info level).
    joined = tmp_path / "joined.csv"
    joined.write_text("text_a,text_b,label\ngood,x,pos\nbad,y,neg\ntext_a,text_b,label\nfine,z,pos\n")
    with pytest.raises(ValueError, match=r"joined.csv:4: the header again \(\['text_a', 'text_b', 'label'\]\), "
                                         r"as a row: remove it"):
        classification.load_task(_config("classification", train_file=str(joined)), tokenizer)
    # Two of Excel's CSV exports joined: its second header follows a byte order mark (a review:
    # read as a row, with a class 'label').
    exported = "\ufefftext_a,text_b,label\r\ngood,x,pos\r\nbad,y,neg\r\n"
    joined.write_text(exported * 2, encoding="utf-8")
    with pytest.raises(ValueError, match=r"joined.csv:4: the header again"):
        classification.load_task(_config("classification", train_file=str(joined)), tokenizer)
    joined.write_text(exported.replace(",", "\t") * 2, encoding="utf-8")
    with pytest.raises(ValueError, match=r"joined.csv:4: the header again"):
        classification.load_task(_config("classification", train_file=str(joined), file_format="tsv"), tokenizer)


def test_labels_that_are_likely_no_classes_are_warned_of_and_one_column_has_one_role(tmp_path, tokenizer, caplog):
    """A CSV's 'nan' (pandas' missing value as text) and 'Good' beside 'good' became classes
    without a word; a label column also read as text_b trained to accuracy 1.0 on its own
    answer (a walkthrough)."""
    train = tmp_path / "train.csv"
    train.write_text("review,sentiment\na,good\nb,Good\nc,nan\nd,bad\n")
    config = _config("classification", train_file=str(train), text_a_key="review", text_b_key="",
                     label_key="sentiment")
    with caplog.at_level("WARNING"):
        task = classification.load_task(config, tokenizer)
    assert task.info["label_names"] == ["Good", "bad", "good", "nan"]
    assert "the label(s) ['nan'] read as a missing value written as text" in caplog.text
    assert "labels that differ only in case, Unicode form, invisible characters or quotes are classes of their own: " \
        "'Good', 'good'" in caplog.text
    # A label quoted after a comma and a space (Python's csv, as pandas, reads it as text, quotes
    # and all), and one written composed and decomposed or with a zero-width space: each became a
    # class without a word (a review).
    caplog.clear()
    alike = tmp_path / "alike.csv"
    alike.write_text('review,sentiment\na,neg\nb, "neg"\nc,caf\u00e9\nd,cafe\u0301\ne,pos\nf,pos\u200b\n')
    with caplog.at_level("WARNING"):
        task = classification.load_task(_config("classification", train_file=str(alike), text_a_key="review",
                                                text_b_key="", label_key="sentiment"), tokenizer)
    assert len(task.info["label_names"]) == 6
    assert "are classes of their own: '\"neg\"', 'neg'; 'cafe\\u0301', 'caf\u00e9'; 'pos', 'pos\\u200b'" in caplog.text
    # A TSV named .csv, and a folder as the file: said so.
    tsv = tmp_path / "tabs.csv"
    tsv.write_text("review\tsentiment\na\tgood\n")
    config.data.train_file = str(tsv)
    with pytest.raises(ValueError, match=r"the header is one column holding a separator: set config.data.file_for"
                                         r"mat=tsv"):
        classification.load_task(config, tokenizer)
    (tmp_path / "folder.csv").mkdir()
    config.data.train_file = str(tmp_path / "folder.csv")
    with pytest.raises(ValueError, match=r"config.data.train_file=.*folder.csv is a folder; give a file"):
        classification.load_task(config, tokenizer)
    config.data.train_file = str(train)
    for text_a, text_b in (("review", "sentiment"), ("sentiment", ""), ("review", "review")):
        config.data.update(text_a_key=text_a, text_b_key=text_b)
        with pytest.raises(ValueError, match=r"config.data.text_\w_key and config.data.\w+_key both name the column"):
            classification.load_task(config, tokenizer)


def test_training_batches_are_a_function_of_their_index_and_cover_each_epoch(tokenizer):
    split = Split("train", {"input_ids": np.arange(10 * 8, dtype=np.int32).reshape(10, 8), "label": np.arange(10)},
                  lengths=np.array([2, 3, 8, 2, 5, 2, 2, 3, 4, 2], np.int32))
    batches = batching.TrainBatches(split, batch_size=4, seed=0, buckets=[2, 4, 8], group_by_length=False)
    stream = [b for _, b in zip(range(5), batches.batches())]  # 20 rows = two epochs of 10
    labels = np.concatenate([b["label"] for b in stream])
    assert sorted(labels[:10]) == list(range(10)) and sorted(labels[10:]) == list(range(10))
    assert labels[:10].tolist() != labels[10:].tolist()  # a new permutation each epoch
    for b in stream:  # each batch is cut to the smallest bucket holding its longest row
        assert b["input_ids"].shape[1] == batching.bucket_for(int(split.lengths[b["label"]].max()), [2, 4, 8])
    resumed = next(batching.TrainBatches(split, 4, 0, [2, 4, 8], group_by_length=False).batches(start_batch=3))
    np.testing.assert_array_equal(resumed["input_ids"], stream[3]["input_ids"])
    # A batch larger than the split is the run's settings (a sweep records it and goes on to its
    # next run; a review: a grid's batch 32 over 20 examples stopped the whole sweep).
    from bertjax.runtime.errors import RunSettingsError

    with pytest.raises(RunSettingsError, match=r"the train split has 10 examples, fewer than one batch "
                                               r"\(config.train.batch_size=16\)"):
        batching.TrainBatches(split, 16, 0, [2, 4, 8])


def test_splash_attention_gets_batches_of_whole_128_token_blocks():
    from bertjax import finetune

    lengths = np.array([5, 9, 17, 40, 100, 130, 200, 7, 12, 60], np.int32)
    split = Split("train", {"input_ids": np.ones((10, 256), np.int32), "label": np.zeros(10, np.int32)}, lengths)
    config = _config("sst2", max_seq_length=256, num_buckets=4)
    config.train.batch_size = 2
    batches, eval_buckets = finetune.training_batches(config, split, data_parallel=1, length_multiple=128)
    assert eval_buckets == [128, 256]
    assert {batches.shape(index)[1] for index in range(5)} <= {128, 256}
    _, eval_buckets = finetune.training_batches(config, split, data_parallel=1, length_multiple=1)
    assert eval_buckets[0] < 128 and all(length % 8 == 0 for length in eval_buckets)  # other paths: multiples of 8


def test_eval_batches_pad_the_last_batch_with_weightless_rows():
    split = Split("dev", {"input_ids": np.ones((5, 8), np.int32), "label": np.arange(5)}, np.full(5, 3, np.int32))
    out = list(batching.eval_batches(split, 4, [4, 8]))
    assert [real.tolist() for _, real in out] == [[0, 1, 2, 3], [4]]
    assert out[1][0]["example_weights"].tolist() == [1, 0, 0, 0]
    assert out[1][0]["input_ids"].shape == (4, 4) and out[1][0]["input_ids"][1:].sum() == 0


def test_eval_batches_come_shortest_first_each_example_once_in_its_bucket():
    lengths = np.array([7, 2, 8, 3, 2, 6, 4])
    split = Split("dev", {"input_ids": np.arange(7)[:, None] * np.ones((1, 8), np.int32), "label": np.arange(7)},
                  lengths)
    out = list(batching.eval_batches(split, 3, [2, 4, 8]))
    assert [real.tolist() for _, real in out] == [[1, 4, 3], [6, 5, 0], [2]]  # stable: 1 before 4
    assert [batch["input_ids"].shape[1] for batch, _ in out] == [4, 8, 8]
    for batch, real in out:  # each real row is its own example, the padding rows weigh nothing
        assert batch["label"][:len(real)].tolist() == real.tolist()
        assert batch["example_weights"].tolist() == [1.0] * len(real) + [0.0] * (3 - len(real))


def test_shape_order_and_eval_lengths_are_the_shapes_the_batches_are_cut_to():
    """What fine-tuning compiles ahead: the (rows, tokens) shapes in the order batches first use
    them (from any start batch, packed or not), and the lengths of the evaluation batches."""
    lengths = np.random.default_rng(2).integers(2, 60, 300).astype(np.int32)
    features = {"input_ids": np.zeros((300, 64), np.int32), "segment_ids": np.zeros((300, 64), np.int32),
                "input_mask": np.zeros((300, 64), np.int32), "label": np.zeros(300, np.int32)}
    split = Split("train", features, lengths)
    for pack, group, buckets in ((0, True, [8, 16, 32, 64]), (0, False, [8, 16, 32, 64]), (4, False, [64])):
        batches = batching.TrainBatches(split, 8, 0, buckets, group_by_length=group, pack_examples=pack)
        for start in (0, 7):
            seen = [batching.batch_shape(b) for _, b in zip(range(60), batches.batches(start_batch=start))]
            assert batches.shape_order(start, 60) == list(dict.fromkeys(seen))
        assert batches.shape_order(0, 1) == [batching.batch_shape(batches.batch(0))]
    for size, buckets in ((8, [8, 16, 32, 64]), (32, [16, 64]), (300, [64]), (7, [40])):
        cut = {batch["input_ids"].shape[-1] for batch, _ in batching.eval_batches(split, size, buckets)}
        assert batching.eval_lengths(split, size, buckets) == sorted(cut)


def test_bucketing_and_length_grouping_cut_the_padding_of_short_sentence_tasks():
    """SST-2-like lengths (movie-review phrases: median 11 tokens, 90% under 23, a tail to 66),
    batch 32, length 128. Measured 2026-11-22: padding share 0.894 padded to 128, 0.745 with
    4 buckets (128/64/32/16), 0.395 with 4 buckets and length grouping."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(10), 0.6, 20_000).astype(np.int32) + 2, 3, 66)
    split = Split("train", {"input_ids": np.zeros((len(lengths), 1), np.int32)}, lengths)
    share = lambda buckets, grouped: batching.padding_share(split, 32, 0, batching.bucket_lengths(128, buckets), grouped)
    assert batching.bucket_lengths(128, 4) == [16, 32, 64, 128]
    # Independent references: padded to 128, the share is 1 - mean length / 128; with buckets,
    # a batch of 32 random rows is padded to the bucket of its longest row (drawn here).
    bucket_of = lambda n: np.array([16, 32, 64, 128])[np.searchsorted([16, 32, 64, 128], n)]
    batches = rng.choice(lengths, (4000, 32))
    bucketed = 1 - lengths.mean() / bucket_of(batches.max(axis=1)).mean()
    perfect = np.sort(lengths)[:len(lengths) // 32 * 32].reshape(-1, 32)  # rows sorted by length: the floor
    floor = 1 - perfect.sum() / (32 * bucket_of(perfect.max(axis=1))).sum()
    np.testing.assert_allclose([share(1, False), share(4, False)], [1 - lengths.mean() / 128, bucketed], atol=0.005)
    assert floor <= share(4, True) < share(4, False) - 0.3
    np.testing.assert_allclose([share(1, False), share(4, False), share(4, True)], [0.894, 0.745, 0.395], atol=0.005)


def test_fitted_buckets_carry_the_fewest_tokens_of_any_choice():
    """Against every choice of at most K multiples of 8 (with the longest example's) on small
    random splits: the fitted ladder carries exactly the fewest tokens."""
    import itertools

    rng = np.random.default_rng(3)
    carried = lambda lengths, buckets: sum(batching.bucket_for(int(n), buckets) for n in lengths)
    for _ in range(100):
        max_seq_length = int(rng.choice([32, 100, 128]))
        lengths = rng.integers(2, max_seq_length + 1, int(rng.integers(1, 40)))
        num_buckets = int(rng.integers(1, 5))
        fitted = batching.fitted_bucket_lengths(lengths, max_seq_length, num_buckets)
        top = min(-(-int(lengths.max()) // 8) * 8, max_seq_length)
        assert fitted[-1] == top and len(fitted) <= num_buckets
        assert all(b % 8 == 0 for b in fitted[:-1])
        lower = sorted({min(-(-int(n) // 8) * 8, max_seq_length) for n in lengths} - {top})
        fewest = min(carried(lengths, [*below, top]) for k in range(num_buckets)
                     for below in itertools.combinations(lower, k))
        assert carried(lengths, fitted) == fewest


def test_fitted_buckets_cut_the_padding_of_short_sentences_at_length_128():
    """The SST-2-like lengths above at GLUE's length 128, grouped batches of 32, buckets fitted
    to each batch's longest row as fine-tuning fits them (measured 2026-11-27): the halvings
    16/32/64/128 leave 0.392 of the positions padding over an epoch, the fitted 8/16/32/72
    0.304: 13% fewer tokens carried. Every example is in one batch: the longest fits."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(10), 0.6, 20_000).astype(np.int32) + 2, 3, 66)
    split = Split("train", {"input_ids": np.zeros((len(lengths), 1), np.int32)}, lengths)
    longest = batching.longest_rows(split, 32, 0, group_by_length=True)
    assert len(longest) == 625 and longest.max() == 66
    fitted = batching.fitted_bucket_lengths(longest, 128, 4)
    assert fitted == [8, 16, 32, 72]
    shares = [batching.padding_share(split, 32, 0, buckets, True, num_batches=625)
              for buckets in (batching.bucket_lengths(128, 4), fitted)]
    np.testing.assert_allclose(shares, [0.392, 0.304], atol=0.005)
    assert batching.fitted_bucket_lengths(longest, 64, 4) == [8, 16, 32, 64]  # 66 tokens are cut to 64
    assert batching.fitted_bucket_lengths([5, 5, 5], 128, 4) == [8]


def test_length_grouping_keeps_each_epoch_a_permutation():
    """And every epoch's batches group lengths: with 1,003 examples in batches of 8, epoch 1
    starts 3 rows into a batch, and its length-sorted batches were cut from its own row 0, so
    each batch of the stream straddled two of them (a review: padding 0.36 -> 0.49 of SST-2's)."""
    lengths = np.random.default_rng(1).integers(3, 60, 1003).astype(np.int32)
    split = Split("train", {"input_ids": np.zeros((1003, 1), np.int32)}, lengths)
    batches = batching.TrainBatches(split, 8, 0, [16, 32, 64], group_by_length=True)
    for epoch in (0, 1, 2):
        order = batches.epoch_order(epoch)
        assert sorted(order) == list(range(1003))
    per_epoch = batches.steps_per_epoch()
    for epoch in (0, 1, 2):
        spread = [np.ptp(lengths[batches.examples(i)]) for i in range(epoch * per_epoch, epoch * per_epoch + 100)]
        assert np.median(spread) <= 2  # rows of a batch have about the same length


@pytest.mark.parametrize("content, message", [
    (b"text_a,text_b,label,text_a\nx,y,a,z\n", r"train.csv:1: the header names \['text_a'\] more than once"),
    (b"text_a,text_b,label\nx,y,a\ncaf\xe9,y,b\n", r"train.csv:3: not UTF-8 \(byte 0xe9 at column 4\)"),
    (b"text_a,text_b,label\nx,y,a\nz,y,\"b\n", r"train.csv:3: not valid CSV \(unexpected end of data\)"),
])
def test_malformed_csv_is_named_by_file_and_line(tmp_path, tokenizer, content, message):
    (tmp_path / "train.csv").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        classification.load_task(_config("classification", train_file=str(tmp_path / "train.csv")), tokenizer)


def test_a_file_of_rows_without_an_extension_is_named_as_such(tmp_path):
    """A train file named `train` was 'unknown file format {whole path}' (a review: the path
    taken as the extension, a dot in a folder's name too)."""
    folder = tmp_path / "glue.v1"
    folder.mkdir()
    (folder / "train").write_text("text,label\nfine,pos\n")
    with pytest.raises(ValueError, match=rf"^{folder}/train: unknown file extension; expected .csv, .tsv or .jsonl "
                                         r"\(or set config.data.file_format\)$"):
        next(read_records(str(folder / "train")))
    with pytest.raises(ValueError, match=r"train.txt: unknown file format 'txt'"):
        next(read_records(str(folder / "train.txt")))
    assert next(read_records(str(folder / "train"), file_format="csv"))[1] == {"text": "fine", "label": "pos"}


def test_a_quote_left_open_is_named_by_the_line_its_record_starts_on(tmp_path):
    """The csv module reports where it gave up (the end of the file for an unclosed quote);
    the row to fix is where the record began. A row's place is its first line."""
    path = tmp_path / "train.csv"
    path.write_text('text,label\n"a review\nover two lines",pos\n"oops,pos\n' + "fine,neg\n" * 1000)
    rows = read_records(str(path))
    assert next(rows) == (f"{path}:2", {"text": "a review\nover two lines", "label": "pos"})
    with pytest.raises(ValueError, match=r"train.csv:4: not valid CSV \(unexpected end of data; the record starting "
                                         r"here runs to line 1004\)"):
        next(rows)


def test_a_line_not_utf8_inside_a_quoted_field_refuses_its_record_whole(tmp_path):
    """--on_error=skip read a bad line as a blank one: in a field's middle the record was
    predicted with that line gone, the error never said; opening the field, its quote was lost
    and the rest of the record read as an input of its own (a review). One error, in the
    record's place; the rows around it as they are."""
    path = tmp_path / "test.csv"
    path.write_bytes(b'text,label\ngood,pos\n"first part\ncaf\xe9\nlast part",pos\n"caf\xe9 opens\nsecond part",neg\n'
                     b"after,neg\n")
    rows = list(read_records(str(path), bad_rows="yield"))
    assert [where for where, _ in rows] == [f"{path}:2", f"{path}:3", f"{path}:6", f"{path}:8"]
    assert rows[0][1] == {"text": "good", "label": "pos"} and rows[3][1] == {"text": "after", "label": "neg"}
    assert str(rows[1][1]) == "line 4 (inside this record): not UTF-8 (byte 0xe9 at column 4); save the file as UTF-8"
    assert str(rows[2][1]) == "not UTF-8 (byte 0xe9 at column 5); save the file as UTF-8"
    with pytest.raises(ValueError, match=r"test.csv:4: not UTF-8 \(byte 0xe9 at column 4\)"):
        list(read_records(str(path)))
    # A quote left open as well: both said, not the second only after the first is fixed.
    path.write_bytes(b'text,label\n"a\n\xe9 open,pos\nb,neg\n')
    [(where, error)] = list(read_records(str(path), bad_rows="yield"))
    assert where == f"{path}:2" and str(error) == (
        "line 3 (inside this record): not UTF-8 (byte 0xe9 at column 1); save the file as UTF-8; and not valid "
        "CSV (unexpected end of data; the record starting here runs to line 4)")


def test_blank_lines_of_a_one_column_file_are_empty_texts_and_keep_the_rows_in_place(tmp_path):
    """A one-column TSV cannot quote an empty text: a blank line is one (prediction ids and
    output rows stay in line with the file); blank lines at the end, and in a file of several
    columns, are not rows."""
    path = tmp_path / "test.tsv"
    path.write_text("sentence\nfirst\n\nthird\n\n\n")
    assert list(read_records(str(path))) == [(f"{path}:2", {"sentence": "first"}), (f"{path}:3", {"sentence": ""}),
                                             (f"{path}:4", {"sentence": "third"})]
    path.write_text("sentence\tlabel\nfirst\t0\n\nthird\t1\n")
    assert [where for where, _ in read_records(str(path))] == [f"{path}:2", f"{path}:4"]
    # A bad row after a blank line keeps both in place, the last row of the file too.
    path = tmp_path / "test.csv"
    path.write_text("text\ngreat\n\nbad, really bad\n")
    rows = list(read_records(str(path), bad_rows="yield"))
    assert [where for where, _ in rows] == [f"{path}:2", f"{path}:3", f"{path}:4"]
    assert rows[1][1] == {"text": ""} and isinstance(rows[2][1], ValueError)


@pytest.mark.parametrize("content, message", [
    ('[\n  {"text": "a", "label": 0}\n]\n', "test.json:1: not JSON .*; expected JSON Lines, one object a line: "
                                             "this looks like a JSON document over several lines"),
    ('[{"text": "a", "label": 0}]\n', r"test.json:1: expected a JSON object, got list \(JSON Lines: one object a "
                                      r"line, not an array of them\)"),
    ('{"text": "a", "label": 0,}\n', r"test.json:1: not JSON \([^;]* at column 26\)$"),  # no hint: one line
    # An object cut short on one line: its own column (the newline's was given: column 1 of a
    # line after it), and no hint of a document over several lines (a walkthrough).
    ('{"text": "Anna Smith", "x": 1\n', r"test.json:1: not JSON \(Expecting ',' delimiter at column 30\)$"),
    ('{"text": "a", "label": 0}\n{"text": "b", "label": 1\n', r"test.json:2: not JSON \([^;]* at column 25\)$"),
    ('{\n  "data": [\n', "test.json:1: not JSON .*; expected JSON Lines, one object a line: this looks like a JSON "
                       "document over several lines"),
    # Python's json reads NaN (which its writer emits for a missing float): a class "nan" (a review).
    ('{"text": "a", "label": 0}\n{"text": "b", "label": NaN}\n',
     r"test.json:2: NaN is not JSON \(a missing number: leave the row out\)"),
    ('{"text": "a", "score": -Infinity}\n', "test.json:1: -Infinity is not JSON"),
    ('{"text": "a", "score": 1e999}\n', r"test.json:1: 1e999 is past a float's range"),
    # A repeated key: json keeps the last, the first value dropped without a word (a review).
    ('{"text": "great", "label": "pos", "label": "neg"}\n', "test.json:1: the object gives 'label' more than once"),
    # A CSV given where JSON Lines are read (SWAG's files to the choice task): said (a walkthrough).
    ('id,sent1,ending0,ending1,label\n', r"test.json:1: not JSON \(Expecting value at column 1\); expected JSON "
                                         r"Lines, one object a line: this looks like CSV or TSV$"),
    ("A sentence of text.\n", r"test.json:1: not JSON \(Expecting value at column 1\); expected JSON Lines, one "
                              r"object a line: this looks like text$"),
])
def test_a_json_file_that_is_not_json_lines_says_so(tmp_path, content, message):
    (tmp_path / "test.json").write_text(content)
    with pytest.raises(ValueError, match=message):
        list(read_records(str(tmp_path / "test.json")))


@pytest.mark.parametrize("content", [b"text_a,label\rx,a\ry,b\r",  # old Mac line endings
                                     b"text_a,label,,\r\nx,a,,\r\ny,b,,\r\n"])  # Excel's empty columns
def test_other_line_endings_and_empty_columns_are_read(tmp_path, tokenizer, content):
    (tmp_path / "train.csv").write_bytes(content)
    task = classification.load_task(_config("classification", train_file=str(tmp_path / "train.csv"),
                                            text_b_key=""), tokenizer)
    assert len(task.train) == 2 and list(task.train.features["label"]) == [0, 1]


def test_a_byte_order_mark_and_a_very_long_field_are_read(tmp_path, tokenizer):
    long_text = "word " * 40_000  # 200,000 characters: past the csv module's default field limit
    content = "\ufefftext_a,text_b,label\r\n" + f'"{long_text}",y,a\r\nshort,z,b\r\n'
    (tmp_path / "train.csv").write_text(content, encoding="utf-8")
    task = classification.load_task(_config("classification", train_file=str(tmp_path / "train.csv"),
                                            max_seq_length=32), tokenizer)
    assert len(task.train) == 2 and task.train.features["input_ids"].shape[1] <= 32
    assert list(task.train.features["label"]) == [0, 1]


def test_labels_are_stripped_and_an_empty_label_is_an_error(tmp_path, tokenizer):
    (tmp_path / "train.csv").write_text("text_a,label\ngood film,pos \nbad film,neg\nfine film, pos\n")
    task = classification.load_task(_config("classification", train_file=str(tmp_path / "train.csv"),
                                            text_b_key=""), tokenizer)
    assert task.train.examples.label_names == ("neg", "pos")  # a binary task stays binary
    assert list(task.train.features["label"]) == [1, 0, 1]
    (tmp_path / "train.csv").write_text("text_a,label\ngood film,pos\nbad film,neg\nno label here,\n")
    with pytest.raises(ValueError, match=r"train.csv:4: empty label \(column 'label', config.data.label_key\)"):
        classification.load_task(_config("classification", train_file=str(tmp_path / "train.csv"), text_b_key=""),
                                 tokenizer)
    # Two exports joined, one writing float labels: "1" and "1.0" became two of four classes (a review).
    (tmp_path / "train.csv").write_text("text_a,label\ngood film,1\nbad film,0\nfine film,1.0\ndull film,0.0\n")
    with pytest.raises(ValueError, match=r"train.csv: the labels \['0', '0.0'\] \(first at lines 3, 5\) are one number "
                                         r"written 2 ways"):
        classification.load_task(_config("classification", train_file=str(tmp_path / "train.csv"), text_b_key=""),
                                 tokenizer)


def test_empty_texts_are_counted_and_the_first_is_named(tmp_path, tokenizer, caplog):
    (tmp_path / "train.csv").write_text("text_a,text_b,label\nx,y,a\n,y,b\nx, ,a\nx,y,b\n")
    task = classification.load_task(_config("classification", train_file=str(tmp_path / "train.csv")), tokenizer)
    assert len(task.train) == 4
    warnings = [r.getMessage() for r in caplog.records if "empty text" in r.getMessage()]
    assert len(warnings) == 1 and "2 of 4 examples have an empty text (the first at " in warnings[0]
    assert warnings[0].endswith("train.csv:3); they are kept")


def test_own_file_settings_are_refused_for_a_dataset_task(tokenizer):
    """label_names (the order a reused head answers in) and label_kind were silently ignored by
    GLUE, demo and conll2003 tasks, whose labels are their dataset's (a review); so were a
    column's name (sst2 with text_a_key=review ran on its dataset's sentences) and text_b_key=''
    (pairs still). Refused, naming each and the task that reads them (a later review)."""
    from bertjax import tasks

    cases = [("sst2", dict(label_names="positive,negative"), "config.data.label_names='positive,negative'"),
             ("demo", dict(label_kind="float"), "config.data.label_kind='float'"),
             ("sst2", dict(text_a_key="review"), "config.data.text_a_key='review'"),
             ("mrpc", dict(text_b_key="", label_key="y"), "config.data.text_b_key='', config.data.label_key='y'"),
             ("conll2003", dict(label_names="O,B-PER"), "config.data.label_names='O,B-PER'"),
             ("conll2003", dict(tag_column=2), "config.data.tag_column=2"),
             ("hellaswag", dict(choices_key="endings"), "config.data.choices_key='endings'"),
             ("squad_v2", dict(skip_bad_answers=True), "config.data.skip_bad_answers=True")]
    for task, data, named in cases:
        with pytest.raises(ValueError, match=rf"config.task='{task}' reads its own dataset and would ignore "
                                             rf"{re.escape(named)}: for your own files use the task '"):
            tasks.load_task(_config(task, **data), tokenizer)
    for family in tasks.FAMILIES.values():  # "unset" is each key's default in configs/finetune.py
        defaults = _config(family.own_file_tasks[0]).data
        assert family.own_file_settings == {key: defaults[key] for key in family.own_file_settings}, family.name


def test_a_tsv_quoted_by_a_csv_writer_is_warned_of(tmp_path, caplog):
    """pandas' to_csv(sep="\\t") quotes a field holding a quote; TSV is read literally (GLUE's
    files need it), so the quotes stayed in the text without a word (a review)."""
    import csv

    path = tmp_path / "train.tsv"
    with open(path, "w", newline="") as f:
        csv.writer(f, delimiter="\t").writerows([["text", "label"], ['a "great" film', "pos"], ["plain", "neg"]])
    with caplog.at_level("WARNING"):
        rows = list(read_records(str(path)))
    assert rows[0][1]["text"] == '"a ""great"" film"'  # literal, as documented
    assert f"{path}:2: a field quoted as a CSV writer quotes it" in caplog.text
    assert caplog.text.count("a field quoted as") == 1
    caplog.clear()
    path.write_text('text\tlabel\n"quotes" of its own\tpos\n')
    with caplog.at_level("WARNING"):
        list(read_records(str(path)))
    assert not caplog.text


def test_tensorflow_is_set_up_before_tfds_imports_it():
    """TFDS imports TensorFlow itself when a builder first reads: before bertjax.runtime.tf_cpu,
    its notices were on and it kept the GPUs (a review). A fresh process reading GLUE under mock
    data records the settings TensorFlow was first imported with."""
    import subprocess
    import sys

    code = r"""
import importlib.abc, os, sys
seen = []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" and not seen:
            seen.append(os.environ.get("TF_ENABLE_ONEDNN_OPTS"))
sys.meta_path.insert(0, Watch())
import tensorflow_datasets as tfds
from bertjax.tasks import classification
with tfds.testing.mock_data(num_examples=2):
    classification.read_glue("rte", "", "train", None)
print("first imported with", seen)
"""
    env = {key: value for key, value in os.environ.items() if key != "TF_ENABLE_ONEDNN_OPTS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          cwd=os.path.join(os.path.dirname(__file__), "..", ".."))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "first imported with ['0']" in done.stdout, done.stdout  # tf_cpu's setting (its oneDNN notice off)

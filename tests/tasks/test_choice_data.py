"""Multiple-choice data: pair layout, the padded choice axis, JSONL files, TFDS hellaswag/piqa."""

import json
import logging
import os
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from bertjax.tasks import choice
from bertjax.runtime.tf_cpu import tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from configs import finetune as finetune_config  # noqa: E402


def _examples(contexts, choices, labels):
    return choice.ChoiceExamples("test", contexts, choices, np.array(labels), [f"e{i}" for i in range(len(contexts))])


def test_layout_by_hand(demo_tokenizer):
    examples = _examples(["The fox lives in rivers."], [["It eats fish.", "a", "b c"]], [0])
    split = choice.featurize(demo_tokenizer, examples, "train", max_seq_length=12)
    features = split.features
    assert features["input_ids"].shape == (1, 3, 12) and features["input_ids"].dtype == np.int32
    used = features["input_mask"][0].sum(1)
    decoded = [demo_tokenizer.decode(row[:n]) for row, n in zip(features["input_ids"][0], used)]
    # Choice 0 is too long for 12 tokens: the longer side (the context) loses its '.'.
    assert decoded == ["[CLS] the fox lives in rivers [SEP] it eats fish. [SEP]",
                       "[CLS] the fox lives in rivers. [SEP] a [SEP]",
                       "[CLS] the fox lives in rivers. [SEP] b c [SEP]"]
    assert features["segment_ids"][0].tolist() == [[0] * 7 + [1] * 5, [0] * 8 + [1] * 2 + [0] * 2,
                                                   [0] * 8 + [1] * 3 + [0]]
    assert features["choice_mask"].tolist() == [[1, 1, 1]] and features["label"].tolist() == [0]
    assert split.lengths.tolist() == [12] and used.tolist() == [12, 10, 11] and split.has_labels
    assert split.truncation == "1 of 3 (context, choice) pairs cut to 12 tokens"


def test_ragged_choices_are_padded_and_masked(demo_tokenizer):
    examples = _examples(["a", "b", "c"], [["x", "y"], ["x", "y", "z", "w"], ["fox", "fish", "rivers"]], [1, 3, -1])
    split = choice.featurize(demo_tokenizer, examples, "test", max_seq_length=8)
    features = split.features
    assert features["choice_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]]
    assert features["input_ids"].shape == (3, 4, 8) and features["label"].tolist() == [1, 3, -1]
    assert (features["input_ids"][0, 2:] == demo_tokenizer.pad_id).all() and features["input_mask"][0, 2:].sum() == 0
    assert features["input_ids"][2, 1, :5].tolist() == [demo_tokenizer.cls_id, *demo_tokenizer.encode("c"),
                                                       demo_tokenizer.sep_id, *demo_tokenizer.encode("fish"),
                                                       demo_tokenizer.sep_id]
    logits = np.array([[0.0, 1.0, 9.0, 9.0], [0.0, 1.0, 2.0, 3.0], [5.0, 0.0, 0.0, 9.0]])
    assert choice.predict(split, logits).tolist() == [1, 3, 0]  # padded choices never win
    with pytest.raises(ValueError, match=r"needs \(3, 4\)"):
        choice.predict(split, logits[:, :3])
    with pytest.raises(ValueError, match="e1: 1 choice"):
        choice.featurize(demo_tokenizer, _examples(["a", "b"], [["x", "y"], ["x"]], [0, 0]), "train")


def _write_jsonl(tmp_path, rows):
    path = tmp_path / "data.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_jsonl_reader_and_custom_keys(tmp_path, demo_tokenizer, caplog):
    path = _write_jsonl(tmp_path, [{"context": "The fox", "choices": ["eats", "sleeps"], "label": 1}, "",
                                   {"context": "A river", "choices": ["flows", "x", "y"], "label": -1}])
    examples = choice.read_jsonl(path)
    assert examples.labels.tolist() == [1, -1] and examples.locations == [f"{path}:1", f"{path}:3"]
    split = choice.load_split(demo_tokenizer, path, "dev", max_seq_length=16)
    assert split.features["choice_mask"].tolist() == [[1, 1, 0], [1, 1, 1]] and split.has_labels
    assert (f"{path}: 1 of 2 examples have no label (-1, the first at {path}:3): they weigh 0 in training and count "
            "in no accuracy") in caplog.text
    path = _write_jsonl(tmp_path, [{"q": "The fox", "options": ["eats", "sleeps"]}])
    examples = choice.read_jsonl(path, context_key="q", choices_key="options", label_key=None)
    assert examples.choices == [["eats", "sleeps"]] and examples.labels.tolist() == [-1]
    assert not choice.featurize(demo_tokenizer, examples, "test").has_labels
    assert "empty context" not in caplog.text
    # An empty context is data (choices alone), counted as classification counts empty texts (a
    # walkthrough: nothing was said).
    path = _write_jsonl(tmp_path, [{"context": "The fox", "choices": ["eats", "sleeps"], "label": 1},
                                   {"context": " \u200b", "choices": ["flows", "x"], "label": 0}])
    assert choice.read_jsonl(path).contexts == ["The fox", " \u200b"]
    assert f"{path}: 1 of 2 examples have an empty context (the first at {path}:2); they are kept" in caplog.text


def test_predictions_carry_the_rows_ids(tmp_path, demo_tokenizer):
    """The predictions' index was the row's place in the split: a file's ids were lost, and a
    blank line shifted every row after it against the file (a review)."""
    rows = [{"id": "q-7", "context": "The fox", "choices": ["eats", "sleeps"], "label": 1}, "",
            {"idx": 12, "context": "A river", "choices": ["flows", "x"], "label": 0}]
    split = choice.load_split(demo_tokenizer, _write_jsonl(tmp_path, rows), "dev", max_seq_length=16)
    choice.write_predictions(split, {"scores": np.array([[0.1, 0.9], [0.8, 0.2]])}, str(tmp_path / "out"))
    assert (tmp_path / "out" / "dev.tsv").read_text().splitlines() == ["index\tprediction\tlabel", "q-7\t1\t1",
                                                                       "12\t0\t0"]
    with pytest.raises(ValueError, match=r":1: id 'a\\tb' holds a tab"):
        choice.read_jsonl(_write_jsonl(tmp_path, [{"id": "a\tb", "context": "c", "choices": ["x", "y"], "label": 0}]))
    with pytest.raises(ValueError, match=r":3: no id, where other rows have one"):
        choice.read_jsonl(_write_jsonl(tmp_path, [rows[0], "", {**rows[2], "idx": None}]))
    repeated = _write_jsonl(tmp_path, [rows[0], {**rows[2], "id": "q-7"}])  # (a training file's are not read)
    assert choice.read_jsonl(repeated, predicted=False).ids is None
    with pytest.raises(ValueError, match=r":2: id 'q-7' again \(first at .*:1\)"):
        choice.read_jsonl(repeated)


@pytest.mark.parametrize("row, message", [
    ('{"context": "a", "choices": ["x", "y"], "label": 0', "not JSON"),
    ({"choices": ["x", "y"], "label": 0}, r"expected an object with a 'context' string; the row has \['choices', "
     r"'label'\] \(config.data.context_key and choices_key name the columns\)"),
    ({"context": 3, "choices": ["x", "y"], "label": 0}, r"expected an object with a 'context' string$"),
    ({"context": "a", "choices": ["x"], "label": 0}, r"expected 'choices' to be a list of at least 2 .*got \['x'\]"),
    ({"context": "a", "choices": "xy", "label": 0}, "expected 'choices' to be a list"),
    ({"context": "a", "choices": ["x", "y"], "label": 2}, r"expected 'label' to be an integer in \[0, 2\).*got 2"),
    ({"context": "a", "choices": ["x", "y"]}, r"no 'label' \(config.data.label_key\); the row has \['choices', "
     r"'context'\]"),  # (a walkthrough: "got None", as for a null)
    ({"context": "a", "options": ["x", "y"], "label": 0}, r"no 'choices' \(config.data.choices_key\)"),
    ({"context": "a", "choices": ["x", "y"], "label": None}, "expected 'label'.*got None"),
    ({"context": "a", "choices": ["x", "y"], "label": "1"}, "expected 'label'.*got '1'"),
    # A real choice in training but no choice when predicting (a review): refused where read.
    ({"context": "a", "choices": ["x", ""], "label": 1}, r"choice 1 is empty or only whitespace, control or "),
    ({"context": "a", "choices": [" ", "x"], "label": 1}, r"choice 0 is empty or only whitespace"),
    # Trained as [CLS] context [SEP] [SEP], refused by predict (a walkthrough).
    ({"context": "a", "choices": ["x", "\u200b"], "label": 1}, r"choice 1 is empty or only whitespace, control or "
     r"invisible characters \(which tokenizers drop\); every choice needs a text"),
    ({"context": "a", "choices": ["\x01", "x"], "label": 1}, r"choice 0 is empty or only whitespace"),
])
def test_jsonl_bad_lines_name_file_and_line(tmp_path, row, message):
    path = _write_jsonl(tmp_path, [{"context": "ok", "choices": ["x", "y"], "label": 0}, row])
    with pytest.raises(ValueError, match=f"{path}:2: {message}"):
        choice.read_jsonl(path)


@pytest.mark.parametrize("name", ["hellaswag", "piqa"])
def test_tfds_mock_data(demo_tokenizer, name, caplog):
    with tfds.testing.mock_data(num_examples=30), caplog.at_level(logging.WARNING):
        examples = choice.read_tfds(name, "validation")
        split = choice.featurize(demo_tokenizer, examples, "validation", max_seq_length=32)
    assert len(split) == len(examples) and all(len(c) >= 2 for c in examples.choices)
    assert ((examples.labels >= -1) & (examples.labels < split.features["choice_mask"].sum(1))).all()
    if name == "piqa":  # a 2-class label and two solutions: nothing to skip
        assert len(examples) == 30 and split.features["choice_mask"].shape == (30, 2)
    else:  # random labels in [0, 255) and a random number of endings: most are skipped, counted
        assert len(examples) < 30 and "label_outside_choices" in caplog.text
        assert split.features["choice_mask"].shape[1] == max(map(len, examples.choices))


def test_tfds_hellaswag_test_labels_are_kept_unlabeled(demo_tokenizer, tmp_path):
    rows = [("A man", ["runs", "sits", "jumps", "waves"], -1), ("Kids", ["play"], -1), ("Dog", ["barks", "x"], 7),
            ("Cat", ["purrs", ""], -1), ("Otter", ["swims", "dives"], -1)]

    def as_dataset(self, *args, **kwargs):
        def generate():
            for context, endings, label in rows:
                yield {"context": context, "endings": endings, "label": label, "activity_label": "",
                       "split_type": "", "source_id": ""}
        spec = {"context": tf.TensorSpec([], tf.string), "endings": tf.TensorSpec([None], tf.string),
                "label": tf.TensorSpec([], tf.int32),
                **{k: tf.TensorSpec([], tf.string) for k in ("activity_label", "split_type", "source_id")}}
        return tf.data.Dataset.from_generator(generate, output_signature=spec)

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        split = choice.load_split(demo_tokenizer, "hellaswag", "test", max_seq_length=16)
    # An empty ending, which prediction reads as no choice, is skipped as in own files (refused there).
    assert split.examples.contexts == ["A man", "Otter"] and split.features["label"].tolist() == [-1, -1]
    assert split.examples.locations == ["tfds:hellaswag[test]#0", "tfds:hellaswag[test]#4"] and not split.has_labels
    # The predictions file numbers the rows by their TFDS index, not their place after the skips (a review).
    written = choice.write_predictions(split, {"scores": np.array([[0, 1, 0, 0], [2, 1, 0, 0]], np.float32)},
                                       str(tmp_path))
    assert open(written[0]).read().splitlines() == ["index\tprediction", "0\t1", "4\t0"]


def test_a_training_file_without_labels_is_refused(tmp_path, demo_tokenizer):
    path = _write_jsonl(tmp_path, [{"context": "a", "choices": ["x", "y"], "label": -1}] * 3)
    config = finetune_config.get_config("choice")
    config.data.train_file = path
    with pytest.raises(ValueError, match=f"{path}: a training or evaluation split needs labels"):
        choice.load_task(config, demo_tokenizer)

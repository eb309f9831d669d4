"""GLUE metrics against numbers worked out by hand."""

import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from bertjax.evaluation import glue

# labels       1 1 1 1 1 0 0 0
# predictions  1 1 1 0 0 0 0 1
#              TP TP TP FN FN TN TN FP  -> TP 3, FN 2, TN 2, FP 1
LABELS = [1, 1, 1, 1, 1, 0, 0, 0]
PREDICTIONS = [1, 1, 1, 0, 0, 0, 0, 1]


def test_matthews_on_a_confusion_matrix():
    # (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (3*2 - 1*2) / sqrt(4*5*3*4) = 4 / sqrt(240)
    result = glue.compute_metrics("cola", PREDICTIONS, LABELS)
    assert result == {"matthews_corrcoef": pytest.approx(4 / math.sqrt(240))}
    assert glue.compute_metrics("cola", LABELS, LABELS)["matthews_corrcoef"] == pytest.approx(1.0)
    inverted = [1 - label for label in LABELS]
    assert glue.compute_metrics("cola", inverted, LABELS)["matthews_corrcoef"] == pytest.approx(-1.0)


def test_accuracy_and_f1_of_class_one():
    # accuracy: 5 of 8 right; F1 = 2 TP / (2 TP + FP + FN) = 6 / (6 + 1 + 2) = 2/3
    for task in ("mrpc", "qqp"):
        assert glue.compute_metrics(task, PREDICTIONS, LABELS) == {"accuracy": pytest.approx(5 / 8),
                                                                   "f1": pytest.approx(2 / 3)}
    # class 1 is the positive one: swapping the classes gives TP 2, FP 2, FN 1 -> 4 / (4 + 2 + 1)
    swapped = glue.compute_metrics("mrpc", [1 - p for p in PREDICTIONS], [1 - y for y in LABELS])
    assert swapped["f1"] == pytest.approx(4 / 7)


@pytest.mark.parametrize("task", ["sst2", "mnli", "qnli", "rte", "wnli", "ax", "demo", "classification"])
def test_accuracy_only_tasks(task):
    # 3 classes: 3 of 5 right
    assert glue.compute_metrics(task, np.array([0, 1, 2, 2, 1]), np.array([0, 1, 2, 0, 0])) == {
        "accuracy": pytest.approx(3 / 5)}


def test_pearson_and_spearman_with_ties():
    x, y = [1.0, 2.0, 2.0, 3.0], [1.0, 3.0, 2.0, 5.0]
    # Pearson: means 2 and 2.75; dx = -1 0 0 1, dy = -1.75 0.25 -0.75 2.25
    #   sum dx dy = 1.75 + 2.25 = 4; sum dx^2 = 2; sum dy^2 = 3.0625 + 0.0625 + 0.5625 + 5.0625 = 8.75
    pearson = 4 / math.sqrt(2 * 8.75)
    # Spearman: ranks (ties averaged) 1 2.5 2.5 4 and 1 3 2 4, both of mean 2.5
    #   dx = -1.5 0 0 1.5, dy = -1.5 0.5 -0.5 1.5: sum dx dy = 4.5, sum dx^2 = 4.5, sum dy^2 = 5
    spearman = 4.5 / math.sqrt(4.5 * 5)
    assert glue.compute_metrics("stsb", x, y) == {"pearson": pytest.approx(pearson),
                                                  "spearman": pytest.approx(spearman)}
    # regression adds the mean squared error: differences 0 -1 0 -2 -> (0 + 1 + 0 + 4) / 4
    assert glue.compute_metrics("regression", x, y) == {"pearson": pytest.approx(pearson),
                                                        "spearman": pytest.approx(spearman),
                                                        "mse": pytest.approx(1.25)}


def test_degenerate_inputs_give_zero():
    # a constant predictor: TN + FN = 0 in the MCC denominator
    assert glue.compute_metrics("cola", [1, 1, 1, 1], [1, 0, 1, 0]) == {"matthews_corrcoef": 0.0}
    # one class in the labels: TP + FN = 0
    assert glue.compute_metrics("cola", [1, 0, 1, 0], [0, 0, 0, 0]) == {"matthews_corrcoef": 0.0}
    # no positive prediction and no positive label: F1 0 although every answer is right
    assert glue.compute_metrics("qqp", [0, 0, 0], [0, 0, 0]) == {"accuracy": 1.0, "f1": 0.0}
    # a constant side has no correlation (scipy would give NaN)
    assert glue.compute_metrics("stsb", [2.5, 2.5, 2.5], [1.0, 2.0, 3.0]) == {"pearson": 0.0, "spearman": 0.0}
    assert glue.compute_metrics("regression", [1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) == {
        "pearson": 0.0, "spearman": 0.0, "mse": pytest.approx((9 + 4 + 1) / 3)}
    # a diverged model's NaN or infinite scores: no correlation, never a NaN metric
    assert glue.compute_metrics("stsb", [1.0, np.nan, 2.0], [1.0, 2.0, 3.0]) == {"pearson": 0.0, "spearman": 0.0}
    assert glue.compute_metrics("stsb", [1.0, np.inf, 2.0], [1.0, 2.0, 3.0]) == {"pearson": 0.0, "spearman": 0.0}


@pytest.mark.parametrize("predictions, labels", [([1, 0], [1, 0, 1]), ([], []), ([[1, 0]], [[1, 0]])])
def test_bad_input_names_the_task(predictions, labels):
    with pytest.raises(ValueError, match="^mrpc: .*same length"):
        glue.compute_metrics("mrpc", predictions, labels)


def test_main_metric_table():
    assert {task: glue.main_metric(task) for task in
            ("cola", "stsb", "mrpc", "qqp", "regression", "sst2", "mnli", "qnli", "rte", "wnli", "demo",
             "classification")} == {
        "cola": "matthews_corrcoef", "stsb": "spearman", "mrpc": "f1", "qqp": "f1", "regression": "pearson",
        "sst2": "accuracy", "mnli": "accuracy", "qnli": "accuracy", "rte": "accuracy", "wnli": "accuracy",
        "demo": "accuracy", "classification": "accuracy"}
    # the main metric is always one of the task's metrics
    for task, predictions in (("cola", [0, 1]), ("stsb", [0.5, 1.5]), ("qqp", [0, 1]), ("rte", [0, 1]),
                              ("regression", [0.5, 1.5])):
        assert glue.main_metric(task) in glue.compute_metrics(task, predictions, [0, 1])


def test_evaluation_imports_no_jax_or_tensorflow():
    code = ("import sys; import bertjax.evaluation.glue, bertjax.evaluation.squad, bertjax.evaluation.ner; "
            "print(sorted(m for m in ('jax', 'flax', 'tensorflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=pathlib.Path(__file__).parents[2]).stdout
    assert out.strip() == "[]"

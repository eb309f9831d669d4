"""GLUE metrics as the benchmark defines them (values as fractions; correlations in [-1, 1]).

    cola                  matthews_corrcoef
    stsb, regression      pearson, spearman (regression also mse)
    mrpc, qqp             accuracy, f1 (of the positive class 1)
    every other task      accuracy
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def main_metric(task: str) -> str:
    """The metric that picks the best checkpoint (higher is better)."""
    return {"cola": "matthews_corrcoef", "stsb": "pearson", "regression": "pearson", "mrpc": "f1",
            "qqp": "f1"}.get(task, "accuracy")


def compute_metrics(task: str, predictions, labels) -> dict[str, float]:
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape or predictions.size == 0:
        raise ValueError(f"{task}: {predictions.shape} predictions for {labels.shape} labels")
    if task in ("stsb", "regression"):
        out = {"pearson": _correlation(stats.pearsonr, predictions, labels),
               "spearman": _correlation(stats.spearmanr, predictions, labels)}
        if task == "regression":
            out["mse"] = float(np.mean((predictions.astype(np.float64) - labels) ** 2))
        return out
    accuracy = float(np.mean(predictions == labels))
    if task == "cola":
        return {"matthews_corrcoef": _matthews(predictions, labels)}
    if task in ("mrpc", "qqp"):
        return {"accuracy": accuracy, "f1": _f1(predictions, labels)}
    return {"accuracy": accuracy}


def _correlation(fn, x, y) -> float:
    if np.all(x == x.flat[0]) or np.all(y == y.flat[0]):
        return 0.0
    return float(fn(x.astype(np.float64), y.astype(np.float64))[0])


def _matthews(predictions, labels) -> float:
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions == 0) & (labels == 0)))
    fp = float(np.sum((predictions == 1) & (labels == 0)))
    fn = float(np.sum((predictions == 0) & (labels == 1)))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if denominator == 0 else (tp * tn - fp * fn) / denominator


def _f1(predictions, labels) -> float:
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    predicted, actual = float(np.sum(predictions == 1)), float(np.sum(labels == 1))
    return 0.0 if tp == 0 else 2 * tp / (predicted + actual)

"""GLUE metrics as the benchmark defines them; numpy and scipy only.

    task                      metrics (fractions; correlations in [-1, 1])
    cola                      matthews_corrcoef
    stsb                      pearson, spearman
    mrpc, qqp                 accuracy, f1 (F1 of the positive class 1)
    regression (own files)    pearson, spearman, mse
    every other task          accuracy (sst2, mnli, qnli, rte, wnli, ax, demo, classification...)

Predictions are class ids <int>[N] for classification and scores <float>[N] for stsb and
regression; labels likewise. Degenerate inputs give 0.0 rather than NaN: a constant
predictor has no correlation with anything, and the best-checkpoint choice must stay a
comparison of numbers.
"""

from __future__ import annotations

import numpy as np

_MAIN_METRIC = {"cola": "matthews_corrcoef", "stsb": "spearman", "mrpc": "f1", "qqp": "f1",
                "regression": "pearson"}


def main_metric(task: str) -> str:
    """The metric that picks the best checkpoint (higher is better).

    STS-B: GLUE reports Pearson and Spearman; the BERT paper (Table 1) reports Spearman, so
    that is what a BERT run is compared by. Own regression files: Pearson, the first reported.
    MRPC/QQP: F1 (the BERT paper's number); every other task: accuracy.
    """
    return _MAIN_METRIC.get(task, "accuracy")


def compute_metrics(task: str, predictions, labels) -> dict[str, float]:
    """The task's official metrics. predictions, labels: [N] array-likes, N >= 1."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.ndim != 1 or predictions.shape != labels.shape or predictions.size == 0:
        raise ValueError(f"{task}: predictions {predictions.shape} and labels {labels.shape} must be "
                         "two non-empty 1-D sequences of the same length")
    if task in ("stsb", "regression"):
        from scipy import stats  # a large import every fine-tuning launcher would otherwise pay at start-up

        predictions, labels = predictions.astype(np.float64), labels.astype(np.float64)
        result = {"pearson": correlation(stats.pearsonr, predictions, labels),
                  "spearman": correlation(stats.spearmanr, predictions, labels)}
        if task == "regression":
            result["mse"] = float(np.mean((predictions - labels) ** 2))
        return result
    if task == "cola":
        return {"matthews_corrcoef": matthews_corrcoef(predictions, labels)}
    accuracy = float(np.mean(predictions == labels))
    if task in ("mrpc", "qqp"):
        return {"accuracy": accuracy, "f1": f1_positive(predictions, labels)}
    return {"accuracy": accuracy}


def correlation(fn, x: np.ndarray, y: np.ndarray) -> float:
    """fn (scipy.stats.pearsonr or spearmanr) of x, y <float64>[N]; 0.0 when either is
    constant (scipy would give NaN: the correlation is undefined) or holds a NaN or infinity
    (a diverged model's: a NaN metric would never compare as worse than a later one)."""
    if not (np.isfinite(x).all() and np.isfinite(y).all()) or np.all(x == x[0]) or np.all(y == y[0]):
        return 0.0
    return float(fn(x, y)[0])


def matthews_corrcoef(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Binary MCC of class ids in {0, 1}:

        (TP * TN - FP * FN) / sqrt((TP + FP) (TP + FN) (TN + FP) (TN + FN))

    0.0 when a factor of the denominator is 0 (a constant predictor, or one class only in
    the labels), as scikit-learn's matthews_corrcoef.
    """
    tp, tn, fp, fn = _confusion(predictions, labels)
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if denominator == 0 else float((tp * tn - fp * fn) / denominator)


def f1_positive(predictions: np.ndarray, labels: np.ndarray) -> float:
    """F1 of the positive class 1: 2 TP / (2 TP + FP + FN). 0.0 when TP = 0, which includes
    no positive predictions and no positive labels at all (scikit-learn's zero_division=0)."""
    tp, _, fp, fn = _confusion(predictions, labels)
    return 0.0 if tp == 0 else float(2 * tp / (2 * tp + fp + fn))


def _confusion(predictions: np.ndarray, labels: np.ndarray) -> tuple[float, float, float, float]:
    """(TP, TN, FP, FN) counts of class 1 against class 0, as floats (no integer overflow)."""
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions == 0) & (labels == 0)))
    fp = float(np.sum((predictions == 1) & (labels == 0)))
    fn = float(np.sum((predictions == 0) & (labels == 1)))
    return tp, tn, fp, fn

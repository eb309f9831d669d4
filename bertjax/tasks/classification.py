"""Sentence and sentence-pair classification or regression: GLUE, the demo task, your own files.

Tasks (config.task):
  cola sst2 mrpc qqp stsb mnli qnli rte wnli   TFDS `glue/<task>`; labels in TFDS's order
      (MNLI: entailment, neutral, contradiction, unlike run_classifier.py's; WNLI:
      not_entailment, entailment, unlike RTE's). STS-B is regression. MNLI is scored on
      validation_matched and validation_mismatched; test splits (labels -1) are predicted
      into the GLUE submission files, and MNLI's model also predicts `glue/ax` (AX.tsv).
  demo              the demo world's sentence-pair task (bertjax.data.corpora.demo_corpus.demo_task)
  classification    your own CSV/TSV/JSONL files: config.data.train_file, eval_file, test_file,
  regression        columns text_a_key, text_b_key ("" = single sentences), label_key; labels are
                    names collected from the training file (or config.data.label_names) or,
                    for regression, numbers

Inputs are `[CLS] a [SEP] b [SEP]` (common.encode_pairs); the head is a dense layer on the
pooled [CLS] vector (one output for regression, trained with mean squared error).

    Split.features: input_ids, segment_ids, input_mask <int32>[N, S];
                    label <int32>[N] (class id) or <float32>[N] (regression)
    Split.examples: Examples (ids for the submission files, texts' locations, label names)
"""

from __future__ import annotations

import dataclasses
import math
import re
import unicodedata
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from bertjax.data.sources import prepared_tfds_builder, read_tfds_split
from bertjax.evaluation import glue as glue_metrics
from bertjax.models import BertForSequenceClassification, classification_sums, example_counts
from bertjax.runtime import fileio
from bertjax.tasks.common import (Split, Task, bert_inputs, encode_pairs, example_ids, file_format, own_files,
                                  read_records, row_id, truncation, write_lines)
from bertjax.tasks.family import Family, column_text, hf_label_names, no_options
from bertjax.tasks.raw_text import has_text, text_pair


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """text_keys: the TFDS features of text a (and b); labels: names in TFDS order (None =
    regression); eval_splits: scored; test_splits: (TFDS name, split, submission file)."""

    text_keys: tuple[str, str | None]
    labels: tuple[str, ...] | None
    eval_splits: tuple[str, ...] = ("validation",)
    test_splits: tuple[tuple[str, str, str], ...] = ()
    numeric_submission: bool = True  # binary tasks submit 0/1, NLI tasks their label names


def _glue(file, keys, labels, **kw):
    return GlueTask(keys, labels, test_splits=kw.pop("test_splits", ((None, "test", file),)), **kw)


GLUE = {
    "cola": _glue("CoLA.tsv", ("sentence", None), ("unacceptable", "acceptable")),
    "sst2": _glue("SST-2.tsv", ("sentence", None), ("negative", "positive")),
    "mrpc": _glue("MRPC.tsv", ("sentence1", "sentence2"), ("not_equivalent", "equivalent")),
    "qqp": _glue("QQP.tsv", ("question1", "question2"), ("not_duplicate", "duplicate")),
    "stsb": _glue("STS-B.tsv", ("sentence1", "sentence2"), None),
    "mnli": _glue(None, ("premise", "hypothesis"), ("entailment", "neutral", "contradiction"),
                  eval_splits=("validation_matched", "validation_mismatched"), numeric_submission=False,
                  test_splits=((None, "test_matched", "MNLI-m.tsv"), (None, "test_mismatched", "MNLI-mm.tsv"),
                               ("glue/ax", "test", "AX.tsv"))),
    "qnli": _glue("QNLI.tsv", ("question", "sentence"), ("entailment", "not_entailment"), numeric_submission=False),
    "rte": _glue("RTE.tsv", ("sentence1", "sentence2"), ("entailment", "not_entailment"), numeric_submission=False),
    "wnli": _glue("WNLI.tsv", ("sentence1", "sentence2"), ("not_entailment", "entailment")),
}
TASKS = (*GLUE, "demo", "classification", "regression")


@dataclasses.dataclass
class Examples:
    """One split's raw examples. labels: class names (str), numbers (float) or None
    (unlabeled); ids: what the submission's `index` column shows; locations: each example's
    file:line, for messages (None for TFDS and the demo)."""

    source: str
    texts_a: list[str]
    texts_b: list[str] | None
    labels: list[Any] | None
    ids: list[Any]
    submission_file: str = ""
    locations: list[str] | None = None


@dataclasses.dataclass
class SplitInfo:
    """Split.examples of a classification split."""

    examples: Examples
    label_names: tuple[str, ...] | None  # None = regression


# -- Reading. --

def _decode(values) -> list[str]:
    return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v) for v in values]


def read_glue(task: str, dataset: str, split: str, data_dir: str | None, submission_file: str = "") -> Examples:
    """One split of TFDS glue/<task> (or `dataset`, e.g. glue/ax) -> Examples; test labels (-1)
    become None."""
    spec = GLUE[task]
    name = dataset or f"glue/{task}"
    builder = prepared_tfds_builder(name, data_dir)
    if spec.labels is not None:
        names = tuple(builder.info.features["label"].names)
        if names != spec.labels:
            raise ValueError(f"TFDS {name}: label names {names} differ from the expected {spec.labels}; "
                             "a TFDS version change? Predictions would be mislabelled")
    texts_a, texts_b, labels, ids = [], [], [], []
    key_a, key_b = spec.text_keys
    for batch in read_tfds_split(builder, split, batch_size=4096):
        texts_a += _decode(batch[key_a])
        if key_b:
            texts_b += _decode(batch[key_b])
        labels += batch["label"].tolist()
        ids += batch["idx"].tolist()
    if not texts_a:
        raise ValueError(f"TFDS {name}[{split}] has no examples")
    unlabeled = all(label == -1 for label in labels)
    if unlabeled:
        labels = None
    else:
        # -1 (GLUE's "no label") beside real labels would index the last class, or be an STS-B score.
        expected = "a score in [0, 5]" if spec.labels is None else f"0..{len(spec.labels) - 1}"
        bad = next((k for k, label in enumerate(labels) if (
            not 0 <= label <= 5 if spec.labels is None else not 0 <= label < len(spec.labels))), None)
        if bad is not None:
            raise ValueError(f"TFDS {name}[{split}]: example idx {ids[bad]} has label {labels[bad]}, expected "
                             f"{expected} (a split is labelled throughout or not at all)")
        if spec.labels is not None:
            labels = [spec.labels[label] for label in labels]
        else:  # TFDS's float32 scores as GLUE wrote them: 3.32, not 3.319999933242798
            labels = [float(str(np.float32(label))) for label in labels]
    return Examples(f"tfds:{name}[{split}]", texts_a, texts_b if key_b else None, labels, ids, submission_file)


def read_demo(split: str) -> Examples:
    from bertjax.data.corpora import demo_corpus

    examples, names = demo_corpus.demo_task(split)
    return Examples(f"demo[{split}]", [a for a, _, _ in examples], [b for _, b, _ in examples],
                    [names[label] for _, _, label in examples], list(range(len(examples))))


def read_file(path: str, data_config, *, regression: bool, labeled: bool = True, pairs: bool | None = None,
              predicted: bool = True) -> Examples:
    """Your own CSV/TSV/JSONL file -> Examples (labeled=False: a test file, labels not read).
    pairs: whether to read config.data.text_b_key (False: single texts whatever the file
    holds); None: this file decides, single texts when its column is empty in every row (the
    training file decides for the others: the model reads what it trained on). predicted:
    whether its predictions are written, which needs distinct ids (`example_ids`).

    Errors name file:line and the config key: a missing column, a text that is not text,
    labels of mixed types or (regression) not numbers, an empty file.
    """
    keys = {"text_a_key": data_config.text_a_key, "text_b_key": data_config.text_b_key if pairs is not False else "",
            "label_key": data_config.label_key if labeled else ""}
    named = [(key, column) for key, column in keys.items() if column]
    for k, (key, column) in enumerate(named):  # a text read as its own label, or a pair of one text twice
        for other, same in named[k + 1:]:
            if same == column:
                raise ValueError(f"config.data.{key} and config.data.{other} both name the column {column!r}: each "
                                 "role needs a column of its own")
    for key in ("text_a_key", "label_key") if labeled else ("text_a_key",):
        if not keys[key]:
            raise ValueError(f"config.data.{key} must name a column of {path}")
    texts_a, texts_b, labels, ids, label_types, lines = [], [], [], [], {}, []
    for where, row in read_records(path, data_config.file_format):
        lines.append(where)
        for config_key, column in keys.items():
            if column and column not in row:
                single = "; config.data.text_b_key='' reads single texts" if config_key == "text_b_key" else ""
                # A file without a header line has its first row read as the column names.
                header = ("; line 1 is read as the header, the column names: a file without one needs one"
                          if file_format(path, data_config.file_format) != "jsonl" else "")
                [name] = row if len(row) == 1 else [""]
                if header and any(s in name for s in "\t,;|"):  # one column whose name holds another separator
                    fits = "tsv" if "\t" in name else "csv" if "," in name else ""
                    header = ("; the header is one column holding a separator: " + (
                        f"set config.data.file_format={fits}" if fits else "bertjax reads CSV (,) and TSV (tab)"))
                raise ValueError(f"{where}: no column {column!r} (config.data.{config_key}); the row has "
                                 f"{sorted(row)}{single}{header}")
        for column in (keys["text_a_key"], keys["text_b_key"]):
            if column and not isinstance(row[column], str):
                raise ValueError(f"{where}: column {column!r} should be text, got {row[column]!r}"[:300])
        texts_a.append(row[keys["text_a_key"]])
        if keys["text_b_key"]:
            texts_b.append(row[keys["text_b_key"]])
        ids.append(row_id(row))
        if labeled:
            label = row[keys["label_key"]]
            if not isinstance(label, (str, int, float)) or isinstance(label, bool):
                raise ValueError(f"{where}: label {label!r} should be a class name or a number"[:300])
            label_types.setdefault("number" if isinstance(label, (int, float)) else "str", where)
            labels.append(label)
    if not texts_a:
        raise ValueError(f"{path}: no examples (an empty file?)")
    # An empty column read as pairs would make a pair model nothing could be predicted with.
    if pairs is None and keys["text_b_key"] and not any(b.strip() for b in texts_b):
        logging.warning("%s: column %r (config.data.text_b_key) is empty in every row: single texts, in every "
                        "file (set config.data.text_b_key='' to say so)", path, keys["text_b_key"])
        keys["text_b_key"], texts_b = "", []
    empty = [where for where, a, b in zip(lines, texts_a, texts_b or texts_a) if not a.strip() or not b.strip()]
    if empty:
        logging.warning("%s: %d of %d examples have an empty text (the first at %s); they are kept", path,
                        len(empty), len(texts_a), empty[0])
    if len(label_types) > 1:
        raise ValueError(f"{path}: the {keys['label_key']!r} column mixes types "
                         f"({', '.join(f'{t} at {w}' for t, w in label_types.items())}); expected all "
                         f"{'numbers' if regression else 'class names'}")
    return Examples(path, texts_a, texts_b if keys["text_b_key"] else None,
                    _parse_labels(labels, lines, regression, keys["label_key"]) if labeled else None,
                    (predicted and example_ids(ids, lines)) or list(range(len(texts_a))), locations=lines)


def _given_label_names(names: str, regression: bool) -> tuple[str, ...] | None:
    """config.data.label_names as a tuple (None when unset); ValueError for names that are not
    distinct and non-empty, or given to a regression (which has no classes: they were ignored)."""
    if not names:
        return None
    if regression:
        raise ValueError(f"config.data.label_names={names!r} names classes, and this is a regression (config.task="
                         "regression or config.data.label_kind='float'): leave it unset")
    label_names = tuple(name.strip() for name in names.split(","))
    if "" in label_names or len(set(label_names)) < len(label_names):
        raise ValueError(f"config.data.label_names={names!r}: expected distinct, non-empty names separated by commas")
    return label_names


def _sorted_labels(labels: list[str]) -> tuple[str, ...]:
    """The distinct labels, in order: by value where every one is a whole number ("2" before
    "10": labels 0..n-1 are classes 0..n-1, in logits and exports alike), else as text."""
    names = set(labels)
    if all(re.fullmatch(r"[+-]?\d+", name, re.ASCII) for name in names):
        return tuple(sorted(names, key=int))
    return tuple(sorted(names))


def _refuse_one_number_written_twice(label_names: tuple[str, ...], train: Examples) -> None:
    """ValueError when two class names of `train`'s labels are one number ("1" and "1.0", as
    files joined from two exports may hold), naming the first line of each: they would be two
    classes, silently."""
    by_value: dict[float, list[str]] = {}
    for name in label_names:
        try:
            by_value.setdefault(float(name), []).append(name)
        except ValueError:
            continue
    same = next((names for names in by_value.values() if len(names) > 1), None)
    if same:
        lines = "" if train.locations is None else " (first at lines {})".format(", ".join(
            train.locations[train.labels.index(name)].rsplit(":", 1)[-1] for name in same))
        raise ValueError(f"{train.source}: the labels {same}{lines} are one number written {len(same)} ways, which "
                         f"would be {len(same)} classes; write each class one way")


# Labels that are a missing value written as text (pandas writes NaN and None as these with astype(str)).
_MISSING_AS_TEXT = ("nan", "none", "null")


def _label_key(name: str) -> str:
    """A class name as files joined from two sources may write it alike: Unicode's compatibility
    form (macOS writes 'café' decomposed), no invisible characters (a zero-width space), no
    enclosing quotes (a CSV's `, "neg"` is read as text, quotes included: its quote follows a
    space), case folded."""
    name = "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf")
    return (name[1:-1] if len(name) > 1 and name[0] == name[-1] == '"' else name).casefold()


def _shown(name: str) -> str:
    """A label as a warning shows it: escaped where it would look like its twin (an invisible or
    combining character, a form other than NFC), else as written (any script)."""
    hidden = unicodedata.normalize("NFC", name) != name or any(
        unicodedata.category(c) == "Cf" or unicodedata.combining(c) for c in name)
    return ascii(name) if hidden else repr(name)


def _warn_of_suspect_labels(label_names: tuple[str, ...], path: str) -> None:
    """Warns of classes guessed from a training file that are likely no classes: a missing value
    written as text ('nan') and names that differ only in case, Unicode form, invisible
    characters or enclosing quotes ('Good', 'good', '"good"')."""
    missing = [name for name in label_names if name.lower() in _MISSING_AS_TEXT]
    if missing:
        logging.warning("%s: the label(s) %s read as a missing value written as text: each is a class of its own; "
                        "leave those rows out", path, missing)
    alike: dict[str, list[str]] = {}
    for name in label_names:
        alike.setdefault(_label_key(name), []).append(name)
    twins = [names for names in alike.values() if len(names) > 1]
    if twins:
        logging.warning("%s: labels that differ only in case, Unicode form, invisible characters or quotes are classes "
                        "of their own: %s", path, "; ".join(", ".join(map(_shown, names)) for names in twins))


# A score as written: ASCII digits (float() also reads '1_5' as 15 and other scripts' digits).
_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", re.ASCII)


def _parse_labels(labels: list, label_lines: list[str], regression: bool, column: str) -> list:
    """Class names as strings, stripped (`pos ` is `pos`), or (regression) finite floats;
    an empty label, or one with a tab or line break (the predictions' TSV could not hold it),
    is an error naming file:line (it would otherwise become a class)."""
    if not regression:
        names = [str(label).strip() for label in labels]
        if "" in names:
            where = label_lines[names.index("")]
            raise ValueError(f"{where}: empty label (column {column!r}, config.data.label_key); every training "
                             f"and evaluation example needs one")
        for name, where in zip(names, label_lines):
            if any(c in name for c in "\t\n\r"):
                raise ValueError(f"{where}: label {name!r} holds a tab or a line break, which the predictions' TSV "
                                 "cannot hold")
        return names
    numbers = []
    for label, where in zip(labels, label_lines):
        try:
            if isinstance(label, str) and not _NUMBER.fullmatch(label):
                raise ValueError
            value = float(label)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{where}: label {label!r:.60} is not a number (config.data.label_kind='float')") from None
        if not math.isfinite(value):
            raise ValueError(f"{where}: label {label!r} is not a finite number")
        numbers.append(value)
    return numbers


# -- Features. --

# Labels compare by their code points: a file written on macOS may spell "café" with a combining accent.
_NORMAL_FORM_HINT = ("; it differs from a label of the task only in its Unicode normal form (an accent as a separate "
                     "combining mark, NFD, or one character, NFC): write both files in one form, e.g. NFC")


def featurize(tokenizer, examples: Examples, label_names: tuple[str, ...] | None, name: str,
              max_seq_length: int) -> Split:
    """Examples -> Split; a label not in `label_names` is an error naming the file and the label."""
    features, lengths, truncated = encode_pairs(tokenizer, examples.texts_a, examples.texts_b, max_seq_length)
    if examples.labels is None:
        features["label"] = np.zeros(len(lengths), np.float32 if label_names is None else np.int32)
    elif label_names is None:
        features["label"] = np.asarray(examples.labels, np.float32)
    else:
        index = {label: i for i, label in enumerate(label_names)}
        unknown = sorted({label for label in examples.labels if label not in index})
        if unknown:
            first = next(i for i, label in enumerate(examples.labels) if label not in index)
            where = examples.locations[first] if examples.locations else examples.source
            raise ValueError(f"{where}: label {examples.labels[first]!r} is not among the task's labels "
                             f"{list(label_names)} (the training file's, or config.data.label_names)"
                             + (f"; unknown in all: {unknown[:5]}" if len(unknown) > 1 else "")
                             + (_NORMAL_FORM_HINT if unicodedata.normalize("NFC", examples.labels[first]) in {
                                 unicodedata.normalize("NFC", known) for known in label_names} else "")
                             + _same_number_hint(examples.labels[first], label_names)
                             + ("; scores to predict are config.data.label_kind='float' (regression)"
                                if _look_like_scores(label_names) else ""))
        features["label"] = np.asarray([index[label] for label in examples.labels], np.int32)
    return Split(name, features, lengths, SplitInfo(examples, label_names), has_labels=examples.labels is not None,
                 truncation=truncation(truncated, "examples", max_seq_length))


def _same_number_hint(label: str, label_names: tuple[str, ...]) -> str:
    """A note when `label` is a number one of `label_names` writes another way ("1" and "1.0",
    as a JSON writer's floats and a CSV's integers), else ""."""
    def value(name: str) -> float | None:
        return float(name) if _NUMBER.fullmatch(name) else None
    number = value(label)
    same = [] if number is None else [name for name in label_names if value(name) == number]
    return f"; it is the number of label {same[0]!r} written another way: write each class one way in every file" if (
        same) else ""


def _look_like_scores(labels) -> bool:
    """Every label a number, one of them not whole (3.8, 2.5): likely a regression's scores."""
    try:
        values = [float(label) for label in labels]
    except (TypeError, ValueError):
        return False
    return any(not value.is_integer() for value in values)


# -- The task. --

def load_task(config, tokenizer) -> Task:
    """The configured classification/regression task with its splits tokenized."""
    task, data = config.task, config.data
    data_dir = data.tfds_data_dir or None
    if task in GLUE:
        spec = GLUE[task]
        label_names = spec.labels
        train = read_glue(task, "", "train", data_dir)
        evals = [read_glue(task, "", split, data_dir) for split in spec.eval_splits]
        tests = [read_glue(task, dataset, split, data_dir, submission_file=file)
                 for dataset, split, file in spec.test_splits]
        split_names = ["train", *spec.eval_splits,
                       *(f"{dataset.split('/')[-1]}_{split}" if dataset else split for dataset, split, _ in spec.test_splits)]
    elif task == "demo":
        from bertjax.data.corpora import demo_corpus

        label_names = demo_corpus.TASK_LABELS
        train, evals, tests = read_demo("train"), [read_demo("dev")], []
        split_names = ["train", "dev"]
    elif task in ("classification", "regression"):
        regression = task == "regression" or data.label_kind == "float"
        label_names = _given_label_names(data.label_names, regression)  # checked before any file is read
        files = dict(own_files(config))
        train = read_file(files["train"], data, regression=regression, predicted=False)
        pairs = train.texts_b is not None
        evals = [read_file(files["eval"], data, regression=regression, pairs=pairs)] if "eval" in files else []
        tests = ([read_file(files["test"], data, regression=regression, labeled=False, pairs=pairs)]
                 if "test" in files else [])
        if label_names is None and not regression:
            label_names = _sorted_labels(train.labels)
            _refuse_one_number_written_twice(label_names, train)
            logging.info("%s: labels %s (sorted; set config.data.label_names to fix the order)", data.train_file,
                         list(label_names))
            if _look_like_scores(label_names):
                logging.warning("%s: the labels %s look like scores; they are classes unless "
                                "config.data.label_kind='float' (regression)", data.train_file, list(label_names)[:8])
            _warn_of_suspect_labels(label_names, data.train_file)
        split_names = list(files)
    else:
        raise ValueError(f"config.task={task!r} is not a classification task")
    if label_names is not None and len(label_names) < 2:
        raise ValueError(f"config.task={task!r}: need at least 2 labels, got {list(label_names)}")

    splits = [featurize(tokenizer, examples, label_names, name, data.max_seq_length)
              for examples, name in zip([train, *evals, *tests], split_names)]
    for split in splits[1:1 + len(evals)]:
        if not split.has_labels:
            raise ValueError(f"{split.examples.examples.source}: an evaluation split needs labels")
        scores = split.examples.examples.labels
        if label_names is None and len(set(scores)) == 1:  # (correlation.py gives 0 for a constant)
            logging.warning("%s: every score is %s: Pearson's and Spearman's correlations are undefined there "
                            "(logged as 0), so the best checkpoint is picked by the dev loss alone",
                            split.examples.examples.source, scores[0])
    metric_task = task if task in GLUE else ("regression" if label_names is None else "classification")
    num_labels = 1 if label_names is None else len(label_names)

    def predict(logits):
        return {"prediction": logits[:, 0] if num_labels == 1 else logits.argmax(-1), "logits": logits}

    def evaluate(split: Split, predictions: dict) -> dict[str, float]:
        return glue_metrics.compute_metrics(metric_task, predictions["prediction"], split.features["label"])

    return Task(
        name=task, train=splits[0], eval_splits=splits[1:1 + len(evals)], test_splits=splits[1 + len(evals):],
        make_model=lambda bert: BertForSequenceClassification(bert, num_labels=num_labels),
        inputs=bert_inputs,
        sums=lambda logits, batch: classification_sums(logits, batch["label"], batch["example_weights"]),
        counts=lambda batch: example_counts(batch["example_weights"],
                                            ("loss", "mse") if num_labels == 1 else ("loss", "accuracy")),
        loss_terms=("loss",), predict=predict, evaluate=evaluate,
        write_predictions=write_predictions, main_metric=glue_metrics.main_metric(metric_task),
        head_names=("classifier",),
        info={"family": "classification", "label_names": None if label_names is None else list(label_names),
              "pairs": train.texts_b is not None})


def write_predictions(split: Split, predictions: dict, directory: str) -> list[str]:
    """`<directory>/<split>.tsv` (index, prediction, label if known) for every split, and the
    GLUE submission file (`index<TAB>prediction`, GLUE's label strings) for GLUE test splits."""
    info: SplitInfo = split.examples
    values = predictions["prediction"]
    if info.label_names is None:
        # The shortest digits that read back as the same number (no digit of it lost, none invented).
        shown = [np.format_float_positional(value, unique=True, trim="-") for value in values]
    else:
        shown = [info.label_names[int(value)] for value in values]
    fileio.makedirs(directory)
    lines = ["index\tprediction" + ("\tlabel" if split.has_labels else "")]
    for i, (index, prediction) in enumerate(zip(info.examples.ids, shown)):
        label = info.examples.labels[i] if split.has_labels else None
        lines.append(f"{index}\t{prediction}" + (f"\t{label}" if split.has_labels else ""))
    written = [write_lines(fileio.join(directory, f"{split.name}.tsv"), lines)]
    if info.examples.submission_file:
        task = next(name for name, spec in GLUE.items() if any(f == info.examples.submission_file
                                                                for _, _, f in spec.test_splits))
        if GLUE[task].labels is None:
            submitted = [f"{min(max(float(v), 0.0), 5.0):.3f}" for v in values]  # STS-B scores lie in [0, 5]
        elif GLUE[task].numeric_submission:
            submitted = [str(int(v)) for v in values]
        else:
            submitted = shown
        # In the order of GLUE's test.tsv (TFDS shuffles its rows when it prepares them).
        lines = ["index\tprediction"] + [f"{index}\t{p}" for index, p in sorted(zip(info.examples.ids, submitted))]
        written.append(write_lines(fileio.join(directory, "glue", info.examples.submission_file), lines))
    return written


# -- The family: prediction on raw text, files, serving, Hugging Face. --

def _logits(output) -> dict:
    return {"logits": output.astype(jnp.float32)}


class ClassificationFamily(Family):
    """Raw input: "text", "text_a ||| text_b", (text_a, text_b) or {"text_a"/"text", "text_b"}
    -> {"label", "probability", "probabilities": {label: p}}; regression -> {"value"}; and
    "truncated": True when the input was longer than max_seq_length."""

    name = "classification"
    tasks = TASKS
    own_file_tasks = ("classification", "regression")
    own_file_settings = {"file_format": "", "text_a_key": "text_a", "text_b_key": "text_b", "label_key": "label",
                         "label_names": "", "label_kind": "class"}
    family_settings = {"file_format": "", "text_a_key": "text_a", "text_b_key": "text_b", "label_kind": "class"}
    hf_architecture = "BertForSequenceClassification"
    packs_examples = True
    pair_inputs = True

    load_task = staticmethod(load_task)  # this module's

    def tfds_datasets(self, config) -> tuple[str, ...]:
        spec = GLUE.get(config.task)
        return () if spec is None else (f"glue/{config.task}", *sorted({d for d, _, _ in spec.test_splits if d}))

    def network(self, bert, task_info):
        if task_info.get("multi_label"):
            raise ValueError("a multi-label classifier (Hugging Face problem_type 'multi_label_classification': an "
                             "independent probability a label) is not a task bertjax predicts or exports; a "
                             "softmax over its labels would not be the model's answer")
        names = task_info.get("label_names")
        return BertForSequenceClassification(bert, num_labels=1 if names is None else len(names))

    def task_info_from_hf(self, hf_config):
        names = hf_label_names(hf_config)
        regression = hf_config.get("problem_type") == "regression" or len(names) == 1
        info = {"family": self.name, "label_names": None if regression else names}
        if hf_config.get("problem_type") == "multi_label_classification":  # its encoder still serves: init, features
            info["multi_label"] = True
        if isinstance(hf_config.get("pairs"), bool):  # bertjax's export says it; Hugging Face's own do not
            info["pairs"] = hf_config["pairs"]
        return ("regression" if regression else "classification"), info

    def head_kind(self, task_info):
        return "regression" if task_info.get("label_names") is None else self.name

    def hf_config_keys(self, task_info):
        keys = {"problem_type": "multi_label_classification"} if task_info.get("multi_label") else {}
        if task_info.get("pairs") is not None:  # else a pair model reads back as one of unknown inputs
            keys["pairs"] = bool(task_info["pairs"])
        return keys

    def parse(self, item, task_info):
        text_a, text_b = text_pair(item)
        wants_pairs = task_info.get("pairs")  # None: a Hugging Face classifier, which does not say
        if wants_pairs is not None and (text_b is not None) != wants_pairs:
            if isinstance(item, str):
                fix = "give 'text_a ||| text_b'" if wants_pairs else "give one text (no ' ||| ')"
            else:  # a file's row, or a Python tuple or dict
                fix = ("this input has no second text (a file's rows: the column --text_b_key names)" if wants_pairs
                       else "this input has a second text (a file's rows: leave --text_b_key out)")
            raise ValueError(f"the model was trained on {'pairs' if wants_pairs else 'single texts'}; {fix}")
        # A line typed as 'a ||| ' lost a side; a file's row with an empty field is data, which
        # fine-tuning and its evaluation read (an empty b laid out as a single text) and so does predict.
        if isinstance(item, str) and text_b is not None:
            empty = "first" if not has_text(text_a) else "second" if not has_text(text_b) else None
            if empty:
                raise ValueError(f"the {empty} text of the pair is empty")
        return text_a, text_b

    def predict(self, model, parsed, **options):
        no_options(self, options)
        split, truncated = model.encode_texts(parsed)
        logits = model.run_network(_logits, split)["logits"]
        names = model.task_info.get("label_names")
        results = []
        for row, cut in zip(np.asarray(jax.nn.softmax(logits, -1)) if names else logits, truncated):
            if names is None:
                result = {"value": float(row[0])}
            else:
                best = int(row.argmax())
                result = {"label": names[best], "probability": float(row[best]),
                          "probabilities": {name: float(p) for name, p in zip(names, row)}}
            results.append({**result, "truncated": True} if cut else result)  # the model saw its first tokens only
        return results

    def input_keys(self, data, task_info):
        # A model trained on single texts reads none, even where its training file had an empty column.
        text_b = "" if task_info.get("pairs") is False else data.get("text_b_key", "text_b")
        return {"text_a": data.get("text_a_key", "text_a"), "text_b": text_b}

    def optional_roles(self, task_info):
        return ("text_b",) if task_info.get("pairs") is None else ()

    def from_row(self, row, keys):
        text_a = column_text(row, keys["text_a"], "text")
        if keys["text_b"] and keys["text_b"] in row:  # (a null one too: as fine-tuning refuses it)
            return text_a, column_text(row, keys["text_b"], 'second text; an empty one is ""')
        return text_a, None

    def columns(self, keys):
        return repr(keys["text_a"]) + (f", and {keys['text_b']!r} for a pair" if keys["text_b"] else "")

    def serving_inputs(self, task_info):
        return (("text_a", 1), ("text_b", 1)) if task_info.get("pairs") else (("text", 1),)

    def serve(self, serving, inputs):
        from bertjax.runtime.tf_cpu import tf

        text_b = inputs.get("text_b")
        ids_a = serving.tokenizer.ids(inputs.get("text_a", inputs.get("text")))
        ids_b = None if text_b is None else serving.tokenizer.ids(text_b)
        input_ids, segment_ids, input_mask, _ = serving.layout(ids_a, ids_b)
        truncated = serving.layout.truncated(ids_a, ids_b)
        logits = serving.model(input_ids, segment_ids, input_mask)
        names = serving.task_info.get("label_names")
        if names is None:
            return {"value": logits[:, 0], "truncated": truncated}
        probabilities = tf.nn.softmax(logits, axis=-1)
        best = tf.argmax(probabilities, axis=-1)
        label_names = tf.constant(names)
        return {"label": tf.gather(label_names, best), "probability": tf.reduce_max(probabilities, -1),
                "probabilities": probabilities, "label_names": tf.tile(label_names[None], [tf.shape(best)[0], 1]),
                "truncated": truncated}


FAMILY = ClassificationFamily()

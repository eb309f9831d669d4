"""Multiple choice (HellaSwag, PIQA, your own JSONL): (context, choice) pairs on a padded choice axis.

Sources: TFDS `hellaswag` (context, endings, label; test labels -1), TFDS `piqa` (goal,
sol1, sol2, label), or a JSONL file (`read_jsonl`: one object per line with a context, a
list of choices and a label index; keys configurable).

Each (context, choice) pair is `[CLS] context [SEP] choice [SEP]` (`common.encode_pairs`,
the longer side trimmed first). Examples may have different numbers of choices: the choice
axis is padded to C, the most choices in the split, and `choice_mask` marks the real ones
(a padded choice is all padding, input_mask 0). Label -1 = unlabeled (a test split): kept
and predicted, never scored.

Bad examples, fewer than 2 choices, a label outside its choices or a choice without text: in
your own files an error naming file:line; in TFDS a counted, logged skip (mock data draws the
number of endings and the label independently), the kept examples written by their TFDS index.

    Split.features: input_ids, segment_ids, input_mask <int32>[N, C, S];
                    choice_mask <int32>[N, C] (1 = a real choice); label <int32>[N]
    Split.lengths:  <int32>[N] the longest choice's tokens
    Split.examples: ChoiceExamples
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from bertjax.data.sources import DropCounter, prepared_tfds_builder, read_tfds_split
from bertjax.models import BertForMultipleChoice, example_counts, multiple_choice_sums
from bertjax.runtime import fileio
from bertjax.tasks.common import (Split, Task, bert_inputs, check_nonempty, encode_pairs, example_ids, own_files,
                                  read_records, row_id, truncation, write_lines)
from bertjax.tasks.family import Family, column_text, no_options
from bertjax.tasks.raw_text import has_text

MAX_SEQ_LENGTH = 128
TFDS_FIELDS = {  # name -> (context feature, features holding the choices (one list or several texts))
    "hellaswag": ("context", ("endings",)),
    "piqa": ("goal", ("sol1", "sol2")),
}


@dataclasses.dataclass
class ChoiceExamples:
    """One split's examples: contexts[i], choices[i] (a list of >= 2 texts), labels <int64>[N]
    (-1 = unlabeled), locations[i] ('file:line' or 'tfds:name[split]#index'); truncated <bool>[N]
    (set by `featurize`): a (context, choice) pair of the example was cut to max_seq_length;
    ids[i]: the row's id (`row_id`) where a file's rows have them (`example_ids`), else None."""

    source: str
    contexts: list[str]
    choices: list[list[str]]
    labels: np.ndarray
    locations: list[str]
    truncated: np.ndarray | None = None
    ids: list | None = None

    def __len__(self) -> int:
        return len(self.contexts)


# -- Reading. --

def read_jsonl(path: str, context_key: str = "context", choices_key: str = "choices",
               label_key: str | None = "label", predicted: bool = True) -> ChoiceExamples:
    """A JSONL file (local or gs://) -> ChoiceExamples. predicted: whether its predictions are
    written, which needs distinct ids (`example_ids`). label_key None: an unlabeled file;
    otherwise each line needs an integer label in [0, its number of choices) or -1
    (unlabeled). Blank lines are skipped; anything else malformed raises ValueError naming
    file:line and what was expected."""
    contexts, choices, labels, locations, ids = [], [], [], [], []
    for where, row in read_records(path, "jsonl"):
        ids.append(row_id(row))
        if not isinstance(row.get(context_key), str):
            missing = (f"; the row has {sorted(row)} (config.data.context_key and choices_key name the columns)"
                       if context_key not in row else "")
            raise ValueError(f"{where}: expected an object with a {context_key!r} string{missing}"[:400])
        missing = next(((key, name) for key, name in ((choices_key, "choices_key"), (label_key, "label_key"))
                        if key is not None and key not in row), None)
        if missing:  # (a null is the value's error below)
            raise ValueError(f"{where}: no {missing[0]!r} (config.data.{missing[1]}); the row has {sorted(row)}"[:400])
        options = row.get(choices_key)
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options) or len(options) < 2:
            raise ValueError(f"{where}: expected {choices_key!r} to be a list of at least 2 strings, "
                             f"got {options!r}"[:300])
        empty = next((k for k, option in enumerate(options) if not has_text(option)), None)
        if empty is not None:  # prediction and the SavedModel read "" as no choice (fixed-width inputs)
            raise ValueError(f"{where}: choice {empty} is empty or only whitespace, control or invisible characters "
                             "(which tokenizers drop); every choice needs a text (\"\" is no choice when predicting)")
        label = -1
        if label_key is not None:
            label = row.get(label_key)
            if isinstance(label, bool) or not isinstance(label, int) or not -1 <= label < len(options):
                raise ValueError(f"{where}: expected {label_key!r} to be an integer in [0, {len(options)}) "
                                 f"(or -1 for unlabeled), got {label!r}")
        contexts.append(row[context_key]), choices.append(options), labels.append(label)
        locations.append(where)
    empty = [where for where, context in zip(locations, contexts) if not has_text(context)]
    if empty:  # (as classification's empty texts: data, kept, counted)
        logging.warning("%s: %d of %d examples have an empty context (the first at %s); they are kept", path,
                        len(empty), len(contexts), empty[0])
    return ChoiceExamples(path, contexts, choices, np.array(labels, np.int64), locations,
                          ids=example_ids(ids, locations) if predicted else None)


def read_tfds(name: str, split: str, data_dir: str | None = None) -> ChoiceExamples:
    """TFDS hellaswag or piqa -> ChoiceExamples; bad examples are counted, logged skips."""
    if name not in TFDS_FIELDS:
        raise ValueError(f"unknown multiple-choice TFDS dataset {name!r}; expected one of {sorted(TFDS_FIELDS)}")
    context_key, choice_keys = TFDS_FIELDS[name]
    source, skips = f"tfds:{name}[{split}]", DropCounter()
    contexts, choices, labels, locations, indices = [], [], [], [], []
    text = lambda value: value.decode("utf-8", errors="replace")
    for index, example in enumerate(read_tfds_split(prepared_tfds_builder(name, data_dir), split)):
        where = f"{source}#{index}"
        if len(choice_keys) == 1:
            options = [text(o) for o in example[choice_keys[0]]]
        else:
            options = [text(example[key]) for key in choice_keys]
        label = int(example["label"])
        if len(options) < 2:
            skips.drop("fewer_than_2_choices", where, f"{len(options)} choice(s)")
        elif not -1 <= label < len(options):
            skips.drop("label_outside_choices", where, f"label {label}, {len(options)} choices")
        elif not all(map(has_text, options)):  # as read_jsonl refuses: "" is no choice when predicting
            skips.drop("empty_choice", where, f"choices {options!r}"[:200])
        else:
            contexts.append(text(example[context_key])), choices.append(options), labels.append(label)
            locations.append(where), indices.append(index)
    if skips.counts:
        logging.warning("%s: skipped %d examples (%s)", source, sum(skips.counts.values()),
                        ", ".join(f"{k}: {v}" for k, v in sorted(skips.counts.items())))
    # (ids: the dataset's own index, which a skip would otherwise shift in the predictions file)
    return ChoiceExamples(source, contexts, choices, np.array(labels, np.int64), locations, ids=indices)


# -- Features. --

def featurize(tokenizer, examples: ChoiceExamples, split_name: str, max_seq_length: int = MAX_SEQ_LENGTH) -> Split:
    """ChoiceExamples -> Split (see the module docstring)."""
    counts = np.fromiter(map(len, examples.choices), np.int64, len(examples))
    if (counts < 2).any():
        i = int(np.argmax(counts < 2))
        raise ValueError(f"{examples.locations[i]}: {counts[i]} choice(s); multiple choice needs at least 2")
    unlabeled = examples.labels < 0
    if unlabeled.any() and not unlabeled.all():
        logging.warning("%s: %d of %d examples have no label (-1, the first at %s): they weigh 0 in training and "
                        "count in no accuracy", examples.source, int(unlabeled.sum()), len(examples),
                        examples.locations[int(np.argmax(unlabeled))])
    n, c = len(examples), int(counts.max(initial=2))
    pairs_a = [context for context, k in zip(examples.contexts, counts) for _ in range(k)]
    pairs_b = [choice for options in examples.choices for choice in options]
    pair_features, pair_lengths, truncated = encode_pairs(tokenizer, pairs_a, pairs_b, max_seq_length)
    choice_mask = np.arange(c)[None, :] < counts[:, None]  # [N, C]; row-major = the pairs' order
    features = {}
    for name, values in pair_features.items():
        padded = np.full((n, c, max_seq_length), tokenizer.pad_id if name == "input_ids" else 0, np.int32)
        padded[choice_mask] = values
        features[name] = padded
    features["choice_mask"] = choice_mask.astype(np.int32)
    features["label"] = examples.labels.astype(np.int32)
    lengths = np.zeros((n, c), np.int32)
    lengths[choice_mask] = pair_lengths
    cut = np.zeros((n, c), bool)
    cut[choice_mask] = truncated
    has_labels = bool((examples.labels >= 0).any())
    return Split(split_name, features, lengths.max(axis=1, initial=0),
                 dataclasses.replace(examples, truncated=cut.any(axis=1)), has_labels,
                 truncation(truncated, "(context, choice) pairs", max_seq_length))


def load_split(tokenizer, source: str, split: str, max_seq_length: int = MAX_SEQ_LENGTH,
               data_dir: str | None = None, **jsonl_keys) -> Split:
    """"hellaswag" / "piqa" (TFDS) or a JSONL path (named `split`; jsonl_keys: context_key,
    choices_key, label_key) -> featurize(...)'s Split."""
    examples = read_tfds(source, split, data_dir) if source in TFDS_FIELDS else read_jsonl(source, **jsonl_keys)
    return featurize(tokenizer, examples, split, max_seq_length)


def predict(split: Split, logits: np.ndarray) -> np.ndarray:
    """<float>[N, C] scores -> <int64>[N] the best real choice (padded choices never win)."""
    logits = np.asarray(logits)
    mask = split.features["choice_mask"].astype(bool)
    if logits.shape != mask.shape:
        raise ValueError(f"predict: logits have shape {logits.shape}, split {split.name!r} needs {mask.shape}")
    return np.argmax(np.where(mask, logits, -np.inf), axis=1)


# -- The task. --

TASKS = ("hellaswag", "piqa", "choice")
TFDS_SPLITS = {"hellaswag": ("train", "validation", "test"), "piqa": ("train", "validation")}  # test: no labels


def load_task(config, tokenizer) -> Task:
    """The configured multiple-choice task, tokenized: hellaswag (TFDS: train, scored on
    validation, test predicted), piqa (TFDS: train, validation) or choice (your JSONL files:
    train_file, eval_file scored, test_file only predicted; keys config.data.context_key,
    choices_key, label_key)."""
    data = config.data
    if config.task in TFDS_SPLITS:
        data_dir = data.tfds_data_dir or None
        sources = [(split, read_tfds(config.task, split, data_dir)) for split in TFDS_SPLITS[config.task]]
    elif config.task == "choice":
        for key in ("context_key", "choices_key", "label_key"):
            if not isinstance(data[key], str) or not data[key]:
                raise ValueError(f"config.data.{key} must name a JSON key, got {data[key]!r}")
        sources = [(name, read_jsonl(path, data.context_key, data.choices_key, None if name == "test" else
                                     data.label_key, predicted=name != "train")) for name, path in own_files(config)]
    else:
        raise ValueError(f"config.task={config.task!r} is not a multiple-choice task")
    check_nonempty(sources, "examples")
    splits = [featurize(tokenizer, examples, name, data.max_seq_length) for name, examples in sources]
    num_evals = sum(name in ("validation", "eval") for name, _ in sources)
    for split in splits[:1 + num_evals]:
        if not split.has_labels:
            raise ValueError(f"{split.examples.source}: a training or evaluation split needs labels (all are -1)")
    weights = lambda batch: batch["example_weights"] * (batch["label"] >= 0)  # noqa: E731 (label -1: no loss)

    def evaluate(split: Split, predictions: dict) -> dict[str, float]:
        """Accuracy over the labelled examples."""
        labels = split.features["label"]
        correct = predict(split, predictions["scores"]) == labels
        return {"accuracy": float(np.mean(correct[labels >= 0]))}

    return Task(
        name=config.task, train=splits[0], eval_splits=splits[1:1 + num_evals], test_splits=splits[1 + num_evals:],
        make_model=lambda bert: BertForMultipleChoice(bert),
        inputs=bert_inputs,
        sums=lambda scores, batch: multiple_choice_sums(scores, batch["label"].clip(0), weights(batch),
                                                        batch["choice_mask"]),
        counts=lambda batch: example_counts(weights(batch), ("loss", "accuracy")), loss_terms=("loss",),
        predict=lambda scores: {"scores": scores.astype("float32")}, evaluate=evaluate, write_predictions=write_predictions,
        main_metric="accuracy", head_names=("classifier",), info={"family": "choice"})


def write_predictions(split: Split, predictions: dict, directory: str) -> list[str]:
    """<directory>/<split>.tsv: `index  prediction  label` (the row's "id" where the file's rows
    have one, else its place in the split; the predicted choice's index, the gold one; no label
    column for an unlabeled split)."""
    predicted = predict(split, predictions["scores"])
    labels, ids = split.features["label"], split.examples.ids
    lines = ["index\tprediction" + ("\tlabel" if split.has_labels else "")]
    lines += [f"{i if ids is None else ids[i]}\t{p}" + (f"\t{labels[i]}" if split.has_labels else "")
              for i, p in enumerate(predicted)]
    return [write_lines(fileio.join(directory, f"{split.name}.tsv"), lines)]


# -- The family: prediction on raw inputs, files, serving, Hugging Face. --

def _scores(output) -> dict:
    return {"scores": output.astype(jnp.float32)}


class ChoiceFamily(Family):
    """Raw input: {"context", "choices": [at least 2 texts]} -> {"choice" (index), "text",
    "probabilities"}, and "truncated": True when a (context, choice) pair was longer than
    max_seq_length (cut as fine-tuning cuts it). An empty choice "" is no choice, as in the
    SavedModel, whose rows are padded with "": probability 0, never picked; at least 2 others."""

    name = "choice"
    tasks = TASKS
    own_file_tasks = ("choice",)
    own_file_settings = {"context_key": "context", "choices_key": "choices", "label_key": "label"}
    family_settings = {"choices_key": "choices"}
    hf_architecture = "BertForMultipleChoice"
    text_lines = False
    choice_axis = True

    load_task = staticmethod(load_task)  # this module's

    def tfds_datasets(self, config) -> tuple[str, ...]:
        return (config.task,) if config.task in TFDS_SPLITS else ()

    def network(self, bert, task_info):
        return BertForMultipleChoice(bert)

    def parse(self, item, task_info):
        choices = item.get("choices") if isinstance(item, dict) else None
        if not (isinstance(item, dict) and isinstance(item.get("context"), str) and isinstance(choices, (list, tuple))
                and all(isinstance(c, str) for c in choices) and sum(c != "" for c in choices) >= 2):
            raise ValueError(f"expected {{'context': text, 'choices': [at least 2 texts]}} (\"\" is no choice), "
                             f"got {item!r}"[:300])
        blank = next((k for k, choice in enumerate(choices) if choice and not has_text(choice)), None)
        if blank is not None:  # no tokens: [CLS] context [SEP] alone, scored as a choice
            raise ValueError(f"choice {blank} is only whitespace, control or invisible characters; give it a text "
                             "(\"\" is no choice)")
        return item

    def predict(self, model, parsed, **options):
        no_options(self, options)
        given = [[k for k, choice in enumerate(item["choices"]) if choice != ""] for item in parsed]
        contexts = [item["context"] for item in parsed]
        choices = [[item["choices"][k] for k in kept] for item, kept in zip(parsed, given)]
        examples = ChoiceExamples("inputs", contexts, choices, np.full(len(contexts), -1, np.int64),
                                  [f"input {i}" for i in range(1, len(contexts) + 1)])
        split = featurize(model.tokenizer, examples, "inputs", model.max_seq_length)
        scores = model.run_network(_scores, split)["scores"]
        best = predict(split, scores)
        cut = split.examples.truncated  # a (context, choice) pair cut as fine-tuning cuts it
        results = []
        for i, (item, kept) in enumerate(zip(parsed, given)):
            probabilities = np.zeros(len(item["choices"]))
            probabilities[kept] = jax.nn.softmax(scores[i, :len(kept)])
            choice = kept[int(best[i])]
            results.append({"choice": choice, "text": item["choices"][choice],
                            "probabilities": [float(p) for p in probabilities],
                            **({"truncated": True} if cut[i] else {})})
        return results

    def input_keys(self, data, task_info):
        return {"context": data.get("context_key", "context"), "choices": data.get("choices_key", "choices")}

    def from_row(self, row, keys):
        context, choices = column_text(row, keys["context"], "context"), row[keys["choices"]]
        if not (isinstance(choices, list) and all(isinstance(c, str) for c in choices)
                and sum(c != "" for c in choices) >= 2):
            raise ValueError(f"column {keys['choices']!r} holds {choices!r}, not a list of at least 2 texts (the "
                             'choices; "" is no choice)'[:300])
        return {"context": context, "choices": choices}

    def serving_inputs(self, task_info):
        return ("context", 1), ("choices", 2)

    def serve(self, serving, inputs):
        """context <string>[B] + choices <string>[B, C] (a row with fewer choices padded with "")
        -> choice <int64>[B], probabilities <float32>[B, C] (0 for padding), truncated <bool>[B]
        (a (context, choice) pair was longer than max_seq_length, as predict's "truncated"). A
        choice of no token ("", or blanks and invisible characters, which predict refuses) is no
        choice; a row of fewer than two, which predict refuses, has no answer: choice -1,
        probabilities 0 (C = 0 too)."""
        from bertjax.runtime.tf_cpu import tf

        context, choices = inputs["context"], inputs["choices"]
        given_count = tf.shape(choices)[1]  # (no column: one of "", as the model's shapes need one)
        choices = tf.cond(given_count > 0, lambda: choices, lambda: tf.fill([tf.shape(choices)[0], 1], ""))
        batch, count = tf.shape(choices)[0], tf.shape(choices)[1]
        contexts = tf.reshape(tf.tile(context[:, None], [1, count]), [-1])
        ids_a, ids_b = serving.tokenizer.ids(contexts), serving.tokenizer.ids(tf.reshape(choices, [-1]))
        rows = serving.layout(ids_a, ids_b)[:3]
        shaped = [tf.reshape(x, [batch, count, -1]) for x in rows]
        given = tf.reshape(ids_b.row_lengths() > 0, [batch, count])  # "" pads a row's choices; blanks are none
        scores = tf.where(given, serving.model(*shaped), -np.inf)
        answered = tf.reduce_sum(tf.cast(given, tf.int32), axis=-1) >= 2  # else softmax of -inf: NaN
        cut = tf.reshape(serving.layout.truncated(ids_a, ids_b), [batch, count]) & given
        return {"choice": tf.where(answered, tf.argmax(scores, axis=-1), -1),
                "probabilities": tf.where(answered[:, None], tf.nn.softmax(scores, axis=-1), 0.0)[:, :given_count],
                "truncated": tf.reduce_any(cut, axis=-1)}


FAMILY = ChoiceFamily()

"""Span question answering (SQuAD v1.1 / v2.0): examples -> windowed features -> predictions.

Sources: the official JSON layout or TFDS `squad/v1.1`, `squad/v2.0` (splits train and
validation), read into `SquadExamples` by `bertjax.tasks.squad_examples`.

Features, as the original run_squad.py: `[CLS] question [SEP] context window [SEP]`,
the question truncated to `max_query_length` tokens, the context cut into windows of
`max_seq_length - question - 3` tokens that start every `doc_stride` tokens (a context of
any length is windowed, never dropped; an empty one gets one empty window). Answers are
located through the tokens' character offsets in the original context
(`Tokenizer.encode_flat_with_offsets`), so accents, punctuation and extra spaces need no
word-level bookkeeping; a predicted answer is the context's own substring from its first
token's first character to its last token's last character.

Labels: start/end positions of the (first) gold answer in each window, or 0/0 ([CLS])
when the answer lies outside the window or the question is impossible (v2.0). A gold
answer is *bad* when `context[answer_start:][:len(text)]` is not its text, or covers no
token. In training (`is_training`), choice made: a JSON file is the user's own data, so a
bad answer raises an error naming the file and the question id (a silently smaller
training set hides a broken file); `config.data.skip_bad_answers=True` turns that into
run_squad.py's behaviour, a counted and logged skip ("Could not find answer"), which is the
default for TFDS (the published dataset, and random text under `tfds.testing.mock_data`). Evaluation
splits keep every question (their answers are compared as text by the metric); a bad or
missing answer there gets positions -1/-1: no gold span, left out of the evaluation loss.

    Split.features: input_ids, segment_ids, input_mask <int32>[N, S];
                    start_positions, end_positions <int32>[N] (-1: no gold span)
    Split.examples: SquadWindows (the questions, and each window's place in its context)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import jax.numpy as jnp
import numpy as np
from absl import logging

from bertjax import ragged
from bertjax.data.sources import DropCounter
from bertjax.evaluation import squad as squad_metrics
from bertjax.models import BertForQuestionAnswering, example_counts, span_sums
from bertjax.runtime import fileio
from bertjax.tasks.common import (Split, Task, bert_inputs, check_int, check_nonempty, max_context_flags,
                                  own_files, row_id, sliding_windows, truncation)
from bertjax.tasks.family import Family, column_text, no_options
from bertjax.tasks.raw_text import has_text, split_pair
from bertjax.tasks.squad_examples import (ExampleBuilder, SquadExamples, log_skips, read_json, read_tfds,
                                          warn_if_versions_differ)
from bertjax.tasks.squad_answers import (MAX_ANSWER_LENGTH, N_BEST_SIZE, NULL_SCORE_DIFF_THRESHOLD, postprocess,
                                         write_predictions)

MAX_SEQ_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH = 384, 128, 64
_LAYOUT_BLOCK = 4096  # features laid out per numpy block (bounds temporary memory)


@dataclasses.dataclass
class SquadWindows:
    """Split.examples of a SQuAD split: the questions and where each feature (window) sits.

    example_index <int64>[N]: feature -> question in `examples` (a question's windows are
      consecutive rows; training questions with a bad answer have none).
    doc_start, doc_length <int64>[N]: the window's first context token and token count.
    doc_position <int64>[N]: the sequence position of that first context token (question + 2).
    context_offsets <int64>[T, 2]: every context token's character span in its context, the
      contexts' tokens concatenated; context_token_start <int64>[P] where each context starts.
    """

    examples: SquadExamples
    example_index: np.ndarray
    doc_start: np.ndarray
    doc_length: np.ndarray
    doc_position: np.ndarray
    context_offsets: np.ndarray
    context_token_start: np.ndarray
    max_seq_length: int

    @property
    def data(self) -> list:
        """The official layout, for `bertjax.evaluation.squad.evaluate`."""
        return self.examples.data

    @property
    def version(self) -> str:
        return self.examples.version

    def token_offsets(self) -> np.ndarray:
        """<int64>[N, S, 2]: each position's character span in its context; -1 off the context."""
        relative = np.arange(self.max_seq_length)[None, :] - self.doc_position[:, None]
        inside = (relative >= 0) & (relative < self.doc_length[:, None])
        context = self.examples.context_index[self.example_index]
        rows = self.context_token_start[context][:, None] + self.doc_start[:, None] + relative
        table = np.concatenate([self.context_offsets, [[-1, -1]]])  # the last row: off the context
        return table[np.where(inside, rows, len(self.context_offsets))]

    @functools.cached_property
    def max_context(self) -> np.ndarray:
        """<bool>[N, S]: the position is a context token of this window, and this window is
        where that token has the most context (see `max_context_flags`)."""
        best = max_context_flags(self.example_index, self.doc_start, self.doc_length)
        flags = np.zeros((len(self.example_index), self.max_seq_length), bool)
        rows, columns = np.nonzero(best)
        flags[rows, self.doc_position[rows] + columns] = True
        return flags


# -- Features. --

def featurize(tokenizer, examples: SquadExamples, split_name: str, is_training: bool | None = None,
              max_seq_length: int = MAX_SEQ_LENGTH, doc_stride: int = DOC_STRIDE,
              max_query_length: int = MAX_QUERY_LENGTH, skip_bad_answers: bool | None = None) -> Split:
    """SquadExamples -> Split of windows (see the module docstring).

    is_training None: split_name == "train". skip_bad_answers None: skip for TFDS, raise
    for JSON (examples.strict); skips are logged with their question ids and summarised,
    and a skipped question has no rows.
    """
    if max_seq_length < max_query_length + 4 or doc_stride < 1:
        raise ValueError(f"max_seq_length ({max_seq_length}) must leave room for the question "
                         f"({max_query_length}), 3 special tokens and context; doc_stride ({doc_stride}) >= 1")
    is_training = split_name == "train" if is_training is None else is_training
    skip_bad_answers = not examples.strict if skip_bad_answers is None else skip_bad_answers
    q_ids, q_len = tokenizer.encode_flat(examples.questions)
    q_keep = np.minimum(q_len, max_query_length)
    c_ids, c_offsets, c_len = tokenizer.encode_flat_with_offsets(examples.contexts)
    c_start = ragged.row_starts(c_len)
    context = examples.context_index
    token_start, token_end, problems = _answer_tokens(examples, c_offsets, c_start, c_len)
    located = np.ones(len(examples), bool)
    located[list(problems)] = False
    kept = located if is_training else np.ones(len(examples), bool)
    if is_training and problems:
        if not skip_bad_answers:
            q, problem = next(iter(problems.items()))
            raise ValueError(f"{examples.source}: question id {examples.ids[q]!r}: {problem} "
                             f"(--config.data.skip_bad_answers=True skips such questions, as run_squad.py does)")
        skips = DropCounter()
        for q, problem in problems.items():
            skips.drop("answer_not_found", f"{examples.source}: question id {examples.ids[q]!r}", problem)
        log_skips(examples.source, skips)

    # Windows: each kept question's context cut every min(window, doc_stride) tokens.
    questions = np.flatnonzero(kept)
    row, doc_start, doc_length = sliding_windows(c_len[context[questions]], max_seq_length - q_keep[questions] - 3,
                                                 doc_stride)
    example_index = questions[row]
    doc_position = q_keep[example_index] + 2

    features = {name: np.zeros((len(example_index), max_seq_length), np.int32)
                for name in ("input_ids", "segment_ids", "input_mask")}
    q_start = ragged.row_starts(q_len)
    for block in range(0, len(example_index), _LAYOUT_BLOCK):
        questions = example_index[block:block + _LAYOUT_BLOCK]
        lay = slice(block, block + len(questions))
        ids, segments, mask = _layout(tokenizer, q_ids, q_start[questions], q_keep[questions], c_ids,
                                      c_start[context[questions]] + doc_start[lay], doc_length[lay], max_seq_length)
        features["input_ids"][lay], features["segment_ids"][lay], features["input_mask"][lay] = ids, segments, mask
    first, last = token_start[example_index] - doc_start, token_end[example_index] - doc_start
    inside = (first >= 0) & (last < doc_length) & ~examples.is_impossible[example_index]
    for name, token in (("start_positions", first), ("end_positions", last)):
        position = np.where(inside, token + doc_position, 0)
        features[name] = np.where(located[example_index], position, -1).astype(np.int32)
    windows = SquadWindows(examples, example_index, doc_start, doc_length, doc_position, c_offsets, c_start,
                           max_seq_length)
    lengths = (doc_position + doc_length + 1).astype(np.int32)
    logging.info("%s: %d questions -> %d windows (max_seq_length %d, doc_stride %d)", examples.source,
                 int(kept.sum()), len(example_index), max_seq_length, doc_stride)
    has_labels = bool(examples.is_impossible.any() or any(examples.answers))
    # An epoch counts questions, as run_squad.py's num_train_steps does (its input is the windows).
    return Split(split_name, features, lengths, windows, has_labels,
                 truncation(q_len[kept] > max_query_length, "questions", max_query_length),
                 source_examples=int(kept.sum()))


def _answer_tokens(examples: SquadExamples, offsets, c_start, c_len):
    """Each question's first gold answer -> (first token, last token) in its context's tokens
    (<int64>[Q] each; 0 for impossible questions) and {question: problem} for the possible
    questions whose answer could not be located (see the module docstring), in order."""
    n = len(examples)
    char_start, char_end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    problems = {}
    for q in np.flatnonzero(~examples.is_impossible):
        context = examples.contexts[examples.context_index[q]]
        problem = "no answer, and not marked is_impossible"
        if examples.answers[q]:
            text, start = examples.answers[q][0]
            char_start[q], char_end[q] = start, start + len(text)
            found = context[max(start, 0):max(start, 0) + len(text)]
            problem = ("empty answer text" if not text.strip() else None if start >= 0 and found == text else
                       f"answer_start {start} does not start {text!r} (the context there reads {found!r})")
        if problem is not None:
            problems[int(q)] = problem
    # Tokens overlapping [char_start, char_end): one searchsorted over all contexts, each
    # context's characters shifted past the previous ones so the spans stay sorted.
    context_chars = np.array([len(c) + 1 for c in examples.contexts], np.int64)
    shift = np.repeat(np.cumsum(context_chars) - context_chars, c_len)
    shifted = offsets + shift[:, None]
    base = (np.cumsum(context_chars) - context_chars)[examples.context_index]
    first = np.searchsorted(shifted[:, 1], char_start + base, side="right")
    last = np.searchsorted(shifted[:, 0], char_end + base, side="left") - 1
    first -= c_start[examples.context_index]
    last -= c_start[examples.context_index]
    no_token = ~examples.is_impossible & ((first > last) | (last >= c_len[examples.context_index]))
    for q in np.flatnonzero(no_token):
        if q not in problems:
            problems[int(q)] = f"answer {examples.answers[q][0][0]!r} covers no token of the context"
    problems = dict(sorted(problems.items()))
    return np.where(examples.is_impossible, 0, first), np.where(examples.is_impossible, 0, last), problems


def _layout(tokenizer, q_ids, q_start, q_keep, c_ids, c_first, c_keep, width):
    """`[CLS] question [SEP] context [SEP]` rows -> (input_ids, segment_ids, input_mask) <int32>[n, width].

    q_start/c_first: each row's first question/context token in q_ids/c_ids; q_keep/c_keep: counts."""
    columns = np.arange(width)[None, :]
    q_keep, c_keep = q_keep[:, None], c_keep[:, None]
    sep2 = q_keep + 2 + c_keep  # the final [SEP]'s column
    q_tokens = np.append(q_ids, 0)[np.clip(q_start[:, None] + columns - 1, 0, len(q_ids))]
    c_tokens = np.append(c_ids, 0)[np.clip(c_first[:, None] + columns - q_keep - 2, 0, len(c_ids))]
    ids = np.select([columns == 0, columns <= q_keep, columns == q_keep + 1, columns < sep2, columns == sep2],
                    [tokenizer.cls_id, q_tokens, tokenizer.sep_id, c_tokens, tokenizer.sep_id], tokenizer.pad_id)
    segments = (columns >= q_keep + 2) & (columns <= sep2)
    return ids.astype(np.int32), segments.astype(np.int32), (columns <= sep2).astype(np.int32)


def load_split(tokenizer, source: str, split: str, data_dir: str | None = None, **featurize_args) -> Split:
    """"squad/v1.1" or "squad/v2.0" (TFDS, `split` e.g. "train", "validation") or a JSON
    file path (its split is named `split`) -> featurize(...)'s Split."""
    if source.startswith("squad/") and not os.path.splitext(source)[1] == ".json":
        examples = read_tfds(source, split, data_dir)
    else:
        examples = read_json(source)
    return featurize(tokenizer, examples, split, **featurize_args)


# -- Predictions. --

def settings(data: dict) -> dict:
    """A run's windowing and answer settings from its config.data (a dict), run_squad.py's
    defaults for those it lacks."""
    return {key: data.get(key, default) for key, default in (
        ("doc_stride", DOC_STRIDE), ("max_query_length", MAX_QUERY_LENGTH), ("n_best_size", N_BEST_SIZE),
        ("max_answer_length", MAX_ANSWER_LENGTH), ("null_score_diff_threshold", NULL_SCORE_DIFF_THRESHOLD))}


# -- The task. --

TASKS = ("squad_v1", "squad_v2", "squad")
TFDS_NAMES = {"squad_v1": "squad/v1.1", "squad_v2": "squad/v2.0"}


def load_task(config, tokenizer) -> Task:
    """The configured span QA task with its windows tokenized: squad_v1 / squad_v2 (TFDS:
    train, scored on validation) or squad (your JSON files: config.data.train_file,
    eval_file scored, test_file only predicted; the training and evaluation files' versions
    read from themselves, the test file predicted by the training file's).

    Config keys (config.data): max_seq_length, doc_stride, max_query_length (features),
    n_best_size, max_answer_length, null_score_diff_threshold (predictions); a value out
    of range is an error naming its key, before anything is read.
    """
    data = config.data
    for key in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
        check_int(data, key, 1)
    if data.max_seq_length < data.max_query_length + 4:
        raise ValueError(f"config.data.max_seq_length={data.max_seq_length} must leave room for the question "
                         f"(config.data.max_query_length={data.max_query_length}), 3 special tokens and context")
    threshold = data.null_score_diff_threshold
    if not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"config.data.null_score_diff_threshold must be a finite number, got {threshold!r}")
    if config.task in TFDS_NAMES:
        data_dir = data.tfds_data_dir or None
        sources = [(split, read_tfds(TFDS_NAMES[config.task], split, data_dir)) for split in ("train", "validation")]
    elif config.task == "squad":
        sources = []
        for name, path in own_files(config):
            # A test file is predicted as the model will answer: by the training file's version
            # (an unlabelled one says none, and read as v1.1 a v2.0 model's answers never abstain).
            sources.append((name, read_json(path, version=sources[0][1].version if name == "test" else None)))
    else:
        raise ValueError(f"config.task={config.task!r} is not a span QA task")
    check_nonempty(sources, "questions")
    warn_if_versions_differ(sources)
    splits = [featurize(tokenizer, examples, name, is_training=name == "train", max_seq_length=data.max_seq_length,
                        doc_stride=data.doc_stride, max_query_length=data.max_query_length,
                        skip_bad_answers=data.skip_bad_answers or None)  # None: TFDS skips, files raise
              for name, examples in sources]
    num_evals = sum(name in ("validation", "eval") for name, _ in sources)
    for split in splits[1:1 + num_evals]:
        _check_scorable(split.examples.examples)
    options = dict(n_best_size=data.n_best_size, max_answer_length=data.max_answer_length,
                   null_score_diff_threshold=threshold)

    def evaluate(split: Split, predictions: dict) -> dict[str, float]:
        return score(split, predictions["start_logits"], predictions["end_logits"], **options)

    def write(split: Split, predictions: dict, directory: str) -> list[str]:
        answers, nbest, null_odds = postprocess(split, predictions["start_logits"], predictions["end_logits"],
                                                **options)
        return list(write_predictions(fileio.join(directory, split.name), answers, nbest, null_odds).values())

    return Task(
        name=config.task, train=splits[0], eval_splits=splits[1:1 + num_evals], test_splits=splits[1 + num_evals:],
        make_model=lambda bert: BertForQuestionAnswering(bert),
        inputs=bert_inputs,
        sums=_sums, counts=lambda batch: example_counts(_span_weights(batch), ("loss", "span_accuracy")),
        loss_terms=("loss",), predict=lambda outputs: {"start_logits": outputs[0], "end_logits": outputs[1]},
        evaluate=evaluate, write_predictions=write, main_metric="f1", head_names=("qa_outputs",),
        sequence_outputs=("start_logits", "end_logits"),
        info={"family": "squad", "squad_version": sources[0][1].version})


def score(split: Split, start_logits: np.ndarray, end_logits: np.ndarray, **options) -> dict[str, float]:
    """The official script's numbers for a split's logits <float>[N, S] (`postprocess` and its
    options). v2.0: each question's best non-null span with its null odds as the no-answer
    probability, thresholded at null_score_diff_threshold (so exact and f1 are those of
    predictions.json, as the official script's thresholding scores them: where every gold
    answer of an answerable question normalises to "", a thresholded null scores 0 there
    and a literal "" in predictions.json 100), and best_*_thresh searched over every
    question's null odds: the
    threshold that would score best, above the run's as well as below (run_squad.py's
    thresholded predictions let the official script search only below)."""
    answers, nbest, null_odds = postprocess(split, start_logits, end_logits, **options)
    if null_odds is not None:
        answers = {qid: next((entry["text"] for entry in entries if entry["text"]), "")
                   for qid, entries in nbest.items()}
    threshold = options.get("null_score_diff_threshold", NULL_SCORE_DIFF_THRESHOLD)
    return squad_metrics.evaluate(split.examples.data, answers, split.examples.version,
                                  na_probs=null_odds, na_prob_thresh=threshold)


def _span_weights(batch: dict):
    """<f32>[B]: example_weights, 0 for windows without a gold span (positions -1)."""
    return batch["example_weights"] * (batch["start_positions"] >= 0)


def _sums(outputs, batch: dict) -> dict:
    start_logits, end_logits = outputs
    return span_sums(start_logits, end_logits, batch["start_positions"].clip(0), batch["end_positions"].clip(0),
                     _span_weights(batch))


def _check_scorable(examples: SquadExamples) -> None:
    """An evaluation file must have answers (every question one, in v1.1): checked here
    rather than by the metric at the first evaluation."""
    unanswered = [qid for qid, answers in zip(examples.ids, examples.answers) if not answers]
    if examples.version == "v1.1" and unanswered:
        raise ValueError(f"{examples.source}: question id {unanswered[0]!r} has no answer; SQuAD v1.1 scores every "
                         f"question against its answers (a file with unanswerable questions needs version v2.0)")
    if len(unanswered) == len(examples) and not examples.is_impossible.any():
        raise ValueError(f"{examples.source}: no answers to score against (an evaluation file needs them)")


# -- The family: prediction on raw text, files, serving, Hugging Face. --

def _span_logits(outputs) -> dict:
    return {"start_logits": outputs[0].astype(jnp.float32), "end_logits": outputs[1].astype(jnp.float32)}


class SquadFamily(Family):
    """Raw input: {"question", "context", "id" (optional)} -> {"id", "answer", "start", "end"
    (character offsets into the context; -1 for no answer), "probability", "null_odds" (v2.0
    runs: null score minus the best span's; > threshold = no answer)}, and "truncated": True
    when the question was longer than the run's max_query_length tokens (the context is never
    cut: windows slide over it). Options: n_best_size, max_answer_length,
    null_score_diff_threshold (default: the run's)."""

    name = "squad"
    tasks = TASKS
    versions = ("v1.1", "v2.0")  # v2.0: the model may abstain (null odds)
    version_key = "squad_version"
    reads_tokens = True
    own_file_tasks = ("squad",)
    own_file_settings = {"skip_bad_answers": False}  # (TFDS's questions whose answer is not there: always skipped)
    family_settings = {"doc_stride": 128, "max_query_length": 64, "n_best_size": 20, "max_answer_length": 30,
                       "null_score_diff_threshold": 0.0, "skip_bad_answers": False}
    hf_architecture = "BertForQuestionAnswering"
    serves_words = True
    extensions = {"json": "squad_json"}

    load_task = staticmethod(load_task)  # this module's

    def tfds_datasets(self, config) -> tuple[str, ...]:
        return (TFDS_NAMES[config.task],) if config.task in TFDS_NAMES else ()

    def network(self, bert, task_info):
        return BertForQuestionAnswering(bert)

    def task_info_from_hf(self, hf_config):
        # bertjax's export says which SQuAD a model answers; a Hugging Face model does not, and
        # is read as v1.1 (a span for every question, no null odds), which load_model warns of.
        if "squad_version" not in hf_config:
            return "squad", {"family": self.name}
        version = hf_config["squad_version"]
        if version not in self.versions:
            raise ValueError(f"config.json: squad_version {version!r} is not 'v1.1' or 'v2.0'")
        return "squad", {"family": self.name, "squad_version": version}

    def hf_config_keys(self, task_info):
        return {"squad_version": task_info["squad_version"]} if "squad_version" in task_info else {}

    def parse(self, item, task_info):
        if not (isinstance(item, dict) and isinstance(item.get("question"), str)
                and isinstance(item.get("context"), str)):
            raise ValueError(f"expected a dict {{'question': text, 'context': text}} (the command line's "
                             f"'question ||| context' lines become one), got {item!r}"[:300])
        for key in ("question", "context"):
            if not has_text(item[key]):
                raise ValueError(f"an empty {key}" + (" (only whitespace, control or invisible characters, which "
                                                      "tokenizers drop)" if item[key].strip() else ""))
        if "id" in item and not (isinstance(item["id"], str) and item["id"].strip()):
            raise ValueError(f"an id must be a non-empty text, got {item['id']!r}")
        return item

    def identify(self, parsed, positions, seen, places=None):
        """Every question its id: its own, or its number (its line in a file); an id seen before
        is refused (the answers are keyed by id). seen: {id: (how messages name its first input,
        whether that id was its number)}."""
        identified, clashes = [], {}
        places = places or [f"input {position}" for position in positions]
        for index, (item, position, place) in enumerate(zip(parsed, positions, places)):
            qid = item.get("id", str(position))
            if qid in seen:
                first, numbered = seen[qid]
                if "id" not in item:
                    why = f"its number {qid!r} (it has no id) is the id of {first}"
                elif numbered:
                    why = f"the id {qid!r} is the number of {first} (it has no id)"
                else:
                    why = f"the id {qid!r} is that of {first} too"
                mixed = "; give every question an id, or none" if numbered or "id" not in item else ""
                clashes[index] = f"{why}; ids must be unique{mixed}"
            seen.setdefault(qid, (place, "id" not in item))
            identified.append({**item, "id": qid})
        return identified, clashes

    def check_options(self, task_info, n_best_size: int | None = None, max_answer_length: int | None = None,
                      null_score_diff_threshold: float | None = None, **options):
        no_options(self, options)
        for name, value in (("n_best_size", n_best_size), ("max_answer_length", max_answer_length)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if null_score_diff_threshold is not None:
            if (isinstance(null_score_diff_threshold, bool) or not isinstance(null_score_diff_threshold, (
                    int, float, np.integer, np.floating)) or not math.isfinite(null_score_diff_threshold)):
                raise ValueError(f"null_score_diff_threshold must be a finite number, got "
                                 f"{null_score_diff_threshold!r}")
            if task_info.get("squad_version", "v1.1") != "v2.0":
                raise ValueError("null_score_diff_threshold is for a SQuAD v2.0 model, which may answer 'no answer'; "
                                 "this one answers as v1.1, a span for every question")

    def predict(self, model, parsed, n_best_size: int | None = None, max_answer_length: int | None = None,
                null_score_diff_threshold: float | None = None, **options):
        self.check_options(model.task_info, n_best_size, max_answer_length, null_score_diff_threshold, **options)
        too_short = self.check_length(model.max_seq_length, model.source.data)
        if too_short:
            raise ValueError(too_short)
        run = settings(model.source.data)
        n_best_size = int(run["n_best_size"]) if n_best_size is None else n_best_size
        max_answer_length = int(run["max_answer_length"]) if max_answer_length is None else max_answer_length
        builder = ExampleBuilder("inputs", strict=True)
        for i, item in enumerate(parsed, start=1):
            builder.add(item.get("id", str(i)), item["question"], item["context"], [], False)
        examples = builder.build(model.task_info.get("squad_version", "v1.1"), data=[])
        split = featurize(model.tokenizer, examples, "inputs", is_training=False, max_seq_length=model.max_seq_length,
                          doc_stride=int(run["doc_stride"]), max_query_length=int(run["max_query_length"]))
        outputs = model.run_network(_span_logits, split, sequence_outputs=("start_logits", "end_logits"))
        answers, nbest, null_odds = postprocess(
            split, outputs["start_logits"], outputs["end_logits"],
            n_best_size=n_best_size, max_answer_length=max_answer_length,
            null_score_diff_threshold=(run["null_score_diff_threshold"] if null_score_diff_threshold is None
                                       else null_score_diff_threshold))
        _, question_lengths = model.tokenizer.encode_flat(examples.questions)  # past max_query_length: cut
        results = []
        for qid, question_length in zip(examples.ids, question_lengths):
            answer = answers[qid]
            best = next((entry for entry in nbest[qid] if entry["text"] == answer), nbest[qid][0])
            start, end = (best["start"], best["end"]) if answer else (-1, -1)
            result = {"id": qid, "answer": answer, "start": start, "end": end, "probability": best["probability"]}
            if null_odds is not None:
                result["null_odds"] = null_odds[qid]
            if question_length > int(run["max_query_length"]):
                result["truncated"] = True
            results.append(result)
        return results

    def read_line(self, line):
        line = line.strip()
        if not line:
            return ValueError("a blank line (this task has no empty input)")
        question, context = split_pair(line, at_first=True)  # a context may hold " ||| "
        return {"question": question, "context": context} if context is not None else ValueError(
            "expected 'question ||| context'")

    def input_keys(self, data, task_info):
        return {"question": "question", "context": data.get("context_key", "context")}

    def from_row(self, row, keys):
        item = {role: column_text(row, keys[role], role) for role in ("question", "context")}
        given = row_id(row)  # as fine-tuning's files name their rows
        return {**item, "id": str(given)} if given is not None else item

    def read_formatted(self, path: str, input_format: str, data: dict):
        """SQuAD's official layout: every question, with its id."""
        examples = read_json(path)
        for qid, question, index in zip(examples.ids, examples.questions, examples.context_index):
            yield f"{path}: id {qid}", {"id": qid, "question": question, "context": examples.contexts[index]}

    def serving_inputs(self, task_info):
        return ("question", 1), ("context", 1)

    def check_length(self, max_seq_length, data=None):
        query = settings(data or {})["max_query_length"]
        if max_seq_length < query + 4:  # as featurize: no room would be left for the context
            return (f"max_seq_length {max_seq_length} leaves no room for a context after a question of up to "
                    f"{query} tokens (max_query_length) and 3 special tokens; give at least {query + 4}")
        return None

    def serving_settings(self, data):
        return settings(data)

    def serve(self, serving, inputs):
        from bertjax.tasks import squad_serving

        version = serving.task_info.get("squad_version", "v1.1")
        return squad_serving.best_spans(serving, inputs["question"], inputs["context"], version,
                                        self.serving_settings(serving.run_data))


FAMILY = SquadFamily()

"""Token tagging (CoNLL-2003 NER, your own CoNLL files): words -> first-sub-word labels -> tags.

Sources: TFDS `conll2003` (`read_tfds`; splits train, dev, test; label order from the
builder's `info.features["ner"].feature.names`) or CoNLL-format files (`read_conll`): one
token per line, whitespace-separated columns, the tag in `tag_column` (default the last),
a blank line between sentences, `-DOCSTART-` lines skipped.

Features: every word is tokenized on its own (in bulk); a word that yields no tokens
becomes [UNK]. `[CLS] sub-words [SEP]`; the word's label sits on its first sub-word, and
its other sub-words, [CLS], [SEP] and padding have weight 0. A sentence longer than
`max_seq_length - 2` tokens continues in further windows starting every `stride` tokens
(half a window by default: they overlap by the rest, as `common.sliding_windows`); each word
is predicted (weight 1) in exactly one window, the one where its first sub-word has the most
context (`common.max_context_flags`), so no word is dropped from training or evaluation.

    Split.features: input_ids, segment_ids, input_mask, label_ids <int32>[N, S];
                    label_weights <float32>[N, S] (1 where a word is predicted, also when
                    the split has no labels: there label_ids are 0)
    Split.examples: TaggingWindows (the sentences; feature -> sentence; token -> word)
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import tokenizers
from absl import logging

from bertjax import ragged
from bertjax.data.sources import DropCounter, prepared_tfds_builder, read_tfds_split
from bertjax.evaluation import ner as ner_metrics
from bertjax.models import BertForTokenClassification, example_counts, token_classification_sums
from bertjax.runtime import fileio
from bertjax.tasks.common import (Split, Task, bert_inputs, check_nonempty, max_context_flags, own_files,
                                  sliding_windows, user_lines, write_lines)
from bertjax.tasks.family import Family, hf_label_names, no_options

MAX_SEQ_LENGTH = 128
DOCSTART = "-DOCSTART-"


@dataclasses.dataclass
class TaggingExamples:
    """Sentences of one split. tags[s][w] is word w's gold tag (None: unlabeled split);
    label_names: the tag vocabulary (label id = index); locations[s]: 'file:line' or
    'tfds:name[split]#index' of the sentence, for messages."""

    source: str
    sentences: list[list[str]]
    tags: list[list[str]] | None
    label_names: list[str]
    locations: list[str]

    def __len__(self) -> int:
        return len(self.sentences)


@dataclasses.dataclass
class TaggingWindows:
    """Split.examples of a tagging split.

    sentence_index <int64>[N]: feature -> sentence (a sentence's windows are consecutive).
    token_word <int32>[N, S]: each position's word in its sentence, -1 for [CLS], [SEP], pads.
    """

    examples: TaggingExamples
    sentence_index: np.ndarray
    token_word: np.ndarray

    @property
    def sentences(self) -> list[list[str]]:
        return self.examples.sentences

    @property
    def tags(self) -> list[list[str]] | None:
        """Gold tags per word (`bertjax.evaluation.ner.entity_scores(tags, predicted)`)."""
        return self.examples.tags

    @property
    def label_names(self) -> list[str]:
        return self.examples.label_names


# -- Reading. --

def read_conll(path: str, tag_column: int | None = -1, label_names: list[str] | None = None,
               token_column: int = 0, tags_optional: bool = False) -> TaggingExamples:
    """A CoNLL-format file (local or gs://) -> TaggingExamples.

    tag_column None: an unlabeled file (tokens only); tags_optional: unlabeled too when the
    first token line has no tag column, or when no tag names an entity (a placeholder "O"
    column some tools write: scored, every F1 would be 0). label_names None: the file's own tags, sorted with
    "O" first (use it for the training file, then pass its label_names to the others).
    Errors name file:line: a line without the tag (or token) column, a line with another
    number of columns than the file's first token line, a tag that is not "O" or
    an entity tag (`ner_metrics.is_tag`), or a tag not in label_names (with the known tags).
    """
    sentences, tags, locations = [], [], []
    words, word_tags, first_line = [], [], 0
    known = None if label_names is None else set(label_names)
    width, first, first_columns = None, "", []  # the columns of the file's first token line, and that line

    def end_sentence():
        if words:
            sentences.append(list(words)), tags.append(list(word_tags)), locations.append(f"{path}:{first_line}")
            words.clear(), word_tags.clear()

    for number, line in enumerate(user_lines(path), start=1):
        # Columns are split at spaces and tabs only, as conlleval's: a token may hold a no-break space.
        # A byte-order mark starts a line where files that had one were joined (cat): dropped.
        stripped = line.lstrip("\ufeff").strip(" \t\r\n")
        columns = re.split(r"[ \t]+", stripped) if stripped else []
        if not columns or columns[0] == DOCSTART:
            end_sentence()
            continue
        if not sentences and not words and _CONLLU_COMMENT.match(stripped):  # the file's first line, as UD's start
            raise ValueError(f"{path}:{number}: a CoNLL-U comment ({stripped[:60]!r}), where CoNLL-2003's layout has "
                             f"a token a line: give the words first (`grep -Ev '^(#|[0-9]+[-.])' {path} | cut -f2-`: "
                             "no comments, multiword tokens or empty nodes)")
        if tags_optional and not sentences and not words and not _has_columns(columns, token_column, tag_column):
            if len(columns) > 1:  # columns beside the token, none where the tag is looked for: tags elsewhere?
                logging.warning("%s:%d: %d columns, none at config.data.tag_column=%d: read as untagged (predicted, "
                                "not scored); to score it, give it the training file's columns", path, number,
                                len(columns), tag_column)
            tag_column = None  # the first token line has no tag: an unlabeled file
        shown = line.rstrip("\r\n")  # as written: a line of U+00A0 is no blank line to conlleval
        if not _has_columns(columns, token_column, tag_column):
            tag_at = (f"the last column (config.data.tag_column={tag_column})" if tag_column == -1 else
                      f"column {tag_column}")
            raise ValueError(f"{path}:{number}: expected the token in column {token_column}"
                             + ("" if tag_column is None else f" and the tag in {tag_at}")
                             + f", got {len(columns)} column(s): {shown!r}")
        if width is None:
            width, first, first_columns = len(columns), f"line {number}: {shown!r}", columns
        if len(columns) != width:  # (a token holding a space, here or there, was blamed on the line after it)
            raise ValueError(f"{path}:{number}: {len(columns)} columns, but the file's first token line has "
                             f"{width}: {shown!r} against {first}; columns are split at spaces and tabs, so a token "
                             "holding a space adds one"
                             + (f"; {_SENTENCE_A_LINE}" if tag_column is None and _words_beside(columns)
                                and _words_beside(first_columns) else ""))
        if not words:
            first_line = number
        words.append(columns[token_column])
        if tag_column is not None:
            tag = columns[tag_column]
            # (a file in another layout fails at its first tag: _layout_hint says which)
            if known is not None and tag not in known:
                layout = _layout_hint(first_columns)
                raise ValueError(f"{path}:{number}: unknown tag {tag!r}; known tags: {list(label_names)} (the "
                                 "training file's, or config.data.label_names: list every tag there)"
                                 + (layout or f"; if column {tag_column} (config.data.tag_column) is no NER tag here "
                                    "(a POS or chunk column), give this file its tokens alone" if tags_optional
                                    else layout))
            if not ner_metrics.is_tag(tag):
                raise ValueError(f"{path}:{number}: tag {tag!r} is neither 'O' nor {ner_metrics.TAG_FORMS} "
                                 f"(config.data.tag_column={tag_column} picks the column){_layout_hint(first_columns)}")
            word_tags.append(tag)
    end_sentence()
    if tag_column is None and all(len(words) == 1 for words in sentences) and _words_beside(first_columns):
        # (else each sentence would be its first word)
        raise ValueError(f"{path}: each of its {len(sentences)} sentence(s) is one line of {width} columns ({first}): "
                         + _SENTENCE_A_LINE)
    if sentences and max(map(len, sentences)) > 1 and all(
            words[0] == "1" and all(_WORD_INDEX.fullmatch(word) for word in words) for words in sentences):
        raise ValueError(f"{path}: column {token_column} numbers each sentence's words 1, 2, 3 (CoNLL-U's ID column?) "
                         f"where the words were expected: give the words first (`grep -Ev '^(#|[0-9]+[-.])' {path} | "
                         "cut -f2-`: no comments, multiword tokens or empty nodes)")
    if tag_column is not None and tags_optional and all(tag == "O" for sentence in tags for tag in sentence):
        logging.warning("%s: every tag is 'O' (a placeholder column?): predicted, not scored", path)
        tag_column = None
    if tag_column is None:
        return TaggingExamples(path, sentences, None, list(label_names or ["O"]), locations)
    if label_names is None:
        found = {tag for sentence in tags for tag in sentence}
        label_names = ["O"] + sorted(found - {"O"})
    return TaggingExamples(path, sentences, tags, list(label_names), locations)


_SENTENCE_A_LINE = ("a sentence a line? CoNLL's layout has a word a line, a blank line between sentences (predict "
                     "reads a sentence a line with --input_format=text)")


def _layout_hint(columns: list[str]) -> str:
    """What a file whose first token line has `columns` looks like when it is not CoNLL's layout
    (JSON Lines, as Hugging Face's tokens/ner_tags; a sentence a line: most columns past the
    first are words), as "; ..." for an error's end; "" when it looks like CoNLL."""
    if columns and columns[0].startswith("{"):
        return ("; JSON Lines? The tagging task reads CoNLL's layout: a word and its tag a line, a blank line "
                "between sentences")
    words = sum(column.isalpha() and not column.isupper() for column in columns[1:])
    return f"; {_SENTENCE_A_LINE}" if len(columns) >= 3 and 2 * words >= len(columns) - 1 else ""


def _words_beside(columns: list[str]) -> bool:
    """Whether a line's columns past the token look like more words of a sentence, not CoNLL's
    annotations: three columns at least, none a tag ("B-PER", "NNP", "O"), a placeholder ("_")
    or punctuation."""
    return len(columns) >= 3 and not any(column == "_" or column.isupper() or not any(c.isalpha() for c in column)
                                         for column in columns[1:])


# CoNLL-U's comment lines ("# sent_id = 1", "# text = ...", "# newdoc id = ..."): a "#" token
# of CoNLL-2003 is followed by its tag, never by "name =".
_CONLLU_COMMENT = re.compile(r"#\s*[\w.-]+( [\w.-]+)?\s*=")
# A CoNLL-U ID: a word's number, a multiword token's range ("3-4") or an empty node's ("5.1").
_WORD_INDEX = re.compile(r"\d+(-\d+|\.\d+)?")


def _has_columns(columns: list[str], token_column: int, tag_column: int | None) -> bool:
    """Whether a line's columns hold the token and (unless tag_column is None) a tag in another column."""
    width = len(columns)
    if not -width <= token_column < width:
        return False
    return tag_column is None or (-width <= tag_column < width and tag_column % width != token_column % width)


def read_tfds(name: str = "conll2003", split: str = "train", data_dir: str | None = None,
              tag_feature: str = "ner") -> TaggingExamples:
    """TFDS conll2003 (or a dataset with `tokens` and a sequence of class labels) ->
    TaggingExamples. A sentence whose tag count differs from its token count, or that is
    empty, is a counted, logged skip. Test splits keep their tags (CoNLL-2003 has them)."""
    builder = prepared_tfds_builder(name, data_dir)
    label_names = list(builder.info.features[tag_feature].feature.names)
    source, skips = f"tfds:{name}[{split}]", DropCounter()
    sentences, tags, locations = [], [], []
    for index, example in enumerate(read_tfds_split(builder, split)):
        words = [w.decode("utf-8", errors="replace") for w in example["tokens"]]
        label_ids = example[tag_feature]
        where = f"{source}#{index}"
        if len(words) != len(label_ids):
            skips.drop("tag_count_mismatch", where, f"{len(words)} tokens, {len(label_ids)} tags")
        elif not words:
            skips.drop("empty_sentence", where)
        else:
            sentences.append(words), tags.append([label_names[i] for i in label_ids]), locations.append(where)
    if skips.counts:
        logging.warning("%s: skipped %d sentences (%s)", source, sum(skips.counts.values()),
                        ", ".join(f"{k}: {v}" for k, v in sorted(skips.counts.items())))
    return TaggingExamples(source, sentences, tags, label_names, locations)


# -- Features. --

def featurize(tokenizer, examples: TaggingExamples, split_name: str, max_seq_length: int = MAX_SEQ_LENGTH,
              stride: int | None = None, word_prefix: str | None = None) -> Split:
    """TaggingExamples -> Split (see the module docstring). stride: tokens between window
    starts for long sentences (default half the window, at least 1). word_prefix: what each
    word after a sentence's first is tokenized with (None: `tokenizer.word_prefix`; a model
    keeps the one it was trained with, `task_info["word_prefix"]`)."""
    budget = max_seq_length - 2
    if budget < 1:
        raise ValueError(f"max_seq_length must be >= 3, got {max_seq_length}")
    stride = max(1, budget // 2) if stride is None else stride
    words_per_sentence = np.fromiter(map(len, examples.sentences), np.int64, len(examples))
    all_words = [word for sentence in examples.sentences for word in sentence]
    if examples.tags is None:
        label_of_word = np.zeros(len(all_words), np.int64)
    else:
        index = {name: i for i, name in enumerate(examples.label_names)}
        for sentence, location in zip(examples.tags, examples.locations):
            if not index.keys() >= set(sentence):
                raise ValueError(f"{location}: tags {sorted(set(sentence) - index.keys())} are not in the "
                                 f"label names {examples.label_names}")
        label_of_word = np.array([index[tag] for sentence in examples.tags for tag in sentence], np.int64)
    prefix = tokenizer.word_prefix if word_prefix is None else word_prefix  # each word as it is in its sentence
    ids, word_tokens = tokenizer.encode_flat([word if k == 0 else prefix + word for sentence in examples.sentences
                                              for k, word in enumerate(sentence)] if prefix else all_words)
    empty = word_tokens == 0  # e.g. a lone control character: one [UNK]
    if empty.any():
        ids = np.insert(ids, ragged.row_starts(word_tokens)[empty], tokenizer.unk_id)
        word_tokens = np.maximum(word_tokens, 1)
    word_first = ragged.row_starts(word_tokens)  # each word's first token in `ids`
    sentence_first_word = ragged.row_starts(words_per_sentence)
    word_sentence = np.repeat(np.arange(len(examples)), words_per_sentence)
    sentence_tokens = np.bincount(word_sentence, weights=word_tokens, minlength=len(examples)).astype(np.int64)
    sentence_first_token = ragged.row_starts(sentence_tokens)
    token_word = np.repeat(np.arange(len(all_words)) - sentence_first_word[word_sentence], word_tokens)
    token_is_first = np.zeros(len(ids), bool)
    token_is_first[word_first] = True
    token_label = np.repeat(label_of_word, word_tokens)

    sentence_index, start, length = sliding_windows(sentence_tokens, budget, stride)
    predicted = max_context_flags(sentence_index, start, length)  # [N, longest window]
    n = len(sentence_index)
    columns = np.arange(max_seq_length)[None, :]
    relative = columns - 1  # position -> token within the window
    inside = (relative >= 0) & (relative < length[:, None])
    source = np.where(inside, sentence_first_token[sentence_index][:, None] + start[:, None] + relative, len(ids))
    pick = lambda values, fill: np.append(values, fill)[source]  # fill: [SEP]/pads
    input_ids = np.where(inside, pick(ids, 0), np.where(columns == length[:, None] + 1, tokenizer.sep_id,
                                                        tokenizer.pad_id))
    input_ids[:, 0] = tokenizer.cls_id
    max_context = np.zeros((n, max_seq_length), bool)
    max_context[:, 1:1 + predicted.shape[1]] = predicted  # windows hold at most `budget` tokens
    weights = inside & pick(token_is_first, False) & max_context
    features = {
        "input_ids": input_ids.astype(np.int32),
        "segment_ids": np.zeros((n, max_seq_length), np.int32),
        "input_mask": (columns < length[:, None] + 2).astype(np.int32),
        "label_ids": np.where(weights, pick(token_label, 0), 0).astype(np.int32),
        "label_weights": weights.astype(np.float32),
    }
    windows = TaggingWindows(examples, sentence_index, np.where(inside, pick(token_word, -1), -1).astype(np.int32))
    logging.info("%s: %d sentences -> %d windows (max_seq_length %d)", examples.source, len(examples), n,
                 max_seq_length)
    return Split(split_name, features, (length + 2).astype(np.int32), windows, examples.tags is not None,
                 source_examples=len(examples), epoch_of_windows=True)


def load_split(tokenizer, source: str, split: str, label_names: list[str] | None = None,
               max_seq_length: int = MAX_SEQ_LENGTH, data_dir: str | None = None, **read_args) -> Split:
    """"conll2003" (TFDS, `split` in train/dev/test; read_args: tag_feature) or a CoNLL file
    path (named `split`; read_args: tag_column, token_column) -> featurize(...)'s Split. Give
    a file other than the training file the training file's `label_names`: its own tags, sorted,
    would number the labels otherwise."""
    if source == "conll2003":
        examples = read_tfds(source, split, data_dir, **read_args)
    else:
        examples = read_conll(source, label_names=label_names, **read_args)
    return featurize(tokenizer, examples, split, max_seq_length)


# -- Predictions. --

def predictions_to_tags(split: Split, predicted_label_ids: np.ndarray) -> list[list[str]]:
    """<int>[N, S] predicted label ids (e.g. argmax of the logits) -> one tag per word of
    each sentence, read where label_weights > 0."""
    windows: TaggingWindows = split.examples
    examples = windows.examples
    predicted_label_ids = np.asarray(predicted_label_ids)
    if predicted_label_ids.shape != windows.token_word.shape:
        raise ValueError(f"predictions_to_tags: predicted_label_ids has shape {predicted_label_ids.shape}, "
                         f"split {split.name!r} needs {windows.token_word.shape}")
    rows, columns = np.nonzero(split.features["label_weights"] > 0)
    sentence = windows.sentence_index[rows]
    words = np.fromiter(map(len, examples.sentences), np.int64, len(examples))
    flat_word = ragged.row_starts(words)[sentence] + windows.token_word[rows, columns]
    ids = np.full(int(words.sum()), -1, np.int64)
    ids[flat_word] = predicted_label_ids[rows, columns]
    if (ids < 0).any() or (ids >= len(examples.label_names)).any():
        raise ValueError(f"predictions_to_tags: label ids outside [0, {len(examples.label_names)}) "
                         f"or words without a prediction")
    names = np.array(examples.label_names, dtype=object)[ids]
    return [list(row) for row in np.split(names, np.cumsum(words)[:-1])] if len(examples) else []


def write_conll(path: str, sentences: list[list[str]], gold_tags: list[list[str]] | None,
                pred_tags: list[list[str]]) -> None:
    """Writes conlleval input: `token gold predicted` per line (`token predicted` without
    gold), one blank line after each sentence (an input's -DOCSTART- lines and runs of blank
    lines are not kept: sentence k is the input's k-th); atomically, local or gs://. Whitespace inside a
    token (never in CoNLL data) becomes '_' so the columns stay whitespace-separated."""
    lines = []
    for s, (words, predicted) in enumerate(zip(sentences, pred_tags)):
        gold = None if gold_tags is None else gold_tags[s]
        if len(predicted) != len(words) or (gold is not None and len(gold) != len(words)):
            raise ValueError(f"write_conll: sentence {s} has {len(words)} words but "
                             f"{len(predicted)} predicted / {len(words) if gold is None else len(gold)} gold tags")
        for w, word in enumerate(words):
            token = "_".join(word.split()) or "_"
            lines.append(f"{token} {predicted[w]}" if gold is None else f"{token} {gold[w]} {predicted[w]}")
        lines.append("")
    write_lines(path, lines)


# -- The task. --

TASKS = ("conll2003", "ner")


def load_task(config, tokenizer) -> Task:
    """The configured tagging task, tokenized: conll2003 (TFDS: train; scored on dev, the
    first evaluation split, which picks the best checkpoint, and on test, logged as
    eval_test_*) or ner (your CoNLL files: train_file; eval_file scored; test_file scored
    too when its lines carry the tag column, else only predicted). Tags in
    config.data.tag_column (-1 = the last); label names from the training file ("O" first,
    then sorted) or config.data.label_names (comma-separated)."""
    data = config.data
    if config.task == "conll2003":
        data_dir = data.tfds_data_dir or None
        sources = [(split, read_tfds("conll2003", split, data_dir)) for split in ("train", "dev", "test")]
        num_evals = 2
    elif config.task == "ner":
        tag_column = data.tag_column
        if not isinstance(tag_column, int) or isinstance(tag_column, bool) or tag_column == 0:
            raise ValueError(f"config.data.tag_column must be an int other than 0 (the token's column; -1 = the "
                             f"last), got {tag_column!r}")
        (_, train_file), *others = own_files(config)
        given = [name.strip() for name in data.label_names.split(",")] if data.label_names else None
        if given is not None and (len(set(given)) < len(given) or "O" not in given
                                  or not all(ner_metrics.is_tag(name) for name in given)):
            raise ValueError(f"config.data.label_names={data.label_names!r}: expected distinct tags, 'O' and "
                             f"{ner_metrics.TAG_FORMS}, separated by commas")
        train = read_conll(train_file, tag_column, given)
        sources = [("train", train)]
        for name, path in others:  # a test file without tags is predicted, not scored
            sources.append((name, read_conll(path, tag_column, train.label_names, tags_optional=name == "test")))
        num_evals = sum(examples.tags is not None for _, examples in sources[1:])
        for _, examples in sources[1:1 + num_evals]:
            if all(tag == "O" for sentence in examples.tags for tag in sentence):
                logging.warning("%s: every tag is 'O', no entity to find: F1 is 0 at every evaluation, so the best "
                                "checkpoint is picked by the dev loss alone", examples.source)
        if [name for name, _ in sources[1:1 + num_evals]] == ["test"]:
            logging.warning("%s: the tagged test file is the only scored one, so it picks the best checkpoint "
                            "(model selection on the test set); give config.data.eval_file to choose on that",
                            sources[1][1].source)
    else:
        raise ValueError(f"config.task={config.task!r} is not a tagging task")
    check_nonempty(sources, "sentences")
    label_names = sources[0][1].label_names
    if len(label_names) < 2:  # as classification: a tagger of one tag learns nothing
        raise ValueError(f"{sources[0][1].source}: the only tag is {label_names[0]!r}; a tagger needs at least 2 "
                         "(config.data.tag_column picks the column)")
    splits = [featurize(tokenizer, examples, name, data.max_seq_length) for name, examples in sources]

    def weights(batch):
        """<f32>[B, S]: the words predicted in real rows (packed rows: a padding token's label
        weight is 0 already, and example_weights is per example [B, K])."""
        if batch["example_weights"].ndim == 2:
            return batch["label_weights"]
        return batch["label_weights"] * batch["example_weights"][:, None]

    def evaluate(split: Split, predictions: dict) -> dict[str, float]:
        """Entity-level precision/recall/f1 (conlleval), and per type as <TYPE>_precision ..."""
        gold, predicted = split.examples.tags, predictions_to_tags(split, predictions["prediction"])
        scores = ner_metrics.entity_scores(gold, predicted)
        for type_, values in ner_metrics.per_type_scores(gold, predicted).items():
            scores.update({f"{type_}_{name}": values[name] for name in ("precision", "recall", "f1")})
        return scores

    def write(split: Split, predictions: dict, directory: str) -> list[str]:
        """<directory>/<split>.conll: `token gold predicted` lines (`token predicted` unlabeled)."""
        path = fileio.join(directory, f"{split.name}.conll")
        write_conll(path, split.examples.sentences, split.examples.tags,
                    predictions_to_tags(split, predictions["prediction"]))
        return [path]

    return Task(
        name=config.task, train=splits[0], eval_splits=splits[1:1 + num_evals], test_splits=splits[1 + num_evals:],
        make_model=lambda bert: BertForTokenClassification(bert, num_labels=len(label_names)),
        inputs=bert_inputs,
        sums=lambda logits, batch: token_classification_sums(logits, batch["label_ids"], weights(batch)),
        counts=lambda batch: example_counts(weights(batch), ("loss", "accuracy")), loss_terms=("loss",),
        predict=lambda logits: {"prediction": logits.argmax(-1)}, evaluate=evaluate, write_predictions=write,
        main_metric="f1", head_names=("classifier",), sequence_outputs=("prediction",),
        info={"family": "tagging", "label_names": list(label_names), "word_prefix": tokenizer.word_prefix})


# -- The family: prediction on raw text, files, serving, Hugging Face. --

def _word_splitter() -> tokenizers.Tokenizer:
    """BERT's basic split as a `tokenizers` pipeline whose offsets point into the original text:
    the normaliser drops control characters and puts CJK characters apart (case and accents
    kept), the pre-tokenizer splits whitespace and punctuation, each piece is one "token"."""
    splitter = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    splitter.normalizer = tokenizers.normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                                strip_accents=False, lowercase=False)
    splitter.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    return splitter


_WORDS = _word_splitter()


def _trained_prefix(model) -> str | None:
    """What `model` (an inference Model) tokenized each word after a sentence's first with, as
    it was trained: its run's recorded word_prefix; "" for a bertjax run from before that was
    recorded (words alone); None for a Hugging Face tagger (the tokenizer's own, probed)."""
    return model.task_info.get("word_prefix", "" if model.source.layout == "bertjax" else None)


def sentence_words(item) -> tuple[str, list[str], list[tuple[int, int]] | None]:
    """A raw sentence -> (it, its words as written, their character spans); a list of words ->
    (None, words, None)."""
    if isinstance(item, str):
        try:
            spans = [tuple(span) for span in _WORDS.encode(item, add_special_tokens=False).offsets]
        except TypeError:  # what `tokenizers` raises for a str that UTF-8 cannot hold
            raise ValueError(f"not valid Unicode (a lone surrogate?): {item[:80]!r}") from None
        return item, [item[start:end] for start, end in spans], spans
    if isinstance(item, (list, tuple)) and all(isinstance(word, str) and word for word in item):
        return None, list(item), None
    raise ValueError(f"expected a sentence or a list of non-empty words, got {item!r}"[:300])


# Uncased, BERT's normaliser turns these into ASCII punctuation (NFD, accent-like mark dropped:
# ≠ ≮ ≯ -> = < >, U+1FEF -> `), which its split makes words of their own: "x≠y" is three words,
# as the SavedModel's tokenizer splits them (bertjax.inference.export).
_UNCASED_PUNCTUATION = re.compile("([\u2260\u226e\u226f\u1fef])")


def split_uncased_punctuation(parsed: tuple) -> tuple:
    """`sentence_words`' (sentence, words, spans) with the words split at the characters that
    are punctuation once lower-cased (for an uncased WordPiece model); word lists as given."""
    sentence, words, spans = parsed
    if spans is None:
        return parsed
    split_words, split_spans = [], []
    for word, (start, _) in zip(words, spans):
        for piece in _UNCASED_PUNCTUATION.split(word):
            if piece:
                split_words.append(piece)
                split_spans.append((start, start + len(piece)))
            start += len(piece)
    return sentence, split_words, split_spans


def _label_ids(output) -> dict:
    return {"token_logits": output.argmax(-1)}


class TaggingFamily(Family):
    """Raw input: a sentence (split into words as BERT's basic tokenizer does: control
    characters dropped, whitespace, punctuation and CJK characters apart, for an uncased model
    ≠ ≮ ≯ too; case and accents kept) or a list of words -> {"words", "tags", "entities": [{"type", "text", "first_word",
    "last_word", "start", "end" (character offsets into the sentence; None for word lists)}]};
    entities are [] for a model none of whose labels is an entity tag (a part-of-speech tagger);
    a label that is none beside ones that are (BERT-NER's `X`, `[CLS]`) is an O in them."""

    name = "tagging"
    tasks = TASKS
    own_file_tasks = ("ner",)
    scores_test_file = True
    own_file_settings = {"label_names": "", "tag_column": -1}
    family_settings = {"tag_column": -1}
    hf_architecture = "BertForTokenClassification"
    serves_words = True
    packs_examples = True
    token_level = True
    reads_tokens = True
    extensions = {"conll": "conll"}

    load_task = staticmethod(load_task)  # this module's

    def tfds_datasets(self, config) -> tuple[str, ...]:
        return ("conll2003",) if config.task == "conll2003" else ()

    def network(self, bert, task_info):
        return BertForTokenClassification(bert, num_labels=len(task_info["label_names"]))

    def task_info_from_hf(self, hf_config):
        return "ner", {"family": self.name, "label_names": hf_label_names(hf_config)}

    def parse(self, item, task_info):
        return sentence_words(item)

    def token_id_client(self, model):
        # Each word tokenized alone, every one after a sentence's first with this before it.
        trained = _trained_prefix(model)
        return {"word_prefix": model.tokenizer.word_prefix if trained is None else trained}

    def predict(self, model, parsed, **options):
        no_options(self, options)
        if model.tokenizer.kind == "wordpiece" and model.tokenizer.do_lower_case:
            parsed = [split_uncased_punctuation(item) for item in parsed]
        names = model.task_info["label_names"]
        examples = TaggingExamples("inputs", [words for _, words, _ in parsed], None, list(names),
                                   [f"input {i}" for i in range(1, len(parsed) + 1)])
        split = featurize(model.tokenizer, examples, "inputs", model.max_seq_length, word_prefix=_trained_prefix(model))
        predicted = model.run_network(_label_ids, split, sequence_outputs=("token_logits",))["token_logits"]
        tags = predictions_to_tags(split, predicted) if any(words for _, words, _ in parsed) else [[] for _ in parsed]
        entity_tags = any(name != "O" and ner_metrics.is_tag(name) for name in names)  # B-/I-/E-/S-/L-/U-<type>
        results = []
        for index, ((sentence, words, spans), sentence_tags) in enumerate(zip(parsed, tags)):
            entities = []
            as_entity_tags = [tag if ner_metrics.is_tag(tag) else "O" for tag in sentence_tags]
            for type_, first, end in ner_metrics.extract_entities(as_entity_tags, index) if entity_tags else ():
                start_char = spans[first][0] if spans else None
                end_char = spans[end - 1][1] if spans else None
                text = sentence[start_char:end_char] if spans else " ".join(words[first:end])
                entities.append({"type": type_, "text": text, "first_word": first, "last_word": end - 1,
                                 "start": start_char, "end": end_char})
            results.append({"words": words, "tags": sentence_tags, "entities": entities})
        return results

    def read_line(self, line):
        return line  # as given: entity offsets count from the line's first character

    def input_keys(self, data, task_info):
        return {"text_a": "text"}

    def from_row(self, row, keys):
        sentence = row[keys["text_a"]]  # a sentence or a list of words
        if not (isinstance(sentence, str) or isinstance(sentence, list)
                and all(isinstance(word, str) and word for word in sentence)):
            raise ValueError(f"column {keys['text_a']!r} holds {sentence!r}, not a sentence or a list of non-empty "
                             "words"[:300])
        return sentence

    def read_formatted(self, path: str, input_format: str, data: dict):
        """CoNLL: each sentence's words (the first column; the others, tags or not, are ignored)."""
        examples = read_conll(path, tag_column=None)
        return zip(examples.locations, examples.sentences)

    def format_of_text(self, lines):
        """CoNLL: a -DOCSTART- line; token lines that all end in a tag column; or blocks of token
        lines parted by blank lines, every line of as many columns (at most CoNLL's 4): an
        untagged test file, or one of words and POS tags, where each word read as a sentence
        would be tagged alone. CoNLL-U's lines of ten tab-separated fields: a ValueError (the
        CoNLL reader would read its ID column as the words)."""
        columns = [line.split() for line in lines if line]
        if any(row[0] == "-DOCSTART-" for row in columns) or columns and all(
                len(row) >= 2 and ner_metrics.is_tag(row[-1]) for row in columns):
            return "conll"
        runs, run = [], 0  # the lengths of the runs of non-blank lines
        for line in [*lines, ""]:
            if line:
                run += 1
            elif run:
                runs.append(run)
                run = 0
        widths = {len(row) for row in columns}
        if len(runs) > 1 and max(runs) > 1 and len(widths) == 1 and max(widths) <= 4:
            return "conll"
        words = [line for line in lines if line and not line.startswith("#")]  # CoNLL-U: # comments
        if words and all(len(line.split("\t")) == 10 for line in words):  # CoNLL-U's ten tab-separated fields
            raise ValueError("CoNLL-U (ten tab-separated fields a word), not one input a line: give its words first "
                             "(`grep -Ev '^(#|[0-9]+[-.])' FILE | cut -f2`: no comments, multiword tokens or empty "
                             "nodes), then --input_format=conll")
        return ""

    def serving_inputs(self, task_info):
        return (("text", 1),)

    def serve(self, serving, inputs):
        """-> words <string>[B, W] (as written), tags <string>[B, W], word_start / word_end
        <int64>[B, W] (byte offsets); rows padded with "" and -1; truncated <bool>[B]. One window
        a sentence: words past it are tagged "" and a row whose tokens overflow it is `truncated`
        (predict reads them in further windows, and tags each word from the window where it has
        the most context)."""
        from bertjax.runtime.tf_cpu import tf

        text = inputs["text"]
        words, starts, ends = serving.tokenizer.words(text, every_written_word=True)
        pieces = serving.tokenizer.pieces(words)
        ids = pieces.merge_dims(1, 2)
        input_ids, segment_ids, input_mask, _ = serving.layout(ids)
        predicted = tf.argmax(serving.model(input_ids, segment_ids, input_mask), axis=-1)  # [B, S]
        # Each word's first sub-word sits at 1 + the tokens before it ([CLS] first).
        first = 1 + tf.cumsum(pieces.row_lengths(axis=2), axis=1, exclusive=True)  # [B, (W)]
        last_position = tf.cast(tf.shape(input_ids)[1], tf.int64) - 1
        fits = first < last_position
        rows = tf.cast(first.value_rowids(), tf.int64)
        label = tf.gather_nd(predicted, tf.stack([rows, tf.minimum(first.flat_values, last_position)], axis=1))
        tags = tf.where(fits.flat_values, tf.gather(tf.constant(serving.task_info["label_names"]), label), "")
        originals = tf.strings.substr(tf.gather(text, starts.value_rowids()), starts.flat_values,
                                      ends.flat_values - starts.flat_values)  # the words as written
        return {"words": starts.with_flat_values(originals).to_tensor(""),
                "tags": first.with_flat_values(tags).to_tensor(""),
                "word_start": starts.to_tensor(-1), "word_end": ends.to_tensor(-1),
                "truncated": serving.layout.truncated(ids)}  # also when a last word's first piece fits


FAMILY = TaggingFamily()

"""Tagging data: first-sub-word labels, windows over long sentences, CoNLL files, TFDS conll2003."""

import logging
import os
import re
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from bertjax.tasks import tagging
from bertjax.runtime.tf_cpu import tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from configs import finetune as finetune_config  # noqa: E402

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _examples(sentences, tags, label_names=LABELS):
    return tagging.TaggingExamples("test", sentences, tags, label_names, [f"s{i}" for i in range(len(sentences))])


def test_first_sub_word_labels_and_weights_by_hand(bert_tokenizer):
    words = ["Saldaña", "visited", "Zürich", "\x01", "unaffable", "Zoë"]
    tags = ["B-PER", "O", "B-LOC", "O", "O", "B-PER"]
    split = tagging.featurize(bert_tokenizer, _examples([words], [tags]), "train", max_seq_length=16)
    row = split.features["input_ids"][0]
    tokens = [bert_tokenizer.id_to_token(i) for i in row[:split.lengths[0]]]
    # The control character yields no token: it becomes [UNK] so the word keeps a label.
    assert tokens == ["[CLS]", "sal", "##dana", "visited", "zurich", "[UNK]", "una", "##ffa", "##ble", "zoe", "[SEP]"]
    assert split.features["label_ids"][0, :11].tolist() == [0, 1, 0, 0, 3, 0, 0, 0, 0, 1, 0]
    assert split.features["label_weights"][0].tolist() == [0, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0] + [0] * 5
    assert split.examples.token_word[0].tolist() == [-1, 0, 0, 1, 2, 3, 4, 4, 4, 5, -1] + [-1] * 5
    assert split.features["input_mask"][0].tolist() == [1] * 11 + [0] * 5
    assert split.features["segment_ids"].sum() == 0 and split.lengths.tolist() == [11]
    assert split.features["label_ids"].dtype == np.int32 and split.features["label_weights"].dtype == np.float32
    assert tagging.predictions_to_tags(split, split.features["label_ids"]) == [tags]


def test_a_byte_level_bpe_tokenizes_each_word_as_in_its_sentence():
    """Words tokenized alone lost the space marker a byte-level BPE puts on every word after
    the first ('York', not 'ĠYork'), so a ModernBERT tagger saw text unlike its pre-training
    (a review). Each word after the first is tokenized with its space: the ids are the
    sentence's own, and each word's label still sits on its first token."""
    from bertjax import tokenization

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "models", "hf_modernbert", "token_classifier",
                        "tokenizer.json")
    tokenizer = tokenization.load_tokenizer("huggingface", path)
    assert tokenizer.word_prefix == " "
    words, tags = ["Anna", "flew", "to", "New", "York"], ["B-PER", "O", "O", "B-LOC", "I-LOC"]
    split = tagging.featurize(tokenizer, _examples([words], [tags]), "train", max_seq_length=64)
    length = split.lengths[0]
    assert split.features["input_ids"][0, 1:length - 1].tolist() == tokenizer.encode(" ".join(words))
    first = np.flatnonzero(split.features["label_weights"][0])
    assert [tokenizer.decode(tokenizer.encode(" ".join(words))[i - 1:i]) for i in first] == [
        tokenizer.decode(tokenizer.encode((" " if k else "") + word)[:1]) for k, word in enumerate(words)]
    assert tagging.predictions_to_tags(split, split.features["label_ids"]) == [tags]
    # A model keeps the prefix it was trained with (a bertjax tagger from before: words alone).
    alone = tagging.featurize(tokenizer, _examples([words], [tags]), "train", max_seq_length=64, word_prefix="")
    assert alone.features["input_ids"][0, 1:alone.lengths[0] - 1].tolist() == sum(map(tokenizer.encode, words), [])


def test_word_prefix_is_empty_where_a_words_tokens_do_not_depend_on_the_space(bert_tokenizer):
    assert bert_tokenizer.word_prefix == ""  # WordPiece (SentencePiece: tests/tasks/test_squad_data.py)


@pytest.mark.parametrize("max_seq_length, stride", [(12, 3), (12, None), (7, 1), (40, None)])
def test_long_sentence_windows_predict_every_word_once(bert_tokenizer, max_seq_length, stride):
    rng = np.random.default_rng(0)
    vocabulary = ["Saldaña", "visited", "Zürich", "unaffable", "the", "São", "Paulo", ",", "extraordinarily"]
    sentences = [list(rng.choice(vocabulary, size=n)) for n in (40, 3, 25)]
    tags = [list(rng.choice(LABELS, size=len(s))) for s in sentences]
    split = tagging.featurize(bert_tokenizer, _examples(sentences, tags), "dev", max_seq_length, stride)
    windows = split.examples
    assert (np.bincount(windows.sentence_index) > 1).sum() >= 2  # the long sentences are windowed
    assert split.example_count == 3 and split.examples_per_epoch == len(split) > 3  # an epoch: the windows
    weights = split.features["label_weights"] > 0
    for s, sentence in enumerate(sentences):
        rows = np.flatnonzero(windows.sentence_index == s)
        predicted_words = windows.token_word[rows][weights[rows]]
        assert sorted(predicted_words.tolist()) == list(range(len(sentence)))
        # Every window's real tokens are a slice of the sentence's, each starting after the
        # last one's start and no later than its end, the first at 0 and the last at the end:
        # in order, with no token lost.
        full = [token for word in sentence for token in bert_tokenizer.encode(word)]
        start, end = -1, 0
        for r in rows:
            window = split.features["input_ids"][r, 1:split.lengths[r] - 1].tolist()
            starts = [i for i in range(start + 1, end + 1) if full[i:i + len(window)] == window]
            assert starts, (s, r, window)
            start, end = starts[-1], starts[-1] + len(window)
        assert end == len(full)
    assert tagging.predictions_to_tags(split, split.features["label_ids"]) == tags
    scrambled = np.where(weights, 0, 3)  # only the weighted positions are read
    assert tagging.predictions_to_tags(split, scrambled) == [["O"] * len(s) for s in sentences]
    with pytest.raises(ValueError, match=r"predicted_label_ids has shape \(\d+, \d+\), split '\w+' needs \(\d+, \d+\)"):
        tagging.predictions_to_tags(split, scrambled[:, :-1])


def test_window_prediction_comes_from_the_max_context_window(bert_tokenizer):
    words = [f"w{i}" for i in range(10)]  # 'w', '##i': 20 tokens
    split = tagging.featurize(bert_tokenizer, _examples([words], [["O"] * 10]), "dev", max_seq_length=10, stride=4)
    windows = split.examples
    # Windows of 8 tokens starting at 0, 4, 8, 12. Word 3 = tokens 6, 7: in window 0 (min(6, 1) = 1)
    # and window 1 (min(2, 5) = 2): predicted from window 1, at position 1 + 2.
    assert windows.token_word[1, 3] == 3 and split.features["label_weights"][1, 3] == 1
    assert windows.token_word[0, 7] == 3 and split.features["label_weights"][0, 7] == 0


# -- CoNLL files. --

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP B-NP I-PER
-DOCSTART- -X- -X- O
Zürich NNP B-NP B-LOC
"""


def test_conll_reader(tmp_path, bert_tokenizer):
    path = tmp_path / "train.txt"
    path.write_text(CONLL, encoding="utf-8")
    examples = tagging.read_conll(str(path))
    assert examples.sentences == [["EU", "rejects", "German"], ["Peter", "Blackburn"], ["Zürich"]]
    assert examples.tags == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"], ["B-LOC"]]
    assert examples.label_names == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    assert examples.locations == [f"{path}:3", f"{path}:7", f"{path}:10"]
    chunks = tagging.read_conll(str(path), tag_column=2, label_names=["O", "B-NP", "B-VP"])
    assert chunks.tags[0] == ["B-NP", "B-VP", "B-NP"]
    unlabeled = tagging.read_conll(str(path), tag_column=None, label_names=examples.label_names)
    assert unlabeled.tags is None and unlabeled.sentences == examples.sentences
    split = tagging.featurize(bert_tokenizer, unlabeled, "test")
    assert not split.has_labels and split.features["label_ids"].sum() == 0
    assert split.features["label_weights"].sum() == 6  # still marks where each word is predicted


def test_conll_columns_split_at_spaces_and_tabs_only(tmp_path):
    """A token holding a no-break space ("10 000" as French writes it) was split into two columns
    and the file refused (a review): conlleval splits at spaces and tabs only."""
    path = tmp_path / "train.txt"
    path.write_text("EU B-ORG\n10\u00a0000 O\n\u00a0\tO\n\nnext\tO\n", encoding="utf-8")
    examples = tagging.read_conll(str(path))
    assert examples.sentences == [["EU", "10\u00a0000", "\u00a0"], ["next"]]
    assert examples.tags == [["B-ORG", "O", "O"], ["O"]]


def test_conll_tags_optional_decided_by_the_first_token_line(tmp_path, caplog):
    path = tmp_path / "test.txt"
    path.write_text("-DOCSTART-\n\nEU\nrejects\n", encoding="utf-8")
    unlabeled = tagging.read_conll(str(path), label_names=["O", "B-ORG"], tags_optional=True)
    assert unlabeled.tags is None and unlabeled.sentences == [["EU", "rejects"]]
    path.write_text("EU B-ORG\nrejects\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}:2: expected the token in column 0 and the tag in the last column "
                                         r"\(config.data.tag_column=-1\)"):
        tagging.read_conll(str(path), label_names=["O", "B-ORG"], tags_optional=True)
    # A placeholder "O" column (some tools need one): scored, its F1 was 0 at every evaluation, and
    # with no eval_file it picked the best checkpoint (a review). Read as unlabeled.
    path.write_text("EU O\nrejects O\n\nPeter O\n", encoding="utf-8")
    placeholder = tagging.read_conll(str(path), label_names=["O", "B-ORG"], tags_optional=True)
    assert placeholder.tags is None and placeholder.sentences == [["EU", "rejects"], ["Peter"]]
    assert tagging.read_conll(str(path), label_names=["O", "B-ORG"]).tags == [["O", "O"], ["O"]]  # dev: scored
    # POS and chunk columns in a test file meant to be untagged: the tag column reads a chunk tag.
    path.write_text("EU NNP B-NP\nrejects VBZ B-VP\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"unknown tag 'B-NP'; known tags: .*; if column -1 \(config.data.tag_column\) "
                                         r"is no NER tag here \(a POS or chunk column\), give this file its tokens"):
        tagging.read_conll(str(path), label_names=["O", "B-ORG"], tags_optional=True)
    # A tagged test file of fewer columns than tag_column, set for the training file's: it went
    # unscored without a word (a review).
    assert "read as untagged" not in caplog.text
    path.write_text("EU\tB-ORG\nrejects\tO\n", encoding="utf-8")
    assert tagging.read_conll(str(path), label_names=["O", "B-ORG"], tag_column=3, tags_optional=True).tags is None
    assert (f"{path}:1: 2 columns, none at config.data.tag_column=3: read as untagged (predicted, not scored); to "
            "score it, give it the training file's columns") in caplog.text
    caplog.clear()
    path.write_text("EU\nrejects\n", encoding="utf-8")  # tokens alone: untagged, as meant
    assert tagging.read_conll(str(path), label_names=["O", "B-ORG"], tag_column=3, tags_optional=True).tags is None
    assert not caplog.text
    # A line of no-break spaces is a token of its own to conlleval: the error shows it.
    path.write_text("EU B-ORG\n\u00a0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"got 1 column\(s\): '\\xa0'"):
        tagging.read_conll(str(path), label_names=["O", "B-ORG"])


def test_a_conllu_file_is_neither_text_lines_nor_its_word_numbers(tmp_path):
    """A CoNLL-U file given to predict was tagged line by line, each line a sentence of its ten
    fields (a review); read as CoNLL, its words would be the ID column's 1, 2, 3. The advice
    given is a command that gives the words alone, a multiword token's parts and not itself."""
    import subprocess

    from bertjax.inference import batch_predict

    rows = ["1\tAnna\tanna\tPROPN\t_\t_\t2\tnsubj\t_\t_", "2\tsleeps\tsleep\tVERB\t_\t_\t0\troot\t_\t_",
            "3-4\tdu\t_\t_\t_\t_\t_\t_\t_\t_"]
    lines = ["# sent_id = 1", *rows, "", "# sent_id = 2", rows[0], rows[1], ""]
    with pytest.raises(ValueError, match=re.escape("CoNLL-U (ten tab-separated fields a word), not one input a line: "
                                                   "give its words first (`grep -Ev '^(#|[0-9]+[-.])' FILE | "
                                                   "cut -f2`: no comments, multiword tokens or empty nodes), then")):
        tagging.FAMILY.format_of_text(lines)
    (tmp_path / "ud.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}/ud.txt looks like CoNLL-U")) as refused:
        batch_predict.file_format(str(tmp_path / "ud.txt"), "tagging")  # predict names the file in the command
    command = re.search(r"`(.*)`", str(refused.value)).group(1)
    assert command == f"grep -Ev '^(#|[0-9]+[-.])' {tmp_path}/ud.txt | cut -f2"
    (tmp_path / "words.conll").write_text(subprocess.run(command, shell=True, capture_output=True, text=True,
                                                         check=True).stdout)
    assert tagging.read_conll(str(tmp_path / "words.conll"), tag_column=None).sentences == [["Anna", "sleeps"]] * 2
    assert tagging.FAMILY.format_of_text(["Anna sleeps .", "", "Bob runs ."]) == ""
    path = tmp_path / "ud.conll"
    path.write_text("\n".join([*rows, "", rows[0], rows[1], ""]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}: column 0 numbers each sentence's words 1, 2, 3 \(CoNLL-U's ID "
                                         r"column\?\) where the words were expected: give the words first"):
        tagging.read_conll(str(path), tag_column=None)
    assert tagging.read_conll(str(path), tag_column=None, token_column=1).sentences == [["Anna", "sleeps", "du"],
                                                                                         ["Anna", "sleeps"]]
    # Universal Dependencies' files start each sentence with comments (a review: read as a first
    # token line of 4 columns, then "10 columns, but the file's first token line has 4").
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}:1: a CoNLL-U comment \('# sent_id = 1'\)"):
        tagging.read_conll(str(path), tag_column=None)
    path.write_text("# O\nsays O\n", encoding="utf-8")  # CoNLL-2003's "#" token
    assert tagging.read_conll(str(path)).sentences == [["#", "says"]]
    path.write_text("1 O\n2 O\n\n3 O\n", encoding="utf-8")  # numbers as words: a sentence not counting from 1
    assert tagging.read_conll(str(path)).sentences == [["1", "2"], ["3"]]


def test_a_sentence_a_line_read_as_conll_is_refused(tmp_path):
    """--input_format=conll on a sentence a line, every line of as many words, predicted each
    sentence's first word alone (a walkthrough). One-line sentences of three columns or more,
    words beside the first, are refused, and lines of other word counts say the same; CoNLL's
    own one-word sentences, annotated, are read (a review: 'Paris NNP _' was refused)."""
    path = tmp_path / "sentences.conll"
    path.write_text("John lives in Paris\n\nMary works at Google\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: each of its 2 sentence(s) is one line of 4 columns (line 1: 'John lives in Paris'): a sentence "
            "a line? CoNLL's layout has a word a line, a blank line between sentences (predict reads a sentence a "
            "line with --input_format=text)")):
        tagging.read_conll(str(path), tag_column=None)
    path.write_text("John lives in Paris\nMary works at Google today\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(
            "so a token holding a space adds one; a sentence a line? CoNLL's layout has a word a line")):
        tagging.read_conll(str(path), tag_column=None)
    for text, sentences in (("Paris NNP B-NP B-LOC\n\nRome NNP B-NP B-LOC\n", [["Paris"], ["Rome"]]),
                            ("Paris NNP\n\nRome NNP\n", [["Paris"], ["Rome"]]),
                            ("Paris NNP _\n\nRome NNP _\n", [["Paris"], ["Rome"]]),
                            ("a b c\nd e f\n", [["a", "d"]])):
        path.write_text(text, encoding="utf-8")
        assert tagging.read_conll(str(path), tag_column=None).sentences == sentences


def test_conll_bad_lines_name_file_and_line(tmp_path):
    path = tmp_path / "dev.txt"
    path.write_text("EU B-ORG\nrejects O\n\nPeter B-PER\nBlackburn\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}:5: expected the token in column 0 and the tag in column 1, "
                                         r"got 1 column\(s\): 'Blackburn'"):
        tagging.read_conll(str(path), tag_column=1)
    path.write_text("EU B-ORG\nrejects B-VERB\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}:2: unknown tag 'B-VERB'; known tags: \['O', 'B-ORG'\]"):
        tagging.read_conll(str(path), label_names=["O", "B-ORG"])
    with pytest.raises(ValueError, match=r"s0: tags \['B-X'\] are not in the label names"):
        tagging.featurize(None, _examples([["a"]], [["B-X"]]), "train")


@pytest.mark.parametrize("content, message", [
    ("Peter PER\nlives O\n", r":1: tag 'PER' is neither 'O' nor B-, I-, E-, S-, L- or U-<type> "
                             r"\(config.data.tag_column=-1"),
    ("EU NNP B-ORG\nGerman B-NP\n", r":2: 2 columns, but the file's first token line has 3: 'German B-NP' against "
                                   r"line 1: 'EU NNP B-ORG'; columns are split at spaces and tabs, so a token holding "
                                   r"a space adds one"),
])
def test_conll_tags_and_columns_are_checked_when_read(tmp_path, content, message):
    path = tmp_path / "train.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}{message}"):
        tagging.read_conll(str(path))


def test_a_file_in_another_layout_says_what_it_looks_like(tmp_path):
    """Hugging Face's JSON Lines (tokens, ner_tags) and a sentence a line, given to the tagging
    task, failed at a 'tag' that was a word or a piece of JSON, or advised that a POS column
    was there (a walkthrough): the error says what the file looks like."""
    path = tmp_path / "train.conll"
    path.write_text('{"tokens": ["Anna", "visited", "Oslo"], "ner_tags": ["B-PER", "O", "B-LOC"]}\n')
    with pytest.raises(ValueError, match=re.escape(
            f"{path}:1: tag '\"B-LOC\"]}}' is neither 'O' nor B-, I-, E-, S-, L- or U-<type> "
            "(config.data.tag_column=-1 picks the column); JSON Lines? The tagging task reads CoNLL's layout: a word "
            "and its tag a line, a blank "
            "line between sentences")):
        tagging.read_conll(str(path))
    path.write_text("Anna visited Oslo\n")
    with pytest.raises(ValueError, match=re.escape("tag 'Oslo' is neither 'O' nor B-, I-, E-, S-, L- or U-<type> "
                                                   "(config.data.tag_column=-1 picks the column); a sentence a line?")):
        tagging.read_conll(str(path))
    path.write_text("Anna Smith visited Oslo .\n")  # a test file, its tags optional: not a POS column either
    with pytest.raises(ValueError, match=re.escape("unknown tag '.'; known tags: ['O', 'B-PER'] (the training file's, "
                                                   "or config.data.label_names: list every tag there); a sentence a "
                                                   "line?")):
        tagging.read_conll(str(path), label_names=["O", "B-PER"], tags_optional=True)


@pytest.mark.parametrize("newline", ["\r\n", "\r"])  # Windows, old Mac
def test_conll_with_a_byte_order_mark_and_other_line_endings(tmp_path, newline):
    path = tmp_path / "train.txt"
    lines = ["\ufeff-DOCSTART- -X- -X- O", "", "EU NNP B-NP B-ORG", "rejects VBZ B-VP O", "", "Peter NNP B-NP B-PER"]
    path.write_bytes(newline.join(lines).encode("utf-8") + newline.encode())
    examples = tagging.read_conll(str(path))
    assert examples.sentences == [["EU", "rejects"], ["Peter"]] and examples.tags == [["B-ORG", "O"], ["B-PER"]]
    # Two such files joined (cat): the second mark starts a line inside; it made its -DOCSTART- a
    # one-word sentence, trained and scored (a review).
    path.write_bytes((newline.join(lines) + newline).encode("utf-8") * 2)
    assert tagging.read_conll(str(path)).sentences == [["EU", "rejects"], ["Peter"]] * 2


@pytest.mark.parametrize("names", ["O,B-PER,B-PER", "O,B-PER,", "B-PER,I-PER", "O,B-PER,PER"])
def test_ner_label_names_must_be_distinct_tags_with_o(tmp_path, names):
    path = tmp_path / "train.txt"
    path.write_text("Peter B-PER\nlives O\n", encoding="utf-8")
    config = finetune_config.get_config("ner")
    config.data.update(train_file=str(path), label_names=names)
    with pytest.raises(ValueError, match=r"config.data.label_names=.*expected distinct tags, 'O' and B-"):
        tagging.load_task(config, None)


def test_a_training_file_of_one_tag_is_refused(tmp_path):
    """Every word 'O' (a wrong tag column, say) trained a one-tag tagger without a word (a
    review); classification refuses fewer than 2 labels, and so does tagging."""
    path = tmp_path / "train.txt"
    path.write_text("Peter O\nlives O\n", encoding="utf-8")
    config = finetune_config.get_config("ner")
    config.data.update(train_file=str(path))
    with pytest.raises(ValueError, match=r"train.txt: the only tag is 'O'; a tagger needs at least 2"):
        tagging.load_task(config, None)


def test_a_tagged_test_file_without_an_eval_file_is_warned_to_pick_the_best_checkpoint(tmp_path, bert_tokenizer,
                                                                                      caplog):
    for name in ("train", "dev", "test"):
        (tmp_path / f"{name}.txt").write_text("Peter B-PER\nlives O\n", encoding="utf-8")
    config = finetune_config.get_config("ner")
    config.data.update(train_file=str(tmp_path / "train.txt"), test_file=str(tmp_path / "test.txt"), max_seq_length=16)
    with caplog.at_level(logging.WARNING):
        task = tagging.load_task(config, bert_tokenizer)
    assert [split.name for split in task.eval_splits] == ["test"]
    assert "test.txt: the tagged test file is the only scored one" in caplog.text
    caplog.clear()
    config.data.eval_file = str(tmp_path / "dev.txt")
    with caplog.at_level(logging.WARNING):
        task = tagging.load_task(config, bert_tokenizer)
    assert [split.name for split in task.eval_splits] == ["eval", "test"] and "only scored" not in caplog.text
    # A dev file without an entity scores F1 0 at every step, said (a walkthrough: no word of it).
    (tmp_path / "dev.txt").write_text("Peter O\nlives O\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        tagging.load_task(config, bert_tokenizer)
    assert ("dev.txt: every tag is 'O', no entity to find: F1 is 0 at every evaluation, so the best checkpoint is "
            "picked by the dev loss alone") in caplog.text


def test_write_conll(tmp_path):
    path = tmp_path / "out.txt"
    gold, predicted = [["B-ORG", "O"], ["O"]], [["B-ORG", "B-PER"], ["O"]]
    tagging.write_conll(str(path), [["EU", "rejects"], ["odd word"]], gold, predicted)
    assert path.read_text() == "EU B-ORG B-ORG\nrejects O B-PER\n\nodd_word O O\n\n"
    tagging.write_conll(str(path), [["EU"]], None, [["B-ORG"]])
    assert path.read_text() == "EU B-ORG\n\n"
    with pytest.raises(ValueError, match="sentence 0 has 2 words but 1 predicted"):
        tagging.write_conll(str(path), [["EU", "x"]], None, [["O"]])


# -- TFDS conll2003 under mock data. --

def test_tfds_mock_data_counts_tag_count_mismatches(bert_tokenizer, caplog):
    with tfds.testing.mock_data(num_examples=8), caplog.at_level(logging.WARNING):
        examples = tagging.read_tfds("conll2003", "dev")
        split = tagging.featurize(bert_tokenizer, examples, "dev")
    assert examples.label_names == ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
    assert len(examples) < 8 and "tag_count_mismatch" in caplog.text and "tfds:conll2003[dev]#" in caplog.text
    assert len(split) >= len(examples)


def test_tfds_consistent_examples_give_features(bert_tokenizer):
    sentences = [(["EU", "rejects", "German", "call"], [3, 0, 7, 0]), (["Peter", "Blackburn"], [1, 2])]

    def as_dataset(self, *args, **kwargs):
        def generate():
            for tokens, ner in sentences:
                yield {"tokens": tokens, "ner": ner, "pos": [0] * len(ner), "chunks": [0] * len(ner)}
        spec = {"tokens": tf.TensorSpec([None], tf.string), **{k: tf.TensorSpec([None], tf.int64)
                                                               for k in ("ner", "pos", "chunks")}}
        return tf.data.Dataset.from_generator(generate, output_signature=spec)

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        split = tagging.load_split(bert_tokenizer, "conll2003", "train", max_seq_length=16)
    examples = split.examples
    assert examples.tags == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]]
    assert len(split) == 2 and split.has_labels
    assert split.features["label_ids"][0, 1:5].tolist() == [3, 0, 7, 0]
    assert tagging.predictions_to_tags(split, split.features["label_ids"]) == examples.tags

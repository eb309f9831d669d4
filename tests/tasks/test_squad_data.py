"""Tokenizer offsets, and SQuAD data: windows, answer spans, n-best postprocessing, files, TFDS."""

import json
import logging

import numpy as np
import pytest
import tensorflow_datasets as tfds

from bertjax import tokenization
from bertjax.data import vocabularies
from bertjax.tasks import squad, squad_answers

# -- Tokenizer offsets. --


def _spans(text, tokenizer):
    ids, offsets = tokenizer.encode_with_offsets(text)
    assert ids.tolist() == tokenizer.encode(text) and offsets.shape == (len(ids), 2)
    return [tokenizer.id_to_token(i) for i in ids], [text[a:b] for a, b in offsets]


def test_wordpiece_offsets_point_into_the_original_text(bert_tokenizer):
    tokens, pieces = _spans("Café  déjà-vu!", bert_tokenizer)
    assert tokens == ["cafe", "de", "##ja", "-", "vu", "!"]
    assert pieces == ["Café", "dé", "jà", "-", "vu", "!"]
    tokens, pieces = _spans("  Hello,\tWORLD  中文x", bert_tokenizer)
    assert tokens == ["hello", ",", "world", "中", "文", "x"]
    assert pieces == ["Hello", ",", "WORLD", "中", "文", "x"]
    ids, offsets = bert_tokenizer.encode_with_offsets("a\x00b  c")  # NUL is dropped: "ab" is one word
    assert offsets.tolist() == [[0, 3], [5, 6]]
    assert ids.dtype == np.int32 and offsets.dtype == np.int64
    ids, offsets = bert_tokenizer.encode_with_offsets("")
    assert ids.shape == (0,) and offsets.shape == (0, 2)


def test_wordpiece_offset_ids_equal_encode_flat(bert_tokenizer):
    texts = ["Zoë  Saldaña (1895–1943)", "", "São Paulo, 'a triumph!'", "plain ascii here", "ﬁne Ａｂｃ 😀"]
    ids, offsets, lengths = bert_tokenizer.encode_flat_with_offsets(texts)
    expected_ids, expected_lengths = bert_tokenizer.encode_flat(texts)
    assert ids.tolist() == expected_ids.tolist() and lengths.tolist() == expected_lengths.tolist()
    assert len(offsets) == len(ids)


@pytest.fixture(scope="module")
def sentencepiece_tokenizer(tmp_path_factory):
    corpus = ["Café déjà vu is a French phrase.", "The naïve fox jumps over the lazy dog.", "中文 字符 测试"]
    corpus *= 50
    path = vocabularies.train_sentencepiece(corpus, 40, str(tmp_path_factory.mktemp("spm")), True)
    return tokenization.load_tokenizer("sentencepiece", path)


def test_sentencepiece_words_need_no_prefix(sentencepiece_tokenizer):
    assert sentencepiece_tokenizer.word_prefix == ""  # '▁York' alone or after a space (tagging's word_prefix)


def test_sentencepiece_offsets_are_characters_without_leading_space(sentencepiece_tokenizer):
    for text in ["Café  DÉJÀ vu!", "  中文 x", "naïve 😀 fox x", "x\u00a0y"]:
        ids, offsets = sentencepiece_tokenizer.encode_with_offsets(text)
        assert ids.tolist() == sentencepiece_tokenizer.encode(text)
        # Byte offsets would put the final ASCII character after len(text) or past a multi-byte one.
        assert offsets[-1].tolist() == [len(text) - 1, len(text)]
        covered = np.zeros(len(text), int)
        for start, end in offsets:
            assert start == end or not text[start].isspace()
            covered[start:end] += 1
        assert all(covered[i] == 1 for i, c in enumerate(text) if not c.isspace())
        assert np.all(np.diff(offsets[:, 0]) >= 0)


def test_sentencepiece_byte_to_character_conversion_by_hand():
    from sentencepiece import sentencepiece_pb2
    text = "é 中x"  # bytes: é=0-2, ' '=2-3, 中=3-6, x=6-7
    proto = sentencepiece_pb2.SentencePieceText()
    for piece, begin, end in [("▁", 0, 0), ("é", 0, 2), ("▁中", 2, 6), ("x", 6, 7), ("▁", 7, 7)]:
        proto.pieces.add(piece=piece, begin=begin, end=end)
    spans = tokenization._sentencepiece_char_spans(text, proto)
    assert spans.tolist() == [[0, 0], [0, 1], [2, 3], [3, 4], [4, 4]]


# -- SQuAD features. --

CONTEXT = ("The composer Zoë  Saldaña (1895–1943) was born in São Paulo, Brazil.  Her first opera, "
           "\"La Noche\", premiered in New   York on 3 May 1921; critics called it 'a triumph!'. "
           "She later moved to Zürich, where she taught until 1940. Café-concerts were her passion.")
ANSWERS = ["Zoë  Saldaña", "(1895–1943)", "São Paulo", "\"La Noche\"", "New   York", "3 May 1921", "'a triumph!'",
           "Zürich", "Café-concerts", "1940", "passion"]


def _write(tmp_path, data, name="squad.json", version="1.1"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": version, "data": data}), encoding="utf-8")
    return str(path)


def _qa(i, answer, context=CONTEXT, **extra):
    answers = [] if answer is None else [{"text": answer, "answer_start": context.index(answer)}]
    return {"id": f"q{i}", "question": f"What is answer number {i}?", "answers": answers, **extra}


def _original_windows(num_tokens, max_tokens, doc_stride):
    """run_squad.py's doc_spans loop."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def _original_is_max_context(spans, index, position):
    best_score, best = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best = score, i
    return best == index


@pytest.fixture(scope="module")
def long_split(bert_tokenizer, tmp_path_factory):
    path = _write(tmp_path_factory.mktemp("squad"), [{"title": "T", "paragraphs": [
        {"context": CONTEXT, "qas": [_qa(i, a) for i, a in enumerate(ANSWERS)]}]}])
    return squad.featurize(bert_tokenizer, squad.read_json(path), "train", max_seq_length=40, doc_stride=8,
                           max_query_length=16)


def test_questions_cut_to_max_query_length_are_counted(long_split, bert_tokenizer, tmp_path):
    path = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [
        _qa(0, ANSWERS[0]), dict(_qa(1, ANSWERS[1]), question="Which?")]}]}])
    split = squad.featurize(bert_tokenizer, squad.read_json(path), "train", max_seq_length=40, max_query_length=4)
    assert long_split.truncation == "" and split.truncation == "1 of 2 questions cut to 4 tokens"


def test_windows_layout_and_max_context_match_run_squad(long_split, bert_tokenizer):
    windows, features = long_split.examples, long_split.features
    context_ids = bert_tokenizer.encode(CONTEXT)
    assert windows.examples.version == "v1.1" and len(set(windows.example_index.tolist())) == len(ANSWERS)
    max_context = windows.max_context
    for q in range(len(ANSWERS)):
        rows = np.flatnonzero(windows.example_index == q)
        query = bert_tokenizer.encode(f"What is answer number {q}?")
        spans = _original_windows(len(context_ids), 40 - len(query) - 3, 8)
        assert len(spans) > 3 and list(zip(windows.doc_start[rows], windows.doc_length[rows])) == spans
        for w, (row, (start, length)) in enumerate(zip(rows, spans)):
            expected = [bert_tokenizer.cls_id, *query, bert_tokenizer.sep_id, *context_ids[start:start + length],
                        bert_tokenizer.sep_id]
            used = long_split.lengths[row]
            assert used == len(expected) and features["input_ids"][row, :used].tolist() == expected
            segments = [0] * (len(query) + 2) + [1] * (length + 1) + [0] * (40 - used)
            assert features["segment_ids"][row].tolist() == segments
            assert features["input_mask"][row].tolist() == [1] * used + [0] * (40 - used)
            flags = [_original_is_max_context(spans, w, start + j) for j in range(length)]
            position = len(query) + 2
            assert max_context[row, position:position + length].tolist() == flags
            assert not max_context[row, :position].any() and not max_context[row, position + length:].any()


def test_every_answer_maps_to_tokens_and_back_to_its_text(long_split):
    windows, features = long_split.examples, long_split.features
    offsets = windows.token_offsets()
    for q, answer in enumerate(ANSWERS):
        rows = np.flatnonzero(windows.example_index == q)
        labelled = [r for r in rows if features["start_positions"][r] > 0]
        assert labelled, f"answer {answer!r} in no window"
        for r in labelled:
            start, end = features["start_positions"][r], features["end_positions"][r]
            assert 0 < start <= end < long_split.lengths[r] - 1
            assert CONTEXT[offsets[r, start, 0]:offsets[r, end, 1]] == answer
        for r in set(rows) - set(labelled):  # answer not wholly inside: [CLS]
            assert features["end_positions"][r] == 0


def _postprocess_gold_logits(split):
    """postprocess on logits peaked (5 vs -5) on each window's gold start and end."""
    start_logits = np.full(split.features["input_ids"].shape, -5.0)
    end_logits = start_logits.copy()
    rows = np.arange(len(split))
    start_logits[rows, split.features["start_positions"]] = 5.0
    end_logits[rows, split.features["end_positions"]] = 5.0
    return squad.postprocess(split, start_logits, end_logits)


def test_postprocess_round_trip_on_gold_logits(long_split):
    """Logits peaked on the gold span of each labelled window give back every answer exactly."""
    predictions, nbest, null_odds = _postprocess_gold_logits(long_split)
    assert predictions == {f"q{i}": a for i, a in enumerate(ANSWERS)} and null_odds is None
    assert all(len(v) <= 20 and abs(sum(e["probability"] for e in v) - 1) < 1e-9 for v in nbest.values())


def test_sentencepiece_spans_round_trip(sentencepiece_tokenizer, tmp_path):
    context = "Café  déjà vu is a French phrase. The naïve fox jumps over the lazy dog; 中文 字符."
    answers = ["déjà vu", "French phrase", "naïve fox", "lazy dog", "中文 字符", "Café"]
    path = _write(tmp_path, [{"title": "T", "paragraphs": [
        {"context": context, "qas": [_qa(i, a, context=context) for i, a in enumerate(answers)]}]}])
    # Nearly one token per character: windows of 45 tokens hold every answer around its
    # start token's max-context position.
    split = squad.featurize(sentencepiece_tokenizer, squad.read_json(path), "train", max_seq_length=64,
                            doc_stride=8, max_query_length=16)
    assert len(split) > 2 * len(answers)  # several windows each
    predictions, _, _ = _postprocess_gold_logits(split)
    assert predictions == {f"q{i}": a for i, a in enumerate(answers)}


# -- Postprocessing on hand-made logits. --

def _two_window_split(bert_tokenizer, tmp_path, version="1.1", impossible=False):
    context = " ".join(f"w{i}" for i in range(20))  # 'w0' -> 'w', '##0': 40 tokens
    qa = _qa(0, None if impossible else "w5", context=context, is_impossible=impossible)
    path = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": context, "qas": [qa]}]}], version=version)
    split = squad.featurize(bert_tokenizer, squad.read_json(path), "validation", max_seq_length=40,
                            doc_stride=16, max_query_length=16)
    # [CLS] what is answer number 0 ? [SEP]: context from position 8, windows of 40 - 9 = 31 tokens.
    assert split.examples.doc_start.tolist() == [0, 16] and split.examples.doc_length.tolist() == [31, 24]
    assert split.examples.doc_position.tolist() == [8, 8]
    return split


def test_postprocess_picks_the_max_context_window_and_respects_max_answer_length(bert_tokenizer, tmp_path):
    split = _two_window_split(bert_tokenizer, tmp_path)
    # 'w14' = context tokens 28, 29: window 0 positions 36, 37 (context min(28, 2) = 2),
    # window 1 positions 20, 21 (min(12, 11) = 11): its max context is in window 1.
    assert not split.examples.max_context[0, 36] and split.examples.max_context[1, 20]
    start, end = np.full((2, 40), -10.0), np.full((2, 40), -10.0)
    start[0, 36], end[0, 37] = 9.0, 9.0  # higher, but not where the start has max context
    start[1, 20], end[1, 21] = 4.0, 4.0
    predictions, nbest, _ = squad.postprocess(split, start, end)
    assert predictions == {"q0": "w14"} and nbest["q0"][0]["start_logit"] == 4.0
    end[1, 23] = 8.0  # 'w14 w15' (positions 20..23) scores higher but is 4 tokens long
    predictions, _, _ = squad.postprocess(split, start, end, max_answer_length=2)
    assert predictions == {"q0": "w14"}
    predictions, _, _ = squad.postprocess(split, start, end, max_answer_length=4)
    assert predictions == {"q0": "w14 w15"}
    with pytest.raises(ValueError, match=r"start_logits has shape \(2, 39\).*needs \(2, 40\)"):
        squad.postprocess(split, start[:, :39], end)


def test_postprocess_v2_null_threshold_both_ways(bert_tokenizer, tmp_path):
    split = _two_window_split(bert_tokenizer, tmp_path, version="v2.0", impossible=True)
    assert split.examples.examples.version == "v2.0"
    start, end = np.full((2, 40), -10.0), np.full((2, 40), -10.0)
    start[:, 0], end[:, 0] = [3.0, 1.0], [2.0, 1.5]  # null: the smaller of 5.0 and 2.5
    start[0, 12], end[0, 13] = 1.0, 1.0  # 'w2' (tokens 4, 5): best non-null, 2.0
    predictions, nbest, null_odds = squad.postprocess(split, start, end)
    assert null_odds == {"q0": pytest.approx(0.5)} and predictions == {"q0": ""}
    assert [e["text"] for e in nbest["q0"]][:2] == ["", "w2"]
    assert (nbest["q0"][0]["start_logit"], nbest["q0"][0]["end_logit"]) == (1.0, 1.5)
    predictions, _, _ = squad.postprocess(split, start, end, null_score_diff_threshold=0.6)
    assert predictions == {"q0": "w2"}
    predictions, _, _ = squad.postprocess(split, start, end, null_score_diff_threshold=0.4)
    assert predictions == {"q0": ""}
    # A diverged model's NaN logits: no answer, with odds a JSON reader takes (a review: NaN odds
    # were written, and ordered the best-threshold search by the dict's order).
    start[0, 0] = np.nan
    predictions, nbest, null_odds = squad.postprocess(split, start, end)
    assert predictions == {"q0": ""} and null_odds == {"q0": squad_answers.NO_SPAN_NULL_ODDS}
    # ... and an n-best list a strict JSON reader takes: null for what is not a number (a review).
    assert json.loads(json.dumps(nbest, allow_nan=False)) and nbest["q0"][0]["probability"] is None


def test_a_version_is_read_as_the_scorer_reads_it(tmp_path):
    """read_json(version="2.0") decided the unanswerable questions as v2.0 and post-processed as
    v1.1: no null answer, no null_odds.json (a review)."""
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "a", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]}]}]}]}))
    assert squad.read_json(str(path), version="2.0").version == "v2.0"
    assert squad.read_json(str(path), version="v1.1").version == "v1.1"
    with pytest.raises(ValueError, match="version must be 'v1.1' or 'v2.0'"):
        squad.read_json(str(path), version="3")


def test_the_best_threshold_is_searched_above_the_runs_too(bert_tokenizer, tmp_path):
    """An answerable question whose right span loses to the null answer by 0.5: predicted "" at
    the default threshold 0 (exact 0), and the search finds the threshold 0.5 that answers it,
    which thresholded predictions alone cannot show (they would report 0 at 0.0)."""
    split = _two_window_split(bert_tokenizer, tmp_path, version="v2.0")
    start, end = np.full((2, 40), -10.0), np.full((2, 40), -10.0)
    start[:, 0], end[:, 0] = [3.0, 1.0], [2.0, 1.5]  # null: the smaller of 5.0 and 2.5
    start[0, 18], end[0, 19] = 1.0, 1.0  # 'w5' (context tokens 10, 11), the gold answer: 2.0
    scores = squad.score(split, start, end)
    assert (scores["exact"], scores["f1"]) == (0.0, 0.0)
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (100.0, pytest.approx(0.5))
    scores = squad.score(split, start, end, null_score_diff_threshold=0.6)
    assert (scores["exact"], scores["best_exact"], scores["best_exact_thresh"]) == (100.0, 100.0, pytest.approx(0.5))


def test_write_predictions(tmp_path):
    paths = squad.write_predictions(str(tmp_path / "out"), {"a": "x"}, {"a": [{"text": "x"}]}, {"a": -1.0})
    assert sorted(paths) == ["nbest_predictions.json", "null_odds.json", "predictions.json"]
    assert json.loads((tmp_path / "out" / "predictions.json").read_text()) == {"a": "x"}
    assert json.loads((tmp_path / "out" / "null_odds.json").read_text()) == {"a": -1.0}
    assert sorted(squad.write_predictions(str(tmp_path / "v1"), {}, {})) == ["nbest_predictions.json",
                                                                           "predictions.json"]


# -- JSON files: good and bad. --

def test_json_bad_answers_error_or_counted_skip(bert_tokenizer, tmp_path, caplog):
    good, bad = _qa(0, "São Paulo"), _qa(1, "Zürich")
    bad["answers"][0]["answer_start"] += 3
    path = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [good, bad]}]}])
    examples = squad.read_json(path)
    with pytest.raises(ValueError, match=rf"{path}: question id 'q1': answer_start \d+ does not start 'Zürich'"):
        squad.featurize(bert_tokenizer, examples, "train")
    with caplog.at_level(logging.WARNING):
        split = squad.featurize(bert_tokenizer, examples, "train", skip_bad_answers=True)
    assert set(split.examples.example_index.tolist()) == {0}
    assert "question id 'q1'" in caplog.text and "answer_not_found: 1" in caplog.text
    evaluation = squad.featurize(bert_tokenizer, examples, "validation")  # all kept
    assert set(evaluation.examples.example_index.tolist()) == {0, 1}
    assert (evaluation.features["start_positions"][evaluation.examples.example_index == 1] == -1).all()  # no loss
    assert evaluation.examples.data[0]["paragraphs"][0]["qas"][1]["id"] == "q1"


@pytest.mark.parametrize("qa, message", [
    ({"question": "Who?", "answers": []}, r"data\[0\].paragraphs\[0\].qas\[1\] has no 'id'"),
    ({"id": "q0", "question": "Who?"}, "question id 'q0' appears twice"),
    ({"id": "q9", "answers": []}, "question id 'q9' has no 'question'"),
    ({"id": "q9", "question": "?", "answers": [{"text": "x"}]}, "question id 'q9': each answer needs"),
    ({"id": "q9", "question": "?", "answers": [{"text": 1990, "answer_start": 0}]},  # the scorer refuses it
     "question id 'q9': each answer needs a 'text' string"),
    ({"id": "q9", "question": "?", "answers": [{"text": "x", "answer_start": 2.7}]},
     "question id 'q9': each answer needs a 'text' string and an integer 'answer_start'"),
    ({"id": "q9", "question": "?", "answers": [], "is_impossible": "false"},  # bool("false") is True
     "question id 'q9': 'is_impossible' must be true or false"),
    ("not an object", r"data\[0\].paragraphs\[0\]: 'qas' must be a list of JSON objects"),
    ({"id": "q9", "question": "Who\ud83d?", "answers": []},  # JSON escapes it; the tokenizer fails naming nothing
     r"question id 'q9': its question holds a lone surrogate \('\\ud83d'\)"),
    ({"id": "q9", "question": "?", "answers": [{"text": "x\udc00", "answer_start": 0}]},
     "question id 'q9': its answer holds a lone surrogate"),
])
def test_json_malformed_questions_name_file_and_position(tmp_path, qa, message):
    path = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [_qa(0, "1940"), qa]}]}])
    with pytest.raises(ValueError, match=f"{path}: {message}"):
        squad.read_json(path)


def test_an_unanswerable_question_with_answers_is_refused(tmp_path):
    """SQuAD 2.0 keeps an unanswerable question's spans in 'plausible_answers'; one in 'answers'
    was trained toward [CLS] and scored against its answers, both silently (a review)."""
    qa = _qa(9, "1940", is_impossible=True)
    path = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [_qa(0, "1940"), qa]}]}],
                  version="v2.0")
    with pytest.raises(ValueError, match=f"{path}: question id 'q9': 'is_impossible' is true, yet it has 'answers' "
                                         r"\(which the scorer would hold it to\): move them to 'plausible_answers'"):
        squad.read_json(path)
    qa["plausible_answers"] = qa.pop("answers")
    path = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [_qa(0, "1940"), qa]}]}],
                  version="v2.0")
    assert squad.read_json(path).is_impossible.tolist() == [False, True]
    # A converter's placeholder, an empty answer, is no answer to the scorer: no contradiction.
    qa["answers"] = [{"text": "", "answer_start": -1}]
    path = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [_qa(0, "1940"), qa]}]}],
                  version="v2.0")
    assert squad.read_json(path).is_impossible.tolist() == [False, True]


@pytest.mark.parametrize("data, message", [
    ([{"title": "T", "paragraph": []}], r"data\[1\] has no 'paragraphs' list \(keys: \['paragraph', 'title'\]\)"),
    ([{"title": "T", "paragraphs": [{"context": CONTEXT, "qa": []}]}],
     r"data\[1\].paragraphs\[0\] has no 'qas' list"),
])
def test_json_misspelt_paragraphs_or_questions_are_refused(tmp_path, data, message):
    """Their questions were read as none: lost from training, left out of predictions, and the
    scorer failed on the file after training (a review)."""
    good = {"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [_qa(0, "1940")]}]}
    path = _write(tmp_path, [good, *data])
    with pytest.raises(ValueError, match=f"{path}: {message}"):
        squad.read_json(path)


def test_json_context_with_a_lone_surrogate_names_its_position(tmp_path):
    path = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": CONTEXT + "\ud83d", "qas": [_qa(0, "1940")]}]}])
    with pytest.raises(ValueError, match=rf"{path}: data\[0\].paragraphs\[0\].context holds a lone surrogate"):
        squad.read_json(path)


def test_json_with_a_byte_order_mark_is_read(tmp_path):
    path = _write(tmp_path, [{"title": "t", "paragraphs": [{"context": "A fox.", "qas": [
        {"id": "q1", "question": "Who?", "answers": [{"text": "fox", "answer_start": 2}]}]}]}])
    with open(path, "rb") as f:
        content = f.read()
    with open(path, "wb") as f:
        f.write(b"\xef\xbb\xbf" + content)  # the byte-order mark some editors write
    assert squad.read_json(path).ids == ["q1"]


def test_an_empty_question_in_a_file_is_read_and_said(tmp_path, caplog):
    """A question of no text was trained on as [CLS] [SEP] context without a word, where predict
    refuses one (a review). Kept, as run_squad.py keeps it, and said."""
    path = _write(tmp_path, [{"title": "t", "paragraphs": [{"context": "A fox.", "qas": [
        {"id": "q1", "question": "", "answers": [{"text": "fox", "answer_start": 2}]},
        {"id": "q2", "question": "\u200b ", "answers": [{"text": "fox", "answer_start": 2}]},
        {"id": "q3", "question": "Who?", "answers": [{"text": "fox", "answer_start": 2}]}]}]}])
    caplog.set_level(logging.WARNING)
    assert squad.read_json(path).ids == ["q1", "q2", "q3"]
    assert f"{path}: 2 question(s) with no text (ids 'q1', 'q2'), read as [CLS] [SEP] context" in caplog.text


def test_training_and_evaluation_of_different_versions_is_reported(tmp_path, caplog):
    answered = {"id": "q1", "question": "Who?", "answers": [{"text": "fox", "answer_start": 2}]}
    unanswerable = {"id": "q2", "question": "Why?", "answers": [], "is_impossible": True}
    v1 = squad.read_json(_write(tmp_path, [{"title": "t", "paragraphs": [{"context": "A fox.", "qas": [answered]}]}],
                                name="train.json"))
    v2 = squad.read_json(_write(tmp_path, [{"title": "t", "paragraphs": [{"context": "A fox.", "qas": [
        answered, unanswerable]}]}], name="dev.json", version="v2.0"))
    with caplog.at_level(logging.WARNING):
        squad.warn_if_versions_differ([("train", v1), ("eval", v1)])
        assert not caplog.records
        squad.warn_if_versions_differ([("train", v1), ("eval", v2)])
    assert "dev.json is SQuAD v2.0 but the training file" in caplog.text and "never learns" in caplog.text


def test_json_v2_impossible_questions_and_empty_context(bert_tokenizer, tmp_path):
    paragraphs = [{"context": CONTEXT, "qas": [_qa(0, "1940"), _qa(1, None, is_impossible=True)]},
                  {"context": "", "qas": [_qa(2, None, is_impossible=True)]}]
    path = _write(tmp_path, [{"title": "T", "paragraphs": paragraphs}], version="v2.0")
    split = squad.featurize(bert_tokenizer, squad.read_json(path), "train")
    assert split.examples.version == "v2.0" and split.examples.example_index.tolist() == [0, 1, 2]
    assert split.features["start_positions"].tolist()[1:] == [0, 0] and split.features["start_positions"][0] > 0
    assert split.lengths[2] == 2 + len("what is answer number 2?".split()) + 1 + 1  # [CLS] q [SEP] [SEP]
    # No "is_impossible" and no answer in a v2.0 file: unanswerable, as the official scorer reads it
    # (training refused the file, or with skip_bad_answers dropped every such question: a review).
    paragraphs = [{"context": CONTEXT, "qas": [_qa(0, "1940"), _qa(1, None)]}]
    examples = squad.read_json(_write(tmp_path, [{"title": "T", "paragraphs": paragraphs}], "bare.json", "v2.0"))
    assert examples.is_impossible.tolist() == [False, True]
    split = squad.featurize(bert_tokenizer, examples, "train")
    assert split.examples.example_index.tolist() == [0, 1] and split.features["start_positions"][1] == 0
    # A file with no answer and no "is_impossible" anywhere is unlabelled (a test file), not all
    # unanswerable: as an evaluation file it is still refused.
    unlabelled = squad.read_json(_write(tmp_path, [{"title": "T", "paragraphs": [
        {"context": CONTEXT, "qas": [_qa(0, None), _qa(1, None)]}]}], "test.json", "v2.0"))
    assert not unlabelled.is_impossible.any()
    assert not squad.featurize(bert_tokenizer, unlabelled, "test").has_labels
    with pytest.raises(ValueError, match="no answers to score against"):
        squad._check_scorable(unlabelled)


def test_a_test_file_is_predicted_by_the_training_files_version(tmp_path, bert_tokenizer):
    """An unlabelled test file says no version (no "version", answers or is_impossible): read as
    v1.1, a v2.0 model's test predictions never abstained and no null_odds.json was written (a
    review). It takes the training file's, as launch/predict.py takes the model's."""
    from configs import finetune as finetune_config

    train = _write(tmp_path, [{"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [
        _qa(0, "1940"), _qa(1, None, is_impossible=True)]}]}], "train.json", "v2.0")
    test = tmp_path / "test.json"
    test.write_text(json.dumps({"data": [{"title": "T", "paragraphs": [{"context": CONTEXT, "qas": [
        {"id": "t0", "question": "When did she stop teaching?"}]}]}]}))
    config = finetune_config.get_config("squad")
    config.data.update(train_file=train, eval_file="", test_file=str(test), max_seq_length=64, max_query_length=16)
    task = squad.load_task(config, bert_tokenizer)
    assert [split.examples.examples.version for split in task.test_splits] == ["v2.0"]
    assert task.info["squad_version"] == "v2.0"


# -- TFDS under mock data. --

@pytest.mark.parametrize("name", ["squad/v1.1", "squad/v2.0"])
def test_tfds_mock_data_counts_unfound_answers(bert_tokenizer, name, caplog):
    with tfds.testing.mock_data(num_examples=6):
        with caplog.at_level(logging.WARNING):
            train = squad.load_split(bert_tokenizer, name, "train", max_seq_length=64, max_query_length=16)
        validation = squad.load_split(bert_tokenizer, name, "validation", max_seq_length=64, max_query_length=16)
    examples = validation.examples.examples
    assert examples.version == name[-4:] and examples.source == f"tfds:{name}[validation]"
    # Random text: no possible training answer is found; impossible (v2.0) questions are kept.
    impossible = train.examples.examples.is_impossible
    assert set(train.examples.example_index.tolist()) == set(np.flatnonzero(impossible).tolist())
    assert (not impossible.any()) == (name == "squad/v1.1")  # (v2.0's mock data holds some)
    if not impossible.all():
        assert "answer_not_found" in caplog.text
    assert set(validation.examples.example_index.tolist()) == set(range(len(examples)))
    ids = [qa["id"] for article in examples.data for p in article["paragraphs"] for qa in p["qas"]]
    assert sorted(ids) == sorted(examples.ids)
    logits = np.random.default_rng(0).normal(size=(2,) + validation.features["input_ids"].shape)
    predictions, nbest, null_odds = squad.postprocess(validation, *logits)
    assert sorted(predictions) == sorted(examples.ids) and (null_odds is None) == (name == "squad/v1.1")

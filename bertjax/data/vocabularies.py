"""Training a vocabulary on text: WordPiece (BERT's vocab.txt), SentencePiece (unigram or BPE
model) and byte-level BPE shaped as ModernBERT's (a Hugging Face tokenizer.json). Each puts
[PAD], [UNK], [CLS], [SEP], [MASK] at ids 0..4 and writes files `tokenization.load_tokenizer`
reads with the same normalisation as training saw (`launch/train_tokenizer.py` is the
command line)."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import sys
import threading
import time
from typing import Any, Iterable, Iterator, TextIO

from absl import logging
import sentencepiece as spm
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from bertjax import tokenization
from bertjax.data import sources
from bertjax.runtime import console, fileio

# Lines longer than this SentencePiece skips in training (its default, 4,192, left out most of
# a corpus of paragraph lines).
SENTENCEPIECE_MAX_LINE_BYTES = 1 << 16
_MB = 1_000_000


def train_wordpiece(texts: Iterable[str], vocab_size: int, output_dir: str, do_lower_case: bool = True,
                    min_frequency: int = 2, limit_alphabet: int | None = 1000) -> str:
    """Trains a WordPiece vocabulary on `texts` (lines; for files, `file_lines(paths)`).

    Writes `<output_dir>/vocab.txt` with [PAD], [UNK], [CLS], [SEP], [MASK] at ids 0..4
    and returns its path. `limit_alphabet`: the most characters kept as tokens of their own
    (the most frequent; None: all). The normaliser and pre-tokenizer are the ones
    `tokenization.Tokenizer.from_vocab_file` uses, so training and use see the same words. Note: the
    `tokenizers` trainer breaks ties between equally frequent merges in hash order, so two
    runs can give slightly different vocabularies; keep the file (its hash is recorded in
    prepared metadata). The demo vocabulary is built from a lexicon for that reason.
    """
    check_vocab_size(vocab_size)
    backend = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]",
                                                    max_input_chars_per_word=tokenization.MAX_INPUT_CHARS_PER_WORD))
    backend.normalizer = tokenization.bert_normalizer(do_lower_case)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(tokenization.SPECIAL_TOKENS),
        continuing_subword_prefix="##", show_progress=False,
        **({} if limit_alphabet is None else {"limit_alphabet": limit_alphabet}))
    counts = collections.Counter()
    # (its own normaliser and pre-tokenizer: the backend's, called from the iterator it trains on, deadlock)
    with _signals_stop_reading() as stop:
        backend.train_from_iterator(_without_long_words(_lines(texts, stop), tokenization.bert_normalizer(
            do_lower_case), pre_tokenizers.BertPreTokenizer(), counts), trainer=trainer)
    if counts["long_words"]:
        logging.warning("WordPiece left out %d words longer than %d characters (BERT's tokenizer reads each as one "
                        "[UNK])", counts["long_words"], tokenization.MAX_INPUT_CHARS_PER_WORD)
    vocab = backend.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    if tokens[:len(tokenization.SPECIAL_TOKENS)] != list(tokenization.SPECIAL_TOKENS):
        raise AssertionError(f"tokenizers put the special tokens at {[vocab[t] for t in tokenization.SPECIAL_TOKENS]}")
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, tokenization.VOCABULARY_FILE["wordpiece"])
    fileio.write_bytes(path, "".join(t + "\n" for t in tokens).encode("utf-8"))
    return path


def train_sentencepiece(texts: Iterable[str], vocab_size: int, output_dir: str, do_lower_case: bool = False,
                        model_type: str = "unigram", character_coverage: float = 0.9995,
                        input_sentence_size: int = 10_000_000) -> str:
    """Trains a SentencePiece model on `texts` (lines; for files, `file_lines(paths)`).

    Writes `<output_dir>/spm.model` (+ `spm.vocab`) and returns the model path. Ids:
    [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4 (control symbols), no bos/eos.
    `do_lower_case` picks the normalisation stored in the model: NFKC + case folding
    ("nmt_nfkc_cf") or plain NFKC ("nmt_nfkc").
    """
    check_vocab_size(vocab_size)
    os.makedirs(output_dir, exist_ok=True)
    prefix = os.path.join(output_dir, "spm")
    counts = collections.Counter()  # SentencePiece skips long lines and samples big corpora, saying so only in its log

    def lines() -> Iterator[str]:
        for line in _lines(texts):
            if line.strip():
                counts["lines"] += 1
                counts["too_long"] += len(line.encode("utf-8")) > SENTENCEPIECE_MAX_LINE_BYTES
                yield line

    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=lines(), model_prefix=prefix, vocab_size=vocab_size, model_type=model_type,
            character_coverage=character_coverage, input_sentence_size=input_sentence_size,
            max_sentence_length=SENTENCEPIECE_MAX_LINE_BYTES, shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1, normalization_rule_name="nmt_nfkc_cf" if do_lower_case else "nmt_nfkc",
            pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
            control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
    except RuntimeError as e:  # e.g. vocab_size larger than the corpus allows
        if counts["lines"] and counts["too_long"] == counts["lines"]:
            raise ValueError(f"SentencePiece training failed: each of the {counts['lines']} lines is longer than "
                             f"{SENTENCEPIECE_MAX_LINE_BYTES} bytes, which it skips; split the text into "
                             "sentences") from None
        most = re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", str(e))
        if most:
            raise ValueError(f"vocab_size={vocab_size} is more than SentencePiece can make of this corpus: give at "
                             f"most {most.group(1)}, or more text") from None
        raise ValueError(f"SentencePiece training failed: {e}") from None
    if counts["too_long"]:
        logging.warning("SentencePiece left out %d of the %d lines, longer than %d bytes: split the text into "
                        "sentences", counts["too_long"], counts["lines"], SENTENCEPIECE_MAX_LINE_BYTES)
    if counts["lines"] > input_sentence_size:
        logging.warning("SentencePiece trained on a random %d of the %d lines (input_sentence_size)",
                        input_sentence_size, counts["lines"])
    path = prefix + ".model"
    _check_special_ids(path, tokenization.Tokenizer.from_sentencepiece(path))
    return path


def train_bpe(texts: Iterable[str], vocab_size: int, output_dir: str, min_frequency: int = 2) -> str:
    """Trains a byte-level BPE tokenizer on `texts` (lines; for files, `file_lines(paths)`),
    shaped as ModernBERT's (NFC, GPT-2's split, no prefix space; every byte in the alphabet, so
    no text is unknown). Writes `<output_dir>/tokenizer.json` (kind "huggingface") with [PAD], [UNK], [CLS],
    [SEP], [MASK] at ids 0..4, laid out for other libraries as bertjax's exports are
    (`tokenization.hf_tokenizer_json`: rows as bertjax lays them out, the mask taking in the
    space before it)."""
    check_vocab_size(vocab_size, "huggingface")
    backend = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  special_tokens=list(tokenization.SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with _signals_stop_reading() as stop:
        backend.train_from_iterator(_lines(texts, stop), trainer=trainer)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "tokenizer.json")
    backend.save(path)
    trained = tokenization.Tokenizer.from_tokenizer_json(path)
    _check_special_ids(path, trained)
    with open(path, "w", encoding="utf-8") as f:
        f.write(tokenization.hf_tokenizer_json(trained))
    return path


def sentences_as_prepared(documents: Iterable[list[str]], kind: str) -> Iterator[str]:
    """Each document's sentences as prepare encodes them with a tokenizer of `kind` trained
    here: after a document's first, a byte-level BPE's ("huggingface") with the space they have
    in running text (the trained tokenizer's word_prefix), so that it learns the words that
    begin them as the shards hold them ("ĠThe", not "The" after a lone "Ġ")."""
    prefix = " " if kind == "huggingface" else ""
    for document in documents:
        for k, sentence in enumerate(document):
            yield prefix + sentence if k else sentence


def training_sentences(data_config: Any, units: list[dict], drops: sources.DropCounter, kind: str,
                       stream: TextIO | None = None, read: threading.Event | None = None) -> Iterator[str]:
    """The sentences of `units` (`sources.list_units(data_config)`) as `sentences_as_prepared`
    gives them to a trainer of `kind`, with a progress line on `stream` (stdout) as the trainer
    takes them: MB of text with an ETA (units for TFDS and the demo); and a line when they end
    (if any), for the trainer's merges follow unseen, and `read` set (`still_training`)."""
    sizes = [sources.unit_bytes(unit) for unit in units]
    by_bytes = None not in sizes
    total = sum(sizes) if by_bytes else len(units)
    steps = -(-total // _MB) if by_bytes else total
    progress = console.Progress(steps, label="read", stream=stream, unit="MB" if by_bytes else "units",
                                line_seconds=console.LINE_SECONDS, timed_from_start=True)

    def step(taken: int) -> int:  # whole MB taken (the last counts whole), or units
        return steps if taken >= total else taken // _MB if by_bytes else taken

    # The text taken, a newline a sentence (a text file's bytes, near enough), wherever a unit's
    # reader stops (a document begun in a unit is read to its end); caught up at each unit's end
    # where the file holds more than its text (JSONL's keys).
    start, taken, done, count = time.perf_counter(), 0, 0, 0
    for index, unit in enumerate(units):
        for sentence in sentences_as_prepared(sources.read_unit(data_config, unit, drops), kind):
            count += 1
            if by_bytes:
                taken += len(sentence.encode()) + 1
                at = step(min(taken, total - 1))  # (the last MB counts when the units end)
                if at != progress.step:
                    progress.advance(at)
            yield sentence
        done += sizes[index] if by_bytes else 1
        taken = max(taken, done)
        if step(taken) != progress.step:
            progress.advance(step(taken))
    progress.close(keep=False)
    if not count:  # nothing to train on: the caller says so
        return
    size = f" ({_text_size(done)})" if by_bytes else ""
    took = console.format_duration(time.perf_counter() - start)
    print(f"read {count:,} sentence{'s' * (count != 1)}{size} in {took}; "
          "training the vocabulary", file=stream or sys.stdout, flush=True)
    if read is not None:
        read.set()


@contextlib.contextmanager
def still_training(read: threading.Event, stream: TextIO | None = None) -> Iterator[None]:
    """From when `read` is set (`training_sentences`: the corpus is read) until the block ends,
    a line on `stream` (stdout) every console.LINE_SECONDS with the time the trainer has worked
    since: its merges (SentencePiece's whole training) show no progress of their own, and a
    long silence reads as a hang."""
    done = threading.Event()

    def tick() -> None:
        read.wait()
        started = time.perf_counter()
        while not done.wait(console.LINE_SECONDS):
            print(f"training the vocabulary: {console.format_duration(time.perf_counter() - started)} so far",
                  file=stream or sys.stdout, flush=True)

    ticker = threading.Thread(target=tick, name="still-training", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        read.set()  # (a ticker still waiting for the reading ends too)
        ticker.join()


def _text_size(size: int) -> str:
    """A number of bytes as the progress line counts them: "2.4 MB", "36.5 kB" or "36 bytes"
    (a small corpus: not "0.0 MB")."""
    if size >= _MB // 10:
        return f"{size / _MB:,.1f} MB"
    return f"{size / 1000:,.1f} kB" if size >= 1000 else f"{size} byte{'s' * (size != 1)}"


def file_lines(paths: Iterable[str]) -> Iterator[str]:
    """The lines of the text files at `paths` (local or gs://), read lazily, for the trainers'
    `texts`, without a file's byte order mark (as the pre-training reader reads them: the BPE
    trainer would learn its bytes onto each file's first word); a missing file is a
    FileNotFoundError naming it (before any line is read). A line that is not UTF-8 is left
    out, as pre-training's reader leaves it out, and counted in a warning naming the file
    (decoded with replacement characters, the vocabulary would learn text training never sees)."""
    paths = list(paths)
    for path in paths:
        if not fileio.exists(path):
            raise FileNotFoundError(f"{path}: no such file")
    for path in paths:
        bad, first_bad = 0, None
        with fileio.open_file(path, "rb") as f:
            for number, line in enumerate(f):
                try:
                    text = line.decode("utf-8-sig" if number == 0 else "utf-8")
                except UnicodeDecodeError:
                    bad, first_bad = bad + 1, first_bad or number + 1
                    continue
                yield text.rstrip("\r\n")
        if bad:
            logging.warning("%s: %d line(s) not UTF-8 left out (the first: line %d)", path, bad, first_bad)


# A run of non-space characters this long may hold a word past MAX_INPUT_CHARS_PER_WORD.
_LONG_RUN = re.compile(r"\S{%d,}" % (tokenization.MAX_INPUT_CHARS_PER_WORD + 1))


def _without_long_words(lines: Iterable[str], normalizer: normalizers.Normalizer,
                        pre_tokenizer: pre_tokenizers.PreTokenizer, counts: collections.Counter) -> Iterator[str]:
    """`lines`, each word longer than MAX_INPUT_CHARS_PER_WORD (as `normalizer` and
    `pre_tokenizer` make words) left out, counted in counts["long_words"]. Such a word encodes
    as one [UNK], yet the trainer merged its repeats, in time quadratic in its length, into
    vocabulary entries that can never be emitted. Lines without a long run pass as they are; the others pass
    normalised, as the trainer would read them (normalising again changes nothing)."""
    for line in lines:
        if _LONG_RUN.search(line):
            words = [word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line))]
            kept = [word for word in words if len(word) <= tokenization.MAX_INPUT_CHARS_PER_WORD]
            counts["long_words"] += len(words) - len(kept)
            line = " ".join(kept)
        yield line


@contextlib.contextmanager
def _signals_stop_reading() -> Iterator[threading.Event]:
    """An Event set when a signal Python handles (Ctrl-C's SIGINT; a launcher's SIGTERM) arrives
    while a `tokenizers` trainer reads. It calls the lines' iterator from its own threads, the
    main thread waiting inside it, where Python runs signal handlers: a Ctrl-C was acted on only
    once the whole corpus was read and trained on. A thread watches the signals' wakeup fd
    instead (none where this is no main thread: the caller's own handling stands)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end)

    def watch() -> None:
        if os.read(read_end, 1):  # a signal's number; b"" once the write end is closed
            stop.set()

    watcher = threading.Thread(target=watch, name="signals-stop-reading", daemon=True)
    watcher.start()
    try:
        yield stop
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write_end)
        watcher.join()
        os.close(read_end)


def _lines(texts: Iterable[str], stop: threading.Event | None = None) -> Iterator[str]:
    """`texts`, lines of text, until `stop` is set (then KeyboardInterrupt, which the trainer
    passes on); a str or a list naming files is refused: it would train on the characters or
    the file names."""
    if isinstance(texts, str):
        raise TypeError("texts must be an iterable of lines, got one str; for files use file_lines(paths)")
    named = isinstance(texts, (list, tuple)) and next(
        (t for t in texts[:100] if isinstance(t, str) and os.path.isfile(t)), None)
    if named:
        raise ValueError(f"texts names files (e.g. {named}): it is lines of text; for files use "
                         "texts=file_lines(paths)")
    for line in texts:
        if stop is not None and stop.is_set():
            raise KeyboardInterrupt
        yield line


def _check_special_ids(path: str, tokenizer: tokenization.Tokenizer) -> None:
    """The trained tokenizer at `path` has [PAD], [UNK], [CLS], [SEP], [MASK] at ids 0..4."""
    ids = [tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id]
    if ids != [0, 1, 2, 3, 4]:
        raise AssertionError(f"{path}: special tokens landed at {ids}, expected 0..4")


def check_vocab_size(vocab_size: int, kind: str = "wordpiece") -> None:
    """ValueError unless `vocab_size` can hold a vocabulary of `kind` (a tokenization kind):
    the special tokens and one more; a byte-level BPE ("huggingface") every byte too."""
    if not isinstance(vocab_size, int) or vocab_size <= len(tokenization.SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be an int > {len(tokenization.SPECIAL_TOKENS)}, got {vocab_size!r}")
    smallest = len(tokenization.SPECIAL_TOKENS) + len(pre_tokenizers.ByteLevel.alphabet())
    if kind == "huggingface" and vocab_size < smallest:  # every byte is a token: fewer would come out larger
        raise ValueError(f"vocab_size must be at least {smallest} for byte-level BPE (the special tokens and "
                         f"one token per byte), got {vocab_size}")


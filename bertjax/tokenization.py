"""One tokenizer interface over WordPiece (BERT `vocab.txt`, or the vocabulary inside a Hugging
Face `tokenizer.json`), SentencePiece models, and any Hugging Face fast tokenizer
(`tokenizer.json`: byte-level BPE as ModernBERT's, WordPiece, Unigram; kind "huggingface").

`encode` never adds special tokens: the pre-training pipeline lays out
`[CLS] A [SEP] B [SEP]` itself. Text is always text: a literal "[MASK]" in the input is
tokenized like any other characters, never mapped to the special id.

WordPiece runs through the `tokenizers` library, configured like the original BERT:
clean text (drop NUL, U+FFFD and control characters, whitespace -> space), split CJK
characters, lower-case and strip accents when `do_lower_case`, split punctuation, then
greedy longest-match-first WordPiece with '##' continuations; a word longer than 100
characters (the Hugging Face limit; the original used 200) or one that cannot be matched
becomes a single [UNK].

A "huggingface" tokenizer runs as its tokenizer.json says (normaliser, pre-tokenizer, model)
except for its post-processor: bertjax lays out the special tokens itself, and literal special
tokens in the text are text there too. Its special tokens are found by name: [CLS] / <s> /
<cls>, [SEP] / </s> / <sep>, [PAD] / <pad> / <|padding|>, [UNK] / <unk>, [MASK] / <mask>.

Special token ids:
  * a released BERT vocab.txt: wherever the file puts them ([PAD]=0, [UNK]=100,
    [CLS]=101, [SEP]=102, [MASK]=103 in Google's English vocabularies);
  * vocabularies bertjax trains (bertjax.data.vocabularies: WordPiece, SentencePiece,
    byte-level BPE): [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.
    In SentencePiece models [PAD] and [UNK] are SentencePiece's pad and unk pieces and
    [CLS], [SEP], [MASK] are control symbols (never produced from text); there is no
    bos/eos piece.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import logging
import re
import unicodedata
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers

from bertjax import ragged
from bertjax.runtime import fileio

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4 in trained vocabularies
KINDS = ("wordpiece", "sentencepiece", "huggingface")
# Other names a Hugging Face tokenizer.json gives the special tokens (SPECIAL_TOKENS order).
SPECIAL_ALIASES = (("[PAD]", "<pad>", "<|padding|>"), ("[UNK]", "<unk>"), ("[CLS]", "<s>", "<cls>"),
                   ("[SEP]", "</s>", "<sep>"), ("[MASK]", "<mask>"))
SAVED_TOKENIZER = "tokenizer.json"  # written by save_tokenizer beside the vocabulary file
MAX_INPUT_CHARS_PER_WORD = 100
_MAX_MEMOISED_CHUNKS = 500_000


class Tokenizer:
    """Text <-> token ids, the same for WordPiece and SentencePiece.

    Attributes: `kind` ("wordpiece" | "sentencepiece" | "huggingface"), `path` (the
    vocabulary or model file), `do_lower_case`, `vocab_size`, `pad_id`, `unk_id`, `cls_id`,
    `sep_id`, `mask_id`, `mask_strips` ((lstrip, rstrip) of the mask token), `vocab_hash`
    (sha256 hex of everything that decides the ids).
    """

    def __init__(self, kind: str, path: str, do_lower_case: bool, tokens: Sequence[str],
                 wordpiece: tokenizers.Tokenizer | None = None,
                 sentencepiece: spm.SentencePieceProcessor | None = None,
                 model_bytes: bytes = b"", fast: tokenizers.Tokenizer | None = None,
                 special_tokens: Sequence[str] = SPECIAL_TOKENS):
        self.kind = kind
        self.path = path
        self.do_lower_case = do_lower_case
        self._tokens = list(tokens)
        self._wordpiece = wordpiece
        self._sentencepiece = sentencepiece
        self._fast = fast  # kind "huggingface"
        # Whether normalisation drops characters inside words (accents, zero-width and control
        # characters): spans then cover them (`_over_dropped_characters`).
        self._drops_characters = wordpiece is not None or (fast is not None and _drops_characters(fast))
        self._chunk_memo: _ChunkMemo | None = None  # WordPiece: set by from_vocab_file
        self._piece_roots: tuple[np.ndarray, np.ndarray] | None = None  # SentencePiece: see _tie_order
        self.orders_ties = False  # a unigram SentencePiece model's tied segmentations: see _tie_order
        self.vocab_size = len(self._tokens)
        index = {token: i for i, token in enumerate(self._tokens)}
        missing = [t for t in special_tokens if t not in index]
        if missing:
            raise ValueError(f"{path}: vocabulary lacks the special tokens {missing}")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (index[t] for t in special_tokens)
        # Whether the mask token takes in the whitespace before / after it (a tokenizer.json's
        # added-token lstrip/rstrip: ModernBERT's and RoBERTa's mask lstrip); fill-mask cuts
        # the text there as the model's own tokenizer would.
        mask = fast.get_added_tokens_decoder().get(self.mask_id) if fast is not None else None
        self.mask_strips = (bool(mask and mask.lstrip), bool(mask and mask.rstrip))
        digest = hashlib.sha256(f"{kind}\ndo_lower_case={do_lower_case}\n".encode())
        digest.update(model_bytes if kind != "wordpiece" else "\n".join(self._tokens).encode())
        self.vocab_hash = digest.hexdigest()
        if kind != "wordpiece":  # recorded (metadata, manifests) as it reads text; the hash above as before
            self.do_lower_case = self.lower_cases()

    def lower_cases(self) -> bool:
        """Whether capitals reach the vocabulary lower-cased: WordPiece's do_lower_case, else what
        the model's own normalisation does (a SentencePiece model trained with case folding, a
        tokenizer.json with a Lowercase normaliser), which do_lower_case does not change."""
        if self._sentencepiece is not None:
            normalize = self._sentencepiece.Normalize
        elif self._fast is not None:
            normalize = self._fast.normalizer.normalize_str if self._fast.normalizer else str
        else:
            return self.do_lower_case
        return normalize("Ab") == normalize("ab")

    # -- Construction. --

    @classmethod
    def from_vocab_file(cls, path: str, do_lower_case: bool | None = True) -> "Tokenizer":
        """A WordPiece tokenizer from a BERT `vocab.txt` (one token per line, id = line number;
        local or gs://) or a Hugging Face `tokenizer.json` (see `read_vocab`; its normaliser
        must be one this tokenizer reproduces: `wordpiece_casing` checks it). do_lower_case
        None: a tokenizer.json's casing, else what a vocab.txt's tokens show (cased when BERT's
        lower-casing would change over 1% of them: capitals, accents, marks, Hangul; else
        lower-cased); one that contradicts the file's is used as asked, with a warning."""
        differences = bert_wordpiece_differences(path)
        if differences:
            raise ValueError(f"{path}: its settings ({', '.join(differences)}) differ from BERT's WordPiece, which "
                             "this reads it as (the ids would differ from the file's); give it as tokenizer kind "
                             "'huggingface' "
                             "(config.data.tokenizer=huggingface), which runs it as written")
        casing = wordpiece_casing(path)
        tokens = read_vocab(path)
        if do_lower_case is None:
            do_lower_case = casing if casing is not None else _vocab_looks_uncased(path, tuple(tokens))
        elif casing is not None and casing != do_lower_case:
            logging.getLogger(__name__).warning(
                "%s %s (its BertNormalizer's lowercase=%s); do_lower_case=%s %s it as asked (config.data."
                "do_lower_case, --do_lower_case)", path, "lower-cases" if casing else "keeps case", casing,
                do_lower_case, "lower-cases" if do_lower_case else "keeps its case")
        if casing is None:  # a vocab.txt does not say: its tokens do
            _warn_if_casing_contradicts(path, tuple(tokens), do_lower_case)
        vocab = {token: token_id for token_id, token in enumerate(tokens)}  # a repeated token: its last id
        backend = tokenizers.Tokenizer(models.WordPiece(
            vocab, unk_token="[UNK]", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
        backend.normalizer = bert_normalizer(do_lower_case)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece(prefix="##")
        tokenizer = cls("wordpiece", path, do_lower_case, tokens, wordpiece=backend)
        unnormalized = tokenizers.Tokenizer.from_str(backend.to_str())
        unnormalized.normalizer = None
        tokenizer._chunk_memo = _ChunkMemo(unnormalized)
        return tokenizer

    @classmethod
    def from_sentencepiece(cls, path: str) -> "Tokenizer":
        """A SentencePiece tokenizer from a `.model` file, local or gs:// (its normalisation
        decides casing)."""
        model_bytes = _read_bytes(path)
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_bytes)
        except RuntimeError as e:
            hint = _kind_hint(model_bytes, "sentencepiece")
            raise ValueError(f"{path}: not a SentencePiece model ({e}){hint}") from None
        tokens = [processor.IdToPiece(i) for i in range(processor.GetPieceSize())]
        tokenizer = cls("sentencepiece", path, False, tokens, sentencepiece=processor, model_bytes=model_bytes)
        if tokenizer.pad_id != processor.pad_id() or tokenizer.unk_id != processor.unk_id():
            raise ValueError(f"{path}: [PAD]/[UNK] must be the model's pad and unk pieces")
        from sentencepiece import sentencepiece_model_pb2

        model = sentencepiece_model_pb2.ModelProto.FromString(model_bytes)
        tokenizer.orders_ties = model.trainer_spec.model_type == sentencepiece_model_pb2.TrainerSpec.UNIGRAM
        return tokenizer

    @classmethod
    def from_tokenizer_json(cls, path: str) -> "Tokenizer":
        """Any Hugging Face fast tokenizer from its `tokenizer.json` (local or gs://), kind
        "huggingface"; its special tokens by name (SPECIAL_ALIASES)."""
        model_bytes = _read_bytes(path)
        try:
            fast = tokenizers.Tokenizer.from_str(model_bytes.decode("utf-8"))
        except Exception as e:  # tokenizers raises its own Exception types
            raise ValueError(f"{path}: not a Hugging Face tokenizer.json ({e}){_kind_hint(model_bytes, 'huggingface')}"
                             ) from None
        fast.encode_special_tokens = True  # "[MASK]" written in the text is text
        # Hub files often keep the padding and truncation they were saved with (e.g. fixed 128):
        # BERT's inputs are laid out, cut and padded by the caller, never by the tokenizer.
        fast.no_padding()
        fast.no_truncation()
        tokens = [fast.id_to_token(i) or f"<no token {i}>" for i in range(fast.get_vocab_size(with_added_tokens=True))]
        present = set(tokens)
        special = []
        for names in SPECIAL_ALIASES:
            found = [name for name in names if name in present]
            if not found:
                raise ValueError(f"{path}: no {names[0]} token (looked for {', '.join(names)})")
            special.append(found[0])
        return cls("huggingface", path, False, tokens, model_bytes=model_bytes, fast=fast, special_tokens=special)

    # -- Encoding. --

    @functools.cached_property
    def word_prefix(self) -> str:
        """What a word that follows another in a text is tokenized with, when words are
        tokenized one by one (tagging): " " where the tokens carry the space before a word
        (byte-level BPE: 'Ġword', as ModernBERT's and RoBERTa's), else "" (WordPiece,
        SentencePiece: a word's tokens are the same wherever it stands)."""
        whole, first, alone, spaced = self.encode_batch(["New York", "New", "York", " York"])
        return " " if whole != first + alone and whole == first + spaced else ""

    def encode(self, text: str) -> list[int]:
        """One text -> token ids, without special tokens ("" -> [])."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Many texts -> token ids each, without special tokens (faster than a loop)."""
        ids, lengths = self.encode_flat(texts)
        return [row.tolist() for row in unflatten(ids, lengths)]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Many texts -> (<int32>[T] all their token ids concatenated, <int64>[N] ids per text);
        ValueError naming a text that is not valid Unicode (see `_encoding`).

        The fast path for bulk tokenization (prepare). WordPiece: texts are normalised as
        BERT does (ASCII ones in bulk by `_normalize_ascii`, others one by one in
        `tokenizers`); BERT never tokenizes across a space, so a normalised text's ids are
        its space-separated chunks' ids, concatenated, and those are memoised
        (`_ChunkMemo`). Same ids as encoding each text whole, several times faster, as
        natural text repeats its chunks.
        """
        with _encoding(texts):
            return self._encode_flat(texts)

    def _encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        _check_many(texts)
        if self._fast is not None:
            return flatten([e.ids for e in self._fast.encode_batch(list(texts), add_special_tokens=False)])
        if self._wordpiece is None:
            ids, lengths = flatten(self._sentencepiece.EncodeAsIds(list(texts)))
            return ids[self._tie_order(ids, lengths)[0]], lengths
        if "".join(texts).isascii():  # the usual case, checked in one C call
            return self._chunk_memo.encode(self._normalize_ascii(texts), len(texts))
        is_ascii = np.fromiter((t.isascii() for t in texts), bool, len(texts))
        lengths, pieces, piece_starts = np.zeros(len(texts), np.int64), [], np.zeros(len(texts), np.int64)
        for ascii_group in (True, False):
            index = np.flatnonzero(is_ascii == ascii_group)
            subset = [texts[i] for i in index]
            if not subset:
                continue
            normalized = (self._normalize_ascii(subset) if ascii_group else
                          _ChunkMemo.JOINER.join(map(self._wordpiece.normalizer.normalize_str, subset)))
            ids, lengths[index] = self._chunk_memo.encode(normalized, len(subset))
            piece_starts[index] = sum(map(len, pieces)) + ragged.row_starts(lengths[index])
            pieces.append(ids)
        return ragged.gather_ranges(np.concatenate(pieces), piece_starts, lengths), lengths

    def encode_batch_continuing(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode_flat_continuing`'s ids, one list per text."""
        return [row.tolist() for row in unflatten(*self.encode_flat_continuing(texts))]

    def encode_flat_continuing(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """As `encode_flat`, for texts that continue a text cut before them (after a [MASK],
        say): the ids such a text has inside the running text. SentencePiece and tokenizer.json
        files that put a word start before every text ("▁": a dummy prefix, a Metaspace, a
        Prepend normaliser; a ByteLevel prefix space) would give "[MASK]." and "[MASK]s" one the
        running text does not have: they encode without it (a SentencePiece text that starts
        with whitespace as it is, as its leading whitespace is dropped). WordPiece encodes as
        `encode_flat` (it starts a word after a mask, as BERT's tokenizer does)."""
        continuing = self._continuing_encoder
        continues = [continuing is not None and bool(text) and (self._sentencepiece is None or not text[0].isspace())
                     for text in texts]
        if not any(continues):
            return self.encode_flat(texts)
        with _encoding(texts):
            continued = iter(unflatten(*continuing([text for text, yes in zip(texts, continues) if yes])))
        as_they_are = iter(unflatten(*self.encode_flat([text for text, yes in zip(texts, continues) if not yes])))
        return flatten([next(continued if yes else as_they_are) for yes in continues])

    @functools.cached_property
    def _continuing_encoder(self) -> Callable[[list[str]], tuple[np.ndarray, np.ndarray]] | None:
        """texts -> `encode_flat`'s arrays without a word start before each text; None when the
        tokenizer puts none there, or when the copy without it does not give the words after
        the first their running-text tokens (a Metaspace after a whitespace split marks every
        word: `encode_flat` is then the better guess)."""
        if self._sentencepiece is not None:
            from sentencepiece import sentencepiece_model_pb2

            model = sentencepiece_model_pb2.ModelProto.FromString(self._sentencepiece.serialized_model_proto())
            if not model.normalizer_spec.add_dummy_prefix:
                return None
            model.normalizer_spec.add_dummy_prefix = False
            processor = spm.SentencePieceProcessor()
            processor.LoadFromSerializedProto(model.SerializeToString())

            def encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
                ids, lengths = flatten(processor.EncodeAsIds(texts))
                return ids[self._tie_order(ids, lengths)[0]], lengths
            return encode
        if self._fast is None:
            return None
        spec = json.loads(self._fast.to_str())
        if not _without_word_start(spec):
            return None
        fast = tokenizers.Tokenizer.from_str(json.dumps(spec))
        fast.encode_special_tokens = True

        def encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
            return flatten([e.ids for e in fast.encode_batch(texts, add_special_tokens=False)])

        head = len(self.encode("x"))
        for tail in (" a", " the b", "  c"):
            running = self.encode("x" + tail)
            if running[:head] == self.encode("x") and encode([tail])[0].tolist() != running[head:]:
                return None
        return encode

    @functools.cached_property
    def trailing_space_is_token(self) -> bool:
        """Whether the tokens carry the space before their word ('Ġcat', '▁cat': byte-level BPE,
        Metaspace), so a text cut before a word ends with a space the running text gives no
        token of its own: the space before a [MASK] belongs to the masked word."""
        return self.encode("a a") != self.encode("a ") + self.encode("a")

    def _normalize_ascii(self, texts: Sequence[str]) -> str:
        """ASCII texts -> BERT-normalised and joined by _ChunkMemo.JOINER, in bulk: tab,
        newline and carriage return become spaces, other control characters go, and
        lower-casing is str.lower() (ASCII has no accents or CJK characters)."""
        joined = _ChunkMemo.JOINER.join(texts)
        if joined.count("\x00") != len(texts) - 1:  # some text holds NUL itself: BERT drops it
            joined = _ChunkMemo.JOINER.join(t.replace("\x00", "") for t in texts)
        joined = joined.encode("ascii").translate(_ASCII_TO_SPACE, _ASCII_CONTROLS).decode("ascii")
        return joined.lower() if self.do_lower_case else joined

    def encode_with_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """One text -> (ids <int32>[T], offsets <int64>[T, 2]); see `encode_flat_with_offsets`."""
        ids, offsets, _ = self.encode_flat_with_offsets([text])
        return ids, offsets

    def encode_flat_with_offsets(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Many texts -> (ids <int32>[T], offsets <int64>[T, 2], lengths <int64>[N]).

        ids and lengths are `encode_flat(texts)`'s; offsets[t] = [start, end) is token t's
        character span in its own ORIGINAL text (Python string indices), so
        `text[start:end]` is what the token was made from:
          * WordPiece: the `tokenizers` backend maps its offsets back through the
            normaliser: "Café" -> "cafe" spans the 4 original characters, "déjà" ->
            "de" + "##ja" spans "dé" and "jà", a CJK character is its own span; spaces
            lie in no span, and characters normalisation drops inside a word (a combining
            accent of decomposed text when uncased, a control character) belong to the
            token before them, so an answer's text keeps "José"'s accent.
          * SentencePiece: the pieces' begin/end in the encoding proto are UTF-8 byte
            offsets; they are converted to characters. A piece with the '▁' word marker
            also covers the whitespace it stands for; that leading whitespace is left out
            here, so no span starts with whitespace (as with WordPiece), and a piece that
            stands for whitespace only (or for nothing, like the '▁' SentencePiece puts
            before a first word) gets an empty span, start == end.
        Every kind: control and invisible formatting characters (a zero-width space, a
        direction mark) that end a word are left out of the span before them, which keeps
        other characters: the word's text is what a reader sees, and an answer 'hello\u200b'
        would score 0 against 'hello'.
        """
        texts = texts if isinstance(texts, str) else list(texts)  # (read twice: a generator once)
        with _encoding(texts):
            ids, offsets, lengths = self._encode_flat_with_offsets(texts)
        _invisible_word_ends_out(texts, offsets, lengths)
        return ids, offsets, lengths

    def _encode_flat_with_offsets(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        _check_many(texts)
        texts = list(texts)
        if self._wordpiece is not None or self._fast is not None:
            encodings = (self._wordpiece or self._fast).encode_batch(texts, add_special_tokens=False)
            ids, lengths = flatten([e.ids for e in encodings])
            offsets = np.array([span for e in encodings for span in e.offsets], np.int64).reshape(-1, 2)
            if self._fast is not None:  # a byte-level BPE piece spans the space before its word: left out
                for text, row in zip(texts, np.split(offsets, np.cumsum(lengths)[:-1])):
                    for span in row:
                        while span[0] < span[1] and text[span[0]].isspace():
                            span[0] += 1
            if self._drops_characters:  # (a form feed is a word break to byte-level BPE, dropped by BERT's)
                _over_dropped_characters(texts, offsets, lengths, _WORD_BREAK if self._fast is None else _ANY_SPACE)
            return ids, offsets, lengths
        from sentencepiece import sentencepiece_pb2
        rows, spans = [], []
        for text, serialized in zip(texts, self._sentencepiece.Encode(texts, out_type="serialized_proto")):
            proto = sentencepiece_pb2.SentencePieceText.FromString(serialized)
            rows.append([piece.id for piece in proto.pieces])
            spans.append(_sentencepiece_char_spans(text, proto))
        ids, lengths = flatten(rows)
        offsets = np.concatenate(spans) if spans else np.zeros((0, 2), np.int64)
        order, run = self._tie_order(ids, lengths)
        moved = np.isin(run, run[order != np.arange(len(order))])
        if moved.any():  # the reordered pieces of a run tile the run's span in their new order
            widths = (offsets[:, 1] - offsets[:, 0])[order]
            first = np.searchsorted(run, run)  # each position's run's first position
            before = np.cumsum(widths) - widths
            starts = offsets[first, 0] + before - before[first]
            offsets[moved] = np.stack([starts, starts + widths], 1)[moved]
        return ids[order], offsets, lengths

    def _tie_order(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """SentencePiece's ids in canonical order: a permutation of `ids` and each position's run.

        Unigram segmentations of a run of one repeated word tie (u^a u^b against u^b u^a, the
        same score), and which one wins is up to floating-point rounding in the Viterbi search,
        which differs between sentencepiece builds (TF Text's in the SavedModel, the Python
        library here). Each maximal run of pieces that are powers of one word is put in
        ascending order of power, so every build gives the same ids (export.py does the same).
        A BPE model's segmentation is deterministic, with no tie: its order is kept.
        """
        if not self.orders_ties:
            return np.arange(len(ids)), np.arange(len(ids))
        if self._piece_roots is None:
            self._piece_roots = tuple(map(np.asarray, piece_roots(self._tokens)))
        roots, powers = self._piece_roots
        rows = np.repeat(np.arange(len(lengths)), lengths)
        root = roots[ids]
        run = np.cumsum(np.concatenate([[True], (root[1:] != root[:-1]) | (rows[1:] != rows[:-1])])[:len(ids)])
        return np.lexsort((powers[ids], run)), run

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids -> text. WordPiece keeps special tokens visible ("[MASK]")."""
        ids = [int(i) for i in ids]
        if self._wordpiece is not None or self._fast is not None:
            return (self._wordpiece or self._fast).decode(ids, skip_special_tokens=False)
        return self._sentencepiece.DecodeIds(ids)

    def id_to_token(self, token_id: int) -> str:
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} outside the vocabulary [0, {self.vocab_size})")
        return self._tokens[token_id]

    def token_text(self, token_id: int) -> str:
        """A token as a reader writes it: decoded alone, without the space byte-level BPE and
        SentencePiece put on a word's first token ('Ġcat', '▁cat' -> 'cat'), a token of
        whitespace alone as that whitespace ('Ġ', '▁' -> ' ', 'Ċ' -> '\\n'); WordPiece's vocabulary
        entry as it is ('##ing' says it continues a word), and the special tokens by name."""
        token = self.id_to_token(token_id)
        special = token_id in (self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id)
        if self._wordpiece is not None or special:  # (SentencePiece decodes [UNK] as "⁇")
            return token
        decoded = self.decode([token_id])
        if not decoded and token and set(token) <= {"\u2581"}:  # SentencePiece's lone '▁' decodes to ""
            return " " * len(token)
        return decoded.strip() or decoded or token

    def continuation_mask(self) -> np.ndarray:
        """<bool>[vocab_size]: True where a token continues the previous token's word.

        WordPiece: '##' pieces. SentencePiece: pieces without the '▁' word-start marker,
        excluding special, control, unknown and unused pieces, and pieces that begin with a
        character BERT's basic split puts apart (CJK ideographs, punctuation: text without
        spaces would otherwise be one word a sentence); a byte piece as `_bytes_continue`. Whole-word masking masks a word's first token
        together with the continuations that follow it.
        """
        if self._wordpiece is not None:
            return np.array([t.startswith("##") for t in self._tokens], dtype=bool)
        if self._fast is not None:
            return self._fast_continuations()
        sp = self._sentencepiece

        def continues(i: int, piece: str) -> bool:
            if sp.IsByte(i):  # "<0xNN>"
                return _bytes_continue(bytes([int(piece[3:5], 16)]))
            return not (piece.startswith("\u2581") or sp.IsControl(i) or sp.IsUnknown(i) or sp.IsUnused(i)
                        or piece in SPECIAL_TOKENS or _starts_word(piece[0]))

        return np.array([continues(i, piece) for i, piece in enumerate(self._tokens)], dtype=bool)


    def _fast_continuations(self) -> np.ndarray:
        """continuation_mask of a tokenizer.json: WordPiece pieces with its continuing prefix;
        otherwise pieces without the word-start marker its pre-tokenizer writes (byte-level
        "Ġ", Metaspace "▁") that do not begin with a character BERT's basic split puts apart;
        a byte-level piece, or a byte-fallback "<0xNN>", by its bytes (`_bytes_continue`);
        never special or added tokens."""
        spec = json.loads(self._fast.to_str())
        model = spec.get("model") or {}
        added = {token["content"] for token in spec.get("added_tokens") or []}
        if model.get("type") == "WordPiece":
            prefix = model.get("continuing_subword_prefix") or "##"
            continues = lambda token: token.startswith(prefix)
        elif "ByteLevel" in json.dumps(spec.get("pre_tokenizer")):
            continues = lambda token: not token.startswith("\u0120") and _bytes_continue(
                bytes(_BYTE_OF_CHARACTER[c] for c in token if c in _BYTE_OF_CHARACTER))
        else:
            def continues(token: str) -> bool:
                byte = _BYTE_PIECE.fullmatch(token) if model.get("byte_fallback") else None
                if byte:
                    return _bytes_continue(bytes([int(byte.group(1), 16)]))
                return not (token.startswith("\u2581") or _starts_word(token[:1] or " "))
        return np.array([token not in added and continues(token) for token in self._tokens], dtype=bool)


# The file a saved or trained vocabulary of each kind is written to (a Hugging Face tokenizer.json
# under another name: bertjax's own tokenizer.json describes the saved tokenizer).
VOCABULARY_FILE = {"wordpiece": "vocab.txt", "sentencepiece": "spm.model", "huggingface": "hf_tokenizer.json"}


def save_tokenizer(tokenizer: Tokenizer, directory: str) -> None:
    """Copies the vocabulary (or SentencePiece model) into `directory` with a tokenizer.json
    describing it, so a checkpoint's run can hand its tokenizer on (`saved_tokenizer_spec`)."""
    name = VOCABULARY_FILE[tokenizer.kind]
    target = fileio.join(directory, name)
    spec = {"kind": tokenizer.kind, "file": name, "do_lower_case": tokenizer.do_lower_case,
            "vocab_hash": tokenizer.vocab_hash, "vocab_size": tokenizer.vocab_size}
    if fileio.exists(fileio.join(directory, SAVED_TOKENIZER)) and \
            fileio.read_json(fileio.join(directory, SAVED_TOKENIZER)) == spec:
        return
    fileio.makedirs(directory)
    if tokenizer.kind == "wordpiece":
        write_vocab(read_vocab(tokenizer.path), target)
    elif not fileio.same_file(tokenizer.path, target):
        fileio.copy(tokenizer.path, target)
    fileio.write_json(fileio.join(directory, SAVED_TOKENIZER), spec)


def hf_tokenizer_json(tokenizer: Tokenizer) -> str:
    """A kind "huggingface" tokenizer's tokenizer.json as bertjax reads it, for the libraries
    that read its every part (the exports). Its post-processor lays rows out as bertjax does,
    [CLS] a [SEP] and b [SEP] in segment 1, with this tokenizer's own special tokens, whatever
    the file's said (bertjax lays rows out itself and never reads it). Where tokens carry the
    space before their word (byte-level BPE), its mask token takes in the space before it, as
    bertjax's fill-mask reads "the [MASK]": pre-training masks whole 'Ġword' tokens, so a lone
    'Ġ' before a mask is no text the model saw."""
    from tokenizers import processors

    fast = tokenizers.Tokenizer.from_str(tokenizer._fast.to_str())
    cls, sep = tokenizer.id_to_token(tokenizer.cls_id), tokenizer.id_to_token(tokenizer.sep_id)
    fast.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.cls_id), (sep, tokenizer.sep_id)])
    settings = json.loads(fast.to_str())
    if tokenizer.trailing_space_is_token:
        for added in settings.get("added_tokens") or []:
            if added.get("id") == tokenizer.mask_id:
                added["lstrip"] = True
    return json.dumps(settings, ensure_ascii=False, indent=2)


def saved_tokenizer_spec(directory: str) -> dict:
    """{"kind", "path", "do_lower_case", "vocab_hash"} of a tokenizer saved by `save_tokenizer`."""
    spec = fileio.read_json(fileio.join(directory, SAVED_TOKENIZER))
    return {"kind": spec["kind"], "path": fileio.join(directory, spec["file"]), "do_lower_case": spec["do_lower_case"],
            "vocab_hash": spec["vocab_hash"]}


def check_casing_setting(tokenizer: Tokenizer, do_lower_case: bool | None,
                         setting: str = "config.data.do_lower_case") -> None:
    """ValueError when `setting` (do_lower_case) is set against a tokenizer that normalises by
    itself (a SentencePiece model, a tokenizer.json read as kind huggingface): the setting would
    be ignored, and the text read otherwise than the user asked."""
    if do_lower_case is None or tokenizer.kind == "wordpiece" or tokenizer.lower_cases() == do_lower_case:
        return
    retrain = (f"; launch/train_tokenizer.py --{'' if do_lower_case else 'no'}do_lower_case trains one that "
               f"{'lower-cases' if do_lower_case else 'keeps case'}") if tokenizer.kind == "sentencepiece" else ""
    raise ValueError(f"{setting}={do_lower_case}, but {tokenizer.path} "
                     f"{'lower-cases' if tokenizer.lower_cases() else 'keeps case'} by its own normalisation, which "
                     f"the setting does not change (it applies to a WordPiece vocab.txt): leave it unset{retrain}")


def _kind_hint(content: bytes, given: str) -> str:
    """What a tokenizer file that does not read as the kind `given` looks like, and the kind to
    set: a JSON object (a tokenizer.json), other text (a WordPiece vocab.txt, a token a line),
    or neither (binary: a SentencePiece model); "" where it looks like the kind given."""
    try:
        text = content.decode("utf-8").lstrip("\ufeff \t\r\n")
    except UnicodeDecodeError:
        looks = "sentencepiece", "a SentencePiece model"
    else:
        looks = ("huggingface", "a Hugging Face tokenizer.json") if text.startswith("{") else (
            "wordpiece", "a WordPiece vocab.txt (a token a line)")
    return "" if looks[0] == given else f"; {looks[1]}? set config.data.tokenizer={looks[0]}"


def load_tokenizer(kind: str, path: str, do_lower_case: bool | None = True) -> Tokenizer:
    """"wordpiece" + vocab.txt, "sentencepiece" + .model or "huggingface" + tokenizer.json -> Tokenizer.

    `do_lower_case` applies to WordPiece only (None: a tokenizer.json's own casing, else what a
    vocab.txt's tokens show: `Tokenizer.from_vocab_file`): a SentencePiece model or a
    tokenizer.json carries its own normalisation (see `data.vocabularies.train_sentencepiece`).
    """
    if kind == "wordpiece":
        return Tokenizer.from_vocab_file(path, do_lower_case)
    if kind == "sentencepiece":
        return Tokenizer.from_sentencepiece(path)
    if kind == "huggingface":
        return Tokenizer.from_tokenizer_json(path)
    raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {KINDS}")


class _ChunkMemo:
    """Space-separated chunks of BERT-normalised text -> WordPiece ids, memoised in flat
    numpy tables so that a whole batch is looked up at once: chunk -> code (a dict),
    code -> ids[starts[code] : starts[code] + lengths[code]].

    Chunks longer than MAX_INPUT_CHARS_PER_WORD are rare and big, so their dict entries
    are dropped right after use; the tables are cleared when they exceed _MAX_MEMOISED_CHUNKS
    entries, so memory stays bounded on any corpus.
    """

    SEPARATOR = "\x00"  # normalisation removes NUL, so it never occurs in a text: code 0, no ids
    JOINER = f" {SEPARATOR} "

    def __init__(self, unnormalized: tokenizers.Tokenizer):
        self._unnormalized = unnormalized  # BERT pre-tokenizer + WordPiece, without the normaliser
        self._clear()

    def _clear(self) -> None:
        self.codes = {self.SEPARATOR: 0}
        self.starts, self.lengths = np.zeros(1, np.int64), np.zeros(1, np.int64)
        self.ids = np.zeros(0, np.int32)

    def encode(self, normalized: str, num_texts: int) -> tuple[np.ndarray, np.ndarray]:
        """`num_texts` normalised texts joined by JOINER -> Tokenizer.encode_flat's output."""
        if not num_texts:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        chunks = normalized.split()
        missing = set(chunks).difference(self.codes)
        if len(self.lengths) + len(missing) > _MAX_MEMOISED_CHUNKS:
            self._clear()
            missing = set(chunks).difference(self.codes)
        if missing:
            self._add(list(missing))
        codes = np.fromiter(map(self.codes.__getitem__, chunks), np.int64, len(chunks))
        for chunk in missing:
            if len(chunk) > MAX_INPUT_CHARS_PER_WORD:
                del self.codes[chunk]
        chunk_lengths = self.lengths[codes]
        ids = ragged.gather_ranges(self.ids, self.starts[codes], chunk_lengths)
        ends = np.cumsum(chunk_lengths)[codes == 0]  # text i ends at the i-th separator, the last at the end
        if len(ends) != num_texts - 1:
            raise AssertionError(f"_ChunkMemo: {len(ends) + 1} texts found, {num_texts} expected")
        return ids, np.diff(np.concatenate([[0], ends, [len(ids)]]))

    def _add(self, chunks: list[str]) -> None:
        ids, lengths = flatten([e.ids for e in self._unnormalized.encode_batch_fast(chunks, add_special_tokens=False)])
        self.codes.update(zip(chunks, range(len(self.lengths), len(self.lengths) + len(chunks))))
        self.starts = np.concatenate([self.starts, len(self.ids) + ragged.row_starts(lengths)])
        self.lengths = np.concatenate([self.lengths, lengths])
        self.ids = np.concatenate([self.ids, ids])


# BERT's text cleaning restricted to ASCII, as bytes.translate arguments: \t \n \r -> ' ';
# the other control characters deleted (NUL is kept: it is _ChunkMemo's separator).
_ASCII_TO_SPACE = bytes.maketrans(b"\t\n\r", b"   ")
_ASCII_CONTROLS = bytes(c for c in [*range(1, 32), 127] if c not in b"\t\n\r")


# BERT's basic split, as the `tokenizers` backend makes it (and the serving export's graph):
# whitespace (\t \n \r, the Zs characters, U+2028, U+2029) ends a word; ASCII symbols, Unicode
# punctuation and these CJK ideograph blocks are words of their own.
_WORD_BREAK = re.compile("[\t\n\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_ANY_SPACE = re.compile(r"\s")  # what ends a word to other tokenizers: every character str.isspace() takes
ASCII_SYMBOL_RANGES = ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E))
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


@functools.lru_cache(maxsize=2)
def bert_character_classes(do_lower_case: bool) -> dict[str, tuple[tuple[int, int], ...]]:
    """What bertjax's WordPiece (the `tokenizers` BertNormalizer and BertPreTokenizer) does with
    each code point, as inclusive ranges: "dropped" (clean_text: control, format and
    private-use characters), "whitespace" (ends a word), "apart" (a word of its own after
    normalisation: punctuation, CJK ideographs, and uncased the symbols NFD makes punctuation,
    ≠ -> =), "stripped" (uncased: the combining marks accent stripping removes after NFD).
    Probed rather than written down: the SavedModel's tokenizer builds its character classes
    from them, so serving splits as training did, whichever Unicode version each library's
    tables follow (some seconds; cached)."""
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=False)
    full = bert_normalizer(do_lower_case)
    split = pre_tokenizers.BertPreTokenizer()
    found: dict[str, list[tuple[int, int]]] = {"dropped": [], "whitespace": [], "apart": [], "stripped": []}
    for code in itertools.chain(range(0xD800), range(0xE000, 0x110000)):
        text = f"a{chr(code)}a"
        if clean.normalize_str(text) == "aa":
            kind = "dropped"
        else:
            normalized = full.normalize_str(text)
            words = len(split.pre_tokenize_str(normalized))
            kind = "stripped" if normalized == "aa" else {2: "whitespace", 3: "apart"}.get(words)
        if kind is None:
            continue
        ranges = found[kind]
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return {kind: tuple(ranges) for kind, ranges in found.items()}


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback


def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE's printable stand-in of each byte (GPT-2's: printable ones as
    themselves, the others from U+0100 on) -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    return {**{chr(byte): byte for byte in printable}, **{chr(256 + k): byte for k, byte in enumerate(others)}}


_BYTE_OF_CHARACTER = _byte_level_alphabet()


def _bytes_continue(piece: bytes) -> bool:
    """Whether a piece whose text is these UTF-8 bytes continues the word before it (no word-
    start mark before it): one that begins inside a character (10xxxxxx) does; one whose first
    character is whole does unless BERT's basic split puts that character apart; one that
    holds only the first bytes of a character starts a word when they may begin a CJK
    ideograph or punctuation mark (E3-E9: U+3000-U+9FFF; F0: the supplementary planes)."""
    if not piece:
        return True
    lead = piece[0]
    if 0x80 <= lead < 0xC0:
        return True
    size = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    if len(piece) >= size:
        return not _starts_word(piece[:size].decode("utf-8", errors="replace"))
    return not (0xE3 <= lead <= 0xE9 or lead == 0xF0)


def _starts_word(char: str) -> bool:
    """Whether a piece that begins with `char` starts a word without a word-start mark: BERT's
    basic split ends a word at whitespace (a tab or no-break space is a piece of its own in a
    byte-level BPE, which marks only a space) and puts punctuation and CJK apart."""
    return char.isspace() or _a_word_alone(char)


def _a_word_alone(char: str) -> bool:
    """Whether BERT's basic split makes `char` a word of its own (punctuation, CJK)."""
    code = ord(char)
    return (unicodedata.category(char).startswith("P")
            or any(low <= code <= high for low, high in ASCII_SYMBOL_RANGES + CJK_RANGES))


def _drops_characters(fast: tokenizers.Tokenizer) -> bool:
    """Whether a tokenizer.json has a normaliser, which may drop characters inside words: BERT's
    and accent stripping do, and NFC or NFKC composing 'e' + U+0301 into 'é' leaves the mark
    out of the token's span (ModernBERT's)."""
    return bool(json.loads(fast.to_str()).get("normalizer"))


def _over_dropped_characters(texts: Sequence[str], offsets: np.ndarray, lengths: np.ndarray,
                             word_break: re.Pattern) -> None:
    """Extends each token's span (in place) over the characters right after it in its word (up
    to a `word_break` character) that no span holds: the ones normalisation dropped (not after a
    word of one character, such as punctuation, whose word ends with it). Texts of printable
    ASCII have none."""
    first = 0
    for text, count in zip(texts, lengths.tolist()):
        row, first = offsets[first:first + count], first + count
        if text.isascii() and text.isprintable():
            continue
        for t in range(count):
            end, limit = row[t, 1], (row[t + 1, 0] if t + 1 < count else len(text))
            if end == 0 or end >= limit or _a_word_alone(text[end - 1]):
                continue
            while end < limit and not word_break.match(text, end) and not _a_word_alone(text[end]):
                end += 1
            row[t, 1] = end


def _invisible_word_ends_out(texts: Sequence[str], offsets: np.ndarray, lengths: np.ndarray) -> None:
    """Ends each token's span (in place) before the control and invisible formatting characters
    (categories Cc, Cf) it ends with, where its word ends right after them (the text's end,
    whitespace or a word of its own such as punctuation) and the span keeps a character."""
    first = 0
    for text, count in zip(texts, lengths.tolist()):
        row, first = offsets[first:first + count], first + count
        if text.isprintable():  # (no character of Cc or Cf is)
            continue
        for span in row:
            start, end = span
            if end == len(text) or text[end].isspace() or _a_word_alone(text[end]):
                while end - 1 > start and unicodedata.category(text[end - 1]) in ("Cc", "Cf"):
                    end -= 1
                span[1] = end


def _sentencepiece_char_spans(text: str, proto) -> np.ndarray:
    """A SentencePieceText's byte spans -> <int64>[pieces, 2] character spans in `text`,
    leading whitespace left out (see Tokenizer.encode_flat_with_offsets)."""
    spans = np.array([(piece.begin, piece.end) for piece in proto.pieces], np.int64).reshape(-1, 2)
    is_char_start = (np.frombuffer(text.encode("utf-8"), np.uint8) & 0xC0) != 0x80
    char_at_byte = np.concatenate([[0], np.cumsum(is_char_start)])  # byte offset -> characters before it
    spans = char_at_byte[spans]
    # SentencePiece's normaliser drops control and invisible formatting characters (a zero-width
    # space) as it drops whitespace: a word's piece must not start with them either.
    is_space = np.fromiter((c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text), bool,
                           len(text))
    # next_visible[i]: the first visible character at or after i (len(text) if none).
    positions = np.where(is_space, len(text), np.arange(len(text)))
    next_visible = np.minimum.accumulate(np.append(positions, len(text))[::-1])[::-1]
    spans[:, 0] = np.minimum(next_visible[spans[:, 0]], spans[:, 1])
    return spans


def piece_roots(pieces: Sequence[str]) -> tuple[list[int], list[int]]:
    """Each piece as a power of its primitive word: (root index, power) per piece; "abab" is
    ("ab", 2), "aba" is ("aba", 1). Pieces with the same root index are powers of one word."""
    roots, powers, index = [], [], {}
    for piece in pieces:
        n = len(piece)
        period = next((p for p in range(1, n) if n % p == 0 and piece[:p] * (n // p) == piece), max(n, 1))
        roots.append(index.setdefault(piece[:period], len(index)))
        powers.append(max(n, 1) // period)
    return roots, powers


@contextlib.contextmanager
def _encoding(texts: Sequence[str]) -> Iterator[None]:
    """Turns what each tokenizer library raises for a str that UTF-8 cannot hold (a lone
    surrogate, as JSON's "\\ud83d" gives) into a ValueError naming the text."""
    try:
        yield
    except (UnicodeEncodeError, TypeError):
        for index, text in enumerate(texts if not isinstance(texts, str) else ()):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"text {index} is not valid Unicode: a lone surrogate ({e.object[e.start]!r}) at "
                                 f"character {e.start}: {text[:80]!r}") from None
            except AttributeError:
                raise TypeError(f"text {index} is a {type(text).__name__}, not a str: {text!r}"[:200]) from None
        raise


def _without_word_start(spec: dict) -> bool:
    """Switches off, in a tokenizer.json's dict, what puts a word start before every text
    (Metaspace's prepend, a Prepend normaliser, ByteLevel's add_prefix_space); whether any was on."""
    changed = False
    for section in ("normalizer", "pre_tokenizer"):
        part = spec.get(section) or {}
        steps = part.get("normalizers") or part.get("pretokenizers") or [part]
        kept = []
        for step in steps:
            kind = step.get("type")
            if kind == "Prepend":
                changed = True
                continue
            if kind == "Metaspace" and (step.get("prepend_scheme", "always") != "never"
                                        or step.get("add_prefix_space")):
                step.update(prepend_scheme="never", add_prefix_space=False)
                changed = True
            if kind == "ByteLevel" and step.get("add_prefix_space"):
                step["add_prefix_space"] = False
                changed = True
            kept.append(step)
        if "normalizers" in part:
            part["normalizers"] = kept
        elif "pretokenizers" in part:
            part["pretokenizers"] = kept
        elif part and not kept:  # the section was a Prepend alone
            spec[section] = None
    return changed


def _check_many(texts: Sequence[str]) -> None:
    """TypeError for one str where many texts are expected (its characters would be the texts)."""
    if isinstance(texts, str):
        raise TypeError(f"expected a sequence of texts, got one str {texts[:40]!r}: encode(text) takes one")


def flatten(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Lists of ids -> (<int32>[T] concatenated, <int64>[N] lengths)."""
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    return np.fromiter(itertools.chain.from_iterable(rows), np.int32, int(lengths.sum())), lengths


def unflatten(ids: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """`flatten`'s inverse: (<int32>[T], <int64>[N]) -> N arrays of ids."""
    return np.split(ids, np.cumsum(lengths)[:-1]) if len(lengths) else []


# -- Helpers. --

def bert_normalizer(do_lower_case: bool) -> normalizers.Normalizer:
    """The original BERT's text cleaning, CJK split and (when lower-casing) accent stripping."""
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=do_lower_case, lowercase=do_lower_case)


def bert_wordpiece_differences(path: str) -> list[str]:
    """What a WordPiece tokenizer.json does otherwise than BERT's WordPiece, which
    `Tokenizer.from_vocab_file` builds from its vocabulary ([] for a vocab.txt): a normaliser
    other than BertNormalizer (NFKC first, none at all), another pre-tokenizer (digits split
    apart), another word limit or unknown token, tokens added to its vocabulary (matched whole
    before the WordPiece split, some with ids past the vocabulary's). Such a file is read as
    kind "huggingface", which runs it as written."""
    if not path.endswith(".json"):
        return []
    settings = _tokenizer_json(path)
    model, normalizer = settings.get("model") or {}, settings.get("normalizer") or {}
    found = []
    if normalizer.get("type") != "BertNormalizer":
        found.append(f"normalizer {normalizer.get('type')}")
    else:
        found += [f"BertNormalizer {setting}" for setting in _unreproduced(normalizer)]
    if (settings.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
        found.append(f"pre_tokenizer {(settings.get('pre_tokenizer') or {}).get('type')}")
    for key, bert in (("max_input_chars_per_word", MAX_INPUT_CHARS_PER_WORD), ("unk_token", "[UNK]")):
        if model.get(key, bert) != bert:
            found.append(f"{key} {model[key]!r}")
    # BERT's own files list its special tokens here, each at its vocabulary id; a literal
    # "[MASK]" in text is read as text either way (Tokenizer's docstring).
    vocab = model.get("vocab") if isinstance(model.get("vocab"), dict) else {}
    def bert_special(token: object) -> bool:
        return (isinstance(token, dict) and bool(token.get("special"))
                and vocab.get(token.get("content")) == token.get("id"))

    added = [token.get("content") if isinstance(token, dict) else token
             for token in settings.get("added_tokens") or [] if not bert_special(token)]
    if added:
        found.append(f"added_tokens {added[:3]}" + (f" and {len(added) - 3} more" if len(added) > 3 else ""))
    return found


def _capitals_share(tokens: tuple[str, ...]) -> float | None:
    """The share of a vocabulary's tokens with cased letters that have capitals; None below
    1,000 such tokens (too few to tell). Tokens of scripts without case (Thai, Arabic, CJK) do
    not count."""
    words = [token for token in tokens if not (token.startswith("[") and token.endswith("]"))
             and any(c.isupper() or c.islower() for c in token)]
    if len(words) < 1000:
        return None
    return sum(any(c.isupper() for c in token) for token in words) / len(words)


def _lower_cased(token: str) -> str:
    """`token` as BERT's uncased normalisation leaves it: lower-cased, then decomposed (NFD:
    an accent apart from its letter, a Hangul syllable into its letters) with the combining
    marks (Unicode Mn: accents, Devanagari's vowel signs, kana's voicing marks) dropped."""
    return "".join(c for c in unicodedata.normalize("NFD", token.lower()) if unicodedata.category(c) != "Mn")


def _changed_share(tokens: tuple[str, ...]) -> float:
    """The share of a vocabulary's tokens (special tokens aside) that BERT's uncased
    normalisation changes. An uncased vocabulary was made from text so normalised: none of its
    tokens change. A cased one's capitals, accents, marks and Hangul syllables do, in any
    script, a script without case too."""
    words = [token for token in tokens if not (token.startswith("[") and token.endswith("]"))]
    return sum(_lower_cased(token) != token for token in words) / max(len(words), 1)


def vocab_casing(path: str) -> bool:
    """do_lower_case as bertjax reads a WordPiece vocabulary given none: a tokenizer.json's
    BertNormalizer's, else what a vocab.txt's tokens say (`_vocab_looks_uncased`)."""
    casing = wordpiece_casing(path)
    return casing if casing is not None else _vocab_looks_uncased(path, tuple(read_vocab(path)))


@functools.lru_cache(maxsize=None)  # once a vocabulary (a run loads it several times)
def _vocab_looks_uncased(path: str, tokens: tuple[str, ...]) -> bool:
    """do_lower_case for a vocab.txt given none: False when BERT's lower-casing changes over 1%
    of its tokens (Google's cased releases: about a fifth; uncased ones: none), else True, the
    original's default. Said when it keeps the case, so that a user expecting lower-casing sees
    why not, and when it lower-cases a vocabulary some of whose tokens have capitals or composed
    letters (an uncased one has none: a cased one made from text with few capitals, say)."""
    share = _changed_share(tokens)
    if share <= 0.01:
        # Capitals and composed letters (é, a Hangul syllable), never in an uncased one's tokens; a
        # lone combining mark may be (the `tokenizers` normaliser's older tables keep newer marks).
        changed = [token for token in tokens if not (token.startswith("[") and token.endswith("]"))
                   and (token.lower() != token or unicodedata.normalize("NFD", token) != token)]
        if changed:
            logging.getLogger(__name__).warning(
                "%s is read as uncased (do_lower_case=True), as under 1%% of its tokens change when lower-cased "
                "and stripped of accents and marks, but %d do (e.g. %s), where an uncased vocabulary has none: if it "
                "was made cased, set config.data.do_lower_case / --do_lower_case=False", path, len(changed),
                ", ".join(changed[:3]))
        return True
    logging.getLogger(__name__).info(
        "%s looks cased (%.1f%% of its tokens change when lower-cased and stripped of accents and marks): text keeps "
        "its case and marks (do_lower_case=False); set config.data.do_lower_case / --do_lower_case to choose", path,
        100 * share)
    return False


@functools.lru_cache(maxsize=None)  # once a vocabulary and casing (a run loads it several times)
def _warn_if_casing_contradicts(path: str, tokens: tuple[str, ...], do_lower_case: bool) -> None:
    """A warning when a vocabulary's tokens contradict `do_lower_case`: a cased one (over 1% of
    its tokens changed by lower-casing) lower-cased reads every such word as pieces or [UNK];
    an uncased one (capitals in under 0.1% of its tokens with cased letters) kept cased reads
    capitals as [UNK]. The original checks the casing against the release's name for the same
    reason."""
    if do_lower_case:
        share = _changed_share(tokens)
        if share <= 0.01:
            return
        looks = f"cased ({share:.1%} of its tokens change when lower-cased and stripped of accents and marks)"
    else:
        share = _capitals_share(tokens)
        if share is None or share >= 0.001:
            return
        looks = f"uncased ({share:.2%} of its tokens have capitals)"
    logging.getLogger(__name__).warning(
        "%s looks %s but do_lower_case=%s: text is tokenized otherwise than the vocabulary was made for; to train, "
        "set do_lower_case=%s (config.data.do_lower_case, --do_lower_case); a model trained so reads its text so",
        path, looks, do_lower_case, not do_lower_case)


def _unreproduced(normalizer: dict) -> list[str]:
    """'key=value' for each BertNormalizer setting bertjax's WordPiece does not reproduce (it
    strips accents exactly when it lower-cases, puts CJK characters apart, drops controls)."""
    lower = normalizer.get("lowercase", True)
    return [f"{key}={normalizer[key]}" for key, wanted in (("strip_accents", lower), ("handle_chinese_chars", True),
                                                           ("clean_text", True))
            if normalizer.get(key) not in (None, wanted)]


def wordpiece_casing(path: str) -> bool | None:
    """do_lower_case as a Hugging Face tokenizer.json's BertNormalizer says; None for a vocab.txt
    (which does not say) or another normaliser. ValueError for a BertNormalizer whose other
    settings bertjax's WordPiece does not reproduce (it strips accents exactly when it
    lower-cases, puts CJK characters apart and drops control characters)."""
    if not path.endswith(".json"):
        return None
    normalizer = _tokenizer_json(path).get("normalizer") or {}
    if normalizer.get("type") != "BertNormalizer":
        return None
    lower = normalizer.get("lowercase", True)
    unsupported = _unreproduced(normalizer)
    if unsupported:
        raise ValueError(f"{path}: its BertNormalizer has {', '.join(unsupported)} (lowercase={lower}), which "
                         "bertjax's WordPiece does not reproduce (the ids would differ from the model's)")
    return lower


def _tokenizer_json(path: str) -> dict:
    """A tokenizer.json's settings; ValueError naming the file when it is not one (not JSON, or
    not an object whose model, normalizer and pre_tokenizer are objects or null)."""
    try:
        settings = json.loads(_read_bytes(path))
    except ValueError as e:  # (JSONDecodeError and UnicodeDecodeError are ValueErrors)
        raise ValueError(f"{path}: not a Hugging Face tokenizer.json ({type(e).__name__}: {e})") from None
    if not isinstance(settings, dict) or not all(isinstance(settings.get(key) or {}, dict)
                                                 for key in ("model", "normalizer", "pre_tokenizer")):
        raise ValueError(f"{path}: not a Hugging Face tokenizer.json (a JSON object whose model, normalizer and "
                         "pre_tokenizer are objects)")
    return settings


def _tokenizer_json_vocab(path: str) -> list[str]:
    try:
        model = _tokenizer_json(path)["model"]
        vocab, kind = dict(model["vocab"]), model["type"]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{path}: not a Hugging Face tokenizer.json (no model.vocab and model.type)") from None
    if kind != "WordPiece" or model.get("continuing_subword_prefix", "##") != "##":
        raise ValueError(f"{path}: a {kind} tokenizer; bertjax reads WordPiece with '##' continuations "
                         "(vocab.txt, tokenizer.json) or a SentencePiece .model")
    if not all(type(i) is int and i >= 0 for i in vocab.values()) or len(set(vocab.values())) != len(vocab):
        raise ValueError(f"{path}: model.vocab's ids are not whole numbers from 0, one per token (tokens only in "
                         "added_tokens are not read)")
    ids = sorted(vocab.values())
    if ids and ids[-1] >= 2 * len(ids):  # (a vocab.txt's repeated lines leave some ids out, not most)
        raise ValueError(f"{path}: model.vocab's ids run to {ids[-1]} for {len(ids)} tokens")
    for token in vocab:  # (an empty token: a vocab.txt's empty line, converted)
        if "\n" in token or "\r" in token:
            raise ValueError(f"{path}: token {vocab[token]} ({token!r}) holds a line break")
    # An id without a token: a vocab.txt's repeated line, converted (a dict keeps one id a token).
    tokens = [""] * (ids[-1] + 1 if ids else 0)
    for token, i in vocab.items():
        tokens[i] = token
    return tokens


def unused_ids(tokens: Sequence[str]) -> list[int]:
    """The ids of a WordPiece vocabulary that text never gets: its empty entries, and each
    token's entries but its last (the original's load_vocab maps a token to its last line)."""
    last = {token: i for i, token in enumerate(tokens)}
    return [i for i, token in enumerate(tokens) if not token or last[token] != i]


def tokens_without_repeats(tokens: Sequence[str]) -> list[str]:
    """`tokens` with each of `unused_ids` renamed '[unused line N]' (line N = id + 1; a name no
    word matches: BERT's words hold no spaces), for libraries that refuse repeated entries
    (TF Text); the ids text gets are unchanged."""
    unused = set(unused_ids(tokens))
    return [f"[unused line {i + 1}]" if i in unused else token for i, token in enumerate(tokens)]


@functools.lru_cache(maxsize=None)  # once a file (a run reads its vocabulary several times)
def _warn_of_unused_entries(path: str, tokens: tuple[str, ...], ids: tuple[int, ...], in_json: bool) -> None:
    if in_json:
        shown = ", ".join(f"id {i}" + (f" ({token!r})" if token else "") for i, token in zip(ids[:5], tokens[:5]))
        why = "ids without a token (a vocab.txt's empty or repeated lines, converted)"
    else:
        shown = ", ".join(f"line {i + 1} ({token!r})" if token else f"line {i + 1} (empty)"
                          for i, token in zip(ids[:5], tokens[:5]))
        why = "a token on several lines gets the id of its last, as in the original's load_vocab"
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    logging.getLogger(__name__).warning("%s: %d entries are ids text never gets: %s%s; %s", path, len(ids), shown,
                                        more, why)


def write_vocab(tokens: list[str], target: str) -> None:
    """Writes a WordPiece vocabulary (`read_vocab`'s tokens) to `target` as a vocab.txt
    (atomically: `target` may be the file the tokens were read from)."""
    fileio.write_bytes(target, "".join(token + "\n" for token in tokens).encode("utf-8"))


def _read_bytes(path: str) -> bytes:
    """A file's bytes, local or remote (gs://...)."""
    with fileio.open_file(path, "rb") as f:
        return f.read()


def read_vocab(path: str) -> list[str]:
    """A WordPiece vocabulary's tokens in id order, from a BERT vocab.txt (one token per line)
    or a Hugging Face tokenizer.json (its WordPiece model's vocab: what transformers 5 saves
    in place of vocab.txt). ValueError naming the file and line (or key) that is wrong. Every
    line is an id, as the model's embedding rows are: an empty line, or a token a later line
    repeats (published vocabularies have both), is an id text never gets (`unused_ids`),
    warned of; the original's load_vocab gives a repeated token its last line's id too.
    (tokenizer.json: an id without a token is "".)"""
    in_json = path.endswith(".json")
    tokens = _tokenizer_json_vocab(path) if in_json else _vocab_txt_tokens(path)
    unused = unused_ids(tokens)
    if unused:
        _warn_of_unused_entries(path, tuple(tokens[i] for i in unused), tuple(unused), in_json)
    return tokens


def _vocab_txt_tokens(path: str) -> list[str]:
    """A vocab.txt's lines, stripped, in id order."""
    data = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        hint = (" (a SentencePiece model? set config.data.tokenizer=sentencepiece)" if path.endswith(".model")
                else "")
        raise ValueError(f"{path}:{line}: vocabulary is not valid UTF-8{hint}") from None
    # Each line stripped, as the original's load_vocab does (a BOM, as Windows tools write,
    # and surrounding spaces are no part of a token).
    tokens = [t.strip() for t in text.removeprefix("\ufeff").split("\n")]
    if tokens and tokens[-1] == "":
        tokens.pop()
    if tokens and all(re.fullmatch(r"\S+\t-?[0-9.]+(e-?[0-9]+)?", token) for token in tokens[:5]):
        raise ValueError(f"{path}:1: {tokens[0]!r}: a piece and its score, as a SentencePiece model's .vocab lists "
                         "them, not a WordPiece vocabulary; give the .model file beside it, with "
                         "config.data.tokenizer=sentencepiece")
    return tokens

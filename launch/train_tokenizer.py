r"""Trains a WordPiece, SentencePiece or byte-level BPE vocabulary on text files.

  python launch/train_tokenizer.py --kind=wordpiece --input='corpus/*.txt' --vocab_size=30522 \
      --output_dir=/tmp/vocab                   # -> /tmp/vocab/vocab.txt
  python launch/train_tokenizer.py --kind=sentencepiece --input='a.txt,b/*.txt' --vocab_size=32000 \
      --output_dir=/tmp/spm --nodo_lower_case   # -> /tmp/spm/spm.model
  python launch/train_tokenizer.py --kind=bpe --input='corpus/*.txt' --vocab_size=50368 \
      --output_dir=/tmp/bpe                     # -> /tmp/bpe/tokenizer.json (ModernBERT's kind)

Input: comma-separated globs (local or gs://) of what pre-training reads (--source): BERT-format
text (a sentence a line; lines not UTF-8 are dropped and counted), or JSONL / Parquet rows whose
--text_key column is cut into sentences as prepare cuts it; "auto" goes by the files' extensions
(.jsonl/.json, .parquet, else text). Every kind puts [PAD], [UNK], [CLS],
[SEP], [MASK] at ids 0..4. Then point `config.data.tokenizer` (wordpiece, sentencepiece, or
huggingface for a bpe tokenizer.json) and `config.data.vocab_path` at the written file. A BPE
keeps case (--do_lower_case does not apply) and knows every byte, so no text is unknown.
"""

import contextlib
import itertools
import logging
import os
import shlex
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import cli  # noqa: E402  (first: quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_KIND = flags.DEFINE_enum("kind", "wordpiece", ["wordpiece", "sentencepiece", "bpe"], "Vocabulary kind.")
_TOKENIZER_KIND = {"wordpiece": "wordpiece", "sentencepiece": "sentencepiece", "bpe": "huggingface"}
_WRITES = {"wordpiece": ("vocab.txt",), "sentencepiece": ("spm.model", "spm.vocab"), "huggingface": ("tokenizer.json",)}
_INPUT = flags.DEFINE_string("input", None, "Comma-separated globs of text, JSONL or Parquet files (--source).")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size, special tokens included.",
                                   lower_bound=6)  # the 5 special tokens and one more: checked before the corpus
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where vocab.txt (spm.model, tokenizer.json) is written.")
_DO_LOWER_CASE = flags.DEFINE_bool("do_lower_case", True, "Lower-case (and for WordPiece strip accents); "
                                    "WordPiece and SentencePiece only: a byte-level BPE keeps case, as ModernBERT's.")
_SOURCE = flags.DEFINE_enum("source", "auto", ["auto", "text", "jsonl", "parquet"],
                            "What the files hold (config.data.source's kinds); auto: by their extensions.")
_TEXT_KEY = flags.DEFINE_string("text_key", "text", "JSONL/Parquet: the column of the text (config.data.text_key).")
_LIMIT_ALPHABET = flags.DEFINE_integer(
    "limit_alphabet", 1000, "WordPiece: the most characters kept as tokens of their own (the most frequent; others "
    "become [UNK]); 0 = every character seen. Raise it for a corpus of many scripts or CJK text.", lower_bound=0)
_CHARACTER_COVERAGE = flags.DEFINE_float(
    "character_coverage", 0.9995, "SentencePiece: the share of the corpus's characters its alphabet covers (the "
    "rarest others become [UNK]); lower it (SentencePiece takes 0.98 at least) for a small vocabulary of a large "
    "alphabet.", lower_bound=0.98, upper_bound=1.0)
_SAMPLE_LINES = 2000  # sentences kept to report the [UNK] share of the trained vocabulary
# Flags that only some kinds read: given for another, they would change nothing without a word.
_KINDS_READING = {"do_lower_case": ("wordpiece", "sentencepiece"), "limit_alphabet": ("wordpiece",),
                  "character_coverage": ("sentencepiece",)}
flags.mark_flags_as_required(["input", "output_dir"])


_COMPRESSED = (".gz", ".bz2", ".zst", ".xz")  # (refused as such once the kind is known: decompress first)


def source_of(paths: list[str], chosen: str) -> str:
    """The source kind the files are read as: `chosen`, or for "auto" their common extension's,
    a compression suffix aside (a ValueError naming two files of different kinds)."""
    if chosen != "auto":
        return chosen
    from bertjax.tasks import common

    extensions = {**common.JSONL_EXTENSIONS, "parquet": "parquet"}
    kinds = {}  # kind -> a file of that kind
    for path in paths:
        name = path.lower()
        name = next((name[:-len(suffix)] for suffix in _COMPRESSED if name.endswith(suffix)), name)
        kinds.setdefault(extensions.get(name.rsplit(".", 1)[-1], "text"), path)
    if len(kinds) > 1:
        mixed = " and ".join(f"{kind} ({path})" for kind, path in sorted(kinds.items()))
        raise ValueError(f"--input mixes {mixed} files; give files of one kind, or --source")
    [kind] = kinds
    if kind == "text" and common.json_lines(common.first_lines(paths[0])):  # a vocabulary of braces and keys
        raise ValueError(f"--input: {paths[0]} looks like JSON Lines, not text; pass --source=jsonl (and --text_key),"
                         " or --source=text to learn from its lines as they are")
    return kind


def _train(kind: str, texts) -> str:
    """Trains a tokenizer of `kind` on `texts` into --output_dir; returns the file written."""
    from bertjax.data import vocabularies

    if kind == "huggingface":
        return vocabularies.train_bpe(texts, _VOCAB_SIZE.value, _OUTPUT_DIR.value)
    if kind == "wordpiece":
        return vocabularies.train_wordpiece(texts, _VOCAB_SIZE.value, _OUTPUT_DIR.value,
                                            do_lower_case=_DO_LOWER_CASE.value,
                                            limit_alphabet=_LIMIT_ALPHABET.value or None)
    return vocabularies.train_sentencepiece(texts, _VOCAB_SIZE.value, _OUTPUT_DIR.value,
                                            do_lower_case=_DO_LOWER_CASE.value,
                                            character_coverage=_CHARACTER_COVERAGE.value)


def _folders_to_make(folder: str) -> list[str]:
    """The folders of the local path `folder` that do not exist yet, innermost first."""
    missing = []
    folder = os.path.abspath(folder)
    while not os.path.exists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def main(_):
    # The library's messages name the config.data settings these flags stand for.
    with cli.settings_as_flags({"config.data.text_key": "--text_key", "config.data.source": "--source",
                                "config.data.input_pattern": "--input", "vocab_size must": "--vocab_size must",
                                "vocab_size=": "--vocab_size="}):
        train_tokenizer()


def train_tokenizer() -> None:
    from bertjax import tokenization
    from bertjax.data import vocabularies
    from bertjax.data import sources

    from bertjax.runtime import fileio

    if fileio.is_remote(_OUTPUT_DIR.value):  # the trainers write local files
        raise ValueError(f"--output_dir={_OUTPUT_DIR.value}: give a local folder, then copy it (gsutil cp -r); the "
                         "tokenizer trainers write local files")
    fileio.check_can_make(_OUTPUT_DIR.value, "--output_dir")  # before the reading and training
    paths = sources.expand_patterns(_INPUT.value, "--input")
    kind = _TOKENIZER_KIND[_KIND.value]
    vocabularies.check_vocab_size(_VOCAB_SIZE.value, kind)  # (before the corpus is read)
    for name, readers in _KINDS_READING.items():
        if flags.FLAGS[name].present and _KIND.value not in readers:
            logging.warning("--%s is not read by --kind=%s (only by %s): it changes nothing", name, _KIND.value,
                            " and ".join(readers))
    for name in _WRITES[kind]:  # (checkpoints trained with one would no longer match it)
        if fileio.exists(fileio.join(_OUTPUT_DIR.value, name)):
            raise ValueError(f"{fileio.join(_OUTPUT_DIR.value, name)} exists; remove it or choose another --output_dir")
    import ml_collections

    data_config = ml_collections.ConfigDict(dict(source=source_of(paths, _SOURCE.value), input_pattern=_INPUT.value,
                                                 text_key=_TEXT_KEY.value))
    if _TEXT_KEY.present and data_config.source == "text":
        logging.warning("--text_key is read from JSONL and Parquet rows, not from text files: it changes nothing")
    units = sources.list_units(data_config)
    if data_config.source in ("text", "jsonl"):  # what prepare refuses: a compressed, binary or UTF-16 file
        sources.check_text_files(units, data_config.source)
    drops = sources.DropCounter()
    read = threading.Event()  # (set once the corpus is read: then the trainer's silent phase)
    lines = vocabularies.training_sentences(data_config, units, drops, kind, read=read)
    first = next(lines, None)
    if first is None:
        raise ValueError(f"--input={_INPUT.value}: no text in its {len(paths)} {data_config.source} file(s)"
                         + (f" (dropped: {dict(drops.counts)})" if drops.counts else ""))
    made = _folders_to_make(_OUTPUT_DIR.value)
    try:  # before training, which can take a while: a folder that cannot be made fails now
        fileio.makedirs(_OUTPUT_DIR.value)
    except OSError as e:
        raise ValueError(f"--output_dir={_OUTPUT_DIR.value}: cannot make the folder ({e.strerror or e})") from None
    # What the trainer of this kind writes (not another program's files in the same folder).
    written = [name for name in _WRITES[kind] if not fileio.exists(fileio.join(_OUTPUT_DIR.value, name))]
    try:
        sample = [first, *itertools.islice(lines, _SAMPLE_LINES - 1)]
        with vocabularies.still_training(read):
            path = _train(kind, itertools.chain(sample, lines))
        tokenizer = tokenization.load_tokenizer(kind, path, _DO_LOWER_CASE.value)
        if tokenizer.vocab_size <= len(tokenization.SPECIAL_TOKENS):
            raise ValueError(f"--input={_INPUT.value}: the trainer kept no token of its text, only the special "
                             f"tokens (its {len(paths)} file(s) hold characters BERT's clean-up drops, control "
                             "characters, say); give text")
    except BaseException:
        # (a refused size, no token learnt, a Ctrl-C: SentencePiece's C++ trainer, which Python cannot
        # stop, may have finished its files by then): nothing written is left as if it were a result.
        with contextlib.suppress(OSError):  # (not to hide the error being raised)
            for name in written:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(_OUTPUT_DIR.value, name))
            for folder in made:  # innermost first: each only when left empty
                if os.listdir(folder):
                    break
                os.rmdir(folder)
        raise
    ids, _ = tokenizer.encode_flat(sample)
    unknown = float((ids == tokenizer.unk_id).mean()) if len(ids) else 0.0
    fewer = (f" (fewer than --vocab_size={_VOCAB_SIZE.value}: no more pieces occur twice)"
             if tokenizer.vocab_size < _VOCAB_SIZE.value else
             f" (more than --vocab_size={_VOCAB_SIZE.value}: WordPiece keeps every character of the alphabet and its "
             f"## form; lower --limit_alphabet or raise --vocab_size)" if tokenizer.vocab_size > _VOCAB_SIZE.value
             else "")
    hint = (f" (raise --limit_alphabet={_LIMIT_ALPHABET.value}: characters past it are unknown)"
            if kind == "wordpiece" and unknown > 0.01 and _LIMIT_ALPHABET.value else "")
    dropped = f"; dropped {dict(drops.counts)} (see the warnings above)" if drops.counts else ""
    print(f"wrote {path}: {tokenizer.vocab_size} tokens{fewer}, [UNK] {unknown:.2%} of the first {len(sample):,} "
          f"sentences' tokens{hint}, vocab_hash {tokenizer.vocab_hash}{dropped}")
    # A vocab.txt does not record its casing; a SentencePiece model and a BPE hold their normalisation.
    casing = (f" --config.data.do_lower_case={_DO_LOWER_CASE.value}" if kind == "wordpiece" else
              f" (it {'lower-cases' if tokenizer.lower_cases() else 'keeps case'} by itself: "
              f"--{'no' if tokenizer.lower_cases() else ''}do_lower_case trains one that does not)"
              if kind == "sentencepiece" else "")
    print(f"use it with --config.data.tokenizer={kind} --config.data.vocab_path={shlex.quote(os.path.abspath(path))}"
          f"{casing}")


if __name__ == "__main__":
    cli.run(main)

r"""Trains a WordPiece, SentencePiece or byte-level BPE vocabulary on text files.

  python launch/train_tokenizer.py --kind=wordpiece --input='corpus/*.txt' --vocab_size=30522 \
      --output_dir=/tmp/vocab                   # -> /tmp/vocab/vocab.txt
  python launch/train_tokenizer.py --kind=sentencepiece --input='a.txt,b/*.txt' --vocab_size=32000 \
      --output_dir=/tmp/spm --nodo_lower_case   # -> /tmp/spm/spm.model
  python launch/train_tokenizer.py --kind=bpe --input='corpus/*.txt' --vocab_size=50368 \
      --output_dir=/tmp/bpe                     # -> /tmp/bpe/tokenizer.json (ModernBERT's kind)

Input: comma-separated globs (local or gs://) of BERT-format text, read line by line
(blank lines and undecodable bytes are skipped). Every kind puts [PAD], [UNK], [CLS],
[SEP], [MASK] at ids 0..4. Then point `config.data.tokenizer` (wordpiece, sentencepiece, or
huggingface for a bpe tokenizer.json) and `config.data.vocab_path` at the written file. A BPE
keeps case (--do_lower_case does not apply) and knows every byte, so no text is unknown.
"""

import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import cli  # noqa: E402  (first: quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_KIND = flags.DEFINE_enum("kind", "wordpiece", ["wordpiece", "sentencepiece", "bpe"], "Vocabulary kind.")
_TOKENIZER_KIND = {"wordpiece": "wordpiece", "sentencepiece": "sentencepiece", "bpe": "huggingface"}
_INPUT = flags.DEFINE_string("input", None, "Comma-separated globs of text files.")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size, special tokens included.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where vocab.txt (spm.model, tokenizer.json) is written.")
_DO_LOWER_CASE = flags.DEFINE_bool("do_lower_case", True, "Lower-case (and for WordPiece strip accents).")
flags.mark_flags_as_required(["input", "output_dir"])


def _lines(paths):
    from bertjax.runtime import fileio
    for path in paths:
        with fileio.open_file(path, "rb") as f:
            for raw in f:
                line = raw.decode("utf-8", errors="ignore").strip()
                if line:
                    yield line


def main(_):
    from bertjax import tokenization
    from bertjax.data import vocabularies
    from bertjax.data import sources

    from bertjax.runtime import fileio

    if fileio.is_remote(_OUTPUT_DIR.value):  # the trainers write local files
        raise ValueError(f"--output_dir={_OUTPUT_DIR.value}: give a local folder, then copy it (gsutil cp -r); the "
                         "tokenizer trainers write local files")
    paths = sources.expand_patterns(_INPUT.value)
    kind = _TOKENIZER_KIND[_KIND.value]
    target = fileio.join(_OUTPUT_DIR.value, "tokenizer.json" if kind == "huggingface" else
                         tokenization.VOCABULARY_FILE[kind])
    if fileio.exists(target):  # checkpoints trained with it would no longer match
        raise ValueError(f"{target} exists; remove it or choose another --output_dir")
    lines = _lines(paths)
    first = next(lines, None)
    if first is None:
        raise ValueError(f"--input={_INPUT.value}: no text in its {len(paths)} file(s)")
    try:  # before training, which can take a while: a folder that cannot be made fails now
        fileio.makedirs(_OUTPUT_DIR.value)
    except OSError as e:
        raise ValueError(f"--output_dir={_OUTPUT_DIR.value}: cannot make the folder ({e.strerror or e})") from None
    texts = itertools.chain([first], lines)
    if kind == "huggingface":
        path = vocabularies.train_bpe(texts, _VOCAB_SIZE.value, _OUTPUT_DIR.value)
    else:
        train = vocabularies.train_wordpiece if kind == "wordpiece" else vocabularies.train_sentencepiece
        path = train(texts, _VOCAB_SIZE.value, _OUTPUT_DIR.value, do_lower_case=_DO_LOWER_CASE.value)
    tokenizer = tokenization.load_tokenizer(kind, path, _DO_LOWER_CASE.value)
    fewer = f" (fewer than --vocab_size={_VOCAB_SIZE.value}: the text has no more)" \
        if tokenizer.vocab_size < _VOCAB_SIZE.value else ""
    print(f"wrote {path}: {tokenizer.vocab_size} tokens{fewer}, vocab_hash {tokenizer.vocab_hash}")


if __name__ == "__main__":
    cli.run(main)

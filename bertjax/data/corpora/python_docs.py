"""A small real-prose corpus found on every machine with Python: the language reference.

CPython ships its reference documentation as plain text (`pydoc_data.topics`, what `help()`
shows), so tests and recipe checks can pre-train on real English prose without a download.
`documents()` keeps the prose paragraphs of each topic, one document per topic, split into
sentences; `write(path)` writes them as BERT-format text (one sentence per line, a blank
line between documents). Python 3.11: 78 documents, 2,021 sentences, 240 KB, about 65,000
tokens of the uncased BERT vocabulary.
"""

from __future__ import annotations

import re

_HEADING_RULE = re.compile(r"([*=\-^~])\1{2,}")
_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=["(]?[A-Z])')
_MIN_WORDS = 3


def documents() -> list[list[str]]:
    """Each topic's sentences, topics in name order.

    Prose only: indented blocks (code, grammar, tables) and headings (a line over a rule of
    * = - ^ ~) are dropped; a paragraph is split into sentences at . ! ? before a capital
    letter; sentences under 3 words, and topics left empty, are dropped.
    """
    from pydoc_data.topics import topics

    result = []
    for name in sorted(topics):
        lines = topics[name].splitlines()
        sentences, paragraph = [], []
        for line, next_line in zip(lines + [""], lines[1:] + ["", ""]):
            if line[:1].strip() and not _HEADING_RULE.fullmatch(line) and not _HEADING_RULE.fullmatch(next_line):
                paragraph.append(line.strip())
                continue
            sentences += [s for s in _SENTENCE_END.split(" ".join(paragraph)) if len(s.split()) >= _MIN_WORDS]
            paragraph = []
        if sentences:
            result.append(sentences)
    return result


def write(path: str) -> str:
    """Writes `documents()` to `path` as BERT-format text; returns `path`."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(document) for document in documents()) + "\n")
    return path

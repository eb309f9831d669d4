r"""The encoder's dense products alone, JAX (XLA:CPU) against PyTorch on this machine: how fast
each side multiplies the shapes a forward multiplies, and what that makes one forward's dense
products cost. A floor under the whole-forward ratios of encoder_forward.py and
extract_features_speed.py: no forward can beat the other side's by more than its products do.

    python benchmarks/matmul_rates.py --torch_python=<a Python with torch>

Shapes: a batch of 32 x 128 tokens (4,096 rows) through MiniLM-L6 (H 384, I 1,536) and BERT-base
(H 768, I 3,072): [rows, H] x [H, H] (query, key, value, attention output), [rows, H] x [H, I]
and [rows, I] x [I, H] (the feed-forward), and 2,048^3. Precisions: float32; bfloat16 operands
with float32 sums, as bertjax's `bf16_matmul` multiplies (`precision="bfloat16"` on a CPU)
against PyTorch's `torch.nn.functional.linear` under `torch.autocast("cpu", dtype=torch.bfloat16)`
(bfloat16 result); both convert their float32 operands on every call, as a forward does (a
column gives XLA's kernel alone, on operands already in bfloat16). Median of --repeats calls
after 2 untimed ones; the result buffers are reused on both sides (XLA's freshly allocated
outputs would otherwise add page faults: see benchmarks/README.md#host-memory-in-inference).
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from encoder_forward import median_seconds  # noqa: E402  (two untimed calls, then the median)
ROWS = 32 * 128
MODELS = {"minilm": (384, 1536, 6), "base": (768, 3072, 12)}  # hidden, intermediate, layers


def shapes() -> list[tuple[str, int, int, int]]:
    """(label, M, K, N) of every product measured."""
    out = [("2048^3", 2048, 2048, 2048)]
    for name, (hidden, inner, _) in MODELS.items():
        out += [(f"{name} attention", ROWS, hidden, hidden), (f"{name} ffn in", ROWS, hidden, inner),
                (f"{name} ffn out", ROWS, inner, hidden)]
    return out


def jax_side(repeats: int) -> dict[str, float]:
    """{"<label> <precision>": seconds} for XLA:CPU."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bertjax.models import bf16_matmul

    products = {"float32": jax.jit(lambda x, w: x @ w),
                "bfloat16": jax.jit(bf16_matmul.matmul)}
    results = {}
    for label, m, k, n in shapes():
        x = jnp.asarray(np.random.default_rng(0).standard_normal((m, k), np.float32))
        w = jnp.asarray(np.random.default_rng(1).standard_normal((k, n), np.float32))
        for precision, product in products.items():
            results[f"{label} {precision}"] = median_seconds(lambda: product(x, w).block_until_ready(), repeats)
        rounded = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)  # the kernel alone, no conversions
        results[f"{label} bfloat16 given"] = median_seconds(
            lambda: products["bfloat16"](*rounded).block_until_ready(), repeats)
    return results


def torch_side(repeats: int) -> dict[str, float]:
    """{"<label> <precision>": seconds} for PyTorch (`F.linear`, as nn.Linear runs)."""
    import torch

    results = {}
    for label, m, k, n in shapes():
        x, w = torch.randn(m, k), torch.randn(n, k)
        for precision in ("float32", "bfloat16"):
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
                results[f"{label} {precision}"] = median_seconds(lambda: torch.nn.functional.linear(x, w), repeats)
    return results


def forward_seconds(results: dict[str, float], name: str, precision: str) -> float:
    """One forward's dense products at 32 x 128 from the per-product times: four H x H, one
    H x I and one I x H product a layer."""
    *_, layers = MODELS[name]
    per_layer = (4 * results[f"{name} attention {precision}"] + results[f"{name} ffn in {precision}"]
                 + results[f"{name} ffn out {precision}"])
    return layers * per_layer


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--torch_python", default=sys.executable, help="a Python with torch, when this one has none")
    parser.add_argument("--side", default="", help=argparse.SUPPRESS)  # --side=torch: the subprocess
    args = parser.parse_args()
    if args.side == "torch":
        print(json.dumps(torch_side(args.repeats)))
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_check import require_torch

    require_torch(args.torch_python, modules="torch")  # (before the JAX side's minutes)
    ours = jax_side(args.repeats)
    try:
        theirs = torch_side(args.repeats)
    except ImportError:
        if args.torch_python == sys.executable:
            raise SystemExit("error: the PyTorch side needs torch: pip install torch (the CPU wheel), "
                             "or --torch_python=<a Python that has it>") from None
        result = subprocess.run([args.torch_python, os.path.abspath(__file__), "--side=torch",
                                 f"--repeats={args.repeats}"], capture_output=True, text=True, check=True)
        theirs = json.loads(result.stdout.splitlines()[-1])
    print("GFLOP/s of each product (JAX / PyTorch)")
    print("| product | M x K x N | float32 JAX | float32 PyTorch | bf16 JAX | bf16 JAX, operands given in bf16 | "
          "bf16 PyTorch autocast |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for label, m, k, n in shapes():
        rate = lambda side, precision: 2 * m * k * n / side[f"{label} {precision}"] / 1e9
        print(f"| {label} | {m} x {k} x {n} | {rate(ours, 'float32'):.0f} | {rate(theirs, 'float32'):.0f} | "
              f"{rate(ours, 'bfloat16'):.0f} | {rate(ours, 'bfloat16 given'):.0f} | {rate(theirs, 'bfloat16'):.0f} |")
    print("\nOne forward's dense products at 32 x 128, ms (JAX / PyTorch; the ratio is PyTorch's time over JAX's)")
    print("| model | float32 JAX | float32 PyTorch | ratio | bf16 JAX | bf16 PyTorch | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in MODELS:
        cells = []
        for precision in ("float32", "bfloat16"):
            mine, other = forward_seconds(ours, name, precision), forward_seconds(theirs, name, precision)
            cells += [f"{mine * 1e3:.1f}", f"{other * 1e3:.1f}", f"{other / mine:.2f}x"]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    from bertjax.runtime import host_memory

    os.environ.setdefault("BERTJAX_KEEP_FREED_MEMORY", "1")  # reuse result buffers, as PyTorch's allocator does
    host_memory.configure()
    main()

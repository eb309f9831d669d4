r"""The feature-based tagging head's BiLSTM: one training step of the head alone (forward and
backward through two bidirectional layers) in bertjax's form against flax's own
nn.Bidirectional of OptimizedLSTMCells with the same parameters, and the FLOP rate each reaches
against this machine's float32 matmul rate.

    python benchmarks/bilstm.py                        # the BERT paper's head on MiniLM's concat-4
    python benchmarks/bilstm.py --features=3072 --units=768 --batch=32 --length=48

Model FLOPs per step: for each layer and direction the input projection over every token
(2 B S F 4U) and the recurrent product (2 B S U 4U), times 3 for forward and backward, less
the first layer's input gradient (2 B S F 4U a direction: the step differentiates the head's
parameters, not the frozen features); the gates' elementwise work is not counted. Columns:
milliseconds per step (median), GFLOP/s, and that as a share of a float32 matmul's rate (the
best of three 1-second loops at 1024^3 and at 2048^3: the machine's best, whichever size).
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def step_flops(batch: int, length: int, features: int, units: int) -> float:
    """Model FLOPs of one forward + backward pass of the two-layer BiLSTM over frozen features."""
    total = 0
    for layer, inputs in enumerate((features, 2 * units)):
        projection, recurrent = 2 * batch * length * inputs * 4 * units, 2 * batch * length * units * 4 * units
        backward = 2 * (projection + recurrent) - (projection if layer == 0 else 0)  # no gradient for the features
        total += 2 * (projection + recurrent + backward)  # both directions
    return float(total)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=48, help="tokens a row (CoNLL-2003 sentences: 40-60 pieces)")
    parser.add_argument("--features", type=int, default=1536, help="MiniLM's last four layers concatenated")
    parser.add_argument("--units", type=int, default=768, help="per direction (the BERT paper's Table 7)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--matmul_precision", default="default", choices=["default", "bfloat16"],
                        help="bertjax's products on bfloat16 operands (the default for training on AMX)")
    args = parser.parse_args()
    if min(args.batch, args.length, args.features, args.units, args.repeats) < 1:
        parser.error("--batch, --length, --features, --units and --repeats must be >= 1")

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bertjax import metrics
    from bertjax.models import BertConfig
    from bertjax.models.heads import BiLSTM

    class FlaxBiLSTM(nn.Module):
        @nn.compact
        def __call__(self, x, lengths):
            rnn = lambda name: nn.RNN(nn.OptimizedLSTMCell(args.units, name=name))  # noqa: E731
            for i in range(2):
                x = nn.Bidirectional(rnn(f"forward_{i}"), rnn(f"backward_{i}"))(x, seq_lengths=lengths)
            return x

    rng = np.random.default_rng(0)
    b, s = args.batch, args.length
    x = jnp.asarray(rng.normal(size=(b, s, args.features)), jnp.float32)
    lengths = jnp.asarray(rng.integers(s // 3, s + 1, b))
    mask = (jnp.arange(s)[None] < lengths[:, None]).astype(jnp.int32)
    config = BertConfig(vocab_size=8, hidden_size=64, num_hidden_layers=1, num_attention_heads=1,
                        intermediate_size=64, tagging_head="bilstm", lstm_hidden_size=args.units,
                        matmul_precision=args.matmul_precision)
    params = BiLSTM(config).init(jax.random.key(0), x, mask)["params"]
    forms = {"bertjax BiLSTM": lambda p, x: BiLSTM(config).apply({"params": p}, x, mask),
             "flax nn.Bidirectional": lambda p, x: FlaxBiLSTM().apply({"params": p}, x, lengths)}
    peak = max(metrics.measure_peak_flops(seconds=1.0, size=size) for size in (1024, 2048) for _ in range(3))
    flops = step_flops(b, s, args.features, args.units)
    print(f"{jax.devices()[0].device_kind}: batch {b}, length {s}, features {args.features}, {args.units} units a "
          f"direction; {flops / 1e9:.1f} GFLOP a step; float32 matmul {peak / 1e9:.0f} GFLOP/s")
    print("| form | step (ms) | GFLOP/s | of the matmul rate |")
    print("| --- | ---: | ---: | ---: |")
    for name, apply in forms.items():
        step = jax.jit(jax.grad(lambda p, x, apply=apply: jnp.sum(apply(p, x) ** 2)))
        jax.block_until_ready(step(params, x))
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            jax.block_until_ready(step(params, x))
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        print(f"| {name} | {seconds * 1e3:.1f} | {flops / seconds / 1e9:.1f} | {flops / seconds / peak:.0%} |")


if __name__ == "__main__":
    main()

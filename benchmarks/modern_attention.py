"""The modern encoder's attention cost by length: one ModernBERT-base attention layer (768 wide,
12 heads) forward at 512, 2,048 and 8,192 tokens, global against local (window 128) as a band
mask over S x S and in bertjax's blocked form, and optionally the whole modernbert-base encoder
(forward, or with --train the masked-LM pre-training step).
Prints a table: milliseconds per layer call (median of --repeats), the compiled program's
temporary memory, and the same layer in PyTorch (scaled_dot_product_attention with the band as
a mask, what Hugging Face's ModernBERT runs on a CPU) when torch is installed.

    python benchmarks/modern_attention.py                      # the attention table
    python benchmarks/modern_attention.py --encoder --lengths=512,2048,8192
    python benchmarks/modern_attention.py --train --lengths=2048,8192 --repeats=1

--train: one row of `modernbert-base,modern` pre-training (masked LM at 30%, AdamW) at each
length: seconds per step, the step's temporary memory and the state it keeps (float32 weights
and Adam's two moments), all from the compiled program; --repeats=0 compiles without running,
--remat_policy=full recomputes each layer's activations in the backward pass.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _time(fn, repeats):
    fn()  # compile / warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def attention_rows(lengths, repeats):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bertjax.models import BertConfig
    from bertjax.models.attention import BertSelfAttention

    config = BertConfig.preset("modernbert-base", attention_impl="xla")
    rows = []
    for length in lengths:
        x = jnp.asarray(np.random.default_rng(0).normal(size=(1, length, 768)), jnp.float32)
        ids = jnp.ones((1, length), jnp.int32)
        forms = {"global": BertSelfAttention(config, True, rope_theta=160_000.0),
                 "local, band mask": BertSelfAttention(config, True, window=128, rope_theta=10_000.0),
                 "local, blocked": BertSelfAttention(config, True, window=128, rope_theta=10_000.0)}
        params = forms["global"].init(jax.random.key(0), x, ids)
        for name, layer in forms.items():
            if name == "local, band mask":  # force the S x S form: bertjax picks blocks past 1.5 w
                apply = jax.jit(lambda p, x, ids, layer=layer: _band_only(layer, p, x, ids))
            else:
                apply = jax.jit(lambda p, x, ids, layer=layer: layer.apply(p, x, ids))
            compiled = apply.lower(params, x, ids).compile()
            memory = compiled.memory_analysis().temp_size_in_bytes / 2**20
            milliseconds = _time(lambda: compiled(params, x, ids).block_until_ready(), repeats)
            rows.append((length, name, milliseconds, memory))
        rows += _torch_rows(length, repeats)
    return rows


def _band_only(layer, params, x, ids):
    """The local layer through the full S x S mask (the `_xla_attention` path)."""
    import jax.numpy as jnp

    from bertjax.models import attention

    original = attention.BertSelfAttention._local_xla_attention

    def band(self, q, k, v, sequence_ids, half):
        mask = attention.attention_mask(sequence_ids, False) & attention.local_band(q.shape[1], half)
        return self._xla_attention(q, k, v, mask)

    attention.BertSelfAttention._local_xla_attention = band
    try:
        return layer.apply(params, x, jnp.asarray(ids))
    finally:
        attention.BertSelfAttention._local_xla_attention = original


def _torch_rows(length, repeats):
    """The same layer in PyTorch: fused QKV product, scaled_dot_product_attention (the band as a
    boolean mask), output product; float32, no rotary (a few elementwise ops)."""
    try:
        import torch
    except ImportError:
        return []
    torch.manual_seed(0)
    qkv, output = torch.nn.Linear(768, 3 * 768, bias=False), torch.nn.Linear(768, 768, bias=False)
    x = torch.randn(1, length, 768)
    distance = (torch.arange(length)[:, None] - torch.arange(length)[None]).abs()
    rows = []
    for name, mask in (("global", None), ("local, band mask", distance <= 64)):
        def run(mask=mask):
            with torch.no_grad():
                q, k, v = qkv(x).view(1, length, 3, 12, 64).permute(2, 0, 3, 1, 4)
                context = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                output(context.transpose(1, 2).reshape(1, length, 768))
        rows.append((length, f"torch {name}", _time(run, repeats), float("nan")))
    return rows


def encoder_rows(lengths, repeats):
    import jax
    import jax.numpy as jnp

    from bertjax.models import BertConfig, BertEncoder

    rows = []
    for length in lengths:
        config = BertConfig.preset("modernbert-base")
        encoder = BertEncoder(config)
        ids = jnp.ones((1, length), jnp.int32)
        params = jax.jit(encoder.init)(jax.random.key(0), ids)
        apply = jax.jit(lambda p, ids: encoder.apply(p, ids)[0])
        compiled = apply.lower(params, ids).compile()
        seconds = _time(lambda: compiled(params, ids).block_until_ready(), repeats) / 1e3
        rows.append((length, seconds, length / seconds, compiled.memory_analysis().temp_size_in_bytes / 2**30))
    return rows


def train_rows(lengths, repeats, remat_policy="none"):
    """(tokens, seconds per step or None, temporary GiB, state GiB) of the pre-training step."""
    import flax.linen as nn
    import jax
    import ml_collections
    import numpy as np

    from bertjax import optim, pretrain, sharding, trainer
    from bertjax.models import BertConfig, BertForPreTraining

    config = BertConfig.preset("modernbert-base").replace(remat_policy=remat_policy)
    model = BertForPreTraining(config, next_sentence_prediction=False)
    train = ml_collections.ConfigDict(dict(optim.DEFAULTS, learning_rate=1e-4, warmup_steps=0, num_steps=10,
                                           adam_bias_correction=True, grad_accum_steps=1))
    optimizer = optim.make_optimizer(train)
    mesh = sharding.create_mesh(data=-1)
    rows = []
    for length in lengths:
        predictions = -(-length * 3 // 10)
        batch = {"input_ids": np.ones((1, length), np.int32), "input_mask": np.ones((1, length), np.int32),
                 "segment_ids": np.zeros((1, length), np.int32), "next_sentence_labels": np.zeros((1,), np.int32),
                 "masked_lm_positions": np.arange(predictions, dtype=np.int32)[None],
                 "masked_lm_ids": np.ones((1, predictions), np.int32),
                 "masked_lm_weights": np.ones((1, predictions), np.float32)}
        init_params = lambda: model.init(jax.random.key(0), **pretrain.model_inputs(batch))["params"]
        abstract, shardings = trainer.state_shardings(init_params, optimizer, mesh)
        batch_shardings = {name: sharding.batch_sharding(mesh, value.ndim) for name, value in batch.items()}
        with sharding.activate(mesh):
            inputs = trainer.step_inputs(train, 0, mesh)
            step = trainer.jit_train_step(mesh, shardings, batch_shardings, objective=pretrain.objective(model),
                                          train_config=train)
            compiled, _ = trainer.compile_step(step, trainer.with_shardings(abstract, shardings), batch, inputs)
        memory = compiled.memory_analysis()
        state_bytes = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(abstract))
        seconds = None
        if repeats:
            with sharding.activate(mesh):
                state = jax.jit(lambda: trainer.new_state(nn.unbox(init_params()), optimizer),
                                out_shardings=shardings)()
                holder = [state]

                def run():
                    holder[0], metrics = compiled(holder[0], batch, inputs)
                    jax.block_until_ready(metrics)

                seconds = _time(run, repeats) / 1e3
        rows.append((length, seconds, memory.temp_size_in_bytes / 2**30, state_bytes / 2**30))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="512,2048,8192")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--encoder", action="store_true", help="time the whole modernbert-base encoder instead")
    parser.add_argument("--train", action="store_true", help="the modernbert-base pre-training step instead")
    parser.add_argument("--remat_policy", default="none", help="--train: the model's remat_policy")
    args = parser.parse_args()
    try:
        lengths = [int(n) for n in args.lengths.split(",")]
    except ValueError:
        parser.error(f"--lengths={args.lengths}: give token counts separated by commas (512,2048)")
    if min(lengths) < 1 or args.repeats < (0 if args.train else 1):
        parser.error("--lengths must be >= 1, --repeats >= 1 (0 with --train: memory only)")
    if args.train:
        print("| tokens | s per step | temporary GiB | state GiB |\n| ---: | ---: | ---: | ---: |")
        for length, seconds, temporary, state in train_rows(lengths, args.repeats, args.remat_policy):
            print(f"| {length:,} | {'-' if seconds is None else f'{seconds:.1f}'} | {temporary:.2f} | {state:.2f} |")
        return
    if args.encoder:
        print("| tokens | forward s | tokens/s | temporary GiB |\n| ---: | ---: | ---: | ---: |")
        for length, seconds, rate, memory in encoder_rows(lengths, args.repeats):
            print(f"| {length:,} | {seconds:.2f} | {rate:,.0f} | {memory:.2f} |")
        return
    print("| tokens | layer | ms per call | temporary MiB |\n| ---: | --- | ---: | ---: |")
    for length, name, milliseconds, memory in attention_rows(lengths, args.repeats):
        print(f"| {length:,} | {name} | {milliseconds:.1f} | {'' if memory != memory else f'{memory:.0f}'} |")


if __name__ == "__main__":
    main()

r"""Pre-training step speed on synthetic batches: step time, sequences/s, model FLOP/s, MFU, memory.

  python launch/benchmark.py --preset=base --batch_size=8 --seq_len=128 [--steps=N] [--config.key=value ...]
  python launch/benchmark.py --preset=base --batch_size=8 --seq_len=128 --compare   # + Hugging Face PyTorch
  python launch/benchmark.py --preset=large --batch_size=64 --seq_len=512 --pack_pairs=3 \
      --config.model.attention_impl=cudnn --config.model.attention_probs_dropout_prob=0

Runs real pre-training steps (the trainer's `train_step`: forward, backward, clipping,
AdamW, the non-finite guard) on synthetic batches after `--warmup` steps and prints a table
ending with one line `seq_per_s=<number>`. `--config.model.<field>` sets any BertConfig
field (unset = the preset's; dtype unset = bfloat16 on GPU/TPU, float32 on CPU),
`--config.train.<key>` the optimizer. `--pack_pairs=K` feeds packed rows (K NSP pairs of
random lengths per row, block-diagonal attention).

Model FLOPs (bertjax.metrics.pretraining_flops_per_sequence): 3 x the forward matmuls:
per layer the Q/K/V/output projections and the MLP (6 x 12 H^2 per token), the two
attention products (6 x 2 S H per token; packed rows: each pair's own block), the
pooler/NSP head per pair and the MLM head over the gathered predictions only. Peak
(its source printed): on TPU/GPU bertjax.metrics.peak_flops_per_device (the vendor's bf16
table; an unknown kind: a measured float32 matmul), on CPU a 2048^3 matmul measured in this
run (the best of three before and three after the steps) of float32 operands, or of bfloat16
operands with float32 sums where the model's matmul_precision is bfloat16 (by default on a
CPU with AMX-BF16; `--config.model.matmul_precision=default` for float32 products).

`--compare` also runs Hugging Face PyTorch `BertForPreTraining` (torch.optim.AdamW, eps
1e-6, weight decay 0.01, global-norm clip 1.0, the same shapes and dropout; under
torch.autocast(bfloat16) where bertjax multiplies bfloat16 operands, so both run at one
precision) in this process, alternating rounds with JAX so both see the same machine load,
and measures each framework's peak host memory in a fresh child process of this script
(`--memory_of`). A model BertForPreTraining cannot be (the modern encoder's switches) is
refused. The persistent compilation cache is off (compile time is a compile) unless
BERTJAX_COMPILATION_CACHE names a folder.
Needs `pip install -e .[bench]` (torch, transformers). On CPU, tcmalloc (Debian package
libtcmalloc-minimal4) gave JAX more sequences/s but a higher peak RSS (benchmarks/README.md):
  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 python launch/benchmark.py ...
"""

import dataclasses
import gc
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import host_memory  # noqa: E402
host_memory.configure()  # huge pages (a restart), kept freed memory: before any thread allocates
# "compile time" is a compile, not a read of an earlier run's program from the persistent cache
# (BERTJAX_COMPILATION_CACHE=<folder> turns it on again).
os.environ.setdefault("BERTJAX_COMPILATION_CACHE", "off")
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402
import ml_collections  # noqa: E402
from ml_collections import config_dict  # noqa: E402
import numpy as np  # noqa: E402

from bertjax.models.config import BertConfig  # noqa: E402


def _default_config() -> ml_collections.ConfigDict:
    from configs import pretrain

    config = ml_collections.ConfigDict()
    # Every BertConfig field, unset (None): the preset's value.
    config.model = ml_collections.ConfigDict(
        {f.name: config_dict.placeholder(type(f.default)) for f in dataclasses.fields(BertConfig)})
    config.train = pretrain.get_config("base").train
    config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    return config


_PRESET = flags.DEFINE_string("preset", "base", "BERT size: tiny, mini, small, medium, base, large.")
_BATCH = flags.DEFINE_integer("batch_size", 8, "Global batch (rows per step).", lower_bound=1)
_SEQ = flags.DEFINE_integer("seq_len", 128, "Sequence length.", lower_bound=8)
_PREDICTIONS = flags.DEFINE_integer("predictions", 0, "Masked positions per row (0: ceil(0.15 x seq_len), the "
                                    "original recipe's; the step has the NSP head whatever the preset: the modern "
                                    "recipe's 30% is ceil(0.3 x seq_len)).",
                                    lower_bound=0)
_PACK = flags.DEFINE_integer("pack_pairs", 0, "0: one pair per row, unpacked; K >= 1: packed rows of K pairs.",
                             lower_bound=0)
_STEPS = flags.DEFINE_integer("steps", 10, "Timed steps (per framework with --compare).", lower_bound=1)
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps after compiling.", lower_bound=0)
_COMPARE = flags.DEFINE_bool("compare", False, "Also run Hugging Face PyTorch BertForPreTraining.")
_PIPELINE = flags.DEFINE_bool("pipeline", True, "Also time the tf.data input pipeline (needs TensorFlow).")
_PROFILE = flags.DEFINE_string("profile_dir", "", "Write a jax.profiler trace of 3 steps here.")
_MEMORY_OF = flags.DEFINE_enum("memory_of", "", ["", "jax", "torch"],
                               "Internal: run only this framework and print its peak RSS.")
_CONFIG = cli.define_config_dict("config", _default_config(), "Model/optimizer overrides.")
# Batch sizes are --batch_size's; these train keys would be ignored here.
_BATCH_KEYS = ("global_batch_size", "batch_warmup_start", "batch_warmup_steps")


def _predictions() -> int:
    if _PREDICTIONS.value:
        return _PREDICTIONS.value
    return int(np.ceil(0.15 * _SEQ.value))


def bert_config_of(config: ml_collections.ConfigDict) -> BertConfig:
    """`--preset` with the `config.model` fields that are set."""

    from bertjax.models import config as bert_config

    values = {k: v for k, v in config.model.to_dict().items() if v is not None}
    return bert_config.resolve(values, preset=_PRESET.value, **bert_config.this_host())


def _reset_peak_rss() -> None:
    """Forget the peak RSS inherited from the parent (a forked child starts at the parent's)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_rss_mb() -> float:
    """This process's peak resident memory since start (or `_reset_peak_rss`), Linux."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def synthetic_batch(rng: np.random.Generator, batch: int, seq: int, predictions: int, vocab: int,
                    pairs_per_row: int = 0) -> dict[str, np.ndarray]:
    """Random full rows with the pipeline's features. pairs_per_row 0: one pair per row
    (segment A the first half); K >= 1: packed rows of K pairs of random lengths (>= 8)
    with per-pair positions, sequence_ids, cls_positions and [B, K] NSP labels/weights."""
    ids = rng.integers(1000, vocab, (batch, seq)).astype(np.int32)
    out = {"input_mask": np.ones((batch, seq), np.int32)}
    if pairs_per_row:
        cuts = np.sort(np.stack([rng.choice(np.arange(1, seq // 8), pairs_per_row - 1, replace=False) * 8
                                 for _ in range(batch)]), axis=1)
        starts = np.concatenate([np.zeros((batch, 1), np.int64), cuts], axis=1)
        columns = np.arange(seq)
        pair = np.stack([np.searchsorted(row, columns, side="right") - 1 for row in starts])  # [B, S]: 0..K-1
        start_of = np.take_along_axis(starts, pair, axis=1)
        ends = np.concatenate([starts[:, 1:], np.full((batch, 1), seq)], axis=1)
        middle = (start_of + np.take_along_axis(ends, pair, axis=1)) // 2
        out.update(position_ids=(columns - start_of).astype(np.int32), sequence_ids=(pair + 1).astype(np.int32),
                   segment_ids=(columns >= middle).astype(np.int32), cls_positions=starts.astype(np.int32),
                   next_sentence_labels=rng.integers(0, 2, (batch, pairs_per_row)).astype(np.int32),
                   next_sentence_weights=np.ones((batch, pairs_per_row), np.float32))
        np.put_along_axis(ids, starts, 101, axis=1)
        candidates = [np.setdiff1d(np.arange(seq), row) for row in starts]
    else:
        out.update(segment_ids=(np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0).astype(np.int32),
                   next_sentence_labels=rng.integers(0, 2, batch).astype(np.int32))
        ids[:, 0] = 101
        candidates = [np.arange(1, seq)] * batch
    positions = np.sort(np.stack([rng.choice(c, predictions, replace=False) for c in candidates]), axis=1)
    out.update(input_ids=ids, masked_lm_positions=positions.astype(np.int32),
               masked_lm_ids=np.take_along_axis(ids, positions, axis=1),
               masked_lm_weights=np.ones((batch, predictions), np.float32))
    return out


# ======================================================================================
# JAX: the trainer's step on synthetic batches.
# ======================================================================================

class JaxRun:
    """The compiled pre-training step, its state and a few synthetic batches on the mesh."""

    def __init__(self, config: ml_collections.ConfigDict, bert: BertConfig):
        import jax

        from bertjax import optim, sharding, pretrain, trainer
        from bertjax.metrics import mean_pretraining_flops
        from bertjax.models import BertForPreTraining

        self.jax = jax
        self.bert = bert
        train_cfg = config.train
        mesh = sharding.create_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
        rng = np.random.default_rng(0)
        host_batches = [synthetic_batch(rng, _BATCH.value, _SEQ.value, _predictions(), self.bert.vocab_size,
                                        pairs_per_row=_PACK.value) for _ in range(4)]
        self.flops_per_row = float(np.mean([mean_pretraining_flops(self.bert, _SEQ.value, _predictions(),
                                                                   batch.get("sequence_ids"))
                                            for batch in host_batches]))
        model = BertForPreTraining(self.bert)
        task = pretrain.objective(model)
        optimizer = optim.make_optimizer(train_cfg)
        first = host_batches[0]
        init_params = lambda: model.init(jax.random.key(0), **pretrain.model_inputs(first))["params"]
        abstract, shardings = trainer.state_shardings(init_params, optimizer, mesh)
        self.state, _ = trainer.initial_state(None, abstract, shardings, init_params=init_params,
                                              optimizer=optimizer, mesh=mesh)
        self.num_params = sum(x.size for x in jax.tree_util.tree_leaves(self.state.params))
        self.batches = [trainer.global_batch(b, mesh) for b in host_batches]
        batch_abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), first)
        batch_shardings = {name: sharding.batch_sharding(mesh, x.ndim) for name, x in first.items()}
        self.mesh, self.sharding = mesh, sharding
        with sharding.activate(mesh):
            self.step_inputs = trainer.step_inputs(train_cfg, 0, mesh)
            step = trainer.jit_train_step(mesh, shardings, batch_shardings, objective=task, train_config=train_cfg)
            self.step_fn, self.compile_seconds = trainer.compile_step(
                step, trainer.with_shardings(abstract, shardings), batch_abstract, self.step_inputs)
        self.count = 0

    def step(self) -> float:
        """One step, waited for; returns its loss."""
        with self.sharding.activate(self.mesh):
            batch = self.batches[self.count % len(self.batches)]
            self.state, metrics = self.step_fn(self.state, batch, self.step_inputs)
        self.count += 1
        return float(metrics["loss"])

    def timed(self, steps: int) -> list[float]:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            loss = self.step()
            times.append(time.perf_counter() - start)
            if not np.isfinite(loss):
                raise RuntimeError(f"non-finite loss {loss} at step {self.count}")
        return times

    def device_memory_mb(self) -> float | None:
        stats = self.jax.devices()[0].memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return None if peak is None else peak / 2**20


# ======================================================================================
# PyTorch: Hugging Face BertForPreTraining with the same shapes.
# ======================================================================================

_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}
_NOT_IN_HF_BERT = ("position_embedding", "norm_placement", "gated_mlp", "attention_window", "use_bias", "norm_bias",
                   "pooler", "token_transform")


def torch_bfloat16(bert: BertConfig) -> bool:
    """Whether the PyTorch side runs under torch.autocast(bfloat16): when bertjax's products take
    bfloat16 operands, so that both multiply at the same precision."""
    return bert.matmul_precision == "bfloat16" or bert.dtype == "bfloat16"


class TorchRun:
    """HF BertForPreTraining + AdamW + clipping on the same synthetic (unpacked) batches, under
    torch.autocast(bfloat16) where bertjax multiplies bfloat16 operands (`torch_bfloat16`)."""

    def __init__(self, bert: BertConfig):
        import torch
        import transformers

        self.torch, self.bfloat16 = torch, torch_bfloat16(bert)
        hf_config = transformers.BertConfig(
            vocab_size=bert.vocab_size, hidden_size=bert.hidden_size, num_hidden_layers=bert.num_hidden_layers,
            num_attention_heads=bert.num_attention_heads, intermediate_size=bert.intermediate_size,
            hidden_act=_HF_ACTIVATIONS[bert.hidden_act], hidden_dropout_prob=bert.hidden_dropout_prob,
            attention_probs_dropout_prob=bert.attention_probs_dropout_prob,
            max_position_embeddings=bert.max_position_embeddings, type_vocab_size=bert.type_vocab_size,
            layer_norm_eps=bert.layer_norm_eps)
        torch.manual_seed(0)
        self.model = transformers.BertForPreTraining(hf_config).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
        rng = np.random.default_rng(0)
        self.batches = []
        for _ in range(4):
            b = synthetic_batch(rng, _BATCH.value, _SEQ.value, _predictions(), bert.vocab_size)
            labels = np.full(b["input_ids"].shape, -100, np.int64)
            np.put_along_axis(labels, b["masked_lm_positions"], b["masked_lm_ids"], axis=1)
            self.batches.append(dict(
                input_ids=torch.tensor(b["input_ids"], dtype=torch.long),
                token_type_ids=torch.tensor(b["segment_ids"], dtype=torch.long),
                attention_mask=torch.tensor(b["input_mask"], dtype=torch.long),
                labels=torch.tensor(labels), next_sentence_label=torch.tensor(b["next_sentence_labels"],
                                                                               dtype=torch.long)))
        self.count = 0

    def step(self) -> float:
        batch = self.batches[self.count % len(self.batches)]
        self.count += 1
        self.optimizer.zero_grad(set_to_none=True)
        with self.torch.autocast("cpu", dtype=self.torch.bfloat16, enabled=self.bfloat16):
            loss = self.model(**batch).loss
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return float(loss.detach())

    def timed(self, steps: int) -> list[float]:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            self.step()
            times.append(time.perf_counter() - start)
        return times


# ======================================================================================
# Peak FLOP/s, input pipeline, memory of each framework alone.
# ======================================================================================

def _peak_flops(bfloat16_operands: bool) -> tuple[float, str]:
    """(peak FLOP/s per device, its source): metrics' on TPU/GPU; on CPU the best of three
    2048^3 matmuls of the products' operands (steadier than metrics' one short measurement)."""
    import jax

    from bertjax.metrics import measure_peak_flops, peak_flops_per_device

    if jax.default_backend() != "cpu":
        return peak_flops_per_device()
    rates = [measure_peak_flops(seconds=1.0, size=2048, bfloat16_operands=bfloat16_operands) for _ in range(3)]
    operands = "bf16-operand" if bfloat16_operands else "f32"
    return max(rates), (f"measured {operands} 2048^3 matmul, best of {', '.join(f'{r / 1e9:.0f}' for r in rates)} "
                        "GFLOP/s")


def _pipeline_rate(seq_len: int, batch_size: int, num_batches: int = 20) -> float | None:
    """Sequences/s of the real tf.data pipeline on the demo corpus; None without TensorFlow."""
    try:
        from bertjax.runtime import tf_cpu  # noqa: F401  (TensorFlow quiet and off the accelerators)
    except ImportError:
        return None
    from bertjax.data import pipelines
    from configs import pretrain

    data = pretrain.get_config("tiny").data
    data.max_seq_length, data.max_predictions_per_seq = seq_len, _predictions()
    with tempfile.TemporaryDirectory() as workdir:
        data.prepared_dir = os.path.join(workdir, "data")
        batches = pipelines.make_pipeline(data, workdir, batch_size=batch_size).batches()
        for _ in range(3):
            next(batches)
        start = time.perf_counter()
        for _ in range(num_batches):
            next(batches)
        return num_batches * batch_size / (time.perf_counter() - start)


def _child_peak_rss(framework: str) -> float:
    """Peak RSS (MB) of a fresh process of this script running only `framework`."""
    args = [a for a in sys.argv[1:] if not a.startswith(("--compare", "--memory_of", "--steps", "--pipeline"))]
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args, f"--memory_of={framework}",
                          "--steps=3", "--nopipeline"], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1].split("=")[1])


# ======================================================================================
# The table.
# ======================================================================================

def _columns(times: list[float], flops_per_row: float, peak: float, devices: int) -> dict[str, str]:
    """One framework's column of the table from its step times (seconds)."""
    step = statistics.median(times)
    tflops = flops_per_row * _BATCH.value / step / devices / 1e12
    return {"median step (ms)": f"{step * 1e3:.1f}",
            "step range (ms)": f"{min(times) * 1e3:.1f}..{max(times) * 1e3:.1f}",
            "timed steps": f"{len(times)} after {_WARMUP.value} warm-up",
            "sequences/s": f"{_BATCH.value / step:.2f}", "tokens/s": f"{_BATCH.value * _SEQ.value / step:.0f}",
            "model TFLOP/s per device": f"{tflops:.3f}", "MFU": f"{tflops * 1e12 / peak:.1%}"}


def main(_):
    config = _CONFIG.value
    if _MEMORY_OF.value:  # a child of --compare: one framework, its own peak RSS
        _reset_peak_rss()
        bert = bert_config_of(config)
        run = JaxRun(config, bert) if _MEMORY_OF.value == "jax" else TorchRun(bert)
        run.timed(_STEPS.value)
        print(f"peak_rss_mb={_peak_rss_mb():.1f}")
        return
    if _PACK.value > _SEQ.value // 8:  # pairs of 8 tokens at least (synthetic_batch)
        raise ValueError(f"--pack_pairs={_PACK.value}: rows of --seq_len={_SEQ.value} hold at most "
                         f"{_SEQ.value // 8} pairs")
    unmaskable = max(_PACK.value, 1)  # each pair's [CLS]
    if _predictions() > _SEQ.value - unmaskable:
        raise ValueError(f"--predictions={_predictions()}: rows of --seq_len={_SEQ.value} have "
                         f"{_SEQ.value - unmaskable} positions to mask")
    if _PROFILE.value:  # checked before the run, which it follows
        from bertjax.runtime import fileio

        fileio.makedirs(_PROFILE.value)
    changed = [key for key in _BATCH_KEYS if config.train[key] != _default_config().train[key]]
    if changed:
        raise ValueError(f"config.train.{changed[0]}: the benchmark's batch is --batch_size rows every step")
    bert = bert_config_of(config)  # once: a warning from resolving it prints once
    if _COMPARE.value:  # checked before the JAX step compiles
        plain = BertConfig()
        other = [f"{name}={getattr(bert, name)!r}" for name in _NOT_IN_HF_BERT
                 if getattr(bert, name) != getattr(plain, name)]
        if other:
            raise ValueError(f"--compare runs Hugging Face's BertForPreTraining, which has no {', '.join(other)}: "
                             "it would time another model")
        if _PACK.value:
            raise ValueError("--compare runs unpacked batches only; leave --pack_pairs at 0")
        missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
        if missing:
            raise ValueError(f"--compare needs {' and '.join(missing)}: pip install -e '.[bench]'")
    import jax

    from bertjax import optim, sharding

    optim.validate_train_config(config.train)  # before the step compiles, as the launchers do
    mesh_shape = sharding.mesh_shape(jax.device_count(), config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    sharding.check_training_mesh(mesh_shape)  # (a step timed on a mesh whose gradients are wrong is no figure)
    data, fsdp, _ = mesh_shape
    accum = config.train.grad_accum_steps
    if not isinstance(accum, int) or isinstance(accum, bool) or accum < 1:
        raise ValueError(f"config.train.grad_accum_steps must be a positive int, got {accum!r}")
    if _BATCH.value % (data * fsdp * accum):  # (the batch named first: it is the value given; a walkthrough)
        raise ValueError(f"--batch_size={_BATCH.value} must be divisible by the data-parallel size (mesh data x fsdp "
                         f"= {data * fsdp}) times config.train.grad_accum_steps={accum}")
    bert.check_runnable(_SEQ.value, "--seq_len")  # (cuDNN's on a CPU: a traceback at the compile)
    jax_run = JaxRun(config, bert)
    batch, seq = _BATCH.value, _SEQ.value
    print(f"BERT-{_PRESET.value} ({jax_run.num_params / 1e6:.1f}M params), batch {batch}, length {seq}, "
          f"{_predictions()} predictions/row, pack_pairs {_PACK.value}, dtype {bert.dtype}, "
          f"matmul_precision {bert.matmul_precision}, "
          f"attention {bert.attention_impl}, scan {bert.scan_layers}, remat {bert.remat_policy}; "
          f"{jax.device_count()} x {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")
    bf16_products = bert.matmul_precision == "bfloat16"
    peak, peak_source = _peak_flops(bf16_products)
    jax_run.timed(_WARMUP.value)
    torch_run = None
    if _COMPARE.value:
        torch_run = TorchRun(bert)
        torch_run.timed(_WARMUP.value)
    if _PROFILE.value:
        with jax.profiler.trace(_PROFILE.value):
            jax_run.timed(3)
    # Alternating rounds: a burst of load from the machine's other users hits both.
    rounds = 3 if torch_run else 1
    jax_times, torch_times = [], []
    for _ in range(rounds):
        jax_times += jax_run.timed(max(1, _STEPS.value // rounds))
        if torch_run:
            torch_times += torch_run.timed(max(1, _STEPS.value // rounds))
    if jax.default_backend() == "cpu":  # the matmul rate again after the steps: the better of the two
        peak, peak_source = max((peak, peak_source), _peak_flops(bf16_products))

    flops_per_row, devices = jax_run.flops_per_row, jax.device_count()
    ours = _columns(jax_times, flops_per_row, peak, devices)
    theirs = _columns(torch_times, flops_per_row, peak, devices) if torch_run else {}
    rows = {"compile time (s)": (f"{jax_run.compile_seconds:.1f}", "-")}
    rows.update({name: (value, theirs.get(name, "")) for name, value in ours.items()})
    device_mb = jax_run.device_memory_mb()
    if jax.default_backend() != "cpu" and device_mb is not None:
        rows["peak device memory (MB)"] = (f"{device_mb:.0f}", "")
    if torch_run:
        del jax_run, torch_run
        gc.collect()
        rows["peak host RSS, alone (MB)"] = (f"{_child_peak_rss('jax'):.0f}", f"{_child_peak_rss('torch'):.0f}")
    else:
        rows["peak host RSS (MB)"] = (f"{_peak_rss_mb():.0f}", "")
    torch_column = f"HF PyTorch{' bf16 autocast' if torch_bfloat16(bert) else ''}"
    print(f"{'':28} {'bertjax (JAX)':>18}" + (f" {torch_column:>24}" if _COMPARE.value else ""))
    for name, (mine, reference) in rows.items():
        print(f"{name:28} {mine:>18}" + (f" {reference:>24}" if _COMPARE.value else ""))
    print(f"model GFLOP per row {flops_per_row / 1e9:.2f}; peak {peak / 1e12:.3f} TFLOP/s per device ({peak_source})")
    if _COMPARE.value:
        print(f"bertjax / PyTorch sequences/s: {statistics.median(torch_times) / statistics.median(jax_times):.2f}x")
    if _PIPELINE.value:
        rate = _pipeline_rate(seq, max(batch, 32))
        print("input pipeline: " + ("TensorFlow not installed" if rate is None else
                                    f"{rate:.0f} sequences/s (demo corpus, tf.data, length {seq}, this host)"))
    print(f"seq_per_s={batch / statistics.median(jax_times):.3f}")


if __name__ == "__main__":
    cli.run(main)

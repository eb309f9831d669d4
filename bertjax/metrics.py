"""Training metrics: model FLOPs, accelerator peaks, and one writer for console, JSONL and TensorBoard."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.runtime import event_files, fileio

from bertjax.models.config import BertConfig

# Dense bf16 peak FLOP/s per TPU chip or per GPU, from the vendors' data sheets.
PEAK_FLOPS_PER_CHIP = {
    "TPU v2": 45e12,
    "TPU v3": 123e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v5": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "NVIDIA H100": 989e12,  # SXM; the PCIe and NVL cards run at lower clocks and power:
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H100 NVL": 835e12,
    "NVIDIA H200": 989e12,
    "NVIDIA H200 NVL": 835e12,
    "NVIDIA A100": 312e12,
    "NVIDIA L4": 121e12,
}
# A TPU v2 or v3 chip holds two TensorCores and JAX shows each as a device. From v4 on a
# chip is one device: v4 and v5p join their two cores into one (megacore), v5e and v6e
# have one core. GPUs are one device each.
DEVICES_PER_CHIP = {"TPU v2": 2, "TPU v3": 2}


def pretraining_flops_per_sequence(config: BertConfig, seq_len: int, num_predictions: int,
                                   pair_lengths: tuple[int, ...] | None = None,
                                   next_sentence_prediction: bool = True) -> float:
    """Model FLOPs of one forward+backward (3x forward) pass for one pre-training row.

    Counts matmuls only: per layer QKV + output projections and the MLP over all seq_len
    positions (6 x 12 H^2 per token at intermediate 4H; a gated MLP has three products), the
    two attention products (6 x 2 S H per token; a local layer's S is the keys in its window);
    the pooler and NSP head (none without `next_sentence_prediction`); the MLM head on the *gathered* masked
    positions only. A packed row of pairs with `pair_lengths` counts the attention each
    pair has inside its own block (sum of l^2, not seq_len^2) and one pooler/NSP per pair.
    Rematerialisation adds hardware FLOPs but no model FLOPs.
    """
    h, i, s, p = config.hidden_size, config.intermediate_size, seq_len, num_predictions
    pair_lengths = (seq_len,) if pair_lengths is None else pair_lengths
    half = config.attention_window // 2
    mlp_products = 3 if config.gated_mlp else 2
    total = 0
    for layer in range(config.num_hidden_layers):
        # A local layer's query sees the keys within `half` positions (the band's query-key pairs).
        attended = sum(length * length if config.is_global_layer(layer) or half >= length - 1
                       else length * (2 * half + 1) - half * (half + 1) for length in pair_lengths)
        total += 2 * s * (4 * h * h + mlp_products * h * i) + 2 * 2 * attended * h
    heads = 2 * p * (h * h + h * config.vocab_size)
    if next_sentence_prediction:
        heads += len(pair_lengths) * (2 * h * h + 2 * h * 2)
    return 3.0 * (total + heads)


def mean_pretraining_flops(config: BertConfig, seq_len: int, num_predictions: int, sequence_ids: Any = None,
                           next_sentence_prediction: bool = True) -> float:
    """`pretraining_flops_per_sequence` averaged over a batch's rows, each row with its blocks'
    lengths: `sequence_ids` <int>[B, L] (1, 2, ... per packed pair or document that attends
    within itself, 0 = padding); None: whole rows."""
    if sequence_ids is None:
        return pretraining_flops_per_sequence(config, seq_len, num_predictions,
                                              next_sentence_prediction=next_sentence_prediction)
    return float(np.mean([pretraining_flops_per_sequence(config, seq_len, num_predictions,
                                                         tuple(int(n) for n in np.bincount(row)[1:]),
                                                         next_sentence_prediction)
                          for row in np.asarray(sequence_ids)]))


def measure_peak_flops(seconds: float = 0.5, size: int = 1024, bfloat16_operands: bool = False) -> float:
    """FLOP/s of a matmul loop on the default device, the 'peak' used on CPU: float32
    operands, or `bfloat16_operands` with float32 sums (matmul_precision="bfloat16")."""
    a = jnp.ones((size, size), jnp.bfloat16 if bfloat16_operands else jnp.float32)
    matmul = jax.jit(lambda x: jnp.dot(x, x, preferred_element_type=jnp.float32))
    matmul(a).block_until_ready()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        matmul(a).block_until_ready()
        count += 1
    return 2.0 * size**3 * count / (time.perf_counter() - start)


def peak_flops_per_device(bfloat16_operands: bool = False) -> tuple[float, str]:
    """(peak FLOP/s of one JAX device, where it came from) for this process's first device;
    a device not in the table measures a matmul of the products' operands (see measure_peak_flops)."""
    kind = jax.devices()[0].device_kind
    for name in sorted(PEAK_FLOPS_PER_CHIP, key=len, reverse=True):
        if kind.startswith(name):
            per_chip = DEVICES_PER_CHIP.get(name, 1)
            share = f", 1/{per_chip} of a chip" if per_chip > 1 else ""
            return PEAK_FLOPS_PER_CHIP[name] / per_chip, f"table ({kind}{share})"
    operands = "bf16-operand" if bfloat16_operands else "f32"
    return measure_peak_flops(bfloat16_operands=bfloat16_operands), f"measured {operands} matmul ({kind})"


def _rows_up_to(path: str, step: int, redone: str = "") -> list[str]:
    """The lines of the JSONL file at `path` (local or gs://) of steps up to `step`, without a
    line a killed run left half-written, nor (`redone`, a prefix) rows at `step` of the metrics
    this run logs again there; a whole last row a full disk left without its newline gets one
    (the next row would be appended to it). No lines at step 0: a run that starts there starts
    over, its step-0 evaluation included."""
    if not fileio.exists(path) or step == 0:
        return []

    def keep(line: str) -> bool:
        try:
            row = json.loads(line)
        except ValueError:
            return False
        at = row.get("step", 0)
        return at < step or at == step and not (redone and any(key.startswith(redone) for key in row))

    lines = fileio.read_bytes(path).decode("utf-8").splitlines(keepends=True)
    return [line if line.endswith("\n") else line + "\n" for line in lines if keep(line)]


class MetricsWriter:
    """Writes scalars to DIR/metrics.jsonl, TensorBoard event files in DIR/tensorboard, and the console.

    Only the first process writes; the others keep nothing. A run that resumes at
    `start_step` first drops the rows and TensorBoard events an interrupted run logged after
    it (they belong to steps that will be trained again), so both hold one timeline. Local files
    are appended to; on gs://, which cannot append, both are rewritten whole at most every
    REMOTE_WRITE_SECONDS (GCS takes about one write a second to an object) and at close.
    """

    REMOTE_WRITE_SECONDS = 30.0

    def __init__(self, workdir: str, *, enabled: bool = True, start_step: int = 0, redone: str = ""):
        """redone: the prefix of metrics the run logs again at `start_step` (an evaluation a stop
        put off, which a run killed after logging it owes still): their earlier rows go."""
        self.enabled = enabled
        if not enabled:
            return
        fileio.makedirs(workdir)
        self.path = fileio.join(workdir, "metrics.jsonl")
        self._rows = _rows_up_to(self.path, start_step, redone)
        fileio.write_bytes(self.path, "".join(self._rows).encode("utf-8"))
        self._jsonl = None if fileio.is_remote(self.path) else open(self.path, "a", encoding="utf-8")
        self._written = time.monotonic()
        event_files.trim(fileio.join(workdir, "tensorboard"), start_step, redone)
        self._events = event_files.EventFileWriter(fileio.join(workdir, "tensorboard"))

    def write(self, step: int, scalars: dict[str, Any], *, prefix: str = "") -> None:
        if not self.enabled:
            return
        values = {f"{prefix}{k}": float(np.asarray(v)) for k, v in scalars.items()}
        row = json.dumps({"step": step, **values}) + "\n"
        if self._jsonl is None:
            self._rows.append(row)
            if time.monotonic() - self._written > self.REMOTE_WRITE_SECONDS:
                self._write_remote()
        else:
            self._jsonl.write(row)
            self._jsonl.flush()
        self._events.add_scalars(step, values)

    def flush(self) -> None:
        """Writes a gs:// workdir's metrics.jsonl and TensorBoard events now (local ones are written row by row)."""
        if self.enabled and self._jsonl is None:
            self._write_remote()

    def console(self, line: str) -> None:
        if self.enabled:
            print(line, file=sys.stdout, flush=True)

    def close(self) -> None:
        if self.enabled:
            if self._jsonl is not None:
                self._jsonl.close()
            else:
                self._write_remote()
            self._events.close()

    def _write_remote(self) -> None:
        fileio.write_bytes(self.path, "".join(self._rows).encode("utf-8"))
        self._events.flush()
        self._written = time.monotonic()

"""Tests for bertjax.metrics: per-device peaks (TPU v2/v3 devices are half a chip), model
FLOPs against a hand count, and the JSONL and TensorBoard files MetricsWriter writes."""

import glob
import json
import os
import time
import types

import jax
import numpy as np
import pytest
import tensorflow as tf

from bertjax import metrics
from bertjax.models import BertConfig


@pytest.mark.parametrize("kind, peak, source", [
    ("TPU v2", 22.5e12, "table (TPU v2, 1/2 of a chip)"),  # 45 TFLOP/s per chip, two devices
    ("TPU v3", 61.5e12, "table (TPU v3, 1/2 of a chip)"),  # 123 per chip, two devices
    ("TPU v4", 275e12, "table (TPU v4)"),                  # megacore: one device per chip
    ("TPU v5 lite", 197e12, "table (TPU v5 lite)"),
    ("TPU v5", 459e12, "table (TPU v5)"),                  # v5p
    ("TPU v6 lite", 918e12, "table (TPU v6 lite)"),
    ("NVIDIA H100 80GB HBM3", 989e12, "table (NVIDIA H100 80GB HBM3)"),
    ("NVIDIA H100 PCIe", 756e12, "table (NVIDIA H100 PCIe)"),  # not the SXM's peak (a review)
    ("NVIDIA H100 NVL", 835e12, "table (NVIDIA H100 NVL)"),
    ("NVIDIA H200 NVL", 835e12, "table (NVIDIA H200 NVL)"),  # the SXM's 989 made its MFU 16% low
])
def test_peak_flops_per_device(monkeypatch, kind, peak, source):
    monkeypatch.setattr(jax, "devices", lambda: [types.SimpleNamespace(device_kind=kind)])
    assert metrics.peak_flops_per_device() == (peak, source)


def test_unknown_devices_measure_their_peak(monkeypatch):
    monkeypatch.setattr(metrics, "measure_peak_flops", lambda bfloat16_operands: 2e9 if bfloat16_operands else 1e9)
    monkeypatch.setattr(jax, "devices", lambda: [types.SimpleNamespace(device_kind="Some CPU")])
    assert metrics.peak_flops_per_device() == (1e9, "measured f32 matmul (Some CPU)")
    assert metrics.peak_flops_per_device(bfloat16_operands=True) == (2e9, "measured bf16-operand matmul (Some CPU)")


def test_the_measured_peak_is_of_the_products_operands(monkeypatch):
    """2 n^3 FLOPs a product over the time the loop took (a clock that ticks 10 ms a reading:
    start, four products read within 50 ms, the end), of float32 or bfloat16 operands, summed
    in float32 either way."""
    seen, dot = [], jax.numpy.dot
    monkeypatch.setattr(jax.numpy, "dot", lambda x, y, **kw: (seen.append((x.dtype, kw["preferred_element_type"])),
                                                               dot(x, y, **kw))[1])
    for bfloat16_operands, operands in ((False, jax.numpy.float32), (True, jax.numpy.bfloat16)):
        ticks = iter(range(100))
        monkeypatch.setattr(metrics, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks) / 100))
        seen.clear()
        peak = metrics.measure_peak_flops(seconds=0.05, size=64, bfloat16_operands=bfloat16_operands)
        assert peak == pytest.approx(2 * 64**3 * 4 / 0.06)
        assert seen == [(operands, jax.numpy.float32)]  # traced once


def test_pretraining_flops_per_sequence_by_hand():
    h, i, layers, vocab, s, p = 4, 8, 2, 10, 6, 2  # hidden, intermediate, layers, vocab, length, predictions
    config = BertConfig(vocab_size=vocab, hidden_size=h, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=i)
    # A matmul [m, k] x [k, n] is 2*m*k*n FLOPs. Per layer, for the s tokens of a sequence:
    qkvo = 4 * (2 * s * h * h)          # 4 * 2*6*4*4 = 768: query, key, value and output projections
    scores = 2 * s * s * h              # 2*6*6*4 = 288: Q K^T over all heads (heads * head_dim = h)
    mix = 2 * s * s * h                 # 288: the attention-weighted sum of values
    mlp = 2 * s * h * i + 2 * s * i * h  # 384 + 384: up and down projection
    per_layer = qkvo + scores + mix + mlp
    assert per_layer == 768 + 288 + 288 + 768 == 2112
    pooler = 2 * h * h                  # 32: one [CLS] token
    nsp = 2 * h * 2                     # 16: two classes
    mlm = 2 * p * h * h + 2 * p * h * vocab  # 64 + 160: transform and tied decoder at the p masked positions
    forward = layers * per_layer + pooler + nsp + mlm
    assert forward == 4224 + 32 + 16 + 224 == 4496
    # Backward is twice the forward (gradients for inputs and for weights).
    assert metrics.pretraining_flops_per_sequence(config, seq_len=s, num_predictions=p) == 3 * forward == 13488
    # Masked LM alone (the modern recipe) has no pooler or NSP head to run.
    assert metrics.pretraining_flops_per_sequence(config, seq_len=s, num_predictions=p,
                                                  next_sentence_prediction=False) == 3 * (forward - pooler - nsp)


def test_packed_rows_count_the_attention_inside_their_blocks():
    """A row of two packed pairs (or documents that attend within themselves) runs each block's
    attention, not the whole row's, and one NSP head a pair: the mean over a batch's rows, from
    their sequence_ids (0: padding)."""
    config = BertConfig(vocab_size=10, hidden_size=4, num_hidden_layers=2, num_attention_heads=2, intermediate_size=8)
    flops = lambda blocks: metrics.pretraining_flops_per_sequence(config, 6, 2, blocks)  # noqa: E731
    sequence_ids = np.array([[1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 0, 0]])
    assert metrics.mean_pretraining_flops(config, 6, 2, sequence_ids) == (flops((3, 3)) + flops((4,))) / 2
    assert flops((3, 3)) < flops(None)  # 2 x 3^2 of attention, not 6^2 (the by-hand count above)
    assert metrics.mean_pretraining_flops(config, 6, 2, None, next_sentence_prediction=False) == \
        metrics.pretraining_flops_per_sequence(config, 6, 2, next_sentence_prediction=False)


def test_a_resumed_run_drops_the_rows_logged_after_its_checkpoint(tmp_path):
    rows = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5}, {"step": 2, "eval_loss": 2.6}, {"step": 3, "loss": 2.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "lo')
    writer = metrics.MetricsWriter(str(tmp_path), start_step=2)  # resumed from the step-2 checkpoint
    writer.write(3, {"loss": 1.9})
    writer.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == rows[:3] + [{"step": 3, "loss": 1.9}]

    # Killed before its first checkpoint: the rerun starts over (its step-0 evaluation too).
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "eval_accuracy": 0.5}\n{"step": 1, "loss": 3.0}\n')
    writer = metrics.MetricsWriter(str(tmp_path), start_step=0)
    writer.write(0, {"eval_accuracy": 0.5})
    writer.close()
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 0, "eval_accuracy": 0.5}\n'

    # A whole last row without its newline (a full disk cut the write just before it): the next
    # row was appended to it, and both were lost at the next resume (a review).
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.5}')
    writer = metrics.MetricsWriter(str(tmp_path), start_step=2)
    writer.write(3, {"loss": 2.0})
    writer.close()
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [
        {"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5}, {"step": 3, "loss": 2.0}]


def _scalar_events(directory) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in `directory`'s event files, in file order."""
    return [(value.tag, event.step, float(tf.make_ndarray(value.tensor)))
            for path in sorted(glob.glob(os.path.join(glob.escape(str(directory)), "events.out.tfevents.*")))
            for event in tf.compat.v1.train.summary_iterator(path) for value in event.summary.value]


def test_a_resumed_run_drops_the_tensorboard_events_logged_after_its_checkpoint(tmp_path):
    workdir = tmp_path / "run[1]*"  # glob characters in the name are the name
    writer = metrics.MetricsWriter(str(workdir))
    writer.write(0, {"accuracy": 0.5}, prefix="eval_")
    for step in (1, 2, 3, 4):
        writer.write(step, {"loss": 4.0 - step})
    writer.close()
    [first] = glob.glob(glob.escape(str(workdir / "tensorboard")) + "/events.out.tfevents.*")
    with open(first, "ab") as f:  # a killed run's last record, cut short
        f.write(b"\x17\x00\x00")
    time.sleep(1.1)  # event files are named by the second they were opened in
    writer = metrics.MetricsWriter(str(workdir), start_step=2)  # resumed from the step-2 checkpoint
    for step in (3, 4):
        writer.write(step, {"loss": 1.0 / step})
    writer.close()
    assert _scalar_events(workdir / "tensorboard") == [
        ("eval_accuracy", 0, 0.5), ("loss", 1, 3.0), ("loss", 2, 2.0), ("loss", 3, pytest.approx(1 / 3)),
        ("loss", 4, 0.25)]
    assert sorted(os.listdir(workdir / "tensorboard"))[0] == os.path.basename(first)  # trimmed in place

    time.sleep(1.1)
    metrics.MetricsWriter(str(workdir), start_step=0).close()  # starting over: every step again
    assert _scalar_events(workdir / "tensorboard") == []


def test_a_run_that_owes_an_evaluation_logs_it_once(tmp_path):
    """Stopped at an evaluation step S, a run saves S with the evaluation owed; its resume logs
    that evaluation at S first. Killed before its next checkpoint, the next resume restores S,
    owes it still and logs it again: metrics.jsonl and TensorBoard held it twice (a review)."""
    writer = metrics.MetricsWriter(str(tmp_path))
    for step in (1, 2):
        writer.write(step, {"loss": 3.0 - step})
    writer.close()
    time.sleep(1.1)  # event files are named by the second they were opened in
    for run in range(2):  # the resume that is killed, then the one after it
        writer = metrics.MetricsWriter(str(tmp_path), start_step=2, redone="eval_")
        writer.write(2, {"accuracy": 0.5 + run / 10}, prefix="eval_")
        writer.write(3, {"loss": 0.5})
        writer.close()
        time.sleep(1.1)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}, {"step": 2, "eval_accuracy": 0.6},
                    {"step": 3, "loss": 0.5}]
    assert _scalar_events(tmp_path / "tensorboard") == [
        ("loss", 1, 2.0), ("loss", 2, 1.0), ("eval_accuracy", 2, pytest.approx(0.6)), ("loss", 3, 0.5)]


def test_metrics_writer_files_read_back(tmp_path):
    writer = metrics.MetricsWriter(str(tmp_path))
    writer.write(1, {"loss": 2.5, "learning_rate": np.float32(1e-4)})
    writer.write(2, {"loss": jax.numpy.asarray(2.0)})
    writer.write(2, {"mlm_accuracy": 0.25}, prefix="eval_")
    writer.close()
    writer.close()  # a second close (a loop's `finally` after its own) does nothing

    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [{"step": 1, "loss": 2.5, "learning_rate": pytest.approx(1e-4)}, {"step": 2, "loss": 2.0},
                     {"step": 2, "eval_mlm_accuracy": 0.25}]

    [events_file] = glob.glob(str(tmp_path / "tensorboard" / "events.out.tfevents.*"))
    scalars = []
    for event in tf.compat.v1.train.summary_iterator(events_file):
        for value in event.summary.value:
            assert value.metadata.plugin_data.plugin_name == "scalars"  # what TensorBoard's scalar tab reads
            scalars.append((event.step, value.tag, float(tf.make_ndarray(value.tensor))))
    assert scalars == [(1, "loss", 2.5), (1, "learning_rate", pytest.approx(1e-4)), (2, "loss", 2.0),
                       (2, "eval_mlm_accuracy", 0.25)]


def _events(path) -> list:
    """The Event protos of an event file, their wall times zeroed."""
    events = list(tf.compat.v1.train.summary_iterator(str(path)))
    for event in events:
        event.wall_time = 0.0
    return events


def test_event_files_hold_what_tensorflows_summary_writer_writes(tmp_path):
    """bertjax.runtime.event_files encodes Events by hand (no TensorFlow in a fine-tuning run):
    the same protos tf.summary.write makes for the same scalars (steps 0 and past 2^31, tags
    outside ASCII, extreme floats: beyond float32's range an infinity, as TensorFlow's), and
    trimming reads files TensorFlow wrote."""
    from bertjax.runtime import event_files

    scalars = [(0, {"eval_accuracy": 0.5}), (1, {"loss": -1.5, "λ_rate": 1e-30}),
               (2**33 + 5, {"big": 3.4e38, "beyond_float32": 1e39, "nan": float("nan")})]
    with tf.summary.create_file_writer(str(tmp_path / "tf")).as_default():
        for step, values in scalars:
            for tag, value in values.items():
                tf.summary.write(tag, tf.constant(value, tf.float32), step=step, metadata=tf.compat.v1.SummaryMetadata(
                    plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars")).SerializeToString())
    ours = event_files.EventFileWriter(str(tmp_path / "ours"))
    for step, values in scalars:
        ours.add_scalars(step, values)
    ours.close()
    [theirs] = glob.glob(str(tmp_path / "tf" / event_files.FILE_PATTERN))
    expected = _events(theirs)
    assert len(expected) == 7 and expected[0].source_metadata.writer == "tensorflow.core.util.events_writer"
    expected[0].source_metadata.writer = event_files.WRITER  # the version event names its writer; 6 scalars
    ours_events = _events(ours.path)
    assert [str(event) for event in ours_events] == [str(event) for event in expected]  # (NaN != NaN as a float)

    with open(theirs, "ab") as f:  # a killed run's last record, cut short
        f.write(b"\x17\x00\x00")
    event_files.trim(str(tmp_path / "tf"), 1)
    assert [(event.step, value.tag) for event in _events(theirs) for value in event.summary.value] == [
        (0, "eval_accuracy"), (1, "loss"), (1, "λ_rate")]

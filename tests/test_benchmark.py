"""launch/benchmark.py runs real steps end to end (tiny model, packed rows) and prints its
table ending in `seq_per_s=<number>`; a misspelt config key is one error line;
benchmarks/finetune_packing.py prints its comparison; benchmarks/trace_summary.py reads a
profiled run. (It times
nothing here: the numbers are the benchmark's business, not a test's.)"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = [sys.executable, os.path.join(ROOT, "launch", "benchmark.py"), "--preset=tiny", "--batch_size=4",
           "--seq_len=32", "--steps=1", "--warmup=1", "--nopipeline"]


def _run(*args):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    return subprocess.run([*COMMAND, *args], env=env, capture_output=True, text=True, timeout=600)


def test_packed_bf16_run_prints_the_table():
    result = _run("--pack_pairs=2", "--config.model.dtype=bfloat16", "--config.model.scan_layers=true")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert "pack_pairs 2, dtype bfloat16" in lines[0] and "scan True" in lines[0]
    for row in ("compile time (s)", "median step (ms)", "sequences/s", "model TFLOP/s per device", "MFU",
                "peak host RSS (MB)"):
        assert any(line.startswith(row) for line in lines), row
    assert lines[-1].startswith("seq_per_s=") and float(lines[-1].split("=")[1]) > 0


def test_compare_without_pytorch_is_one_error_line(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None  # as if not installed\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([*COMMAND, "--compare"], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("error: --compare needs torch") and "pip install -e '.[bench]'" in lines[0]


def test_a_profiled_run_is_summarised_by_op_kind(tmp_path):
    result = _run(f"--profile_dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "trace_summary.py"), str(tmp_path),
                              "--top=5"], capture_output=True, text=True, timeout=300)
    assert summary.returncode == 0, summary.stderr[-3000:]
    lines = summary.stdout.splitlines()
    span, busy = (float(lines[1].split(word)[1].split()[0]) for word in (" span ", " busy "))
    assert 0 < busy <= span
    matmul = next(line for line in lines if line.startswith("matmul "))  # the kinds' table
    assert float(matmul.split()[1]) > 0 and "op (instances)" in summary.stdout


def test_misspelt_config_key_is_named():
    result = _run("--config.model.hiden_size=64")
    assert result.returncode != 0 and "hiden_size" in result.stderr


def test_finetune_packing_benchmark_prints_its_table():
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "finetune_packing.py"), "--preset=tiny", "--steps=4",
               "--log_every=2", "--pack=16", "--examples=400"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-3].startswith("batches") and lines[-2].startswith("buckets + length grouping")
    assert lines[-1].startswith("packed, up to 16 per row") and lines[-1].endswith("x")

#!/usr/bin/env bash
# The GPU rows of benchmarks/README.md on one GPU, the most wanted first, inside a time budget
# (needs python3 with jax[cuda], flax, optax, orbax-checkpoint, ml_collections, tokenizers and
# sentencepiece, which bertjax's tokenization imports; TensorFlow is not needed; wheels in .whl/
# (SUITE_WHEELS, default .whl) are installed for its runs first where python lacks
# ml_collections, as a bare image does: benchmarks/README.md):
#   bash benchmarks/gpu_suite.sh [section ...]
# Sections: large profile packed check base compile triton slowcompile; none: all but
# slowcompile, in that order (what a short GPU session should get first comes first: the
# BERT-large step at 128 with cuDNN attention). Before any run it checks that python imports
# bertjax and that JAX sees the GPU (a CPU fallback would spend the budget on CPU runs).
# SUITE_BUDGET (seconds, default 540: one 10-minute device call with room to spare): a run
# starts only while MIN_RUN (default 150) seconds of it are left, and is stopped at the budget's
# end or after RUN_TIMEOUT (default 300) seconds. One BERT-large run takes about 120 s on an
# H100/H200, about 50 of them compiling; BERT-base with the XLA attention compiled for minutes.
# Each run's output goes to $WORK/<run>.txt (default /tmp/bertjax_gpu); summary.md (one row a
# run: compile, median step, seq/s, MFU, memory, or why it did not run) and runs.txt (every
# run's output) go to $OUT where it is set (the device tool brings that folder back), else $WORK.
# Without a GPU (nvidia-smi lists none) it stops at once, unless SUITE_ANY_BACKEND is set; it
# exits 1 when no run exited 0, or when no benchmark run timed a step. It runs from the
# repository's root: a relative PYTHON is read from there.
set -uo pipefail
start=$SECONDS  # (the budget counts the install and the check below too)
sections=${*:-large profile packed check base compile triton}
known=" check profile packed large base compile triton slowcompile "
for section in $sections; do  # all checked first: a typo must cost no device time, nor the last summary
  if [[ "$known" != *" $section "* ]]; then
    echo "unknown section $section (large, profile, packed, check, base, compile, triton, slowcompile)" >&2
    exit 2
  fi
done
# On a CPU every cuDNN run fails, and the others spend the budget for no GPU figure.
if [[ -z ${SUITE_ANY_BACKEND:-} ]] && ! nvidia-smi -L > /dev/null 2>&1; then
  echo "no GPU: nvidia-smi lists none; gpu_suite.sh times NVIDIA GPUs (SUITE_ANY_BACKEND set runs it anyway)" >&2
  exit 2
fi
work=$(realpath -m "${WORK:-/tmp/bertjax_gpu}")
results=$(realpath -m "${OUT:-$work}")
cd "$(dirname "$0")/.." || exit 2  # (launch/ and benchmarks/ are named from the repository's root)
mkdir -p "$work" "$results"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1  # a run stopped at its limit keeps what it printed
wheels=${SUITE_WHEELS:-.whl}  # (carried to a bare image: benchmarks/README.md)
if compgen -G "$wheels/*.whl" > /dev/null && ! $py -c 'import ml_collections' > /dev/null 2>&1; then
  python3 -m pip install -q --upgrade --no-index --no-deps --target "$work/site" "$wheels"/*.whl ||
    { echo "installing $wheels/*.whl into $work/site failed" >&2; exit 2; }
  export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# What every run needs, checked in seconds: a missing package or JAX on its CPU fallback
# would otherwise fail or crawl through each run of the budget.
versions=$($py -c '
import os, jax, flax, optax, orbax.checkpoint, ml_collections
from bertjax import pretrain  # noqa: F401  (the benchmark imports it)
if not os.environ.get("SUITE_ANY_BACKEND") and jax.default_backend() != "gpu":
    raise SystemExit(f"JAX runs on {jax.default_backend()}, not the GPU: is jax[cuda] installed?")
print(f"VERSIONS: jax {jax.__version__}, flax {flax.__version__}, optax {optax.__version__}, "
      f"orbax-checkpoint {orbax.checkpoint.__version__}")' 2>&1) ||
  { echo "the suite cannot run: ${versions}" >&2; exit 2; }
versions=$(printf '%s\n' "$versions" | grep '^VERSIONS: ' | tail -n 1)  # (not a warning printed after it)
budget=${SUITE_BUDGET:-540}
min_run=${MIN_RUN:-150}
run_timeout=${RUN_TIMEOUT:-300}
succeeded=0 benched=0 timed=0
cudnn="--config.model.attention_impl=cudnn --config.model.attention_probs_dropout_prob=0"
summary="$results/summary.md"
: > "$results/runs.txt"
: > "$work/tails.md"
# The commit: BERTJAX_COMMIT where the copy has no .git (the device tool's working tree).
commit=${BERTJAX_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
{
  echo "gpu_suite.sh $* (budget ${budget} s), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit, GPU ${gpu:-unknown}"
  echo
  echo "${versions#VERSIONS: }"
  echo
  echo "| run | compile (s) | median step (ms) | range (ms) | timed steps | seq/s | MFU | peak device memory (MB) |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
} > "$summary"

# The bertjax column of one row of launch/benchmark.py's table ("-" where the run printed none).
value() { awk -v row="$2" 'index($0, row) == 1 { v = substr($0, length(row) + 1); split(v, f, " "); print f[1]; exit }' "$1" | grep . || echo -; }

# The bertjax column of the "timed steps" row ("10 after 2 warm-up"), whole.
steps() {
  awk 'index($0, "timed steps") == 1 { sub(/^timed steps +/, ""); sub(/  +.*/, ""); print; exit }' "$1" | grep . ||
    echo -
}

# [need=SECONDS] run NAME COMMAND...: the command under the budget (it starts only while `need`,
# default MIN_RUN, seconds are left), its output to $WORK/NAME.txt and runs.txt.
run() {
  local name=$1 left=$((budget - (SECONDS - start)))
  shift
  if ((left < ${need:-$min_run})); then
    echo "== $name: not run, ${left} s of the budget left"
    echo "| $name | not run: ${left} s of the ${budget} s budget left | | | | | | |" >> "$summary"
    return 1
  fi
  local limit=$((left < run_timeout ? left : run_timeout))
  echo "== $name (stopped after ${limit} s): $*"
  timeout "$limit" "$@" > "$work/$name.txt" 2>&1
  local status=$?
  ((status == 0)) && succeeded=$((succeeded + 1))
  tail -n 12 "$work/$name.txt"
  { echo "== $name: $* (exit $status)"; cat "$work/$name.txt"; echo; } >> "$results/runs.txt"
  if ((status == 124)); then
    echo "| $name | stopped after ${limit} s | | | | | | |" >> "$summary"
  elif grep -q '^median step (ms)' "$work/$name.txt"; then
    local f=$work/$name.txt
    timed=$((timed + 1))
    echo "| $name | $(value "$f" "compile time (s)") | $(value "$f" "median step (ms)") |" \
         "$(value "$f" "step range (ms)") | $(steps "$f") | $(value "$f" "sequences/s") | $(value "$f" "MFU") |" \
         "$(value "$f" "peak device memory (MB)") |" >> "$summary"
  else
    echo "| $name | exit $status: its last lines below | | | | | | |" >> "$summary"
    { echo; echo "$name (exit $status):"; echo '```'; tail -n 60 "$work/$name.txt"; echo '```'; } >> "$work/tails.md"
  fi
  return "$status"
}

bench() {
  local name=$1
  shift
  benched=$((benched + 1))
  run "$name" $py launch/benchmark.py --nopipeline "$@"
}

# slowcompile: BERT-base with the XLA attention has not compiled in 150-210 s on an H100/H200
# since 2026-11-26 (44 s on 2026-11-22), autotuning off too, so every XLA-attention run waits
# there. Dropout's custom gradient (11ada33) is suspect 1: the same step without attention
# dropout, then a smaller batch.
for section in $sections; do
  case $section in
    large)
      bench large128_cudnn --preset=large --batch_size=256 --seq_len=128 $cudnn ;;
    check)
      run check $py benchmarks/attention_check.py --preset=base --seq_len=512 ;;
    profile)  # the BERT-large step at 128 (cuDNN attention) and where it goes, by kind and by op
      bench profile_large128_cudnn --preset=large --batch_size=256 --seq_len=128 --steps=3 $cudnn \
        --profile_dir="$work/trace_large128" &&
        need=30 run profile_large128_ops $py benchmarks/trace_summary.py "$work/trace_large128" --top=40 ;;
    packed)
      bench large512_packed --preset=large --batch_size=64 --seq_len=512 --pack_pairs=3 $cudnn
      bench large512_cudnn --preset=large --batch_size=64 --seq_len=512 $cudnn ;;
    base)
      bench base128_cudnn --preset=base --batch_size=256 --seq_len=128 $cudnn ;;
    compile)
      for layers in 12 24; do
        for scan in false true; do
          bench "compile_large_L${layers}_scan_${scan}" --preset=large --batch_size=32 --seq_len=128 --steps=1 \
            --warmup=1 --config.model.num_hidden_layers=$layers --config.model.scan_layers=$scan $cudnn
        done
      done ;;
    triton)  # XLA's Triton GEMMs back on (the launchers give every matmul to cuBLAS: bertjax/runtime/cli.py)
      XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_triton_gemm=true" \
        bench large128_cudnn_triton --preset=large --batch_size=256 --seq_len=128 $cudnn ;;
    slowcompile)
      bench large128 --preset=large --batch_size=256 --seq_len=128
      bench base128 --preset=base --batch_size=256 --seq_len=128
      bench base128_xla_no_attention_dropout --preset=base --batch_size=256 --seq_len=128 \
        --config.model.attention_probs_dropout_prob=0
      bench base128_xla_batch32 --preset=base --batch_size=32 --seq_len=128 ;;
  esac
done
cat "$work/tails.md" >> "$summary"
{
  echo
  echo "Where these go: benchmarks/README.md's table under 'Pre-training step on a GPU' and its status rows,"
  echo "and a section of benchmarks/log/<date>.md with the date, GPU, commit and versions above."
} >> "$summary"
echo
cat "$summary"
if ((succeeded == 0)); then  # (a summary of failures is no result: say so to whatever ran the suite)
  echo "no run of the suite succeeded" >&2
  exit 1
fi
if ((benched > 0 && timed == 0)); then
  echo "no benchmark run of the suite timed a step" >&2
  exit 1
fi

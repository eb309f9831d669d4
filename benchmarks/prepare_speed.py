r"""Prepare-step speed and memory: MB/s of text per CPU core and peak RSS, two corpus sizes.

  python benchmarks/prepare_speed.py                       # 4 MB and 40 MB, demo vocabulary
  python benchmarks/prepare_speed.py --small_mb=20 --num_workers=8 \
      --vocab_path=path/to/bert/vocab.txt                  # a real BERT vocabulary
  python benchmarks/prepare_speed.py --text_file=book.txt  # your text instead of the demo's

The corpus is the demo corpus (or --text_file) written out as BERT-format text files of
1 MB, repeated to size. Each size is prepared from scratch in a fresh process (so peak
RSS is its own) with `--num_workers` worker processes. Two rates: MB/s per core over the
whole wall time (including starting the workers), and MB of text per CPU-second the
workers spent on units (the steady-state rate of one fully used core, which does not
depend on what else shares the machine). The demo text has a small lexicon, so the
tokenizer's chunk memo hits more often than on natural text (try --text_file). Peak RSS
is printed for the parent and for the largest worker: streaming means neither grows with
the corpus (the 10x larger corpus should show about the same numbers).
"""

import json
import os
import resource
import shutil
import subprocess
import sys
import time

from absl import app, flags

_SMALL_MB = flags.DEFINE_float("small_mb", 4, "Size of the smaller corpus in MB; the larger is --factor times it.")
_FACTOR = flags.DEFINE_integer("factor", 10, "Size ratio of the two corpora.")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", os.cpu_count() or 1, "Worker processes.")
_VOCAB_PATH = flags.DEFINE_string("vocab_path", "", "WordPiece vocab.txt ('' = the demo vocabulary).")
_TEXT_FILE = flags.DEFINE_string("text_file", "", "A text file to use instead of the demo corpus (repeated to size).")
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/bertjax_prepare_bench", "Scratch directory (deleted first).")
_MEASURE = flags.DEFINE_string("measure", "", "Internal: prepare this corpus directory and print JSON.")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FILE_BYTES = 1 << 20


def _write_corpus(directory: str, megabytes: float) -> int:
    if _TEXT_FILE.value:
        with open(_TEXT_FILE.value, "rb") as f:
            text = f.read()
    else:
        from bertjax.data.corpora import demo_corpus
        text = "\n\n".join("\n".join(d) for d in demo_corpus.demo_documents()).encode()
    text = text * (1 + 3 * FILE_BYTES // len(text))  # at least three files' worth to cut from
    os.makedirs(directory)
    written, index = 0, 0
    while written < megabytes * 1e6:
        start = (index * FILE_BYTES) % (len(text) - 2 * FILE_BYTES)
        start = text.index(b"\n\n", start) + 2  # whole documents
        end = text.index(b"\n\n", start + FILE_BYTES)
        with open(os.path.join(directory, f"part-{index:05d}.txt"), "wb") as f:
            f.write(text[start:end] + b"\n")
        written, index = written + end - start + 1, index + 1
    return written


def _measure(corpus_dir: str) -> None:
    """Child process: prepare `corpus_dir` and print timing and peak memory as JSON."""
    from configs import pretrain
    from bertjax.data import prepare

    config = pretrain.get_config("tiny").data
    config.source, config.input_pattern = "text", os.path.join(corpus_dir, "*.txt")
    config.vocab_path = _VOCAB_PATH.value
    output_dir = corpus_dir + "-prepared"
    start = time.time()
    metadata = prepare.ensure_prepared(config, output_dir, num_workers=_NUM_WORKERS.value)
    seconds = time.time() - start
    cpu_seconds = 0.0
    units = os.listdir(os.path.join(output_dir, "done"))
    for name in units:
        with open(os.path.join(output_dir, "done", name)) as f:
            cpu_seconds += json.load(f)["cpu_seconds"]
    print(json.dumps({
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "workers": min(_NUM_WORKERS.value, len(units)),  # (one unit, or one worker: the main process prepares it)
        "tokens": sum(metadata["splits"][s]["tokens"] for s in ("train", "eval")),
        "parent_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))


def main(argv):
    del argv
    sys.path.insert(0, ROOT)
    if _MEASURE.value:
        return _measure(_MEASURE.value)
    if _SMALL_MB.value * _FACTOR.value * 1e6 <= FILE_BYTES or _FACTOR.value < 2:  # (whole files of FILE_BYTES)
        raise SystemExit(f"error: --small_mb={_SMALL_MB.value:g} --factor={_FACTOR.value}: the corpora are written "
                         f"in whole files of {FILE_BYTES / 1e6:.2f} MB, so both would be one file of one size; give "
                         "a larger corpus above that, and --factor at least 2")
    shutil.rmtree(_WORKDIR.value, ignore_errors=True)
    print(f"prepare: {_NUM_WORKERS.value} worker(s) on {os.cpu_count()} CPU core(s), "
          f"vocab {_VOCAB_PATH.value or 'demo'}, text {_TEXT_FILE.value or 'demo corpus'}")
    for megabytes in (_SMALL_MB.value, _SMALL_MB.value * _FACTOR.value):
        corpus_dir = os.path.join(_WORKDIR.value, f"corpus-{megabytes:g}mb")
        size = _write_corpus(corpus_dir, megabytes)
        command = [sys.executable, os.path.abspath(__file__), f"--measure={corpus_dir}",
                   f"--num_workers={_NUM_WORKERS.value}", f"--vocab_path={_VOCAB_PATH.value}"]
        output = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout
        result = json.loads(output.strip().splitlines()[-1])
        rate, workers = size / 1e6 / result["seconds"], result["workers"]
        memory = (f"largest worker {result['worker_peak_rss_mb']:.0f} MB" if workers > 1 else
                  "prepared in the main process")
        print(f"{size / 1e6:6.1f} MB text, {result['tokens']:>10,} tokens, {workers} worker(s) used: wall "
              f"{result['seconds']:5.1f} s = {rate / workers:5.2f} MB/s per core with start-up; "
              f"{size / 1e6 / result['cpu_seconds']:5.2f} MB per worker CPU-second; peak RSS parent "
              f"{result['parent_peak_rss_mb']:.0f} MB, {memory}")
    shutil.rmtree(_WORKDIR.value, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)

r"""Where a profiled step's time goes: a table from a jax.profiler trace, no TensorBoard needed.

  python launch/benchmark.py --preset=base --batch_size=8 --seq_len=128 --profile_dir=/tmp/trace
  python benchmarks/trace_summary.py /tmp/trace [--steps=3] [--top=25]

Reads the newest `*.trace.json.gz` under the folder (written by `benchmark.py
--profile_dir`, which traces 3 steps) and prints, per step: the span from the first to the
last op, the time some op was running ("busy") and its share of the span, the op time by
kind (matmul, attention, random bits, copy/transpose, collective, other), and the ops with
the most time, instances of one op family (`fusion.12`, `fusion.40`) together (see
`op_events` for what counts as an op). Times that overlap (several streams or threads at
once) are summed per op, so the op time can exceed the busy time.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re

# Op kinds, by substrings of the op (or kernel) name, first match wins.
KINDS = (
    ("attention", ("fmha", "flash", "cudnn", "attention", "splash")),
    ("matmul", ("dot", "gemm", "matmul", "cublas", "nvjet", "xmma", "cutlass", "ynn", "convolution")),
    ("random bits", ("rng", "threefry", "random", "philox")),
    ("copy/transpose", ("copy", "transpose", "memcpy", "memset")),
    ("collective", ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "nccl", "collective")),
)


def kind_of(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, marks in KINDS if any(mark in lowered for mark in marks)), "other")


def newest_trace(directory: str) -> str:
    paths = glob.glob(os.path.join(directory, "**", "*.trace.json.gz"), recursive=True)
    if not paths:
        raise SystemExit(f"error: no *.trace.json.gz under {directory} (benchmark.py --profile_dir writes one)")
    return max(paths, key=os.path.getmtime)


def op_events(events: list[dict]) -> list[dict]:
    """The complete ('X') events that are ops: on an accelerator its "XLA Ops" line where the
    trace has one (TPU), else its streams' kernels (GPU); on CPU, the events of XLA's compute
    threads that are HLO ops (not the runtime's own, named 'Class::method' or 'end: op', nor a
    loop's 'while', whose event spans the ops of its body, counted on their own)."""
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    devices = {pid for pid, name in processes.items() if name.startswith("/device:")}
    op_lines = {key for key, name in threads.items() if key[0] in devices and name == "XLA Ops"}
    if op_lines:
        keep = lambda e: (e["pid"], e.get("tid")) in op_lines
    elif devices:
        keep = lambda e: e["pid"] in devices
    else:
        keep = lambda e: (threads.get((e["pid"], e.get("tid")), "").startswith(("tf_XLAEigen", "XLA"))
                          and "::" not in e["name"] and not e["name"].startswith("end: ")
                          and not re.fullmatch(r"while(\.\d+)?", e["name"]))
    return [e for e in events if e.get("ph") == "X" and e.get("dur") is not None and keep(e)]


def family(name: str) -> str:
    """An op's name without its instance number: 'fusion.125' and 'fusion.7' -> 'fusion'."""
    return re.sub(r"[._]\d+$", "", name)


def busy_time(events: list[dict]) -> float:
    """Microseconds in which at least one event runs (the union of their intervals)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def trace_events(path: str) -> list[dict]:
    """The events of a `*.trace.json.gz` (a list, or an object holding one as "traceEvents")."""
    with gzip.open(path) as f:
        events = json.load(f)
    return events["traceEvents"] if isinstance(events, dict) else events


def summarize(path: str, steps: int, top: int) -> list[str]:
    ops = op_events(trace_events(path))
    if not ops:
        raise SystemExit(f"error: {path} has no op events")
    span = (max(e["ts"] + e["dur"] for e in ops) - min(e["ts"] for e in ops)) / steps / 1e3
    busy = busy_time(ops) / steps / 1e3
    by_family, instances, by_kind = collections.Counter(), collections.defaultdict(set), collections.Counter()
    for e in ops:
        by_family[family(e["name"])] += e["dur"] / steps / 1e3
        instances[family(e["name"])].add(e["name"])
        by_kind[kind_of(e["name"])] += e["dur"] / steps / 1e3
    total = sum(by_family.values())
    lines = [f"{path}", f"per step ({steps} traced): span {span:.2f} ms, busy {busy:.2f} ms ({busy / span:.1%}), "
             f"op time {total:.2f} ms", "", f"{'kind':<16} {'ms/step':>9} {'share':>7}"]
    lines += [f"{kind:<16} {ms:9.2f} {ms / total:7.1%}" for kind, ms in by_kind.most_common()]
    lines += ["", f"{'op (instances)':<64} {'kind':<16} {'ms/step':>9} {'share':>7}"]
    lines += [f"{f'{name[:55]} ({len(instances[name])})':<64} {kind_of(name):<16} {ms:9.2f} {ms / total:7.1%}"
              for name, ms in by_family.most_common(top)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", help="the --profile_dir of launch/benchmark.py")
    parser.add_argument("--steps", type=int, default=3, help="steps in the trace (benchmark.py traces 3)")
    parser.add_argument("--top", type=int, default=25, help="ops to list")
    args = parser.parse_args()
    if args.steps < 1 or args.top < 1:
        parser.error("--steps and --top must be >= 1")
    print("\n".join(summarize(newest_trace(args.directory), args.steps, args.top)))


if __name__ == "__main__":
    main()

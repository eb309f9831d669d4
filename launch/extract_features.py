r"""Extracts contextual features (the encoder's hidden states) from any checkpoint.

    python launch/extract_features.py --checkpoint=/ckpt/uncased_L-12_H-768_A-12 \
        --input_file=in.txt --output=out.jsonl --layers=-1,-2,-3,-4
    python launch/extract_features.py --checkpoint=workdir/reviews --input_file=reviews.csv \
        --text_a_key=review --output=/data/review_vectors --pooling=mean --output_dtype=float16

--checkpoint: anything config.init_checkpoint takes (a bertjax pre-training or fine-tuning
run or step, a Hugging Face directory, Google's TF release; local or gs://); its tokenizer
and casing come with it. --input_file: one example per line ("text_a ||| text_b" for a
pair), as google-research/bert's extract_features.py, or a CSV/TSV/JSONL file with the
columns --text_a_key (and --text_b_key). --output: a name ending in .jsonl gets the
original's JSONL layout; anything else is a folder of .npz shards that a second run of the
same command resumes after a kill (layouts: bertjax/inference/feature_files.py). Exit codes: 0 done,
2 a bad flag or input, or a model answering NaN (one line), 130 Ctrl-C, 143 SIGTERM (a shard
folder resumes).

--layers counts the embeddings' output as layer 0, so a positive index names the layer one
below the original's (whose 0 is the first Transformer layer); negative indices, the usual
-1,-2,-3,-4, name the same layers in both, and the JSONL's "index" is the index as given.
--max_seq_length defaults to the length a bertjax run trained at (positions past it never
trained), else 128, as the original.

Multi-host (a TPU pod slice, several GPU nodes): start the same command on every host
(--distributed, --coordinator_address, --num_processes, --process_id as for pre-training;
detected on pod slices and SLURM) with a folder every host sees as --output; each process
writes its share of the shards (shard k: process k % number of processes).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import host_memory  # noqa: E402
host_memory.configure()  # huge pages (a restart), kept freed memory: before any thread allocates
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "the model: any path config.init_checkpoint takes",
                                  required=True)
_INPUT = flags.DEFINE_string("input_file", None, "text (one example per line, 'a ||| b' a pair) or CSV/TSV/JSONL",
                             required=True)
_OUTPUT = flags.DEFINE_string("output", None, "NAME.jsonl (the original's layout) or a folder of .npz shards",
                              required=True)
_LAYERS = flags.DEFINE_string("layers", "-1,-2,-3,-4", "hidden states to write, comma-separated: -1 the last "
                              "layer, 0 the embeddings' output")
_POOLING = flags.DEFINE_enum("pooling", "none", ["none", "cls", "mean"], "none: every token's vector; cls: the "
                             "[CLS] vector; mean: the mean over the example's tokens (padding excluded)")
_MAX_SEQ_LENGTH = flags.DEFINE_integer("max_seq_length", None, "longest example in tokens; longer ones are "
                                       "truncated and counted (default: the length a bertjax run trained at, "
                                       "else 128, the original's)", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "examples per compiled batch", lower_bound=1)
_PRECISION = cli.define_precision_flag()
_OUTPUT_DTYPE = flags.DEFINE_enum("output_dtype", "float32", ["float32", "float16"], "the shards' values")
_SHARD_SIZE = flags.DEFINE_integer("shard_size", 1024, "examples per shard (fewer where they would hold over "
                                   "512 MiB of values at --max_seq_length)", lower_bound=1)
_INPUT_FORMAT = flags.DEFINE_enum("input_format", "", ["", "text", "csv", "tsv", "jsonl"],
                                  "'' = from --input_file's extension (.csv .tsv .json(l); anything else is text)")
_TEXT_A_KEY = flags.DEFINE_string("text_a_key", None, "CSV/TSV/JSONL: the column of the (first) text (default: "
                                  "a fine-tuning run's config.data.text_a_key, else 'text')")
_TEXT_B_KEY = flags.DEFINE_string("text_b_key", None, "CSV/TSV/JSONL: the column of the second text ('' = none; "
                                  "default: a fine-tuning run's on pairs, else none)")
_FAIL_ON_TRUNCATION = flags.DEFINE_bool("fail_on_truncation", False, "an example longer than --max_seq_length "
                                        "is an error instead of truncated and counted")
_VOCABULARY = cli.define_vocabulary_flags()
cli.define_distributed_flags()


def parse_layers(text: str) -> tuple[int, ...]:
    """"-1,-2" -> (-1, -2); a ValueError naming --layers otherwise."""
    try:
        layers = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--layers={text}: expected comma-separated integers, e.g. -1,-2,-3,-4") from None
    return layers


def _refuse_ignored_flags(input_format: str) -> None:
    """A ValueError for flags that would change nothing (else dropped without a word): a shard
    folder's for a JSONL output, a CSV/TSV/JSONL input's columns for lines of text."""
    from bertjax.inference import feature_files

    given = lambda *names: [f"--{name}" for name in names if flags.FLAGS[name].present]
    if feature_files.writes_jsonl(_OUTPUT.value) and given("output_dtype", "shard_size"):
        raise ValueError(f"{', '.join(given('output_dtype', 'shard_size'))}: a shard folder's; --output="
                         f"{_OUTPUT.value} is one JSONL file (values to 6 decimal places)")
    if input_format == "text" and given("text_a_key", "text_b_key"):
        raise ValueError(f"{', '.join(given('text_a_key', 'text_b_key'))}: columns of a CSV/TSV/JSONL input; --input_"
                         f"file={_INPUT.value} is read as lines of text ('a ||| b' a pair)")


def main(_):
    layers = parse_layers(_LAYERS.value)
    from bertjax.inference import feature_files

    cli.start_distributed()
    cli.unwind_on_sigterm()  # (after: jax.distributed installs its own) a stopped run leaves no half-written output
    import bertjax
    import jax

    from bertjax.inference import engine, model_source

    # The input's columns and the layers are checked against the model's files, before it loads.
    source = model_source.resolve(_CHECKPOINT.value)
    text_a_key, text_b_key = feature_files.input_columns(source, _TEXT_A_KEY.value, _TEXT_B_KEY.value)
    _refuse_ignored_flags(feature_files.input_format(_INPUT.value, _INPUT_FORMAT.value, (text_a_key, text_b_key)))
    states = source.bert.num_hidden_layers + 1  # (the embeddings' output is one)
    if not flags.FLAGS["layers"].present and len(layers) > states:  # the original's last four, of fewer
        layers = layers[:states]
        print(f"--layers: the default {_LAYERS.value} reads more hidden states than the model's {states}; "
              f"reading {','.join(map(str, layers))}", file=sys.stderr)
    try:
        positions = engine.hidden_state_positions(layers, source.bert.num_hidden_layers)
    except ValueError as e:
        raise ValueError(f"--layers={','.join(map(str, layers))}: {e}") from None
    for note in _layer_notes(layers, positions, feature_files.writes_jsonl(_OUTPUT.value)):
        print(f"--layers: {note}", file=sys.stderr)
    feature_files.check_output(_INPUT.value, _OUTPUT.value)  # before the model loads
    default_length = source.max_seq_length or min(128, source.bert.max_position_embeddings)  # the original's 128
    model = bertjax.load_model(source, max_seq_length=_MAX_SEQ_LENGTH.value or default_length,
                               batch_size=_BATCH_SIZE.value, precision=_PRECISION.value, **_VOCABULARY())
    done = feature_files.extract(
        model, _INPUT.value, _OUTPUT.value, layers=layers, pooling=_POOLING.value,
        input_format_name=_INPUT_FORMAT.value, text_a_key=text_a_key, text_b_key=text_b_key,
        dtype=_OUTPUT_DTYPE.value, shard_size=_SHARD_SIZE.value, fail_on_truncation=_FAIL_ON_TRUNCATION.value)
    if done["new"]:
        where = f" on process {jax.process_index()} of {jax.process_count()}" if jax.process_count() > 1 else ""
        earlier = done["examples"] - done["new"]  # a resumed folder's, written by the run before
        resumed = f", {done['new']} of them now, {earlier} before" if earlier > 0 and not where else ""
        print(f"wrote {_OUTPUT.value}: {done['examples']} examples{resumed} ({done['truncated']} truncated to "
              f"{model.max_seq_length} tokens; {model.precision} products), "
              f"{done['new'] / max(done['seconds'], 1e-9):.1f} examples/s{where}")


def _layer_notes(layers: list[int], positions: tuple[int, ...], original_layout: bool) -> list[str]:
    """What --layers reads that a user of google-research/bert's extract_features.py would not
    expect: a layer that is the embeddings' output (its -4 of a 3-layer model raised; here it is
    position 0), and, in the original's JSONL layout, a non-negative index, which counts one
    layer below the original's."""
    notes = [f"{layer} is the embeddings' output, not a Transformer layer's" for layer, position in
             zip(layers, positions) if position == 0]
    counted = [layer for layer in layers if layer >= 0]
    if original_layout and counted:
        notes.append(f"{','.join(map(str, counted))}: bertjax counts the embeddings' output as layer 0, as Hugging "
                     "Face's hidden_states do; google-research/bert's extract_features.py counts from the first "
                     f"Transformer layer (its {counted[0]} is {counted[0] + 1} here; -1 is the last layer in both)")
    return notes


if __name__ == "__main__":
    cli.run(main)

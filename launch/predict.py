r"""Predicts with a trained model on raw input: one JSONL line per input, in input order.

  python launch/predict.py --model=workdir/reviews --text="the movie was great fun"
  python launch/predict.py --model=workdir/reviews --input=reviews.csv --output=out.jsonl
  python launch/predict.py --model=workdir/squad --input=dev-v2.0.json --output=answers.jsonl
  python launch/predict.py --model=workdir/demo/pretrain --task=fill_mask --text="the [MASK] sat on the mat."

--model: a fine-tuning workdir (its best weights, task, labels, tokenizer and lengths come
from the run) or, with --task=fill_mask, a pre-trained checkpoint with a masked-LM head
(bertjax pre-training run, Google's TF release, Hugging Face BertForMaskedLM /
BertForPreTraining / ModernBertForMaskedLM; [MASK] marks the mask whatever the tokenizer
names its own). Inputs: --text (repeatable), --input=FILE (formats: see
bertjax/inference/batch_predict.py), or stdin (--input left out or -: lines of text; JSONL for
multiple choice or with --input_format=jsonl). What each task family returns:
bertjax/inference/engine.py. Bad inputs are named by file:line: --on_error=fail (default) stops
with exit code 2 before predicting; skip writes {"error", "where"} in their place.
--vocab_file / --do_lower_case: the tokenizer of a model that comes without one.
Inputs are read and predicted a chunk at a time (bounded memory, 1,024 inputs: stdin's answers
come a chunk at a time, or at its end); a file is checked whole before the first prediction,
stdin a chunk at a time (an earlier chunk's answers may be out). Exit codes: 0 done, 2 bad model,
flag or input, or a model answering NaN (one line), 130 Ctrl-C, 143 SIGTERM, 141 the reader
of stdout left (| head).
"""

import functools
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import host_memory  # noqa: E402
host_memory.configure()  # huge pages (a restart), kept freed memory: before any thread allocates
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_MODEL = flags.DEFINE_string("model", None, "fine-tuning workdir, or a checkpoint for --task=fill_mask",
                             required=True)
_INPUT = flags.DEFINE_string("input", None, "file of inputs (default, or -: stdin, unless --text)")
_TEXT = flags.DEFINE_multi_string("text", [], "an input on the command line (repeatable)")
_OUTPUT = flags.DEFINE_string("output", None, "a new JSONL file to write (default, or -: stdout)")
_TASK = flags.DEFINE_enum("task", None, ["fill_mask"], "fill_mask: top-k tokens at each [MASK] "
                          "(default: the fine-tuned model's own task)")
_TOP_K = flags.DEFINE_integer("top_k", 5, "fill_mask: tokens per [MASK]", lower_bound=1)
_FORMAT = flags.DEFINE_enum("input_format", "auto", ["auto", "text", "csv", "tsv", "jsonl", "squad_json", "conll"],
                            "auto: from the file's extension (.json: SQuAD's layout for span QA), else lines of text")
_ON_ERROR = flags.DEFINE_enum("on_error", "fail", ["fail", "skip"],
                              "a bad input: fail (exit 2, no --output file; from stdin to stdout, the chunks before it are out) "
                              "or skip (an error line in its place)")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "examples per compiled batch", lower_bound=1)
_MAX_SEQ_LENGTH = flags.DEFINE_integer("max_seq_length", None, "default: the run's, else the model's longest up to 512",
                                      lower_bound=1)
_TEXT_A_KEY = flags.DEFINE_string("text_a_key", None, "CSV/TSV/JSONL column of the text (default: the run's "
                                  "config.data.text_a_key; 'text' for tagging and fill_mask)")
_TEXT_B_KEY = flags.DEFINE_string("text_b_key", None, "column of a pair's second text (default: the run's)")
_QUESTION_KEY = flags.DEFINE_string("question_key", None, "span QA: column of the question (default: question)")
_CONTEXT_KEY = flags.DEFINE_string("context_key", None, "span QA, choice: column of the context (default: the run's)")
_CHOICES_KEY = flags.DEFINE_string("choices_key", None, "choice: column of the list of choices (default: the run's)")
_SQUAD_VERSION = flags.DEFINE_enum("squad_version", None, ["v1.1", "v2.0"],
                                   "span QA: v2.0 for a model trained to abstain, where a Hugging Face config.json "
                                   "does not say (default: the run's; a Hugging Face model: its config's, else v1.1)")
_N_BEST_SIZE = flags.DEFINE_integer("n_best_size", None, "span QA: candidate starts and ends a window (default: the "
                                    "run's)", lower_bound=1)
_MAX_ANSWER_LENGTH = flags.DEFINE_integer("max_answer_length", None, "span QA: longest answer in tokens (default: "
                                          "the run's)", lower_bound=1)
_NULL_THRESHOLD = flags.DEFINE_float("null_score_diff_threshold", None, "span QA v2.0: no answer where its score "
                                     "beats the best span's by more than this (default: the run's)")
_VOCABULARY = cli.define_vocabulary_flags()
_PRECISION = cli.define_precision_flag()


def main(_):
    cli.unwind_on_sigterm()  # a stopped run leaves no half-written --output
    started = time.perf_counter()
    if _INPUT.value and _TEXT.value:
        raise ValueError("give --input or --text, not both")
    file_flags = [f"--{flag.name}" for flag in (_FORMAT, _TEXT_A_KEY, _TEXT_B_KEY, _QUESTION_KEY, _CONTEXT_KEY,
                                                 _CHOICES_KEY) if flags.FLAGS[flag.name].present]
    if _TEXT.value and file_flags:  # else ignored without a word
        raise ValueError(f"{', '.join(file_flags)}: how to read --input (or stdin), not --text")
    import bertjax
    from bertjax import tasks
    from bertjax.inference import batch_predict, model_source
    from bertjax.runtime import console, fileio

    input_file = None if _INPUT.value == "-" else _INPUT.value  # (-: stdin, as when --input is left out)
    output_file = None if _OUTPUT.value == "-" else _OUTPUT.value  # (-: stdout, as when --output is left out)
    if input_file and not fileio.exists(input_file):  # before the model loads
        raise ValueError(f"--input={input_file}: no such file")
    if input_file and fileio.isdir(input_file):
        raise ValueError(f"--input={input_file} is a folder; give a file of inputs")
    if input_file and output_file and fileio.same_file(input_file, output_file):
        raise ValueError(f"--output={output_file} is the input file; give another name (it would be overwritten)")
    if output_file and fileio.isdir(output_file):
        raise ValueError(f"--output={output_file} is a folder; give a file's name")
    if output_file and fileio.exists(output_file) and not os.path.isfile(output_file) \
            and not fileio.is_remote(output_file):  # /dev/stdout, a pipe: the output is written aside, then renamed
        raise ValueError(f"--output={output_file} is no regular file; leave --output unset to write to stdout")
    if output_file and fileio.exists(output_file):  # an earlier run's predictions are not replaced unasked
        raise ValueError(f"--output={output_file} exists; remove it or give another name")
    if output_file and not fileio.is_remote(output_file) and not fileio.isdir(fileio.parent(output_file)):
        # (before the model loads; a gs:// prefix needs no folder)
        raise ValueError(f"--output={output_file}: no folder {fileio.parent(output_file)} to write it in")

    source = model_source.resolve(_MODEL.value)  # a path that is no model fails here, in one line
    with cli.named_by_flag(f"--squad_version={_SQUAD_VERSION.value}"):
        source = model_source.with_task_version(source, _SQUAD_VERSION.value)
    family = "fill_mask" if _TASK.value else source.task_info.get("family")
    if family is None:
        has_mlm_head = "mlm" in source.load_params()
        raise ValueError(f"--model={_MODEL.value} is a pre-trained model with no task: " + (
            "give --task=fill_mask (it has a masked-LM head), or fine-tune it first" if has_mlm_head else
            "it has no masked-LM head for --task=fill_mask; launch/extract_features.py gives its features, "
            "or fine-tune it first"))
    if _TEXT.value and not batch_predict.input_reader(family).text_lines:
        raise ValueError(f"a {family} model's inputs are not one line of text: give them as JSONL with --input")
    if family != "fill_mask" and flags.FLAGS[_TOP_K.name].present:
        raise ValueError(f"--top_k: the tokens per [MASK] of --task=fill_mask, not a {family} model's")
    options = {flag.name: flag.value for flag in (_N_BEST_SIZE, _MAX_ANSWER_LENGTH, _NULL_THRESHOLD)
               if flags.FLAGS[flag.name].present}
    taken = tasks.predict_options(family)
    for name in options:
        if name not in taken:  # (before the model loads)
            raise ValueError(f"--{name}: an option of span-QA models, not a {family} model's")
    if options:
        try:
            tasks.FAMILIES[family].check_options(source.task_info, **options)
        except ValueError as e:  # (its message names the option first: the flag's name)
            raise ValueError(f"--{e}") from None
    keys = batch_predict.default_keys(family, source.data, source.task_info)
    required = batch_predict.required_roles(family, keys, source.task_info)
    for name, flag in (("text_a", _TEXT_A_KEY), ("text_b", _TEXT_B_KEY), ("question", _QUESTION_KEY),
                       ("context", _CONTEXT_KEY), ("choices", _CHOICES_KEY)):
        if flag.value is None:
            continue
        if not keys.get(name):  # a role this model's inputs do not have (a single-text classifier's text_b)
            raise ValueError(f"--{flag.name}={flag.value}: this {family} model reads no {name} "
                             f"(its inputs: {', '.join(role for role, column in keys.items() if column)})")
        keys[name] = flag.value
        if name not in required:
            required.append(name)
    ids = {}  # (a row's id column, written in its line)
    if _TEXT.value:
        records = batch_predict.command_line_inputs(_TEXT.value, family)
    else:
        input_format = batch_predict.file_format(input_file or "", family, _FORMAT.value, keys)
        read = functools.partial(batch_predict.read_inputs, input_file or "/dev/stdin", family, input_format,
                                 keys, source.data, required, check_lines=_FORMAT.value == "auto",
                                 warned=set(), ids=ids)  # (one warning, however often the file is read)
        if input_file and fileio.can_read_twice(input_file):  # checked whole first, then predicted
            records = batch_predict.Reread(read)
            if next(iter(records), None) is None:
                raise ValueError(f"--input={input_file}: no inputs (an empty file?)")
        else:  # stdin or a pipe: predicted as it arrives (an empty one is nothing to say)
            records = read()
            if not input_file and sys.stdin.isatty():  # else it waits at a terminal without a word
                print("reading inputs from the terminal, one a line (Ctrl-D ends; --input=FILE or --text=...)",
                      file=sys.stderr)
    completed, close = False, None
    try:
        with cli.named_by_flag(f"--output={output_file}"):  # (opened now: a folder it cannot write in fails here)
            write, close = batch_predict.jsonl_writer(output_file)
        model = bertjax.load_model(source, max_seq_length=_MAX_SEQ_LENGTH.value, batch_size=_BATCH_SIZE.value,
                                   precision=_PRECISION.value, **_VOCABULARY())
        too_short = family != "fill_mask" and model.family.check_length(model.max_seq_length, source.data)
        if too_short:  # before an input is predicted
            raise ValueError(f"--{too_short}")
        summary = batch_predict.predict_all(model, family, records, write, _ON_ERROR.value, _TOP_K.value,
                                            progress=batch_predict.progress_line(), options=options, ids=ids)
        completed = True
    finally:
        if close is not None:
            close(completed)
        elif output_file and fileio.exists(fileio.temporary_name(output_file)):  # a stop as it was made
            fileio.remove(fileio.temporary_name(output_file))
    for where, why in summary["errors"]:
        print(f"skipped {where}: {why}", file=sys.stderr)
    if summary["skipped"]:
        print(f"skipped {summary['skipped']} of {summary['inputs']} inputs (error lines in the output)",
              file=sys.stderr)
    cut = summary["truncated"]
    longer = (f"{cut} input{' was' if cut == 1 else 's were'} truncated to fit the model (marked "
              '"truncated": true)') if cut else ""
    if output_file:
        print(f"wrote {summary['inputs']} lines to {output_file} in "
              f"{console.format_duration(time.perf_counter() - started)}" + (f"; {longer}" if cut else ""),
              file=sys.stderr)
    elif cut:  # (the predictions went to stdout)
        print(longer, file=sys.stderr)


if __name__ == "__main__":
    cli.run(main)

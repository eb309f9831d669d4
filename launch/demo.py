r"""The whole job on the embedded demo corpus, end to end (`bash launch/demo.sh` installs, then runs this).

  1. prepare the demo corpus (tokenizer and shards) and pre-train the tiny preset;
  2. fine-tune on the demo task from that checkpoint, and the same run from scratch;
  3. print a results table and write WORKDIR/results.json and PNG training curves.

  python launch/demo.py [--workdir=workdir/demo] [--pretrain.train.num_steps=300] \
      [--finetune.train.num_epochs=2]

`--pretrain` and `--finetune` are the configs (configs/pretrain.py:tiny and
configs/finetune.py:demo) and take the same `.key=value` overrides as the launchers.
Running it again resumes an interrupted run, or returns quickly once everything is done.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax import cli  # noqa: E402  (first: quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
_PRETRAIN = config_flags.DEFINE_config_file("pretrain", os.path.join(ROOT, "configs", "pretrain.py") + ":tiny",
                                            "Pre-training config.", lock_config=True)
_FINETUNE = config_flags.DEFINE_config_file("finetune", os.path.join(ROOT, "configs", "finetune.py") + ":demo",
                                            "Fine-tuning config (its init_checkpoint is set here).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "workdir/demo", "Where every stage writes (a folder each).")


def _last(workdir: str, key: str) -> float:
    from bertjax.plots import read_metrics

    return [record[key] for record in read_metrics(workdir) if key in record][-1]


def main(argv):
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    from bertjax import fileio, finetune, plots, train

    start, workdir = time.time(), _WORKDIR.value
    pretrain_dir = fileio.join(workdir, "pretrain")
    runs = {"pretrained": fileio.join(workdir, "finetune_pretrained"),
            "scratch": fileio.join(workdir, "finetune_scratch")}

    train.train_and_evaluate(_PRETRAIN.value, pretrain_dir)
    accuracy = {}
    for name, run_dir in runs.items():
        config = _FINETUNE.value.copy_and_resolve_references()
        with config.unlocked():
            if name == "pretrained":
                config.init_checkpoint = pretrain_dir
            else:  # the same model and tokenizer, randomly initialised
                config.init_checkpoint = ""
                config.model.preset = "tiny"
                config.data.vocab_path = fileio.join(pretrain_dir, "tokenizer", "vocab.txt")
        accuracy[name] = finetune.finetune(config, run_dir)["best"]["metrics"]["accuracy"]

    pretrain_plot = plots.plot_runs(
        {"pre-training": pretrain_dir},
        {"loss": ["loss", "eval_loss"], "masked-LM accuracy": ["mlm_accuracy", "eval_mlm_accuracy"],
         "next-sentence accuracy": ["nsp_accuracy", "eval_nsp_accuracy"]},
        fileio.join(pretrain_dir, "training_curves.png"), title="Pre-training (tiny preset, demo corpus)")
    finetune_plot = plots.plot_runs(
        {"from pre-training": runs["pretrained"], "from scratch": runs["scratch"]},
        {"training loss": ["loss"], "dev accuracy": ["eval_accuracy"]}, fileio.join(workdir, "finetune_curves.png"),
        title="Fine-tuning on the demo task")
    results = {
        "pretrain_mlm_accuracy": _last(pretrain_dir, "eval_mlm_accuracy"),
        "pretrain_nsp_accuracy": _last(pretrain_dir, "eval_nsp_accuracy"),
        "finetune_accuracy_pretrained": accuracy["pretrained"],
        "finetune_accuracy_scratch": accuracy["scratch"],
        "plots": [pretrain_plot, finetune_plot],
    }
    fileio.write_json(fileio.join(workdir, "results.json"), results)
    rows = [("pre-training: held-out masked-LM accuracy", results["pretrain_mlm_accuracy"]),
            ("pre-training: held-out next-sentence accuracy", results["pretrain_nsp_accuracy"]),
            ("demo task dev accuracy, fine-tuned from pre-training", results["finetune_accuracy_pretrained"]),
            ("demo task dev accuracy, same fine-tuning from scratch", results["finetune_accuracy_scratch"])]
    print("\n" + "\n".join(f"  {name:<55} {value:6.1%}" for name, value in rows))
    print(f"\nresults: {fileio.join(workdir, 'results.json')}\nplots:   {pretrain_plot}\n         {finetune_plot}\n"
          f"TensorBoard: tensorboard --logdir {workdir}\ntotal time: {time.time() - start:.0f}s")


if __name__ == "__main__":
    cli.run(main)

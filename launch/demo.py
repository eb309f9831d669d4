r"""The whole job on the embedded demo corpus, end to end (`bash launch/demo.sh` installs, then runs this).

  1. prepare the demo corpus (tokenizer and shards) and pre-train the tiny preset;
  2. ask the pre-trained model to fill in a masked word in ten sentences of the demo world;
  3. fine-tune on the demo task from that checkpoint, and the same run from scratch;
  4. print a results table and write WORKDIR/results.json and PNG training curves.

  python launch/demo.py [--workdir=workdir/demo] [--pretrain.train.num_steps=300] \
      [--finetune.train.num_epochs=2]

`--pretrain` and `--finetune` are the configs (configs/pretrain.py:tiny and
configs/finetune.py:demo) and take the same `.key=value` overrides as the launchers.
Running it again resumes an interrupted run, or returns quickly once everything is done;
with other settings it is refused (WORKDIR/demo_settings.json): give another --workdir.
"""

import collections
import logging
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bertjax.runtime import host_memory  # noqa: E402
host_memory.configure()  # huge pages (a restart), kept freed memory: before any thread allocates
from bertjax.runtime import cli  # noqa: E402  (quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_PRETRAIN = cli.define_config_file("pretrain", os.path.join(ROOT, "configs", "pretrain.py") + ":tiny",
                                   "Pre-training config.", "pre-training")
_FINETUNE = cli.define_config_file("finetune", os.path.join(ROOT, "configs", "finetune.py") + ":demo",
                                   "Fine-tuning config (its init_checkpoint is set here).", "fine-tuning")
_WORKDIR = flags.DEFINE_string("workdir", "workdir/demo", "Where every stage writes (a folder each).")


def _last(records: list[dict], key: str) -> float | None:
    """The last logged value of `key` (None: never logged, e.g. NSP accuracy without NSP)."""
    values = [record[key] for record in records if key in record]
    return values[-1] if values else None


def _check_configs(pretrain_config, finetune_config) -> None:
    """What the demo needs of its two configs, checked before the pre-training stage runs."""
    from bertjax import finetune_setup, pretrain_setup

    pretrain_setup.resolve_cadence(pretrain_config)
    if pretrain_config.train.eval_every < 1 or pretrain_config.train.eval_batches < 1:
        raise ValueError("--pretrain.train.eval_every and --pretrain.train.eval_batches must be >= 1: the demo "
                         "reports held-out accuracy")
    from bertjax.data import prepare

    from bertjax import optim

    pretrained = None  # the model pre-trained here, which fine-tuning continues
    try:  # (before the workdir is made, and before a finished run's settings are compared)
        optim.validate_train_config(pretrain_config.train)
        if not pretrain_config.init_checkpoint:
            vocab_size = prepare.vocab_size_for(pretrain_config.data, "")  # (the demo's is counted, not written)
            pretrained = pretrain_setup.model_config(pretrain_config, vocab_size)
    except ValueError as e:
        raise ValueError(f"--pretrain: {e}") from None
    if finetune_config.train.sweep or finetune_config.init_checkpoint:  # the demo runs one of each, from here
        raise ValueError("--finetune: the demo fine-tunes once from the model it pre-trains and once from scratch: "
                         "leave train.sweep and init_checkpoint unset (launch/finetune.py runs a sweep or another "
                         "checkpoint)")
    try:
        finetune_setup.check_train_values(finetune_config.train)
        if pretrained is not None:
            finetune_setup.checked_model(_from_pretrained(finetune_config, ""), pretrained, vocab_size)
    except ValueError as e:
        raise ValueError(f"--finetune: {e}") from None


def _from_pretrained(finetune_config, pretrain_dir: str):
    """The fine-tuning config continuing the model pre-trained in `pretrain_dir`: the checkpoint
    sizes the model, so the config's preset (its size without one) is left unset."""
    config = finetune_config.copy_and_resolve_references()
    with config.unlocked():
        config.init_checkpoint = pretrain_dir
        config.model.preset = ""
    return config


_DERIVED = ("--pretrain.train.eval_every ", "--pretrain.checkpoint.every ")


def _check_same_demo(workdir: str, pretrain_config, finetune_config) -> None:
    """ValueError when `workdir` holds a demo run with other settings (any: another corpus or
    vocabulary too) that trained: each finished stage would return its earlier results as this
    run's. Records this run's settings otherwise (over those of a run refused before it trained)."""
    import json

    from bertjax import run_config
    from bertjax.runtime import fileio

    settings = json.loads(json.dumps({"pretrain": pretrain_config.to_dict(), "finetune": finetune_config.to_dict()}))
    path = fileio.join(workdir, "demo_settings.json")
    if fileio.exists(path) and fileio.exists(fileio.join(workdir, "pretrain", "checkpoints")):
        changes = [f"--{change}" for change in run_config.changed_settings(fileio.read_json(path), settings,
                                                                           left_out=())]
        # The cadence that follows num_steps (`resolve_cadence`) last, unless given: the flags given lead.
        given = {arg.split("=")[0] for arg in sys.argv[1:]}
        changes.sort(key=lambda change: change.startswith(_DERIVED) and change.split(" ")[0] not in given)
        if changes:
            more = f"; and {len(changes) - 3} more" if len(changes) > 3 else ""
            raise ValueError(f"--workdir={workdir} holds a demo run with other settings ({'; '.join(changes[:3])}"
                             f"{more}): its finished stages would answer for this one; give another --workdir "
                             "(WORKDIR=... bash launch/demo.sh)")
        return
    if not fileio.exists(path) and fileio.exists(fileio.join(workdir, "pretrain")):  # from before they were recorded
        logging.warning("%s holds a demo run that recorded no settings: it is taken as this one's", workdir)
    fileio.makedirs(workdir)
    fileio.write_json(path, settings)


def _majority_share(task: str) -> float | None:
    """The demo task's dev accuracy of always answering its most frequent label (None for another task)."""
    from bertjax.data.corpora import demo_corpus

    if task != "demo":
        return None
    examples, _ = demo_corpus.demo_task("dev")
    counts = collections.Counter(label for _, _, label in examples)
    return max(counts.values()) / len(examples)


def _fill_mask(pretrain_dir: str) -> list[dict]:
    """The pre-trained model's top 3 for each of the demo world's FILL_MASK_PROBES."""
    import bertjax
    from bertjax.data.corpora import demo_corpus

    probes = demo_corpus.FILL_MASK_PROBES
    answers = bertjax.load_model(pretrain_dir).fill_mask([text for text, _ in probes], top_k=3)
    return [{"text": text, "expected": expected,
             "top": [(guess["text"], round(guess["probability"], 4)) for guess in masks[0]]}
            for (text, expected), masks in zip(probes, answers)]


def main(_):
    cli.stop_on_sigterm()  # between the stages and outside their steps: exit 3, as inside them
    from bertjax.runtime import fileio, plots
    from bertjax import finetune, finetune_setup, pretrain

    start, workdir = time.time(), _WORKDIR.value
    pretrain_dir = fileio.join(workdir, "pretrain")
    runs = {"pretrained": fileio.join(workdir, "finetune_pretrained"),
            "scratch": fileio.join(workdir, "finetune_scratch")}

    _check_configs(_PRETRAIN.value, _FINETUNE.value)
    fileio.check_can_make(workdir, "--workdir")
    _check_same_demo(workdir, _PRETRAIN.value, _FINETUNE.value)
    pretrain.train_and_evaluate(_PRETRAIN.value, pretrain_dir)
    fill_mask = _fill_mask(pretrain_dir)
    score, metric = {}, "accuracy"
    for name, run_dir in runs.items():
        if name == "pretrained":
            config = _from_pretrained(_FINETUNE.value, pretrain_dir)
        else:  # the same model and tokenizer, randomly initialised
            config = finetune_setup.from_scratch(_FINETUNE.value, pretrain_dir)
        summary = finetune.finetune(config, run_dir)
        metric = summary["main_metric"]  # the task's (accuracy for the demo task; MCC for CoLA, ...)
        score[name] = summary["best"]["metrics"][metric] if summary["best"] else None

    pretrain_plot = plots.plot_runs(
        {"pre-training": pretrain_dir},
        {"loss": ["loss", "eval_loss"], "masked-LM accuracy": ["mlm_accuracy", "eval_mlm_accuracy"],
         "next-sentence accuracy": ["nsp_accuracy", "eval_nsp_accuracy"]},
        fileio.join(pretrain_dir, "training_curves.png"),
        title=f"Pre-training ({_PRETRAIN.value.model.preset} preset, demo corpus)")
    finetune_plot = plots.plot_runs(
        {"from pre-training": runs["pretrained"], "from scratch": runs["scratch"]},
        {"training loss": ["loss"], f"dev {metric}": [f"eval_{metric}"]}, fileio.join(workdir, "finetune_curves.png"),
        title="Fine-tuning on the demo task")
    pretrain_metrics = plots.read_metrics(pretrain_dir)
    results = {
        "pretrain_mlm_accuracy": _last(pretrain_metrics, "eval_mlm_accuracy"),
        "pretrain_nsp_accuracy": _last(pretrain_metrics, "eval_nsp_accuracy"),
        f"finetune_{metric}_pretrained": score["pretrained"],
        f"finetune_{metric}_scratch": score["scratch"],
        "fill_mask_top1_accuracy": sum(probe["top"][0][0] == probe["expected"] for probe in fill_mask) / len(fill_mask),
        "fill_mask": fill_mask,
        "plots": [pretrain_plot, finetune_plot],
    }
    fileio.write_json(fileio.join(workdir, "results.json"), results)
    share = metric == "accuracy"  # shown as a percentage; MCC, Spearman, F1 ... as numbers
    # What a model that learnt nothing scores, beside each figure: the most frequent masked token,
    # the majority next-sentence label and, on the demo task, the majority dev label.
    majority = _majority_share(config.task) if share else None
    rows = [("pre-training: held-out masked-LM accuracy", results["pretrain_mlm_accuracy"], True,
             _last(pretrain_metrics, "eval_mlm_unigram_accuracy"), "always the most frequent token"),
            ("pre-training: held-out next-sentence accuracy", results["pretrain_nsp_accuracy"], True,
             _last(pretrain_metrics, "eval_nsp_majority_accuracy"), "always the majority label"),
            ("pre-training: fill-mask top-1 right (the 10 above)", results["fill_mask_top1_accuracy"], True, None, ""),
            (f"{config.task} task dev {metric}, fine-tuned from pre-training", score["pretrained"], share, None, ""),
            (f"{config.task} task dev {metric}, same fine-tuning from scratch", score["scratch"], share, majority,
             "always the majority label")]
    print("\nfill-mask, the pre-trained model's top 3 (* where the first is the world's word, else its word after ->):")
    for probe in fill_mask:
        right = probe["top"][0][0] == probe["expected"]
        guesses = ", ".join(f"{token} {probability:.2f}" for token, probability in probe["top"])
        wanted = "" if right else f" -> {probe['expected']}"
        print(f"  {'*' if right else ' '} {probe['text']:<56} {guesses}{wanted}")
    print()
    for name, value, percent, baseline, what in rows:
        if value is not None:
            shown = f"{value:6.1%}" if percent else f"{value:6.3f}"
            print(f"  {name:<55} {shown}" + (f"   ({what}: {baseline:.1%})" if baseline is not None else ""))
    print(f"\nresults: {fileio.join(workdir, 'results.json')}\nplots:   {pretrain_plot}\n         {finetune_plot}\n"
          f"TensorBoard: tensorboard --logdir {workdir}\ntotal time: {time.time() - start:.0f}s")


if __name__ == "__main__":
    cli.run(main)

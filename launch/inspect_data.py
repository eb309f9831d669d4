r"""See what the model sees: pre-training examples decoded, with masks and NSP labels, plus statistics.

  python launch/inspect_data.py --config=configs/pretrain.py:tiny --num_examples=2000 \
      [--num_print=3] [--dump=/tmp/examples.npz] [--workdir=/tmp/bert_tiny] [--split=eval]

--workdir: a pre-training run's workdir shows the examples that run reads: its data settings
(the data it prepared, its masking, lengths and pairing; where --config says otherwise, a line
says what), or a workdir before its run, where the data is prepared as the run will reuse it.
Without it the data is prepared under the temporary folder, one folder per data config.

Draws --num_examples sequences from the configured pipeline (preparing the data first if
needed, as training does), prints the first --num_print of them as text (a masked
position reads `[original→shown]`), prints statistics over all of them, and with --dump
writes them to an .npz file under the original feature names.
"""

import collections
import hashlib
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import cli  # noqa: E402  (first: quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

from bertjax.data import prepare  # noqa: E402  (TensorFlow's pipeline modules: in main, after the checks)
from bertjax.data.pretraining_config import check_data_config, settings_unread  # noqa: E402
from bertjax.runtime import fileio  # noqa: E402

cli.define_config_file("config", None, "Pre-training config file.", "pre-training")
flags.DEFINE_integer("num_examples", 1000, "Sequences to draw (statistics and --dump cover all of them).",
                     lower_bound=1)
flags.DEFINE_integer("num_print", 3, "Sequences to print as text.", lower_bound=0)
flags.DEFINE_string("dump", "", "Write the raw examples to this .npz file.")
flags.DEFINE_string("workdir", "", "A pre-training run's workdir: the examples it reads, by its data settings (a "
                    "workdir before its run: the data prepared there); default: a folder per data config under "
                    "the temporary folder.")
flags.DEFINE_enum("split", "train", ["train", "eval"], "Which split to inspect.")
FLAGS = flags.FLAGS


def render(example: dict, tokenizer) -> str:
    """One sequence as text, a word at a time: its tokens decoded together (WordPiece's "##",
    byte-level BPE's "Ġ" and SentencePiece's "▁" gone; a token of whitespace alone as "␣" or
    "\\n"); masked positions as [original→shown]; a
    word piece joined to the word before it, but not to [CLS] or [SEP] (a segment cut at its
    front starts with one). Next to a masked token a piece of the same word stays apart where
    its "##" shows it continues (WordPiece: "s [##n→[MASK]] ##owy"), else is written against
    its neighbour with no space (SentencePiece, BPE: "weeke[nds→[MASK]]")."""
    ids, n = [int(i) for i in example["input_ids"]], int(example["input_mask"].sum())
    masked = {int(p): int(i) for p, i, w in zip(example["masked_lm_positions"], example["masked_lm_ids"],
                                                 example["masked_lm_weights"]) if w > 0}
    special = {tokenizer.cls_id, tokenizer.sep_id}
    continues = tokenizer.continuation_mask()

    def text(word: list[int]) -> str:
        decoded = tokenizer.decode(word)
        if not decoded.strip():  # a lone space piece ('Ġ' before a digit, SentencePiece's '▁', 'Ċ')
            spaces = "".join(tokenizer.token_text(i) for i in word)
            if spaces and not spaces.strip():
                return repr(spaces)[1:-1].replace(" ", "\u2423")
        return decoded.strip() or tokenizer.id_to_token(word[0])  # (a control piece decodes to "")

    words: list[list[int] | str] = []  # a word's ids, or a masked position's rendering
    glued: set[int] = set()  # words written against the one before: the same word's, across a mask
    for position in range(n):
        token = ids[position]
        original = masked.get(position, token)
        joins = bool(continues[original] and words and (isinstance(words[-1], str) or words[-1][-1] not in special))
        if joins and position not in masked and isinstance(words[-1], list):
            words[-1].append(token)
            continue
        if joins and not tokenizer.id_to_token(original).startswith("##"):  # (a "##" piece shows it continues)
            glued.add(len(words))
        words.append(f"[{text([masked[position]])}→{text([token])}]" if position in masked else [token])
    return "".join(("" if i == 0 or i in glued else " ") + (word if isinstance(word, str) else text(word))
                   for i, word in enumerate(words))


def layout(example: dict) -> str:
    """The row's segments as runs of positions, "A 0-48, B 49-63" (packed rows: each pair's,
    "2A 33-50"), and where the position ids start again: what the model reads besides the ids."""
    n = int(example["input_mask"].sum())
    segments = np.asarray(example["segment_ids"][:n])
    packed = "sequence_ids" in example
    pairs = np.asarray(example["sequence_ids"][:n]) if packed else np.zeros(n, np.int64)
    runs, start = [], 0
    for position in range(1, n + 1):
        if position == n or (segments[position], pairs[position]) != (segments[start], pairs[start]):
            runs.append(f"{pairs[start] if packed else ''}{'AB'[segments[start]]} {start}-{position - 1}")
            start = position
    line = "segments: " + ", ".join(runs)
    if "position_ids" in example:
        restarts = np.flatnonzero(np.asarray(example["position_ids"][:n]) == 0)
        line += "; position ids from 0 at " + ", ".join(map(str, restarts))
    return line


def nsp_labels(examples: dict) -> tuple[np.ndarray, np.ndarray]:
    """(<int>[B, K] next-sentence labels, <float>[B, K] weights: 1 for each real pair) of rows
    of K pairs (packed: next_sentence_weights says which are real) or of one pair (K = 1)."""
    labels = np.asarray(examples["next_sentence_labels"])
    if labels.ndim == 1:
        return labels[:, None], np.ones((len(labels), 1), np.float32)
    return labels, np.asarray(examples["next_sentence_weights"])


def statistics(examples: dict, tokenizer, config) -> dict[str, str]:
    """Masking, NSP and length statistics as printable lines (packed rows: NSP over the real
    pairs; candidates: the real tokens other than [CLS] and [SEP], wherever they are)."""
    lengths = examples["input_mask"].sum(1)
    real = examples["masked_lm_weights"] > 0
    rows = np.broadcast_to(np.arange(len(lengths))[:, None], real.shape)
    shown = examples["input_ids"][rows[real], examples["masked_lm_positions"][real]]
    original = examples["masked_lm_ids"][real]
    predictions = real.sum(1)
    labels, weights = nsp_labels(examples)
    pairs = weights.sum(1)
    unmasked = np.array(examples["input_ids"])  # special tokens counted before masking (a random
    unmasked[rows[real], examples["masked_lm_positions"][real]] = original  # replacement may draw [SEP])
    specials = np.isin(unmasked, [tokenizer.cls_id, tokenizer.sep_id]) & (examples["input_mask"] > 0)
    candidates = lengths - specials.sum(1)
    if labels.shape[1] == 1:
        from bertjax.data import masking

        expected = masking.num_to_predict(lengths, config.masked_lm_prob, config.max_predictions_per_seq).numpy()
        rule = f"; equal to min(max, max(1, round(n*p))): {np.mean(predictions == expected):.1%}"
    else:
        rule = f"; {pairs.mean():.2f} pairs a row, each masked on its own"
    max_len = config.max_seq_length
    buckets = collections.Counter(np.minimum(lengths * 8 // max_len, 7))
    return {
        "sequences": f"{len(lengths)}",
        "masked share of real tokens": f"{real.sum() / lengths.sum():.2%} (target {config.masked_lm_prob:.0%})",
        "masked share of candidates": f"{real.sum() / candidates.sum():.2%} ([CLS]/[SEP] excluded)",
        "masked as [MASK] / unchanged / random":
            f"{np.mean(shown == tokenizer.mask_id):.1%} / {np.mean(shown == original):.1%} / "
            f"{np.mean((shown != tokenizer.mask_id) & (shown != original)):.1%}",
        "predictions per sequence": f"mean {predictions.mean():.2f}, min {predictions.min()}, max {predictions.max()}"
                                    + rule,
        **({"NSP random (label 1)": f"{(labels * weights).sum() / weights.sum():.1%}"}
           if config.next_sentence_prediction else {}),
        "length": f"mean {lengths.mean():.1f}, median {np.median(lengths):.0f}, min {lengths.min()}, max "
                  f"{lengths.max()} of {max_len}",
        "length histogram (eighths of max)": ", ".join(
            f"<={(b + 1) * max_len // 8}: {buckets[b] / len(lengths):.1%}" for b in range(8)),
        "short (< half of max)": f"{np.mean(lengths < max_len // 2):.1%} (short_seq_prob {config.short_seq_prob})",
    }


# What decides the prepared data (prepare.ensure_prepared compares these); masking and
# lengths are applied online, so changing them reuses the folder.
_PREPARE_KEYS = ("source", "input_pattern", "text_key", "tfds_name", "tfds_split", "tfds_text_feature",
                 "tfds_data_dir", "tokenizer", "vocab_path", "do_lower_case", "eval_fraction")


def default_workdir(data_config) -> str:
    """<tmp>/bertjax_inspect/<hash of what decides the prepared data>: a folder per corpus, and
    per state of its files and vocabulary (an edit since makes another, where a folder kept for
    the pattern's name alone would be refused as prepared with other settings)."""
    from bertjax.data import sources

    settings = {key: data_config[key] for key in _PREPARE_KEYS}
    if data_config.source in ("text", "jsonl", "parquet"):
        units = sources.list_units(data_config)
        settings.update(units=units, content=sources.content_samples(units))
    if data_config.vocab_path:
        try:
            settings["vocabulary"] = fileio.content_hash(data_config.vocab_path)
        except (OSError, *fileio.remote_errors()) as e:  # (not there, a folder)
            why = getattr(e, "strerror", None) or getattr(e, "message", None) or e
            raise ValueError(f"config.data.vocab_path={data_config.vocab_path}: {why}") from None
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), "bertjax_inspect", digest)


# What a pre-training workdir holds before its first checkpoint (and inspect_data's epoch sizes).
_PRETRAINING_WORKDIR = {".lock", "checkpoints", "data", "epoch_sizes", "metrics.jsonl", "tensorboard", "tokenizer"}


def _take_the_runs_data_settings(config, workdir: str) -> None:
    """config.data as the pre-training run in `workdir` read it (its checkpoints' saved config:
    its prepared data, masking, lengths, pairing), saying where --config differs; nothing for a
    workdir before its first checkpoint (its prepared data/, logs). ValueError for any other folder:
    a fine-tuning run's, or one holding other files, where preparing would write data/."""
    from bertjax import checkpointing, run_config

    directory = run_config.own_checkpoints(workdir)
    if directory is None:
        others = sorted(set(fileio.listdir(workdir)) - _PRETRAINING_WORKDIR) if fileio.isdir(workdir) else []
        if {"metadata.json", "settings.json"} & set(others) or any(name.endswith(".tfrecord") for name in others):
            raise ValueError(f"--workdir={workdir} is prepared data, no run's workdir: read it with "
                             f"--config.data.source=prepared --config.data.input_pattern={workdir}")
        others = [name for name in others if not name.startswith(".")] or others  # (a lock file last)
        if others:
            raise ValueError(f"--workdir={workdir} holds no pre-training run's checkpoints but {others[0]}: give a "
                             "pre-training run's workdir, or leave --workdir out")
        return
    saved = checkpointing.read_meta(directory)["config"] or {}
    if run_config.run_kind(saved) != "pre-training":
        raise ValueError(f"--workdir={workdir} holds a {run_config.run_kind(saved)} run; inspect_data shows "
                         "pre-training examples: give a pre-training run's workdir")
    # (a setting of another source the run was given, and ignored, is not taken: it would be refused)
    unread = settings_unread(saved.get("data", {}))
    data = {key: value for key, value in saved.get("data", {}).items() if key in config.data and key not in unread}
    changes = [f"data.{key} {config.data[key]!r} -> {value!r}" for key, value in sorted(data.items())
               if config.data[key] != value]
    _check_relative_paths_resolve(data, workdir)
    with config.unlocked():
        config.data.update(data)
    print(f"the examples the run in {workdir} reads, by its data settings"
          + (f" (--config's -> the run's: {run_config.first_changes(changes)})" if changes else ""))


# The data settings that name files or folders.
_PATH_KEYS = ("input_pattern", "eval_input_pattern", "vocab_path", "prepared_dir", "tfds_data_dir")


def _check_relative_paths_resolve(data: dict, workdir: str) -> None:
    """ValueError for a run's local relative path that names nothing from this folder: it was
    relative to the folder the run was launched from."""
    for key in _PATH_KEYS:
        for path in (part.strip() for part in str(data.get(key) or "").split(",")):
            if path and not fileio.is_remote(path) and not os.path.isabs(path) and not fileio.glob(path):
                raise ValueError(f"the run in {workdir} was given config.data.{key}={data[key]!r}, relative to the "
                                 f"folder it was launched from; {path!r} names nothing from here ({os.getcwd()}): "
                                 "run inspect_data from that folder")


def main(_):
    config = FLAGS.config
    if FLAGS.dump and fileio.exists(FLAGS.dump):
        raise ValueError(f"--dump={FLAGS.dump} exists; give another name (it would be overwritten)")
    if FLAGS.dump and not fileio.is_remote(FLAGS.dump) and not fileio.isdir(fileio.parent(FLAGS.dump)):
        # (before the examples are drawn; a gs:// prefix needs no folder)
        raise ValueError(f"--dump={FLAGS.dump}: no folder {fileio.parent(FLAGS.dump)} to write it in")
    if FLAGS.workdir:
        _take_the_runs_data_settings(config, FLAGS.workdir)
    from bertjax import run_config

    check_data_config(config.data)  # before the corpus is prepared into the workdir
    run_config.check_seed(config.data.seed, "config.data.seed")
    prepare.check_vocabulary_given(config.data)
    from bertjax.data import pipelines

    workdir = FLAGS.workdir or default_workdir(config.data)
    pipeline = pipelines.make_pipeline(config.data, workdir, batch_size=min(256, FLAGS.num_examples),
                                       split=FLAGS.split)
    tokenizer = getattr(pipeline, "tokenizer", None) or prepare.load_tokenizer_for(config.data, workdir)
    batches, count = [], 0
    for batch in pipeline.batches():
        batches.append(batch)
        count += len(batch["input_ids"])
        if count >= FLAGS.num_examples:
            break
    examples = {k: np.concatenate([b[k] for b in batches])[:FLAGS.num_examples] for k in batches[0]}
    nsp = config.data.next_sentence_prediction  # (off: full rows, whose labels are placeholders)
    for i in range(min(FLAGS.num_print, FLAGS.num_examples)):
        example = {k: v[i] for k, v in examples.items()}
        labels, weights = nsp_labels({k: v[i:i + 1] for k, v in examples.items()})
        said = ", ".join(f"{int(label)} ({'random' if label else 'IsNext'})" for label in labels[0][weights[0] > 0])
        print(f"--- example {i}" + (f": NSP label{'s' if labels.shape[1] > 1 else ''} {said}" if nsp else ""))
        print(render(example, tokenizer))
        print(layout(example))
    print("--- statistics")
    for name, value in statistics(examples, tokenizer, config.data).items():
        print(f"{name:>40}: {value}")
    if FLAGS.dump:
        fileio.write_with(FLAGS.dump, lambda f: np.savez(f, **examples))  # (zip seeks: gs:// files cannot)
        print(f"wrote {len(examples['input_ids'])} examples to {FLAGS.dump}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["config"])
    cli.run(main)

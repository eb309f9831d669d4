"""The configured pre-training input: prepared shards or the original TFRecords."""

from __future__ import annotations

from absl import logging

from bertjax.data import original_tfrecord, prepare, sources
from bertjax.data.pretraining import PretrainingPipeline
from bertjax.runtime import fileio


def make_pipeline(data_config, workdir: str, *, batch_size: int, process_index: int = 0, process_count: int = 1,
                  split: str = "train"):
    """The configured source's pipeline (PretrainingPipeline or OriginalTFRecordPipeline).

    Prepared sources: prepares shards into `data_config.prepared_dir` (or <workdir>/data)
    unless done. `original_tfrecord`: reads `input_pattern` (train) or `eval_input_pattern`.
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if data_config.source == "original_tfrecord":
        key = "input_pattern" if split == "train" else "eval_input_pattern"
        if not data_config[key] and split == "eval":  # (evaluation is on by default)
            raise ValueError("config.data.eval_input_pattern is empty: give the held-out records' globs (made as the "
                             "training ones were), or have pre-training evaluate nothing with config.train.eval_every=0")
        paths = sources.expand_patterns(data_config[key], f"config.data.{key}", "TFRecord files")
        vocab_size = prepare.vocab_size_for(data_config, data_config.prepared_dir or fileio.join(workdir, "data"))
        return original_tfrecord.OriginalTFRecordPipeline(data_config, paths=paths, batch_size=batch_size,
                                                          process_index=process_index, process_count=process_count,
                                                          vocab_size=vocab_size, split=split)
    data_dir = data_config.prepared_dir or fileio.join(workdir, "data")
    metadata = prepare.ensure_prepared(data_config, data_dir)
    tokenizer = prepare.load_tokenizer_for(data_config, data_dir)
    entry = metadata["splits"][split]
    check_can_pair(data_config, metadata, split)
    # A shard that got no documents of this split is an empty file: skip it.
    paths = [fileio.join(metadata["dir"], name) for name, count in zip(entry["shards"], entry["shard_documents"])
             if count > 0]
    if not paths:
        documents = sum(entry["documents"] for entry in metadata["splits"].values())
        fraction = metadata["settings"]["eval_fraction"]  # the folder's: a prepared source's may differ
        # (the folder is refused once the corpus or eval_fraction changes: a walkthrough followed
        # the advice to give more documents and was then refused for other settings)
        remedy = ("; have pre-training evaluate nothing with config.train.eval_every=0 (inspect_data.py: look at "
                  "--split=train), or delete that folder and prepare again with documents to hold out (more of "
                  "them, or a larger config.data.eval_fraction)" if split == "eval" else "")
        raise ValueError(f"{metadata['dir']}: no {split} documents among the corpus's {documents} (prepared with "
                         f"config.data.eval_fraction={fraction}){remedy}")
    epoch_sizes_path = fileio.join(workdir, "epoch_sizes", f"{split}-{process_index:05d}-of-{process_count:05d}.json")
    return PretrainingPipeline(data_config, shard_paths=paths, tokenizer=tokenizer, batch_size=batch_size,
                               process_index=process_index, process_count=process_count, split=split,
                               epoch_sizes_path=epoch_sizes_path)


def corpus_name(data_config) -> str:
    """The corpus a data config reads, as the user gave it."""
    if data_config.source == "tfds":
        return f"config.data.tfds_name={data_config.tfds_name!r}"
    if data_config.input_pattern:
        return f"config.data.input_pattern={data_config.input_pattern!r}"
    return f"config.data.source={data_config.source!r}"


def check_can_pair(data_config, metadata: dict, split: str) -> None:
    """ValueError when `split` of the prepared corpus can give no NSP pair: one document of
    one sentence (a text without line breaks) has neither a second sentence for B nor
    another document to draw a random B from, and the pipeline would wait forever. A warning
    when its sentences average over half a pair's tokens: two seldom fit, so most pairs are
    cut; over a whole pair's, most chunks are one sentence, whose B is always random (NSP
    labels far from 50/50). Without NSP or full rows, a warning when they average over a row:
    each chunk is then one sentence cut to the row, and the rest of it is never read."""
    entry = metadata["splits"][split]
    per_sentence, pair = entry["tokens"] / max(1, entry["sentences"]), data_config.max_seq_length - 3
    if not data_config.next_sentence_prediction and not data_config.get("full_rows") and per_sentence > pair + 1:
        logging.warning(
            "%s: its %s sentences average %.0f tokens against config.data.max_seq_length=%d: each row takes one "
            "sentence cut to fit, and about %.0f%% of the tokens are never trained on. Is the text split into "
            "sentences? (or set config.data.full_rows=True: documents end to end, cut into rows)",
            corpus_name(data_config), split, per_sentence, data_config.max_seq_length,
            100 * (1 - (pair + 1) / per_sentence))
    if data_config.next_sentence_prediction and per_sentence > pair / 2:
        effect = ("most pairs will get a random B (NSP labels far from 50/50), their sentences cut" if
                  per_sentence >= pair else "two seldom fit, so most pairs are cut to fit")
        logging.warning(
            "%s: its %s sentences average %.0f tokens against config.data.max_seq_length=%d: %s. Is the text "
            "split into sentences? (BERT format: one a line; JSONL, Parquet and TFDS text is split at [.!?] and "
            "a space before a capital, so lower-cased or unpunctuated text stays whole paragraphs)",
            corpus_name(data_config), split, per_sentence, data_config.max_seq_length, effect)
    # A corpus of one document prepare warns of; a split of one (the other documents in the
    # other split) nothing did.
    corpus_documents = sum(each["documents"] for each in metadata["splits"].values())
    if data_config.next_sentence_prediction and entry["documents"] == 1 < entry["sentences"] and corpus_documents > 1:
        logging.warning(
            "%s: its %s split is one document, so next-sentence prediction draws its random B from that document "
            "and IsNext and NotNext differ only in order%s", corpus_name(data_config), split,
            " (its NSP accuracy says little)" if split == "eval" else "")
    if data_config.next_sentence_prediction and entry["documents"] == 1 and entry["sentences"] == 1:
        raise ValueError(
            f"{corpus_name(data_config)}: its {split} split is one document of one sentence ({entry['tokens']:,} "
            f"tokens; a text without line breaks?), from which next-sentence prediction can make no pair. BERT "
            f"format is one sentence per line, a blank line between documents; or set "
            f"config.data.next_sentence_prediction=False")

"""The configured pre-training input: prepared shards or the original TFRecords."""

from __future__ import annotations

from bertjax import fileio
from bertjax.data import original_tfrecord, prepare
from bertjax.data.pretraining import PretrainingPipeline


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
        pattern = data_config[key]
        paths = sorted(p for glob_ in pattern.split(",") if glob_.strip() for p in fileio.glob(glob_.strip()))
        if not paths:
            raise FileNotFoundError(f"config.data.{key}={pattern!r} matches no files")
        return original_tfrecord.OriginalTFRecordPipeline(data_config, paths=paths, batch_size=batch_size,
                                                          process_index=process_index, process_count=process_count)
    data_dir = data_config.prepared_dir or fileio.join(workdir, "data")
    metadata = prepare.ensure_prepared(data_config, data_dir)
    tokenizer = prepare.load_tokenizer_for(data_config, data_dir)
    entry = metadata["splits"][split]
    # A shard that got no documents of this split is an empty file: skip it.
    paths = [fileio.join(metadata["dir"], name) for name, count in zip(entry["shards"], entry["shard_documents"])
             if count > 0]
    if not paths:
        raise ValueError(f"{metadata['dir']}: no {split} documents (config.data.eval_fraction="
                         f"{data_config.eval_fraction})")
    epoch_sizes_path = fileio.join(workdir, "epoch_sizes", f"{split}-{process_index:05d}-of-{process_count:05d}.json")
    return PretrainingPipeline(data_config, shard_paths=paths, tokenizer=tokenizer, batch_size=batch_size,
                               process_index=process_index, process_count=process_count, split=split,
                               epoch_sizes_path=epoch_sizes_path)

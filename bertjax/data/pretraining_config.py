"""Pre-training's data settings (config.data) checked without TensorFlow: a launcher refuses a
bad value before it imports the input pipeline (pretraining.py), which needs TensorFlow."""

from __future__ import annotations

from absl import logging

from bertjax.data import sources

# Text sources (prepared on first use), a directory prepared earlier, Google's pre-training records.
SOURCES = (*sources.SOURCES, "prepared", "original_tfrecord")
FULL_ROWS_ATTENTION = ("across", "document")  # full rows: attention across a row's documents or within each

# (whole_word_mask, masked_lm_prob, mask_token_prob, random_token_prob): the original's defaults,
# which original TFRecords were masked with (or by their own flags, not bertjax's).
ORIGINAL_MASKING = (False, 0.15, 0.8, 0.1)


# Settings that some sources read, and which: set with another source, they would be ignored
# (the run reading another corpus than meant), so they are refused. Unset: "" (text_key: "text").
_READ_BY = {"input_pattern": ("text", "jsonl", "parquet", "prepared", "original_tfrecord"),
            "tfds_name": ("tfds",), "tfds_split": ("tfds",), "tfds_text_feature": ("tfds",),
            "text_key": ("jsonl", "parquet"),
            "prepared_dir": ("demo", "text", "jsonl", "parquet", "tfds", "original_tfrecord")}
_UNSET = {"text_key": "text", "tfds_split": "train", "tfds_text_feature": "text"}


def settings_unread(data) -> list[str]:
    """The keys of `data` (config.data, or a run's saved data dict) set for another source than
    its own (`_READ_BY`); the demo source's own error names input_pattern and tfds_name; none
    for settings without a source."""
    source = data.get("source")
    if source is None:
        return []
    return [key for key, readers in _READ_BY.items()
            if data.get(key) not in ("", None, _UNSET.get(key, "")) and source not in readers
            and not (source == "demo" and key in ("input_pattern", "tfds_name"))]


def check_data_config(data_config) -> None:
    """Range checks ml_collections cannot do; errors name the config key."""
    d = data_config
    checks = [
        (d.source in SOURCES, f"source must be one of {', '.join(SOURCES)}, got {d.source!r}"),
        (d.source != "demo" or not (d.get("input_pattern") or d.get("tfds_name")),
         "input_pattern and tfds_name name a corpus, but source is 'demo' (the embedded corpus): set source to "
         "text, jsonl, parquet, tfds, prepared or original_tfrecord"),
        (not d.get("eval_input_pattern") or d.source == "original_tfrecord",
         f"eval_input_pattern is read with source='original_tfrecord' only (source is {d.source!r})"),
        *((False, f"{key}={d[key]!r} is read with source {' or '.join(_READ_BY[key])}, not {d.source!r}: leave "
                  "it out (it would be ignored)") for key in settings_unread(d)),
        (d.max_seq_length >= 8, "max_seq_length must be >= 8"),
        (0.0 < d.masked_lm_prob < 1.0, "masked_lm_prob must be in (0, 1)"),  # before the cap that follows it
        (0 < d.max_predictions_per_seq <= d.max_seq_length, "max_predictions_per_seq must be in [1, max_seq_length]"),
        (0.0 <= d.mask_token_prob <= 1.0 and 0.0 <= d.random_token_prob <= 1.0
         and d.mask_token_prob + d.random_token_prob <= 1.0 + 1e-9,
         "mask_token_prob and random_token_prob must be in [0, 1] with a sum <= 1 (the rest is kept)"),
        (0.0 <= d.short_seq_prob <= 1.0, "short_seq_prob must be in [0, 1]"),
        (d.shuffle_buffer >= 1 and d.instance_shuffle_buffer >= 1, "shuffle buffers must be >= 1"),
        (isinstance(d.pack_pairs, int) and d.pack_pairs >= 0, "pack_pairs must be an int >= 0 (0: no packing)"),
        (not d.pack_pairs or d.source != "original_tfrecord",
         "pack_pairs needs a prepared source (original_tfrecord rows are fixed)"),
        (d.source != "original_tfrecord" or (ORIGINAL_MASKING == (d.whole_word_mask, d.masked_lm_prob,
                                                                  d.mask_token_prob, d.random_token_prob)),
         "whole_word_mask, masked_lm_prob, mask_token_prob and random_token_prob would change nothing with "
         "source='original_tfrecord': create_pretraining_data.py masked its records (leave them at "
         f"{', '.join(map(str, ORIGINAL_MASKING))})"),
        *((not (d.full_rows and clash), f"full_rows=True (documents end to end, cut into rows) needs {need}")
          for clash, need in ((d.next_sentence_prediction, "next_sentence_prediction=False (a row has no pair)"),
                              (d.pack_pairs, f"pack_pairs=0 (it is {d.pack_pairs}: rows are full already)"),
                              (d.source == "original_tfrecord", "a prepared source (original_tfrecord rows are "
                                                                "fixed)"))),
        (d.full_rows_attention in FULL_ROWS_ATTENTION,
         f"full_rows_attention must be one of {', '.join(FULL_ROWS_ATTENTION)}, got {d.full_rows_attention!r}"),
        (d.full_rows or d.full_rows_attention == "across",
         "full_rows_attention='document' is for full rows (set full_rows=True; pairs are one document's or "
         "packed with pack_pairs)"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"config.data: {message}")
    wanted = max(1, round(d.max_seq_length * d.masked_lm_prob))  # a full row's share, as the original counts
    # The original's cap: legitimate, but rarely what a longer row meant (the original's records
    # were made with theirs, which their shapes fix).
    if d.max_predictions_per_seq < wanted and d.source != "original_tfrecord":
        logging.warning("config.data.max_predictions_per_seq=%d caps the masked tokens of a full row of %d at "
                        "%.1f%%, below masked_lm_prob=%g (%d tokens); raise it to %d for that rate",
                        d.max_predictions_per_seq, d.max_seq_length, 100 * d.max_predictions_per_seq / d.max_seq_length,
                        d.masked_lm_prob, wanted, wanted)

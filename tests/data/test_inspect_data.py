"""launch/inspect_data.py: rendering with visible masks, and the statistics it prints."""

import numpy as np
import pytest

import synthetic
from bertjax.data import pretraining
from configs import pretrain
from launch import inspect_data


def test_render_and_statistics(tmp_path):
    paths = synthetic.write_shards(str(tmp_path), 50, 1, min_sentences=5, max_sentences=10)
    config = pretrain.get_config("tiny").data
    config.update(dict(max_seq_length=32, max_predictions_per_seq=5, shuffle_buffer=50, instance_shuffle_buffer=50))
    tokenizer = synthetic.tokenizer_for(50)
    pipeline = pretraining.PretrainingPipeline(config, shard_paths=paths, tokenizer=tokenizer, batch_size=64)
    batch = next(pipeline.batches())
    example = {k: v[0] for k, v in batch.items()}
    text = inspect_data.render(example, tokenizer)
    masked = int(example["masked_lm_weights"].sum())
    assert text.startswith("[CLS] ") and text.endswith(" [SEP]") and text.count("→") == masked
    position, original = int(example["masked_lm_positions"][0]), int(example["masked_lm_ids"][0])
    shown = tokenizer.id_to_token(int(example["input_ids"][position]))
    assert f"[t{original}→{shown}]" in text
    # What the model reads besides the ids (a review: the docs' "see what the model sees" left
    # segment ids out).
    first_b = int(np.argmax(example["segment_ids"]))
    length = int(example["input_mask"].sum())
    assert inspect_data.layout(example) == f"segments: A 0-{first_b - 1}, B {first_b}-{length - 1}"
    stats = inspect_data.statistics(batch, tokenizer, config)
    assert stats["sequences"] == "64"
    assert "equal to min(max, max(1, round(n*p))): 100.0%" in stats["predictions per sequence"]
    assert stats["NSP random (label 1)"] == f"{np.mean(batch['next_sentence_labels']):.1%}"


@pytest.mark.parametrize("kind", ["wordpiece", "huggingface"])
def test_a_rows_words_read_as_words_whatever_marks_the_tokenizer_uses(tmp_path, kind):
    """Only WordPiece's "##" pieces were joined: a byte-level BPE's rows printed "Ġ u n a f ..."
    (a walkthrough). A piece that starts a segment cut at its front stays apart from [CLS], and
    a masked piece from the word around it."""
    import os

    from bertjax import tokenization
    from bertjax.data.corpora import demo_corpus

    if kind == "wordpiece":
        tokenizer = tokenization.Tokenizer.from_vocab_file(demo_corpus.demo_vocab_path(str(tmp_path)))
        words = "the unaffable zebra visited oslo ."
    else:
        tokenizer = tokenization.load_tokenizer("huggingface", os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "hf_modernbert", "classifier",
            "tokenizer.json"), None)
        words = "The unaffable zebra visited Oslo ."
    ids = tokenizer.encode("The unaffable zebra visited Oslo.")
    assert len(ids) > 20  # the words in many pieces
    row = [tokenizer.cls_id, *ids, tokenizer.sep_id]
    example = {"input_ids": np.array(row), "input_mask": np.ones(len(row), np.int32),
               "masked_lm_positions": np.array([0]), "masked_lm_ids": np.array([0]), "masked_lm_weights": np.zeros(1)}
    assert inspect_data.render(example, tokenizer) == f"[CLS] {words} [SEP]"
    cut = {**example, "input_ids": np.array([tokenizer.cls_id, *ids[2:], tokenizer.sep_id])}
    cut["input_mask"] = np.ones(len(cut["input_ids"]), np.int32)
    continuing = tokenizer.decode(ids[2:3]).strip()
    assert inspect_data.render(cut, tokenizer).startswith(f"[CLS] {continuing}")
    masked = {**example, "input_ids": np.array([*row[:3], tokenizer.mask_id, *row[4:]]),
              "masked_lm_positions": np.array([3]), "masked_lm_ids": np.array([row[3]]),
              "masked_lm_weights": np.ones(1)}
    shown = inspect_data.render(masked, tokenizer)
    assert f"[{tokenizer.decode([row[3]]).strip() or tokenizer.id_to_token(row[3])}→[MASK]]" in shown, shown
    if kind != "wordpiece":  # the space before a masked digit, a token alone: shown as "Ġ" (a walkthrough)
        ids = tokenizer.encode("About 3 cats")
        digit = ids.index(tokenizer.encode("3")[0])
        assert tokenizer.id_to_token(ids[digit - 1]) == "\u0120"
        row = [tokenizer.cls_id, *ids, tokenizer.sep_id]
        row[digit + 1] = tokenizer.mask_id
        spaced = {"input_ids": np.array(row), "input_mask": np.ones(len(row), np.int32),
                  "masked_lm_positions": np.array([digit + 1]), "masked_lm_ids": np.array([ids[digit]]),
                  "masked_lm_weights": np.ones(1)}
        # (the digit continues the space's word: written against it, as any piece beside a mask)
        assert inspect_data.render(spaced, tokenizer).startswith("[CLS] About \u2423[3→[MASK]] cats")


def test_each_corpus_gets_its_own_default_folder(tmp_path):
    """... and each state of its files: a corpus edited since its last inspection was refused
    as 'prepared with other settings', naming a temporary folder the user never chose (a review)."""
    demo, text, masked = (pretrain.get_config("tiny").data for _ in range(3))
    (tmp_path / "a.txt").write_text("One sentence.\nTwo sentences.\n")
    text.update(dict(source="text", input_pattern=str(tmp_path / "*.txt")))
    masked.update(dict(masked_lm_prob=0.2, max_seq_length=64))  # applied online: the same prepared data
    assert inspect_data.default_workdir(demo) == inspect_data.default_workdir(masked)
    before = inspect_data.default_workdir(text)
    assert inspect_data.default_workdir(demo) != before
    (tmp_path / "a.txt").write_text("ONE sentence.\nTwo sentences.\n")  # the same size
    assert inspect_data.default_workdir(text) != before


def test_packed_rows_count_nsp_over_their_real_pairs(tmp_path):
    """pack_pairs: labels [B, K] with weights saying which pairs are real; the random share is
    over those, and each pair's three special tokens leave the candidates."""
    paths = synthetic.write_shards(str(tmp_path), 50, 1, min_sentences=5, max_sentences=10)
    config = pretrain.get_config("tiny").data
    config.update(dict(max_seq_length=64, max_predictions_per_seq=10, shuffle_buffer=50, instance_shuffle_buffer=50,
                       pack_pairs=3))
    tokenizer = synthetic.tokenizer_for(50)
    batch = next(pretraining.PretrainingPipeline(config, shard_paths=paths, tokenizer=tokenizer,
                                                 batch_size=64).batches())
    labels, weights = batch["next_sentence_labels"], batch["next_sentence_weights"]
    assert labels.shape == weights.shape == (64, 3) and 0 < weights.sum() < labels.size
    stats = inspect_data.statistics(batch, tokenizer, config)
    assert stats["NSP random (label 1)"] == f"{(labels * weights).sum() / weights.sum():.1%}"
    candidates = batch["input_mask"].sum() - 3 * weights.sum()
    row = next(k for k in range(64) if weights[k].sum() > 1)  # a row of several pairs: each its runs, positions
    shown = inspect_data.layout({key: value[row] for key, value in batch.items()})
    assert shown.startswith("segments: 1A 0-") and ", 2A " in shown and "; position ids from 0 at 0, " in shown
    assert stats["masked share of candidates"].startswith(f"{(batch['masked_lm_weights'] > 0).sum() / candidates:.2%}")
    assert "pairs a row, each masked on its own" in stats["predictions per sequence"]


def test_candidates_are_the_real_tokens_other_than_cls_and_sep_without_nsp():
    """Packed rows without NSP hold [CLS] a [SEP] per pair: 2 per pair leave the candidates, not
    2 per row (a review: 11.11% shown for 12.50%). A hand-made row of two pairs, one of whose
    masked tokens was replaced by a random [SEP]: 9 real tokens, 4 of them [CLS]/[SEP] before
    masking, 2 masked -> 2 / 5 = 40.00%."""
    tokenizer = synthetic.tokenizer_for(50)
    cls, sep, pad, mask = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id
    a, b, c = (synthetic.FIRST_ID + k for k in range(3))
    batch = {"input_ids": np.array([[cls, mask, b, sep, cls, sep, c, sep, c, pad]]),  # position 5: a random [SEP]
             "input_mask": np.array([[1] * 9 + [0]]), "segment_ids": np.zeros((1, 10), np.int64),
             "masked_lm_positions": np.array([[1, 5, 0]]), "masked_lm_ids": np.array([[a, b, 0]]),
             "masked_lm_weights": np.array([[1.0, 1.0, 0.0]]), "next_sentence_labels": np.array([0])}
    config = pretrain.get_config("tiny").data
    config.update(dict(max_seq_length=10, max_predictions_per_seq=3, next_sentence_prediction=False))
    stats = inspect_data.statistics(batch, tokenizer, config)
    assert stats["masked share of candidates"].startswith("40.00%")
    assert "NSP random (label 1)" not in stats  # (no NSP: its labels are placeholders; a walkthrough)


def test_a_runs_workdir_reads_the_data_the_run_read(tmp_path, capsys):
    """--workdir of a run that read config.data.prepared_dir prepared a second copy into
    workdir/data, where the docs say a run's workdir reuses its data (a walkthrough); and drew
    the rows by --config's masking, not the run's (a walkthrough): the run's data settings."""
    import jax.numpy as jnp

    from bertjax import checkpointing

    untouched = pretrain.get_config("tiny")
    inspect_data._take_the_runs_data_settings(untouched, str(tmp_path / "nothing"))  # no run there yet
    for name in ("data", "epoch_sizes", "tokenizer", "tensorboard", "metrics.jsonl"):  # nor its first save yet
        (tmp_path / "starting" / name).mkdir(parents=True)
    inspect_data._take_the_runs_data_settings(untouched, str(tmp_path / "starting"))
    assert untouched.data.to_dict() == pretrain.get_config("tiny").data.to_dict()
    (tmp_path / "starting" / "best").mkdir()  # a fine-tuning run's
    with pytest.raises(ValueError, match=r"starting holds no pre-training run's checkpoints but best"):
        inspect_data._take_the_runs_data_settings(untouched, str(tmp_path / "starting"))
    # A prepare_data folder is said to be one, with the settings that read it (a review: it was
    # named by its hidden lock file).
    for name in (".prepare.lock", "metadata.json", "settings.json", "train-00000.tfrecord"):
        (tmp_path / "prepared_here" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "prepared_here" / name).write_text("")
    with pytest.raises(ValueError, match=r"prepared_here is prepared data, no run's workdir: read it with "
                                         r"--config.data.source=prepared --config.data.input_pattern=.*prepared_here$"):
        inspect_data._take_the_runs_data_settings(untouched, str(tmp_path / "prepared_here"))
    for run, prepared in (("own", ""), ("shared", str(tmp_path / "prepared"))):
        checkpointer = checkpointing.Checkpointer(str(tmp_path / run / "checkpoints"), save_interval_steps=1,
                                                  max_to_keep=1, async_save=False)
        # (a run launched before settings of another source were refused: its stray tfds_name not taken)
        checkpointer.save(1, {"w": jnp.zeros(2)}, data_position=1,
                          config={"data": {"source": "demo", "prepared_dir": prepared, "masked_lm_prob": 0.3,
                                           "gone_key": 1, "text_key": "ignored_by_its_demo_source"}})
        checkpointer.close()
        config = pretrain.get_config("tiny")
        inspect_data._take_the_runs_data_settings(config, str(tmp_path / run))
        assert (config.data.prepared_dir, config.data.masked_lm_prob, config.data.text_key) == (prepared, 0.3, "text")
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"the examples the run in {tmp_path}/shared reads, by its data settings (--config's -> the run's: "
        f"data.masked_lm_prob 0.15 -> 0.3; data.prepared_dir '' -> '{tmp_path}/prepared')")

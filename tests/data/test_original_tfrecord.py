"""Reading TFRecords in the exact format of google-research/bert's create_pretraining_data.py."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bertjax.data import original_tfrecord, pipelines, pretraining_config
from configs import pretrain

SEQ, PRED = 16, 3


def data_config(pattern="", **overrides):
    config = pretrain.get_config("tiny").data
    config.update(dict(source="original_tfrecord", input_pattern=pattern, max_seq_length=SEQ,
                       max_predictions_per_seq=PRED, instance_shuffle_buffer=8), **overrides)
    return config


def write_original(path, first, count, seq=SEQ, pred=PRED):
    """Records as write_instance_to_example_files writes them; input_ids[0] = record number."""
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    with tf.io.TFRecordWriter(path) as writer:
        for n in range(first, first + count):
            features = {
                "input_ids": ints([n] + [7] * (seq - 1)), "input_mask": ints([1] * seq), "segment_ids": ints([0] * seq),
                "masked_lm_positions": ints([1, 2] + [0] * (pred - 2)), "masked_lm_ids": ints([n % 5, 9] + [0] * (pred - 2)),
                "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 1.0] + [0.0] * (pred - 2))),
                "next_sentence_labels": ints([n % 2]),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())


@pytest.fixture
def files(tmp_path):
    paths = [str(tmp_path / f"original-{i}.tfrecord") for i in range(3)]
    for i, path in enumerate(paths):
        write_original(path, 100 * i, 20)
    return paths


def test_reads_every_record_with_the_original_features(files, tmp_path):
    overlapping = f"{tmp_path}/original-*.tfrecord,{tmp_path}/original-1.*"  # original-1 read once
    pipeline = pipelines.make_pipeline(data_config(overlapping), str(tmp_path), batch_size=6)
    batches = pipeline.batches()
    epoch = [next(batches) for _ in range(10)]  # 60 records = one epoch
    batch = epoch[0]
    assert {k: (v.dtype, v.shape) for k, v in batch.items()} == {
        "input_ids": (np.int32, (6, SEQ)), "input_mask": (np.int32, (6, SEQ)), "segment_ids": (np.int32, (6, SEQ)),
        "masked_lm_positions": (np.int32, (6, PRED)), "masked_lm_ids": (np.int32, (6, PRED)),
        "masked_lm_weights": (np.float32, (6, PRED)), "next_sentence_labels": (np.int32, (6,))}
    numbers = np.concatenate([b["input_ids"][:, 0] for b in epoch])
    assert sorted(numbers) == sorted(100 * i + n for i in range(3) for n in range(20))
    for b in epoch:
        np.testing.assert_array_equal(b["next_sentence_labels"], b["input_ids"][:, 0] % 2)
        np.testing.assert_array_equal(b["masked_lm_ids"][:, 0], b["input_ids"][:, 0] % 5)
        np.testing.assert_array_equal(b["masked_lm_weights"], [[1.0, 1.0, 0.0]] * 6)


def test_a_glob_that_matches_nothing_is_named(files, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"config.data.input_pattern: '.*/original-\*.tfrecrod' matches no"):
        pipelines.make_pipeline(data_config(f"{files[0]},{tmp_path}/original-*.tfrecrod"), str(tmp_path),
                                batch_size=6)


def test_the_original_records_fix_the_cap_and_need_their_own_held_out_files(files, tmp_path, caplog):
    """Phase 2's records (512 tokens, 76 predictions by the original README's rule) were warned
    "raise it to 77", which every record's shape would then refuse; evaluation, on by default,
    failed on an empty eval_input_pattern without naming config.train.eval_every=0 (a review)."""
    import logging

    with caplog.at_level(logging.WARNING):
        pretraining_config.check_data_config(data_config(max_seq_length=512, max_predictions_per_seq=76))
    assert not caplog.records
    with pytest.raises(ValueError, match=r"config.data.eval_input_pattern is empty: give the held-out records' globs "
                                         r".* or have pre-training evaluate nothing with config.train.eval_every=0"):
        pipelines.make_pipeline(data_config(files[0]), str(tmp_path), batch_size=6, split="eval")
    # One held-out file on several hosts: every host reads it, as it should, without a warning
    # meant for the training input (a review).
    with caplog.at_level(logging.WARNING):
        pipelines.make_pipeline(data_config(eval_input_pattern=files[0]), str(tmp_path), batch_size=6, split="eval",
                                process_index=0, process_count=2)
        pipelines.make_pipeline(data_config(files[0]), str(tmp_path), batch_size=6, process_index=0, process_count=2)
    assert caplog.text.count("do not deal evenly") == 1


def test_resume_and_host_split(files):
    pipeline = original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=files, batch_size=7)
    assert pipeline.holds_at_least(60) and not pipeline.holds_at_least(61)  # 3 files of 20 records
    assert pipeline.dataset(0).options().autotune.enabled is False  # (records.without_autotuning_thread)
    fresh = pipeline.batches()
    fresh = [next(fresh) for _ in range(25)]  # ~3 epochs
    resumed = pipeline.batches(start_batch=17)
    for want in fresh[17:20]:
        got = next(resumed)
        for key in want:
            np.testing.assert_array_equal(want[key], got[key])
    seen = []
    for index in range(2):
        host = original_tfrecord.OriginalTFRecordPipeline(
            data_config(), paths=files[:1], batch_size=5, process_index=index, process_count=2)
        it = host.batches()
        seen.append({int(n) for _ in range(2) for n in next(it)["input_ids"][:, 0]})
    assert seen[0] and seen[1] and not seen[0] & seen[1]
    # A host with no record (a small eval file on a pod) spun over empty epochs, and a resume
    # divided by zero (a review): refused, naming the host and the file.
    write_original(files[0] + ".three", 0, 3)
    last = original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=[files[0] + ".three"], batch_size=2,
                                                      process_index=3, process_count=4)
    for start in (0, 5):
        with pytest.raises(ValueError, match=r"this host \(process 3 of 4\) gets no record of .*original-0.tfrecord"
                                             r".three: fewer records than hosts"):
            next(last.batches(start))


def test_wrong_lengths_name_the_file_and_key(files, tmp_path):
    with pytest.raises(ValueError, match=f"{files[0]}: feature 'input_ids' has {SEQ} values.*max_seq_length"):
        original_tfrecord.OriginalTFRecordPipeline(data_config(max_seq_length=32), paths=files,
                                                               batch_size=4)
    # A file of another phase's lengths among them is named at the start, not when training
    # reaches it as a "corrupt or truncated" file (a review).
    write_original(str(tmp_path / "phase2.tfrecord"), 0, 5, seq=2 * SEQ, pred=PRED + 2)
    with pytest.raises(ValueError, match=f"phase2.tfrecord: feature 'input_ids' has {2 * SEQ} values, the config "
                                         f"expects {SEQ}"):
        original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=[*files, str(tmp_path / "phase2.tfrecord")],
                                                   batch_size=4)


def test_records_that_are_not_examples_are_named(tmp_path):
    path = str(tmp_path / "other.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"\xff\xff\xff not a protocol buffer")
    with pytest.raises(ValueError, match=f"{path}: its records are not tf.train.Example protos"):
        original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=[path], batch_size=4)


def test_truncated_file_is_named(files):
    with open(files[2], "r+b") as f:
        f.truncate(os.path.getsize(files[2]) - 30)
    pipeline = original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=files, batch_size=4)
    with pytest.raises(ValueError, match=f"corrupt or truncated file {files[2]}: truncated record at \\d+"):
        it = pipeline.batches()
        for _ in range(30):
            next(it)
    # A resume counts the epoch before its first batch (the default shuffle buffer reads it whole
    # too): the count raised TensorFlow's DataLossError, naming no file, on every relaunch (a walkthrough).
    pipeline = original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=files, batch_size=4)
    with pytest.raises(ValueError, match=f"corrupt or truncated file {files[2]}"):
        next(pipeline.batches(start_batch=20))


def test_a_bad_record_inside_a_file_is_named_by_its_number_and_feature(files, tmp_path):
    """A record past the first with 31 of 32 input_ids was "corrupt or truncated" with
    TensorFlow's op wrapping; one with integer weights "had 0 values" (a walkthrough)."""
    bad = str(tmp_path / "bad.tfrecord")
    good = [r.numpy() for r in tf.data.TFRecordDataset(files[0])]
    for feature, change, said in [
            ("input_ids", lambda f: f.int64_list.value.pop(), f"record 3: feature 'input_ids' has {SEQ - 1} values, "
                                                             f"the config expects {SEQ}"),
            ("masked_lm_weights",
             lambda f: f.CopyFrom(tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * PRED))),
             "record 3: feature 'masked_lm_weights' holds int64 values; float was expected")]:
        example = tf.train.Example.FromString(good[2])
        change(example.features.feature[feature])
        with tf.io.TFRecordWriter(bad) as writer:
            for record in good[:2] + [example.SerializeToString()] + good[3:]:
                writer.write(record)
        pipeline = original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=[bad], batch_size=4)
        with pytest.raises(ValueError, match=f"^{bad}: {said}"):
            for _ in pipeline.batches():
                pass


def test_tensorflows_op_wrapping_is_left_out_of_messages(tmp_path):
    path = str(tmp_path / "text.tfrecord")
    open(path, "w").write("hello world\n")
    with pytest.raises(ValueError) as caught:
        original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=[path], batch_size=4)
    assert str(caught.value).startswith(f"unreadable TFRecord file {path}: corrupted record at 0")
    assert "function_node" not in str(caught.value) and "[Op:" not in str(caught.value)


def test_token_ids_beyond_the_vocabulary_are_refused(files):
    """Records made with a larger vocab.txt than config.data.vocab_path's: the embedding lookup
    of an id beyond the table gives NaN, and every step would be skipped as non-finite."""
    with pytest.raises(ValueError, match=f"{files[2]} holds token id 200, but the vocabulary .* has 150 tokens"):
        original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=files[2:], batch_size=4, vocab_size=150)
    # Each file's first record is checked at the start; the rest as they are read.
    pipeline = original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=files[:2], batch_size=4, vocab_size=110)
    with pytest.raises(ValueError, match=r"a record \(input_ids\) of .*original-0.tfrecord, .*original-1.tfrecord "
                                         r"holds token id 11\d, but the vocabulary"):
        for _ in pipeline.batches():
            pass
    whole = original_tfrecord.OriginalTFRecordPipeline(data_config(), paths=files, batch_size=4, vocab_size=220)
    assert len([batch for batch, _ in zip(whole.batches(), range(15))]) == 15  # ids up to 219: all in


def test_masking_settings_the_records_already_have_are_refused():
    """Original records come masked: a whole-word or 30% masking setting changed nothing, silently."""
    from bertjax.data import pretraining_config

    pretraining_config.check_data_config(data_config())
    for change in (dict(whole_word_mask=True), dict(masked_lm_prob=0.3), dict(mask_token_prob=0.9)):
        with pytest.raises(ValueError, match=r"config.data: whole_word_mask, masked_lm_prob, mask_token_prob and "
                                             r"random_token_prob would change nothing with source='original_tfrecord'"):
            pretraining_config.check_data_config(data_config(**change))

"""What a resume compares with the checkpoint's config: changed settings, and the kind of run."""

from bertjax import run_config

SAVED = {"seed": 42, "data": {"max_seq_length": 128, "prepared_dir": "/a", "test_file": ""},
         "train": {"log_every": 100, "num_steps": 10}, "mesh": {"data": -1},
         "model": {"dtype": "float32", "shape": [1, 2]}}


def test_changed_settings_lists_what_changes_the_run_and_skips_operational_ones():
    current = {"seed": 43, "data": {"max_seq_length": 64, "prepared_dir": "/b", "new_key": True, "test_file": "t.csv"},
               "train": {"log_every": 5, "num_steps": 10}, "mesh": {"data": 8}, "model": {"dtype": "float32",
                                                                                       "shape": (1, 2)}}
    assert run_config.changed_settings(SAVED, current) == [
        "data.max_seq_length 128 -> 64", "data.new_key 'unset' -> True", "seed 42 -> 43"]
    assert run_config.changed_settings(SAVED, SAVED) == []


def test_describe_changes_shows_the_first_eight():
    line = run_config.describe_changes([f"k{i} 0 -> 1" for i in range(11)])
    assert line.startswith("resumed with 11 setting(s) changed") and "k7 0 -> 1; and 3 more" in line
    assert "k8" not in line


def test_run_kind_tells_pre_training_from_each_fine_tuning_task():
    assert run_config.run_kind({"seed": 1}) == "pre-training"
    assert run_config.run_kind({"task": "sst2"}) == "fine-tuning task 'sst2'"
    assert run_config.run_kind({"task": "sst2"}) != run_config.run_kind({"task": "mnli"})


def test_a_workdir_without_checkpoints_takes_any_run(tmp_path):
    run_config.check_same_kind(str(tmp_path), {"task": "sst2"})
    (tmp_path / "checkpoints").mkdir()
    run_config.check_same_kind(str(tmp_path), {"seed": 1})



def test_the_host_count_of_a_run_reading_its_own_files_is_a_change_but_not_when_unrecorded():
    """host_split=files: each host's files follow the host count, so a resume on another count is
    no exact continuation; checkpoints from before the count was recorded do not say it."""
    from bertjax import run_config

    assert run_config.changed_settings({"data": {"process_count": 2}}, {"data": {"process_count": 4}}) == [
        "data.process_count 2 -> 4"]
    assert run_config.changed_settings({"data": {}}, {"data": {"process_count": 4}}) == []


def test_a_finished_run_is_refused_other_rows_and_other_starting_weights_but_not_moved_ones(tmp_path, monkeypatch):
    """A finished fine-tuning run relaunched on another train_file, or from another
    init_checkpoint (comparing two pre-trained models in one workdir), warned, trained nothing and
    printed its old score as theirs (a walkthrough). The rows count by their digest, so a train
    file moved is the same run; the weights by their folder, where it is still there (one since
    moved is the same run: a resume does not read it)."""
    import pytest

    from bertjax import checkpointing

    started = tmp_path / "pretrained" / "100"
    started.mkdir(parents=True)
    saved = {**SAVED, "task": "classification", "init_weights": str(started), "train_data_digest": "aaaa",
             "data": {**SAVED["data"], "train_file": "/data/train.csv"}}
    monkeypatch.setattr(run_config, "own_checkpoints", lambda workdir: workdir + "/checkpoints")
    monkeypatch.setattr(checkpointing, "read_meta", lambda directory: {"step": 10, "config": saved})
    run_config.check_finished_unchanged("/w", {**saved, "data": {**saved["data"], "train_file": "/moved/train.csv"}},
                                        10)
    with pytest.raises(ValueError, match=r"^/w has trained all its 10 steps, and this run changes what it computes "
                                         r"\(train_data_digest 'aaaa' -> 'bbbb' \(the rows of "
                                         r"config.data.train_file\)\): nothing would train, .*; give a new workdir$"):
        run_config.check_finished_unchanged("/w", {**saved, "train_data_digest": "bbbb"}, 10)
    built_in = {**saved, "data": {**saved["data"], "train_file": ""}}  # a task's own data (TFDS): no file to name
    assert run_config.changed_settings(built_in, {**built_in, "train_data_digest": "bbbb"}) == [
        "train_data_digest 'aaaa' -> 'bbbb' (the rows of the training data)"]
    with pytest.raises(ValueError, match=r"^/w has trained 10 steps, past this run's 6, and this run changes"):
        run_config.check_finished_unchanged("/w", {**saved, "train_data_digest": "bbbb"}, 6)  # (it trained 10)
    # Rows cut at another length (a finished run evaluated at another length, as the docs allow):
    # the digest of the same file differs, and says nothing (a review).
    recut = {**saved, "train_data_digest": "bbbb", "data": {**saved["data"], "max_seq_length": 256}}
    run_config.check_finished_unchanged("/w", recut, 10)
    assert "train_data_digest 'aaaa' -> 'bbbb' (the rows of config.data.train_file, cut anew by the changed " \
           "data.max_seq_length)" in run_config.changed_settings(saved, recut)  # (not the file: a walkthrough)
    other = {**saved, "init_weights": "/elsewhere/200"}
    with pytest.raises(ValueError, match=rf"\(init_weights '{started}' -> '/elsewhere/200'\).*give a new workdir; to "
                                         rf"relaunch it as it is \(a test file to predict\), "
                                         rf"config.init_checkpoint={started}$"):
        run_config.check_finished_unchanged("/w", other, 10)
    run_config.check_finished_unchanged("/w", other, 11)  # steps left: a resume, which warns
    started.rmdir()  # moved
    run_config.check_finished_unchanged("/w", other, 10)
    # Rows laid out otherwise train otherwise (a walkthrough: relaunched packed, 'done' in 0 steps).
    with pytest.raises(ValueError, match=r"\(data.pack_examples 'unset' -> 4\): nothing would train"):
        run_config.check_finished_unchanged("/w", {**saved, "data": {**saved["data"], "pack_examples": 4}}, 10)
    # From before the digest was recorded: no change.
    monkeypatch.setattr(checkpointing, "read_meta", lambda directory: {"step": 10, "config": {**SAVED, "task": "x"}})
    run_config.check_finished_unchanged("/w", {**SAVED, "task": "x", "train_data_digest": "bbbb"}, 10)
    # Pre-training's data settings make its rows (masking, lengths): each changes what it computes;
    # its text moved or another held-out set do not (a walkthrough: four changed, warned, 'done').
    monkeypatch.setattr(checkpointing, "read_meta", lambda directory: {"step": 10, "config": SAVED})
    with pytest.raises(ValueError, match=r"\(data.max_seq_length 128 -> 64\): nothing would train"):
        run_config.check_finished_unchanged("/w", {**SAVED, "data": {**SAVED["data"], "max_seq_length": 64}}, 10)
    run_config.check_finished_unchanged("/w", {**SAVED, "data": {**SAVED["data"], "input_pattern": "/moved/*.txt",
                                                                 "eval_input_pattern": "/held/*.txt"}}, 10)
    # ... nor the host count it runs on, a value each launch sets, nor its tokenizer's settings,
    # which the tokenizer check compares (a review: a 4-host run's owed evaluation on 2 hosts).
    monkeypatch.setattr(checkpointing, "read_meta", lambda directory: {"step": 10, "config": {
        **SAVED, "data": {**SAVED["data"], "process_count": 4, "do_lower_case": None}}})
    run_config.check_finished_unchanged("/w", {**SAVED, "data": {**SAVED["data"], "process_count": 2,
                                                                 "do_lower_case": True}}, 10)
    # A setting its source never read, given before such settings were refused, and left out now
    # (a review: refused with it, refused without it); one the source reads still counts.
    prepared = {**SAVED, "data": {**SAVED["data"], "source": "prepared", "text_key": "content", "prepared_dir": ""}}
    monkeypatch.setattr(checkpointing, "read_meta", lambda directory: {"step": 10, "config": prepared})
    run_config.check_finished_unchanged("/w", {**prepared, "data": {**prepared["data"], "text_key": "text"}}, 10)
    rows = {**prepared, "data": {**prepared["data"], "source": "jsonl"}}
    monkeypatch.setattr(checkpointing, "read_meta", lambda directory: {"step": 10, "config": rows})
    with pytest.raises(ValueError, match=r"\(data.text_key 'content' -> 'body'\): nothing would train"):
        run_config.check_finished_unchanged("/w", {**rows, "data": {**rows["data"], "text_key": "body"}}, 10)


def test_a_start_from_an_unfinished_pre_training_run_is_warned_of(tmp_path, monkeypatch, caplog):
    """Phase 2 from a phase 1 stopped at step 60 of 600 said 'initialised ... from' it, nothing
    more (a walkthrough). A finished run, a fine-tuning run's best step, a step folder named on
    purpose and another layout are started from without a word. A sweep's runs, each starting
    from it, warn once."""
    from bertjax.models import convert

    metas = {"unfinished": {"step": 60, "config": {"train": {"num_steps": 600}}},
             "finished": {"step": 600, "config": {"train": {"num_steps": 600}}},
             "finetuned": {"step": 60, "config": {"task": "classification", "train": {"num_steps": 600}}}}
    monkeypatch.setattr(convert, "checkpoint_layout", lambda path: ("bertjax", path))
    monkeypatch.setattr(run_config.checkpointing, "read_meta", lambda directory: metas[directory.split("/")[0]])
    monkeypatch.setattr(run_config, "_WARNED_UNFINISHED", set())
    with caplog.at_level("WARNING"):
        for path in ("unfinished", "finished", "finetuned", "unfinished/checkpoints/60", "unfinished"):
            run_config.warn_if_unfinished_start(path, str(tmp_path / "new"))
    assert caplog.messages == ["config.init_checkpoint=unfinished is at step 60 of its run's 600: that run has not "
                               "finished (relaunch it with its own workdir to finish it); this run starts from its "
                               "weights as they are"]

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

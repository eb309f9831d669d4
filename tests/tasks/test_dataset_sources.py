"""Tasks that read a dataset (TFDS, the demo's): your own files given to one are an error naming
the task that reads them, and a dataset neither prepared nor downloadable fails within seconds.
No test here touches the network: name resolution is made to fail."""

import logging
import os
import re
import socket
import sys
import time

import pytest

from bertjax import tasks
from bertjax.data import sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(task, **data):
    sys.path.insert(0, ROOT)
    from configs import finetune as finetune_config

    config = finetune_config.get_config(task)
    config.data.update(data)
    return config


@pytest.mark.parametrize("task, own", [("squad_v1", "'squad'"), ("cola", "'classification' or 'regression'"),
                                       ("demo", "'classification' or 'regression'"), ("conll2003", "'ner'"),
                                       ("hellaswag", "'choice'")])
def test_own_files_on_a_dataset_task_name_the_task_that_reads_them(tmp_path, task, own):
    config = _config(task, train_file=str(tmp_path / "train.json"), eval_file=str(tmp_path / "dev.json"))
    with pytest.raises(ValueError, match=rf"config.task='{task}' reads its own dataset and would ignore "
                                         rf"config.data.train_file, config.data.eval_file: for your own files use "
                                         rf"the task {own}"):
        tasks.load_task(config, tokenizer=None)


@pytest.mark.parametrize("task, setting, reader", [
    ("ner", "doc_stride=4", "squad tasks"), ("squad", "tag_column=2", "tagging tasks"),
    ("conll2003", "max_query_length=5", "squad tasks"), ("choice", "text_b_key=''", "classification tasks"),
    ("mrpc", "choices_key='endings'", "choice tasks"), ("squad_v2", "label_names='a,b'", "classification and "
                                                                                         "tagging tasks"),
    ("conll2003", "label_key='x'", "classification and choice tasks")])
def test_another_familys_setting_is_warned_of_not_ignored_in_silence(task, setting, reader, caplog):
    """`:ner --config.data.doc_stride=4` trained without a word of the stride it ignored (a
    review). Every family's own defaults pass, for every task."""
    key, value = setting.split("=")
    with caplog.at_level(logging.WARNING):
        tasks.warn_of_other_families_settings(_config(task, **{key: eval(value)}))
        assert f"config.data.{key}={value} is read by {reader} only: config.task='{task}' ignores it" in caplog.text
        caplog.clear()
        for name in tasks.task_names():
            tasks.warn_of_other_families_settings(_config(name))
        assert not caplog.text


@pytest.fixture
def offline(monkeypatch):
    """No name resolves (as on a machine without network), and TFDS's GCS mirror is absent."""
    from tensorflow_datasets.core.utils import gcs_utils

    def no_dns(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, f"Name or service not known: {host}")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(gcs_utils, "exists", lambda path: False)


@pytest.mark.parametrize("task, dataset", [("cola", "glue/cola"), ("squad_v1", "squad/v1.1"),
                                           ("conll2003", "conll2003"), ("piqa", "piqa")])
def test_a_dataset_neither_prepared_nor_downloadable_fails_without_retrying(tmp_path, offline, monkeypatch, caplog,
                                                                           task, dataset):
    """TFDS retries a download with sleeps between (minutes offline): none here. Nor does TFDS
    warn first of the dataset's folder it found not prepared (a walkthrough)."""
    slept, sleep = [], time.sleep
    monkeypatch.setattr(time, "sleep", lambda seconds: (slept.append(seconds), sleep(seconds))[1])
    with caplog.at_level("INFO"), pytest.raises(ValueError) as error:
        tasks.load_task(_config(task, tfds_data_dir=str(tmp_path)), tokenizer=None)
    assert sum(slept) < 1, slept
    assert "has no dataset_info.json" not in caplog.text, caplog.text
    message = str(error.value)
    assert message.startswith(f"TFDS dataset {dataset!r} is not prepared in {tmp_path}/")
    assert "cannot be downloaded here (no network: " in message and "does not resolve" in message
    assert f"tfds.builder('{dataset}', data_dir='DIR').download_and_prepare()" in message
    assert "gs://" in message and "config.data.tfds_data_dir" in message
    # Nothing left behind: an empty dataset folder made TFDS warn "has no dataset_info.json" at
    # every later start (a review found ~/tensorflow_datasets/glue/ after one such attempt).
    assert os.listdir(tmp_path) == []
    (tmp_path / "mine").mkdir()  # a folder the user keeps there stays
    with pytest.raises(ValueError):
        tasks.load_task(_config(task, tfds_data_dir=str(tmp_path)), tokenizer=None)
    assert os.listdir(tmp_path) == ["mine"]
    # Beside a prepared dataset of the same name (another GLUE task): only what this attempt made goes.
    (tmp_path / dataset.split("/")[0] / "kept").mkdir(parents=True)
    with pytest.raises(ValueError):
        tasks.load_task(_config(task, tfds_data_dir=str(tmp_path)), tokenizer=None)
    assert sorted((os.path.relpath(folder, tmp_path), names) for folder, _, names in os.walk(tmp_path)) == sorted([
        (".", []), ("mine", []), (dataset.split("/")[0], []), (os.path.join(dataset.split("/")[0], "kept"), [])])


def test_a_connection_error_other_than_no_network_gets_tfds_retries(tmp_path, monkeypatch):
    """Only an unresolvable host is 'no network': any other failure is downloaded again with
    TFDS's own retries."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core.download import downloader

    retries_seen = []

    def download_and_prepare(self, *args, **kwargs):
        retries_seen.append(downloader.MAX_RETRIES)
        if len(retries_seen) == 1:
            raise ConnectionResetError("reset by peer")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", download_and_prepare)
    builder = sources.prepared_tfds_builder("glue/cola", str(tmp_path))
    assert builder.name == "glue" and retries_seen == [0, downloader.MAX_RETRIES] and downloader.MAX_RETRIES == 10


@pytest.mark.parametrize("where", ["a file", "inside a file"])
def test_a_tfds_folder_that_cannot_be_one_is_named_once(tmp_path, where):
    """config.data.tfds_data_dir naming a file ended in '[Errno 20] Not a directory: .../downloads',
    after the download was tried twice (taken for a connection error; a walkthrough)."""
    (tmp_path / "pairs.txt").write_text("a\tb\n")
    folder = str(tmp_path / "pairs.txt") + ("" if where == "a file" else "/tfds")
    with pytest.raises(ValueError, match=rf"^TFDS's folder {re.escape(folder)} \(config.data.tfds_data_dir\) cannot "
                                         r"hold dataset 'glue/rte': Not a directory: "):
        sources.prepared_tfds_builder("glue/rte", folder)
    assert sorted(os.listdir(tmp_path)) == ["pairs.txt"]

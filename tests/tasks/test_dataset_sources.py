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
    _no_proxy(monkeypatch)


def _no_proxy(monkeypatch):
    """No proxy from the environment: requests would reach it first, and its error is another."""
    for variable in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv(variable.lower(), raising=False)


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
    with pytest.raises(ValueError, match=re.escape(f"TFDS dataset {dataset!r} is not prepared in {tmp_path}/")):
        tasks.load_task(_config(task, tfds_data_dir=str(tmp_path)), tokenizer=None)
    assert os.listdir(tmp_path) == ["mine"]
    # Beside a prepared dataset of the same name (another GLUE task): only what this attempt made goes.
    (tmp_path / dataset.split("/")[0] / "kept").mkdir(parents=True)
    with pytest.raises(ValueError, match=re.escape(f"TFDS dataset {dataset!r} is not prepared in {tmp_path}/")):
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


@pytest.mark.parametrize("proxy", [False, True])
def test_a_refused_connection_or_a_dead_proxy_is_no_network_too(tmp_path, monkeypatch, proxy):
    """Only an unresolvable host was 'no network': a refused connection or a proxy that cannot
    be reached took TFDS's ten retries (3.5 minutes of warnings) and ended in requests' own
    error, leaving folders behind (a walkthrough). No host answered either: the same one line."""
    from tensorflow_datasets.core.utils import gcs_utils

    def refused(self, address):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *args, **kwargs: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port or 443))])
    monkeypatch.setattr(socket.socket, "connect", refused)
    monkeypatch.setattr(gcs_utils, "exists", lambda path: False)
    _no_proxy(monkeypatch)
    if proxy:
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    slept, sleep = [], time.sleep
    monkeypatch.setattr(time, "sleep", lambda seconds: (slept.append(seconds), sleep(seconds))[1])
    folder = tmp_path / "missing" / "tfds"  # the folders above the one given are not left either
    reason = "the proxy for .* cannot be reached" if proxy else r"\S+ cannot be reached \(\w+\)"
    with pytest.raises(ValueError, match=rf"^TFDS dataset 'glue/cola' is not prepared in {folder}/glue/cola/\S+; "
                                         rf"the folder {folder} does not exist, and cannot be downloaded here \(no "
                                         rf"network: {reason}\)"):
        sources.prepared_tfds_builder("glue/cola", str(folder))
    assert sum(slept) < 1, slept
    assert os.listdir(tmp_path) == []


def test_a_mnli_launch_names_every_dataset_it_cannot_read(tmp_path, offline):
    """MNLI reads glue/mnli and glue/ax: the user prepared the first one the error named, and
    the next launch named the second (a walkthrough)."""
    with pytest.raises(ValueError, match=r"^TFDS dataset 'glue/mnli' is not prepared .* \(config.task='mnli' "
                                         r"reads glue/mnli, glue/ax; glue/ax cannot be read here either: prepare "
                                         r"every one\)$"):
        tasks.prepare_tfds(_config("mnli", tfds_data_dir=str(tmp_path)))


_PREPARE_CORPUS = """
import sys

import numpy as np
import tensorflow_datasets as tfds

class TinyTextCorpus(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
            {"text": tfds.features.Text(), "title": tfds.features.Text(), "number": tfds.features.Scalar(np.int32)}))

    def _split_generators(self, download_manager):
        return {"train": self._generate_examples(40), "validation": self._generate_examples(6)}

    def _generate_examples(self, count):
        for i in range(count):
            yield i, {"text": f"Document {i} starts here. It has a second sentence.", "title": f"doc {i}", "number": i}

TinyTextCorpus(data_dir=sys.argv[1]).download_and_prepare()
"""


@pytest.fixture(scope="module")
def prepared_corpus(tmp_path_factory):
    """A dataset TFDS does not know, prepared offline by its own code in another process (so
    that this one reads it from the folder alone, as a user given the folder does):
    tiny_text_corpus 1.0.0, text, title and an int feature; train (40 documents) and validation (6)."""
    import subprocess

    folder = tmp_path_factory.mktemp("tfds")
    subprocess.run([sys.executable, "-c", _PREPARE_CORPUS, str(folder)], check=True, capture_output=True,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=300)
    return folder


def _copy(prepared, tmp_path):
    import shutil

    shutil.copytree(prepared, tmp_path / "tfds")
    return tmp_path / "tfds", tmp_path / "tfds" / "tiny_text_corpus" / "1.0.0"


def _pretraining_data(folder, **settings):
    import ml_collections

    return ml_collections.ConfigDict({"source": "tfds", "tfds_name": "tiny_text_corpus", "tfds_split": "train",
                                      "tfds_text_feature": "text", "tfds_data_dir": str(folder), **settings})


def test_a_prepared_folder_missing_a_file_or_cut_short_is_named_at_start_up(prepared_corpus, tmp_path):
    """A half-prepared or half-copied folder ended in a traceback (KeyError: splits is empty;
    NotFoundError or DataLossError from the first read, after the model was built): its
    damage is named at start-up with what to do (a walkthrough); so is a dataset_info.json cut
    short, TFDS's own dataset or not (protobuf's ParseError named neither the file nor the dataset)."""
    folder, version = _copy(prepared_corpus, tmp_path)
    units = sources.list_units(_pretraining_data(folder))
    assert [unit["tfds_split"] for unit in units] == ["train"]
    documents = list(sources.read_unit(_pretraining_data(folder), units[0], sources.DropCounter()))
    assert sorted(documents) == sorted([f"Document {i} starts here.", "It has a second sentence."] for i in range(40))

    [train_file] = [name for name in os.listdir(version) if "-train.tfrecord" in name]
    whole = (version / train_file).read_bytes()
    incomplete = (rf"^TFDS dataset 'tiny_text_corpus' in {version} is incomplete \({{}}\), as a preparation stopped "
                  r"or a copy cut short leaves it: remove that folder and prepare it again$")
    (version / train_file).write_bytes(whole[:len(whole) // 2])
    with pytest.raises(ValueError, match=incomplete.format(rf"the files of split 'train' hold {len(whole) // 2:,} "
                                                            r"bytes, fewer than the [\d,]+ its record counts")):
        sources.list_units(_pretraining_data(folder))
    # Cut after start-up (a copy still arriving): the read names it too, not DataLossError.
    builder = sources.tfds_builder("tiny_text_corpus", str(folder))
    with pytest.raises(ValueError, match=rf"^TFDS dataset 'tiny_text_corpus' in {version} is incomplete \(reading "
                                         r"'train': .*truncated.*\): remove that folder and prepare it again$"):
        list(sources.read_tfds_split(builder, "train"))
    (version / train_file).unlink()
    with pytest.raises(ValueError, match=incomplete.format(f"split 'train' has no file {train_file}")):
        sources.list_units(_pretraining_data(folder))
    (version / train_file).write_bytes(whole)
    with pytest.raises(ValueError, match=rf"^TFDS dataset 'tiny_text_corpus' in {version}: Unknown split 'test'"):
        list(sources.read_tfds_split(builder, "test"))
    record = (version / "dataset_info.json").read_text()
    (version / "dataset_info.json").write_text(record[:len(record) // 2])
    damaged = (r"^TFDS dataset '{}': {}/dataset_info.json is not the record TFDS writes \(Failed to load JSON: "
               r"Unterminated string [^()]* \(char \d+\)\), as a copy cut short or an edit leaves it: remove {} and "
               r"prepare it again$")
    with pytest.raises(ValueError, match=damaged.format("tiny_text_corpus", version, version)):
        sources.list_units(_pretraining_data(folder))
    registered = sources.tfds_builder("glue/cola", str(tmp_path / "other"))
    os.makedirs(registered.data_dir)
    with open(os.path.join(registered.data_dir, "dataset_info.json"), "w") as f:
        f.write(record[:len(record) // 2])
    with pytest.raises(ValueError, match=damaged.format("glue/cola", registered.data_dir, registered.data_dir)):
        sources.prepared_tfds_builder("glue/cola", str(tmp_path / "other"))
    (version / "dataset_info.json").unlink()
    with pytest.raises(ValueError, match=r"^TFDS dataset 'tiny_text_corpus' is incomplete \(Could not read dataset "
                                         r"info from .*dataset_info.json\), .*: remove "
                                         rf"{version} and prepare it again$"):
        sources.list_units(_pretraining_data(folder))


def test_tfds_settings_are_checked_before_anything_is_read_or_downloaded(prepared_corpus, tmp_path, offline):
    """A feature that is no text dropped every document, then blamed config.data.source; a
    feature a dataset lacks was named only after its download; a version or config TFDS lacks,
    and a slice it cannot read, ended in tracebacks or errors naming no key (a walkthrough)."""
    folder, _ = _copy(prepared_corpus, tmp_path)
    with pytest.raises(ValueError, match=r"^feature 'number' of TFDS dataset 'tiny_text_corpus' "
                                         r"\(config.data.tfds_text_feature\) is not one text a document \(it is Scalar "
                                         r"of int32\); its text features: \['text', 'title'\]$"):
        sources.list_units(_pretraining_data(folder, tfds_text_feature="number"))
    # A feature of features (SQuAD's answers): named as such, not an AttributeError (a review).
    with pytest.raises(ValueError, match=r"^feature 'answers' of TFDS dataset 'squad/v1.1' .* is not one text a "
                                         r"document \(it is \w+ of several features\)"):
        sources.list_units(_pretraining_data(tmp_path / "empty", tfds_name="squad/v1.1", tfds_text_feature="answers"))
    # Offline, a dataset not prepared: the feature is refused, not the download.
    with pytest.raises(ValueError, match=r"^TFDS dataset 'mnist' has no feature 'text' \(config.data.tfds_text_feature"
                                         r"\); it has \['image', 'label'\]$"):
        sources.list_units(_pretraining_data(tmp_path / "empty", tfds_name="mnist"))
    for split, why in (("train[:200%]", "Error parsing split 'train\\[:200%\\]'"),
                       ("train[:1000]", "Requested slice \\[:1000\\] incompatible with 40 examples")):
        with pytest.raises(ValueError, match=rf"^config.data.tfds_split='{re.escape(split)}': {why}"):
            sources.list_units(_pretraining_data(folder, tfds_split=split))
    assert len(sources.list_units(_pretraining_data(folder, tfds_split="train[:50%]+validation"))) == 1
    for name, why in (("imdb_reviews:9.9.9", "Dataset imdb_reviews cannot be loaded at version 9.9.9, only: 1.0.0"),
                      ("imdb_reviews/nosuch", "BuilderConfig nosuch not found with version None; its configs: "
                                              "plain_text$"),
                      ("tiny_text_corpus:2.0.0", rf"is not a TFDS dataset .*, nor one prepared in {folder} under that "
                                                 "name and version")):
        with pytest.raises(ValueError, match=rf"^config.data.tfds_name='{re.escape(name)}'(: | ){why}"):
            sources.list_units(_pretraining_data(folder, tfds_name=name))

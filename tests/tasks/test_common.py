"""BERT's text-pair encoding: the original _truncate_seq_pair, [CLS] a [SEP] b [SEP] layout."""

import itertools

import numpy as np
import pytest

from bertjax import tokenization
from bertjax.data.corpora import demo_corpus
from bertjax.tasks.common import Split, encode_pairs, truncated_pair_lengths


def _truncate_seq_pair(len_a, len_b, budget):
    """run_classifier.py's loop: drop from the longer side (b on a tie) until the pair fits."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_closed_form_truncation_equals_the_original_loop():
    cases = list(itertools.product(range(30), range(30), range(1, 25)))
    len_a, len_b, budget = (np.array(c) for c in zip(*cases))
    for b in np.unique(budget):
        rows = budget == b
        kept = truncated_pair_lengths(len_a[rows], len_b[rows], int(b))
        expected = np.array([_truncate_seq_pair(x, y, int(b)) for x, y in zip(len_a[rows], len_b[rows])]).T
        np.testing.assert_array_equal(np.stack(kept), expected)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tokenization.Tokenizer.from_vocab_file(demo_corpus.demo_vocab_path(str(tmp_path_factory.mktemp("v"))))


def test_pair_layout_segments_mask_and_truncation(tokenizer):
    a = ["The fox lives in rivers.", "a"]  # 6 and 1 tokens
    b = ["It eats fish and more fish and more.", "b c"]  # 9 and 2 tokens
    features, lengths, truncated = encode_pairs(tokenizer, a, b, max_seq_length=12)
    # Row 0: budget 9 -> a keeps 5 (ceil(9/2)), b keeps 4; row 1 fits: 1 + 2 + 3 specials.
    assert lengths.tolist() == [12, 6] and truncated.tolist() == [True, False]
    assert tokenizer.decode(features["input_ids"][0]) == "[CLS] the fox lives in rivers [SEP] it eats fish and [SEP]"
    assert tokenizer.decode(features["input_ids"][1][:6]) == "[CLS] a [SEP] b c [SEP]"
    assert features["input_ids"][1][6:].tolist() == [tokenizer.pad_id] * 6
    assert features["segment_ids"].tolist() == [[0] * 7 + [1] * 5, [0, 0, 0, 1, 1, 1] + [0] * 6]
    assert features["input_mask"].tolist() == [[1] * 12, [1] * 6 + [0] * 6]


def test_a_second_text_without_tokens_is_laid_out_as_a_single_sentence(tokenizer):
    """run_classifier.py's `if tokens_b:`: an empty (or all-whitespace) text_b gives `[CLS] a
    [SEP]` with the single sentence's budget, not `[CLS] a [SEP] [SEP]`; the SavedModel's
    graph lays it out the same."""
    from bertjax.inference import export
    from bertjax.runtime.tf_cpu import tf

    a, b = ["The fox lives in rivers.", "a", "the fox"], ["", "b c", "  "]
    features, lengths, truncated = encode_pairs(tokenizer, a, b, max_seq_length=8)
    assert lengths.tolist() == [8, 6, 4] and truncated.tolist() == [False, False, False]
    assert tokenizer.decode(features["input_ids"][0]) == "[CLS] the fox lives in rivers. [SEP]"
    assert features["segment_ids"].tolist() == [[0] * 8, [0, 0, 0, 1, 1, 1, 0, 0], [0] * 8]
    words = export.tensorflow_tokenizer(tokenizer)
    ids, segments, mask, _ = export._Layout(tokenizer, 8)(words.ids(tf.constant(a)), words.ids(tf.constant(b)))
    assert ids.numpy().tolist() == features["input_ids"].tolist()
    assert segments.numpy().tolist() == features["segment_ids"].tolist()
    assert mask.numpy().tolist() == features["input_mask"].tolist()


def test_single_sentences_and_split_checks(tokenizer):
    features, lengths, truncated = encode_pairs(tokenizer, ["The fox lives in rivers.", "a"], None, 6)
    assert lengths.tolist() == [6, 3] and truncated.tolist() == [True, False]
    assert tokenizer.decode(features["input_ids"][0]) == "[CLS] the fox lives in [SEP]"
    assert features["segment_ids"].sum() == 0
    with pytest.raises(ValueError, match="2 first texts but 1 second"):
        encode_pairs(tokenizer, ["x", "y"], ["z"], 8)
    with pytest.raises(ValueError, match="feature 'label' has 1 rows, lengths has 2"):
        Split("train", {**features, "label": np.zeros(1)}, lengths)


def test_prediction_lines_on_a_full_disk_leave_the_earlier_file_and_no_half_one(tmp_path):
    """write_lines (predictions' TSV, CoNLL, GLUE submissions) left a cut `<name>.tmp` beside the
    file, which the next launch then listed as an earlier launch's predictions (a review)."""
    import os
    import textwrap

    from small_runs import on_a_full_disk

    (tmp_path / "dev.tsv").write_text("earlier\n")
    code = textwrap.dedent("""
        import sys
        from bertjax.tasks import common

        try:
            common.write_lines(sys.argv[1], ["index\\tprediction"] + [f"{i}\\tpositive" for i in range(10_000)])
        except OSError as e:
            print(e.filename, e.strerror)
    """)
    result = on_a_full_disk(["-c", code, str(tmp_path / "dev.tsv")], limit=1 << 12)
    assert result.stdout.split() == [str(tmp_path / "dev.tsv"), "File", "too", "large"], result.stderr[-2000:]
    assert os.listdir(tmp_path) == ["dev.tsv"] and (tmp_path / "dev.tsv").read_text() == "earlier\n"

"""The online pre-training pipeline: statistics over >= 10,000 sequences, exactness of the
NSP pairing, determinism, exact resume, host split and bad shards.

Synthetic documents (synthetic.py) make every token name its (document, sentence).
"""

import json
import os
import random
import re

import numpy as np
import pytest
import tensorflow as tf

import synthetic
from bertjax.data import masking, pairing, pretraining, pretraining_config
from configs import pretrain

CLS, SEP, PAD, MASK = 2, 3, 0, 4
NUM_DOCS = 1500


def data_config(**overrides):
    config = pretrain.get_config("tiny").data
    config.max_seq_length = 64
    config.max_predictions_per_seq = 10
    config.short_seq_prob = 0.1  # the original's value (the tiny preset uses 0 for its long demo documents)
    config.shuffle_buffer = 500
    config.instance_shuffle_buffer = 500
    config.update(overrides)
    return config


def take(pipeline, num_batches, start_batch=0):
    it = pipeline.batches(start_batch)
    return [next(it) for _ in range(num_batches)]


def concat(batches):
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def unmasked(batch):
    """input_ids with the masked positions' original ids put back."""
    ids = batch["input_ids"].copy()
    rows = np.broadcast_to(np.arange(len(ids))[:, None], batch["masked_lm_positions"].shape)
    real = batch["masked_lm_weights"] > 0
    ids[rows[real], batch["masked_lm_positions"][real]] = batch["masked_lm_ids"][real]
    return ids


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    # Documents of many short sentences: the forced random B of one-sentence chunks is rare.
    return synthetic.write_shards(str(tmp_path_factory.mktemp("shards")), NUM_DOCS, 4, min_sentences=10,
                                  max_sentences=40)


@pytest.fixture(scope="module")
def big_batch(corpus):
    """10,000 sequences at max_seq_length 64."""
    pipeline = pretraining.PretrainingPipeline(data_config(), shard_paths=corpus,
                                               tokenizer=synthetic.tokenizer_for(NUM_DOCS), batch_size=1000)
    return concat(take(pipeline, 10))


def test_shapes_and_dtypes(big_batch):
    n = len(big_batch["input_ids"])
    expected = {"input_ids": (np.int32, (n, 64)), "input_mask": (np.int32, (n, 64)),
                "segment_ids": (np.int32, (n, 64)), "masked_lm_positions": (np.int32, (n, 10)),
                "masked_lm_ids": (np.int32, (n, 10)), "masked_lm_weights": (np.float32, (n, 10)),
                "next_sentence_labels": (np.int32, (n,))}
    assert {k: (v.dtype.type, v.shape) for k, v in big_batch.items()} == expected


def test_masking_statistics(big_batch):
    ids = big_batch["input_ids"]
    real = big_batch["masked_lm_weights"] > 0
    num_tokens = big_batch["input_mask"].sum(1)
    # Predictions per sequence: exactly the original's formula (Python 3 round, half to even).
    expected = [min(10, max(1, int(round(n * 0.15)))) for n in num_tokens]
    np.testing.assert_array_equal(real.sum(1), expected)
    assert abs(real.sum() / num_tokens.sum() - 0.15) < 0.005
    # 80/10/10 over the masked positions.
    rows = np.broadcast_to(np.arange(len(ids))[:, None], real.shape)
    shown = ids[rows[real], big_batch["masked_lm_positions"][real]]
    original = big_batch["masked_lm_ids"][real]
    share_mask, share_kept = np.mean(shown == MASK), np.mean(shown == original)
    assert abs(share_mask - 0.8) < 0.005 and abs(share_kept - 0.1) < 0.005  # (about 4 sigma of 100,000)
    assert abs(1 - share_mask - share_kept - 0.1) < 0.005
    # [CLS], [SEP] and padding are never masked; positions ascending, padded with 0.
    assert not np.isin(original, [CLS, SEP, PAD]).any()
    assert (big_batch["masked_lm_positions"][real] < num_tokens[rows[real]]).all()
    assert (big_batch["masked_lm_positions"][real] > 0).all()
    assert (np.diff(big_batch["masked_lm_positions"], axis=1)[real[:, 1:]] > 0).all()
    assert (real[:, :-1] >= real[:, 1:]).all()  # real predictions first
    assert (big_batch["masked_lm_positions"][~real] == 0).all() and (big_batch["masked_lm_ids"][~real] == 0).all()
    # (that masking changes nothing else, where the chosen tokens lie and the random ids: on known
    # ids below)


def original_instances(documents, max_num_tokens, short_seq_prob, rng):
    """create_instances_from_document of google-research/bert (pairs only): (len_a + len_b, is_random)."""
    out = []
    for index, document in enumerate(documents):
        target = max_num_tokens
        if rng.random() < short_seq_prob:
            target = rng.randint(2, max_num_tokens)
        chunk, length, i = [], 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += document[i]
            if i == len(document) - 1 or length >= target:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                len_a = sum(chunk[:a_end])
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random, len_b = True, 0
                    for _ in range(10):
                        other = rng.randint(0, len(documents) - 1)
                        if other != index:
                            break
                    for sentence in documents[other][rng.randint(0, len(documents[other]) - 1):]:
                        len_b += sentence
                        if len_b >= target - len_a:
                            break
                    i -= len(chunk) - a_end
                else:
                    is_random, len_b = False, sum(chunk[a_end:])
                out.append((sum(reference_truncate(len_a, len_b, max_num_tokens)), is_random))
                chunk, length = [], 0
            i += 1
    return np.array(out)


def test_matches_the_original_algorithm(corpus, big_batch):
    """Same distribution of NSP labels and lengths as a port of the original, on the same documents."""
    documents = []
    for path in corpus:  # each shard's records parsed at once (one graph call, not one per record)
        records = next(iter(tf.data.TFRecordDataset(path).batch(1 << 20)))
        documents += pretraining.shards.parse_documents(records)[1].to_list()
    reference = original_instances(documents, 61, 0.1, random.Random(0))
    lengths = big_batch["input_mask"].sum(1) - 3
    assert abs(big_batch["next_sentence_labels"].mean() - reference[:, 1].mean()) < 0.02
    assert abs(lengths.mean() - reference[:, 0].mean()) < 1.0
    assert abs(np.mean(lengths < 30) - np.mean(reference[:, 0] < 30)) < 0.02


def test_nsp_labels_half_random(tmp_path):
    """50/50 when one-sentence chunks (always random in the original) are rare: long documents, full targets."""
    paths = synthetic.write_shards(str(tmp_path), 300, 2, min_sentences=60, max_sentences=63)
    pipeline = pretraining.PretrainingPipeline(data_config(short_seq_prob=0.0), shard_paths=paths,
                                               batch_size=1000, tokenizer=synthetic.tokenizer_for(300))
    labels = concat(take(pipeline, 10))["next_sentence_labels"]
    assert abs(labels.mean() - 0.5) < 0.02


def test_layout_and_nsp(big_batch):
    orig, labels = unmasked(big_batch), big_batch["next_sentence_labels"]
    short = 0
    for row, segments, mask, label in zip(orig, big_batch["segment_ids"], big_batch["input_mask"], labels):
        n = mask.sum()
        assert n <= 64 and mask[:n].all() and not mask[n:].any() and (row[n:] == PAD).all()
        seps = np.flatnonzero(row[:n] == SEP)
        assert row[0] == CLS and len(seps) == 2 and seps[1] == n - 1
        a, b = row[1:seps[0]], row[seps[0] + 1:n - 1]
        assert len(a) >= 1 and len(b) >= 1
        np.testing.assert_array_equal(segments[:n], [0] * (seps[0] + 1) + [1] * (n - seps[0] - 1))
        (doc_a, sent_a), (doc_b, sent_b) = synthetic.decode_token(a), synthetic.decode_token(b)
        assert len(set(doc_a)) == 1 and len(set(doc_b)) == 1  # each segment from one document
        assert (np.diff(sent_a) >= 0).all() and (np.diff(sent_b) >= 0).all()
        if label == 0:  # IsNext: B continues A in the same document
            assert doc_a[0] == doc_b[0] and sent_b[0] > sent_a[-1]
            if n < 64:  # not truncated: B starts with the sentence right after A
                assert sent_b[0] == sent_a[-1] + 1
        else:
            assert doc_a[0] != doc_b[0]
        short += n < 32
    assert short > 0


def test_a_lone_document_draws_random_b_from_itself_and_loses_no_sentence():
    """The original takes a random B from the same document when ten draws found no other: a
    one-document corpus (or host, or split) keeps its 50/50 labels."""
    sentences = 3000
    lengths = tf.RaggedTensor.from_row_lengths(tf.fill([sentences], 10), [sentences])
    tokens = tf.RaggedTensor.from_row_lengths(tf.range(sentences * 10), [sentences * 10])
    out = pairing.chunk_documents(tokens, lengths, tf.constant([5, 6]), max_num_tokens=61, short_seq_prob=0.1)
    is_random = out["is_random"].numpy()
    assert abs(is_random.mean() - 0.5) < 0.05
    assert (out["b_document"].numpy() == 0).all()
    # Every sentence opens or continues an A or an IsNext B exactly once.
    used = np.concatenate([out["a_tokens"].flat_values.numpy(),
                           out["b_tokens"].flat_values.numpy()[np.repeat(~is_random, out["b_tokens"].row_lengths())]])
    np.testing.assert_array_equal(np.sort(used), np.arange(sentences * 10))


@pytest.mark.parametrize("documents", [129, 257, 128, 2])
def test_an_epochs_last_lone_document_is_paired_with_the_others(tmp_path, documents):
    """Documents are chunked 128 at a time: an epoch of 129 left the last one alone, and a
    one-sentence document alone has no B: dropped from every such epoch without a word (a
    review). Each one-sentence document here makes one row, its B from another document."""
    paths = synthetic.write_shards(str(tmp_path), documents, 1, min_sentences=1, max_sentences=1)
    pipeline = pretraining.PretrainingPipeline(data_config(), shard_paths=paths, batch_size=1,
                                               tokenizer=synthetic.tokenizer_for(documents))
    assert pipeline._count_rows(0) == pipeline._count_rows(1) == documents
    batch = concat(take(pipeline, documents))  # the first epoch
    firsts = []
    for row, mask in zip(unmasked(batch), batch["input_mask"]):
        row = row[:mask.sum()]
        sep = list(row).index(SEP)
        (doc_a, _), (doc_b, _) = synthetic.decode_token(row[1:sep]), synthetic.decode_token(row[sep + 1:-1])
        assert doc_a[0] != doc_b[0]
        firsts.append(doc_a[0])
    assert sorted(firsts) == list(range(documents))  # every document once


def test_short_target_share_per_document():
    """The target length is short with probability short_seq_prob, once per document (as the original)."""
    docs = 10_000
    lengths = tf.RaggedTensor.from_row_lengths(tf.fill([docs * 3], 5), tf.fill([docs], 3))
    tokens = tf.RaggedTensor.from_row_lengths(tf.fill([docs * 15], 7), tf.fill([docs], 15))
    out = pairing.chunk_documents(tokens, lengths, tf.constant([1, 2]), max_num_tokens=61, short_seq_prob=0.1)
    target = out["target_length"].numpy()
    assert abs(np.mean(target < 61) - 0.1 * 59 / 60) < 0.01
    assert target.min() >= 2 and target.max() == 61
    short = target[target < 61]  # the original's randint(2, 61): uniform over 2..61
    assert short.min() == 2 and short.max() == 60 and abs(short.mean() - 31) < 2


def reference_truncate(len_a, len_b, max_num_tokens):
    while len_a + len_b > max_num_tokens:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_truncated_lengths_match_the_original_loop():
    grid = np.array([(a, b) for a in range(0, 40) for b in range(0, 40)], np.int32)
    for m in (9, 10, 29):
        new_a, new_b = pairing.truncated_lengths(grid[:, 0], grid[:, 1], m)
        expected = np.array([reference_truncate(a, b, m) for a, b in grid])
        np.testing.assert_array_equal(np.stack([new_a, new_b], 1), expected)


def test_chunk_documents_eager_equals_in_tf_data(corpus):
    serialized = next(iter(tf.data.TFRecordDataset(corpus[0]).batch(64)))

    def chunk(records):
        tokens, sentence_lengths = pretraining.shards.parse_documents(records)
        return pairing.chunk_documents(tokens, sentence_lengths, tf.constant([3, 4]),
                                       max_num_tokens=61, short_seq_prob=0.1)

    def values(x):
        return x.flat_values.numpy() if isinstance(x, tf.RaggedTensor) else x.numpy()

    eager = chunk(serialized)
    graph = next(iter(tf.data.Dataset.from_tensors(serialized).map(chunk)))
    assert eager["is_random"].shape[0] > 64
    for key in eager:
        np.testing.assert_array_equal(values(eager[key]), values(graph[key]))


def test_the_masking_split_and_rate_are_settings(corpus):
    """Issue 49: 30% of tokens chosen, all of them [MASK] (no random or kept ones)."""
    pipeline = pretraining.PretrainingPipeline(
        data_config(masked_lm_prob=0.3, max_predictions_per_seq=20, mask_token_prob=1.0, random_token_prob=0.0),
        shard_paths=corpus, tokenizer=synthetic.tokenizer_for(NUM_DOCS), batch_size=500)
    batch = concat(take(pipeline, 2))
    real = batch["masked_lm_weights"] > 0
    num_tokens = batch["input_mask"].sum(1)
    np.testing.assert_array_equal(real.sum(1), [min(20, max(1, int(round(n * 0.3)))) for n in num_tokens])
    rows = np.broadcast_to(np.arange(len(real))[:, None], real.shape)
    assert (batch["input_ids"][rows[real], batch["masked_lm_positions"][real]] == MASK).all()
    with pytest.raises(ValueError, match="mask_token_prob and random_token_prob must be"):
        pretraining_config.check_data_config(data_config(mask_token_prob=0.8, random_token_prob=0.3))


@pytest.mark.parametrize("settings, message", [
    (dict(source="tfds", tfds_name="my_corpus", input_pattern="corpus.txt"),
     "input_pattern='corpus.txt' is read with source text or jsonl or parquet or prepared or original_tfrecord, "
     "not 'tfds'"),
    (dict(source="jsonl", input_pattern="rows.jsonl", tfds_name="wiki"),
     "tfds_name='wiki' is read with source tfds, not 'jsonl': leave it out (it would be ignored)"),
    (dict(source="text", input_pattern="corpus.txt", text_key="content"),
     "text_key='content' is read with source jsonl or parquet, not 'text'"),
    (dict(source="text", input_pattern="corpus.txt", tfds_split="train[:10%]"),
     "tfds_split='train[:10%]' is read with source tfds, not 'text'"),
    (dict(source="prepared", input_pattern="prepared", text_key="content"),
     "text_key='content' is read with source jsonl or parquet, not 'prepared'"),
    (dict(source="prepared", input_pattern="prepared", prepared_dir="other"),
     "prepared_dir='other' is read with source demo or text or jsonl or parquet or tfds or original_tfrecord, "
     "not 'prepared'"),
])
def test_a_setting_of_another_source_is_refused(settings, message):
    """Each was ignored without a word (a walkthrough): the run read another corpus, or its
    own, than the one meant. A run's saved settings with one are read without it
    (inspect_data --workdir: `settings_unread`)."""
    with pytest.raises(ValueError, match=re.escape(f"config.data: {message}")):
        pretraining_config.check_data_config(data_config(**settings))
    for source, key, value in (("tfds", "tfds_name", "my_corpus"), ("parquet", "text_key", "content"),
                               ("jsonl", "text_key", "content"), ("text", "prepared_dir", "here")):
        pretraining_config.check_data_config(data_config(source=source, **{key: value}))
    assert pretraining_config.settings_unread({"source": "text", "tfds_name": "wiki", "text_key": "text",
                                               "input_pattern": "a.txt", "prepared_dir": ""}) == ["tfds_name"]


def test_a_prediction_cap_below_the_masking_rate_is_warned_at_start_up(caplog):
    """The original's cap is kept (faithful), but a longer row with the base preset's 20
    predictions would mask 3.9% of its tokens instead of 15%: the check says so, with the fix."""
    import logging

    with caplog.at_level(logging.WARNING):
        pretraining_config.check_data_config(pretrain.get_config("base").data)  # 128 tokens: 19 wanted, 20 allowed
        assert not caplog.records
        pretraining_config.check_data_config(data_config(max_seq_length=512, max_predictions_per_seq=20))
    assert "max_predictions_per_seq=20 caps the masked tokens of a full row of 512 at 3.9%, below " \
           "masked_lm_prob=0.15 (77 tokens); raise it to 77" in caplog.text


def _row_batch(rows, length, vocab, shortest=10, seed=0):
    """rows of [CLS] A [SEP] B [SEP] then padding (shortest..length tokens), their ids drawn from
    1000..vocab-1: (ids, input_mask, candidates, lengths)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab, size=(rows, length)).astype(np.int32)
    n = rng.integers(shortest, length + 1, size=rows)
    positions = np.arange(length)[None, :]
    ids[:, 0] = CLS
    ids = np.where(positions == rng.integers(2, n - 2)[:, None], SEP, ids)
    ids = np.where(positions == n[:, None] - 1, SEP, ids)
    ids = np.where(positions >= n[:, None], PAD, ids)
    mask = (positions < n[:, None]).astype(np.int32)
    return ids, mask, (mask > 0) & (ids != CLS) & (ids != SEP), n


def test_masking_changes_only_the_chosen_tokens_at_random_places_in_the_split_asked():
    """mask_batch on known ids: nothing but the chosen positions changes; the positions are
    spread over the row as a random choice is (the first candidates of each row would pass
    every count); an uneven split (60/30/10) lands in its own shares, which 80/10/10 cannot
    tell apart from the random and kept shares swapped; random ids cover the vocabulary."""
    rows, length, vocab = 20_000, 64, 30_000
    ids, mask, candidates, n = _row_batch(rows, length, vocab)
    out = masking.mask_batch(ids, mask, candidates, tf.constant([7, 8]), vocab_size=vocab, mask_id=MASK,
                             masked_lm_prob=0.15, max_predictions=10, mask_token_prob=0.6, random_token_prob=0.3)
    masked, positions = out["input_ids"].numpy(), out["masked_lm_positions"].numpy()
    real = out["masked_lm_weights"].numpy() > 0
    chosen = np.zeros_like(candidates)
    row_of = np.broadcast_to(np.arange(rows)[:, None], positions.shape)
    chosen[row_of[real], positions[real]] = True
    assert not (chosen & ~candidates).any() and not ((masked != ids) & ~chosen).any()
    np.testing.assert_array_equal(out["masked_lm_ids"].numpy()[real], ids[chosen])
    # Where the chosen tokens lie in their rows: uniform over 1 .. n-2 ([SEP]s aside).
    place = ((positions - 1) / (n[:, None] - 3))[real]
    assert abs(place.mean() - 0.5) < 0.01
    shown, original = masked[chosen], ids[chosen]
    share_mask, share_kept = np.mean(shown == MASK), np.mean(shown == original)
    assert abs(share_mask - 0.6) < 0.005 and abs(share_kept - 0.1) < 0.005
    random_ids = shown[(shown != MASK) & (shown != original)]
    assert abs(len(random_ids) / len(shown) - 0.3) < 0.005
    assert random_ids.min() >= 0 and random_ids.max() < vocab
    assert abs(random_ids.mean() / vocab - 0.5) < 0.01 and len(np.unique(random_ids)) > 0.6 * len(random_ids)
    # Full rows (10 of 61 candidates each): every position is chosen as often as any other.
    ids, mask, candidates, _ = _row_batch(rows, length, vocab, shortest=length, seed=1)
    out = masking.mask_batch(ids, mask, candidates, tf.constant([9, 10]), vocab_size=vocab, mask_id=MASK,
                             masked_lm_prob=0.15, max_predictions=10)
    positions, real = out["masked_lm_positions"].numpy(), out["masked_lm_weights"].numpy() > 0
    chosen = np.zeros_like(candidates)
    chosen[row_of[real], positions[real]] = True
    rate = chosen[:, 1:-1].sum(0) / candidates[:, 1:-1].sum(0)  # [62]: of the rows where it is a candidate
    assert abs(rate.mean() - 10 / 61) < 0.002 and np.ptp(rate) < 0.025


def test_whole_word_masking():
    rng = np.random.default_rng(0)
    rows, length = 2000, 64
    vocab = 3000
    continuation = np.arange(vocab) >= 2000  # ids >= 2000 are '##' pieces
    ids = rng.integers(1000, vocab, size=(rows, length)).astype(np.int32)
    n = rng.integers(10, length + 1, size=rows)
    positions = np.arange(length)[None, :]
    ids[:, 0] = CLS
    sep = rng.integers(2, n - 2)[:, None]
    ids = np.where(positions == sep, SEP, ids)
    ids = np.where(positions == n[:, None] - 1, SEP, ids)
    ids = np.where(positions >= n[:, None], PAD, ids)
    mask = (positions < n[:, None]).astype(np.int32)
    candidates = (mask > 0) & (ids != CLS) & (ids != SEP)
    kwargs = dict(vocab_size=vocab, mask_id=MASK, masked_lm_prob=0.15, max_predictions=10)
    for run in ("eager", "tf.data"):
        args = (ids, mask, candidates, tf.constant([5, 6]))
        if run == "eager":
            out = masking.mask_batch(*args, continuation=continuation, **kwargs)
        else:
            out = next(iter(tf.data.Dataset.from_tensors(args).map(
                lambda *a: masking.mask_batch(*a, continuation=continuation, **kwargs))))
        real = out["masked_lm_weights"].numpy() > 0
        chosen = np.zeros_like(candidates)
        for r in range(rows):
            chosen[r, out["masked_lm_positions"].numpy()[r][real[r]]] = True
        quota = np.minimum(10, np.maximum(1, np.round(n * 0.15))).astype(int)
        assert (chosen.sum(1) <= quota).all() and np.mean(chosen.sum(1) == quota) > 0.5
        assert not (chosen & ~candidates).any()
        rows_of, places = np.nonzero(chosen)  # words picked at random: anywhere in their rows alike
        assert abs(np.mean((places - 1) / (n[rows_of] - 3)) - 0.5) < 0.02
        for r in range(rows):
            words = []  # a '##' piece joins the candidate right before it, never across a [SEP]
            for position in np.flatnonzero(candidates[r]):
                if words and continuation[ids[r, position]] and words[-1][-1] == position - 1:
                    words[-1].append(position)
                else:
                    words.append([position])
            spare = quota[r] - chosen[r].sum()
            for word in words:  # masked whole or not at all; a skipped word would not have fit
                assert chosen[r, word].all() or (not chosen[r, word].any() and len(word) > spare)


def test_deterministic_for_a_seed(corpus):
    def first(seed):
        pipeline = pretraining.PretrainingPipeline(data_config(), shard_paths=corpus, batch_size=16, seed=seed,
                                                   tokenizer=synthetic.tokenizer_for(NUM_DOCS))
        return concat(take(pipeline, 3))

    a, b, c = first(1), first(1), first(2)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["input_ids"], c["input_ids"])


def test_resume_is_exact(tmp_path):
    paths = synthetic.write_shards(str(tmp_path), 40, 2, seed=3)
    config = data_config(shuffle_buffer=16, instance_shuffle_buffer=32)
    pipeline = pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=8,
                                               tokenizer=synthetic.tokenizer_for(40))
    fresh = take(pipeline, 40)
    # No autotuning thread: its minute-long sleeps held up the iterator's release at a run's end
    # (records.without_autotuning_thread); AUTOTUNE stages run at a fixed parallelism.
    assert pipeline.dataset(0).options().autotune.enabled is False
    size = pipeline.epoch_size(0)
    assert size < 40 * 8 // 2  # the 40 batches span more than two epochs
    counting = pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=8,
                                               tokenizer=synthetic.tokenizer_for(40))  # nothing recorded yet
    assert counting.holds_at_least(size) and not counting.holds_at_least(size + 1)
    for start in (1, 13, 29):  # a restarted process: a pipeline that has recorded nothing
        resumed = take(pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=8,
                                                       tokenizer=synthetic.tokenizer_for(40)), 3, start_batch=start)
        assert len(resumed) == 3
        for want, got in zip(fresh[start:start + 3], resumed):
            for key in want:
                np.testing.assert_array_equal(want[key], got[key])


def test_a_resume_inside_an_epoch_counts_that_epoch_only_as_far_as_it_resumes(tmp_path, monkeypatch):
    """Resuming at batch 3 of a first epoch never finished counted the whole epoch first (a
    review: on a large corpus, a long silent stall after every preemption): it is counted as
    far as the resume point; an epoch that ends before it is counted whole, and recorded."""
    paths = synthetic.write_shards(str(tmp_path), 400, 2, seed=3)
    config = data_config(shuffle_buffer=16, instance_shuffle_buffer=32)
    monkeypatch.setattr(pretraining, "_COUNT_BATCH", 1)  # one batch of 128 documents a step

    def pipeline():
        return pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=8,
                                               tokenizer=synthetic.tokenizer_for(400))

    size = pipeline().epoch_size(0)
    fresh = take(pipeline(), size // 8 + 4)
    counted, real = [], pretraining.PretrainingPipeline._count_rows

    def counting(self, epoch, at_most=None):
        counted.append((epoch, at_most, real(self, epoch, at_most)))
        return counted[-1][2]

    monkeypatch.setattr(pretraining.PretrainingPipeline, "_count_rows", counting)
    for start in (3, size // 8 + 2):
        counted.clear()
        resumed = pipeline()
        for want, got in zip(fresh[start:start + 2], take(resumed, 2, start_batch=start)):
            for key in want:
                np.testing.assert_array_equal(want[key], got[key])
        assert all(at_most is not None for _, at_most, _ in counted)
        if start == 3:
            assert max(rows for _, _, rows in counted) < size and resumed._epoch_sizes == {}
        else:  # epoch 0 ends before the resume point: counted whole (and recorded), epoch 1 in part
            assert resumed._epoch_sizes == {0: size} and {epoch for epoch, _, _ in counted} == {0, 1}


def test_epoch_sizes_are_recorded_while_streaming_and_spare_the_recount_on_resume(tmp_path, monkeypatch):
    paths = synthetic.write_shards(str(tmp_path / "shards"), 40, 2, seed=3)
    config = data_config(shuffle_buffer=16, instance_shuffle_buffer=32)
    record = str(tmp_path / "work" / "epoch_sizes" / "train.json")

    def pipeline(config=config):
        return pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=8, epoch_sizes_path=record,
                                               tokenizer=synthetic.tokenizer_for(40))

    fresh = take(pipeline(), 40)  # spans more than two epochs
    recorded = json.load(open(record))["epoch_sizes"]
    counter = pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=8,
                                              tokenizer=synthetic.tokenizer_for(40))
    assert len(recorded) >= 2 and recorded == {str(e): counter.epoch_size(e) for e in range(len(recorded))}

    def no_counting(self, epoch, at_most=None):
        raise AssertionError(f"epoch {epoch} was counted although its size was recorded")

    monkeypatch.setattr(pretraining.PretrainingPipeline, "_count_rows", no_counting)
    start = sum(recorded.values()) // 8 - 1  # a batch near the end of the last recorded epoch
    for want, got in zip(fresh[start:start + 3], take(pipeline(), 3, start_batch=start)):
        for key in want:
            np.testing.assert_array_equal(want[key], got[key])
    other = pipeline(data_config(shuffle_buffer=16, instance_shuffle_buffer=32, short_seq_prob=0.5))
    with pytest.raises(AssertionError, match="was counted"):  # other settings: the record does not apply
        take(other, 1, start_batch=start)
    open(record, "w").write("{not json")
    with pytest.raises(AssertionError, match="was counted"):  # a broken record is ignored, not fatal
        take(pipeline(), 1, start_batch=start)


@pytest.mark.parametrize("pack_pairs", [0, 2])
def test_recorded_epoch_sizes_apply_to_settings_that_keep_the_row_count(tmp_path, monkeypatch, pack_pairs):
    """Masking leaves the number of instances alone, but packed rows fill up to a prediction
    budget: with packing, another max_predictions_per_seq counts its epoch again."""
    paths = synthetic.write_shards(str(tmp_path / "shards"), 40, 2, seed=3)
    record = str(tmp_path / "epoch_sizes.json")

    def pipeline(**settings):
        config = data_config(shuffle_buffer=16, instance_shuffle_buffer=32, pack_pairs=pack_pairs, **settings)
        return pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=8, epoch_sizes_path=record,
                                               tokenizer=synthetic.tokenizer_for(40))

    pipeline().epoch_size(0)

    def no_counting(self, epoch, at_most=None):
        raise AssertionError(f"epoch {epoch} was counted although its size was recorded")

    monkeypatch.setattr(pretraining.PretrainingPipeline, "_count_rows", no_counting)
    other = pipeline(max_predictions_per_seq=4)
    if pack_pairs:
        with pytest.raises(AssertionError, match="was counted"):
            other.epoch_size(0)
    else:
        other.epoch_size(0)


def test_hosts_get_whole_files_only_where_their_bytes_balance(caplog):
    """Files dealt in turn gave one host every full 64 MB unit of each file and the other every
    file's tail (a review: 640 vs 10 here, so the second host's documents came round 64 times
    as often). Dealt largest first to the least-loaded host, the bytes balance; where whole
    files cannot balance, every host keeps every n-th record of all of them."""
    from bertjax.data.records import host_file_split

    units = [64, 1] * 10  # ten 65 MB files cut into units: full, tail, full, tail, ...
    split = [host_file_split(units, i, 2) for i in range(2)]
    assert [record_shard for _, record_shard in split] == [None, None]
    owned = [ids for ids, _ in split]
    assert sorted(owned[0] + owned[1]) == list(range(20))
    assert [sum(units[i] for i in ids) for ids in owned] == [325, 325]
    three = [host_file_split([30, 30, 20, 20, 10, 10], i, 3)[0] for i in range(3)]
    assert [sum([30, 30, 20, 20, 10, 10][i] for i in ids) for ids in three] == [40, 40, 40]
    assert [host_file_split([64] * 36, i, 8)[1] for i in range(8)] == [None] * 8  # 5 or 4 shards a host
    assert [host_file_split([64] * 30, i, 8, warn=True)[1] for i in range(8)] == [(8, i) for i in range(8)]  # 4 or 3
    for sizes in ([100, 10, 10], [50]):  # one large file / fewer files than hosts
        assert [host_file_split(sizes, i, 2, warn=True) for i in range(2)] == [
            (list(range(len(sizes))), (2, 0)), (list(range(len(sizes))), (2, 1))]
    # Said once, by process 0 (a review: 200 shards of 64 MB on 64 hosts were read 64 times over
    # without a word, only a slow input to show for it).
    assert caplog.text.count("do not deal evenly over") == 3
    assert "3 record files (prepared shards or TFRecords, 1.2e-07 GB) do not deal evenly over 2 hosts" in caplog.text
    assert "every host reads all of them and keeps one record in 2, 2 times the reading" in caplog.text
    caplog.clear()
    host_file_split([50], 0, 2)  # (an evaluation split: small, and read once)
    assert not caplog.text
    assert host_file_split([5, 1], 0, 1) == ([0, 1], None)
    with pytest.raises(ValueError, match=r"process_index 2 not in \[0, 2\)"):
        host_file_split([1, 1], 2, 2)


@pytest.mark.parametrize("num_shards", [4, 1])  # whole files per host / every other record
def test_hosts_get_disjoint_documents(tmp_path, num_shards):
    paths = synthetic.write_shards(str(tmp_path), 200, num_shards)
    docs = []
    for index in range(2):
        pipeline = pretraining.PretrainingPipeline(data_config(), shard_paths=paths, batch_size=64,
                                                   tokenizer=synthetic.tokenizer_for(200),
                                                   process_index=index, process_count=2)
        ids = unmasked(concat(take(pipeline, 4)))
        docs.append(set(synthetic.decode_token(ids[ids >= synthetic.FIRST_ID])[0]))
    assert docs[0] and docs[1] and not docs[0] & docs[1]


def test_without_nsp(corpus):
    pipeline = pretraining.PretrainingPipeline(data_config(next_sentence_prediction=False), shard_paths=corpus,
                                               batch_size=500, tokenizer=synthetic.tokenizer_for(NUM_DOCS))
    batch = concat(take(pipeline, 2))
    orig = unmasked(batch)
    assert not batch["segment_ids"].any() and not batch["next_sentence_labels"].any()
    lengths = batch["input_mask"].sum(1)
    assert np.mean(lengths > 48) > 0.5  # mostly long, contiguous segments
    for row, n in zip(orig, lengths):
        assert row[0] == CLS and row[n - 1] == SEP and (row[1:n - 1] != SEP).all()
        doc, sentence = synthetic.decode_token(row[1:n - 1])
        assert len(set(doc)) == 1 and set(np.diff(sentence)) <= {0, 1}


def test_truncated_shard_is_named(tmp_path):
    paths = synthetic.write_shards(str(tmp_path), 100, 2)
    size = os.path.getsize(paths[1])
    with open(paths[1], "r+b") as f:
        f.truncate(size // 2)
    pipeline = pretraining.PretrainingPipeline(data_config(), shard_paths=paths, batch_size=8,
                                               tokenizer=synthetic.tokenizer_for(100))
    with pytest.raises(ValueError, match=f"corrupt or truncated file {paths[1]}"):
        take(pipeline, 200)


def test_shard_with_a_malformed_record_is_named(tmp_path):
    """A record with a valid checksum but an inconsistent layout (e.g. written by another tool)."""
    paths = synthetic.write_shards(str(tmp_path), 100, 2)
    with pretraining.shards.RecordWriter(paths[0]) as writer:
        writer.write(pretraining.shards.encode_document([[5, 6, 7]]))
        writer.write(np.array([3, 1, 1, 9], "<i4").tobytes())  # sentences of 1, 1 and 9 tokens, no tokens
    pipeline = pretraining.PretrainingPipeline(data_config(), shard_paths=paths, batch_size=8,
                                               tokenizer=synthetic.tokenizer_for(100))
    with pytest.raises(ValueError, match=f"{paths[0]}: a corrupt record among records 1-2 \\(sentence lengths do not "
                                         "add up"):
        take(pipeline, 200)


def test_empty_shard_file_is_named(tmp_path):
    paths = synthetic.write_shards(str(tmp_path), 10, 1)
    open(paths[0], "w").close()
    with pytest.raises(ValueError, match=paths[0]):
        pretraining.PretrainingPipeline(data_config(), shard_paths=paths, batch_size=8,
                                        tokenizer=synthetic.tokenizer_for(10))


def test_full_rows_cover_every_token_once_and_resume_exactly(tmp_path):
    """Issue 49: full rows lay the documents end to end ([SEP] after each) and cut them into
    [CLS] ... [SEP] rows: an epoch holds every token once, rows are padded only at the end of
    a batch of documents, [SEP]s are never masked, and resuming gives the same batches."""
    paths = synthetic.write_shards(str(tmp_path), 300, 3, seed=4, min_sentences=2, max_sentences=12)
    config = data_config(next_sentence_prediction=False, full_rows=True, masked_lm_prob=0.3,
                         max_predictions_per_seq=20)
    pipeline = pretraining.PretrainingPipeline(config, shard_paths=paths, batch_size=4,
                                               tokenizer=synthetic.tokenizer_for(300))
    size = pipeline.epoch_size(0)
    batches = take(pipeline, -(-size // 4) + 2)
    rows = concat(batches)
    epoch = {key: value[:size] for key, value in rows.items()}
    ids = unmasked(epoch)
    real = epoch["input_mask"] > 0
    lengths = real.sum(1)
    assert (ids[:, 0] == CLS).all() and (ids[np.arange(size), lengths - 1] == SEP).all()
    inner = [row[1:n - 1] for row, n in zip(ids, lengths)]
    tokens = np.concatenate(inner)
    want = []
    for path in paths:
        for record in tf_records(path):
            want += [token for sentence in record for token in sentence] + [SEP]
    # Every token once, each document's [SEP] too, but a batch of documents' last [SEP] where it
    # alone would make a row ([CLS] [SEP] [SEP], nothing to predict: a walkthrough).
    assert (lengths > 3).all() and (epoch["masked_lm_weights"].sum(1) > 0).all()
    left_out = len(want) - len(tokens)
    assert 0 <= left_out < size * 0.05
    assert sorted(tokens.tolist() + [SEP] * left_out) == sorted(want)
    assert (lengths == 64).mean() > 0.95  # full: only a batch of documents' last row is short
    masked_ids = epoch["masked_lm_ids"][epoch["masked_lm_weights"] > 0]
    assert not np.isin(masked_ids, [CLS, SEP, PAD]).any()
    assert abs((epoch["masked_lm_weights"] > 0).sum() / real.sum() - 0.3) < 0.02
    assert (epoch["segment_ids"] == 0).all()
    for start in (1, 7):
        for want_batch, got in zip(batches[start:start + 3], take(pipeline, 3, start_batch=start)):
            for key in want_batch:
                np.testing.assert_array_equal(want_batch[key], got[key])
    with pytest.raises(ValueError, match="full_rows.* needs next_sentence_prediction=False"):
        pretraining_config.check_data_config(data_config(full_rows=True))
    # Each requirement by itself (the line named all three, whichever failed: a walkthrough).
    with pytest.raises(ValueError, match=r"full_rows=True .* needs pack_pairs=0 \(it is 2: rows are full already\)$"):
        pretraining_config.check_data_config(data_config(full_rows=True, next_sentence_prediction=False, pack_pairs=2))


@pytest.mark.parametrize("documents, rows", [
    ([[5, 6, 7], [8, 9]], [[5, 6, 7], [SEP, 8, 9]]),  # the last [SEP] alone: left out
    ([[5, 6, 7]], [[5, 6, 7]]),
    ([[5, 6], [8, 9]], [[5, 6, SEP], [8, 9, SEP]]),
    ([[5, 6, 7, 8], [9, 10]], [[5, 6, 7], [8, SEP, 9], [10, SEP]]),
    ([[]], [[SEP]]),
])
def test_full_rows_leave_out_a_last_row_of_the_last_separator_alone(documents, rows):
    """A batch of documents whose stream of tokens and [SEP]s was one past whole rows gave a
    last row of [CLS] [SEP] [SEP]: nothing to predict, 1.1% of a small corpus's rows (a
    walkthrough)."""
    out = pairing.full_rows(tf.ragged.constant(documents, dtype=tf.int32), SEP, 3)
    assert out["a_tokens"].to_list() == rows and out["is_random"].shape == (len(rows),)


def test_full_rows_attend_within_each_document(tmp_path, monkeypatch):
    """Issue 49: full_rows_attention='document' keeps the rows as they are and numbers each
    document's tokens as a sequence of the row (a new one after each inner [SEP], positions from
    0), so the model's packed attention stays inside a document."""
    paths = synthetic.write_shards(str(tmp_path), 300, 3, seed=4, min_sentences=2, max_sentences=12)
    settings = dict(next_sentence_prediction=False, full_rows=True, masked_lm_prob=0.3, max_predictions_per_seq=20)
    # A random replacement may draw [SEP] (1 in vocab_size; here each row's first masked token
    # does): it must not cut a document.
    from bertjax.data import masking
    from bertjax.runtime.tf_cpu import tf

    def replaced_by_sep(*args, **kwargs):
        out = masking_batch(*args, **kwargs)
        rows = tf.range(tf.shape(out["input_ids"])[0])
        first = tf.stack([rows, out["masked_lm_positions"][:, 0]], axis=1)
        return {**out, "input_ids": tf.tensor_scatter_nd_update(out["input_ids"], first, tf.fill(tf.shape(rows), SEP))}

    masking_batch = masking.mask_batch
    monkeypatch.setattr(masking, "mask_batch", replaced_by_sep)
    pipelines = [pretraining.PretrainingPipeline(data_config(**settings, full_rows_attention=attention),
                                                 shard_paths=paths, batch_size=4, tokenizer=synthetic.tokenizer_for(300))
                 for attention in ("across", "document")]
    across, document = (concat(take(pipeline, 30)) for pipeline in pipelines)
    for key in across:
        np.testing.assert_array_equal(across[key], document[key])
    ids, real = unmasked(document), document["input_mask"] > 0
    sequences, positions = document["sequence_ids"], document["position_ids"]
    assert (sequences[~real] == 0).all() and (sequences[:, 0] == 1).all() and (document["cls_positions"] == 0).all()
    documents_seen = 0
    for row_ids, row_sequences, row_positions, n in zip(ids, sequences, positions, real.sum(1)):
        ends = np.flatnonzero(row_ids[:n - 1] == SEP)  # the documents' [SEP]s inside the row
        starts = [0] + [end + 1 for end in ends if end + 1 < n - 1]
        want = np.zeros(n, np.int32)
        want[starts[1:]] = 1
        np.testing.assert_array_equal(row_sequences[:n], 1 + np.cumsum(want))
        np.testing.assert_array_equal(row_positions[:n], np.arange(n) - np.array(starts)[row_sequences[:n] - 1])
        documents_seen += len(starts) - 1
    assert documents_seen > 20  # rows do hold several documents
    assert ((document["input_ids"] == SEP) & (ids != SEP)).sum() == len(ids)  # one a row, inside a document
    with pytest.raises(ValueError, match="full_rows_attention must be one of across, document"):
        pretraining_config.check_data_config(data_config(**settings, full_rows_attention="row"))
    with pytest.raises(ValueError, match="full_rows_attention='document' is for full rows"):
        pretraining_config.check_data_config(data_config(full_rows_attention="document"))


def tf_records(path):
    """The documents of one shard: lists of sentences of token ids."""
    from bertjax.data import shards
    from bertjax.runtime.tf_cpu import tf

    for serialized in tf.data.TFRecordDataset(path):
        tokens, lengths = shards.parse_documents(serialized[None])
        flat, cuts = tokens.flat_values.numpy(), np.cumsum(lengths.flat_values.numpy())[:-1]
        yield [list(part) for part in np.split(flat, cuts)]

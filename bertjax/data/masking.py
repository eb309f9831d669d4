"""Graph op: batch-level masked-LM masking, as create_masked_lm_predictions of the original.

Per sequence of n real tokens ([CLS] and [SEP] included, padding excluded):
  num_to_predict = min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))
(Python 3 round: half to even, like tf.round). Candidates are real tokens other than
[CLS]/[SEP], visited in random order; each chosen token becomes [MASK] with p=0.8, a
uniformly random vocabulary id with p=0.1, and stays unchanged with p=0.1 (the split is
`mask_token_prob` / `random_token_prob`, the rest kept).
Whole-word masking groups a continuation piece ('##' in WordPiece) with the candidate right
before it and skips a word that would overflow the quota. Unlike the original, a word never
spans a [SEP]: the original looks back over it, which WordPiece meets only in a segment
truncated at its front, but a byte-level BPE, whose first word of a text has no word-start
mark, would meet at every segment and document start. Everything is vectorized over the batch; whole-word masking adds one
tf.while_loop over words (about max_predictions_per_seq iterations).
"""

from __future__ import annotations

import numpy as np

from bertjax.runtime.tf_cpu import tf


def num_to_predict(num_tokens: tf.Tensor, masked_lm_prob: float, max_predictions: int) -> tf.Tensor:
    """<int32>[...] tokens per sequence -> <int32>[...] predictions per sequence."""
    wanted = tf.cast(tf.round(tf.cast(num_tokens, tf.float64) * masked_lm_prob), tf.int32)
    return tf.minimum(max_predictions, tf.maximum(1, wanted))


def _whole_word_selection(candidates, continuation, quota, keys):
    """<bool>[G, L] chosen positions: whole words in `keys` order while they fit the quota."""
    g, length = tf.shape(candidates)[0], tf.shape(candidates)[1]
    after_candidate = tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])
    starts = candidates & ~(continuation & after_candidate)
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # word index of each candidate
    word = tf.where(candidates, word, length)  # non-candidates -> a discarded bucket
    rows = tf.broadcast_to(tf.range(g)[:, None], tf.shape(word))
    sizes = tf.math.unsorted_segment_sum(tf.ones_like(word), rows * (length + 1) + word, g * (length + 1))
    sizes = tf.reshape(sizes, [g, length + 1])[:, :length]  # [G, W]: tokens per word
    order = tf.argsort(tf.where(sizes > 0, keys, 2.0), axis=1)
    sorted_sizes = tf.gather(sizes, order, batch_dims=1)

    columns = tf.transpose(sorted_sizes)  # [W, G]: word k (in random order) of every row

    # Greedy over words in random order, per row: take a word if it fits the quota. The
    # loop ends as soon as every row is full or out of words (about quota iterations).
    def body(k, total, taken):
        size = columns[k]
        take = (size > 0) & (total + size <= quota)
        return k + 1, total + tf.where(take, size, 0), taken.write(k, take)

    def cond(k, total, _):
        return (k < length) & tf.reduce_any((total < quota) & (columns[tf.minimum(k, length - 1)] > 0))

    num_steps, _, taken = tf.while_loop(cond, body, (0, tf.zeros([g], tf.int32), tf.TensorArray(
        tf.bool, size=0, dynamic_size=True, element_shape=[None])))
    taken = tf.concat([tf.reshape(taken.stack(), [num_steps, g]), tf.zeros([length - num_steps, g], tf.bool)], 0)
    taken_sorted = tf.transpose(taken)  # [G, W] in `order`
    taken_word = tf.scatter_nd(tf.stack([rows, order], axis=-1), tf.cast(taken_sorted, tf.int32), [g, length]) > 0
    taken_word = tf.concat([taken_word, tf.zeros([g, 1], tf.bool)], axis=1)
    return tf.gather(taken_word, word, batch_dims=1)


def mask_batch(input_ids: tf.Tensor, input_mask: tf.Tensor, candidates: tf.Tensor, seed: tf.Tensor, *,
               vocab_size: int, mask_id: int, masked_lm_prob: float, max_predictions: int,
               continuation: np.ndarray | None = None, mask_token_prob: float = 0.8,
               random_token_prob: float = 0.1) -> dict:
    """Masks a batch.

    Args:
      input_ids: <int32>[G, L] with [CLS]/[SEP]/padding in place.
      input_mask: <int32>[G, L] 1 for real tokens ([CLS]/[SEP] included).
      candidates: <bool>[G, L] maskable positions (real tokens other than [CLS]/[SEP]).
      seed: <int32>[2].
      continuation: None, or <bool>[vocab_size] True for '##' pieces (whole-word masking).
      mask_token_prob, random_token_prob: a chosen token's chances of [MASK] and of a random
        id (the original's 0.8 and 0.1; what is left keeps the token).
    Returns input_ids <int32>[G, L] (masked), masked_lm_positions, masked_lm_ids
    <int32>[G, P] (sorted by position, zero padded), masked_lm_weights <float32>[G, P].
    """
    order_seed, choice_seed, keep_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 4))
    shape = tf.shape(input_ids)
    g, length = shape[0], shape[1]
    keys = tf.random.stateless_uniform(shape, order_seed)
    quota = num_to_predict(tf.reduce_sum(input_mask, axis=1), masked_lm_prob, max_predictions)
    if continuation is None:
        # Candidates in random order; the first `quota` of them are chosen.
        _, picked = tf.math.top_k(-tf.where(candidates, keys, 2.0), k=max_predictions, sorted=True)
        picked = tf.cast(picked, tf.int32)
        valid = (tf.range(max_predictions)[None, :] < quota[:, None]) & tf.gather(candidates, picked, batch_dims=1)
        picked = tf.sort(tf.where(valid, picked, length + picked), axis=1)
    else:
        table = tf.constant(np.asarray(continuation, dtype=bool))
        chosen = _whole_word_selection(candidates, tf.gather(table, input_ids), quota, keys)
        positions = tf.broadcast_to(tf.range(length)[None, :], shape)
        _, picked = tf.math.top_k(tf.where(chosen, -positions, -positions - length), k=max_predictions)
        picked = tf.where(tf.gather(chosen, picked, batch_dims=1), picked, length + picked)
    # `picked`: chosen positions ascending, then entries >= length (unused slots).
    valid = picked < length
    picked = tf.where(valid, picked, 0)
    original = tf.gather(input_ids, picked, batch_dims=1)
    p_shape = tf.shape(picked)
    to_mask = tf.random.stateless_uniform(p_shape, choice_seed) < mask_token_prob
    # Of the tokens not masked, the kept share (0.5 for the original's 80/10/10).
    kept_share = (1.0 - mask_token_prob - random_token_prob) / max(1.0 - mask_token_prob, 1e-9)
    keep = tf.random.stateless_uniform(p_shape, keep_seed) < kept_share
    random_ids = tf.random.stateless_uniform(p_shape, random_seed, 0, vocab_size, dtype=tf.int32)
    shown = tf.where(to_mask, mask_id, tf.where(keep, original, random_ids))
    rows = tf.broadcast_to(tf.range(g)[:, None], p_shape)
    index = tf.boolean_mask(tf.stack([rows, picked], axis=-1), valid)
    return {
        "input_ids": tf.tensor_scatter_nd_update(input_ids, index, tf.boolean_mask(shown, valid)),
        "masked_lm_positions": picked,
        "masked_lm_ids": tf.where(valid, original, 0),
        "masked_lm_weights": tf.cast(valid, tf.float32),
    }

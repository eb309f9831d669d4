"""Graph ops: documents -> NSP sentence pairs -> [CLS] A [SEP] B [SEP] layouts.

The algorithm is `create_instances_from_document` of google-research/bert's
create_pretraining_data.py, made online:
  * per document, the target length is max_num_tokens, or with probability
    short_seq_prob randint(2, max_num_tokens) (drawn once per document, as the original);
  * sentences accumulate into a chunk until it reaches the target or the document ends;
  * A = the first randint(1, len(chunk) - 1) sentences of the chunk;
  * with probability 0.5, or always when the chunk has one sentence, B comes from a
    different document (consecutive sentences from a random start until B reaches
    target - len(A); the same document when there is no other) and the chunk's unused
    sentences are put back; otherwise B = the rest of the chunk;
  * truncate_seq_pair trims the longer segment (ties: B) one token at a time, from the
    front or the back with p=0.5, until len(A) + len(B) <= max_num_tokens.
Without NSP (the modern recipe) a chunk is the longest run of whole sentences that fits
the target (a longer single sentence is truncated), laid out as one segment [CLS] A [SEP].

Two stages, each vectorized over a batch:
  `chunk_documents` per batch of (shuffled) documents: the sequential chunk loop (a
                    tf.while_loop over instance number, vectorized across documents) ->
                    A and B tokens per instance; a random B comes from another document
                    of the same batch, chosen uniformly;
  `layout_batch`    per batch of instances: truncation in closed form, layout, segment
                    ids, input mask.
Randomness is stateless, keyed by the `seed` argument (<int32>[2]) of each call.
"""

from __future__ import annotations

from bertjax.runtime.tf_cpu import tf



def _split_seeds(seed: tf.Tensor, count: int) -> list[tf.Tensor]:
    return tf.unstack(tf.random.experimental.stateless_split(seed, count))


def chunk_documents(tokens: tf.RaggedTensor, sentence_lengths: tf.RaggedTensor, seed: tf.Tensor, *,
                    max_num_tokens: int, short_seq_prob: float, next_sentence_prediction: bool = True) -> dict:
    """D documents -> their training instances (NSP pairs), before truncation.

    The chunk loop is sequential within a document, so it runs as one tf.while_loop over
    instance number k, vectorized across the D documents (about max(S) iterations).

    Args:
      tokens: <int32>[D, (T)] each document's token ids, sentences concatenated.
      sentence_lengths: <int32>[D, (S)] tokens per sentence (S >= 1, entries >= 1).
      seed: <int32/int64>[2] stateless seed for this batch of documents.
    Returns a dict for the I instances, document-major (before truncation):
      a_tokens, b_tokens <int32>[I, (len)]  segments A and B (B empty without NSP);
      is_random <bool>[I]                   B is a random one (NSP label 1): from another
                                            document, or a lone document's own;
      document, b_document <int32>[I]       rows of A's and B's documents in the batch;
    and target_length <int32>[D], each document's target length.
    """
    lengths = tf.cast(sentence_lengths.to_tensor(), tf.int32)  # [D, Smax], zero padded
    num_docs, max_sentences = tf.shape(lengths)[0], tf.shape(lengths)[1]
    num_sentences = tf.cast(sentence_lengths.row_lengths(), tf.int32)
    ends = tf.cumsum(lengths, axis=1)  # token end of each sentence
    starts = ends - lengths
    short_seed, target_seed, split_seed, coin_seed, random_seed = _split_seeds(seed, 5)
    short = tf.random.stateless_uniform([num_docs], short_seed) < short_seq_prob
    random_target = tf.random.stateless_uniform([num_docs], target_seed, 2, max_num_tokens + 1, dtype=tf.int32)
    target = tf.where(short, random_target, max_num_tokens)
    # Column k holds iteration k's draws; there are at most S iterations (each consumes a sentence).
    split_u = tf.random.stateless_uniform([num_docs, max_sentences], split_seed)
    coin_u = tf.random.stateless_uniform([num_docs, max_sentences], coin_seed)

    def body(k, i, records):
        active = i < num_sentences
        need = tf.gather(starts, tf.minimum(i, max_sentences - 1), batch_dims=1) + target
        if next_sentence_prediction:
            # First sentence j >= i at which the chunk reaches the target, else the last.
            j = tf.minimum(tf.searchsorted(ends, need[:, None], side="left")[:, 0], num_sentences - 1)
            n = j - i + 1
            a_len = 1 + tf.cast(split_u[:, k] * tf.cast(n - 1, tf.float32), tf.int32)
            a_len = tf.where(n >= 2, tf.minimum(a_len, n - 1), 1)  # min(): float rounding guard
            random_b = (n == 1) | (coin_u[:, k] < 0.5)
            next_i = tf.where(random_b, i + a_len, j + 1)  # a random B puts the unused sentences back
        else:
            # Last sentence j >= i such that the chunk still fits the target.
            j = tf.maximum(tf.minimum(tf.searchsorted(ends, need[:, None], side="right")[:, 0] - 1,
                                      num_sentences - 1), i)
            a_len = j - i + 1
            random_b = tf.zeros_like(active)
            next_i = j + 1
        # B-next is sentences [i + a_len, next_i): empty when B is random.
        record = tf.stack([i, i + a_len, next_i, tf.cast(random_b, tf.int32), tf.cast(active, tf.int32)])
        return k + 1, tf.where(active, next_i, i), records.write(k, record)

    _, _, records = tf.while_loop(
        lambda k, i, _: tf.reduce_any(i < num_sentences), body,
        (tf.constant(0), tf.zeros([num_docs], tf.int32), tf.TensorArray(tf.int32, size=0, dynamic_size=True,
                                                                          element_shape=[5, None])))
    records = tf.transpose(records.stack(), [1, 2, 0])  # [5, D, K]
    # A lone document of one sentence has no B anywhere: its instance is dropped.
    no_b = (num_docs == 1) & (num_sentences < 2)
    keep = (records[4] > 0) & ((records[3] == 0) | ~no_b[:, None])
    a_start, a_end, b_end, random_b = (tf.boolean_mask(r, keep) for r in tf.unstack(records[:4]))
    random_b = random_b > 0
    document = tf.boolean_mask(tf.broadcast_to(tf.range(num_docs)[:, None], tf.shape(keep)), keep)

    def table_at(table, row, column):  # table[row, column] for [D, Smax] tables
        return tf.gather(tf.reshape(table, [-1]), row * max_sentences + column)

    a_token_start, a_token_end = table_at(starts, document, a_start), table_at(ends, document, a_end - 1)
    # Random B: another document of the batch (uniformly), from a random sentence on until
    # B reaches target - len(A) tokens (at least one sentence). A batch of one document (a
    # one-document corpus, host or split; an epoch's last document joins the batch before it)
    # takes it from that document, as the original does when ten draws found no other.
    u_row, u_first = tf.unstack(tf.random.stateless_uniform([2, tf.size(document)], random_seed))
    other = (document + 1 + tf.cast(u_row * tf.cast(num_docs - 1, tf.float32), tf.int32)) % num_docs
    other_sentences = tf.gather(num_sentences, other)
    first = tf.minimum(tf.cast(u_first * tf.cast(other_sentences, tf.float32), tf.int32), other_sentences - 1)
    b_target = tf.gather(target, document) - (a_token_end - a_token_start)
    random_start = table_at(starts, other, first)
    last = tf.searchsorted(tf.gather(ends, other), (random_start + b_target)[:, None], side="left")[:, 0]
    random_end = table_at(ends, other, tf.clip_by_value(last, first, other_sentences - 1))
    b_row = tf.where(random_b, other, document)
    b_token_start = tf.where(random_b, random_start, a_token_end)
    b_token_end = tf.where(random_b, random_end, table_at(ends, document, b_end - 1))

    row_start = tf.cast(tokens.row_starts(), tf.int32)
    flat = tf.cast(tokens.flat_values, tf.int32)
    a_offset, b_offset = tf.gather(row_start, document), tf.gather(row_start, b_row)
    return {
        "a_tokens": tf.gather(flat, tf.ragged.range(a_offset + a_token_start, a_offset + a_token_end)),
        "b_tokens": tf.gather(flat, tf.ragged.range(b_offset + b_token_start, b_offset + b_token_end)),
        "is_random": random_b,
        "document": document,
        "b_document": b_row,
        "target_length": target,
    }


def truncated_lengths(len_a: tf.Tensor, len_b: tf.Tensor, max_num_tokens: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Lengths after the original truncate_seq_pair loop, in closed form. <int32>[...] each.

    The loop trims the longer segment (ties: B). If the shorter segment s fits in half
    (2s <= M) only the longer one is trimmed, to M - s; otherwise both end at half, A
    keeping the odd token.
    """
    total = len_a + len_b
    shorter = tf.minimum(len_a, len_b)
    a_longer = len_a > len_b
    half_a, half_b = (max_num_tokens + 1) // 2, max_num_tokens // 2
    small = 2 * shorter <= max_num_tokens
    new_a = tf.where(small, tf.where(a_longer, max_num_tokens - shorter, len_a), half_a)
    new_b = tf.where(small, tf.where(a_longer, len_b, max_num_tokens - shorter), half_b)
    fits = total <= max_num_tokens
    return tf.where(fits, len_a, new_a), tf.where(fits, len_b, new_b)


def full_rows(tokens: tf.RaggedTensor, sep_id: int, row_length: int) -> dict:
    """D documents -> rows of `row_length` tokens cut from them end to end, each document
    followed by [SEP] (the last row shorter): every token once, in order. A last row that
    would hold only the last document's [SEP] is left out: it has no token to predict, and
    the row before ends at that document's end, closed by the row's own [SEP].

    Args: tokens <int32>[D, (T)]. Returns chunk_documents' instance fields: a_tokens
    <int32>[R, (row_length)], b_tokens empty, is_random False."""
    separators = tf.RaggedTensor.from_row_lengths(tf.fill([tokens.nrows()], tf.constant(sep_id, tokens.dtype)),
                                                  tf.ones([tokens.nrows()], tf.int64))
    stream = tf.concat([tokens, separators], axis=1).flat_values
    total, row_length = tf.size(stream, out_type=tf.int64), tf.constant(row_length, tf.int64)
    total = tf.where((total % row_length == 1) & (total > row_length), total - 1, total)
    stream = stream[:total]
    rows = (total + row_length - 1) // row_length
    lengths = tf.minimum(row_length, total - tf.range(rows) * row_length)
    a_tokens = tf.RaggedTensor.from_row_lengths(stream, lengths)
    return {"a_tokens": a_tokens, "b_tokens": tf.RaggedTensor.from_row_lengths(stream[:0], tf.zeros_like(lengths)),
            "is_random": tf.zeros([rows], tf.bool)}


def document_sequences(input_ids: tf.Tensor, input_mask: tf.Tensor, sep_id: int) -> dict:
    """Full rows -> each document's tokens as its own sequence of the row (packing's fields), so
    attention can stay inside a document.

    A new sequence starts after each document's [SEP] inside the row (the row's [CLS] opens the
    first; its closing [SEP] joins the last), and positions count from 0 in each sequence.
    Args: input_ids, input_mask <int32>[B, L] (layout_batch's full rows). Returns
    sequence_ids (1, 2, ... per row, 0 = padding), position_ids <int32>[B, L] and cls_positions
    <int32>[B, 1] (the row's [CLS]: one pooled vector per row, as packing's K = 1).
    """
    real = input_mask > 0
    pos = tf.range(tf.shape(input_ids)[1])[None, :]
    length = tf.reduce_sum(tf.cast(real, tf.int32), axis=1, keepdims=True)
    document_end = (input_ids == sep_id) & real & (pos < length - 1)
    after_end = tf.pad(document_end[:, :-1], [[0, 0], [1, 0]])
    starts = after_end & (pos < length - 1)
    sequence_ids = tf.where(real, 1 + tf.cumsum(tf.cast(starts, tf.int32), axis=1), 0)
    # Sequence ids never decrease along a row (padding, last, gets the largest key): where a
    # token's id first occurs is where its sequence starts.
    keys = tf.where(real, sequence_ids, tf.int32.max)
    sequence_start = tf.searchsorted(keys, keys, side="left", out_type=tf.int32)
    position_ids = tf.where(real, pos - sequence_start, 0)
    return {"sequence_ids": sequence_ids, "position_ids": position_ids,
            "cls_positions": tf.zeros([tf.shape(input_ids)[0], 1], tf.int32)}


def layout_batch(instances: dict, seed: tf.Tensor, *, max_seq_length: int, next_sentence_prediction: bool,
                 cls_id: int, sep_id: int, pad_id: int) -> dict:
    """A batch of instances -> truncated, laid out and padded BERT inputs.

    Args:
      instances: a_tokens, b_tokens <int32>[G, (len)], is_random <bool>[G] (rows of
        `chunk_documents`, batched).
      seed: <int32/int64>[2].
    Returns input_ids, input_mask, segment_ids <int32>[G, L], candidates <bool>[G, L]
    (maskable positions: real tokens other than [CLS]/[SEP]), next_sentence_labels <int32>[G].
    """
    max_num_tokens = max_seq_length - (3 if next_sentence_prediction else 2)
    front_a_seed, front_b_seed = _split_seeds(seed, 2)
    a, b = instances["a_tokens"], instances["b_tokens"]
    len_a, len_b = tf.cast(a.row_lengths(), tf.int32), tf.cast(b.row_lengths(), tf.int32)
    a_start = tf.cast(a.row_starts(), tf.int32)
    b_start = tf.size(a.flat_values) + tf.cast(b.row_starts(), tf.int32)
    source = tf.concat([a.flat_values, b.flat_values], axis=0)
    new_a, new_b = truncated_lengths(len_a, len_b, max_num_tokens)

    # Each trimmed token left the front with p=0.5: the front share is binomial.
    def front_share(trimmed, key):
        return tf.random.stateless_binomial(tf.shape(trimmed), key, tf.cast(trimmed, tf.float32), 0.5,
                                            output_dtype=tf.int32)

    front_a, front_b = front_share(len_a - new_a, front_a_seed), front_share(len_b - new_b, front_b_seed)

    pos = tf.range(max_seq_length)[None, :]
    la, lb = new_a[:, None], new_b[:, None]
    in_a = (pos >= 1) & (pos <= la)
    index = tf.where(in_a, (a_start + front_a)[:, None] + pos - 1, (b_start + front_b)[:, None] + pos - la - 2)
    tokens = tf.gather(source, tf.clip_by_value(index, 0, tf.maximum(tf.size(source) - 1, 0)))
    if next_sentence_prediction:
        length = la + lb + 3
        sep = (pos == la + 1) | (pos == length - 1)
        segment_ids = tf.cast((pos >= la + 2) & (pos < length), tf.int32)
    else:
        length = la + 2
        sep = pos == length - 1
        segment_ids = tf.zeros_like(pos + la)
    input_mask = pos < length
    ids = tf.where(pos == 0, cls_id, tf.where(sep, sep_id, tf.where(input_mask, tokens, pad_id)))
    return {
        "input_ids": ids,
        "input_mask": tf.cast(input_mask, tf.int32),
        "segment_ids": segment_ids,
        "candidates": input_mask & (pos != 0) & ~sep & (tokens != sep_id),  # full rows: no inner [SEP]
        "next_sentence_labels": tf.cast(instances["is_random"], tf.int32),
    }


def pack_rows(pairs: dict, *, max_pairs: int, max_predictions: int) -> dict:
    """Laid-out and masked pairs -> packed rows: several pairs per row, each keeping its own
    [CLS] (one NSP prediction per pair), positions from 0 and segment ids.

    Pairs are placed in order, each into the first row that still has room for its tokens,
    its predictions and one more pair (at most `max_pairs`); so the rows are a pure function
    of the pairs. Args (G pairs, each left-aligned in a row of length L):
      input_ids, input_mask, segment_ids <int32>[G, L]; masked_lm_positions, masked_lm_ids
      <int32>[G, P']; masked_lm_weights <float32>[G, P'] (real predictions first);
      next_sentence_labels <int32>[G].
    Returns R <= G rows: input_ids, input_mask, segment_ids, position_ids, sequence_ids
    (1..K for the pairs of a row, 0 = padding) <int32>[R, L]; cls_positions,
    next_sentence_labels <int32>[R, K]; next_sentence_weights <float32>[R, K] (0 = no pair);
    masked_lm_positions, masked_lm_ids <int32>[R, max_predictions] (row positions,
    ascending), masked_lm_weights <float32>[R, max_predictions].
    """
    input_mask = tf.cast(pairs["input_mask"], tf.int32)
    length = tf.shape(input_mask)[1]
    tokens = tf.reduce_sum(input_mask, axis=1)
    predictions = tf.cast(tf.reduce_sum(pairs["masked_lm_weights"], axis=1), tf.int32)
    count = tf.shape(tokens)[0]

    def place(state, pair):  # first fit: state = tokens, predictions and pairs of each row so far
        used_tokens, used_predictions, used_pairs = state
        n, p = pair
        fits = (used_tokens + n <= length) & (used_predictions + p <= max_predictions) & (used_pairs < max_pairs)
        row = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)  # rows past the last used are empty
        start = tf.stack([used_tokens[row], used_predictions[row], used_pairs[row]])
        one = tf.one_hot(row, count, dtype=tf.int32)
        return (used_tokens + one * n, used_predictions + one * p, used_pairs + one), tf.concat([[row], start], 0)

    zeros = tf.zeros([count], tf.int32)
    _, placed = tf.scan(lambda carry, pair: place(carry[0], pair), (tokens, predictions),
                        initializer=((zeros, zeros, zeros), tf.zeros([4], tf.int32)))
    row, offset, prediction_offset, slot = tf.unstack(placed, axis=1)
    rows = tf.reduce_max(row) + 1

    # Tokens: pair i's position j goes to (row_i, offset_i + j).
    real = input_mask > 0
    columns = tf.range(length)[None, :]
    where = tf.boolean_mask(tf.stack([tf.broadcast_to(row[:, None], tf.shape(real)), offset[:, None] + columns], -1),
                            real)

    def tokens_to_rows(values):
        return tf.scatter_nd(where, tf.boolean_mask(values, real), [rows, length])

    ones = tf.ones_like(input_mask)
    out = {
        "input_ids": tokens_to_rows(pairs["input_ids"]),
        "input_mask": tokens_to_rows(ones),
        "segment_ids": tokens_to_rows(pairs["segment_ids"]),
        "position_ids": tokens_to_rows(columns * ones),
        "sequence_ids": tokens_to_rows((slot[:, None] + 1) * ones),
    }
    # One [CLS] and NSP label per pair: slot k of its row.
    pair_index = tf.stack([row, slot], axis=1)
    out["cls_positions"] = tf.scatter_nd(pair_index, offset, [rows, max_pairs])
    out["next_sentence_labels"] = tf.scatter_nd(pair_index, tf.cast(pairs["next_sentence_labels"], tf.int32),
                                                [rows, max_pairs])
    out["next_sentence_weights"] = tf.scatter_nd(pair_index, tf.ones([count], tf.float32), [rows, max_pairs])
    # Predictions: pair i's k-th goes to slot prediction_offset_i + k of its row.
    chosen = pairs["masked_lm_weights"] > 0
    slots = tf.range(tf.shape(chosen)[1])[None, :]
    index = tf.boolean_mask(tf.stack([tf.broadcast_to(row[:, None], tf.shape(chosen)),
                                      prediction_offset[:, None] + slots], -1), chosen)
    shape = [rows, max_predictions]
    out["masked_lm_positions"] = tf.scatter_nd(
        index, tf.boolean_mask(offset[:, None] + tf.cast(pairs["masked_lm_positions"], tf.int32), chosen), shape)
    out["masked_lm_ids"] = tf.scatter_nd(index, tf.boolean_mask(tf.cast(pairs["masked_lm_ids"], tf.int32), chosen),
                                         shape)
    out["masked_lm_weights"] = tf.scatter_nd(index, tf.ones([tf.shape(index)[0]], tf.float32), shape)
    return out

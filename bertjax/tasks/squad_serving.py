"""Span QA in the serving export's graph (TensorFlow ops): question + context strings -> the
best span's bytes in the context, one window per question (bertjax's predict slides windows
over long contexts instead: a context cut to the window is flagged `truncated`). Candidates
are chosen as predict's are (squad_answers.postprocess) within that window. Called by
`squad.FAMILY.serve`; kept apart for its length."""

from __future__ import annotations


def best_spans(serving, question, context, version: str, options: dict) -> dict:
    """<string>[B] x 2 -> answer <string>[B], start / end <int64>[B] (byte offsets into the
    context; -1 for no answer), score <float32>[B] (the best span's start + end logit),
    null_odds <float32>[B] (null score minus the best span's, NO_SPAN_NULL_ODDS without one;
    v2.0 models answer "" above the run's threshold; a question or context without tokens,
    which predict refuses, has no span), truncated <bool>[B] (the question was cut
    to max_query_length tokens or the context to what fits: predict reads the rest in further
    windows). Spans pair the n_best_size highest start and end logits, as predict's.
    options: the run's settings (`squad.settings`)."""
    from bertjax.tasks.squad_answers import NO_SPAN_NULL_ODDS
    from bertjax.runtime.tf_cpu import tf

    context_ids, token_start, token_end = serving.tokenizer.ids_with_offsets(context)
    question_ids = serving.tokenizer.ids(question)
    input_ids, segment_ids, input_mask, kept_q = serving.layout(question_ids, context_ids,
                                                                options["max_query_length"])
    start_logits, end_logits = serving.model(input_ids, segment_ids, input_mask)
    batch, length = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
    positions = tf.range(length)[None]
    row_length = tf.reduce_sum(input_mask, axis=1, keepdims=True)
    context_mask = (segment_ids == 1) & (positions < row_length - 1)  # the context, not its [SEP]
    truncated = ((kept_q < question_ids.row_lengths())
                 | (tf.reduce_sum(tf.cast(context_mask, tf.int64), axis=1) < context_ids.row_lengths()))
    span = positions - tf.transpose(positions)  # [S, S]: end - start
    allowed = (span >= 0) & (span < options["max_answer_length"])

    def top(logits):  # <bool>[B, S]: the n_best_size highest of a row's real positions
        real = tf.where(positions < row_length, logits, float("-inf"))
        _, index = tf.math.top_k(real, tf.minimum(options["n_best_size"], length))  # ties: the lower index first
        return tf.reduce_any(tf.one_hot(index, length, on_value=True, off_value=False), axis=1)

    asked = (question_ids.row_lengths() > 0)[:, None, None]  # else the context alone chose a span
    valid = (asked & context_mask[:, :, None] & context_mask[:, None, :] & allowed[None]
             & top(start_logits)[:, :, None] & top(end_logits)[:, None, :])
    scores = tf.reshape(tf.where(valid, start_logits[:, :, None] + end_logits[:, None, :], -1e30), [batch, -1])
    flat, best = tf.argmax(scores, axis=1, output_type=tf.int32), tf.reduce_max(scores, axis=1)
    has = best > -1e29
    first_context = tf.cast(kept_q, tf.int32) + 2  # [CLS] question [SEP]
    # One entry more, so that a batch without context tokens (empty contexts) gathers something
    # where it has no span; those positions are replaced by -1 below.
    token_start, token_end = (tf.concat([x.flat_values, tf.zeros([1], tf.int64)], 0) for x in (token_start, token_end))
    # Row b's context token k is token row_starts[b] + k of context_ids.
    token = lambda row_position: (tf.cast(context_ids.row_starts(), tf.int32)
                                  + tf.where(has, row_position - first_context, 0))
    start = tf.where(has, tf.gather(token_start, token(flat // length)), -1)
    end = tf.where(has, tf.gather(token_end, token(flat % length)), -1)
    null_odds = tf.where(has, start_logits[:, 0] + end_logits[:, 0] - best, NO_SPAN_NULL_ODDS)
    if version == "v2.0":
        has &= null_odds <= options["null_score_diff_threshold"]
        start, end = tf.where(has, start, -1), tf.where(has, end, -1)
    answer = tf.where(has, tf.strings.substr(context, tf.maximum(start, 0), end - start), "")
    return {"answer": answer, "start": start, "end": end, "score": best, "null_odds": null_odds,
            "truncated": truncated}

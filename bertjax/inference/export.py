"""Serving export: a TensorFlow SavedModel that takes strings and needs no bertjax or JAX.

    from bertjax.inference import export
    export.export_saved_model("workdir/reviews", "serving/reviews")   # writes serving/reviews/1/

The SavedModel's `serving_default` signature holds the whole path from text to answer:
  * the tokenizer, in TensorFlow Text ops: WordPiece as bertjax's (BERT's basic tokenizer:
    control characters dropped, whitespace and punctuation split, CJK characters apart,
    lower-casing and accent stripping when the vocabulary is uncased; then greedy
    longest-match-first WordPiece, a word over 100 characters one [UNK]) or SentencePiece
    from the model's bytes; the same ids as `Tokenizer.encode` (tests/test_export.py);
  * the `[CLS] a [SEP] b [SEP]` layout with the original truncation rule (the longer side
    trimmed first), padded to the longest input in the batch;
  * the model, a JAX function lowered by jax2tf with native serialization (StableHLO in an
    XlaCallModule op, for CPU, CUDA and TPU), batch and sequence length symbolic;
  * the task's post-processing as far as it stays simple in a graph.

Inputs (each <string>[batch]) and outputs, per task family:
  classification  text, or text_a + text_b for a pair model -> label <string>[B],
                  probability <float32>[B], probabilities <float32>[B, K], label_names <string>[B, K],
                  truncated <bool>[B] (the input was longer than max_seq_length: its first tokens decided)
  regression      the same inputs -> value <float32>[B], truncated <bool>[B]
  tagging         text -> words <string>[B, W] (BERT's basic split, as written), tags <string>[B, W],
                  word_start / word_end <int64>[B, W] (byte offsets into the text); rows padded with
                  "" and -1; words past the max_seq_length window are tagged ""; truncated <bool>[B]
                  (the sentence's tokens overflow the window: predict reads further windows)
  squad           question + context -> answer <string>[B], start / end <int64>[B] (byte offsets into
                  the context; -1 for no answer), score <float32>[B] (the best span's
                  start + end logit), null_odds <float32>[B] (null score minus the best span's; v2.0
                  models answer "" above the run's threshold), truncated <bool>[B]. One window: the
                  question is cut to max_query_length tokens and the context to what fits (bertjax's
                  predict slides windows over long contexts instead), and either cut is `truncated`.
  choice          context <string>[B] + choices <string>[B, C] (a row with fewer choices padded
                  with "") -> choice <int64>[B], probabilities <float32>[B, C] (0 for padding),
                  truncated <bool>[B] (a (context, choice) pair was longer than max_seq_length); a
                  row of fewer than two choices (predict refuses it) has choice -1, probabilities 0

assets.extra/task.json records the model given and its weights' folder, the task, its label
names, max_seq_length, the precision and the run's settings that the graph applies (span QA:
`settings`, squad.settings).

Why jax2tf rather than orbax-export: orbax-export (0.0.8, 2025-09) is a thin layer over the
same jax2tf/jax.export lowering and pins its own orbax/JAX ranges; jax2tf ships with JAX
itself, so the exporter always matches the JAX that trained the model.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from bertjax import tasks, tokenization

SIGNATURE = "serving_default"
TOKEN_ID_INPUTS = ("input_ids", "segment_ids", "input_mask")  # the export of a tokenizer TF Text lacks
PLATFORMS = ("cpu", "cuda", "tpu")  # what the lowered model runs on


def _character_class(ranges: tuple[tuple[int, int], ...]) -> str:
    """Inclusive code point ranges -> an RE2 character class."""
    return "[" + "".join(fr"\x{{{low:X}}}" + (fr"-\x{{{high:X}}}" if high > low else "") for low, high in ranges) + "]"


def export_saved_model(model_path, output_dir: str | os.PathLike, version: int = 1, max_seq_length: int | None = None,
                       pairs: bool | None = None, vocab_path: str = "", do_lower_case: bool | None = None,
                       precision: str = "float32") -> str:
    """Writes the SavedModel of the fine-tuned model at `model_path` (any path
    bertjax.inference.model_source resolves, or its ModelSource) to `output_dir/version/` (TensorFlow
    Serving's layout) and returns that folder. max_seq_length: the longest input (default: the
    run's). pairs: a classifier's inputs, text_a + text_b or text (default: what the run trained
    on; a Hugging Face classifier, which does not say: text). vocab_path, do_lower_case,
    precision: as `load_model`'s (float32 by default on every platform: the model may be served
    anywhere; bfloat16 is the CPU form, bfloat16 products around float32 activations, whatever
    the exporting host); assets.extra/task.json records the weights, the task, the length, the
    precision and what a client needs (`_write_assets`)."""
    from bertjax import checkpointing
    from bertjax.runtime import fileio
    from bertjax.inference import engine, model_source

    output_dir = os.fspath(output_dir)  # (a pathlib.Path, as model_path may be)
    if not output_dir:  # (else the current folder's saved_model.pb or 1/ is what the checks below see)
        raise ValueError("--output is empty; give a folder")
    source = model_source.with_pairs(model_source.resolve(model_path), pairs)
    if source.task_info.get("family") not in tasks.FAMILIES:
        raise ValueError(f"{source.path} is not a fine-tuned model (no task saved with it); export needs a "
                         "fine-tuning run or a Hugging Face BertFor<Task> or ModernBertFor<Task> directory (the "
                         "encoder's features: launch/extract_features.py; fill-mask: predict.py --task=fill_mask, "
                         "not exported)")
    if fileio.exists(output_dir) and not fileio.isdir(output_dir):
        raise ValueError(f"--output={output_dir} is a file; give a folder")
    checkpointing.refuse_checkpoint_folder(output_dir, "--output", "the export's versions")
    if fileio.exists(fileio.join(output_dir, "saved_model.pb")):  # TF Serving would keep serving it, not one inside
        raise ValueError(f"--output={output_dir} is a SavedModel's version folder; give the model's folder "
                         f"({fileio.parent(output_dir)}) and a new --version")
    target = fileio.join(output_dir, str(version))
    if fileio.exists(target) and not fileio.isdir(target):
        raise ValueError(f"{target} is a file; give another --output or --version")
    if fileio.exists(target) and fileio.listdir(target):
        raise ValueError(f"{target} is not empty; give another --output or --version")
    fileio.check_can_make(output_dir, "--output")  # before the model loads and traces
    from bertjax.runtime import tf_cpu
    from bertjax.runtime.tf_cpu import tf  # before tensorflow_text imports TensorFlow its own way

    model = engine.load_model(source, max_seq_length=max_seq_length, precision=precision, vocab_path=vocab_path,
                              do_lower_case=do_lower_case)
    token_ids = takes_token_ids(model.tokenizer)
    # A graph that tokenizes reads words as the family's TF Text code does; one that takes token
    # ids leaves that to the client, and only the length is the family's to check.
    why_not = (model.family.check_length(model.max_seq_length, model.source.data) if token_ids
               else model.family.check_export(model.tokenizer, model.max_seq_length, model.source.data))
    if why_not:
        raise ValueError(f"{source.path}: {why_not}")
    module, signature = _token_ids_module(model) if token_ids else _tokenizing_module(model)

    def write(folder: str) -> None:
        try:
            tf.saved_model.save(module, folder, signatures={SIGNATURE: signature})
        except tf.errors.OpError as e:  # a full disk's, as fileio's OSError (write_folder_whole names it)
            raise tf_cpu.disk_error(e, folder) or e from None
        _write_assets(model, folder)

    fileio.write_folder_whole(target, write, "--output", last="saved_model.pb")
    return target


def _tokenizing_module(model):
    """The SavedModel's module and signature with the tokenizer in the graph (TF Text)."""
    try:
        import tensorflow_text  # noqa: F401  (the tokenizer ops)
    except ImportError:
        raise ValueError("the export needs tensorflow-text: pip install --no-deps tensorflow-text==2.21.1 "
                         "(launch/setup_env.sh installs it)") from None
    return _serving_module(model)


def takes_token_ids(tokenizer) -> bool:
    """Whether the export of a model with this tokenizer takes token ids instead of strings: TF
    Text has WordPiece and SentencePiece but no byte-level BPE (ModernBERT's), nor the other
    models a Hugging Face tokenizer.json may hold."""
    return tokenizer.kind == "huggingface"


def _token_ids_module(model):
    """The SavedModel without a tokenizer: input_ids, segment_ids, input_mask <int32>[B, S]
    ([B, C, S] for multiple choice) -> the network's float32 logits: `logits` (classification
    [B, K], regression [B, 1], tagging [B, S, K], choice [B, C]) or `start_logits`, `end_logits`
    [B, S] (span QA). Rows longer than max_seq_length are refused: the model would read
    positions it never trained at, where predict truncates; so are ids outside the vocabulary
    and segment ids or mask values other than 0 and 1 (the embedding lookup gave NaN logits
    for an id past the vocabulary)."""
    from bertjax.runtime.tf_cpu import tf

    module = tf.Module()
    module.params = _variables(model)
    apply = _jax_function(model)
    rank = 3 if model.family.choice_axis else 2
    specs = [tf.TensorSpec((None,) * rank, tf.int32, name=name) for name in TOKEN_ID_INPUTS]

    def serve(input_ids, segment_ids, input_mask):
        vocab_size = model.bert.vocab_size
        checks = [tf.debugging.assert_less_equal(
            tf.shape(input_ids)[-1], model.max_seq_length,
            message=f"rows longer than max_seq_length={model.max_seq_length} tokens (assets.extra/task.json): "
                    "truncate them as the client's tokenizer encodes")]
        for name, values, limit in (("input_ids", input_ids, vocab_size), ("segment_ids", segment_ids, 2),
                                    ("input_mask", input_mask, 2)):
            checks += [tf.debugging.assert_non_negative(values, message=f"{name} below 0"),
                       tf.debugging.assert_less(values, limit, message=f"{name} of {limit} or more (" + (
                           f"the vocabulary has {vocab_size} ids)" if name == "input_ids" else "0 or 1 expected)"))]
        with tf.control_dependencies(checks):
            out = apply(module.params, input_ids, segment_ids, input_mask)
        return dict(zip(("start_logits", "end_logits"), out)) if isinstance(out, tuple) else {"logits": out}

    return module, tf.function(serve, input_signature=specs, autograph=False).get_concrete_function()


# How bertjax lays out the rows a token-id SavedModel takes (task.json's "layout"): what a
# client must do to get predict's answers (docs/modern-encoder.md#serving has the code).
ROW_LAYOUT = ("[CLS] a [SEP] (b [SEP]; none when b has no tokens), segment 0 then 1, padded with pad_id and "
              "input_mask 0; each text tokenized alone, without special tokens; a pair longer than "
              "max_seq_length cut one token at a time from the end of the longer text (of b on a tie), a single "
              "text from its end; span QA: a = the question (its first max_query_length tokens), b = windows "
              "of the context doc_stride tokens apart; multiple choice: a = the context, b = each choice; "
              "tagging: a = the words, each tokenized alone, those after the first as word_prefix + word, a word "
              "of no tokens one [UNK], a sentence longer than the row in windows (max_seq_length - 2) // 2 "
              "tokens apart, each word tagged from the window where it is furthest from an edge")


def _write_assets(model, target: str) -> None:
    """assets.extra/ (TensorFlow Serving's folder for files beside the model): task.json, the
    model as given and the folder its weights came from (a run's best/<step>, or a checkpoint
    of one still training), the task and its label names, max_seq_length, the products'
    precision, the signature's inputs, the tokenizer (its kind, file, casing and vocab_hash:
    the graph holds the vocabulary itself) and the family's serving settings (span QA's
    windowing and answer settings); for a model that takes token ids also the tokenizer.json
    the client tokenizes with and the row layout."""
    from bertjax.runtime import fileio

    extra = fileio.join(target, "assets.extra")
    fileio.makedirs(extra)
    # (absolute: a relative path names nothing once the export is served from elsewhere)
    task = {"model": fileio.absolute(model.source.path), "weights": fileio.absolute(model.source.weights),
            "task": model.source.task,
            **model.task_info, "max_seq_length": model.max_seq_length, "precision": model.precision,
            "inputs": list(serving_inputs(model.task_info, model.tokenizer.kind)),
            "tokenizer": {"kind": model.tokenizer.kind, "path": fileio.absolute(model.tokenizer.path),
                          "do_lower_case": model.tokenizer.do_lower_case, "vocab_hash": model.tokenizer.vocab_hash}}
    settings = tasks.FAMILIES[model.task_info["family"]].serving_settings(model.source.data)
    if settings:
        task["settings"] = settings
    if takes_token_ids(model.tokenizer):
        fileio.write_bytes(fileio.join(extra, "tokenizer.json"),
                           tokenization.hf_tokenizer_json(model.tokenizer).encode("utf-8"))
        tokenizer = model.tokenizer
        task.update({
            "layout": ROW_LAYOUT,
            # bertjax reads "[SEP]" written in a text as text; tokenizers' own default is the token
            "encode_special_tokens": True,
            "special_ids": {"cls": tokenizer.cls_id, "sep": tokenizer.sep_id, "pad": tokenizer.pad_id,
                            "mask": tokenizer.mask_id}})
        task.update(tasks.FAMILIES[model.task_info["family"]].token_id_client(model))
    fileio.write_json(fileio.join(extra, "task.json"), task)


def serving_inputs(task_info: dict, tokenizer_kind: str = "wordpiece") -> tuple[str, ...]:
    """The serving signature's input names for a model's task_info (and tokenizer kind)."""
    if tokenizer_kind == "huggingface":
        return TOKEN_ID_INPUTS
    return tuple(name for name, _ in tasks.FAMILIES[task_info["family"]].serving_inputs(task_info))


# -- The tokenizer in TensorFlow ops. --

def tensorflow_tokenizer(tokenizer):
    """The TF Text twin of a bertjax Tokenizer, a tf.Module: `ids(<string>[B]) -> <int32>[B, (T)]`
    (Tokenizer.encode's ids); WordPiece also has `words` and `pieces` (BERT's split, then WordPiece)."""
    from bertjax.runtime import fileio
    from bertjax.runtime.tf_cpu import tf
    from bertjax.tokenization import (MAX_INPUT_CHARS_PER_WORD, bert_character_classes, piece_roots,
                                      tokens_without_repeats)

    import tensorflow_text as tft  # after bertjax.runtime.tf_cpu, which sets TensorFlow up first

    class WordPiece(tf.Module):
        def __init__(self):
            super().__init__()
            tokens = tokens_without_repeats([tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)])
            self.lower = tokenizer.do_lower_case
            # BERT's basic split as training's `tokenizers` makes it (whitespace ends a word;
            # punctuation and CJK ideographs, and uncased ≠ ≮ ≯ (= < > once normalised), are words
            # of their own; control characters go), character by character.
            classes = bert_character_classes(self.lower)
            self.whitespace = _character_class(classes["whitespace"]) + "+"
            self.apart = _character_class(classes["apart"])
            self.dropped = _character_class(classes["dropped"])
            self.stripped = _character_class(classes["stripped"]) if classes["stripped"] else None
            self.wordpiece = tft.FastWordpieceTokenizer(
                tokens, suffix_indicator="##", max_bytes_per_word=4 * MAX_INPUT_CHARS_PER_WORD,
                token_out_type=tf.int32, unknown_token="[UNK]", no_pretokenization=True,
                support_detokenization=False)

        def words(self, texts, every_written_word=False):
            """<string>[B] -> (normalised words, start, end byte offsets into the texts), each [B, (W)].
            Words that normalisation empties (a lone control character, an accent when uncased)
            are dropped, as Tokenizer.encode drops them; with `every_written_word` (tagging, which
            tags each word as written: tagging.sentence_words) a word emptied by more than the
            removal of control characters is kept as [UNK], as tagging.featurize keeps it."""
            texts = tf.strings.regex_replace(texts, r"\x00", "\x01")  # the split stops at NUL; both go below
            words, starts, ends = tft.regex_split_with_offsets(texts, f"{self.whitespace}|{self.apart}", self.apart)
            flat = self.normalize(words.flat_values)
            long = tf.strings.length(flat, unit="UTF8_CHAR") > MAX_INPUT_CHARS_PER_WORD
            if every_written_word:
                long |= (tf.strings.length(flat) == 0) & (tf.strings.length(self.clean(words.flat_values)) > 0)
                # A word as written starts and ends where tagging.sentence_words' does: without the
                # characters BERT's clean-up drops (a zero-width space, a control character) at its edges.
                written, trim = words.flat_values, tf.strings.regex_replace
                bytes_of = lambda strings: tf.cast(tf.strings.length(strings), starts.dtype)  # noqa: E731
                starts = starts.with_flat_values(starts.flat_values + bytes_of(written)
                                                 - bytes_of(trim(written, f"^{self.dropped}+", "")))
                ends = ends.with_flat_values(ends.flat_values - bytes_of(written)
                                             + bytes_of(trim(written, f"{self.dropped}+$", "")))
            flat = tf.where(long, "[UNK]", flat)  # the vocabulary's own [UNK] entry
            keep = words.with_flat_values(tf.strings.length(flat) > 0)
            return tuple(tf.ragged.boolean_mask(x, keep) for x in
                         (words.with_flat_values(flat), starts, ends))

        def clean(self, strings):
            """Each string without its control characters (BERT's clean_text)."""
            return tf.strings.regex_replace(strings, self.dropped, "")

        def normalize(self, strings):
            """BERT's normalisation of each string: control characters dropped; NFD, accents
            dropped and lower case when uncased."""
            strings = self.clean(strings)
            if self.lower:
                strings = tf.strings.regex_replace(tft.normalize_utf8(strings, "NFD"), self.stripped, "")
                # Lower-cased one character at a time, as `tokenizers` does: a word's last capital
                # sigma is σ, not the final ς that TensorFlow's lower() writes. ICU's lower() follows
                # the serving process's locale, where Turkish and Azeri make I a dotless ı: I is
                # lowered here first (İ and the other dotted capitals are I and a mark after NFD).
                strings = tf.strings.regex_replace(tf.strings.regex_replace(strings, "Σ", "σ"), "I", "i")
                strings = tf.strings.lower(strings, encoding="utf-8")
            return strings

        def pieces(self, words):
            """[B, (W)] normalised words -> ids [B, (W), (P)]."""
            return self.wordpiece.tokenize(words)

        def ids_with_offsets(self, texts):
            """<string>[B] -> ids <int32>[B, (T)] and each token's start, end <int64>[B, (T)]: the byte
            span in its text of the characters it was made from, as Tokenizer.encode_flat_with_offsets
            (a character normalisation drops inside a word belongs to the token before it; a
            word that is one [UNK] spans all its kept characters).

            WordPiece's offsets are bytes of the normalised word; each original character of the
            word is normalised alone, and the running total of those lengths says which original
            character made a normalised byte (normalising characters one by one gives the word's
            length: NFD, accent removal and lower-casing act per character)."""
            words, starts, ends = self.words(texts)
            pieces, piece_starts, piece_ends = self.wordpiece.tokenize_with_offsets(words)
            originals = tf.strings.substr(tf.repeat(texts, words.row_lengths()), starts.flat_values,
                                          (ends - starts).flat_values)
            chars, char_offsets = tf.strings.unicode_split_with_offsets(originals, "UTF-8")
            char_start = tf.repeat(starts.flat_values, chars.row_lengths()) + char_offsets.flat_values
            char_end = char_start + tf.cast(tf.strings.length(chars.flat_values), tf.int64)
            normalised = tf.cast(tf.strings.length(self.normalize(chars.flat_values)), tf.int64)
            made_up_to = tf.cumsum(normalised)  # [all characters]: normalised bytes up to each one's end
            word_length = tf.reduce_sum(chars.with_flat_values(normalised), axis=1)  # [all words]
            word = pieces.values.value_rowids()
            base = tf.gather(tf.cumsum(word_length, exclusive=True), word)
            unknown = tf.gather(tf.equal(words.flat_values, "[UNK]"), word)  # a word over the length limit
            begin = base + tf.where(unknown, tf.zeros_like(base), piece_starts.flat_values)
            finish = base + tf.where(unknown, tf.gather(word_length, word), piece_ends.flat_values)
            made = lambda byte: tf.searchsorted(made_up_to[None], byte[None], side="right")[0]
            start = tf.gather(tf.concat([char_start, [0]], 0), made(begin))
            # The token's last character, then, when the token ends with it, those after it in
            # its word that normalisation drops (their running total stays put) up to the word's
            # last visible one, as Tokenizer's offsets keep them: control and invisible formatting
            # characters that end the word stay out.
            last = made(finish - 1)
            made_last = tf.gather(tf.concat([made_up_to, [0]], 0), last)
            invisible = tf.strings.regex_full_match(chars.flat_values, r"[\p{Cc}\p{Cf}]")
            position = tf.range(tf.size(invisible, out_type=tf.int64))
            last_visible = tf.math.unsorted_segment_max(tf.where(invisible, tf.constant(-1, tf.int64), position),
                                                        chars.value_rowids(), chars.nrows())
            word_last = tf.cast(tf.gather(last_visible, word), last.dtype)
            dropped_after = tf.minimum(made(made_last) - 1, word_last)
            last = tf.where(tf.equal(finish, made_last), tf.maximum(dropped_after, last), last)
            end = tf.gather(tf.concat([char_end, [0]], 0), last)
            ids = pieces.merge_dims(1, 2)
            return ids, ids.with_flat_values(start), ids.with_flat_values(end)

        def ids(self, texts):
            """<string>[B] -> <int32>[B, (T)] token ids, as Tokenizer.encode."""
            return self.pieces(self.words(texts)[0]).merge_dims(1, 2)

    class SentencePiece(tf.Module):
        def __init__(self):
            super().__init__()
            with fileio.open_file(tokenizer.path, "rb") as f:
                self.sentencepiece = tft.SentencepieceTokenizer(model=f.read(), out_type=tf.int32)
            roots, powers = piece_roots([tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)])
            self.roots, self.powers = tf.constant(roots, tf.int64), tf.constant(powers, tf.int64)

        def ids(self, texts):
            """<string>[B] -> <int32>[B, (T)]: TF Text's SentencePiece, then each run of pieces that
            are powers of one word in ascending order of power, as Tokenizer._tie_order does (the
            builds break the ties of such runs differently)."""
            ids = self.sentencepiece.tokenize(texts)
            if not tokenizer.orders_ties:  # a BPE model: no ties
                return ids
            flat = ids.flat_values
            root, row = tf.gather(self.roots, flat), ids.value_rowids()
            new_run = tf.concat([[True], (root[1:] != root[:-1]) | (row[1:] != row[:-1])], 0)
            run = tf.cumsum(tf.cast(new_run, tf.int64))
            order = tf.argsort(run * (tf.reduce_max(self.powers) + 1) + tf.gather(self.powers, flat), stable=True)
            return ids.with_flat_values(tf.gather(flat, order))

    return WordPiece() if tokenizer.kind == "wordpiece" else SentencePiece()


# -- The serving module. --

def _truncated_pair_lengths(tf, len_a, len_b, budget):
    """bertjax.tasks.common.truncated_pair_lengths in TF ops (the longer side trimmed first)."""
    fits = len_a + len_b <= budget
    half_up, half_down = (budget + 1) // 2, budget // 2
    short_a = (len_a <= len_b) & (len_a < half_up)
    short_b = (len_b < len_a) & (len_b <= half_down)
    keep_a = tf.where(short_a, len_a, tf.where(short_b, budget - len_b, half_up))
    keep_b = tf.where(short_a, budget - len_a, tf.where(short_b, len_b, half_down))
    return tf.where(fits, len_a, keep_a), tf.where(fits, len_b, keep_b)


class _Layout:
    """`[CLS] a [SEP] (b [SEP])` rows from ragged ids, padded to the longest row; a row whose b
    has no tokens is `[CLS] a [SEP]` (bertjax.tasks.common.encode_pairs, the original's)."""

    def __init__(self, tokenizer, max_seq_length: int):
        self.cls_id, self.sep_id, self.pad_id = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
        self.max_seq_length = max_seq_length

    def __call__(self, ids_a, ids_b=None, budget_a=None):
        """ids <int32>[B, (T)] -> (input_ids, segment_ids, input_mask <int32>[B, S], kept_a <int64>[B]).
        budget_a: SQuAD's rule instead of the longer side first: a is cut to this many tokens
        (max_query_length) and kept whole, b fills the rest (one window of the context)."""
        from bertjax.runtime.tf_cpu import tf

        len_a = ids_a.row_lengths()
        single = tf.minimum(len_a, self.max_seq_length - 2)
        if ids_b is None:
            keep_a, keep_b = single, None
        elif budget_a is not None:
            keep_a = tf.minimum(len_a, budget_a)
            keep_b = tf.minimum(ids_b.row_lengths(), self.max_seq_length - 3 - keep_a)
        else:
            pair_a, keep_b = _truncated_pair_lengths(tf, len_a, ids_b.row_lengths(), self.max_seq_length - 3)
            keep_a = tf.where(ids_b.row_lengths() > 0, pair_a, single)
        head = lambda ids, keep: tf.ragged.boolean_mask(ids, tf.ragged.range(ids.row_lengths()) < keep[:, None])
        column = lambda value: tf.RaggedTensor.from_tensor(tf.fill([tf.shape(len_a)[0], 1], value))
        parts = [column(self.cls_id), head(ids_a, keep_a), column(self.sep_id)]
        if ids_b is not None:
            has_b = ids_b.row_lengths() > 0 if budget_a is None else tf.fill(tf.shape(len_a), True)
            parts += [head(ids_b, keep_b), tf.ragged.boolean_mask(column(self.sep_id), has_b[:, None])]
        segments = [tf.zeros_like(part) if i < 3 else tf.ones_like(part) for i, part in enumerate(parts)]
        ids = tf.concat(parts, axis=1)
        return (ids.to_tensor(self.pad_id), tf.concat(segments, axis=1).to_tensor(0),
                tf.ones_like(ids).to_tensor(0), keep_a)

    def truncated(self, ids_a, ids_b=None):
        """<bool>[B]: whether `[CLS] a [SEP] (b [SEP])` (b without tokens: laid out single) is
        longer than max_seq_length, so that the model saw its first tokens only."""
        from bertjax.runtime.tf_cpu import tf

        tokens = ids_a.row_lengths() + 2
        if ids_b is not None:
            tokens += tf.where(ids_b.row_lengths() > 0, ids_b.row_lengths() + 1, 0)
        return tokens > self.max_seq_length


@dataclasses.dataclass(frozen=True)
class ServingContext:
    """What a family's `serve` builds its graph from: `tokenizer` (`tensorflow_tokenizer`),
    `layout` (`_Layout`), `model(input_ids, segment_ids, input_mask)` (the network, float32
    outputs), the model's `task_info` and its run's config.data (`run_data`)."""

    tokenizer: Any
    layout: _Layout
    model: Callable[..., Any]
    task_info: dict
    run_data: dict


def _cpu_config(model):
    """The BertConfig the artefact computes with: the CPU form of the model's precision, whatever
    the exporting host, so that its numbers do not depend on where it was made (bfloat16:
    bfloat16 products, float32 activations)."""
    from bertjax.inference import engine

    return engine.inference_config(model.source.bert, model.precision, backend="cpu")


def _variables(model):
    """The params as tf.Variables: float32, but with bfloat16 products the encoder's dense kernels
    stored rounded (`engine.encoder_kernels_rounded`): the same numbers, half their bytes in
    the artefact, and no rounding of every kernel on every call."""
    from bertjax.inference import engine
    from bertjax.runtime.tf_cpu import tf

    return tf.nest.map_structure(tf.Variable, engine.encoder_kernels_rounded(_cpu_config(model), model.params))


def _jax_function(model):
    """The fine-tuned network as a TF function of (params, input_ids, segment_ids, input_mask),
    float32 outputs, batch (and choices) and length symbolic."""
    import jax.numpy as jnp
    from jax.experimental import jax2tf

    from bertjax.inference import engine

    network = model.family.network(_cpu_config(model), model.task_info)

    def apply(params, input_ids, segment_ids, input_mask):
        with engine.product_precision(model.precision):
            out = network.apply({"params": params}, input_ids, segment_ids, input_mask)
        return tuple(x.astype(jnp.float32) for x in out) if isinstance(out, tuple) else out.astype(jnp.float32)

    shape = "(b, c, s)" if model.family.choice_axis else "(b, s)"
    return jax2tf.convert(apply, polymorphic_shapes=[None, shape, shape, shape], with_gradient=False,
                          polymorphic_constraints=[f"s <= {model.bert.max_position_embeddings}"],
                          native_serialization_platforms=PLATFORMS)


def _serving_module(model):
    """(a tf.Module holding the tokenizer and the params as tf.Variables, the family's signature
    as a concrete function over them)."""
    from bertjax.runtime.tf_cpu import tf

    module = tf.Module()
    module.tokenizer = tensorflow_tokenizer(model.tokenizer)
    module.params = _variables(model)
    apply = _jax_function(model)
    context = ServingContext(tokenizer=module.tokenizer, layout=_Layout(model.tokenizer, model.max_seq_length),
                             model=lambda *ids: apply(module.params, *ids), task_info=model.task_info,
                             run_data=model.source.data)
    inputs = model.family.serving_inputs(model.task_info)
    specs = [tf.TensorSpec((None,) * rank, tf.string, name=name) for name, rank in inputs]

    def serve(*tensors):
        with tf.control_dependencies(_request_checks(tf, [name for name, _ in inputs], tensors)):
            tensors = [tf.identity(t) for t in tensors]
        # An empty batch runs as one blank row, cut off again: the graph's ops assume a row.
        count = tf.shape(tensors[0])[0]
        padded = [tf.cond(count > 0, lambda t=t: t,
                          lambda t=t: tf.fill(tf.concat([[1], tf.maximum(tf.shape(t)[1:], 1)], 0), ""))
                  for t in tensors]
        outputs = model.family.serve(context, dict(zip((name for name, _ in inputs), padded)))
        return {name: value[:count] for name, value in outputs.items()}

    signature = tf.function(serve, input_signature=specs, autograph=False).get_concrete_function()
    return module, signature


def _request_checks(tf, names, tensors):
    """Assertions that refuse a request (InvalidArgument) whose inputs have different numbers of
    rows (one empty batch would have answered for none of the others' rows) or hold text that
    is not UTF-8, which predict refuses too: the tokenizer's ops read such bytes as [UNK] and
    span QA's offsets then ran backwards. Each names the input and its first failing row."""
    checks = [tf.debugging.assert_equal(tf.shape(t)[0], tf.shape(tensors[0])[0],
                                        message=f"{name} has another number of rows than {names[0]}")
              for name, t in zip(names[1:], tensors[1:])]
    for name, t in zip(names, tensors):
        flat = tf.reshape(t, [-1])
        valid = tf.equal(tf.strings.unicode_transcode(flat, "UTF-8", "UTF-8", errors="replace"), flat)
        first = tf.reduce_min(tf.where(valid, tf.int64.max, tf.range(tf.size(flat, out_type=tf.int64))))
        row = first // tf.maximum(tf.size(t[:1], out_type=tf.int64), 1)  # (a row of choices: [C] strings)
        checks.append(tf.debugging.Assert(tf.reduce_all(valid), [f"{name} is not UTF-8 text in its row", row]))
    return checks


"""A fine-tuned model's predictions on raw inputs, per task family (`Model.predict`).

Inputs are featurized by the family's own code (tasks/*.featurize, with the lengths the run
trained with) and post-processed by it (SQuAD n-best and null answer, first-sub-word tags
back to words, the best real choice): prediction never copies that code.

  classification  "text", "text_a ||| text_b", (text_a, text_b) or {"text_a"/"text", "text_b"}
                  -> {"label", "probability", "probabilities": {label: p}}; regression -> {"value"}
  tagging         "a raw sentence" (split into words as BERT's basic tokenizer does: control
                  characters dropped, whitespace, punctuation and CJK characters apart; case and
                  accents kept) or a list of words
                  -> {"words", "tags", "entities": [{"type", "text", "first_word", "last_word",
                      "start", "end" (character offsets into the sentence; None for word lists)}]}
  squad           {"question", "context", "id" (optional)} -> {"id", "answer", "start", "end"
                  (character offsets into the context; -1 for no answer), "probability",
                  "null_odds" (v2.0 runs: null score minus the best span's; > threshold = no answer)}
  choice          {"context", "choices": [...]} -> {"choice" (index), "text", "probabilities"}

Bad inputs raise ValueError naming the input's position (1-based) and what was expected.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tokenizers
from tokenizers import models, normalizers, pre_tokenizers

from bertjax.inference import engine
from bertjax.evaluation import ner as ner_metrics
from bertjax.models import (BertForMultipleChoice, BertForQuestionAnswering, BertForSequenceClassification,
                            BertForTokenClassification)
from bertjax.tasks import choice, squad, tagging

FAMILIES = ("classification", "tagging", "squad", "choice")


def predict(model, inputs: Sequence[Any], **options) -> list[dict[str, Any]]:
    """Dispatches to the model's task family; options go to it (e.g. squad's n_best_size)."""
    family = _family(model)
    inputs = list(engine.not_one_string(inputs, "inputs"))
    if not inputs:
        return []
    return {"classification": _classification, "tagging": _tagging, "squad": _squad,
            "choice": _choice}[family](model, inputs, **options)


def check_input(model, item: Any) -> None:
    """Raises the ValueError `predict` would raise for this one input, less its "input N: "
    prefix, without running the model: lets a caller skip bad inputs and keep the good ones."""
    family = _family(model)
    if family == "classification":
        _check_pair(model, classification_texts(item))
    else:
        {"tagging": tagging_words, "squad": squad_input, "choice": choice_input}[family](item)


def _family(model) -> str:
    family = model.task_info.get("family")
    if family not in FAMILIES:
        raise ValueError(f"{model.source.path} is not a fine-tuned model (no task saved with it); "
                         f"{no_task_advice(model.heads)}")
    return family


def no_task_advice(heads: tuple[str, ...]) -> str:
    """What a model without a task can do, by the heads it has."""
    if "mlm" in heads:
        return "use fill_mask (it has a masked-LM head) or features, or fine-tune it first"
    return "it has no masked-LM head for fill_mask: use features, or fine-tune it first"


def task_module(model):
    """The fine-tuned model's network for its task family: the encoder and the task head."""
    family, names = model.task_info["family"], model.task_info.get("label_names")
    if family == "classification":
        return BertForSequenceClassification(model.bert, num_labels=1 if names is None else len(names))
    if family == "tagging":
        return BertForTokenClassification(model.bert, num_labels=len(names))
    return {"squad": BertForQuestionAnswering, "choice": BertForMultipleChoice}[family](model.bert)


def _at(position: int, validate, item: Any) -> Any:
    """validate(item) for the input at `position` (1-based), which its ValueError names."""
    try:
        return validate(item)
    except ValueError as e:
        raise ValueError(f"input {position}: {e}"[:300]) from None  # 300 characters at most


def _apply(module, outputs):
    """apply(params, batch) running `module` on a batch's BERT inputs; outputs(result) -> dict."""
    def apply(params, batch):
        result = module.apply({"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"])
        return outputs(result)

    return apply


# -- Classification and regression. --

def classification_texts(item: Any) -> tuple[str, str | None]:
    """One classification input -> (text_a, text_b or None)."""
    pair = None
    if isinstance(item, str):
        pair = engine.split_pair(item)
    elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str) and isinstance(
            item[1], (str, type(None))):
        pair = item[0], item[1]
    elif isinstance(item, dict):
        text_a = item.get("text_a", item.get("text"))
        if isinstance(text_a, str) and isinstance(item.get("text_b"), (str, type(None))):
            pair = text_a, item.get("text_b")
    if pair is not None and pair[1] is not None and not (pair[0].strip() and pair[1].strip()):
        raise ValueError(f"the {'first' if not pair[0].strip() else 'second'} text of the pair is empty")
    if pair is not None:
        return pair
    raise ValueError(f"expected a text, 'text_a ||| text_b', a (text_a, text_b) pair or {{'text_a', 'text_b'}}, "
                     f"got {item!r}"[:300])


def _check_pair(model, pair: tuple[str, str | None]) -> None:
    """A pair for a model trained on pairs, a single text for one trained on single texts."""
    wants_pairs = model.task_info.get("pairs")
    if wants_pairs is not None and (pair[1] is not None) != wants_pairs:
        raise ValueError(f"the model was trained on {'pairs' if wants_pairs else 'single texts'}; "
                         + ("give 'text_a ||| text_b'" if wants_pairs else "give one text (no ' ||| ')"))


def _classification(model, inputs: list, **options) -> list[dict[str, Any]]:
    if options:
        raise ValueError(f"unknown options {sorted(options)} for classification")
    names = model.task_info.get("label_names")
    pairs = [_at(i, classification_texts, item) for i, item in enumerate(inputs, start=1)]
    for i, pair in enumerate(pairs, start=1):
        _at(i, lambda checked: _check_pair(model, checked), pair)
    split, _ = model._encode_mixed(pairs)
    module = task_module(model)
    logits = model.run(f"classify:{module.num_labels}",
                       _apply(module, lambda x: {"logits": x.astype(jnp.float32)}), split)["logits"]
    if names is None:
        return [{"value": float(row[0])} for row in logits]
    probabilities = np.asarray(jax.nn.softmax(logits, -1))
    results = []
    for row in probabilities:
        best = int(row.argmax())
        results.append({"label": names[best], "probability": float(row[best]),
                        "probabilities": {name: float(p) for name, p in zip(names, row)}})
    return results


# -- Tagging. --

def _word_splitter() -> tokenizers.Tokenizer:
    """BERT's basic split as a `tokenizers` pipeline whose offsets point into the original text:
    the normaliser drops control characters and puts CJK characters apart (case and accents
    kept), the pre-tokenizer splits whitespace and punctuation, each piece is one "token"."""
    splitter = tokenizers.Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    splitter.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                     strip_accents=False, lowercase=False)
    splitter.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return splitter


_WORDS = _word_splitter()


def tagging_words(item: Any) -> tuple[list[str], list[tuple[int, int]] | None]:
    """A raw sentence -> (words as written, their character spans); a list of words -> (words, None)."""
    if isinstance(item, str):
        try:
            spans = [tuple(span) for span in _WORDS.encode(item, add_special_tokens=False).offsets]
        except TypeError:  # what `tokenizers` raises for a str that UTF-8 cannot hold
            raise ValueError(f"not valid Unicode (a lone surrogate?): {item[:80]!r}") from None
        return [item[start:end] for start, end in spans], spans
    if isinstance(item, (list, tuple)) and all(isinstance(word, str) and word for word in item):
        return list(item), None
    raise ValueError(f"expected a sentence or a list of non-empty words, got {item!r}"[:300])


def _tagging(model, inputs: list, **options) -> list[dict[str, Any]]:
    if options:
        raise ValueError(f"unknown options {sorted(options)} for tagging")
    names = model.task_info["label_names"]
    parsed = [_at(i, tagging_words, item) for i, item in enumerate(inputs, start=1)]
    examples = tagging.TaggingExamples("inputs", [words for words, _ in parsed], None, list(names),
                                       [f"input {i}" for i in range(1, len(parsed) + 1)])
    split = tagging.featurize(model.tokenizer, examples, "inputs", model.max_seq_length)
    predicted = model.run(f"tag:{len(names)}", _apply(task_module(model), lambda x: {"token_logits": x.argmax(-1)}),
                          split, sequence_outputs=("token_logits",))["token_logits"]
    tags = tagging.predictions_to_tags(split, predicted) if any(words for words, _ in parsed) else [
        [] for _ in parsed]
    results = []
    for index, ((words, spans), sentence_tags) in enumerate(zip(parsed, tags)):
        entities = []
        for type_, first, end in ner_metrics.extract_entities(sentence_tags, index):
            start_char = spans[first][0] if spans else None
            end_char = spans[end - 1][1] if spans else None
            text = inputs[index][start_char:end_char] if spans else " ".join(words[first:end])
            entities.append({"type": type_, "text": text, "first_word": first, "last_word": end - 1,
                             "start": start_char, "end": end_char})
        results.append({"words": words, "tags": sentence_tags, "entities": entities})
    return results


# -- Span QA. --

def squad_input(item: Any) -> None:
    """A {"question", "context"} dict with neither empty, else a ValueError."""
    if not (isinstance(item, dict) and isinstance(item.get("question"), str)
            and isinstance(item.get("context"), str)):
        raise ValueError(f"expected {{'question': text, 'context': text}}, got {item!r}"[:300])
    if not item["question"].strip() or not item["context"].strip():
        raise ValueError(f"an empty {'question' if not item['question'].strip() else 'context'}")


def _squad(model, inputs: list, n_best_size: int | None = None, max_answer_length: int | None = None,
           null_score_diff_threshold: float | None = None) -> list[dict[str, Any]]:
    run = squad.settings(model.source.data)
    builder = squad._Builder("inputs", strict=True)
    for i, item in enumerate(inputs, start=1):
        _at(i, squad_input, item)
        builder.add(str(item.get("id", i)), item["question"], item["context"], [], False)
    version = model.task_info.get("squad_version", "v1.1")
    examples = builder.build(version, data=[])
    split = squad.featurize(model.tokenizer, examples, "inputs", is_training=False,
                            max_seq_length=model.max_seq_length, doc_stride=int(run["doc_stride"]),
                            max_query_length=int(run["max_query_length"]))
    outputs = model.run("squad", _apply(task_module(model), lambda x: {"start_logits": x[0].astype(jnp.float32),
                                                                       "end_logits": x[1].astype(jnp.float32)}),
                        split, sequence_outputs=("start_logits", "end_logits"))
    answers, nbest, null_odds = squad.postprocess(
        split, outputs["start_logits"], outputs["end_logits"],
        n_best_size=n_best_size or int(run["n_best_size"]),
        max_answer_length=max_answer_length or int(run["max_answer_length"]),
        null_score_diff_threshold=(run["null_score_diff_threshold"] if null_score_diff_threshold is None
                                   else null_score_diff_threshold))
    results = []
    for qid in examples.ids:
        answer = answers[qid]
        best = next((entry for entry in nbest[qid] if entry["text"] == answer), nbest[qid][0])
        start, end = (best["start"], best["end"]) if answer else (-1, -1)
        result = {"id": qid, "answer": answer, "start": start, "end": end, "probability": best["probability"]}
        if null_odds is not None:
            result["null_odds"] = null_odds[qid]
        results.append(result)
    return results


# -- Multiple choice. --

def choice_input(item: Any) -> None:
    """A {"context", "choices": [at least 2 texts]} dict, else a ValueError."""
    choices = item.get("choices") if isinstance(item, dict) else None
    if not (isinstance(item, dict) and isinstance(item.get("context"), str) and isinstance(choices, list)
            and len(choices) >= 2 and all(isinstance(c, str) for c in choices)):
        raise ValueError(f"expected {{'context': text, 'choices': [at least 2 texts]}}, got {item!r}"[:300])


def _choice(model, inputs: list, **options) -> list[dict[str, Any]]:
    if options:
        raise ValueError(f"unknown options {sorted(options)} for multiple choice")
    contexts, options_lists = [], []
    for i, item in enumerate(inputs, start=1):
        _at(i, choice_input, item)
        contexts.append(item["context"]), options_lists.append(item["choices"])
    examples = choice.ChoiceExamples("inputs", contexts, options_lists, np.full(len(contexts), -1, np.int64),
                                     [f"input {i}" for i in range(1, len(contexts) + 1)])
    split = choice.featurize(model.tokenizer, examples, "inputs", model.max_seq_length)
    scores = model.run(f"choice:{split.features['input_ids'].shape[1]}",
                       _apply(task_module(model), lambda x: {"scores": x.astype(jnp.float32)}), split)["scores"]
    best = choice.predict(split, scores)
    results = []
    for i, options_list in enumerate(options_lists):
        probabilities = np.asarray(jax.nn.softmax(scores[i, :len(options_list)]))
        results.append({"choice": int(best[i]), "text": options_list[int(best[i])],
                        "probabilities": [float(p) for p in probabilities]})
    return results

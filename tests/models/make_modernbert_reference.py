"""Writes tests/models/hf_modernbert/: tiny randomly initialised Hugging Face ModernBERT models
and their outputs, the reference for bertjax's modern encoder (tests/models/test_modernbert.py).

The test suite must not need PyTorch, so this runs once in a separate environment
(as make_hf_reference.py)::

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0          # the CPU wheel, first
    /tmp/refvenv/bin/pip install transformers tokenizers safetensors numpy
    /tmp/refvenv/bin/python tests/models/make_modernbert_reference.py

Written, each model saved by transformers' own `save_pretrained` (config.json + model.safetensors)
with a byte-level BPE `tokenizer.json` in ModernBERT's form ([CLS] $A [SEP] template, its special
tokens) trained on a few sentences:
  masked_lm/    ModernBertForMaskedLM (4 layers of 32, window 16: global, local, local, global)
  classifier/   ModernBertForSequenceClassification, 3 labels, mean pooling
  token_classifier/    ModernBertForTokenClassification, 5 labels
  question_answering/  ModernBertForQuestionAnswering
  reference.npz for inputs `{short,long}_input_ids`, `{short,long}_attention_mask` <int32>[2, S]
                (S = 12, inside the window, and 40, beyond it; the second row padded):
                `{short,long}_hidden_states` [5, 2, S, 32] (embeddings, then each layer, the last
                after the final norm), `{short,long}_mlm_logits` [2, S, V],
                `{short,long}_class_logits` [2, 3], `{short,long}_token_logits` [2, S, 5],
                `{short,long}_start_logits` and `_end_logits` [2, S], and `versions`.
"""

import os

import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_modernbert")
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
TEXT = ["The quick brown fox jumps over the lazy dog.", "Encoders read text in both directions at once.",
        "A modern encoder rotates its queries and keys.", "Local layers see a window; global layers see all."] * 20


def tokenizer() -> tokenizers.Tokenizer:
    """A byte-level BPE shaped like ModernBERT's (NFC, GPT-2 split, no prefix space)."""
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    cls, sep = bpe.token_to_id("[CLS]"), bpe.token_to_id("[SEP]")
    bpe.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return bpe


def perturb(*models) -> None:
    """Norms and biases away from their initial 1 and 0, so that a missed one shows."""
    with torch.no_grad():
        for model in models:
            for name, param in model.named_parameters():
                if "norm" in name or name.endswith("bias"):
                    param.add_(torch.randn_like(param) * 0.1)


def main():
    torch.manual_seed(0)
    bpe = tokenizer()
    ids = {name: bpe.token_to_id(name) for name in SPECIALS}
    config = transformers.ModernBertConfig(
        vocab_size=bpe.get_vocab_size(), hidden_size=32, intermediate_size=48, num_hidden_layers=4,
        num_attention_heads=4, max_position_embeddings=256, local_attention=16, global_attn_every_n_layers=3,
        global_rope_theta=160000.0, local_rope_theta=10000.0, pad_token_id=ids["[PAD]"], cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"], bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"], attn_implementation="eager",
        initializer_range=0.2)  # 10x the default: each layer changes the hidden states by O(1), so that a
    # wrong rotation base or activation shows far above the test's tolerance (at 0.02 the four layers
    # together moved them by 0.005, and swapping the two RoPE bases by 2e-5)
    masked_lm = transformers.ModernBertForMaskedLM(config).eval()
    classifier = transformers.ModernBertForSequenceClassification(
        transformers.ModernBertConfig(**{**config.to_dict(), "num_labels": 3, "classifier_pooling": "mean"})).eval()
    perturb(masked_lm, classifier)
    # Made after the first two are final, so that adding them left those (and their outputs) as they were.
    token_classifier = transformers.ModernBertForTokenClassification(
        transformers.ModernBertConfig(**{**config.to_dict(), "num_labels": 5})).eval()
    question_answering = transformers.ModernBertForQuestionAnswering(config).eval()
    perturb(token_classifier, question_answering)
    reference = {"versions": np.array(f"torch {torch.__version__}, transformers {transformers.__version__}")}
    rng = np.random.default_rng(0)
    for name, length in (("short", 12), ("long", 40)):
        input_ids = rng.integers(len(SPECIALS), config.vocab_size, (2, length)).astype(np.int32)
        input_ids[:, 0] = ids["[CLS]"]
        mask = np.ones((2, length), np.int32)
        mask[1, length * 2 // 3:] = 0
        input_ids[1, length * 2 // 3:] = ids["[PAD]"]
        inputs = {"input_ids": torch.tensor(input_ids, dtype=torch.long), "attention_mask": torch.tensor(mask)}
        with torch.no_grad():
            out = masked_lm(**inputs, output_hidden_states=True)
            reference[f"{name}_class_logits"] = classifier(**inputs).logits.numpy()
            reference[f"{name}_token_logits"] = token_classifier(**inputs).logits.numpy()
            spans = question_answering(**inputs)
            reference[f"{name}_start_logits"] = spans.start_logits.numpy()
            reference[f"{name}_end_logits"] = spans.end_logits.numpy()
        reference.update({f"{name}_input_ids": input_ids, f"{name}_attention_mask": mask,
                          f"{name}_hidden_states": torch.stack(out.hidden_states).numpy(),
                          f"{name}_mlm_logits": out.logits.numpy()})
    for folder, model in (("masked_lm", masked_lm), ("classifier", classifier),
                          ("token_classifier", token_classifier), ("question_answering", question_answering)):
        model.save_pretrained(os.path.join(OUT, folder))
        bpe.save(os.path.join(OUT, folder, "tokenizer.json"))
    np.savez_compressed(os.path.join(OUT, "reference.npz"), **reference)
    print("wrote", OUT, reference["versions"])


if __name__ == "__main__":
    main()

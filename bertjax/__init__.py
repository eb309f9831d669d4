"""bertjax: pre-train and fine-tune BERT in JAX/Flax.

Kept light: submodules (and TensorFlow, JAX) load only when used.
"""


def load_pretrained(path):
    """Any model path (Hugging Face, Google TF release, a bertjax run or checkpoint) -> (BertConfig,
    params), read from the weights bertjax.inference.model_source.resolve picks (a fine-tuning workdir: its
    result in best/; a pre-training run: its newest step).

    params: {"bert": encoder tree, <heads present>}, numpy float32, unrolled layout.
    See bertjax.models.convert for the layouts and the strictness rules.
    """
    from bertjax.models.convert import load_pretrained as load
    from bertjax.inference.model_source import resolve

    return load(resolve(path).weights)


def load_model(path, **options):
    """Any model path (a bertjax run, a Hugging Face directory, Google's TF release) -> an
    inference.Model: `predict`, `fill_mask`, `features` on raw text. Options: see
    bertjax.inference.engine.load_model."""
    from bertjax.inference.engine import load_model as load

    return load(path, **options)

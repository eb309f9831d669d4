"""TensorFlow for input pipelines only: `from bertjax.runtime.tf_cpu import tf`.

Importing `tf` from here hides every GPU from TensorFlow first, so it never takes
accelerator memory from JAX. Every bertjax module that uses TensorFlow imports it this way.
Unless the environment says otherwise, TensorFlow's C++ start-up notices are off: its
INFO/WARNING logs, and the oneDNN notice (oneDNN's float kernels are off too, which
changes nothing here: the input pipelines do integer work).
"""

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import tensorflow as tf  # noqa: E402

try:
    tf.config.set_visible_devices([], "GPU")
except RuntimeError:  # TF's devices were already initialised by someone else; too late to hide.
    if tf.config.list_physical_devices("GPU"):
        import logging

        logging.getLogger(__name__).warning("TensorFlow was set up before bertjax.runtime.tf_cpu: it sees the GPUs, "
                                            "and may take their memory from JAX")


def datasets():
    """tensorflow_datasets, with TensorFlow set up here first: TFDS imports TensorFlow itself
    (when a builder first reads), past the settings above."""
    import tensorflow_datasets

    return tensorflow_datasets


def no_autograph(function):
    """`function` for tf.data's map, flat_map and reduce, traced as written: bertjax's input
    functions use TensorFlow's control flow ops themselves, and AutoGraph's rewriting of their
    source took seconds each time a pipeline was built."""
    return tf.autograph.experimental.do_not_convert(function)


def op_error_reason(error: "tf.errors.OpError") -> str:
    """What went wrong in a TensorFlow op's error: a save's "PATH.tempstate123; File too large
    [Op:SaveV2]" -> "File too large", without the graph's trace that its message begins with
    ("Graph execution error: Detected at node ..."), the temporary file's name or the op's."""
    trace = ("[[", "File ", "Detected at", "Node:", "Graph execution")
    lines = [line.strip() for line in error.message.splitlines() if line.strip() and not line.strip().startswith(trace)]
    reason = lines[-1].rsplit("; ", 1)[-1] if lines else error.message.strip()
    return re.sub(r"\s*\[Op:\w+\].*$", "", reason)

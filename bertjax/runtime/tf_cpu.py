"""TensorFlow for input pipelines only: `from bertjax.runtime.tf_cpu import tf`.

Importing `tf` from here hides every GPU from TensorFlow first, so it never takes
accelerator memory from JAX. Every bertjax module that uses TensorFlow imports it this way.
Unless the environment says otherwise, TensorFlow's C++ start-up notices are off: its
INFO/WARNING logs, and the oneDNN notice (oneDNN's float kernels are off too, which
changes nothing here: the input pipelines do integer work).
"""

import errno
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

        from bertjax.runtime.console import PROCESS_SPECIFIC

        logging.getLogger(__name__).warning("TensorFlow was set up before bertjax.runtime.tf_cpu: it sees the GPUs, "
                                            "and may take their memory from JAX", extra=PROCESS_SPECIFIC)


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



def disk_error(error: "tf.errors.OpError", folder: str) -> OSError | None:
    """The OSError a TensorFlow op's error stands for when it is the disk's refusal to write a
    file under `folder` (full, too large a file, not permitted: errno as `fileio.DISK_ERRNOS`),
    its reason without the graph's trace ("Graph execution error: Detected at node ...") or the
    file's temporary name; None for any other error (a tracing or program error)."""
    number = {"ResourceExhaustedError": errno.ENOSPC, "OutOfRangeError": errno.EFBIG,
              "PermissionDeniedError": errno.EACCES}.get(type(error).__name__)
    line = next((line for line in error.message.splitlines() if folder in line), None)
    if number is None or line is None:
        return None
    reason = re.sub(r"\s*\[Op:\w+\].*$", "", line.rsplit("; ", 1)[-1]).strip()  # (PATH; reason [Op:SaveV2])
    return OSError(number, reason or os.strerror(number))

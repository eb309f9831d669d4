"""TensorFlow for input pipelines only: `from bertjax.tf_cpu import tf`.

Importing `tf` from here hides every GPU from TensorFlow first, so it never takes
accelerator memory from JAX. Every bertjax module that uses TensorFlow imports it this way.
"""

import tensorflow as tf

try:
    tf.config.set_visible_devices([], "GPU")
except RuntimeError:  # TF's devices were already initialised by someone else; too late to hide.
    pass

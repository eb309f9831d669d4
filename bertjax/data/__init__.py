"""Input data: corpus sources, prepare (text -> shards), the pre-training pipeline, tasks.

TensorFlow serves only as the input pipeline: importing this package hides every GPU
from it, once, so it never takes accelerator memory from JAX.
"""

import tensorflow as tf

try:
    tf.config.set_visible_devices([], "GPU")
except RuntimeError:  # TF's devices were already initialised by someone else; too late to hide.
    pass

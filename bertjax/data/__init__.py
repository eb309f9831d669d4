"""Pre-training input: corpus sources, prepare (text -> shards), the online pipelines.

TensorFlow serves only as the input pipeline and is imported through `bertjax.runtime.tf_cpu`,
which hides every GPU from it. Importing this package (or its TF-free modules: sources,
shards' writer, prepare) does not load TensorFlow.
"""

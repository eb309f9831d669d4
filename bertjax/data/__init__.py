"""Input data: corpus sources, prepare (text -> shards), the pre-training pipeline, tasks.

TensorFlow serves only as the input pipeline and is imported through
`bertjax.data.cpu_tensorflow`, which hides every GPU from it. Importing this package (or
its TF-free modules: files, sources, shards' writer, prepare) does not load TensorFlow.
"""

"""Official metrics (GLUE, SQuAD, CoNLL NER), in numpy: no JAX; TensorFlow only to read a gs://
file (bertjax.runtime.fileio)."""

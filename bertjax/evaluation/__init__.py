"""Official metrics (GLUE, SQuAD, CoNLL NER), in numpy: no JAX, no TensorFlow."""

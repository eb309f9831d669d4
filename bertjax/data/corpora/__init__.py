"""Corpora that ship with bertjax: the generated demo corpus and Python's own documentation as real prose."""

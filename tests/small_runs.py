"""What the session's small runs are made of (tests/conftest.py's fixtures), importable by the
tests that check them (a module of its own: `conftest` is not a unique module name)."""

# A one-layer model of the tiny preset's family: seconds per run on a CPU.
SMALL_MODEL = dict(preset="tiny", num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128)
# Four reviews, two labels: what `minilm_classifier_run` learns.
REVIEWS = [("the movie was great fun", "good"), ("a dull and boring film", "bad"),
           ("i loved every minute", "good"), ("terrible acting and an awful plot", "bad")]

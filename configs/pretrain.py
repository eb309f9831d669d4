r"""Pre-training configs: BERT masked LM + next-sentence prediction.

Run (tiny preset on the embedded demo corpus, CPU minutes):
  python launch/pretrain.py --config=configs/pretrain.py:tiny --workdir=/tmp/bert_tiny

Other presets: `mini`, `small`, `medium`, `base`, `large`; any config value can be
overridden, e.g. `--config.train.num_steps=1000 --config.data.max_seq_length=512`.
The argument may add options after the preset, comma separated:
  configs/pretrain.py:base,phase2   second phase of the original recipe (length 512)
"""

import ml_collections

# Original recipe (BERT_REFERENCE.md): batch 256, 1M steps, lr 1e-4, 10k warmup.
_TRAIN_DEFAULTS = dict(global_batch_size=256, num_steps=1_000_000, learning_rate=1e-4, warmup_steps=10_000)
_TINY_TRAIN = dict(global_batch_size=32, num_steps=2_000, learning_rate=1e-3, warmup_steps=100)


def get_config(arg: str = "tiny") -> ml_collections.ConfigDict:
    preset, *options = arg.split(",")
    config = ml_collections.ConfigDict()
    config.seed = 42

    # -- Model: a BertConfig preset plus overrides (any BertConfig field). --
    config.model = ml_collections.ConfigDict()
    config.model.preset = preset
    config.model.overrides = ml_collections.ConfigDict(dict(dtype="float32"))

    # -- Data: source -> tokenizer -> prepared shards -> online NSP pairing + masking. --
    config.data = ml_collections.ConfigDict()
    config.data.source = "demo"          # demo | text | tfds | prepared | original_tfrecord
    config.data.input_pattern = ""       # comma-separated globs (text files, shards or original TFRecords)
    config.data.tfds_name = ""           # e.g. "wikipedia/20230601.en"
    config.data.tfds_split = "train"
    config.data.tfds_text_feature = "text"
    config.data.tfds_data_dir = ""      # "" -> TFDS's default (~/tensorflow_datasets or $TFDS_DATA_DIR)
    config.data.prepared_dir = ""        # "" -> <workdir>/data
    config.data.tokenizer = "wordpiece"  # wordpiece | sentencepiece
    config.data.vocab_path = ""          # "" -> the demo corpus vocabulary
    config.data.do_lower_case = True
    config.data.max_seq_length = 128
    config.data.max_predictions_per_seq = 20
    config.data.masked_lm_prob = 0.15
    config.data.short_seq_prob = 0.1
    config.data.next_sentence_prediction = True
    config.data.whole_word_mask = False
    config.data.eval_fraction = 0.02     # share of documents held out for evaluation
    config.data.eval_input_pattern = ""  # original_tfrecord only: held-out records (globs)
    config.data.shuffle_buffer = 10_000           # documents
    config.data.instance_shuffle_buffer = 10_000  # sequences (one document gives several)
    config.data.seed = 12345

    # -- Training. --
    config.train = ml_collections.ConfigDict(_TINY_TRAIN if preset == "tiny" else _TRAIN_DEFAULTS)

    if "phase2" in options:
        config.data.max_seq_length = 512
        config.data.max_predictions_per_seq = 80
    unknown = set(options) - {"phase2"}
    if unknown:
        raise ValueError(f"configs/pretrain.py: unknown options {sorted(unknown)} in {arg!r}")
    return config

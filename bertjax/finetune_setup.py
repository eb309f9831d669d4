"""What a fine-tuning run is before its loop (bertjax/finetune.py): the checkpoint and tokenizer it
starts from (a resumed run's own when its init_checkpoint is gone; never another vocabulary than
the one it trained with), its model config, every config value checked before any data is read
or anything compiled, and its schedule resolved from the epochs over the data."""

from __future__ import annotations

import logging
import math
import os
import re
import tempfile

import jax
import ml_collections

from bertjax import optim, run_config, sharding, tasks, tokenization
from bertjax.inference import model_source
from bertjax.tasks import common
from bertjax.models import BertConfig
from bertjax.models import config as bert_config
from bertjax.runtime import fileio
from bertjax.runtime.console import PROCESS_SPECIFIC
from bertjax.runtime.errors import RunSettingsError
from bertjax.tasks import batching
from bertjax.tasks.common import check_int

log = logging.getLogger(__name__)

def checkpoint_source(config: ml_collections.ConfigDict, workdir: str | None = None
                      ) -> model_source.ModelSource | None:
    """config.init_checkpoint resolved (None: from scratch); errors name the key. A run that
    resumes (`workdir` has checkpoints) needs none of its weights: when it is gone (a local
    disk of a recreated VM), the run's own checkpoints give the model and the tokenizer."""
    if not config.init_checkpoint:
        return None
    try:
        return model_source.resolve(config.init_checkpoint)
    except (OSError, ValueError, *fileio.remote_errors()) as e:
        own = run_config.own_checkpoints(workdir) if workdir else None
        if own is None:
            raise ValueError(f"config.init_checkpoint={config.init_checkpoint}: {e}") from None
        log.warning("config.init_checkpoint=%s cannot be read (%s); resuming from %s, with the run's own model "
                    "config and tokenizer", config.init_checkpoint, e, own, extra=PROCESS_SPECIFIC)
        return model_source.resolve(own)


def check_reused_head(source: model_source.ModelSource, task_info: dict) -> None:
    """ValueError when config.reuse_head would take a head trained for another task family, as
    a regression head for a classifier or the reverse, or on other labels, or on the same ones
    in another order: each of its rows would answer another label, silently (a regression head
    and a multiple-choice scorer are both one output a row, so their shapes agree)."""
    def kind(info: dict) -> str | None:
        family = tasks.FAMILIES.get(info.get("family"))
        return family and family.head_kind(info)

    if kind(source.task_info) and kind(task_info) and kind(source.task_info) != kind(task_info):
        raise ValueError(f"config.reuse_head: {source.path}'s head is a {kind(source.task_info)} head, this run's "
                         f"task ({task_info['family']}) needs a {kind(task_info)} one; fine-tune a new head "
                         "(config.reuse_head=False)")
    theirs, ours = source.task_info.get("label_names"), task_info.get("label_names")
    if theirs is None or ours is None or list(theirs) == list(ours):
        return
    if all(re.fullmatch(r"LABEL_\d+", name) for name in theirs):  # a Hugging Face head that names no label
        if len(theirs) != len(ours):  # (else a shape mismatch deep in the restore)
            raise ValueError(f"config.reuse_head: {source.path}'s head answers {len(theirs)} labels, this run's task "
                             f"has {len(ours)} ({', '.join(ours)}); fine-tune a new head (config.reuse_head=False)")
        logging.warning("config.reuse_head: %s's head names its labels %s only; its row k answers this run's "
                        "label k (%s)%s", source.path, list(theirs), list(ours),
                        _ORIGINAL_MNLI_NOTE if source.layout == "tf" and sorted(ours) == sorted(
                            _ORIGINAL_MNLI_ORDER) and list(ours) != list(_ORIGINAL_MNLI_ORDER) else "")
        return
    same = sorted(theirs) == sorted(ours)
    raise ValueError(f"config.reuse_head: {source.path}'s head answers the labels {list(theirs)}"
                     + (f" in this order, this run's are {list(ours)}: give config.data.label_names="
                        f"{','.join(theirs)!r} (your own files; a dataset's order is its own)" if same else
                        f", this run's are {list(ours)}") + ", or fine-tune a new head (config.reuse_head=False)")


# run_classifier.py's MnliProcessor orders the labels otherwise than TFDS's glue/mnli.
_ORIGINAL_MNLI_ORDER = ("contradiction", "entailment", "neutral")
_ORIGINAL_MNLI_NOTE = (f"; Google's run_classifier.py trains MNLI's rows as {', '.join(_ORIGINAL_MNLI_ORDER)}: a "
                       "head it fine-tuned would answer this run's labels in another order (config.reuse_head=False "
                       "fine-tunes a new one)")


def load_tokenizer(config: ml_collections.ConfigDict,
                   source: model_source.ModelSource | None = None) -> tokenization.Tokenizer:
    """config.data.vocab_path if set, else the tokenizer that comes with the checkpoint
    (`source`), else (from scratch) the demo vocabulary for the demo task; a
    config.data.do_lower_case it cannot apply is refused (`check_casing_setting`)."""
    tokenizer = _configured_tokenizer(config, source)
    tokenization.check_casing_setting(tokenizer, config.data.do_lower_case)
    return tokenizer


def _configured_tokenizer(config: ml_collections.ConfigDict,
                          source: model_source.ModelSource | None) -> tokenization.Tokenizer:
    """`load_tokenizer`'s tokenizer, before its casing check."""
    from bertjax.data.corpora import demo_corpus

    data = config.data
    if source is not None and (data.vocab_path or source.tokenizer_spec):
        try:
            return source.load_tokenizer(data.vocab_path, data.tokenizer, data.do_lower_case,
                                         casing_setting="config.data.do_lower_case")
        except (ValueError, OSError) as e:  # (a file that is not there: FileNotFoundError)
            key = (f"config.data.vocab_path={data.vocab_path}" if data.vocab_path else
                   f"config.init_checkpoint={config.init_checkpoint}")
            raise ValueError(f"{key}: {e}") from None
    if data.vocab_path:  # do_lower_case None: a tokenizer.json's own casing, else a vocab.txt's tokens show it
        try:
            return tokenization.load_tokenizer(data.tokenizer, data.vocab_path, data.do_lower_case)
        except OSError as e:
            raise ValueError(f"config.data.vocab_path={data.vocab_path}: {e}") from None
    if source is not None:
        raise ValueError(f"config.init_checkpoint={config.init_checkpoint} comes with no vocabulary "
                         "(vocab.txt, tokenizer.json); "
                         "set config.data.vocab_path")
    if config.task == "demo":
        # Written to the temporary folder, not the workdir (a run refused by a later check
        # writes nothing there); save_tokenizer copies it into the workdir once the run starts.
        return tokenization.Tokenizer.from_vocab_file(demo_corpus.demo_vocab_path(tempfile.gettempdir()))
    raise ValueError("training from scratch (no config.init_checkpoint) needs config.data.vocab_path")


def _same_head_setting(checkpoint: BertConfig, name: str, value) -> bool:
    """Whether a head field set to `value` is the head `checkpoint` trained: the same layers
    however written ("-1, -2", "12,11" on 12 layers), any LSTM size for a linear head."""
    if name == "lstm_hidden_size" and checkpoint.tagging_head == "linear":
        return True
    if name != "feature_layers":
        return value == getattr(checkpoint, name)
    try:
        return checkpoint.replace(feature_layers=value).feature_layer_indices == checkpoint.feature_layer_indices
    except ValueError:  # (not layers at all: said as other than the checkpoint's)
        return False


def model_config(config: ml_collections.ConfigDict, checkpoint: BertConfig | None, vocab_size: int) -> BertConfig:
    """`config.model` (None = unset) over the checkpoint's architecture, or the preset's."""
    fields = dict(config.model)
    if checkpoint is not None and not model_source.table_fits(checkpoint.vocab_size, vocab_size):
        raise ValueError(f"config.init_checkpoint={config.init_checkpoint} has a vocabulary of {checkpoint.vocab_size} "
                         f"tokens but the tokenizer has {vocab_size} (config.data.vocab_path)")
    if checkpoint is None and fields.get("vocab_size") is None:
        fields["vocab_size"] = vocab_size
    if checkpoint is not None and config.reuse_head:  # the head as it was trained, or it reads other features
        for name in bert_config.HEAD_FIELDS:
            theirs = getattr(checkpoint, name)
            if fields.get(name) is None:
                fields[name] = theirs
            elif not _same_head_setting(checkpoint, name, fields[name]):
                raise ValueError(f"config.model.{name}={fields[name]!r}: config.reuse_head takes "
                                 f"{config.init_checkpoint}'s head, which has {name}={theirs!r}; leave it unset, or "
                                 "fine-tune a new head (config.reuse_head=False)")
    preset = config.model.preset
    if checkpoint is not None and preset:  # the checkpoint sizes the model: say so when the preset differs
        sized = BertConfig.preset(preset)
        differs = [name for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
                   if getattr(sized, name) != getattr(checkpoint, name)]
        if differs:
            log.warning(
                "config.model.preset=%r is not used: config.init_checkpoint sizes the model (%s %d, not the preset's "
                "%d)", preset, differs[0], getattr(checkpoint, differs[0]), getattr(sized, differs[0]))
    return bert_config.resolve(fields, checkpoint=checkpoint, preset=config.model.preset,
                               **bert_config.this_host())


def from_scratch(config: ml_collections.ConfigDict, checkpoint_dir: str) -> ml_collections.ConfigDict:
    """`config` fine-tuning the model of `checkpoint_dir` from random weights: its architecture,
    dropout and tokenizer (what config.model sets stays), no init_checkpoint. The baseline a
    pre-trained model is measured against (launch/demo.py)."""
    from bertjax.models import convert

    scratch = config.copy_and_resolve_references()
    pretrained = convert.pretrained_config(checkpoint_dir)
    taken = {name: value for name, value in bert_config.checkpoint_fields(pretrained).items()
             if name not in bert_config.idle_fields(pretrained)}  # (set, they would be refused)
    vocabulary = convert.checkpoint_vocabulary(checkpoint_dir)
    with scratch.unlocked():
        scratch.init_checkpoint = ""
        scratch.model.update({name: value for name, value in taken.items() if scratch.model.get(name) is None})
        scratch.data.update(tokenizer=vocabulary["kind"], vocab_path=vocabulary["path"],
                            do_lower_case=vocabulary["do_lower_case"])
    return scratch


def check_train_values(train: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first config.train value out of range (no model or
    devices needed: launch/demo.py checks its fine-tuning config before pre-training)."""
    for key in ("batch_size", "grad_accum_steps", "log_every", "max_consecutive_bad_steps"):
        if not isinstance(train[key], int) or isinstance(train[key], bool) or train[key] < 1:
            raise ValueError(f"config.train.{key} must be a positive int, got {train[key]!r}")
    for key in ("num_steps", "eval_every", "eval_batch_size"):
        if not isinstance(train[key], int) or train[key] < 0:
            raise ValueError(f"config.train.{key} must be an int >= 0, got {train[key]!r}")
    # (where num_steps overrides it too: it is saved with the run, and a relaunch compares it)
    if not (isinstance(train.num_epochs, (int, float)) and 0 < train.num_epochs < math.inf):
        raise ValueError(f"config.train.num_epochs must be > 0, got {train.num_epochs!r}")
    if not 0.0 <= train.warmup_proportion <= 1.0:  # (NaN fails this too)
        raise ValueError(f"config.train.warmup_proportion must be in [0, 1], got {train.warmup_proportion}")
    # Fine-tuning sets warmup_steps from warmup_proportion: the schedules' warmup limits in its terms.
    if train.get("schedule") == "inverse_sqrt" and not train.warmup_proportion:
        raise ValueError("config.train.warmup_proportion must be > 0 for the 'inverse_sqrt' schedule")
    decay = train.get("decay_fraction", 0.1)
    if train.get("schedule") == "wsd" and isinstance(decay, (int, float)) and train.warmup_proportion > 1 - decay:
        raise ValueError(f"config.train.warmup_proportion={train.warmup_proportion} must be at most 1 - "
                         f"config.train.decay_fraction = {1 - decay:g} for the 'wsd' schedule (the warmup ends "
                         "before the decay starts)")
    for key in ("freeze_encoder", "cache_features"):
        if not isinstance(train[key], bool):
            raise ValueError(f"config.train.{key} must be True or False, got {train[key]!r}")
    # The optimizer and schedule keys too, before any data is read: the steps an epoch makes are
    # known only then (schedule_config checks the resolved numbers again).
    provisional = ml_collections.ConfigDict(train.to_dict())
    provisional.num_steps = train.num_steps or 1_000_000
    provisional.warmup_steps = int(train.warmup_proportion * provisional.num_steps)
    optim.validate_train_config(provisional)


def check_batch_sizes(train: ml_collections.ConfigDict, data_parallel: int) -> None:
    """ValueError unless config.train's batch sizes split over the data-parallel devices (and
    micro-batches) and the processes."""
    for key in ("batch_size", "eval_batch_size"):
        size = train[key] or train.batch_size
        if size % (data_parallel * (train.grad_accum_steps if key == "batch_size" else 1)) or size % jax.process_count():
            raise ValueError(f"config.train.{key}={size} must be divisible by the data-parallel size (mesh data x "
                             f"fsdp = {data_parallel}), the processes ({jax.process_count()})"
                             + (f" and config.train.grad_accum_steps={train.grad_accum_steps}" if key == "batch_size"
                                else ""))


def validate_config(config: ml_collections.ConfigDict, bert: BertConfig, mesh_shape: tuple[int, int, int],
                    vocab_size: int) -> None:
    """Raises ValueError naming the key of the first inconsistent or out-of-range value."""
    train, data = config.train, config.data
    data_parallel, tensor = mesh_shape[0] * mesh_shape[1], mesh_shape[2]
    if not model_source.table_fits(bert.vocab_size, vocab_size):
        raise ValueError(f"config.model.vocab_size={bert.vocab_size} but the tokenizer has {vocab_size} tokens")
    check_train_values(train)
    optim.check_parameter_dtype(bert.param_dtype)
    check_batch_sizes(train, data_parallel)
    sharding.check_training_mesh(mesh_shape)
    if bert.num_attention_heads % tensor:
        raise ValueError(f"config.mesh.tensor={tensor} must divide the number of attention heads "
                         f"({bert.num_attention_heads})")
    if not 8 <= data.max_seq_length <= bert.max_position_embeddings:
        raise ValueError(f"config.data.max_seq_length={data.max_seq_length} must be in [8, the model's "
                         f"max_position_embeddings={bert.max_position_embeddings}]")
    bert.check_runnable(data.max_seq_length)
    batching.bucket_lengths(data.max_seq_length, data.num_buckets)
    check_run_settings(config)
    tasks.check_own_files(config)  # before a dataset it would ignore them for is downloaded and prepared
    tasks.warn_of_other_families_settings(config)
    if data.pack_examples and bert.tagging_head != "linear":
        raise ValueError(f"config.data.pack_examples={data.pack_examples}: packed rows need "
                         f"config.model.tagging_head='linear' (the BiLSTM reads whole rows); set one of them")
    if bert.tagging_head != "linear" and not tasks.family_of_task(config.task).token_level:
        tagging = [name for other in tasks.FAMILIES.values() if other.token_level for name in other.tasks]
        raise ValueError(f"config.model.tagging_head={bert.tagging_head!r} is for tagging tasks "
                         f"{tagging}, not config.task={config.task!r}; leave it 'linear'")


def check_run_settings(config: ml_collections.ConfigDict) -> None:
    """ValueError naming the first data, caching or checkpoint setting that does not work with
    the others (no model, data or devices needed: a sweep checks them before its first run)."""
    train, data = config.train, config.data
    if data.label_kind not in ("class", "float"):
        raise ValueError(f"config.data.label_kind must be 'class' or 'float' (regression), got {data.label_kind!r}")
    if data.file_format not in ("", *common.ROW_FORMATS):  # (else the first file's error blamed its extension)
        raise ValueError(f"config.data.file_format must be {', '.join(common.ROW_FORMATS)} or '' (from each file's "
                         f"extension), got {data.file_format!r}")
    check_int(data, "pack_examples", 0)
    run_config.check_seed(config.seed, "config.seed", minimum=-2**63)
    run_config.check_seed(data.seed, "config.data.seed")
    family = tasks.family_of_task(config.task)
    if data.pack_examples and not family.packs_examples:
        packing = [other.name for other in tasks.FAMILIES.values() if other.packs_examples]
        raise ValueError(f"config.data.pack_examples={data.pack_examples}: packing is for {' and '.join(packing)} "
                         f"tasks, not config.task={config.task!r}; set it to 0")
    if data.pack_examples and train.freeze_encoder and train.cache_features:
        raise ValueError(f"config.data.pack_examples={data.pack_examples}: packing saves the encoder's work on "
                         "padding, which features cached once (config.train.freeze_encoder with cache_features) "
                         "save already; set config.data.pack_examples=0 or config.train.cache_features=False")
    if train.feature_cache_dir and not (train.freeze_encoder and train.cache_features):
        raise ValueError(f"config.train.feature_cache_dir={train.feature_cache_dir} has no effect: features are "
                         "cached for a frozen encoder (config.train.freeze_encoder=True, cache_features=True)")
    if train.feature_cache_dir and fileio.is_remote(train.feature_cache_dir):
        raise ValueError(f"config.train.feature_cache_dir={train.feature_cache_dir}: the cached features are "
                         "memory-mapped, which needs a local folder")
    if train.feature_cache_dir:  # (a shared read-only folder serves finished caches: said now, not refused)
        try:
            fileio.check_can_make(train.feature_cache_dir, "config.train.feature_cache_dir")
        except ValueError as unwritable:
            if not os.path.isdir(train.feature_cache_dir):  # a file, or a folder it cannot make: no features there
                raise
            log.warning("%s: only features cached there already are read; a split without them stops the run when "
                        "it reaches them, after its start-up", unwritable, extra=PROCESS_SPECIFIC)
    if config.checkpoint.every < 1 or config.checkpoint.keep < 1:
        raise ValueError(f"config.checkpoint.every and .keep must be >= 1, got {config.checkpoint.every}, "
                         f"{config.checkpoint.keep}")


def checked_model(config: ml_collections.ConfigDict, checkpoint: BertConfig | None, vocab_size: int
                  ) -> tuple[BertConfig, tuple[int, int, int]]:
    """(the run's BertConfig, its mesh shape), every start-up check passed (`validate_config`):
    what fine-tuning, and the demo before its pre-training stage, check before any data."""
    bert = model_config(config, checkpoint, vocab_size)
    mesh_shape = sharding.mesh_shape(jax.device_count(), config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    validate_config(config, bert, mesh_shape, vocab_size)
    return bert, mesh_shape


def schedule_config(config: ml_collections.ConfigDict, examples_per_epoch: int) -> ml_collections.ConfigDict:
    """config.train with the run's length resolved: num_steps (from num_epochs over
    `examples_per_epoch`, unless set; rounded down like run_classifier.py's
    int(N / batch * epochs)) and warmup_steps (warmup_proportion of them)."""
    train = ml_collections.ConfigDict(config.train.to_dict())
    if not train.num_steps:
        train.num_steps = max(1, int(examples_per_epoch / train.batch_size * train.num_epochs))
    train.warmup_steps = int(train.warmup_proportion * train.num_steps)
    if train.schedule == "inverse_sqrt" and not train.warmup_steps:
        raise RunSettingsError(f"config.train.warmup_proportion={train.warmup_proportion} gives no warmup step in "
                               f"this run's {train.num_steps} steps, and the 'inverse_sqrt' schedule needs one: raise it")
    optim.validate_train_config(train)
    optim.warn_if_no_decay(train)
    return train

"""Pre-training's start-up: the run's model config, and every check and setting that can be
made before data is prepared or anything compiled (the pre-training counterpart of
finetune_setup.py; the loop is in pretrain.py)."""

from __future__ import annotations

import logging
import shlex
import tempfile

import jax
import ml_collections

from bertjax import batch_warmup, checkpointing, optim, run_config, sharding
from bertjax.models import BertConfig
from bertjax.models import config as bert_config
from bertjax.runtime import fileio
from bertjax.runtime.console import PROCESS_SPECIFIC

log = logging.getLogger(__name__)


def checked_model(config: ml_collections.ConfigDict, workdir: str) -> tuple[BertConfig, tuple[int, int, int], str]:
    """(the run's BertConfig, its mesh shape, its data folder), every start-up check passed:
    what can be checked before data is prepared or anything compiled (unset settings that
    follow from others resolved on the way)."""
    from bertjax.data import prepare  # TensorFlow only for input
    from bertjax.data.pretraining_config import check_data_config

    continuing = config.get("init_checkpoint_required")
    if continuing and not config.init_checkpoint and not run_config.own_checkpoints(workdir):
        raise ValueError("this config continues a pre-training run (phase2: length 512 from phase 1's weights; "
                         "long: the modern encoder's full context from its shorter run's): set config.init_checkpoint "
                         "to that run's workdir")
    check_recipe(config, workdir)
    warn_if_same_document_order(config, workdir)
    check_data_config(config.data)
    run_config.check_seed(config.seed, "config.seed", minimum=-2**63)
    run_config.check_seed(config.data.seed, "config.data.seed")
    prepare.check_vocabulary_given(config.data)
    data_dir = config.data.prepared_dir or fileio.join(workdir, "data")
    checkpoint, checkpoint_name = checkpoint_config(config, workdir)
    bert = model_config(config, prepare.vocab_size_for(config.data, data_dir), checkpoint, checkpoint_name)
    if config.init_checkpoint and not run_config.own_checkpoints(workdir):  # (a resume has its own tokenizer)
        check_init_vocabulary(config)
    check_length(config.data, bert)  # before the batch size that follows from it (`,long`)
    resolve_global_batch_size(config, workdir)
    mesh_shape = sharding.mesh_shape(jax.device_count(), config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    validate_config(config, bert, mesh_shape)
    if not run_config.own_checkpoints(workdir):  # (a resume was warned of when it started)
        warn_if_recipe_of_another_size(config, bert)
        run_config.warn_if_unfinished_start(config.init_checkpoint, workdir)
    warn_if_demo_corpus(config.data, bert)
    return bert, mesh_shape, data_dir


def tokenizer_named(data: ml_collections.ConfigDict) -> str:
    """The tokenizer config.data chooses, for a message."""
    return (f"config.data.vocab_path={data.vocab_path}" if data.vocab_path else "the prepared data's vocabulary"
            if data.source == "prepared" else "the demo vocabulary (config.data.vocab_path='')")


def check_init_vocabulary(config: ml_collections.ConfigDict) -> None:
    """A ValueError when the run's tokenizer is not the vocabulary config.init_checkpoint was
    trained with (a bertjax run's: its tokens and casing; a release's: its tokens): its
    embeddings would read other ids, and the new run would hand that tokenizer on as its own."""
    from bertjax.data import prepare
    from bertjax.inference import model_source

    data = config.data
    given = tokenizer_named(data)
    with tempfile.TemporaryDirectory() as scratch:  # where the demo vocabulary is written: nowhere the run keeps
        tokenizer = prepare.load_tokenizer_for(data, scratch)
    try:
        source = model_source.resolve(config.init_checkpoint)
    except (OSError, ValueError) as e:
        raise ValueError(f"config.init_checkpoint={config.init_checkpoint}: {e}") from None
    source.check_vocabulary(tokenizer, f"{given} (do_lower_case={tokenizer.do_lower_case})",
                            "set config.data.vocab_path and do_lower_case to the checkpoint's")


def model_config(config: ml_collections.ConfigDict, vocab_size: int, checkpoint: BertConfig | None = None,
                 checkpoint_name: str = "") -> BertConfig:
    """The BertConfig of a run: `config.model` (None = unset, vocab_size 0 = the tokenizer's),
    the unset fields from `checkpoint` (`checkpoint_config`'s, named `checkpoint_name`) when
    there is one, else from config.model.preset."""
    fields = dict(config.model)
    if fields["vocab_size"] not in (0, vocab_size):
        raise ValueError(f"config.model.vocab_size={fields['vocab_size']} does not match the tokenizer's "
                         f"vocabulary ({vocab_size} tokens; {tokenizer_named(config.data)}); use 0 to take it from "
                         "there")
    if checkpoint is not None and checkpoint.vocab_size != vocab_size:
        raise ValueError(f"{checkpoint_name} has a vocabulary of {checkpoint.vocab_size} tokens but the tokenizer, "
                         f"{tokenizer_named(config.data)}, has {vocab_size}: " + (
                             "prepare the data again with the vocabulary it trained with" if config.data.source ==
                             "prepared" else "give the one it trained with (config.data.vocab_path, "
                             "config.data.tokenizer)"))
    fields["vocab_size"] = vocab_size
    return bert_config.resolve(fields, checkpoint=checkpoint, preset=fields.get("preset"), **bert_config.this_host())


def validate_config(config: ml_collections.ConfigDict, bert: BertConfig, mesh_shape: tuple[int, int, int]) -> None:
    """Raises ValueError naming the key of the first inconsistent or out-of-range value (the
    unset cadence resolved first: `resolve_cadence`)."""
    resolve_cadence(config)
    optim.validate_train_config(config.train)
    optim.warn_if_no_decay(config.train)
    optim.check_parameter_dtype(bert.param_dtype)
    data, fsdp, tensor = mesh_shape
    sharding.check_training_mesh(mesh_shape)
    train = config.train
    for key in ("global_batch_size", "grad_accum_steps", "log_every", "eval_every", "eval_batches",
                "max_consecutive_bad_steps", "plateau_evals"):
        value = train[key]
        low = 0 if key.startswith("eval") or key == "plateau_evals" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"config.train.{key} must be {'an int >= 0' if low == 0 else 'a positive int'}, "
                             f"got {value!r}")
    parallel = data * fsdp
    if train.global_batch_size % (parallel * train.grad_accum_steps):
        raise ValueError(
            f"config.train.global_batch_size={train.global_batch_size} must be divisible by the data-parallel "
            f"size (mesh data x fsdp = {parallel}) times config.train.grad_accum_steps={train.grad_accum_steps}")
    if train.global_batch_size % jax.process_count():
        raise ValueError(f"config.train.global_batch_size={train.global_batch_size} must be divisible by the "
                         f"number of processes ({jax.process_count()})")
    batch_warmup.validate(train, parallel, jax.process_count())
    if bert.num_attention_heads % tensor:
        raise ValueError(f"config.mesh.tensor={tensor} must divide the number of attention heads "
                         f"({bert.num_attention_heads})")
    data_config = config.data
    check_length(data_config, bert)
    if bert.attention_window // 2 >= bert.max_position_embeddings - 1:  # (a typo's window: no layer is local)
        log.warning("config.model.attention_window=%d spans the model's %d positions: every layer sees every "
                    "token (the local layers keep local_rope_theta)", bert.attention_window,
                    bert.max_position_embeddings)
    if not 0.0 < data_config.masked_lm_prob < 1.0:
        raise ValueError(f"config.data.masked_lm_prob must be in (0, 1), got {data_config.masked_lm_prob}")
    if not 0.0 <= data_config.short_seq_prob <= 1.0:
        raise ValueError(f"config.data.short_seq_prob must be in [0, 1], got {data_config.short_seq_prob}")
    if not 0.0 <= data_config.eval_fraction < 1.0:
        raise ValueError(f"config.data.eval_fraction must be in [0, 1), got {data_config.eval_fraction}")
    # A prepared folder holds out what it was prepared with (checked when it is read).
    if data_config.eval_fraction == 0.0 and config.train.eval_every and data_config.source not in (
            "original_tfrecord", "prepared"):
        raise ValueError("config.data.eval_fraction=0 holds out no documents, but config.train.eval_every="
                         f"{config.train.eval_every} evaluates on them: set eval_every=0 (no evaluation) or a "
                         "fraction > 0")
    if data_config.host_split not in ("files", "global_batch"):
        raise ValueError(f"config.data.host_split must be 'files' or 'global_batch', got {data_config.host_split!r}")
    checkpoint = config.checkpoint
    if checkpoint.every < 1 or checkpoint.keep < 1:
        raise ValueError(f"config.checkpoint.every and .keep must be >= 1, got {checkpoint.every}, {checkpoint.keep}")
    if checkpoint.every > train.num_steps:
        log.warning("config.checkpoint.every=%d is past config.train.num_steps=%d: no checkpoint before the last "
                    "step (a crash loses the run; a stop signal still saves)", checkpoint.every, train.num_steps)
    if train.eval_every > train.num_steps:
        log.warning("config.train.eval_every=%d is past config.train.num_steps=%d: one evaluation, at the end (the "
                    "plateau alarm cannot fire)", train.eval_every, train.num_steps)


def warn_if_eval_repeats(pipeline, eval_batches: int) -> None:
    """A warning when the eval split (one epoch of `pipeline`, this host's rows) is smaller
    than an evaluation's `eval_batches` batches: its examples would then count more than once."""
    wanted = eval_batches * pipeline.batch_size
    if not pipeline.holds_at_least(wanted):
        log.warning("the eval split has fewer rows on this host than the %d of an evaluation "
                    "(config.train.eval_batches=%d x %d): rows repeat within an evaluation; raise "
                    "config.data.eval_fraction or lower config.train.eval_batches", wanted, eval_batches,
                    pipeline.batch_size, extra=PROCESS_SPECIFIC)


def warn_if_demo_corpus(data_config, bert) -> None:
    """A warning when a model bigger than the tiny preset pre-trains on the embedded demo
    corpus (config.data.source's default): usually a run whose data flags were left out."""
    if data_config.source == "demo" and bert.hidden_size > BertConfig.preset("tiny").hidden_size:
        log.warning("pre-training a %d-layer, %d-wide model on the embedded demo corpus (config.data.source='demo', "
                    "a toy for the quick start): give your corpus with config.data.source=text|jsonl|parquet|tfds "
                    "and config.data.input_pattern (docs/pretraining.md)", bert.num_hidden_layers, bert.hidden_size)


def check_length(data_config: ml_collections.ConfigDict, bert: BertConfig) -> None:
    """ValueError when config.data.max_seq_length is past the model's positions, or a length its
    attention kernel cannot run."""
    if data_config.max_seq_length > bert.max_position_embeddings:
        raise ValueError(f"config.data.max_seq_length={data_config.max_seq_length} exceeds the model's "
                         f"max_position_embeddings={bert.max_position_embeddings}")
    bert.check_runnable(data_config.max_seq_length)


def resolve_global_batch_size(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Sets an unset config.train.global_batch_size (`,long`: the context extension): a resumed
    run's own (its checkpoints' saved config), else the tokens per batch of the shorter run it
    continues (config.init_checkpoint, a bertjax pre-training run) at this run's
    max_seq_length; ValueError naming the key otherwise."""
    if config.train.global_batch_size is not None:
        return
    from bertjax.models.convert import checkpoint_layout

    own = run_config.own_checkpoints(workdir)
    if own:
        config.train.global_batch_size = checkpointing.read_meta(own)["config"]["train"]["global_batch_size"]
        return

    unset = ("config.train.global_batch_size is unset: it takes the tokens per batch of the run that "
             "config.init_checkpoint names (a bertjax pre-training run)")
    if not config.init_checkpoint:
        raise ValueError(f"{unset}; give that run, or set the batch size")
    try:
        layout, directory = checkpoint_layout(config.init_checkpoint)
        saved = checkpointing.read_meta(directory)["config"] if layout == "bertjax" else None
    except (OSError, ValueError) as e:
        raise ValueError(f"config.init_checkpoint={config.init_checkpoint}: {e}") from None
    if saved is None:
        raise ValueError(f"{unset}; {config.init_checkpoint} is a {layout} checkpoint, with no batch: set it")
    try:
        tokens = int(saved["train"]["global_batch_size"]) * int(saved["data"]["max_seq_length"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{unset}; {config.init_checkpoint} is no pre-training run (its saved config has no "
                         "train.global_batch_size and data.max_seq_length): set it") from None
    rows, left = divmod(tokens, config.data.max_seq_length)
    if left or not rows:  # rounded, the continuation would train on other batches than it promises
        raise ValueError(f"{unset}; its {tokens} tokens a batch are {tokens / config.data.max_seq_length:.3g} rows of "
                         f"{config.data.max_seq_length} tokens (config.data.max_seq_length), not a whole number: "
                         "set config.train.global_batch_size")
    config.train.global_batch_size = rows
    log.info("config.train.global_batch_size=%d: the %d tokens a batch of %s", config.train.global_batch_size,
             tokens, config.init_checkpoint)


def resolve_cadence(config: ml_collections.ConfigDict) -> None:
    """Sets an unset config.train.eval_every and config.checkpoint.every from the run's own
    length (after its options and overrides): every 500 steps or a quarter of a shorter run,
    every twentieth of a run longer than 10,000 steps, at most every 10,000 (the paper's). It
    never falls as the run grows: every run evaluates (the plateau alarm needs several
    evaluations) and keeps checkpoints well before its end."""
    steps = config.train.num_steps
    every = max(1, min(10_000, max(min(500, steps // 4), steps // 20))) if isinstance(steps, int) else 10_000
    if config.train.eval_every is None:
        config.train.eval_every = every
    if config.checkpoint.every is None:
        config.checkpoint.every = every


def check_recipe(config: ml_collections.ConfigDict, workdir: str) -> None:
    """ValueError when config.model.preset is not the preset whose recipe (batch, steps, rate,
    length) the config carries (config.recipe; `--config.recipe` overrides it on purpose), or
    when a resume's recipe is not the one its checkpoints trained with: the model comes from
    them, so another preset's recipe would train it at that preset's batch, steps and rate. A
    run that resumes checkpoints saved before recipes were recorded is left as it was."""
    recipe, preset = config.get("recipe"), config.model.get("preset")
    own = run_config.own_checkpoints(workdir)
    saved = (checkpointing.read_meta(own).get("config") or {}) if own else {}
    if own and "recipe" not in saved:
        return
    if own and recipe != saved["recipe"]:
        raise ValueError(f"workdir {workdir} holds a run of the {saved['recipe']!r} recipe, and this config is "
                         f"{recipe!r}'s: resume it with --config=configs/pretrain.py:{saved['recipe']} (any "
                         "options after it too), or give a new workdir")
    # A continuation (phase2, long) is a new run from another's weights: given that run's
    # workdir it resumed it instead, at its step and schedule, and saved over its checkpoints.
    continuing = bool(config.get("init_checkpoint_required"))
    if own and "init_checkpoint_required" in saved and continuing != bool(saved["init_checkpoint_required"]):
        raise ValueError(
            f"workdir {workdir} holds the run this config continues (phase2, long: a new run from its weights, "
            f"schedule and steps its own): give it a new workdir, with --config.init_checkpoint={shlex.quote(workdir)}"
            if continuing else f"workdir {workdir} holds a run that continues another (phase2, long): resume it with "
            "the same options after the preset, or give a new workdir")
    if recipe and preset != recipe:
        raise ValueError(f"config.model.preset={preset!r}, but the recipe (batch, steps, rate, length) is "
                         f"{recipe!r}'s: choose the preset in --config=configs/pretrain.py:{preset}")


def _init_checkpoint_run(config: ml_collections.ConfigDict) -> dict:
    """The saved config of the bertjax run config.init_checkpoint names; {} for another layout
    or one that does not read (named where its weights are read)."""
    from bertjax.models.convert import checkpoint_layout

    try:
        layout, directory = checkpoint_layout(config.init_checkpoint)
        return checkpointing.read_meta(directory)["config"] if layout == "bertjax" else {}
    except (OSError, ValueError):
        return {}


def warn_if_recipe_of_another_size(config: ml_collections.ConfigDict, bert: BertConfig) -> None:
    """A warning when config.init_checkpoint gives a model of another size or architecture
    than the recipe's preset (the model then comes from the checkpoint, the batch, steps and
    rate from the recipe: BERT-base trained at tiny's rate of 1e-3, or a BERT checkpoint under
    a modernbert-<size> recipe, say), unless the checkpoint's own run had this recipe (a
    continuation of a resized run)."""
    recipe = config.get("recipe")
    if not (config.init_checkpoint and recipe):
        return
    kind = lambda model: ("ModernBERT" if model.position_embedding == "rope" else "BERT",
                          model.num_hidden_layers, model.hidden_size)
    intended = BertConfig.preset(recipe)
    if kind(bert) != kind(intended) and _init_checkpoint_run(config).get("recipe") != recipe:
        log.warning("config.init_checkpoint=%s is a %s model of %d x %d (the checkpoint gives the model), but the "
                    "recipe (batch, steps, rate, length) is %r's, for a %s of %d x %d: choose its recipe in "
                    "--config=configs/pretrain.py:<preset>", config.init_checkpoint, *kind(bert), recipe,
                    *kind(intended))


def warn_if_same_document_order(config: ml_collections.ConfigDict, workdir: str) -> None:
    """A warning when the pre-training run config.init_checkpoint names read this run's corpus
    with this run's config.data.seed: a continuation (phase2, long) starting its stream at
    step 0 would train first on that run's first documents again, in the same order."""
    if not config.init_checkpoint or run_config.own_checkpoints(workdir):
        return
    saved = _init_checkpoint_run(config)
    data = saved.get("data") or {}
    same_corpus = all(data.get(key) == config.data.get(key)
                      for key in ("source", "input_pattern", "tfds_name", "prepared_dir"))
    if not saved.get("task") and same_corpus and data.get("seed") == config.data.seed:
        log.warning("config.data.seed=%d is the seed %s read its documents with: this run starts on the same "
                    "documents in the same order; give it another (phase2 and long take the next unless set)",
                    config.data.seed, config.init_checkpoint)


def checkpoint_config(config: ml_collections.ConfigDict, workdir: str) -> tuple[BertConfig | None, str]:
    """(the BertConfig the run's unset model fields come from, its name): the run's own
    checkpoints' when it resumes (config.init_checkpoint is not read then: it may be gone, or
    left off the command, and the preset's fields would replace the run's own), else
    config.init_checkpoint's; (None, "") with neither. ValueError naming it."""
    from bertjax.models.convert import pretrained_config

    own = run_config.own_checkpoints(workdir)
    path, name = (own, own) if own else (config.init_checkpoint, f"config.init_checkpoint={config.init_checkpoint}")
    if not path:
        return None, ""
    try:
        return pretrained_config(path), name
    except (OSError, ValueError) as e:
        raise ValueError(f"{name}: {e}") from None

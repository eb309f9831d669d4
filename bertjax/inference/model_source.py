"""What a model path stands for: its weights, tokenizer, architecture and task, resolved once.

Fine-tuning (config.init_checkpoint), prediction, feature extraction and export all start
from a path and need the same four answers; `resolve(path)` gives them as a ModelSource,
reading only small files (configs, metadata), and its methods load the rest on demand.

Paths (local or gs://):
  a bertjax fine-tuning workdir   its best/ weights (the last ones when the run had no
                                  evaluation split), task, label names, lengths, tokenizer
  a bertjax pre-training workdir  its newest checkpoint; tokenizer from WORKDIR/tokenizer
  a bertjax checkpoint directory  (WORKDIR/checkpoints, WORKDIR/best) its newest step; or one step folder
  a Hugging Face directory        config.json + model.safetensors (+ vocab.txt or tokenizer.json); a fine-tuned
                                  BertFor* names its task by `architectures`, labels by `id2label`
  Google's TF release             bert_config.json + bert_model.ckpt (+ vocab.txt)

Task info (`ModelSource.task_info`, saved by fine-tuning runs as the run config's
"task_info"): {"family": classification | squad | tagging | choice, "label_names": [...] or
None (regression), "pairs": bool (classification: two texts per example), "squad_version":
"v1.1" | "v2.0"}; which keys appear depends on the family.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Callable

from bertjax import tokenization
from bertjax.models import convert, tensor_files
from bertjax.models.config import BertConfig
from bertjax.runtime import fileio



PADDED_ROWS = 128  # the most embedding rows past a tokenizer's ids that a table may pad


def table_fits(table_rows: int, tokens: int) -> bool:
    """Whether an embedding table of `table_rows` serves a tokenizer of `tokens` ids: the same
    size, or padded past them to a multiple of 64 by fewer than PADDED_ROWS rows (as
    ModernBERT-family checkpoints may be: rows no token reads). A smaller table misses ids;
    another larger one (BERT's 30,522) is another vocabulary's."""
    return table_rows == tokens or (table_rows % 64 == 0 and 0 < table_rows - tokens < PADDED_ROWS)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A resolved model path.

    path: as given. layout: "bertjax" | "huggingface" | "tf". weights: the directory the
    weights are read from (a bertjax run's step folder, the newest when resolved; or the
    release's folder). bert: its architecture (unrolled layers). tokenizer_spec: {"kind", "path",
    "do_lower_case"} (and "refused": why bertjax cannot reproduce it, `load_tokenizer` then
    needs a vocabulary given) or None (no vocabulary with it). run_config: the saved config of a
    bertjax run (None otherwise). task: the fine-tuning task name (None: a pre-trained
    model). task_info: see the module docstring. pooler_trained: False when the pooler never
    learnt (a masked-LM-only pre-training run's; one a Hugging Face class without it left to
    a fresh initialisation; a fine-tuning run's whose head never read it from one such):
    a frozen encoder's pooled [CLS] is then a fixed random projection.
    """

    path: str
    layout: str
    weights: str
    bert: BertConfig
    tokenizer_spec: dict | None
    run_config: dict | None = None
    task: str | None = None
    task_info: dict = dataclasses.field(default_factory=dict)
    pooler_trained: bool = True
    recorded_data: dict = dataclasses.field(default_factory=dict)  # an export's record of its run's (RUN_DATA)

    @property
    def max_seq_length(self) -> int | None:
        """The length a bertjax run trained with, fine-tuning or pre-training, its own or as its
        export records it (None: not known, a release's): positions past it were never trained."""
        length = self.data.get("max_seq_length")
        return None if length is None else int(length)

    @property
    def positions_trained(self) -> int | None:
        """The longest length this model's positions trained at: a fine-tuning run's record of it
        (its own length or its starting model's, the longer; None after a model whose length is
        not known), else its run's length (`max_seq_length`)."""
        if self.run_config and "positions_trained" in self.run_config:
            return self.run_config["positions_trained"]
        return self.max_seq_length

    def untrained_past(self, length: int) -> str | None:
        """What inputs of `length` tokens would meet that this model never trained (the position
        embeddings, or the modern encoder's attention at those distances), as "the N tokens
        PATH trained at: ..."; None when they meet nothing untrained (or the length it trained
        at is not known: a release's is not guessed)."""
        trained = self.positions_trained
        if not trained or length <= trained:
            return None
        what = ("the position embeddings past it are untrained" if self.bert.position_embedding == "absolute" else
                "its attention never saw distances past it")
        return f"the {trained} tokens {self.path} trained at: {what}"

    @property
    def data(self) -> dict[str, Any]:
        """The run config's data section; an export's record of it (what using the model needs:
        its length, span QA's windows); else {}."""
        return self.run_config.get("data", {}) if self.run_config else self.recorded_data

    def weights_fingerprint(self) -> str:
        """What identifies the weights without reading them (`fileio.fingerprint` of the files
        that hold them and the architecture): a Hugging Face or TF folder's other files (a
        README, features written beside the model) leave it as it is."""
        if self.layout == "bertjax":  # a step folder holds its weights and meta only
            return fileio.fingerprint(self.weights)
        if self.layout == "huggingface":
            files = [fileio.join(self.weights, "config.json"), *tensor_files.weight_files(self.weights)]
        else:
            prefix = convert.tf_checkpoint_prefix(self.weights)
            folder, name = fileio.parent(prefix), os.path.basename(prefix)  # (a name glob would misread "[")
            data = [fileio.join(folder, file) for file in sorted(fileio.listdir(folder)) if file.startswith(name + ".")]
            files = [fileio.join(self.weights, "bert_config.json"), *data]
        identity = [(os.path.basename(file), fileio.fingerprint(file)) for file in files]
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()

    def load_params(self) -> dict[str, Any]:
        """{"bert": encoder tree, <heads>}: numpy float32, unrolled layers. A bertjax step whose
        arrays do not read raises CheckpointUnreadableError naming the steps before it: the
        weights are never another step's than `weights` says (feature caches and feature files
        record that name)."""
        from bertjax import checkpointing

        try:
            _, params = convert.load_pretrained(self.weights)
        except checkpointing.CheckpointMismatchError:
            raise
        except Exception as e:  # noqa: BLE001 (orbax/tensorstore raise many kinds for unreadable files)
            if self.layout != "bertjax":
                raise
            newest = None if fileio.exists(self.weights) else checkpointing.latest_step(fileio.parent(self.weights))
            if newest is not None:  # deleted meanwhile: a run still saving keeps its newest steps
                raise checkpointing.CheckpointUnreadableError(
                    f"{self.weights} was deleted while it loaded (a run saving there keeps only its newest steps); "
                    f"load again for the newest, step {newest}") from e
            earlier = checkpointing.earlier_steps(self.weights)
            hint = (f"give an earlier step folder to load it instead ({', '.join(earlier)})" if earlier
                    else "no earlier step is beside it")
            raise checkpointing.CheckpointUnreadableError(
                f"{self.weights} does not read ({checkpointing.brief(e)}); {hint}") from e
        return params

    def load_tokenizer(self, vocab_path: str = "", kind: str | None = None, do_lower_case: bool | None = None,
                       casing_setting: str = "do_lower_case") -> tokenization.Tokenizer:
        """The tokenizer that comes with the model, or `vocab_path` (which must then be the
        same vocabulary when the model names one) read as `kind` (None: as the file is,
        `convert.vocabulary_kind`). do_lower_case (WordPiece only: a
        SentencePiece model or a tokenizer.json normalises as it says) None: the model's
        casing, else the vocabulary file's (a tokenizer.json says), else what a vocab.txt's
        tokens show (`Tokenizer.from_vocab_file`), with a warning. One that contradicts how a
        SentencePiece model or tokenizer.json normalises is refused (`check_casing_setting`), naming
        `casing_setting`."""
        saved = self.tokenizer_spec
        if not vocab_path and not saved:
            raise ValueError(f"{self.path} comes with no vocabulary (vocab.txt, tokenizer.json or a saved "
                             "tokenizer); give one (vocab_path; the launchers' --vocab_file)")
        if not vocab_path and saved.get("refused"):
            raise ValueError(f"{saved['refused']}; give the vocabulary to read it with (vocab_path; the launchers' "
                             "--vocab_file)")
        kind, path = (kind or convert.vocabulary_kind(vocab_path), vocab_path) if vocab_path else (
            saved["kind"], saved["path"])
        if kind != "wordpiece":  # a SentencePiece model or tokenizer.json normalises as it says
            tokenizer = tokenization.load_tokenizer(kind, path)
            tokenization.check_casing_setting(tokenizer, do_lower_case, casing_setting)
            return self._checked(tokenizer, vocab_path)
        lower = do_lower_case
        known = saved["do_lower_case"] if saved and saved["kind"] == "wordpiece" else None
        if not saved:
            known = self.recorded_casing_for(path)
        if lower is not None and known is not None and lower != known:
            if self.layout == "bertjax":  # the run's own tokenizer: its casing is how it trained
                raise ValueError(f"{self.path} was trained {'un' if known else ''}cased (do_lower_case={known}); "
                                 f"do_lower_case={lower} would give it other ids (config.data.do_lower_case, "
                                 "--do_lower_case): leave it unset")
            import logging
            logging.getLogger(__name__).warning(
                "%s says do_lower_case=%s; using do_lower_case=%s as asked", self.path, known, lower)
        if lower is None:
            lower = known
        # lower None: the file's casing, else its tokens'; judged after the check (a vocabulary
        # refused is no model's casing to warn of).
        tokenizer = self._checked(tokenization.load_tokenizer(kind, path, lower), vocab_path)
        if lower is None and tokenization.wordpiece_casing(path) is None:
            import logging
            logging.getLogger(__name__).warning(
                "%s: casing not recorded; do_lower_case=%s, judged from its vocabulary's tokens (set do_lower_case to "
                "change it)", self.path, tokenizer.do_lower_case)
        return tokenizer

    def recorded_casing_for(self, vocab_path: str) -> bool | None:
        """The casing this model's folder records for `vocab_path`, a WordPiece vocabulary given
        apart that records none itself (a vocab.txt, not a tokenizer.json's normalizer): a TF
        export's bert_config.json, a tokenizer_config.json, a release's name. None for a model
        with a vocabulary of its own, or a bertjax run (its casing is its saved tokenizer's)."""
        if self.tokenizer_spec or self.layout == "bertjax" or tokenization.wordpiece_casing(vocab_path) is not None:
            return None
        return convert.recorded_casing(self.path)

    def _checked(self, tokenizer: tokenization.Tokenizer, vocab_path: str) -> tokenization.Tokenizer:
        """`tokenizer`, or ValueError when it is not the model's vocabulary."""
        if vocab_path:
            self.check_vocabulary(tokenizer, vocab_path, "leave the vocabulary unset to use the model's")
        if not table_fits(self.bert.vocab_size, tokenizer.vocab_size):
            raise ValueError(f"{self.path} has a vocabulary of {self.bert.vocab_size} tokens but the tokenizer has "
                             f"{tokenizer.vocab_size} ({tokenizer.path})")
        return tokenizer

    def check_vocabulary(self, tokenizer: tokenization.Tokenizer, given: str, remedy: str) -> None:
        """A ValueError (naming `given`, ending in `remedy`) when `tokenizer` is not the
        vocabulary the model comes with: a bertjax run's by its recorded hash (tokens and
        casing); a release's (Hugging Face, Google's TF), which records none, by its size and
        token by token, since one of its size but other tokens would give other ids. Nothing to
        compare for a model that names no vocabulary."""
        saved = self.tokenizer_spec
        if not saved or not saved.get("path"):
            return
        if saved.get("vocab_hash"):
            if saved["vocab_hash"] != tokenizer.vocab_hash:
                raise ValueError(f"{given} is not the vocabulary {self.path} was trained with ({saved['path']}, "
                                 f"do_lower_case={saved.get('do_lower_case')}); {remedy}")
            return
        own = tokenization.load_tokenizer(saved["kind"], saved["path"], saved.get("do_lower_case"))
        if own.vocab_size != tokenizer.vocab_size:
            if not table_fits(self.bert.vocab_size, own.vocab_size):
                return  # its own does not fit its table (tokens added, the table resized): the size check decides
            raise ValueError(f"{given} is not the vocabulary {self.path} comes with ({saved['path']}: "
                             f"{own.vocab_size} tokens, {tokenizer.vocab_size} here); {remedy}")
        differ = next((i for i in range(own.vocab_size) if own.id_to_token(i) != tokenizer.id_to_token(i)), None)
        if differ is not None:
            raise ValueError(f"{given} is not the vocabulary {self.path} comes with ({saved['path']}: id {differ} is "
                             f"{own.id_to_token(differ)!r} there, {tokenizer.id_to_token(differ)!r} here); {remedy}")


# The Hugging Face name of a classifier's or tagger's output bias (BERT's and ModernBERT's): its
# rows are the outputs config.json's labels name.
HF_CLASSIFIER_BIAS = "classifier.bias"


def resolve(path: str | ModelSource) -> ModelSource:
    """A model path (see the module docstring) -> its ModelSource (a ModelSource as it is);
    FileNotFoundError or ValueError naming the path and what was expected."""
    if isinstance(path, ModelSource):
        return path
    path = os.fspath(path)
    layout, directory = convert.checkpoint_layout(path)
    if layout == "bertjax":
        return _resolve_bertjax(path, directory)
    bert = convert.pretrained_config(directory)
    spec = convert.checkpoint_vocabulary(directory)
    if layout == "tf":
        tf_config = fileio.read_json(fileio.join(directory, "bert_config.json"))
        return _with_hf_task(ModelSource(path, layout, directory, bert, spec, pooler_trained=not tf_config.get(
            convert.TF_POOLER_UNTRAINED), recorded_data=tf_config.get(convert.RUN_DATA) or {}),
            convert.tf_task_config(directory))
    hf_config = fileio.read_json(fileio.join(directory, "config.json"))
    # Whether the file holds a pooler (BERT), or a head that ModernBERT's loads into it
    # (modernbert_layout.load_modernbert): bert-base-uncased's says BertForMaskedLM, and has one.
    shapes = tensor_files.weight_shapes(directory)
    wanted = "head.dense.weight" if hf_config.get("model_type") == "modernbert" else "pooler.dense.weight"
    trained = any(name == wanted or name.endswith("." + wanted) for name in shapes)
    classifier = shapes.get(HF_CLASSIFIER_BIAS)
    if classifier and "id2label" not in hf_config and "num_labels" not in hf_config:
        hf_config = {**hf_config, "num_labels": classifier[0]}  # as convert_checkpoint reads it
    source = _with_hf_task(ModelSource(path, layout, directory, bert, spec, pooler_trained=trained,
                                       recorded_data=hf_config.get(convert.RUN_DATA) or {}), hf_config)
    names = source.task_info.get("label_names")
    if classifier and names is not None and len(names) != classifier[0]:  # else flax fails at the first input
        raise ValueError(f"{fileio.join(directory, 'config.json')} names {len(names)} labels (id2label, or "
                         f"num_labels), and the weights' {HF_CLASSIFIER_BIAS} has {classifier[0]} outputs: "
                         "correct its id2label")
    return source


def _family_with(source: ModelSource, has: Callable[[Any], Any], what: str):
    """The task family of `source` when `has(family)`; else ValueError saying `what` is for
    the families that have it."""
    from bertjax import tasks

    family = tasks.FAMILIES.get(source.task_info.get("family"))
    if family is None or not has(family):
        names = " or ".join(other.name for other in tasks.FAMILIES.values() if has(other))
        raise ValueError(f"{source.path}: {what} for a {names} model, not "
                         f"{source.task_info.get('family') or 'a model without a task'}")
    return family


def with_pairs(source: ModelSource, pairs: bool | None) -> ModelSource:
    """`source` with its classifier reading pairs (True) or single texts (False), for a model
    whose task does not say (a Hugging Face classifier: config.json has no such field); None
    leaves it as it is. ValueError for a model that is no classifier or a run fine-tuned on
    the other kind."""
    if pairs is None:
        return source
    info = source.task_info
    _family_with(source, lambda family: family.pair_inputs, "pairs is")
    if info.get("pairs") is not None and info["pairs"] != pairs:
        raise ValueError(f"{source.path} was fine-tuned on {'pairs' if info['pairs'] else 'single texts'}, "
                         f"not {'pairs' if pairs else 'single texts'}")
    return dataclasses.replace(source, task_info={**info, "pairs": pairs})


def with_task_version(source: ModelSource, version: str | None) -> ModelSource:
    """`source` answering as its task's `version` (a family's `versions`: SQuAD's "v2.0" may
    abstain, with null odds), for a Hugging Face model whose config.json does not say (a QA
    model reads as "v1.1"); None leaves it as it is. ValueError for a model whose task has no
    such version, or one that says it is another (a bertjax run, or its export's config.json)."""
    if version is None:
        return source
    info = source.task_info
    family = _family_with(source, lambda family: family.versions, "a task version is")
    if version not in family.versions:
        raise ValueError(f"{family.version_key} must be one of {', '.join(family.versions)}, got {version!r}")
    if info.get(family.version_key, version) != version:  # (silently answered otherwise: a walkthrough)
        raise ValueError(f"{source.path} was fine-tuned on {family.version_key} {info[family.version_key]}, "
                         f"not {version}" + ("" if source.layout == "bertjax" else " (its config says so)"))
    return dataclasses.replace(source, task_info={**info, family.version_key: version})


def _resolve_bertjax(path: str, directory: str) -> ModelSource:
    from bertjax import checkpointing

    # Pinned: a run still saving (a pre-training run read while it trains) adds newer steps, and
    # what loads the weights and what names them (feature caches, feature files) must agree.
    directory = checkpointing.newest_step_folder(directory)
    meta = checkpointing.read_meta(directory)
    run = meta.get("config") or {}
    bert = convert.bertjax_config(meta, directory)
    spec = convert.checkpoint_vocabulary(directory)
    task = run.get("task") or None
    info = dict(run.get("task_info") or {})
    if task is None:
        pooler_trained = (run.get("data") or {}).get("next_sentence_prediction") is not False
    else:  # runs before the key was recorded: as pre-trained ones were read
        pooler_trained = run.get("pooler_trained", True)
    return ModelSource(path, "bertjax", directory, bert, spec, run_config=run, task=task, task_info=info,
                       pooler_trained=pooler_trained)


def _with_hf_task(source: ModelSource, hf_config: dict) -> ModelSource:
    """A Hugging Face BertFor<Task> directory's task and task_info (its family reads the labels),
    or a TF checkpoint's, as `convert.tf_task_config` says it in the same keys."""
    from bertjax import tasks

    families = [tasks.family_of_architecture(name) for name in hf_config.get("architectures") or []]
    family = next((family for family in families if family is not None), None)
    if family is None:
        return source
    task, info = family.task_info_from_hf(hf_config)
    return dataclasses.replace(source, task=task, task_info=info)


def hf_architecture(task_info: dict) -> str | None:
    """The Hugging Face class of a fine-tuned model's family (None: no task)."""
    from bertjax import tasks

    family = tasks.FAMILIES.get(task_info.get("family"))
    return None if family is None else family.hf_architecture


def hf_config_keys(task_info: dict) -> dict:
    """The Hugging Face `config.json` keys that say what a fine-tuned model's labels cannot
    (a multi-label classifier's problem_type, a span-QA model's squad_version)."""
    from bertjax import tasks

    family = tasks.FAMILIES.get(task_info.get("family"))
    return {} if family is None else family.hf_config_keys(task_info)

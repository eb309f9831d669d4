r"""Converts a BERT checkpoint between layouts.

Reads any model path `bertjax.inference.model_source` resolves (Hugging Face, Google TF release, a
bertjax run or checkpoint; a fine-tuning workdir gives its best/ weights) and writes the Hugging
Face layout (config.json, model.safetensors, and vocab.txt or, for a byte-level BPE such as
ModernBERT's, tokenizer.json; tokenizer_config.json) or the original TF1 layout
(bert_config.json, bert_model.ckpt.*, vocab.txt). Example::

    python launch/convert_checkpoint.py --input=/ckpt/uncased_L-12_H-768_A-12 \
        --output=/ckpt/bert-base-hf --format=huggingface

The vocabulary is written from --vocab_file, else from <input>/vocab.txt (a Hugging Face directory
without one: its tokenizer.json; a bertjax run: its saved tokenizer; a SentencePiece model as
spm.model, which bertjax reads back and BERT's tokenizers do not) when present. A
fine-tuned classifier or tagger keeps its label names (config.json's id2label), and its
architecture follows its task. --output must be a new or empty folder (two
layouts never mix).
"""

import logging
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertjax.runtime import cli  # noqa: E402  (first: quiets TensorFlow before anything imports it)
from absl import flags  # noqa: E402

_INPUT = flags.DEFINE_string("input", None, "checkpoint directory to read", required=True)
_OUTPUT = flags.DEFINE_string("output", None, "directory to write", required=True)
_FORMAT = flags.DEFINE_enum("format", "huggingface", ["huggingface", "tf"], "layout to write")
_VOCAB = flags.DEFINE_string("vocab_file", None, "vocab.txt or tokenizer.json to write beside the weights: "
                              "vocab.txt, or a tokenizer.json other than BERT's WordPiece as it is (default: the "
                              "input's own, if it has one)")
flags.DEFINE_alias("vocab", "vocab_file")  # this launcher's earlier name
_LOWER_CASE = flags.DEFINE_bool(
    "do_lower_case", None, "whether a WordPiece vocabulary is uncased, written to the Hugging Face "
    "tokenizer_config.json or, with --format=tf, to bert_config.json (default: what the input says: "
    "tokenizer_config.json, a release named (un)cased_L-..., a bertjax run's tokenizer; a bertjax run's own casing "
    "cannot be changed)")
_SQUAD_VERSION = flags.DEFINE_enum("squad_version", None, ["v1.1", "v2.0"],
                                   "span QA: v2.0 for a model trained to abstain, where a Hugging Face config.json "
                                   "does not say; written to the output's config.json (default: the run's; a "
                                   "Hugging Face model: its config's, else v1.1)")
_ARCHITECTURE = flags.DEFINE_string(
    "architecture", None, "Hugging Face architectures entry, e.g. BertForTokenClassification "
    "(default: guessed from the heads present)")


def main(_):
    if _ARCHITECTURE.value and _FORMAT.value != "huggingface":
        raise ValueError("--architecture applies only to --format=huggingface")
    from bertjax.runtime import fileio
    from bertjax.inference import model_source
    from bertjax import tasks, tokenization
    from bertjax.models import convert, modernbert_layout, variable_table

    known = convert.HF_ARCHITECTURES + tuple(modernbert_layout.MODERNBERT_ARCHITECTURES)
    if _ARCHITECTURE.value and _ARCHITECTURE.value not in known:
        raise ValueError(f"--architecture={_ARCHITECTURE.value} is not one of {', '.join(known)}")
    output = _OUTPUT.value
    if fileio.exists(output) and not fileio.isdir(output):
        raise ValueError(f"--output={output} is a file; give a new or empty folder")
    present = sorted(fileio.listdir(output)) if fileio.isdir(output) else []
    if present:  # never mix two checkpoints' files
        raise ValueError(f"--output={output} is not empty (it has {', '.join(present[:4])}"
                         f"{', ...' if len(present) > 4 else ''}); give a new or empty folder")
    from bertjax import checkpointing

    checkpointing.refuse_checkpoint_folder(output, "--output", "this conversion")
    fileio.check_can_make(output, "--output")  # before the model loads
    if _VOCAB.value is not None and not fileio.exists(_VOCAB.value):
        raise ValueError(f"--vocab_file={_VOCAB.value}: no such file")
    if _VOCAB.value is not None and fileio.isdir(_VOCAB.value):
        raise ValueError(f"--vocab_file={_VOCAB.value} is a folder; give its vocab.txt or tokenizer.json")
    if _VOCAB.value is not None and convert.vocabulary_kind(_VOCAB.value) == "sentencepiece":
        raise ValueError(f"--vocab_file={_VOCAB.value} is a SentencePiece model; the layouts written here take a "
                         "vocab.txt or a tokenizer.json (a bertjax run's own SentencePiece model is copied as "
                         f"{convert.SENTENCEPIECE_FILE} with --vocab_file unset)")
    source = model_source.resolve(_INPUT.value)
    with cli.named_by_flag(f"--squad_version={_SQUAD_VERSION.value}"):
        source = model_source.with_task_version(source, _SQUAD_VERSION.value)
    if _ARCHITECTURE.value in modernbert_layout.MODERNBERT_ARCHITECTURES and not convert.is_modern(source.bert):
        raise ValueError(f"--architecture={_ARCHITECTURE.value} is a ModernBERT class, but {_INPUT.value} is a BERT "
                         f"model: name one of {', '.join(convert.HF_ARCHITECTURES)}")
    config, params = source.bert, source.load_params()
    vocab, do_lower_case = _VOCAB.value, _LOWER_CASE.value
    saved = source.tokenizer_spec  # vocab.txt (or tokenizer.json) beside it, or a bertjax run's tokenizer
    if saved and saved["kind"] in ("wordpiece", "huggingface"):  # a tokenizer.json goes with a ModernBERT
        vocab = saved["path"] if vocab is None else vocab
        if do_lower_case is None and saved["kind"] == "wordpiece":
            do_lower_case = saved["do_lower_case"]
        # How a run trained: its vocab.txt's recorded casing, or a BERT tokenizer.json's own.
        trained = saved["do_lower_case"] if saved["kind"] == "wordpiece" else (
            tokenization.wordpiece_casing(saved["path"]) if not tokenization.bert_wordpiece_differences(saved["path"])
            else None)
        if trained is not None and _LOWER_CASE.value not in (None, trained) and source.layout == "bertjax":
            raise ValueError(f"--input={_INPUT.value} was trained {'un' if trained else ''}cased (do_lower_case="
                             f"{trained}); --do_lower_case={_LOWER_CASE.value} would write a casing that gives it "
                             "other ids: leave it unset")
        if trained is not None and _LOWER_CASE.value not in (None, trained) and vocab == saved["path"]:
            logging.warning("--do_lower_case=%s writes a casing other than %s's own (do_lower_case=%s): its "
                            "tokenizer will give other ids than the model trained on, unless that was wrong",
                            _LOWER_CASE.value, _INPUT.value, trained)
    kind = "huggingface" if vocab is not None and vocab.endswith(".json") else "wordpiece"
    if kind == "huggingface" and tokenization.bert_wordpiece_differences(vocab):  # written as it is, casing its own
        tokenization.check_casing_setting(tokenization.load_tokenizer(kind, vocab), _LOWER_CASE.value,
                                          "--do_lower_case")
    if do_lower_case is None and kind == "wordpiece" and vocab is not None:  # (a folder without its vocabulary)
        do_lower_case = source.recorded_casing_for(vocab)
    if kind == "huggingface" and do_lower_case is None and not tokenization.bert_wordpiece_differences(vocab):
        do_lower_case = tokenization.wordpiece_casing(vocab)  # BERT's WordPiece: its BertNormalizer says
    judged = kind == "wordpiece" and vocab is not None and do_lower_case is None
    if judged:  # as bertjax reads the vocab.txt (its tokens): written, else transformers lower-cases any
        do_lower_case = tokenization.vocab_casing(vocab)
    left_out = ""
    if saved and saved.get("refused") and vocab == saved["path"] and _VOCAB.value is None:  # written beside the
        vocab, do_lower_case = None, _LOWER_CASE.value  # weights, BERT's tokenizer would read it with other ids
        left_out = f", tokenizer not written: {saved['refused']}"
    elif saved and saved.get("refused"):  # a vocabulary given: written with a casing alone, read as BERT's
        left_out = f", the input's own tokenizer not reproduced: {saved['refused']}"
    elif vocab is None and saved:  # a SentencePiece model: neither layout's BERT tokenizer reads it; bertjax does
        left_out = (f", tokenizer: {saved['kind']} model {convert.SENTENCEPIECE_FILE} (read by bertjax; this layout's "
                    "BERT tokenizer does not read one)")
    if vocab is not None:  # checked before anything is written
        vocab_size = (len(tokenization.read_vocab(vocab)) if kind == "wordpiece"
                      else tokenization.load_tokenizer(kind, vocab).vocab_size)
        if not model_source.table_fits(config.vocab_size, vocab_size):
            raise ValueError(f"{vocab} has {vocab_size} tokens but the checkpoint {_INPUT.value} has vocab_size "
                             f"{config.vocab_size}: give the vocabulary it was trained with (--vocab_file)")
        if _VOCAB.value is not None:  # of its size, other tokens: other ids, as predict and fine-tuning refuse
            source.check_vocabulary(tokenization.load_tokenizer(kind, vocab, do_lower_case), vocab,
                                    "give the vocabulary it was trained with (--vocab_file), or leave it unset")
    # What using the model needs of the run's config.data, which neither layout has a place for.
    family = source.task_info.get("family")
    named = tasks.family_of_architecture(_ARCHITECTURE.value) if _ARCHITECTURE.value else None
    # The model's own class and the one without a head, in its kind's names (BERT or ModernBERT).
    own_class, bare = (tasks.FAMILIES[family].hf_architecture if family in tasks.FAMILIES else None), "BertModel"
    if variable_table.is_modern(source.bert):
        own_class, bare = modernbert_layout.MODERN_FOR_BERT.get(own_class), modernbert_layout.MODERN_FOR_BERT[bare]
    if (_ARCHITECTURE.value and own_class and _ARCHITECTURE.value not in ("BertModel", bare)
            and (named is None or named.name != family)):  # a head of one shape read anew, or one it lacks
        what = (f"is a {named.name} class" if named else "holds no task head")
        raise ValueError(f"--architecture={_ARCHITECTURE.value} {what}, but {_INPUT.value} is a {family} model "
                         f"({own_class}); leave --architecture unset, or name the class without a head ({bare})")
    run_data = {**({"max_seq_length": source.max_seq_length} if source.max_seq_length else {}),
                **(tasks.FAMILIES[family].serving_settings(source.data) if family in tasks.FAMILIES else {})}
    heads = []

    def write(folder: str) -> None:
        if _FORMAT.value == "huggingface":
            architecture = _ARCHITECTURE.value or model_source.hf_architecture(source.task_info)
            extra = model_source.hf_config_keys(source.task_info)
            if run_data:
                extra[convert.RUN_DATA] = run_data
            if saved and vocab is None:  # a tokenizer not copied (SentencePiece): its ids
                ids = modernbert_layout.special_token_ids(tokenization.load_tokenizer(
                    saved["kind"], saved["path"], saved["do_lower_case"]))
                extra.update(ids if convert.is_modern(config) else {"pad_token_id": ids["pad_token_id"]})
            heads.extend(convert.export_huggingface(config, params, folder, vocab, architecture=architecture,
                                                    do_lower_case=do_lower_case,
                                                    label_names=source.task_info.get("label_names"),
                                                    extra_config=extra, pooler_trained=source.pooler_trained))
        else:
            heads.extend(convert.export_tf_checkpoint(
                config, params, folder, vocab, do_lower_case=do_lower_case, pooler_trained=source.pooler_trained,
                run_data=run_data, architecture=model_source.hf_architecture(source.task_info),
                label_names=source.task_info.get("label_names"),
                task_keys=model_source.hf_config_keys(source.task_info)))
        if saved and vocab is None and saved["kind"] == "sentencepiece":
            fileio.copy(saved["path"], fileio.join(folder, convert.SENTENCEPIECE_FILE))

    # Whole or not at all: a folder cut short (a full disk) would load, or be refused as not empty.
    fileio.write_folder_whole(output, write, "--output",
                              last="config.json" if _FORMAT.value == "huggingface" else "bert_config.json")
    casing = _casing(vocab, do_lower_case, kind == "huggingface" and do_lower_case is None, judged)
    # The class written: a BERT class named for a modern encoder is its ModernBERT counterpart.
    written_class = (f"class {fileio.read_json(fileio.join(output, 'config.json'))['architectures'][0]}, "
                     if _FORMAT.value == "huggingface" else "")
    print(f"wrote {output} ({_FORMAT.value} layout, {written_class}heads: {list(heads) or 'none'}, "
          f"vocab: {vocab or 'none'}{casing}"
          f"{left_out})")


def _casing(vocab: str | None, do_lower_case: bool | None, copied_whole: bool, judged: bool) -> str:
    """What the written folder says of its casing, for the summary line (judged: from the
    vocabulary's tokens, as nothing said it)."""
    if vocab is None or (copied_whole and vocab.endswith(".json")):
        return ""  # no vocabulary, or a tokenizer.json copied whole: its own normaliser says
    where = " (in bert_config.json, read by bertjax; Google's code reads it from the folder's name)" * (
        _FORMAT.value == "tf")
    how = " as its tokens say (nothing else did: --do_lower_case to choose)" if judged else ""
    return f", {'un' if do_lower_case else ''}cased{how}{where}"


if __name__ == "__main__":
    cli.run(main)

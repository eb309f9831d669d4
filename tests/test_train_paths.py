"""Pre-training paths beyond the default: bf16, scan, remat and fused attention; weights from a
Hugging Face or original TF checkpoint (their architecture kept); whole-word masking through
the full pipeline; inputs refused before anything is prepared or compiled."""

import json
import os
import sys

import jax
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from configs import pretrain as pretrain_config  # noqa: E402


def _config(prepared_dir, steps=8, sized=True, **model):
    """The tiny preset, smaller (unless not `sized`: the preset's sizes, or a checkpoint's)."""
    config = pretrain_config.get_config("tiny")
    config.model.update(**(dict(hidden_size=64, num_attention_heads=2, intermediate_size=128) if sized else {}),
                        **model)
    config.data.update(prepared_dir=prepared_dir, max_seq_length=32, max_predictions_per_seq=5)
    config.train.update(num_steps=steps, global_batch_size=16, learning_rate=5e-3, warmup_steps=1, log_every=1,
                        eval_every=0)
    config.checkpoint.every = steps
    return config


def _losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


@pytest.mark.parametrize("model", [dict(dtype="bfloat16", remat_policy="dots"),
                                   dict(scan_layers=True, remat_policy="full", attention_impl="fused",
                                        attention_probs_dropout_prob=0.0)],
                         ids=["bf16+remat_dots", "scan+remat_full+fused_attention"])
def test_compute_switches_train(tmp_path, prepared_dir, model):
    """Each switch in one short run (two runs hold them all: compiling costs most of a run)."""
    from bertjax import pretrain

    pretrain.train_and_evaluate(_config(prepared_dir, **model), str(tmp_path))
    losses = _losses(tmp_path)
    assert len(losses) == 8 and np.all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.3, losses


def _exported(tmp_path, layout, hidden_act, layer_norm_eps, vocab_size):
    """A small random BERT with MLM/NSP heads written in `layout` (huggingface | tf)."""
    from bertjax.models import BertConfig, BertForPreTraining, convert

    bert = BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=128, hidden_act=hidden_act, layer_norm_eps=layer_norm_eps)
    ids = np.zeros((1, 8), np.int32)
    params = BertForPreTraining(bert).init(jax.random.key(3), ids, ids, ids, np.zeros((1, 2), np.int32))["params"]
    # Noise on every leaf: a restore that kept a fresh model's zeros and ones (biases, layer
    # norms) anywhere would otherwise pass.
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(4), len(leaves))
    params = tree.unflatten([leaf + 0.05 * jax.random.normal(key, leaf.shape) for leaf, key in zip(leaves, keys)])
    directory = str(tmp_path / layout)
    export = convert.export_huggingface if layout == "huggingface" else convert.export_tf_checkpoint
    export(bert, params, directory)
    return directory, convert.load_pretrained(directory)[1]


@pytest.mark.parametrize("layout, hidden_act, layer_norm_eps", [("huggingface", "gelu", 1e-7),
                                                                ("tf", "gelu_tanh", 1e-12)])
def test_init_checkpoint_keeps_its_architecture_and_weights(tmp_path, prepared_dir, layout, hidden_act,
                                                            layer_norm_eps):
    from bertjax import checkpointing, pretrain
    from bertjax.data import prepare

    config = _config(prepared_dir, steps=1, sized=False)  # the checkpoint's sizes, not the preset's (hidden 128)
    vocab_size = prepare.load_tokenizer_for(config.data, prepared_dir).vocab_size
    directory, weights = _exported(tmp_path, layout, hidden_act, layer_norm_eps, vocab_size)
    config.init_checkpoint = directory
    config.train.learning_rate = 1e-9  # one step that barely moves the weights
    pretrain.train_and_evaluate(config, str(tmp_path / "run"))
    meta, params = checkpointing.load_params(str(tmp_path / "run" / "checkpoints"))
    model = meta["config"]["model"]
    assert (model["hidden_act"], model["layer_norm_eps"]) == (hidden_act, layer_norm_eps)
    assert (model["hidden_size"], model["num_hidden_layers"], model["intermediate_size"]) == (64, 2, 128)
    # Every weight of the checkpoint, heads included, is where the run started (one step at a
    # learning rate of 0 at the warmup's start leaves them all).
    restored, saved = (dict(jax.tree_util.tree_flatten_with_path(tree)[0]) for tree in (params, weights))
    assert set(restored) == set(saved) and len(saved) > 30
    for path, value in saved.items():
        np.testing.assert_allclose(restored[path], value, atol=1e-6, err_msg=jax.tree_util.keystr(path))


def test_a_task_head_pre_training_does_not_use_is_warned_of(caplog):
    """Pre-training from a fine-tuned classifier left its head out without a word (a walkthrough)."""
    from bertjax import pretrain
    from bertjax.models.config import BertConfig

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "hf_modernbert", "classifier")
    with caplog.at_level("WARNING"):
        params = pretrain.pretrained_params(path, BertConfig.preset("modernbert-tiny"), {"bert": {}, "mlm": {}})
    assert sorted(params) == ["bert"]
    assert f"config.init_checkpoint={path}: its ['classifier'] weights are not used (this run has no such head)" \
        in caplog.text


def test_init_checkpoint_with_other_sizes_is_refused_before_compiling(tmp_path, prepared_dir):
    from bertjax import pretrain

    directory, _ = _exported(tmp_path, "huggingface", "gelu", 1e-12, vocab_size=100)
    config = _config(prepared_dir)
    config.init_checkpoint = directory
    # The tokenizer named as chosen (a walkthrough: "config.data.vocab_path" for a default never set).
    with pytest.raises(ValueError, match=r"has a vocabulary of 100 tokens but the tokenizer, the demo vocabulary "
                                         r"\(config.data.vocab_path=''\), has 784: give the one it trained with "
                                         r"\(config.data.vocab_path, config.data.tokenizer\)"):
        pretrain.train_and_evaluate(config, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_whole_word_masking_trains_through_the_full_pipeline(tmp_path, prepared_dir):
    """The setting reaches the run's pipeline: a masked '##' piece has the piece before it
    masked too (the demo vocabulary has 198 of them), which masking piece by piece breaks; a
    segment cut inside a word starts with a '##' piece after [CLS] or [SEP], a word of its own."""
    from bertjax import pretrain
    from bertjax.data import pipelines, prepare

    def split_words(whole_word_mask: bool) -> int:
        config = _config(prepared_dir)
        config.data.update(whole_word_mask=whole_word_mask, max_predictions_per_seq=20)
        tokenizer = prepare.load_tokenizer_for(config.data, prepared_dir)
        continuation = tokenizer.continuation_mask()
        pipeline = pipelines.make_pipeline(config.data, str(tmp_path / "pipeline"), batch_size=64)
        broken = 0
        for batch, _ in zip(pipeline.batches(), range(4)):
            for row, positions, ids, weights in zip(batch["input_ids"], batch["masked_lm_positions"],
                                                    batch["masked_lm_ids"], batch["masked_lm_weights"]):
                masked = set(positions[weights > 0].tolist())
                broken += sum(continuation[i] and p - 1 not in masked
                              and row[p - 1] not in (tokenizer.cls_id, tokenizer.sep_id)
                              for p, i in zip(positions[weights > 0], ids[weights > 0]))
        return broken

    assert split_words(True) == 0 and split_words(False) > 0
    config = _config(prepared_dir, steps=4)
    config.data.whole_word_mask = True
    pretrain.train_and_evaluate(config, str(tmp_path))
    assert len(_losses(tmp_path)) == 4 and np.all(np.isfinite(_losses(tmp_path)))


def test_inputs_are_refused_before_any_preparation(tmp_path):
    from bertjax import pretrain

    config = pretrain_config.get_config("tiny")
    config.data.update(source="original_tfrecord", input_pattern=str(tmp_path / "*.tfrecord"))
    with pytest.raises(ValueError, match="needs config.data.vocab_path"):
        pretrain.train_and_evaluate(config, str(tmp_path / "a"))
    config = pretrain_config.get_config("tiny")
    config.data.max_predictions_per_seq = 500
    with pytest.raises(ValueError, match="max_predictions_per_seq must be in"):
        pretrain.train_and_evaluate(config, str(tmp_path / "b"))
    assert not os.path.exists(tmp_path / "b" / "data")  # nothing was prepared


def test_derived_settings_follow_the_overrides_they_derive_from(tmp_path):
    """The cap on masked tokens a row follows max_seq_length and masked_lm_prob however they
    are set (the modern recipe's 30% at a longer length, as docs/pretraining.md runs it); the
    context extension takes the batch of the run it continues, in tokens."""
    import jax.numpy as jnp

    from bertjax import checkpointing, pretrain_setup
    from bertjax.models.config import BertConfig

    assert pretrain_config.get_config("base").data.max_predictions_per_seq == 20  # the original's at 128
    phase2 = pretrain_config.get_config("base,phase2")
    assert phase2.data.max_predictions_per_seq == 77  # and at 512, following an override too (a review: fixed at 80)
    phase2.data.masked_lm_prob = 0.2
    assert phase2.data.max_predictions_per_seq == 103
    tiny = pretrain_config.get_config("tiny")
    assert tiny.data.max_predictions_per_seq == 10
    tiny.data.max_seq_length = 512
    assert tiny.data.max_predictions_per_seq == 77
    tiny.data.max_predictions_per_seq = 7  # set: no longer derived
    tiny.data.max_seq_length = 1024
    assert tiny.data.max_predictions_per_seq == 7
    modern = pretrain_config.get_config("modernbert-base,modern")
    modern.data.max_seq_length = 1024
    assert modern.data.max_predictions_per_seq == 308  # 30% of 1,024

    # Options after phase2 (whose 80 is the original's for 15% at 512) derive the cap again.
    assert pretrain_config.get_config("base,phase2,modern").data.max_predictions_per_seq == 154
    for refused in ("modernbert-base,phase2,long", "modernbert-base,long"):  # NSP pairs at 8,192; two lengths
        with pytest.raises(ValueError, match=f"'long' continues a 'modern' run and is not 'phase2': give "
                                             f"'modernbert-base,modern,long', not '{refused}'"):
            pretrain_config.get_config(refused)
    long = pretrain_config.get_config("modernbert-base,modern,long")
    assert (long.data.max_seq_length, long.data.max_predictions_per_seq) == (8192, 2458)
    assert long.train.global_batch_size is None
    with pytest.raises(ValueError, match="config.train.global_batch_size is unset: it takes the tokens per batch"):
        pretrain_setup.resolve_global_batch_size(long, str(tmp_path / "long"))
    shorter = tmp_path / "mb1024"
    checkpointer = checkpointing.Checkpointer(str(shorter / "checkpoints"), save_interval_steps=1, max_to_keep=1,
                                              async_save=False)
    checkpointer.save(1, {"w": jnp.zeros(2)}, data_position=1, config=modern.to_dict())  # batch 256 x 1,024
    long.init_checkpoint = str(shorter)
    pretrain_setup.resolve_global_batch_size(long, str(tmp_path / "long"))
    assert long.train.global_batch_size == 32  # 262,144 tokens at 8,192
    # Tokens that make no whole number of rows were rounded (down to 1 row at least) with an
    # INFO line, off by default: 4x the shorter run's tokens a batch from tiny's recipe (a review).
    for batch in (4, 40):  # 4,096 tokens: half a row; 40,960: 5 rows
        long.train.global_batch_size = None
        checkpointer.save(1 + batch, {"w": jnp.zeros(2)}, data_position=1,
                          config={**modern.to_dict(), "train": {**modern.train.to_dict(), "global_batch_size": batch}})
        checkpointer.wait_until_finished()
        if batch == 40:
            pretrain_setup.resolve_global_batch_size(long, str(tmp_path / "long"))
            assert long.train.global_batch_size == 5
            continue
        with pytest.raises(ValueError, match=r"its 4096 tokens a batch are 0\.5 rows of 8192 tokens \(config\.data"
                                             r"\.max_seq_length\), not a whole number: set config.train.global_batch"):
            pretrain_setup.resolve_global_batch_size(long, str(tmp_path / "long"))
    # A resumed run keeps the batch it trained with, whatever the shorter run says now.
    resumed = pretrain_config.get_config("modernbert-base,modern,long")
    resumed.init_checkpoint = str(shorter)
    checkpointing.Checkpointer(str(tmp_path / "long" / "checkpoints"), save_interval_steps=1, max_to_keep=1,
                               async_save=False).save(1, {"w": jnp.zeros(2)}, data_position=1,
                                                      config={**resumed.to_dict(), "train": {"global_batch_size": 4}})
    pretrain_setup.resolve_global_batch_size(resumed, str(tmp_path / "long"))
    assert resumed.train.global_batch_size == 4
    # A length past the model's positions is named as such, not as a batch of 26.2 rows that the
    # length made (a walkthrough: the batch's error came first).
    past = pretrain_config.get_config("modernbert-base,modern,long")
    past.init_checkpoint, past.data.max_seq_length = str(tmp_path / "from-a-run"), 10_000
    run_model = BertConfig.preset("modernbert-base").replace(vocab_size=784).to_dict()  # (the demo vocabulary's)
    checkpointing.Checkpointer(str(tmp_path / "from-a-run" / "checkpoints"), save_interval_steps=1, max_to_keep=1,
                               async_save=False).save(1, {"w": jnp.zeros(2)}, data_position=1,
                                                      config={**modern.to_dict(), "model": run_model})
    with pytest.raises(ValueError, match=r"^config.data.max_seq_length=10000 exceeds the model's "
                                         r"max_position_embeddings=8192$"):
        pretrain_setup.checked_model(past, str(tmp_path / "past"))


def test_a_prepared_folder_holds_out_what_it_was_prepared_with(tmp_path):
    """config.data.source=prepared reads a folder's own held-out split: its eval_fraction, not
    the config's, decides whether there is one to evaluate on."""
    from bertjax import pretrain, pretrain_setup
    from bertjax.data import prepare

    folder = str(tmp_path / "no_eval")
    config = pretrain_config.get_config("tiny")
    config.data.eval_fraction = 0.0
    prepare.ensure_prepared(config.data, folder)

    config = pretrain_config.get_config("tiny")  # the default eval_fraction 0.02 and evaluation on
    config.data.update(source="prepared", input_pattern=folder)
    with pytest.raises(ValueError, match=r"no eval documents among the corpus's \d+ \(prepared with "
                                         r"config.data.eval_fraction=0.0\); have pre-training evaluate nothing with "
                                         r"config.train.eval_every=0 \(inspect_data.py: look at --split=train\), or "
                                         r"delete that folder and prepare again"):
        pretrain.train_and_evaluate(config, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run" / "checkpoints")
    config.data.eval_fraction = 0.0  # no effect on a prepared folder: not refused for it
    pretrain_setup.validate_config(config, pretrain_setup.model_config(config, 786), mesh_shape=(8, 1, 1))

"""BertConfig.resolve: a run's model config from unset fields, a checkpoint and the platform."""

import pytest

from bertjax.models.config import BertConfig, resolve


def test_unset_dtype_is_bfloat16_on_accelerators_and_float32_on_cpu():
    assert resolve({"dtype": None}, preset="tiny", accelerator=True).dtype == "bfloat16"
    assert resolve({"dtype": None}, preset="tiny", accelerator=False).dtype == "float32"
    assert resolve({"dtype": "float32"}, preset="tiny", accelerator=True).dtype == "float32"  # explicit wins
    assert resolve({}, preset="tiny", accelerator=True).param_dtype == "float32"  # master weights stay f32


def test_unset_matmul_precision_is_bfloat16_only_on_cpus_with_amx():
    assert resolve({}, preset="tiny", bf16_matmul_units=True).matmul_precision == "bfloat16"
    assert resolve({}, preset="tiny").matmul_precision == "default"
    assert resolve({}, preset="tiny", accelerator=True, bf16_matmul_units=True).matmul_precision == "default"
    explicit = resolve({"matmul_precision": "default"}, preset="tiny", bf16_matmul_units=True)
    assert explicit.matmul_precision == "default"  # explicit wins
    with pytest.raises(ValueError, match="^config.model.matmul_precision must be one of"):
        resolve({"matmul_precision": "fp8"}, preset="tiny")


def test_a_checkpoint_gives_its_architecture_and_refuses_contradictions():
    original = BertConfig.preset("mini", vocab_size=100, hidden_act="gelu_tanh", layer_norm_eps=1e-7,
                                 hidden_dropout_prob=0.2)
    run = resolve({"hidden_act": None, "layer_norm_eps": None, "scan_layers": True}, checkpoint=original)
    assert (run.hidden_size, run.num_hidden_layers, run.vocab_size) == (256, 4, 100)
    assert (run.hidden_act, run.layer_norm_eps, run.hidden_dropout_prob, run.scan_layers) == ("gelu_tanh", 1e-7,
                                                                                               0.2, True)
    with pytest.raises(ValueError, match="config.model.hidden_act='gelu' but the checkpoint has hidden_act='gelu_tanh'"):
        resolve({"hidden_act": "gelu"}, checkpoint=original)
    # A value no config takes is named so, not as the checkpoint's other value (a walkthrough).
    with pytest.raises(ValueError, match=r"config.model.hidden_act must be one of \('gelu', .*\), got 'gelu_fast'"):
        resolve({"hidden_act": "gelu_fast"}, checkpoint=original)
    with pytest.raises(ValueError, match="unknown BertConfig keys"):
        resolve({"hidden_sise": 3})


def test_a_modern_checkpoints_pooling_may_be_the_cls_vector_or_the_mean():
    """The modern head's weights read the [CLS] vector or the tokens' mean alike (Hugging Face's
    classifier_pooling), yet the other was refused as another architecture (a review); the
    original BERT's tanh pooler is another set of weights, and stays refused."""
    modern = BertConfig.preset("modernbert-tiny")
    assert modern.pooler == "cls" and resolve({"pooler": "mean"}, checkpoint=modern).pooler == "mean"
    assert resolve({"pooler": "cls"}, checkpoint=modern.replace(pooler="mean")).pooler == "cls"
    assert resolve({}, checkpoint=modern.replace(pooler="mean")).pooler == "mean"
    with pytest.raises(ValueError, match="config.model.pooler='tanh' but the checkpoint has pooler='cls'"):
        resolve({"pooler": "tanh"}, checkpoint=modern)


def test_a_rotary_checkpoints_context_can_grow_and_idle_position_settings_are_refused(caplog):
    """Rotary positions hold no weights, so a context extension may raise max_position_embeddings
    past the checkpoint's (it was refused, so the larger theta could not lengthen the context: a
    review); a learned table's stays fixed. A window, theta or layer pattern set where it changes
    nothing is refused rather than silently ignored."""
    modern = BertConfig.preset("modernbert-tiny")
    with caplog.at_level("WARNING"):
        longer = resolve({"rope_theta": 640_000.0, "max_position_embeddings": 4096}, checkpoint=modern)
    assert (longer.max_position_embeddings, longer.rope_theta) == (4096, 640_000.0)
    assert "max_position_embeddings=4096 replaces the checkpoint's 1024 (as a context extension does)" in caplog.text
    with pytest.raises(ValueError, match="max_position_embeddings=1024 but the checkpoint has max_position_embeddings"):
        resolve({"max_position_embeddings": 1024}, checkpoint=BertConfig.preset("tiny"))
    with pytest.raises(ValueError, match=r"config.model.global_attention_every=3 has no effect with attention_window=0"):
        resolve({"global_attention_every": 3, "position_embedding": "rope"}, preset="tiny")
    with pytest.raises(ValueError, match=r"local_rope_theta=1234.0 has no effect with attention_window=0"):
        resolve({"local_rope_theta": 1234.0, "position_embedding": "rope"}, preset="tiny")
    with pytest.raises(ValueError, match=r"rope_theta=5.0 has no effect with position_embedding='absolute'"):
        resolve({"rope_theta": 5.0}, preset="tiny")
    assert resolve({"local_rope_theta": 20_000.0}, preset="modernbert-tiny").local_rope_theta == 20_000.0
    with pytest.raises(ValueError, match=r"lstm_hidden_size=256 has no effect with tagging_head='linear'"):
        resolve({"lstm_hidden_size": 256}, preset="tiny")
    assert resolve({"lstm_hidden_size": 256, "tagging_head": "bilstm"}, preset="tiny").lstm_hidden_size == 256


def test_a_config_describes_its_architecture_in_words():
    """What a pre-training run's start-up line names: the modern switches beside the sizes."""
    assert BertConfig.preset("base").describe() == "12 layers of 768 (12 heads)"
    assert BertConfig.preset("modernbert-tiny").describe() == (
        "4 layers of 128 (2 heads), rotary positions, a 16-token window in 2 of 4 layers, pre-norm, a gated MLP")

"""BERT models: the encoder, its configuration and the task heads."""

from bertjax.models.bert import BertEncoder, stack_layers, unstack_layers
from bertjax.models.config import BertConfig, PRESETS

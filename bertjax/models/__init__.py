"""BERT models: the encoder, its configuration and the task heads."""

from bertjax.models.bert import BertEncoder, stack_layers, unstack_layers
from bertjax.models.config import BertConfig, PRESETS
from bertjax.models.heads import (BertForMultipleChoice, BertForPreTraining, BertForQuestionAnswering,
                                  BertForSequenceClassification, BertForTokenClassification,
                                  classification_loss, multiple_choice_loss, pretraining_loss, span_loss,
                                  token_classification_loss)

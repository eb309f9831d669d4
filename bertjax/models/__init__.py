"""BERT models: the encoder, its configuration and the task heads."""

from bertjax.models.bert import BertEncoder, stack_layers, unstack_layers
from bertjax.models.config import BertConfig, PRESETS
from bertjax.models.heads import (FEATURE_HEADS, BertForMultipleChoice, BertForPreTraining,
                                  BertForQuestionAnswering, BertForSequenceClassification,
                                  BertForTokenClassification, FrozenEncoder, classification_loss, classification_sums,
                                  example_counts, mean_metrics, multiple_choice_loss,
                                  multiple_choice_sums, pretraining_counts, pretraining_loss, pretraining_loss_terms,
                                  pretraining_sums, span_loss, span_sums, token_classification_loss,
                                  token_classification_sums)

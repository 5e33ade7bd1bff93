"""Encoders and models built from the attention layers."""

from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
from headsize_tf.modeling.encoder_checkpoint import (
    AttentionMismatch,
    attention_mismatches,
    check_attention_checkpoint,
    restore_encoder,
)
from headsize_tf.modeling.transformer_block import HeadsizeTransformerBlock

__all__ = [
    "AttentionMismatch",
    "HeadsizeBertEncoder",
    "HeadsizeTransformerBlock",
    "attention_mismatches",
    "check_attention_checkpoint",
    "restore_encoder",
]

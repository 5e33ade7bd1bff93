"""Encoders and models built from the attention layers."""

from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
from headsize_tf.modeling.transformer_block import HeadsizeTransformerBlock

__all__ = ["HeadsizeBertEncoder", "HeadsizeTransformerBlock"]

"""Rebuilding a `BertBackbone` with other attention, keeping everything else.

Conversion to collaborative heads and physical head removal both produce a
backbone whose attention spec differs (kind, per-layer head counts) while the
embeddings, LayerNorms, feed-forward nets and pooler are copied unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from headsize_tf.core.spec import AttentionSpec
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone


def non_attention_layers(backbone: BertBackbone) -> list[keras.layers.Layer]:
    """The weight-carrying layers other than attention, in a fixed order.

    Two backbones of the same shape but different attention have the same
    list, which is how conversions copy everything but attention.
    """
    layers = [
        backbone.token_embedding,
        backbone.position_embedding,
        backbone.segment_embedding,
        backbone.embeddings_layer_norm,
    ]
    for block in backbone.transformer_layers:
        layers += [
            block._self_attention_layer_norm,
            block._feedforward_layer_norm,
            block._feedforward_intermediate_dense,
            block._feedforward_output_dense,
        ]
    layers.append(backbone.pooled_dense)
    return layers


def with_attention(
    backbone: BertBackbone, attention: AttentionSpec | Mapping[str, Any]
) -> BertBackbone:
    """A new backbone with `attention` and `backbone`'s non-attention weights.

    The attention layers of the result are freshly initialised: the caller
    writes them (see `headsize_tf.keras3.reparam`, `headsize_tf.keras3.pruning`).
    """
    config = backbone.get_config()
    config["attention"] = AttentionSpec.coerce(attention).to_dict()
    new = BertBackbone.from_config(config)
    mine, theirs = non_attention_layers(new), non_attention_layers(backbone)
    for dst, src in zip(mine, theirs, strict=True):
        dst.set_weights(src.get_weights())
    return new

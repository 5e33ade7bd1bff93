"""Builds the Keras 3 attention layer of an `AttentionSpec`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headsize_tf.core.spec import AttentionSpec
from headsize_tf.keras3.layers.collaborative_attention import CollaborativeAttention
from headsize_tf.keras3.layers.fixed_head_attention import FixedHeadAttention
from headsize_tf.keras3.layers.grouped_attention import GroupedAttention
from headsize_tf.keras3.layers.head_attention import HeadAttentionBase
from headsize_tf.keras3.layers.latent_attention import LatentAttention
from headsize_tf.keras3.layers.standard_attention import StandardAttention

ATTENTION_CLASSES: dict[str, type[HeadAttentionBase]] = {
    "standard": StandardAttention,
    "fixed_head": FixedHeadAttention,
    "collaborative": CollaborativeAttention,
    "grouped": GroupedAttention,
    "latent": LatentAttention,
}


def make_attention(
    spec: AttentionSpec | Mapping[str, Any], **layer_kwargs: Any
) -> HeadAttentionBase:
    """The Keras 3 layer of a (scalar) `AttentionSpec`, with `layer_kwargs` layer arguments.

    The Keras 3 mirror of `headsize_tf.layers.factory.make_attention`.

    Args:
      spec: An `AttentionSpec` (or a dict of its fields) with one head count
        and head size (use `spec.for_layer(i)` for per-layer specs).
      **layer_kwargs: Arguments every kind takes (`dropout`, initializers,
        `name`, ...).

    Example:

    >>> make_attention(AttentionSpec("fixed_head", num_heads=8, head_size=32), name="attn")
    """
    spec = AttentionSpec.coerce(spec)
    return ATTENTION_CLASSES[spec.kind](**spec.layer_kwargs(), **layer_kwargs)

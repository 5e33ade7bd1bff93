"""Builds the attention layer of an `AttentionSpec` (used by every model)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headsize_tf.core.spec import AttentionSpec, SpecError
from headsize_tf.layers.collaborative_attention import CollaborativeAttention
from headsize_tf.layers.fixed_head_attention import FixedHeadAttention
from headsize_tf.layers.grouped_attention import GroupedAttention
from headsize_tf.layers.latent_attention import LatentAttention
from headsize_tf.layers.standard_attention import StandardAttention

ATTENTION_CLASSES: dict[str, type] = {
    "standard": StandardAttention,
    "fixed_head": FixedHeadAttention,
    "collaborative": CollaborativeAttention,
    "grouped": GroupedAttention,
    "latent": LatentAttention,
}


def make_attention(spec: AttentionSpec | Mapping[str, Any], **common: Any):
    """The layer of a (scalar) `AttentionSpec`, with `common` layer arguments.

    Args:
      spec: An `AttentionSpec` (or a dict of its fields) with one head count
        and head size (use `spec.for_layer(i)` for per-layer specs).
      **common: Arguments every kind takes (`dropout`, initializers, `name`, ...).

    Example:

    >>> make_attention(AttentionSpec("fixed_head", num_heads=8, head_size=32), name="attn")
    """
    spec = AttentionSpec.coerce(spec)
    if spec.rope_max_wavelength is not None:
        raise SpecError(
            f"rope_max_wavelength={spec.rope_max_wavelength!r}: rotary positions are built on "
            "the Keras 3 front (headsize_tf.keras3.layers, DecoderLM); the tf_keras layers have "
            "none."
        )
    return ATTENTION_CLASSES[spec.kind](**spec.layer_kwargs(), **common)

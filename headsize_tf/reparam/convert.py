"""Rewrite trained tf_keras multi-head attention as collaborative attention.

The numerics (Cordonnier, Loukas and Jaggi 2020, Section 4: CP of the stacked
W_Q^(h) W_K^(h)^T, content bias W_K^(h) b_Q^(h), the original softmax scale)
live in the framework-neutral `headsize_tf.core.convert`; this module reads a
tf_keras layer's weights into the core layout and writes the result into a
`CollaborativeAttention`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tf_keras

from headsize_tf.core.convert import (
    METHODS,
    ConversionReport,
    check_head_weights,
    collaborative_weights,
    convert_weights,
)
from headsize_tf.layers import CollaborativeAttention
from headsize_tf.layers.roles import assign_weights, kind_of, numpy_weights

__all__ = [
    "METHODS",
    "ConversionReport",
    "assign_collaborative",
    "attention_weights",
    "collaborative_weights",
    "convert_layer_weights",
    "to_collaborative",
]


def attention_weights(layer: tf_keras.layers.Layer) -> dict[str, np.ndarray | None]:
    """Per-head numpy weights of a built (non-collaborative) multi-head attention layer.

    Returns a dict with `query_kernel` `[d, h, p]`, `query_bias` `[h, p]`,
    `key_kernel` `[e, h, p]`, `key_bias`, `value_kernel` `[e, h, pv]`,
    `value_bias`, `output_kernel` `[h, pv, out]`, `output_bias` `[out]` and
    `head_gates` `[h]` (biases None when the layer has none), read through
    `headsize_tf.layers.roles`.
    """
    if not isinstance(layer, tf_keras.layers.MultiHeadAttention) or kind_of(layer) != "standard":
        raise ValueError(
            f"Layer {getattr(layer, 'name', layer)!r} ({type(layer).__name__}) is not a standard "
            "multi-head attention layer; expected StandardAttention, FixedHeadAttention or a "
            "tf_keras MultiHeadAttention."
        )
    weights = numpy_weights(layer)
    check_head_weights(weights, layer.name)
    return weights


def assign_collaborative(layer: CollaborativeAttention, weights: dict[str, Any]) -> None:
    """Writes `collaborative_weights` output into a built `CollaborativeAttention`.

    The same writer as every other kind (`headsize_tf.layers.roles.assign_weights`).
    """
    if not isinstance(layer, CollaborativeAttention):
        raise ValueError(
            f"Layer {getattr(layer, 'name', layer)!r} ({type(layer).__name__}) is not a "
            "CollaborativeAttention."
        )
    assign_weights(layer, weights)


def convert_layer_weights(
    layer: tf_keras.layers.Layer,
    shared_key_dim: int,
    *,
    method: str = "als",
    max_iter: int = 100,
    tol: float = 1e-5,
    tolerance: float | None = None,
    seed: int = 0,
) -> tuple[dict[str, Any], ConversionReport]:
    """Collaborative weights for `layer` plus a report; warns above `tolerance`."""
    return convert_weights(
        attention_weights(layer),
        shared_key_dim,
        name=layer.name,
        method=method,
        max_iter=max_iter,
        tol=tol,
        tolerance=tolerance,
        seed=seed,
    )


def to_collaborative(
    layer: tf_keras.layers.Layer,
    shared_key_dim: int,
    **kwargs: Any,
) -> tuple[CollaborativeAttention, ConversionReport]:
    """A new built `CollaborativeAttention` equivalent to `layer` (exact at full rank).

    Args:
      layer: A built `StandardAttention`, `FixedHeadAttention` or tf_keras
        `MultiHeadAttention` (attention over axis 1 of rank-3 inputs).
      shared_key_dim: The shared query/key size `D` (CP rank).
      **kwargs: `method` ("als" or "tensorly"), `max_iter`, `tol`,
        `tolerance` (warn above this relative error), `seed`.

    Returns:
      The collaborative layer (same name, dropout, bias use, output size;
      softmax scale 1/sqrt(original head size)) and a `ConversionReport`.
    """
    converted, report = convert_layer_weights(layer, shared_key_dim, **kwargs)
    heads = converted["mixing"].shape[0]
    head_size = converted["value_kernel"].shape[2]
    new = CollaborativeAttention(
        num_heads=heads,
        shared_key_dim=int(shared_key_dim),
        head_size=head_size,
        mixing_initializer="concatenate" if shared_key_dim % heads == 0 else "uniform",
        dropout=layer._dropout,
        use_bias=layer._use_bias,
        output_shape=layer._output_shape,
        name=layer.name,
        dtype=layer.dtype_policy,
    )
    new._build_from_signature(layer._query_shape, layer._value_shape, layer._key_shape)
    assign_collaborative(new, converted)
    return new, report

"""Rewrite trained Keras 3 multi-head attention as collaborative attention.

The numerics are the framework-neutral `headsize_tf.core.convert` (a CP of
the stacked W_Q^(h) W_K^(h)^T, exact at full rank; the query bias becomes the
content bias W_K^(h) b_Q^(h); the original softmax scale is kept), the same
code the tf_keras front uses. This module reads Keras 3 layers into the
core's layout and writes the result into `CollaborativeAttention` layers.
"""

from __future__ import annotations

from typing import Any

import keras

from headsize_tf.core.convert import ConversionReport, convert_weights
from headsize_tf.core.spec import AttentionSpec, SpecError
from headsize_tf.keras3.layers import CollaborativeAttention
from headsize_tf.keras3.layers.roles import assign_weights, kind_of, numpy_weights
from headsize_tf.keras3.modeling.surgery import AttentionModel, with_attention


def _standard_weights(layer: keras.layers.Layer) -> dict[str, Any]:
    if kind_of(layer) == "collaborative":
        raise ValueError(
            f"Layer {layer.name!r} is already collaborative; convert standard or fixed-head "
            "attention."
        )
    return numpy_weights(layer)


def to_collaborative(
    layer: keras.layers.Layer, shared_key_dim: int, **kwargs: Any
) -> tuple[CollaborativeAttention, ConversionReport]:
    """A new built `CollaborativeAttention` equivalent to `layer` (exact at full rank).

    Args:
      layer: A built Keras 3 `StandardAttention`, `FixedHeadAttention` or
        `keras.layers.MultiHeadAttention` (rank-3 inputs, attention over axis 1).
      shared_key_dim: The shared query/key size `D` (CP rank).
      **kwargs: `method` ("als" or "tensorly"), `max_iter`, `tol`,
        `tolerance` (warn above this relative error), `seed`.

    Returns:
      The collaborative layer (same name, dropout, bias use; softmax scale
      1/sqrt(original head size)) and a `ConversionReport`.

    Example:

    >>> layer = StandardAttention(num_heads=4)
    >>> _ = layer(x, x)
    >>> collaborative, report = to_collaborative(layer, shared_key_dim=16)
    """
    converted, report = convert_weights(
        _standard_weights(layer), shared_key_dim, name=layer.name, **kwargs
    )
    _, heads, head_size = converted["value_kernel"].shape
    new = CollaborativeAttention(
        num_heads=heads,
        shared_key_dim=int(shared_key_dim),
        head_size=head_size,
        mixing_initializer="concatenate" if shared_key_dim % heads == 0 else "uniform",
        dropout=layer.dropout,
        use_bias=layer.use_bias,
        output_shape=layer._output_shape,
        name=layer.name,
        dtype=layer.dtype_policy,
    )
    # Rank-3 inputs: the input widths are the kernels' first axes.
    widths = {
        role: converted_width
        for role, converted_width in (
            ("query", layer._query_dense.kernel.shape[0]),
            ("key", layer._key_dense.kernel.shape[0]),
            ("value", layer._value_dense.kernel.shape[0]),
        )
    }
    new.build(
        (None, None, widths["query"]), (None, None, widths["value"]), (None, None, widths["key"])
    )
    assign_weights(new, converted)
    return new, report


def compress_backbone(
    backbone: AttentionModel, shared_key_dim: int, **kwargs: Any
) -> tuple[AttentionModel, list[ConversionReport]]:
    """A `BertBackbone` (or `CausalLM`) with collaborative heads sharing a `shared_key_dim` space.

    Every block's attention is converted layer by layer (`to_collaborative`'s
    numerics); everything else is copied. At `shared_key_dim >= heads *
    head_size` the result computes exactly what `backbone` computes.

    Args:
      backbone: A standard or fixed-head `BertBackbone` or `CausalLM` (per-layer heads
        allowed).
      shared_key_dim: `D`, between 1 and the full rank heads x head size.
      **kwargs: As `to_collaborative`.

    Returns:
      The collaborative backbone and one `ConversionReport` per layer.
    """
    spec = backbone.attention_spec
    if spec.kind == "collaborative":
        raise ValueError("The backbone already has collaborative attention.")
    layers = backbone.attention_layers
    head_sizes = [layer.head_size for layer in layers]
    heads = [layer.num_heads for layer in layers]
    full_rank = max(h * p for h, p in zip(heads, head_sizes, strict=True))
    if (
        isinstance(shared_key_dim, bool)
        or not isinstance(shared_key_dim, int)
        or not 1 <= shared_key_dim <= full_rank
    ):
        raise SpecError(
            f"shared_key_dim must be an int in [1, {full_rank}] (the full rank heads x head "
            f"size); got {shared_key_dim!r}."
        )
    per_layer = len(set(heads)) > 1 or len(set(head_sizes)) > 1
    new_spec = AttentionSpec(
        "collaborative",
        num_heads=tuple(heads) if per_layer else heads[0],
        head_size=tuple(head_sizes) if per_layer else head_sizes[0],
        shared_key_dim=shared_key_dim,
        mixing_initializer="uniform",
    )
    new = with_attention(backbone, new_spec)
    reports = []
    for source, target in zip(layers, new.attention_layers, strict=True):
        converted, report = convert_weights(
            _standard_weights(source), shared_key_dim, name=source.name, **kwargs
        )
        assign_weights(target, converted)
        reports.append(report)
    return new, reports


__all__ = ["ConversionReport", "compress_backbone", "to_collaborative"]

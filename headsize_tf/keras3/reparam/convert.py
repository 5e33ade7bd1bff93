"""Rewrite trained Keras 3 multi-head attention as shared heads: collaborative, grouped, latent.

The numerics are framework-neutral, the same code the tf_keras front uses:
`headsize_tf.core.conversion.ConversionTarget` (one driver for every kind)
over `headsize_tf.core.convert` (collaborative: a CP of the stacked
W_Q^(h) W_K^(h)^T, exact at full rank; the query bias becomes the content
bias; the original softmax scale is kept) and `headsize_tf.core.kv_sharing`
(grouped key/value heads, a shared key/value latent). This module reads
Keras 3 layers into the core's layout and writes the result into the new
model's layers.
"""

from __future__ import annotations

from typing import Any

import keras

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.convert import ConversionReport, convert_weights
from headsize_tf.core.spec import ResolvedAttention, SpecError
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
        query_scale=getattr(layer, "_query_scale", None),  # Gemma 2 and 3 27B's, if any.
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


def _resolved(layer: keras.layers.Layer) -> ResolvedAttention:
    """A source layer's sizes (multi-head or grouped K/V) and rotary settings."""
    kind = kind_of(layer)
    if kind not in ("standard", "grouped"):
        raise SpecError(
            f"Layer {layer.name!r} has {kind} attention; only multi-head or grouped K/V "
            "attention converts."
        )
    rope = {}
    if getattr(layer, "uses_rope", False):
        rope = {
            "rope_max_wavelength": layer._rope_max_wavelength,
            "rope_scaling": layer._rope_scaling,
            "rope_sets": layer.rope_sets,
        }
    return ResolvedAttention(
        kind,
        layer.num_heads,
        layer.head_size,
        layer.value_dim,
        num_kv_heads=getattr(layer, "num_kv_heads", None),
        **rope,
    )


def convert_model(
    model: AttentionModel,
    target: ConversionTarget,
    covariances: list[Any] | None = None,
    **kwargs: Any,
) -> tuple[AttentionModel, list[dict[str, Any]]]:
    """`model` (a `CausalLM`, `DecoderLM` or `BertBackbone`) with its attention converted to `target`.

    The one conversion driver of the Keras 3 front: the new model has
    `target.spec(...)` as its attention (per-layer lists where layers
    differ, e.g. after pruning) and `model`'s other weights; each attention
    layer gets `target.convert_layer` of the original's weights. Grouped at
    `num_kv_heads = heads`, latent at full rank and collaborative at
    `heads x head size` compute exactly what `model` computes.

    Args:
      model: A multi-head (standard or fixed-head) `CausalLM` or `BertBackbone`, or a
        `DecoderLM` with multi-head or grouped K/V (rotary: grouped by "mean" or
        "svd_values", latent with
        decoupled rotary keys, `ConversionTarget.rope_frequencies`).
      target: What to convert into, e.g. `ConversionTarget("grouped", 2)`.
      covariances: Latent targets and grouped "svd" / "svd_values": each layer's
        attention-input second moment (`keras3.reparam.calibration`), for an SVD
        of the activations; None: of the weights.
      **kwargs: Collaborative CP options (`max_iter`, `tol`, `tolerance`, `seed`).

    Returns:
      The converted model and one report dict per layer.

    Example:

    >>> lm = CausalLM(vocabulary_size=100, num_layers=2, hidden_dim=32,
    ...               attention={"num_heads": 4}, max_sequence_length=64)
    >>> grouped, reports = convert_model(lm, ConversionTarget("grouped", 1))
    >>> grouped.attention_spec.num_kv_heads
    1
    """
    layers = model.attention_layers
    resolved = [_resolved(layer) for layer in layers]
    for layer in layers:
        if getattr(layer, "key_norm", None) is not None:
            target.check_query_key_norms(layer.name)  # Before the new model is built.
    if getattr(model, "query_scale", None) is not None and target.rope_components is not None:
        raise SpecError(
            f"The model's softmax scale is its own (query_scale={model.query_scale:.6g}: Gemma 2 "
            "and 3 27B), while rotated RoPE re-scales queries to wider heads; convert to grouped "
            "K/V or to a partial-RoPE latent."
        )
    width = min(int(layer._value_dense.kernel.shape[0]) for layer in layers)
    spec = model.attention_spec  # The model's own RoPE (Gemma 3's global layers').
    rope = (spec.rope_max_wavelength, spec.rope_scaling) if spec.rope_max_wavelength else None
    new = with_attention(model, target.spec(resolved, width=width, rope=rope))
    reports = []
    for index, (source, dest) in enumerate(zip(layers, new.attention_layers, strict=True)):
        converted, report = target.convert_layer(
            numpy_weights(source),
            index,
            name=source.name,
            source=resolved[index],
            covariance=None if covariances is None else covariances[index],
            **kwargs,
        )
        assign_weights(dest, converted)
        reports.append(report)
    return new, reports


def compress_backbone(
    backbone: AttentionModel, shared_key_dim: int, **kwargs: Any
) -> tuple[AttentionModel, list[ConversionReport]]:
    """A `BertBackbone` (or `CausalLM`) with collaborative heads sharing a `shared_key_dim` space.

    `convert_model` with a collaborative `ConversionTarget`. At
    `shared_key_dim >= heads * head_size` the result computes exactly what
    `backbone` computes.

    Args:
      backbone: A standard or fixed-head `BertBackbone` or `CausalLM` (per-layer heads
        allowed).
      shared_key_dim: `D`, between 1 and the full rank heads x head size.
      **kwargs: As `to_collaborative` (`method`, `max_iter`, `tol`, `tolerance`, `seed`).

    Returns:
      The collaborative backbone and one `ConversionReport` per layer.
    """
    if backbone.attention_spec.kind == "collaborative":
        raise ValueError("The backbone already has collaborative attention.")
    layers = backbone.attention_layers
    full_rank = max(layer.num_heads * layer.head_size for layer in layers)
    if (
        isinstance(shared_key_dim, bool)
        or not isinstance(shared_key_dim, int)
        or not 1 <= shared_key_dim <= full_rank
    ):
        raise SpecError(
            f"shared_key_dim must be an int in [1, {full_rank}] (the full rank heads x head "
            f"size); got {shared_key_dim!r}."
        )
    method = kwargs.pop("method", None)
    target = ConversionTarget("collaborative", shared_key_dim, method)
    new, reports = convert_model(backbone, target, **kwargs)
    return new, [ConversionReport(**report) for report in reports]


__all__ = [
    "ConversionReport",
    "ConversionTarget",
    "compress_backbone",
    "convert_model",
    "to_collaborative",
]

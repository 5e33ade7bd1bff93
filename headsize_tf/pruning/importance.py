"""Head importance scores (Michel, Levy and Neubig, 2019).

Every attention layer has per-head gates `xi_h` (all ones by default, folded
into the output projection). The importance of head h is the sensitivity of
the loss to its gate,

    I_h = E_x | dL(x) / d xi_h |,

estimated as the paper's code does: for each *batch*, the absolute value of
the gradient of that batch's loss (as `loss_fn` returns it, usually a mean
over the batch) with respect to the gates, summed over batches and divided by
the number of tokens seen (the sum of `input_mask`, or batch * length when
the inputs have no mask). Optionally (on by default, as in the paper's code)
each layer's scores are divided by their L2 norm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from headsize_tf.core.pruning_plan import normalize_importance
from headsize_tf.layers.head_attention import HeadAttentionBase
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder


def attention_layers_of(model: tf.Module) -> list[HeadAttentionBase]:
    """Our attention layers inside `model`, in creation order (built ones only)."""
    if isinstance(model, HeadAttentionBase):
        return [model]
    encoder = getattr(model, "attention_layers", None)
    if encoder is not None and not callable(encoder):
        return list(encoder)
    layers = [m for m in model.submodules if isinstance(m, HeadAttentionBase)]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} has no StandardAttention / FixedHeadAttention / "
            "CollaborativeAttention layers to score."
        )
    return layers


def _count_tokens(inputs: Any) -> int:
    if isinstance(inputs, dict) and "input_mask" in inputs:
        return int(np.sum(np.asarray(inputs["input_mask"])))
    first = inputs
    while isinstance(first, dict | list | tuple):
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    shape = np.shape(first)
    return int(np.prod(shape[:2])) if len(shape) >= 2 else int(shape[0])


def head_importance(
    model: Callable,
    dataset: Iterable[tuple[Any, Any]],
    loss_fn: Callable[[Any, Any], tf.Tensor],
    layers: Sequence[HeadAttentionBase] | None = None,
    normalize: bool = True,
) -> np.ndarray:
    """`[layers, heads]` importance scores `E |dL/dxi_h|` (see the module doc).

    Args:
      model: Callable as `model(inputs, training=False)`.
      dataset: Iterable of `(inputs, targets)` batches (deterministic order
        gives deterministic scores).
      loss_fn: `loss_fn(targets, outputs)` -> scalar loss of the batch.
      layers: Attention layers to score (default: all in `model`).
      normalize: Divide each layer's scores by their L2 norm.

    Returns:
      float64 array `[len(layers), max heads]` (layers with fewer heads are
      padded with NaN).
    """
    layers = list(layers) if layers is not None else attention_layers_of(model)
    gates = [layer.head_gates for layer in layers]
    if any(g is None for g in gates):
        raise ValueError("Every attention layer must be built (call the model once) first.")

    @tf.function(reduce_retracing=True, autograph=False)
    def gate_gradients(inputs, targets):
        with tf.GradientTape() as tape:
            tape.watch(gates)
            loss = loss_fn(targets, model(inputs, training=False))
        return tape.gradient(loss, gates)

    totals = [np.zeros(g.shape, np.float64) for g in gates]
    tokens = 0
    batches = 0
    for inputs, targets in dataset:
        grads = gate_gradients(inputs, targets)
        for total, grad in zip(totals, grads, strict=True):
            if grad is not None:
                total += np.abs(grad.numpy().astype(np.float64))
        tokens += _count_tokens(inputs)
        batches += 1
    if batches == 0:
        tokens = 0
    return normalize_importance(totals, tokens, normalize=normalize)


def head_columns(model) -> tuple[list[list[int]], int]:
    """Per attention layer of `model`, the mask column of each head it holds, and the width.

    A `HeadsizeBertEncoder`'s columns are the original head numbers (removed
    heads keep their columns, at 0); other models' are the head positions.
    """
    if isinstance(model, HeadsizeBertEncoder):
        model.build_weights()
        return [b.kept_heads for b in model.transformer_layers], model.attention_spec.num_heads
    layers = attention_layers_of(model)
    return [list(range(layer.num_heads)) for layer in layers], max(
        layer.num_heads for layer in layers
    )


def mask_importance(
    model: Callable,
    dataset: Iterable[tuple[Any, Any]],
    loss_fn: Callable[[Any, Any], tf.Tensor],
    attention: Any = None,
    normalize: bool = True,
) -> np.ndarray:
    """`head_importance` of `attention`'s layers (default: `model`'s) laid out as
    `pruning.remove.head_mask(attention)`: NaN where a column has no head."""
    attention = model if attention is None else attention
    columns, width = head_columns(attention)
    layers = attention_layers_of(attention)
    scores = head_importance(model, dataset, loss_fn, layers=layers, normalize=normalize)
    full = np.full([len(columns), width], np.nan)
    for i, cols in enumerate(columns):
        full[i, cols] = scores[i, : len(cols)]
    return full

"""Head importance E|dL/dxi_h| (Michel, Levy and Neubig, 2019) for Keras 3 models.

The same estimator as the tf_keras front (`headsize_tf.pruning.importance`):
for each batch, the absolute gradient of the batch loss with respect to every
attention layer's head gates, summed over batches, divided by the tokens
seen, and (by default) L2-normalised per layer by the framework-neutral
`headsize_tf.core.pruning_plan.normalize_importance`.

Keras 3 has no backend-neutral gradient API, so the gradient is taken with
the backend's own (`headsize_tf.keras3.lm_training.variable_gradients`:
`tf.GradientTape` on TensorFlow, `jax.grad` on JAX). Other backends raise a
clear error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import keras
import numpy as np

from headsize_tf.core.pruning_plan import normalize_importance
from headsize_tf.keras3.layers import HeadAttentionBase
from headsize_tf.keras3.lm_training import variable_gradients


def attention_layers_of(model: Any) -> list[HeadAttentionBase]:
    """Our attention layers in `model` (its `attention_layers`, or a search)."""
    if isinstance(model, HeadAttentionBase):
        return [model]
    layers = getattr(model, "attention_layers", None)
    if layers is not None and not callable(layers):
        return list(layers)
    found = [layer for layer in model._flatten_layers() if isinstance(layer, HeadAttentionBase)]
    if not found:
        raise ValueError(
            f"{type(model).__name__} has no Keras 3 StandardAttention / FixedHeadAttention / "
            "CollaborativeAttention layers to score."
        )
    return found


def count_tokens(inputs: Any) -> int:
    """Tokens in a batch: the padding mask's sum, else batch x length."""
    if isinstance(inputs, dict):
        for key in ("padding_mask", "input_mask"):
            if key in inputs:
                return int(np.sum(keras.ops.convert_to_numpy(inputs[key])))
    first = inputs
    while isinstance(first, dict | list | tuple):
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    shape = np.shape(first)
    return int(np.prod(shape[:2])) if len(shape) >= 2 else int(shape[0])


def head_importance(
    model: Callable,
    dataset: Iterable[tuple[Any, Any]],
    loss_fn: Callable[[Any, Any], Any],
    layers: Sequence[HeadAttentionBase] | None = None,
    normalize: bool = True,
) -> np.ndarray:
    """`[layers, heads]` importance scores `E |dL/dxi_h|` (see the module doc).

    Args:
      model: A Keras 3 model (or callable) as `model(inputs, training=False)`.
      dataset: Iterable of `(inputs, targets)` batches (numpy or backend
        tensors; a deterministic order gives deterministic scores).
      loss_fn: `loss_fn(targets, outputs)` -> scalar loss of the batch
        (e.g. a `keras.losses.Loss`).
      layers: Attention layers to score (default: all in `model`).
      normalize: Divide each layer's scores by their L2 norm.

    Returns:
      float64 `[len(layers), max heads]` (NaN-padded for layers with fewer heads).

    Example:

    >>> loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    >>> scores = head_importance(classifier, [(x, y)], loss)
    """
    layers = list(layers) if layers is not None else attention_layers_of(model)
    gates = [layer.head_gates for layer in layers]
    if any(g is None for g in gates):
        raise ValueError("Every attention layer must be built (call the model once) first.")
    grads_of = variable_gradients(model, loss_fn, gates)
    totals = [np.zeros(tuple(g.shape), np.float64) for g in gates]
    tokens = 0
    for inputs, targets in dataset:
        for total, grad in zip(totals, grads_of(inputs, targets), strict=True):
            total += np.abs(np.asarray(grad, np.float64))
        tokens += count_tokens(inputs)
    return normalize_importance(totals, tokens, normalize=normalize)

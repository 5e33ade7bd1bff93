"""Sharding attention by heads with `keras.distribution` (Keras 3; JAX backend).

Keras 3 scales a model over devices with `keras.distribution`: `DataParallel`
replicates the weights and splits the batch; `ModelParallel` places each
variable by a `LayoutMap` from variable paths to axes of a `DeviceMesh`.
Attention splits naturally by heads: heads are independent until the output
projection sums them, so sharding the head axis of the query, key and value
kernels (`[width, heads, head size]`) and of the output kernel (`[heads, head
size, width]`) puts whole heads on each device, and XLA inserts one reduction
after the output projection (Megatron-style tensor parallelism).

`head_layout_map(model, mesh)` writes that `LayoutMap` for every attention
layer of a built model (ours, stock `keras.layers.MultiHeadAttention` and its
subclasses, e.g. keras-hub's), per-layer head counts included. Grouped K/V
layers (Llama's GQA) shard their key/value heads with their groups of query
heads, where the model axis divides the key/value heads. A layer whose head
count the mesh's model axis does not divide stays replicated, and the helper
warns naming it. Collaborative heads share their query/key projection
(`[width, D]`, no head axis): it stays replicated, while the mixing vectors,
values and output are sharded by heads.

Example (4 devices, 2-way data x 2-way head parallel):

>>> mesh = keras.distribution.DeviceMesh((2, 2), ["batch", "model"])
>>> layout_map = head_layout_map(model, mesh)  # a built model, any weights
>>> distribution = keras.distribution.ModelParallel(
...     layout_map=layout_map, batch_dim_name="batch")
>>> with distribution.scope():
...     model = build_model()  # variables are created sharded
...     model.compile(...); model.fit(...)

The map's keys match variable paths without the model's own (possibly
auto-numbered) name, so the map of one instance applies to another instance of
the same architecture built under `distribution.scope()`.

References:
  Shoeybi et al. 2019, Megatron-LM, https://arxiv.org/abs/1909.08053;
  https://keras.io/guides/distribution/
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import keras

# Head axis of each attention variable, by the last two parts of its path and its rank.
# (sublayer, variable) -> {rank: axis}; collaborative's shared query/key kernels have rank 2
# and no head axis.
_HEAD_AXES: dict[tuple[str, str], dict[int, int]] = {
    **{(role, "kernel"): {3: 1} for role in ("query", "key", "value", "gate")},
    **{(role, "bias"): {2: 0} for role in ("query", "key", "value", "gate")},
    ("attention_output", "kernel"): {3: 0},
    ("attention_output", "bias"): {},
}
# Variables of the attention layer itself (collaborative heads; the per-query-head value bias
# of grouped and latent layers): name -> {rank: axis}.
_OWN_HEAD_AXES: dict[str, dict[int, int]] = {
    "mixing": {2: 0},
    "content_bias": {2: 1},
    "value_bias": {2: 0},
}


@dataclasses.dataclass(frozen=True)
class LayerSharding:
    """How `head_layout_map` places one attention layer.

    Args:
      path: The layer's path in the model.
      num_heads: Its head count.
      sharded: Whether its head axis is split over the model axis.
      layouts: Variable path (without the model's name) -> axes (None:
        replicated along that axis).
    """

    path: str
    num_heads: int
    sharded: bool
    layouts: dict[str, tuple[str | None, ...]]


def attention_layers(model: keras.Model) -> list[keras.layers.MultiHeadAttention]:
    """Every `MultiHeadAttention` (ours and stock, any depth) of `model`, in order."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, keras.layers.MultiHeadAttention)
    ]


def _relative(path: str) -> str:
    """A variable path without its first part (the model's own, possibly numbered, name)."""
    return path.split("/", 1)[1] if "/" in path else path


def _head_axis(layer: keras.layers.MultiHeadAttention, variable: Any) -> int | None:
    parts = variable.path.split("/")
    rank = len(variable.shape)
    if len(parts) >= 2 and (parts[-2], parts[-1]) in _HEAD_AXES:
        axis = _HEAD_AXES[(parts[-2], parts[-1])].get(rank)
    else:
        axis = _OWN_HEAD_AXES.get(parts[-1], {}).get(rank)
    groups = getattr(layer, "num_kv_heads", None)
    if axis is not None and variable.shape[axis] not in (layer.num_heads, groups):
        return None  # Not a head axis after all (e.g. a width that equals nothing).
    return axis


def head_sharding_plan(model: keras.Model, model_axis_size: int) -> list[LayerSharding]:
    """Per attention layer of a built `model`: its variables' head-sharded layouts.

    Args:
      model: A built Keras 3 model.
      model_axis_size: Devices along the mesh axis the heads are split over.

    Returns:
      One `LayerSharding` per attention layer; `sharded` is False (every
      variable replicated) where `model_axis_size` does not divide its heads.
    """
    if isinstance(model_axis_size, bool) or int(model_axis_size) != model_axis_size:
        raise ValueError(f"model_axis_size must be a positive int; got {model_axis_size!r}.")
    if model_axis_size < 1:
        raise ValueError(f"model_axis_size must be a positive int; got {model_axis_size!r}.")
    if not model.built:
        raise ValueError(
            f"Model {model.name!r} is not built: call it on a batch (or build it) before "
            "head_layout_map, so its attention variables exist."
        )
    plans = []
    for layer in attention_layers(model):
        heads = int(layer.num_heads)
        # Grouped K/V: whole groups per device (their key/value heads with their queries).
        groups = int(getattr(layer, "num_kv_heads", None) or heads)
        sharded = heads % model_axis_size == 0 and groups % model_axis_size == 0
        layouts: dict[str, tuple[str | None, ...]] = {}
        for variable in layer.weights:
            axes: list[str | None] = [None] * len(variable.shape)
            axis = _head_axis(layer, variable) if sharded else None
            if axis is not None:
                axes[axis] = "model"
            layouts[_relative(variable.path)] = tuple(axes)
        plans.append(LayerSharding(layer.path, heads, sharded, layouts))
    return plans


def head_layout_map(
    model: keras.Model,
    device_mesh: keras.distribution.DeviceMesh,
    model_axis: str = "model",
    layout_map: keras.distribution.LayoutMap | None = None,
) -> keras.distribution.LayoutMap:
    """A `LayoutMap` that shards every attention layer of `model` by heads.

    Args:
      model: A built Keras 3 model holding attention layers (its weights do
        not matter: only the variable paths and shapes are read).
      device_mesh: The mesh; `model_axis` must be one of its axis names.
      model_axis: The mesh axis that heads are split over.
      layout_map: An existing map to add to (e.g. with embedding or
        feed-forward layouts of your own); a new one by default.

    Returns:
      The `LayoutMap`. Variables it does not name (embeddings, feed-forward,
      LayerNorms, head gates) are replicated by `ModelParallel`. Layers whose
      head count `device_mesh.shape[model_axis]` does not divide are
      replicated, with a `UserWarning` naming them.

    Example:

    >>> mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"])
    >>> layout_map = head_layout_map(lm, mesh)
    >>> layout_map["causal_lm/block_0/self_attention_layer/query/kernel"].axes
    (None, 'model', None)
    """
    names = list(device_mesh.axis_names)
    if model_axis not in names:
        raise ValueError(f"model_axis {model_axis!r} is not an axis of the mesh {names}.")
    size = int(device_mesh.shape[names.index(model_axis)])
    if layout_map is None:
        layout_map = keras.distribution.LayoutMap(device_mesh)
    plans = head_sharding_plan(model, size)
    for plan in plans:
        for path, axes in plan.layouts.items():
            named = tuple(model_axis if a == "model" else a for a in axes)
            layout_map["(?:.*/)?" + re.escape(path)] = named
    replicated = [f"{p.path} ({p.num_heads} heads)" for p in plans if not p.sharded]
    if replicated:
        warnings.warn(
            f"head_layout_map: the mesh axis {model_axis!r} has {size} devices, which does not "
            f"divide the heads of {', '.join(replicated)}; those layers stay replicated.",
            UserWarning,
            stacklevel=2,
        )
    return layout_map

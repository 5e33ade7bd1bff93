"""A tf_keras attention layer's variables by role, in the core's kernel layout.

Tools (conversion, pruning) and tests read and write layers through these
roles, the names of `headsize_tf.core.pruning_plan.HEAD_AXES`,
`headsize_tf.core.convert` and `headsize_tf.core.kv_sharing` (the Keras 3
front's `headsize_tf.keras3.layers.roles` uses the same names):

* standard and fixed-head heads (and stock `MultiHeadAttention`):
  `query_kernel`, `query_bias`, `key_kernel`, `key_bias`, `value_kernel`,
  `value_bias`, `output_kernel`, `output_bias`;
* collaborative heads: `query_kernel` / `key_kernel` `[d, D]`, `mixing`,
  `content_bias` instead of per-head query/key tensors and biases;
* grouped: `query_kernel`, `query_bias`, `key_kernel` `[e, G, p]`,
  `value_kernel` `[e, G, v]`, `value_bias` `[h, v]`, `output_kernel`,
  `output_bias`;
* latent: `query_kernel`, `query_bias`, `latent_kernel` `[e, r]`,
  `key_up_kernel` `[r, h, p]`, `value_up_kernel` `[r, h, v]`, `value_bias`,
  `output_kernel`, `output_bias`.

A `head_gates` entry of a weights dict is the layer's head mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tf_keras

from headsize_tf.layers.collaborative_attention import CollaborativeAttention
from headsize_tf.layers.grouped_attention import GroupedAttention
from headsize_tf.layers.latent_attention import LatentAttention


def kind_of(layer: tf_keras.layers.Layer) -> str:
    """The weight layout of `layer`: "collaborative", "grouped", "latent" or "standard".

    Args:
      layer: An attention layer (ours or stock `MultiHeadAttention`).

    Example:

    >>> kind_of(GroupedAttention(num_heads=4, num_kv_heads=2))
    'grouped'
    """
    for cls, kind in (
        (CollaborativeAttention, "collaborative"),
        (GroupedAttention, "grouped"),
        (LatentAttention, "latent"),
    ):
        if isinstance(layer, cls):
            return kind
    return "standard"


def weights_by_role(layer: tf_keras.layers.Layer) -> dict[str, Any]:
    """Role -> variable of a built attention layer (absent biases are None).

    Args:
      layer: A built layer of `headsize_tf.layers` or a stock
        `tf_keras.layers.MultiHeadAttention`.

    Example:

    >>> layer = GroupedAttention(num_heads=4, num_kv_heads=2)
    >>> _ = layer(np.zeros([1, 3, 8], "float32"), np.zeros([1, 3, 8], "float32"))
    >>> list(weights_by_role(layer))[:3]
    ['query_kernel', 'query_bias', 'key_kernel']
    """
    if not isinstance(layer, tf_keras.layers.MultiHeadAttention):
        raise ValueError(
            f"Layer {getattr(layer, 'name', layer)!r} ({type(layer).__name__}) is not a tf_keras "
            "multi-head attention layer."
        )
    dense = getattr(layer, "_query_dense", None)
    if dense is None or not dense.weights:
        raise ValueError(f"Attention layer {layer.name!r} is not built; call it on inputs first.")
    kind = kind_of(layer)
    roles: dict[str, Any] = {
        "query_kernel": layer._query_dense.kernel,
        "query_bias": getattr(layer._query_dense, "bias", None),
    }
    if kind == "latent":
        roles["latent_kernel"] = layer._latent_dense.kernel
        roles["key_up_kernel"] = layer._key_up_dense.kernel
        roles["value_up_kernel"] = layer._value_up_dense.kernel
    else:
        roles["key_kernel"] = layer._key_dense.kernel
        roles["key_bias"] = getattr(layer._key_dense, "bias", None)
        roles["value_kernel"] = layer._value_dense.kernel
        roles["value_bias"] = getattr(layer._value_dense, "bias", None)
    if kind in ("grouped", "latent"):
        roles.pop("key_bias", None)  # A key bias cannot change a softmax.
        roles["value_bias"] = layer.value_bias  # Per query head, outside the value dense.
    if kind == "collaborative":
        del roles["query_bias"], roles["key_bias"]  # The content bias replaces them.
        roles["mixing"] = layer.mixing
        roles["content_bias"] = layer.content_bias
    roles["output_kernel"] = layer._output_dense.kernel
    roles["output_bias"] = getattr(layer._output_dense, "bias", None)
    return roles


def numpy_weights(layer: tf_keras.layers.Layer) -> dict[str, np.ndarray | None]:
    """Role -> numpy array, plus `head_gates` (ones for stock MHA).

    Args:
      layer: A built attention layer (as for `weights_by_role`).
    """
    out = {
        role: None if var is None else np.asarray(var.numpy())
        for role, var in weights_by_role(layer).items()
    }
    gates = getattr(layer, "head_gates", None)
    heads = layer._num_heads
    out["head_gates"] = np.ones([heads], np.float32) if gates is None else gates.numpy()
    return out


def assign_weights(layer: tf_keras.layers.Layer, weights: dict[str, Any]) -> None:
    """Writes role -> array into a built layer (shapes and bias use must match).

    The one way the library writes core-layout weights into a tf_keras layer:
    `core.convert.collaborative_weights`, `core.kv_sharing.grouped_weights`
    and `latent_weights` results go in as they come. A `head_gates` entry sets
    the layer's head mask. Roles of `weights` the layer does not have are an
    error (a key bias given to a grouped layer is not silently dropped).

    Args:
      layer: A built attention layer (as for `weights_by_role`).
      weights: Role -> array (None for an absent bias).

    Example:

    >>> layer = GroupedAttention(num_heads=4, num_kv_heads=2)
    >>> _ = layer(np.ones([1, 3, 8], "float32"), np.ones([1, 3, 8], "float32"))
    >>> assign_weights(layer, numpy_weights(layer))  # a round trip
    """
    targets = weights_by_role(layer)
    unknown = sorted(
        role
        for role, value in weights.items()
        if value is not None and role not in targets and role != "head_gates"
    )
    if unknown:
        raise ValueError(
            f"Layer {layer.name!r} ({kind_of(layer)}) has no weights {unknown}; its roles are "
            f"{list(targets)}."
        )
    for role, variable in targets.items():
        value = weights.get(role)
        if (variable is None) != (value is None):
            raise ValueError(
                f"Layer {layer.name!r}: {role} is {'absent' if variable is None else 'present'} "
                f"in the layer but {'absent' if value is None else 'present'} in the weights "
                "(use_bias differs?)."
            )
        if variable is None:
            continue
        if tuple(variable.shape) != tuple(np.shape(value)):
            raise ValueError(
                f"Layer {layer.name!r}: {role} has shape {tuple(variable.shape)}; the weights "
                f"give {tuple(np.shape(value))}."
            )
        variable.assign(np.asarray(value).astype(variable.dtype.as_numpy_dtype))
    if weights.get("head_gates") is not None and hasattr(layer, "set_head_mask"):
        layer.set_head_mask(weights["head_gates"])

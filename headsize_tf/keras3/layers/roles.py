"""A Keras 3 attention layer's variables by role, in the core's kernel layout.

Tools (conversion, pruning) read and write layers through these roles, the
names `headsize_tf.core.pruning_plan.HEAD_AXES` and `headsize_tf.core.convert`
use: `query_kernel`, `query_bias`, `key_kernel`, `key_bias`, `value_kernel`,
`value_bias`, `output_kernel`, `output_bias` (standard and fixed-head heads),
and for collaborative heads the shared `query_kernel` / `key_kernel`, `mixing`
and `content_bias` instead of per-head query/key tensors. Grouped layers have
`key_kernel` / `value_kernel` `[e, G, p]` without biases and a per-query-head
`value_bias`; latent layers have `latent_kernel`, `key_up_kernel`,
`value_up_kernel` instead of key/value kernels (`headsize_tf.core.kv_sharing`),
and with rotary positions `rope_key_kernel` / `rope_key_bias` (the decoupled
rotary keys; no `key_up_kernel` when every key dimension rotates). Rotary
grouped layers keep a `key_bias`; query-key norms (Qwen3) are `query_norm` and
`key_norm`.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from headsize_tf.keras3.layers.collaborative_attention import CollaborativeAttention
from headsize_tf.keras3.layers.grouped_attention import GroupedAttention
from headsize_tf.keras3.layers.latent_attention import LatentAttention, _RankFirstView


def kind_of(layer: keras.layers.Layer) -> str:
    """ "collaborative", "grouped", "latent" or "standard" (per-head query/key/value kernels)."""
    if isinstance(layer, CollaborativeAttention):
        return "collaborative"
    if isinstance(layer, GroupedAttention):
        return "grouped"
    if isinstance(layer, LatentAttention):
        return "latent"
    return "standard"


def weights_by_role(layer: keras.layers.Layer) -> dict[str, Any]:
    """Role -> variable of a built attention layer (absent biases are None).

    A latent layer's `key_up_kernel` and `value_up_kernel` are views in the
    core's layout `[r, h, p]` of its head-first kernels (`shape`, `dtype`,
    `numpy()`, `assign`); `.variable` is the variable.

    Works for our layers and for `keras.layers.MultiHeadAttention`.
    """
    if not isinstance(layer, keras.layers.MultiHeadAttention):
        raise ValueError(
            f"Layer {getattr(layer, 'name', layer)!r} ({type(layer).__name__}) is not a Keras 3 "
            "multi-head attention layer."
        )
    if not layer.built:
        raise ValueError(f"Attention layer {layer.name!r} is not built; call it on inputs first.")
    if getattr(layer, "_use_gate", False):
        raise ValueError(f"Attention layer {layer.name!r} uses gated attention (use_gate=True).")
    roles: dict[str, Any] = {}
    if isinstance(layer, GroupedAttention | LatentAttention):
        sublayers = (
            ("query", "key", "value")
            if isinstance(layer, GroupedAttention)
            else ("query", "latent", "key_up", "value_up")
        )
        for role in (*sublayers, "output"):
            dense = getattr(layer, f"_{role}_dense")
            if dense is None:  # A latent layer whose key dimensions all rotate has no key_up.
                continue
            roles[f"{role}_kernel"] = (
                dense.core_kernel if role in ("key_up", "value_up") else dense.kernel
            )
        roles["query_bias"] = layer._query_dense.bias
        roles["value_bias"] = layer.value_bias
        roles["output_bias"] = layer._output_dense.bias
        if isinstance(layer, GroupedAttention):
            roles["key_bias"] = layer._key_dense.bias  # Rotated keys keep theirs (else None).
            _add_norms(layer, roles)
        elif layer.uses_rope:
            roles["rope_key_kernel"] = layer._rope_key_dense.kernel
            roles["rope_key_bias"] = layer._rope_key_dense.bias
            _add_norms(layer, roles)  # [R, p]: one per rotary key's heads.
        return roles
    for role in ("query", "key", "value", "output"):
        dense = getattr(layer, f"_{role}_dense")
        roles[f"{role}_kernel"] = dense.kernel
        roles[f"{role}_bias"] = getattr(dense, "bias", None)
    if isinstance(layer, CollaborativeAttention):
        del roles["query_bias"], roles["key_bias"]  # The content bias replaces them.
        roles["mixing"] = layer.mixing
        roles["content_bias"] = layer.content_bias
    else:
        _add_norms(layer, roles)
    return roles


def _add_norms(layer: keras.layers.Layer, roles: dict[str, Any]) -> None:
    """The per-head query/key RMSNorm scales (Qwen3, Gemma 3), where the layer has them."""
    if getattr(layer, "query_norm", None) is not None:
        roles["query_norm"] = layer.query_norm
        roles["key_norm"] = layer.key_norm


def numpy_weights(layer: keras.layers.Layer) -> dict[str, np.ndarray | None]:
    """Role -> numpy array (float32), plus `head_gates` (ones for stock MHA)."""
    out = {
        role: None if var is None else np.asarray(_numpy(var), np.float32)
        for role, var in weights_by_role(layer).items()
    }
    gates = getattr(layer, "head_gates", None)
    heads = layer.num_heads
    out["head_gates"] = (
        np.ones([heads], np.float32)
        if gates is None
        else np.asarray(keras.ops.convert_to_numpy(gates), np.float32)
    )
    return out


def _numpy(variable: Any) -> np.ndarray:
    if isinstance(variable, _RankFirstView):
        return variable.numpy()
    return keras.ops.convert_to_numpy(variable)


def assign_weights(layer: keras.layers.Layer, weights: dict[str, np.ndarray | None]) -> None:
    """Writes role -> array into a built layer (shapes and bias use must match).

    A `head_gates` entry sets the layer's head mask.
    """
    targets = weights_by_role(layer)
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
        variable.assign(np.asarray(value, dtype=keras.backend.standardize_dtype(variable.dtype)))
    if weights.get("head_gates") is not None and hasattr(layer, "set_head_mask"):
        layer.set_head_mask(weights["head_gates"])

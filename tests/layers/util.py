"""Helpers to read and write attention weights by role."""

from __future__ import annotations

import numpy as np


def random_multihead_weights(rng, d, h, p, d_out=None, d_kv=None, value_dim=None):
    d_out = d_out or d
    d_kv = d_kv or d
    p_v = value_dim or p
    n = lambda *s: rng.normal(scale=0.3, size=s).astype(np.float32)  # noqa: E731
    return {
        "wq": n(d, h, p),
        "bq": n(h, p),
        "wk": n(d_kv, h, p),
        "bk": n(h, p),
        "wv": n(d_kv, h, p_v),
        "bv": n(h, p_v),
        "wo": n(h, p_v, d_out),
        "bo": n(d_out),
    }


# role -> (sublayer attribute or None for the layer itself, variable attribute)
MULTIHEAD_ROLES = {
    "wq": ("_query_dense", "kernel"),
    "bq": ("_query_dense", "bias"),
    "wk": ("_key_dense", "kernel"),
    "bk": ("_key_dense", "bias"),
    "wv": ("_value_dense", "kernel"),
    "bv": ("_value_dense", "bias"),
    "wo": ("_output_dense", "kernel"),
    "bo": ("_output_dense", "bias"),
}
COLLABORATIVE_ROLES = {
    "wq": ("_query_dense", "kernel"),
    "wk": ("_key_dense", "kernel"),
    "mixing": (None, "mixing"),
    "content": (None, "content_bias"),
    "wv": ("_value_dense", "kernel"),
    "bv": ("_value_dense", "bias"),
    "wo": ("_output_dense", "kernel"),
    "bo": ("_output_dense", "bias"),
}


def _roles(layer):
    return COLLABORATIVE_ROLES if hasattr(layer, "mixing") else MULTIHEAD_ROLES


def _variable(layer, role):
    sublayer, name = _roles(layer)[role]
    return getattr(layer if sublayer is None else getattr(layer, sublayer), name)


def set_weights(layer, w):
    """Assigns `w` (roles as the random_*_weights dicts) to a built layer of either front.

    Biases the layer does not have (`use_bias=False`) are skipped.
    """
    for role in _roles(layer):
        variable = _variable(layer, role)
        if variable is not None:
            variable.assign(w[role])


def read_weights(layer):
    """A built layer's weights by role, as float64 (what it computes with, after its
    variable dtype rounded them); a bias the layer does not have is zeros."""
    w = {}
    for role in _roles(layer):
        variable = _variable(layer, role)
        if variable is not None:
            w[role] = np.asarray(variable.numpy(), dtype=np.float64)
    for role in [r for r in _roles(layer) if r not in w]:  # Missing biases: zeros.
        if role == "bo":
            w[role] = np.zeros(w["wo"].shape[-1])
        elif role == "content":
            w[role] = np.zeros((w["wk"].shape[0], w["mixing"].shape[0]))
        else:
            w[role] = np.zeros(w["w" + role[1]].shape[1:])
    return w


def set_multihead_weights(layer, w):
    set_weights(layer, w)


def set_collaborative_weights(layer, w):
    set_weights(layer, w)


def random_collaborative_weights(rng, d, h, p, shared, d_out=None, d_kv=None, value_dim=None):
    d_out = d_out or d
    d_kv = d_kv or d
    p_v = value_dim or p
    n = lambda *s: rng.normal(scale=0.3, size=s).astype(np.float32)  # noqa: E731
    return {
        "wq": n(d, shared),
        "wk": n(d_kv, shared),
        "mixing": n(h, shared),
        "content": n(d_kv, h),
        "wv": n(d_kv, h, p_v),
        "bv": n(h, p_v),
        "wo": n(h, p_v, d_out),
        "bo": n(d_out),
    }

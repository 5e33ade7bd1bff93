"""Helpers to read and write attention weights by role."""

from __future__ import annotations

import numpy as np


def random_multihead_weights(rng, d, h, p, d_out=None, d_kv=None):
    d_out = d_out or d
    d_kv = d_kv or d
    n = lambda *s: rng.normal(scale=0.3, size=s).astype(np.float32)  # noqa: E731
    return {
        "wq": n(d, h, p),
        "bq": n(h, p),
        "wk": n(d_kv, h, p),
        "bk": n(h, p),
        "wv": n(d_kv, h, p),
        "bv": n(h, p),
        "wo": n(h, p, d_out),
        "bo": n(d_out),
    }


def set_multihead_weights(layer, w):
    layer._query_dense.kernel.assign(w["wq"])
    layer._query_dense.bias.assign(w["bq"])
    layer._key_dense.kernel.assign(w["wk"])
    layer._key_dense.bias.assign(w["bk"])
    layer._value_dense.kernel.assign(w["wv"])
    layer._value_dense.bias.assign(w["bv"])
    layer._output_dense.kernel.assign(w["wo"])
    layer._output_dense.bias.assign(w["bo"])


def set_collaborative_weights(layer, w):
    layer._query_dense.kernel.assign(w["wq"])
    layer._key_dense.kernel.assign(w["wk"])
    layer.mixing.assign(w["mixing"])
    layer.content_bias.assign(w["content"])
    layer._value_dense.kernel.assign(w["wv"])
    layer._value_dense.bias.assign(w["bv"])
    layer._output_dense.kernel.assign(w["wo"])
    layer._output_dense.bias.assign(w["bo"])


def random_collaborative_weights(rng, d, h, p, shared, d_out=None, d_kv=None):
    d_out = d_out or d
    d_kv = d_kv or d
    n = lambda *s: rng.normal(scale=0.3, size=s).astype(np.float32)  # noqa: E731
    return {
        "wq": n(d, shared),
        "wk": n(d_kv, shared),
        "mixing": n(h, shared),
        "content": n(d_kv, h),
        "wv": n(d_kv, h, p),
        "bv": n(h, p),
        "wo": n(h, p, d_out),
        "bo": n(d_out),
    }

"""Inputs, masks and layer makers shared by the Keras 3 tests (numpy only)."""

from __future__ import annotations

import keras
import numpy as np

from headsize_tf.keras3.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention

WIDTH = 16

# kind -> (factory, head size at width 16)
KINDS = {
    "standard": (lambda **kw: StandardAttention(num_heads=4, **kw), 4),
    "fixed_head": (lambda **kw: FixedHeadAttention(num_heads=4, head_size=6, **kw), 6),
    "collaborative": (lambda **kw: CollaborativeAttention(num_heads=4, shared_key_dim=12, **kw), 4),
}


def make(kind: str, **kwargs):
    return KINDS[kind][0](**kwargs)


def data(t=5, s=7, d=WIDTH, d_kv=None, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, t, d)).astype(np.float32)
    if t == s and d_kv is None:
        return x, x
    y = rng.normal(size=(batch, s, d_kv or d)).astype(np.float32)
    return x, y


def padding_mask(batch, t, s):
    mask = np.ones((batch, t, s), bool)
    mask[0, :, s - 2 :] = False
    mask[1, :, 0] = False
    return mask


def causal_mask(batch, t, s):
    return np.broadcast_to(np.tril(np.ones((t, s), bool)), (batch, t, s)).copy()


def np_(x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float64)


def recorded_attention_calls(lm, ids) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The query input and the output of every attention layer during `lm(ids)` (their `call`
    wrapped for the one forward pass), first layer to last."""
    queries, outputs = {}, {}
    for i, layer in enumerate(lm.attention_layers):

        def call(*args, _i=i, _original=layer.call, **kwargs):
            query = kwargs["query"] if "query" in kwargs else args[0]
            queries[_i] = np_(query)
            result = _original(*args, **kwargs)
            outputs[_i] = np_(result)
            return result

        layer.call = call
    try:
        lm(ids)
    finally:
        for layer in lm.attention_layers:
            del layer.call
    order = range(len(lm.attention_layers))
    return [queries[i] for i in order], [outputs[i] for i in order]

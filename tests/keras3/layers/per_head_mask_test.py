"""Keras 3 layers take what stock `keras.layers.MultiHeadAttention` takes: per-head masks
[batch, heads, query, key] (Keras' own `test_masking_with_different_shapes`, numpy oracle,
both score paths) and subclasses overriding `_compute_attention`, its extension point."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from headsize_tf.keras3.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from tests.keras3.util import np_
from tests.layers import reference
from tests.layers import util as wutil

B, T, S, D, H = 2, 5, 6, 16, 4
MULTIHEAD = {
    "standard": lambda **kw: StandardAttention(num_heads=H, **kw),
    "fixed_head": lambda **kw: FixedHeadAttention(num_heads=H, head_size=6, **kw),
}


def _per_head_mask(seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random((B, H, T, S)) > 0.4
    mask[..., 0] = True  # Every row keeps a key.
    return mask


def _inputs(seed=1):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(B, T, D)).astype(np.float32),
        rng.normal(size=(B, S, D)).astype(np.float32),
    )


@pytest.mark.parametrize("kind", sorted(MULTIHEAD))
def test_keras_masking_with_different_shapes(kind):
    # Keras' `test_masking_with_different_shapes`, on our layer.
    x = np.random.default_rng(0).uniform(size=(2, 5, 8)).astype(np.float32)
    mask = ops.tril(ops.ones((5, 5)))
    layer = (
        StandardAttention(num_heads=2)
        if kind == "standard"
        else FixedHeadAttention(num_heads=2, head_size=4)
    )
    out_1 = layer(query=x, value=x, attention_mask=mask)
    mask = ops.tile(mask[None, ...], (2, 1, 1))
    out_2 = layer(query=x, value=x, attention_mask=mask)
    mask = ops.tile(mask[:, None, ...], (1, 2, 1, 1))
    out_3 = layer(query=x, value=x, attention_mask=mask)
    np.testing.assert_allclose(np_(out_1), np_(out_2), atol=1e-6)
    np.testing.assert_allclose(np_(out_1), np_(out_3), atol=1e-6)


@pytest.mark.parametrize("kind", ["standard", "fixed_head", "collaborative"])
@pytest.mark.parametrize("scores", [False, True], ids=["dot_product_path", "einsum_path"])
def test_per_head_mask_matches_the_oracle(kind, scores):
    x, y = _inputs()
    rng = np.random.default_rng(2)
    if kind == "collaborative":
        layer = CollaborativeAttention(num_heads=H, shared_key_dim=12)
        layer(x, y)
        w = wutil.random_collaborative_weights(rng, D, H, D // H, 12)
        wutil.set_collaborative_weights(layer, w)
    else:
        layer = MULTIHEAD[kind]()
        layer(x, y)
        w = wutil.random_multihead_weights(rng, D, H, layer.head_size)
        wutil.set_multihead_weights(layer, w)
    mask = _per_head_mask()
    got = layer(x, y, attention_mask=mask, return_attention_scores=scores)
    got = got[0] if scores else got
    if kind == "collaborative":
        want = reference.collaborative(x, y, w, D // H, mask)[0]
    else:
        want = reference.multihead(x, y, w, mask)[0]
    np.testing.assert_allclose(np_(got), want, atol=1e-5)


def test_per_head_mask_with_the_wrong_head_count_is_named():
    x, y = _inputs()
    layer = StandardAttention(num_heads=H)
    with pytest.raises(ValueError, match=r"per head \[batch, num_heads, query_length"):
        layer(x, y, attention_mask=np.ones((B, H + 1, T, S), bool))


class _TemperedStandard(StandardAttention):
    """An override of stock MHA's extension point: scores at temperature 2."""

    calls = 0

    def _compute_attention(
        self, query, key, value, attention_mask=None, training=None, return_attention_scores=False
    ):
        type(self).calls += 1
        return super()._compute_attention(
            query * 0.5, key, value, attention_mask, training, return_attention_scores
        )


class _TemperedStock(keras.layers.MultiHeadAttention):
    def _compute_attention(
        self, query, key, value, attention_mask=None, training=None, return_attention_scores=False
    ):
        return super()._compute_attention(
            query * 0.5, key, value, attention_mask, training, return_attention_scores
        )


def test_compute_attention_override_is_called_like_stock_mha():
    x, y = _inputs()
    w = wutil.random_multihead_weights(np.random.default_rng(3), D, H, D // H)
    ours, stock = _TemperedStandard(num_heads=H), _TemperedStock(num_heads=H, key_dim=D // H)
    for layer in (ours, stock):
        layer(x, y)
        wutil.set_multihead_weights(layer, w)
    mask = _per_head_mask(4)
    _TemperedStandard.calls = 0
    got, scores = ours(x, y, attention_mask=mask, return_attention_scores=True)
    want, stock_scores = stock(x, y, attention_mask=mask, return_attention_scores=True)
    assert _TemperedStandard.calls == 1
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)
    np.testing.assert_allclose(np_(scores), np_(stock_scores), atol=1e-6)
    # The override changes the result (it is not bypassed), and head gates still apply.
    plain = StandardAttention(num_heads=H)
    plain(x, y)
    wutil.set_multihead_weights(plain, w)
    assert np.abs(np_(plain(x, y, attention_mask=mask)) - np_(got)).max() > 1e-3
    ours.set_head_mask([1.0, 0.0, 1.0, 1.0])
    gated = np_(ours(x, y, attention_mask=mask))
    ours.set_head_mask([1.0, 1.0, 1.0, 1.0])
    assert np.abs(gated - np_(got)).max() > 1e-3
    # Causal masks go through the override too.
    causal = np_(ours(x, x, use_causal_mask=True))
    np.testing.assert_allclose(causal, np_(stock(x, x, use_causal_mask=True)), atol=1e-5)


def test_compute_attention_override_on_collaborative_heads_names_the_alternative():
    class Tempered(CollaborativeAttention):
        def _compute_attention(self, *args, **kwargs):  # pragma: no cover - never reached
            raise AssertionError

    x, y = _inputs()
    layer = Tempered(num_heads=H, shared_key_dim=12)
    with pytest.raises(NotImplementedError, match="_logits_from_projected"):
        layer(x, y)

"""Per-head attention masks [batch, heads, query, key] on the tf_keras layers, as stock
`tf_keras.layers.MultiHeadAttention` takes them (numpy oracle and stock MHA)."""

from __future__ import annotations

import numpy as np
import pytest
import tf_keras

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from tests.layers import reference
from tests.layers import util as wutil

B, T, S, D, H = 2, 5, 6, 16, 4


def _per_head_mask(seed=0):
    """A different random pattern per head; every row keeps at least one key."""
    rng = np.random.default_rng(seed)
    mask = rng.random((B, H, T, S)) > 0.4
    mask[..., 0] = True
    return mask


def _layer(kind, rng):
    x = rng.normal(size=(B, T, D)).astype(np.float32)
    y = rng.normal(size=(B, S, D)).astype(np.float32)
    if kind == "collaborative":
        layer = CollaborativeAttention(num_heads=H, shared_key_dim=12)
        layer(x, y)
        w = wutil.random_collaborative_weights(rng, D, H, D // H, 12)
        wutil.set_collaborative_weights(layer, w)
        oracle = lambda mask: reference.collaborative(x, y, w, D // H, mask)[0]  # noqa: E731
    else:
        layer = (
            StandardAttention(num_heads=H)
            if kind == "standard"
            else FixedHeadAttention(num_heads=H, head_size=6)
        )
        layer(x, y)
        w = wutil.random_multihead_weights(rng, D, H, layer.head_size)
        wutil.set_multihead_weights(layer, w)
        oracle = lambda mask: reference.multihead(x, y, w, mask)[0]  # noqa: E731
    return layer, x, y, w, oracle


@pytest.mark.parametrize("kind", ["standard", "fixed_head", "collaborative"])
def test_per_head_mask_matches_the_oracle(kind):
    layer, x, y, _, oracle = _layer(kind, np.random.default_rng(1))
    mask = _per_head_mask()
    out = layer(x, y, attention_mask=mask).numpy()
    np.testing.assert_allclose(out, oracle(mask), atol=1e-5)
    # [B, 1, T, S] is the same as [B, T, S].
    one = mask[:, 0]
    np.testing.assert_allclose(
        layer(x, y, attention_mask=one[:, None]).numpy(),
        layer(x, y, attention_mask=one).numpy(),
        atol=1e-6,
    )


@pytest.mark.parametrize("kind", ["standard", "fixed_head"])
def test_per_head_mask_equals_stock_mha(kind):
    layer, x, y, w, _ = _layer(kind, np.random.default_rng(2))
    stock = tf_keras.layers.MultiHeadAttention(num_heads=H, key_dim=layer.head_size)
    stock(x, y)
    wutil.set_multihead_weights(stock, w)
    mask = _per_head_mask(3)
    np.testing.assert_allclose(
        layer(x, y, attention_mask=mask).numpy(),
        stock(x, y, attention_mask=mask).numpy(),
        rtol=0,
        atol=1e-7,  # Stock MHA's operations in stock's order.
    )


def test_per_head_mask_with_the_wrong_head_count_is_named():
    layer, x, y, _, _ = _layer("standard", np.random.default_rng(4))
    mask = np.ones((B, H + 1, T, S), bool)
    with pytest.raises(ValueError, match=r"per head \[batch, num_heads, query_length"):
        layer(x, y, attention_mask=mask)

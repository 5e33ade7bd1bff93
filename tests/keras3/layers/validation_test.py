"""Bad input to the Keras 3 layers: the tf_keras front's messages."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from headsize_tf.core.spec import SpecError
from headsize_tf.keras3.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.keras3.layers.factory import make_attention
from tests.keras3 import util

X = np.zeros((2, 3, 8), np.float32)


@pytest.mark.parametrize("kind", list(util.KINDS))
@pytest.mark.parametrize("bad", [0, -2])
def test_num_heads_must_be_positive(kind, bad):
    cls = type(util.make(kind))
    kwargs = {"fixed_head": {"head_size": 8}, "collaborative": {"shared_key_dim": 8}}.get(kind, {})
    with pytest.raises(ValueError, match=rf"`num_heads` must be a positive integer; got {bad}"):
        cls(num_heads=bad, **kwargs)


@pytest.mark.parametrize("kind", list(util.KINDS))
def test_key_dim_is_rejected(kind):
    with pytest.raises(ValueError, match=r"`key_dim=16` is not an argument of"):
        util.make(kind, key_dim=16)


@pytest.mark.parametrize("bad", ["abc", 0, -4, 2.5])
def test_bad_head_size(bad):
    with pytest.raises(
        ValueError, match=rf'`head_size` must be a positive int or "sequence_length"; got {bad!r}'
    ):
        FixedHeadAttention(num_heads=2, head_size=bad)
    with pytest.raises(ValueError, match=r"`head_size` must be a positive integer; got 0"):
        CollaborativeAttention(num_heads=2, shared_key_dim=4, head_size=0)


@pytest.mark.parametrize("bad", [1.5, -0.1, 1, "0.1", True])
def test_dropout_out_of_range(bad):
    with pytest.raises(ValueError, match=r"`dropout` must be a float in \[0, 1\); got"):
        StandardAttention(num_heads=2, dropout=bad)


def test_bad_value_dim_and_seed():
    with pytest.raises(ValueError, match=r"`value_dim` must be a positive integer; got 0"):
        FixedHeadAttention(2, head_size=4, value_dim=0)
    with pytest.raises(ValueError, match=r"`seed` must be an int or None; got 'x'"):
        StandardAttention(2, seed="x")


def test_shared_key_dim_missing_or_bad():
    with pytest.raises(ValueError, match=r"`shared_key_dim` must be a positive integer; got None"):
        CollaborativeAttention(num_heads=2, shared_key_dim=None)
    with pytest.raises(ValueError, match=r"`shared_key_dim` must be a positive integer; got 0"):
        CollaborativeAttention(num_heads=2, shared_key_dim=0)
    with pytest.raises(SpecError, match=r"collaborative attention needs `shared_key_dim`"):
        make_attention({"kind": "collaborative", "num_heads": 2})


def test_concatenate_mixing_needs_divisible_shared_dim():
    layer = CollaborativeAttention(num_heads=4, shared_key_dim=10, mixing_initializer="concatenate")
    with pytest.raises(
        ValueError, match=r"shared_key_dim \(10\) to be a multiple of num_heads \(4\)"
    ):
        layer(X, X)


def test_unknown_mixing_initializer():
    with pytest.raises(
        ValueError, match=r"Unknown `mixing_initializer` 'concat'; expected one of \['concatenate'"
    ):
        CollaborativeAttention(num_heads=2, shared_key_dim=4, mixing_initializer="concat")


@pytest.mark.parametrize("kind", list(util.KINDS))
def test_set_head_mask_wrong_length_or_unbuilt(kind):
    layer = util.make(kind)
    with pytest.raises(ValueError, match=r"not built yet"):
        layer.set_head_mask([1.0, 1.0])
    x, y = util.data()
    layer(x, y)
    with pytest.raises(
        ValueError, match=r"has shape \[3\]; expected \[\d\] \(one value per head\)"
    ):
        layer.set_head_mask([1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"has shape \[1, 2\]; expected"):
        layer.set_head_mask([[1.0, 0.0]])


def test_standard_width_not_divisible():
    with pytest.raises(ValueError, match=r"width \(8\) is not a multiple of num_heads \(3\)"):
        StandardAttention(num_heads=3)(X, X)


def test_collaborative_default_head_size_needs_divisible_width():
    x = np.zeros((1, 3, 10), np.float32)
    with pytest.raises(ValueError, match=r"width \(10\) is not a multiple of num_heads \(4\)"):
        CollaborativeAttention(num_heads=4, shared_key_dim=8)(x, x)
    out = CollaborativeAttention(num_heads=4, shared_key_dim=8, head_size=3)(x, x)
    assert tuple(out.shape) == (1, 3, 10)


def test_sequence_length_unknown():
    x = keras.Input((None, 8))
    with pytest.raises(ValueError, match=r'head_size="sequence_length" needs a static key'):
        FixedHeadAttention(num_heads=2, head_size="sequence_length")(x, x)


def test_collaborative_rejects_other_axes_and_rank_4():
    with pytest.raises(ValueError, match=r"attention_axes=\(2,\)"):
        CollaborativeAttention(num_heads=2, shared_key_dim=4, attention_axes=(2,))
    x = np.zeros((1, 2, 3, 8), np.float32)
    with pytest.raises(ValueError, match=r"rank-3 query inputs"):
        CollaborativeAttention(num_heads=2, shared_key_dim=4)(x, x)


@pytest.mark.parametrize("kind", list(util.KINDS))
def test_attention_mask_of_wrong_shape(kind):
    x, y = util.data()
    with pytest.raises(ValueError, match=r"attention_mask.*\[2, 5, 6\].*expected.*\[2, 5, 7\]"):
        util.make(kind)(x, y, attention_mask=np.ones((2, 5, 6), bool))
    # Stock MHA takes per-head [batch, heads, query, key] masks (tests/keras3/layers/per_head_mask_test.py);
    # rank 5 is not a mask of rank-3 inputs.
    with pytest.raises(ValueError, match=r"has shape \[2, 1, 1, 5, 7\]; expected"):
        util.make(kind)(x, y, attention_mask=np.ones((2, 1, 1, 5, 7), bool))
    with pytest.raises(ValueError, match=r"has shape \[2, 3, 5, 7\]; expected"):
        util.make(kind)(x, y, attention_mask=np.ones((2, 3, 5, 7), bool))  # 4 heads, not 3


def test_broadcastable_mask_is_accepted():
    x, y = util.data()
    layer = StandardAttention(num_heads=4)
    mask = np.array([[True] * 5 + [False] * 2])  # [1, S]: broadcast over batch and queries
    full = np.broadcast_to(mask[None], (2, 5, 7))
    np.testing.assert_allclose(
        util.np_(layer(x, y, attention_mask=mask[None])),
        util.np_(layer(x, y, attention_mask=full)),
        atol=1e-6,
    )


def test_flash_attention_with_dropout_is_rejected():
    with pytest.raises(ValueError, match=r"Dropout is not supported when flash attention"):
        StandardAttention(num_heads=2, dropout=0.1, flash_attention=True)

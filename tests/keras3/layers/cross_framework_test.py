"""A Keras 3 layer of ours called on a tf_keras (Keras 2) tensor names the tf_keras layer."""

from __future__ import annotations

import pytest

from tests.keras3 import util


@pytest.mark.parametrize(
    "kind, name",
    [
        ("standard", "StandardAttention"),
        ("fixed_head", "FixedHeadAttention"),
        ("collaborative", "CollaborativeAttention"),
    ],
)
def test_tf_keras_tensor_is_rejected(kind, name):
    tf_keras = pytest.importorskip("tf_keras")
    x = tf_keras.Input(shape=(4, 16))
    with pytest.raises(TypeError, match=rf"use headsize_tf\.layers\.{name} \(") as err:
        util.make(kind)(x, x)
    assert f"headsize_tf.keras3.layers.{name} is a Keras 3 layer" in str(err.value)
    layer = util.make(kind)
    with pytest.raises(TypeError, match=r"got a tf_keras \(Keras 2\) tensor"):
        layer(query=x, value=x)

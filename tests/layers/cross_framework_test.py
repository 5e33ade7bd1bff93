"""A tf_keras layer of ours called on a Keras 3 tensor names the Keras 3 layer."""

from __future__ import annotations

import numpy as np
import pytest
import tf_keras

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention

LAYERS = {
    "StandardAttention": lambda: StandardAttention(num_heads=2),
    "FixedHeadAttention": lambda: FixedHeadAttention(num_heads=2, head_size=4),
    "CollaborativeAttention": lambda: CollaborativeAttention(num_heads=2, shared_key_dim=4),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_keras3_tensor_is_rejected(name):
    keras = pytest.importorskip("keras")
    if not keras.__version__.startswith("3."):
        pytest.skip("Keras 3 is not installed")
    x = keras.Input(shape=(4, 8))
    with pytest.raises(TypeError, match=rf"use headsize_tf\.keras3\.layers\.{name} \(") as err:
        LAYERS[name]()(x, x)
    message = str(err.value)
    assert f"headsize_tf.layers.{name} is a tf_keras (Keras 2) layer" in message
    assert "TF_USE_LEGACY_KERAS=1" in message
    variable = keras.Variable(np.zeros((1, 4, 8), np.float32))
    with pytest.raises(TypeError, match=r"got a Keras 3 tensor \(Variable\)"):
        LAYERS[name]()(query=variable, value=variable)


def test_tf_keras_tensors_still_work():
    x = tf_keras.Input(shape=(4, 8))
    assert StandardAttention(num_heads=2)(x, x).shape.as_list() == [None, 4, 8]
    y = np.zeros((1, 4, 8), np.float32)
    assert StandardAttention(num_heads=2)(y, y).shape == (1, 4, 8)

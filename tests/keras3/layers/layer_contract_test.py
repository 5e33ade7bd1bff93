"""Every Keras 3 attention layer meets the checks of tests/keras3/layers/layer_check.py.

Per layer class (StandardAttention, FixedHeadAttention, CollaborativeAttention,
GroupedAttention, LatentAttention), on any backend: build and output shapes; a
config holding every constructor argument, cloned by from_config with equal
outputs; the parameter count of `core.params.attention_params`; a `.keras` round
trip of a model with an attention-mask input; attention, causal and Keras masks;
mixed_bfloat16 and bfloat16; `fit`.
"""

from __future__ import annotations

import functools

import pytest

from tests.keras3 import util
from tests.keras3.layers import layer_check

CASES = layer_check.CASES


@functools.cache
def _built(name: str):
    """One built float32 layer per class, with random weights (shared by the tests)."""
    layer = CASES[name].make()
    layer(*util.data(layer_check.T, layer_check.S))
    layer_check.randomize(layer, seed=3)
    return layer


@pytest.mark.parametrize("name", list(CASES))
def test_build_and_output_shapes(name):
    layer_check.check_build(CASES[name])


@pytest.mark.parametrize("name", list(CASES))
def test_config_round_trip_and_parameter_count(name):
    layer_check.check_config_and_params(CASES[name])


@pytest.mark.parametrize("name", list(CASES))
def test_keras_file_round_trip(name, tmp_path):
    layer_check.check_keras_file(CASES[name], tmp_path / "model.keras")


@pytest.mark.parametrize("name", list(CASES))
def test_masks(name):
    layer_check.check_masks(_built(name))


@pytest.mark.parametrize("name", list(CASES))
def test_dtype_policies(name):
    layer_check.check_dtype_policies(CASES[name], reference=_built(name))


@pytest.mark.parametrize("name", list(CASES))
def test_fit_lowers_the_loss(name):
    layer_check.check_fit(CASES[name])


@pytest.mark.parametrize("name", list(CASES))
def test_a_layer_inside_a_users_layer_builds_in_functional_and_sequential_models(name):
    """As stock MultiHeadAttention: Keras builds the inner layer while inferring shapes, in a
    stateless scope, where the head gates are created (from an initializer, deferred)."""
    import keras
    import numpy as np

    class Block(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.attention = CASES[name].make()

        def call(self, x):
            return x + self.attention(x, x)

    x, _ = util.data(layer_check.T, layer_check.T)
    inputs = keras.Input(tuple(x.shape[1:]))
    block = Block()
    functional = keras.Model(inputs, block(inputs))
    sequential = keras.Sequential([keras.Input(tuple(x.shape[1:])), Block()])
    expected = util.np_(x) + util.np_(block.attention(x, x))
    np.testing.assert_allclose(util.np_(functional(x)), expected, atol=1e-6)
    np.testing.assert_array_equal(util.np_(block.attention.head_gates), np.ones(4))
    assert util.np_(sequential(x)).shape == tuple(x.shape)

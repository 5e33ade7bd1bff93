"""Keras 3 `quantize("int8")` and LoRA (`enable_lora`) on the three layers, on every backend.

Both are stock Keras features that reach our layers through their `EinsumDense`
projections; these tests keep them working: a quantized model stays close to the
float one (relative error stated per test), honours head masks, and round-trips a
`.keras` file; LoRA leaves the outputs unchanged at start, trains only its factors,
and folds back into plain kernels.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tests.keras3 import util
from tests.keras3.util import WIDTH, np_

KINDS = sorted(util.KINDS)
PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_output_dense")


def _model(kind: str, seed: int = 0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((6, WIDTH))
    layer = util.make(kind, name="attention")
    outputs = layer(inputs, inputs)
    return keras.Model(inputs, outputs), layer


def _relative_error(got, want) -> float:
    got, want = np_(got), np_(want)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize("kind", KINDS)
def test_int8_quantized_model_is_close_masks_heads_and_round_trips(kind, tmp_path):
    model, layer = _model(kind)
    x, _ = util.data(t=6, s=6, batch=4)
    float_out = model.predict(x, verbose=0)
    layer.set_head_mask([1.0, 0.0, 1.0, 1.0])
    float_masked = model.predict(x, verbose=0)
    layer.set_head_mask([1.0, 1.0, 1.0, 1.0])

    model.quantize("int8")
    for name in PROJECTIONS:
        dense = getattr(layer, name)
        assert dense.quantization_mode == "int8", name
        assert keras.backend.standardize_dtype(dense._kernel.dtype) == "int8", name
    # int8 weights and activations (per-channel scales): about 1% of the output's norm.
    assert _relative_error(model.predict(x, verbose=0), float_out) < 0.03
    layer.set_head_mask([1.0, 0.0, 1.0, 1.0])
    quantized_masked = model.predict(x, verbose=0)
    assert _relative_error(quantized_masked, float_masked) < 0.03
    assert _relative_error(quantized_masked, float_out) > 0.1  # The mask acts.

    # A quantized model's weights reload into the same model quantized the same way. (Its
    # `.keras` file does not reload, for stock `MultiHeadAttention` alike: Keras rebuilds
    # the float kernels first. Save the float model and quantize after loading.)
    path = tmp_path / "quantized.weights.h5"
    model.save_weights(path)
    again, again_layer = _model(kind, seed=5)
    again.quantize("int8")
    again.load_weights(path)
    again_layer.set_head_mask([1.0, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(np_(again.predict(x, verbose=0)), np_(quantized_masked), atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_lora_starts_equal_trains_only_its_factors_and_folds_back(kind):
    model, layer = _model(kind, seed=1)
    x, _ = util.data(t=6, s=6, batch=8, seed=1)
    y = np.random.default_rng(2).normal(size=(8, 6, WIDTH)).astype(np.float32)
    before = np_(model.predict(x, verbose=0))
    frozen = {name: np_(getattr(layer, name).kernel) for name in PROJECTIONS}
    for name in ("_query_dense", "_value_dense"):
        getattr(layer, name).enable_lora(2)
    np.testing.assert_allclose(np_(model.predict(x, verbose=0)), before, atol=1e-6)
    trainable = {v.path for v in model.trainable_variables}
    for name in ("query", "value"):
        assert f"attention/{name}/lora_kernel_a" in trainable
        assert f"attention/{name}/lora_kernel_b" in trainable
        assert f"attention/{name}/kernel" not in trainable  # The base kernel is frozen.

    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    first = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=20, batch_size=8, verbose=0)
    assert model.evaluate(x, y, verbose=0) < first
    for name in ("_query_dense", "_value_dense"):
        dense = getattr(layer, name)
        np.testing.assert_array_equal(np_(dense._kernel), frozen[name])  # Base kernel frozen.
        assert float(np.abs(np_(dense.lora_kernel_b)).max()) > 0  # The factors moved.
    # `kernel` folds the factors in: a plain layer with those kernels gives the same output.
    trained = np_(model.predict(x, verbose=0))
    plain, plain_layer = _model(kind, seed=1)
    trained_weights = {v.path: v for v in model.weights if "lora" not in v.path}
    for variable in plain.weights:  # Collaborative heads also train `mixing`, `content_bias`.
        variable.assign(trained_weights[variable.path])
    for name in PROJECTIONS:
        getattr(plain_layer, name).kernel.assign(getattr(layer, name).kernel)
    np.testing.assert_allclose(np_(plain.predict(x, verbose=0)), trained, atol=1e-5)

"""Keras 3 layers in models: `.keras` round trip, `fit`, `jit_compile`, mixed bfloat16."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tests.keras3 import util
from tests.keras3.util import WIDTH, np_


@pytest.mark.parametrize("kind", list(util.KINDS))
def test_keras_file_round_trip(kind, tmp_path):
    t_in, s_in = keras.Input((5, WIDTH)), keras.Input((7, WIDTH))
    m_in = keras.Input((5, 7), dtype="bool")
    layer = util.make(kind, name="attention")
    model = keras.Model([t_in, s_in, m_in], layer(t_in, s_in, attention_mask=m_in))
    x, y = util.data()
    mask = util.padding_mask(2, 5, 7)
    expected = np_(model([x, y, mask]))
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    restored_layer = restored.get_layer("attention")
    assert type(restored_layer) is type(layer)
    assert restored_layer.get_config() == layer.get_config()
    assert restored_layer.count_params() == layer.count_params()
    np.testing.assert_allclose(np_(restored([x, y, mask])), expected, atol=1e-6)
    # The head mask is not saved: a restored layer has all gates open.
    np.testing.assert_array_equal(np_(restored_layer.head_gates), np.ones(layer.num_heads))


@pytest.fixture
def xla_allowed():
    """Lets Keras compile with XLA on TensorFlow (tests/conftest.py turns op determinism on,
    and Keras then falls back to `jit_compile=False`)."""
    if keras.backend.backend() != "tensorflow":
        yield
        return
    from tensorflow.python.framework import config as tf_config

    was_enabled = tf_config.is_op_determinism_enabled()
    tf_config.disable_op_determinism()
    try:
        yield
    finally:
        if was_enabled:
            tf_config.enable_op_determinism()


def _fit_and_check(kinds: list[str], jit_compile: bool, optimizer: str = "adam") -> None:
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, WIDTH))
    hidden = inp
    for kind in kinds:
        hidden = util.make(kind)(hidden, hidden)
    model = keras.Model(inp, keras.layers.GlobalAveragePooling1D()(hidden))
    optimizer = keras.optimizers.Adam(1e-2) if optimizer == "adam" else keras.optimizers.SGD(0.1)
    model.compile(optimizer, "mse", jit_compile=jit_compile)
    assert model.jit_compile is jit_compile
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6, WIDTH)).astype(np.float32)
    target = np.roll(x, 1, axis=1).mean(1)

    def loss() -> float:  # Eager, so that only the train step is compiled.
        return float(np.mean((np_(model(x)) - target) ** 2))

    initial = loss()
    model.fit(x, target, epochs=8, batch_size=16, verbose=0)
    final = loss()
    assert final < 0.7 * initial, (initial, final)


@pytest.mark.parametrize("kind", list(util.KINDS))
def test_fit_reduces_the_loss(kind):
    _fit_and_check([kind], jit_compile=False)


def test_jit_compiled_fit_reduces_the_loss(xla_allowed):
    # One model, one XLA compilation, both attention paths: dot_product_attention
    # (standard; fixed_head runs the same code) and einsum (collaborative). SGD:
    # Adam doubles the XLA compile time on CPU.
    _fit_and_check(["standard", "collaborative"], jit_compile=True, optimizer="sgd")


@pytest.mark.parametrize("kind", list(util.KINDS))
def test_finite_under_mixed_bfloat16(kind, global_policy):
    keras.config.set_dtype_policy("mixed_bfloat16")
    layer = util.make(kind)
    x, y = util.data()
    mask = np.ones((2, 5, 7), bool)
    mask[:, :, 0] = False
    for kwargs in ({"attention_mask": mask}, {"return_attention_scores": True}):
        out = layer(x, y, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
        assert np.all(np.isfinite(np_(out)))
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in layer.weights)
    x6, _ = util.data(6, 6)
    out = layer(x6, x6, use_causal_mask=True)
    assert np.all(np.isfinite(np_(out)))

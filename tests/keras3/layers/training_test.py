"""Keras 3 layers in a `fit` compiled with XLA (`jit_compile=True`).

Each layer's own `fit`, `.keras` round trip and dtype policies are checked in
layer_contract_test.py.
"""

from __future__ import annotations

import keras
import pytest

from tests.keras3.layers import layer_check


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


def test_jit_compiled_fit_reduces_the_loss(xla_allowed):
    # One model, one XLA compilation, both attention paths: dot_product_attention
    # (standard; fixed_head runs the same code) and einsum (collaborative). SGD:
    # Adam doubles the XLA compile time on CPU.
    layer_check.check_fit(
        layer_check.CASES["StandardAttention"],
        layer_check.CASES["CollaborativeAttention"],
        jit_compile=True,
        optimizer="sgd",
    )

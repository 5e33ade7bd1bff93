"""Activations of the Keras 3 models that Keras has no name for."""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
def gelu_approximate(x: Any) -> Any:
    """GELU with the tanh approximation (Hugging Face's "gelu_new", GPT-2's GELU).

    Args:
      x: A tensor.

    Example:

    >>> keras.layers.Dense(64, activation=gelu_approximate)

    References:
      - Hendrycks and Gimpel, 2016, "Gaussian Error Linear Units (GELUs)",
        https://arxiv.org/abs/1606.08415
    """
    return keras.activations.gelu(x, approximate=True)


def get_activation(identifier: Any) -> Any:
    """`keras.activations.get`, which also knows "gelu_approximate"."""
    if identifier == "gelu_approximate":
        return gelu_approximate
    return keras.activations.get(identifier)

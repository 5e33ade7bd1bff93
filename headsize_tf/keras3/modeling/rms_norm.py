"""RMS normalisation (Llama, Mistral, Qwen), on Keras 3."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class RMSNorm(keras.layers.Layer):
    """Root-mean-square normalisation with a learned scale (no centring, no bias).

    `y = x / sqrt(mean(x^2) + epsilon) * (scale_offset + scale)`, computed in
    float32 and cast back to the compute dtype, as keras-hub's `LlamaLayerNorm`
    and Hugging Face's `LlamaRMSNorm` do (Gemma's norms store the scale as an
    offset from 1: `scale_offset=1`, the weight starting at 0).

    Args:
      epsilon: Added to the mean square.
      scale_offset: What the learned weight is added to (0: the weight is
        the scale; 1: Gemma's `1 + w`).
      **kwargs: Base layer arguments (`name`, `dtype`, ...).

    Example:

    >>> RMSNorm(epsilon=1e-5)(keras.ops.ones((2, 3, 8))).shape
    (2, 3, 8)

    References:
      Zhang and Sennrich, "Root Mean Square Layer Normalization", NeurIPS
      2019. https://arxiv.org/abs/1910.07467
    """

    def __init__(self, epsilon: float = 1e-6, scale_offset: float = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        if isinstance(epsilon, bool) or not float(epsilon) > 0:
            raise ValueError(f"epsilon must be > 0; got {epsilon!r}.")
        if float(scale_offset) not in (0.0, 1.0):
            raise ValueError(f"scale_offset must be 0 or 1; got {scale_offset!r}.")
        self.epsilon = float(epsilon)
        self.scale_offset = float(scale_offset)
        self.supports_masking = True

    def build(self, input_shape):
        self.scale = self.add_weight(
            name="scale",
            shape=(input_shape[-1],),
            initializer="zeros" if self.scale_offset else "ones",
            trainable=True,
        )
        self.built = True

    def call(self, x):
        x = ops.cast(x, "float32")
        variance = ops.mean(ops.square(x), axis=-1, keepdims=True)
        x = ops.multiply(x, ops.rsqrt(ops.add(variance, self.epsilon)))
        scale = ops.cast(self.scale, "float32")
        if self.scale_offset:
            scale = ops.add(scale, self.scale_offset)
        return ops.cast(ops.multiply(x, scale), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["epsilon"] = self.epsilon
        config["scale_offset"] = self.scale_offset
        return config

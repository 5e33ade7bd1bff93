"""Multi-head attention with a head size set independently of width and heads."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.spec import SEQUENCE_LENGTH, check_head_size
from headsize_tf.layers.head_attention import HeadAttentionBase


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class FixedHeadAttention(HeadAttentionBase):
    """Multi-head attention with a fixed head size (FixedMultiHead).

    Bhojanapalli et al. (2020) show that the usual rule head size = width /
    heads creates a low-rank bottleneck: a head of size below the sequence
    length n cannot express every attention matrix. This layer sets the head
    size `d_p` independently of the width `d` and the number of heads `h`:
    each head projects the query, key and value to `d_p` dimensions and the
    output projection maps the `h * d_p` concatenated context back to `d`
    (or `output_shape`). The paper's default is `d_p = n`, available as
    `head_size="sequence_length"`, resolved to the key length at build time.

    Args:
      num_heads: Number of attention heads `h`.
      head_size: Per-head size `d_p` (a positive int), or "sequence_length"
        to use the (static) key sequence length.
      value_dim: Optional per-head value size; the head size by default.
      dropout: Dropout rate on the attention probabilities.
      use_bias: Whether the dense layers use bias vectors.
      output_shape: Size of the output's last dimension; the query width by
        default.
      attention_axes: Axes over which attention is applied.
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the dense biases.
      kernel_regularizer: Regularizer of the dense kernels.
      bias_regularizer: Regularizer of the dense biases.
      activity_regularizer: Regularizer of the output.
      kernel_constraint: Constraint of the dense kernels.
      bias_constraint: Constraint of the dense biases.
      seed: Optional int seed of the attention dropout.
      **kwargs: Base layer arguments such as `name` and `dtype`.

    Example:

    >>> layer = FixedHeadAttention(num_heads=8, head_size=32)
    >>> x = tf_keras.Input(shape=[32, 64])
    >>> layer(x, x).shape  # 8 heads of 32 at width 64
    TensorShape([None, 32, 64])

    References:
      Bhojanapalli, Yun, Rawat, Reddi, Kumar, "Low-Rank Bottleneck in
      Multi-head Attention Models", ICML 2020. https://arxiv.org/abs/2002.07028
    """

    def __init__(self, num_heads: int, head_size: int | str, **kwargs: Any):
        self._head_size_arg = check_head_size(head_size)
        super().__init__(num_heads=num_heads, **kwargs)

    def _resolve_head_size(self, query_shape: tf.TensorShape, key_shape: tf.TensorShape) -> int:
        if self._head_size_arg != SEQUENCE_LENGTH:
            return self._head_size_arg
        length = key_shape[1] if key_shape.rank and key_shape.rank > 2 else None
        if length is None:
            raise ValueError(
                f'FixedHeadAttention {self.name!r}: head_size="{SEQUENCE_LENGTH}" needs a static '
                f"key sequence length, but the key shape is {key_shape}. Give the inputs a fixed "
                "length (e.g. tf_keras.Input(shape=[128, width])) or pass an int head_size."
            )
        return int(length)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["head_size"] = self._head_size_arg
        return config

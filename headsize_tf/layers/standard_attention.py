"""Multi-head attention with the usual head size = width / heads rule."""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from headsize_tf.layers.head_attention import HeadAttentionBase


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class StandardAttention(HeadAttentionBase):
    """Multi-head attention whose head size is `width // num_heads`.

    The baseline of Bhojanapalli et al. (2020): every head projects the query,
    key and value to `width / num_heads` dimensions, so adding heads shrinks
    each head. The width is read from the query at build time; it must be a
    multiple of `num_heads`. Computes exactly what
    `tf_keras.layers.MultiHeadAttention(num_heads, key_dim=width // num_heads)`
    computes, plus per-head gates for pruning (all ones by default).

    Args:
      num_heads: Number of attention heads.
      value_dim: Optional per-head value size; the head size by default.
      dropout: Dropout rate on the attention probabilities.
      use_bias: Whether the dense layers use bias vectors.
      output_shape: Size of the output's last dimension; the query width by
        default.
      attention_axes: Axes over which attention is applied; by default all
        axes but batch, heads and features.
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the dense biases.
      kernel_regularizer: Regularizer of the dense kernels.
      bias_regularizer: Regularizer of the dense biases.
      activity_regularizer: Regularizer of the output.
      kernel_constraint: Constraint of the dense kernels.
      bias_constraint: Constraint of the dense biases.
      seed: Optional int seed of the attention dropout.
      **kwargs: Base layer arguments such as `name` and `dtype`.

    Call arguments: as `tf_keras.layers.MultiHeadAttention` (`query`, `value`,
    `key`, `attention_mask`, `return_attention_scores`, `training`,
    `use_causal_mask`).

    Example:

    >>> layer = StandardAttention(num_heads=4)
    >>> x = tf_keras.Input(shape=[16, 64])
    >>> layer(x, x).shape
    TensorShape([None, 16, 64])
    >>> layer.head_size
    16

    References:
      Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
      https://arxiv.org/abs/1706.03762
    """

    def _resolve_head_size(self, query_shape: tf.TensorShape, key_shape: tf.TensorShape) -> int:
        width = query_shape[-1]
        if width is None:
            raise ValueError(
                f"StandardAttention {self.name!r} needs a known query width (last dimension) "
                f"to set head size = width // num_heads; got query shape {query_shape}."
            )
        if width % self._num_heads:
            raise ValueError(
                f"StandardAttention {self.name!r}: the query width ({width}) is not a multiple of "
                f"num_heads ({self._num_heads}); head size = width // num_heads needs "
                "width % num_heads == 0. Use FixedHeadAttention for a head size independent "
                "of the width."
            )
        return width // self._num_heads

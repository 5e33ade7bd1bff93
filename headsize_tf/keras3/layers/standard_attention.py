"""Keras 3 multi-head attention with the usual head size = width / heads rule."""

from __future__ import annotations

import keras

from headsize_tf.keras3.layers.head_attention import HeadAttentionBase, Shape


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class StandardAttention(HeadAttentionBase):
    """Multi-head attention whose head size is `width // num_heads` (Keras 3).

    The baseline of Bhojanapalli et al. (2020): every head projects the query,
    key and value to `width / num_heads` dimensions, so adding heads shrinks
    each head. The width is read from the query at build time; it must be a
    multiple of `num_heads`. Computes exactly what
    `keras.layers.MultiHeadAttention(num_heads, key_dim=width // num_heads)`
    computes (same weights), plus per-head gates for pruning (all ones by
    default; `set_head_mask`; not saved with the model). The Keras 3 mirror of
    `headsize_tf.layers.StandardAttention` (tf_keras).

    Args:
      num_heads: Number of attention heads.
      value_dim: Optional per-head value size; the head size by default.
      dropout: Dropout rate on the attention probabilities.
      use_bias: Whether the dense layers use bias vectors.
      output_shape: Size of the output's last dimension; the query width by
        default.
      attention_axes: Axes over which attention is applied; by default all
        axes but batch, heads and features.
      sliding_window: Optional positive int: restricts each query to keys
        within `sliding_window - 1` positions.
      flash_attention: None (the backend decides), True or False, as in
        `keras.layers.MultiHeadAttention`.
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the dense biases.
      kernel_regularizer: Regularizer of the dense kernels.
      bias_regularizer: Regularizer of the dense biases.
      activity_regularizer: Regularizer of the output.
      kernel_constraint: Constraint of the dense kernels.
      bias_constraint: Constraint of the dense biases.
      use_gate: Whether to gate the attention output with a sigmoid
        projection of the query.
      seed: Optional int seed of the attention dropout.
      rope_max_wavelength, rope_scaling, rope_frequencies, query_key_norm_epsilon,
        use_output_bias, query_key_norm_offset, logit_soft_cap, query_scale: the
        Llama-family options (rotary positions, Qwen3's and Gemma 3's query/key
        norms, Gemma 2's logit cap, a query scale), as `HeadAttentionBase`
        documents them.
      **kwargs: Base layer arguments such as `name` and `dtype`.

    Call arguments: as `keras.layers.MultiHeadAttention` (`query`, `value`,
    `key`, `query_mask`, `value_mask`, `key_mask`, `attention_mask`,
    `return_attention_scores`, `training`, `use_causal_mask`).

    Example:

    >>> layer = StandardAttention(num_heads=4)
    >>> x = keras.Input(shape=(16, 64))
    >>> layer(x, x).shape
    (None, 16, 64)
    >>> layer.head_size
    16

    References:
      Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
      https://arxiv.org/abs/1706.03762
    """

    def _resolve_head_size(self, query_shape: Shape, key_shape: Shape) -> int:
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

"""Collaborative multi-head attention: heads share one key/query projection."""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.validation import (
    check_collaborative_args,
    collaborative_head_size,
    concatenate_mixing,
    mixing_initializer_identifier,
)
from headsize_tf.layers.head_attention import HeadAttentionBase, _as_shape, static_shape


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class ConcatenateMixing(tf_keras.initializers.Initializer):
    """Mixing matrix of blocks of ones: head i uses shared dims [i*b, (i+1)*b).

    With `shared_key_dim = num_heads * head_size` (b = head_size) the
    collaborative layer then computes exactly standard multi-head attention.
    """

    def __call__(self, shape, dtype=None, **kwargs):
        block = concatenate_mixing(int(shape[0]), int(shape[1]))
        return tf.cast(tf.constant(block), dtype or tf.float32)

    def get_config(self) -> dict[str, Any]:
        return {}


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class CollaborativeAttention(HeadAttentionBase):
    """Collaborative multi-head attention (heads share W_Q and W_K).

    Cordonnier, Loukas and Jaggi (2020) observe that the heads of a trained
    Transformer learn redundant key/query projections. Here all heads share a
    query projection `W_Q` and a key projection `W_K` of size
    `width x shared_key_dim` (`D`), and head `i` re-weights the `D` shared
    dimensions with a learned mixing vector `m_i`:

        scores_i = (X W_Q diag(m_i) W_K^T Y^T + 1 (c_i^T Y^T)) / sqrt(head_size)

    The key bias is dropped (the softmax ignores it); the query bias becomes a
    per-head content vector `c_i` (a `[key_width, num_heads]` weight, the
    `W_K^(i) b_Q^(i)` of a converted layer) dotted with each key. Values and
    the output projection are per head, as in standard attention. The softmax
    scale is `1/sqrt(head_size)`, the scale of the layer it replaces, never
    `1/sqrt(D / num_heads)`. With `mixing_initializer="concatenate"` and
    `D = num_heads * head_size` the layer is exactly standard attention.

    Inputs must be rank 3 `[batch, length, width]` (attention over axis 1).

    Args:
      num_heads: Number of attention heads.
      shared_key_dim: `D`, the size of the shared query/key space.
      head_size: Per-head value size and softmax scale; defaults to
        `width // num_heads` (the width must then be a multiple of heads).
      mixing_initializer: "concatenate" (blocks of ones; needs `D % heads ==
        0`), "ones", "uniform", "normal" (zero-mean, variance
        `head_size / D`), or any Keras initializer.
      mixing_regularizer: Regularizer of the mixing matrix.
      mixing_constraint: Constraint of the mixing matrix.
      value_dim: Optional per-head value size; the head size by default.
      dropout: Dropout rate on the attention probabilities.
      use_bias: Whether to use the content bias and value/output biases.
      output_shape: Size of the output's last dimension; the query width by
        default.
      attention_axes: None or (1,): attention over the sequence axis only.
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the biases (and the content bias).
      kernel_regularizer: Regularizer of the dense kernels.
      bias_regularizer: Regularizer of the biases.
      activity_regularizer: Regularizer of the output.
      kernel_constraint: Constraint of the dense kernels.
      bias_constraint: Constraint of the biases.
      seed: Optional int seed of the attention dropout.
      **kwargs: Base layer arguments such as `name` and `dtype`.

    Example:

    >>> layer = CollaborativeAttention(num_heads=12, shared_key_dim=192)
    >>> x = tf_keras.Input(shape=[128, 768])
    >>> layer(x, x).shape
    TensorShape([None, 128, 768])

    References:
      Cordonnier, Loukas, Jaggi, "Multi-Head Attention: Collaborate Instead of
      Concatenate", 2020. https://arxiv.org/abs/2006.16362
    """

    def __init__(
        self,
        num_heads: int,
        shared_key_dim: int,
        head_size: int | None = None,
        mixing_initializer: Any = "uniform",
        mixing_regularizer: Any = None,
        mixing_constraint: Any = None,
        **kwargs: Any,
    ):
        self._shared_key_dim, self._head_size_arg, self._mixing_initializer_arg = (
            check_collaborative_args(
                shared_key_dim,
                head_size,
                mixing_initializer,
                kwargs.get("attention_axes"),
                tf_keras.initializers.get,
            )
        )
        super().__init__(num_heads=num_heads, **kwargs)
        self._mixing_regularizer = tf_keras.regularizers.get(mixing_regularizer)
        self._mixing_constraint = tf_keras.constraints.get(mixing_constraint)
        self._mixing = None
        self._content_bias = None

    @property
    def shared_key_dim(self) -> int:
        return self._shared_key_dim

    @property
    def mixing(self) -> tf.Variable | None:
        """The `[num_heads, shared_key_dim]` mixing matrix; None before build."""
        return self._mixing

    @property
    def content_bias(self) -> tf.Variable | None:
        """The `[key_width, num_heads]` content bias; None if unbuilt or no bias."""
        return self._content_bias

    def _resolve_head_size(self, query_shape: tf.TensorShape, key_shape: tf.TensorShape) -> int:
        return collaborative_head_size(
            self.name,
            static_shape(query_shape),
            static_shape(key_shape),
            self._num_heads,
            self._head_size_arg,
        )

    def _build_projections(self, query, value, key=None):
        self._built_from_signature = True
        self._query_shape = _as_shape(query)
        self._value_shape = _as_shape(value)
        self._key_shape = self._value_shape if key is None else _as_shape(key)
        key_width = self._key_shape[-1]
        with tf.init_scope():
            common = self._get_common_kwargs_for_sublayer()
            self._query_dense = tf_keras.layers.EinsumDense(
                "abc,cd->abd",
                output_shape=[None, self._shared_key_dim],
                bias_axes=None,
                name="query",
                **common,
            )
            self._key_dense = tf_keras.layers.EinsumDense(
                "abc,cd->abd",
                output_shape=[None, self._shared_key_dim],
                bias_axes=None,
                name="key",
                **self._get_common_kwargs_for_sublayer(),
            )
            self._value_dense = tf_keras.layers.EinsumDense(
                "abc,cde->abde",
                output_shape=[None, self._num_heads, self._value_dim],
                bias_axes="de" if self._use_bias else None,
                name="value",
                **self._get_common_kwargs_for_sublayer(),
            )
            self._build_attention(4)
            self._output_dense = self._make_output_dense(
                2, self._get_common_kwargs_for_sublayer(), "attention_output"
            )
            self._mixing = self.add_weight(
                name="mixing",
                shape=[self._num_heads, self._shared_key_dim],
                initializer=tf_keras.initializers.get(
                    mixing_initializer_identifier(
                        self._mixing_initializer_arg,
                        self._key_dim,
                        self._shared_key_dim,
                        ConcatenateMixing,
                    )
                ),
                regularizer=self._mixing_regularizer,
                constraint=self._mixing_constraint,
                trainable=True,
            )
            if self._use_bias:
                self._content_bias = self.add_weight(
                    name="content_bias",
                    shape=[key_width, self._num_heads],
                    initializer=self._bias_initializer.__class__.from_config(
                        self._bias_initializer.get_config()
                    ),
                    regularizer=self._bias_regularizer,
                    constraint=self._bias_constraint,
                    trainable=True,
                )

    def _project_key(self, key) -> dict[str, tf.Tensor]:
        """{"key": shared keys [B, S, D], "content": content term [B, S, N]}."""
        projected = {"key": self._key_dense(key)}
        if self._content_bias is not None:
            dtype = projected["key"].dtype
            content_bias = tf.cast(self._content_bias, dtype)
            projected["content"] = tf.einsum("bsc,cn->bsn", tf.cast(key, dtype), content_bias)
        return projected

    def _logits_from_projected(self, query, projected):
        scale = 1.0 / math.sqrt(float(self._key_dim))
        projected_query = self._query_dense(query)  # [B, T, D]
        dtype = projected_query.dtype
        projected_query = projected_query * tf.cast(scale, dtype)
        mixing = tf.cast(self._mixing, dtype)
        # [B, N, T, D]: each head re-weights the shared query dimensions.
        mixed_query = projected_query[:, tf.newaxis, :, :] * mixing[tf.newaxis, :, tf.newaxis, :]
        logits = tf.einsum("bntd,bsd->bnts", mixed_query, projected["key"])
        if "content" in projected:
            content = tf.transpose(projected["content"], [0, 2, 1]) * tf.cast(scale, dtype)
            logits = logits + content[:, :, tf.newaxis, :]
        return logits

    def _cache_dims(self) -> dict[str, list[int]]:
        dims = {"key": [self._shared_key_dim], "value": [self._num_heads, self._value_dim]}
        if self._content_bias is not None:
            dims["content"] = [self._num_heads]
        return dims

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        mixing_init = self._mixing_initializer_arg
        if not isinstance(mixing_init, str | dict):
            mixing_init = tf_keras.initializers.serialize(mixing_init)
        config.update(
            {
                "shared_key_dim": self._shared_key_dim,
                "head_size": self._head_size_arg,
                "mixing_initializer": mixing_init,
                "mixing_regularizer": tf_keras.regularizers.serialize(self._mixing_regularizer),
                "mixing_constraint": tf_keras.constraints.serialize(self._mixing_constraint),
            }
        )
        return config

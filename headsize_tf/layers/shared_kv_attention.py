"""Base of the attention layers whose heads share keys and values (grouped, latent)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.validation import optional_head_size
from headsize_tf.layers.head_attention import HeadAttentionBase, _as_shape, static_shape


def dims(x: tf.Tensor) -> list[Any]:
    """The shape of `x`: static sizes where known, dynamic scalars elsewhere."""
    dynamic = tf.shape(x)
    return [size if size is not None else dynamic[i] for i, size in enumerate(x.shape.as_list())]


def with_ones_channel(value: tf.Tensor) -> tf.Tensor:
    """`value` with a trailing channel of ones on its last axis."""
    return tf.concat([value, tf.ones_like(value[..., :1])], axis=-1)


class SharedKVAttentionBase(HeadAttentionBase):
    """Base of `GroupedAttention` and `LatentAttention` (rank-3 inputs, axis 1).

    Both layers have per-head queries (`query` EinsumDense `[d, h, p]` with a
    bias `[h, p]`), a per-head output projection (`attention_output`
    `[h, v, o]` with a bias `[o]`) and keys and values shared between heads.
    Neither has a key bias (it shifts all of a query's scores equally, which
    the softmax ignores). The value bias is a weight of its own, `value_bias`
    `[h, v]`, one per *query* head: head `i`'s context gains
    `(sum_s a_is) value_bias[i]`, the row sum of its (dropped-out) attention
    weights times its bias, which is exactly what stock multi-head attention
    computes with a value bias (the row sum is 1 except on fully masked rows
    and under attention dropout). The layers compute the row sum exactly by
    attending over the values with a trailing channel of ones.

    Args:
      num_heads: Number of query heads h.
      head_size: Per-head query/key size p (the softmax scale); defaults to
        `width // num_heads` (the query width must then be a multiple).
      **kwargs: Arguments of `HeadAttentionBase` (`value_dim`, `dropout`,
        `use_bias`, `output_shape`, initializers, ...).

    Example:

    >>> from headsize_tf.layers import GroupedAttention
    >>> isinstance(GroupedAttention(num_heads=4, num_kv_heads=2), SharedKVAttentionBase)
    True

    References:
      Ainslie et al., "GQA: Training Generalized Multi-Query Transformer
      Models from Multi-Head Checkpoints", EMNLP 2023.
      https://arxiv.org/abs/2305.13245
    """

    def __init__(self, num_heads: int, head_size: int | None = None, **kwargs: Any):
        super().__init__(num_heads=num_heads, **kwargs)
        self._head_size_arg = head_size
        self._value_bias = None

    @property
    def value_bias(self) -> tf.Variable | None:
        """The per-query-head value bias `[num_heads, value_dim]`; None if unbuilt or no bias."""
        return self._value_bias

    # ---------------------------------------------------------------- build
    def _resolve_head_size(self, query_shape: tf.TensorShape, key_shape: tf.TensorShape) -> int:
        return optional_head_size(
            type(self).__name__,
            self.name,
            static_shape(query_shape),
            static_shape(key_shape),
            self._num_heads,
            self._head_size_arg,
        )

    def _record_shapes(self, query, value, key) -> None:
        self._built_from_signature = True
        self._query_shape = _as_shape(query)
        self._value_shape = _as_shape(value)
        self._key_shape = self._value_shape if key is None else _as_shape(key)

    def _per_head_dense(self, name: str, size: int, bias: bool) -> tf_keras.layers.Layer:
        """An EinsumDense `[B, L, width] -> [B, L, h, size]` (bias `[h, size]` if `bias`)."""
        return tf_keras.layers.EinsumDense(
            "abc,cde->abde",
            output_shape=[None, self._num_heads, size],
            bias_axes="de" if bias else None,
            name=name,
            **self._get_common_kwargs_for_sublayer(),
        )

    def _build_query(self) -> None:
        """The per-head query projection `[d, h, p]` (bias `[h, p]` with `use_bias`)."""
        self._query_dense = self._per_head_dense("query", self._key_dim, self._use_bias)

    def _build_output_and_value_bias(self) -> None:
        """Attention ops, the output projection `[h, v, o]` and the value bias `[h, v]`."""
        self._build_attention(4)
        self._output_dense = self._make_output_dense(
            2, self._get_common_kwargs_for_sublayer(), "attention_output"
        )
        if self._use_bias:
            self._value_bias = self.add_weight(
                name="value_bias",
                shape=[self._num_heads, self._value_dim],
                initializer=self._bias_initializer.__class__.from_config(
                    self._bias_initializer.get_config()
                ),
                regularizer=self._bias_regularizer,
                constraint=self._bias_constraint,
                trainable=True,
            )

    # ----------------------------------------------------------------- call
    def _with_value_bias_channel(self, value: tf.Tensor) -> tf.Tensor:
        """Values with a ones channel when the layer has a value bias (its row sums)."""
        return value if self._value_bias is None else with_ones_channel(value)

    def _add_value_bias(self, context: tf.Tensor, row_sums: tf.Tensor | None) -> tf.Tensor:
        """context [B, T, N, v] + row_sums [B, T, N, 1] * value_bias [N, v]."""
        if self._value_bias is None:
            return context
        return context + row_sums * tf.cast(self._value_bias, context.dtype)

    def _split_value_bias_channel(self, context: tf.Tensor) -> tf.Tensor:
        """Context [B, T, N, v (+1)] with the value bias added from the ones channel."""
        if self._value_bias is None:
            return context
        return self._add_value_bias(context[..., :-1], context[..., -1:])

    def _overrides_compute_attention(self) -> bool:
        """Whether a subclass overrides `_compute_attention` (then it is called)."""
        raise NotImplementedError

    def _projected_keys(self, projected: dict[str, tf.Tensor]) -> tf.Tensor:
        raise NotImplementedError

    def _projected_values(self, projected: dict[str, tf.Tensor]) -> tf.Tensor:
        raise NotImplementedError

    def _combine(self, weights: tf.Tensor, value: tf.Tensor) -> tf.Tensor:
        """Context [B, T, N, v] of (dropped-out) weights [B, N, T, S] over values."""
        raise NotImplementedError

    def _attend_projected(self, query, projected, attention_mask, training):
        value = self._with_value_bias_channel(self._projected_values(projected))
        if self._overrides_compute_attention():
            # Stock MHA's extension point, called with this layer's projections.
            context, scores = self._compute_attention(
                self._query_dense(query),
                self._projected_keys(projected),
                value,
                attention_mask=attention_mask,
                training=training,
            )
        else:
            scores = self._masked_softmax(
                self._logits_from_projected(query, projected), attention_mask
            )
            context = self._combine(self._dropout_layer(scores, training=training), value)
        return self._split_value_bias_channel(context), scores

    # --------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["head_size"] = self._head_size_arg
        return config

"""What the Keras 3 grouped-query and shared-latent layers have in common.

Both share keys and values between query heads, so their key/value
projections have no per-query-head axis and the value bias cannot live in
the value projection. Each query head keeps its own value bias `[h, v]`,
added to its context after attention scaled by the row sum of its attention
weights (1, except on fully masked rows and under attention dropout): exactly
what a multi-head layer's value bias contributes (`headsize_tf.core.kv_sharing`).
Their scores are computed with einsums (`keras.ops.dot_product_attention`
would repeat the shared keys and values per query head).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from headsize_tf.core.spec import check_positive_int
from headsize_tf.core.validation import collaborative_head_size
from headsize_tf.keras3.layers.head_attention import HeadAttentionBase, Shape


class SharedKVAttentionBase(HeadAttentionBase):
    """Base of `GroupedAttention` and `LatentAttention` (value bias per query head).

    Args:
      num_heads: Number of query heads.
      head_size: Per-head query/key size (the softmax scale); width //
        num_heads by default.
      **kwargs: `HeadAttentionBase` arguments.
    """

    _dot_product_scores = False

    def __init__(self, num_heads: int, head_size: int | None = None, **kwargs: Any):
        if head_size is not None:
            head_size = check_positive_int("head_size", head_size)
        super().__init__(num_heads=num_heads, **kwargs)
        self._head_size_arg = head_size
        self._value_bias = None

    @property
    def value_bias(self) -> keras.Variable | None:
        """The per-query-head value bias `[num_heads, value_dim]`; None unbuilt or without biases."""
        return self._value_bias

    def _resolve_head_size(self, query_shape: Shape, key_shape: Shape) -> int:
        axes = self._attention_axes
        axes = (axes,) if isinstance(axes, int) else axes
        if axes is not None and tuple(axes) not in ((1,), (-2,)):
            raise ValueError(
                f"{type(self).__name__} {self.name!r} attends over axis 1 of rank-3 inputs; "
                f"got attention_axes={self._attention_axes!r}."
            )
        return collaborative_head_size(
            self.name,
            query_shape,
            key_shape,
            self._num_heads,
            self._head_size_arg,
            owner=type(self).__name__,
        )

    def _dense(
        self,
        name: str,
        shape: Shape,
        equation: str,
        output: tuple,
        bias: bool,
        cls: type = keras.layers.EinsumDense,
    ) -> Any:
        dense = cls(
            equation,
            output_shape=output,
            bias_axes=("de" if len(output) == 3 else "d") if bias else None,
            name=name,
            **self._get_common_kwargs_for_sublayer(),
        )
        dense.build(shape)
        return dense

    def _build_query_output_and_bias(self, query_shape: Shape) -> None:
        """The per-head query and output projections, the optional gate and the value bias."""
        heads, key_dim, value_dim = self._num_heads, self._key_dim, self._value_dim
        self._query_dense = self._dense(
            "query", query_shape, "abc,cde->abde", (None, heads, key_dim), self._use_bias
        )
        if self._use_gate:
            self._gate_dense = keras.layers.EinsumDense(
                "abc,cde->abde",
                output_shape=(None, heads, value_dim),
                bias_axes="de" if self._use_bias else None,
                activation="sigmoid",
                name="gate",
                **self._get_common_kwargs_for_sublayer(),
            )
            self._gate_dense.build(query_shape)
        self._build_attention(4)
        self._output_dense = self._make_output_dense(
            query_shape, self._get_common_kwargs_for_sublayer(), "attention_output"
        )
        self._output_dense.build((query_shape[0], query_shape[1], heads, value_dim))
        if self._use_bias:
            self._value_bias = self.add_weight(
                name="value_bias",
                shape=(heads, value_dim),
                initializer=self._bias_initializer.__class__.from_config(
                    self._bias_initializer.get_config()
                ),
                regularizer=self._bias_regularizer,
                constraint=self._bias_constraint,
                trainable=True,
            )

    def _scaled_query(self, query: Any) -> Any:
        projected = self._project_query(query)
        return ops.multiply(projected, ops.cast(self._inverse_sqrt_key_dim, projected.dtype))

    def _softmax_and_dropout(
        self, logits: Any, attention_mask: Any, training: Any
    ) -> tuple[Any, Any]:
        scores = self._masked_softmax(logits, attention_mask)
        dropped = self._dropout_layer(scores, training=training) if self._dropout > 0 else scores
        return scores, dropped

    def _attend_projected(
        self,
        query: Any,
        projected: dict[str, Any],
        attention_mask: Any,
        training: Any,
        return_attention_scores: bool = False,
        use_causal_mask: bool = False,
    ) -> tuple[Any, Any]:
        if use_causal_mask:  # Every projected tensor has time on axis 1.
            attention_mask = self._compute_causal_mask(query, next(iter(projected.values())))
        projected = self._per_head(projected)
        scores, dropped = self._softmax_and_dropout(
            self._logits_from_projected(query, projected), attention_mask, training
        )
        context = self._combine(dropped, projected)
        return self._add_value_bias(context, dropped), scores

    def _per_head(self, projected: dict[str, Any]) -> dict[str, Any]:
        """The projected tensors the scores and the combination read (default: as cached)."""
        return projected

    def _combine(self, dropped: Any, projected: dict[str, Any]) -> Any:
        """Context [B, T, N, H] from attention weights [B, N, T, S] and projected values."""
        raise NotImplementedError

    def _add_value_bias(self, context: Any, dropped: Any) -> Any:
        """context [B, T, N, H] + row sums of `dropped` [B, N, T, S] times the value bias."""
        if self._value_bias is None:
            return context
        row_sums = ops.transpose(ops.sum(dropped, axis=-1), (0, 2, 1))  # [B, T, N]
        bias = ops.cast(self._value_bias, context.dtype)
        return ops.add(context, ops.multiply(ops.expand_dims(row_sums, -1), bias))

    def _add_value_bias_rows(self, context: Any, attends: Any) -> Any:
        """context [B, T, N, H] + attends [B, T, 1|N] (1: the row attends) times the value bias."""
        if self._value_bias is None:
            return context
        bias = ops.cast(self._value_bias, context.dtype)
        return ops.add(context, ops.multiply(ops.expand_dims(attends, -1), bias))

    def _call_compute_attention(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        raise NotImplementedError(
            f"{type(self).__name__} overrides `_compute_attention`, but its keys and values are "
            "shared between query heads, not the [B, S, N, H] tensors that method takes; "
            "override `_logits_from_projected` (the scores before the softmax) instead."
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["head_size"] = self._head_size_arg
        return config

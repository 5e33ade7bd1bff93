"""Keras 3 collaborative multi-head attention: heads share one key/query projection."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from headsize_tf.core.validation import (
    check_collaborative_args,
    collaborative_head_size,
    concatenate_mixing,
    mixing_initializer_identifier,
)
from headsize_tf.keras3.layers.head_attention import HeadAttentionBase, Shape


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class ConcatenateMixing(keras.initializers.Initializer):
    """Mixing matrix of blocks of ones: head i uses shared dims [i*b, (i+1)*b).

    With `shared_key_dim = num_heads * head_size` (b = head_size) the
    collaborative layer then computes exactly standard multi-head attention.
    The Keras 3 mirror of `headsize_tf.layers.ConcatenateMixing`.
    """

    def __call__(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        block = concatenate_mixing(int(shape[0]), int(shape[1]))
        return ops.convert_to_tensor(block, dtype=dtype or keras.config.floatx())

    def get_config(self) -> dict[str, Any]:
        return {}


def _get_initializer(value: Any) -> keras.initializers.Initializer:
    """`keras.initializers.get`, refusing None (no initializer)."""
    initializer = keras.initializers.get(value)
    if initializer is None:
        raise ValueError("No initializer.")
    return initializer


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class CollaborativeAttention(HeadAttentionBase):
    """Collaborative multi-head attention (heads share W_Q and W_K), Keras 3.

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
    `D = num_heads * head_size` the layer is exactly standard attention. The
    scores are computed with einsums (never `dot_product_attention`). The
    Keras 3 mirror of `headsize_tf.layers.CollaborativeAttention` (tf_keras).

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
      value_dim: Optional per-head value size; `head_size` by default.
      dropout: Dropout rate on the attention probabilities.
      use_bias: Whether to use the content bias and value/output biases.
      output_shape: Size of the output's last dimension; the query width by
        default.
      sliding_window: Optional positive int: restricts each query to keys
        within `sliding_window - 1` positions.
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the biases (and the content bias).
      kernel_regularizer: Regularizer of the dense kernels.
      bias_regularizer: Regularizer of the biases.
      activity_regularizer: Regularizer of the output.
      kernel_constraint: Constraint of the dense kernels.
      bias_constraint: Constraint of the biases.
      use_gate: Whether to gate the attention output with a sigmoid
        projection of the query.
      seed: Optional int seed of the attention dropout.
      attention_axes: None or (1,): attention over the sequence axis only.
      flash_attention: Accepted for the common signature: the scores are
        einsums whatever it says (True with `return_attention_scores` is an
        error, as in Keras).
      rope_max_wavelength, rope_scaling, rope_frequencies, use_output_bias,
        query_key_norm_offset, logit_soft_cap, query_scale: the Llama-family
        options (rotary positions: each head's mixed query turns with the
        shared key; Gemma 2's logit cap, a query scale), as `HeadAttentionBase`
        documents them. Query/key norms (`query_key_norm_epsilon`) are refused:
        the shared key has no heads to normalise.
      **kwargs: Base layer arguments such as `name` and `dtype`.

    Example:

    >>> layer = CollaborativeAttention(num_heads=12, shared_key_dim=192)
    >>> x = keras.Input(shape=(128, 768))
    >>> layer(x, x).shape
    (None, 128, 768)

    References:
      Cordonnier, Loukas, Jaggi, "Multi-Head Attention: Collaborate Instead of
      Concatenate", 2020. https://arxiv.org/abs/2006.16362
    """

    _per_head_projections = False  # Shared [B, S, D] keys (see HeadAttentionBase).

    _dot_product_scores = False

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
        shared_key_dim, head_size, mixing_initializer = check_collaborative_args(
            shared_key_dim,
            head_size,
            mixing_initializer,
            kwargs.get("attention_axes"),
            _get_initializer,
        )
        super().__init__(num_heads=num_heads, **kwargs)
        self._shared_key_dim = shared_key_dim
        self._head_size_arg = head_size
        self._mixing_initializer_arg = mixing_initializer
        self._mixing_regularizer = keras.regularizers.get(mixing_regularizer)
        self._mixing_constraint = keras.constraints.get(mixing_constraint)
        self._mixing = None
        self._content_bias = None

    @property
    def shared_key_dim(self) -> int:
        return self._shared_key_dim

    @property
    def mixing(self) -> keras.Variable | None:
        """The `[num_heads, shared_key_dim]` mixing matrix; None before build."""
        return self._mixing

    @property
    def content_bias(self) -> keras.Variable | None:
        """The `[key_width, num_heads]` content bias; None if unbuilt or no bias."""
        return self._content_bias

    def _resolve_head_size(self, query_shape: Shape, key_shape: Shape) -> int:
        return collaborative_head_size(
            self.name, query_shape, key_shape, self._num_heads, self._head_size_arg
        )

    def _build_projections(self, query_shape: Shape, value_shape: Shape, key_shape: Shape) -> None:
        if value_shape[1:-1] != key_shape[1:-1]:
            raise ValueError(
                "All dimensions of `value` and `key`, except the last one, "
                f"must be equal. Received: value_shape={value_shape} and "
                f"key_shape={key_shape}"
            )
        key_width = key_shape[-1]
        heads, value_dim, shared = self._num_heads, self._value_dim, self._shared_key_dim
        per_head_bias = "de" if self._use_bias else None
        self._query_dense = keras.layers.EinsumDense(
            "abc,cd->abd",
            output_shape=(None, shared),
            bias_axes=None,
            name="query",
            **self._get_common_kwargs_for_sublayer(),
        )
        self._query_dense.build(query_shape)
        self._key_dense = keras.layers.EinsumDense(
            "abc,cd->abd",
            output_shape=(None, shared),
            bias_axes=None,
            name="key",
            **self._get_common_kwargs_for_sublayer(),
        )
        self._key_dense.build(key_shape)
        if self._use_gate:
            self._gate_dense = keras.layers.EinsumDense(
                "abc,cde->abde",
                output_shape=(None, heads, value_dim),
                bias_axes=per_head_bias,
                activation="sigmoid",
                name="gate",
                **self._get_common_kwargs_for_sublayer(),
            )
            self._gate_dense.build(query_shape)
        self._value_dense = keras.layers.EinsumDense(
            "abc,cde->abde",
            output_shape=(None, heads, value_dim),
            bias_axes=per_head_bias,
            name="value",
            **self._get_common_kwargs_for_sublayer(),
        )
        self._value_dense.build(value_shape)
        self._build_attention(4)
        self._output_dense = self._make_output_dense(
            query_shape, self._get_common_kwargs_for_sublayer(), "attention_output"
        )
        self._output_dense.build((query_shape[0], query_shape[1], heads, value_dim))
        self._mixing = self.add_weight(
            name="mixing",
            shape=(heads, shared),
            initializer=keras.initializers.get(
                mixing_initializer_identifier(
                    self._mixing_initializer_arg, self._key_dim, shared, ConcatenateMixing
                )
            ),
            regularizer=self._mixing_regularizer,
            constraint=self._mixing_constraint,
            trainable=True,
        )
        if self._use_bias:
            self._content_bias = self.add_weight(
                name="content_bias",
                shape=(key_width, heads),
                initializer=self._bias_initializer.__class__.from_config(
                    self._bias_initializer.get_config()
                ),
                regularizer=self._bias_regularizer,
                constraint=self._bias_constraint,
                trainable=True,
            )

    def _num_rotary_heads(self) -> int:
        return 1  # The one shared key.

    def _rotary_dim(self) -> int:
        return self._shared_key_dim

    def _build_query_key_norms(self) -> None:
        if self._query_key_norm_epsilon is not None:
            raise ValueError(
                f"CollaborativeAttention {self.name!r} has no per-head keys to normalise; "
                "query_key_norm_epsilon is for standard, fixed-head and grouped attention."
            )

    def _project_key(self, key: Any) -> dict[str, Any]:
        """{"key": shared keys [B, S, D] (rotated), "content": content term [B, S, N]}."""
        shared = self._key_dense(key)
        if self.uses_rope:
            shared = self._rotate(shared[:, :, None])[:, :, 0]
        projected = {"key": shared}
        if self._content_bias is not None:
            dtype = projected["key"].dtype
            content_bias = ops.cast(self._content_bias, dtype)
            projected["content"] = ops.einsum("bsc,cn->bsn", ops.cast(key, dtype), content_bias)
        return projected

    def _logits_from_projected(self, query: Any, projected: dict[str, Any]) -> Any:
        projected_query = self._query_dense(query)  # [B, T, D]
        dtype = projected_query.dtype
        scale = ops.cast(self._inverse_sqrt_key_dim, dtype)
        projected_query = ops.multiply(projected_query, scale)
        mixing = ops.cast(self._mixing, dtype)
        # [B, N, T, D]: each head re-weights the shared query dimensions.
        mixed_query = ops.multiply(
            ops.expand_dims(projected_query, 1), ops.expand_dims(ops.expand_dims(mixing, 0), 2)
        )
        if self.uses_rope:  # Each head's mixed query turns at its position, as the shared key.
            mixed_query = ops.transpose(
                self._rotate(ops.transpose(mixed_query, (0, 2, 1, 3))), (0, 2, 1, 3)
            )
        logits = ops.einsum("bntd,bsd->bnts", mixed_query, projected["key"])
        if "content" in projected:
            content = ops.multiply(ops.transpose(projected["content"], (0, 2, 1)), scale)
            logits = ops.add(logits, ops.expand_dims(content, 2))
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
            mixing_init = keras.initializers.serialize(mixing_init)
        config.update(
            {
                "shared_key_dim": self._shared_key_dim,
                "head_size": self._head_size_arg,
                "mixing_initializer": mixing_init,
                "mixing_regularizer": keras.regularizers.serialize(self._mixing_regularizer),
                "mixing_constraint": keras.constraints.serialize(self._mixing_constraint),
            }
        )
        return config

"""A Transformer encoder block whose attention is any `AttentionSpec`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
from keras import ops

from headsize_tf.core.spec import AttentionSpec, SpecError, check_positive_int
from headsize_tf.keras3.layers.factory import make_attention
from headsize_tf.keras3.modeling.activations import get_activation


def clone_initializer(initializer: Any) -> Any:
    """A fresh copy of an initializer object (so two layers do not share a seed)."""
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    return initializer.__class__.from_config(initializer.get_config())


def merge_padding_and_attention_mask(padding_mask: Any, attention_mask: Any) -> Any:
    """An int32 `[batch, queries, keys]` (or `[batch, 1, keys]`) mask, or None."""
    mask = None
    if padding_mask is not None:
        if len(padding_mask.shape) != 2:
            raise ValueError(
                f"padding_mask must have shape [batch, length]; got shape {padding_mask.shape}."
            )
        mask = ops.cast(ops.expand_dims(padding_mask, axis=1), "int32")
    if attention_mask is not None:
        if len(attention_mask.shape) != 3:
            raise ValueError(
                "attention_mask must have shape [batch, queries, keys]; got shape "
                f"{attention_mask.shape}."
            )
        attention_mask = ops.cast(attention_mask, "int32")
        mask = attention_mask if mask is None else ops.minimum(mask, attention_mask)
    return mask


class CachedBlockMixin:
    """`call_cached`: a block over new positions with its attention's decoding cache.

    Mixed into blocks with `_self_attention_layer` (a layer with `call_cached`) and
    `_block(inputs, attend, training)` (the block around one attention call).
    """

    def call_cached(
        self,
        inputs: Any,
        cache: dict[str, Any] | None = None,
        attention_mask: Any = None,
        decode_loop_step: Any = None,
    ) -> tuple[Any, dict[str, Any]]:
        """The block over new positions with the attention's decoding cache (inference).

        The block's counterpart of the attention layer's `call_cached` (same
        arguments; no dropout): `inputs` [B, T_new, width] are the new
        positions, `attention_mask` [B, T_new, S] masks the updated cache;
        rotary attention rotates at `decode_loop_step` (else the cache's length).

        Returns:
          (output [B, T_new, width], updated cache).
        """
        updated = {}

        def attend(x):
            out, updated["cache"] = self._self_attention_layer.call_cached(
                x, cache, attention_mask=attention_mask, decode_loop_step=decode_loop_step
            )
            return out

        return self._block(inputs, attend, False), updated["cache"]


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class TransformerEncoder(CachedBlockMixin, keras.layers.Layer):
    """Transformer encoder block (self-attention and feed-forward net, residuals, LayerNorms).

    The block of keras-hub's `TransformerEncoder` with its arguments, except
    that `num_heads` is replaced by `attention`: an `AttentionSpec` (or a
    dict of its fields) whose layer `make_attention` builds, so the heads can
    be standard (head size = width // heads), of a fixed size
    (`head_size="sequence_length"` resolves to the key length at build) or
    collaborative. Post-LayerNorm (BERT) by default; `normalize_first=True`
    gives pre-LayerNorm (GPT-2).

    Masking: `padding_mask` (`[batch, length]`, 1 for tokens, 0 for padding)
    and `attention_mask` (`[batch, queries, keys]`) are combined by a minimum;
    without either, a Keras mask carried by `inputs` (e.g. from
    `Embedding(mask_zero=True)`) is the padding mask. The output carries the
    input's Keras mask.

    Args:
      intermediate_dim: Hidden size of the feed-forward net.
      attention: The attention layer's scalar `AttentionSpec` or a dict of
        its fields (`num_heads` lives here; no per-layer lists).
      dropout: Dropout rate of the attention output and the feed-forward
        output (and of the attention probabilities unless
        `attention_dropout` is given).
      attention_dropout: Dropout rate of the attention probabilities (None:
        `dropout`, keras-hub's behaviour).
      intermediate_dropout: Dropout rate after the feed-forward activation
        (0 in keras-hub; the tf_keras decoder block uses its `dropout`).
      activation: Feed-forward activation (a Keras name, a callable, or
        "gelu_approximate").
      layer_norm_epsilon: Epsilon of both LayerNorms.
      kernel_initializer: Initializer of the dense and attention kernels.
      bias_initializer: Initializer of the dense and attention biases.
      normalize_first: Normalise before attention and feed-forward (pre-LN)
        instead of after the residual sums (post-LN).
      **kwargs: Base layer arguments (`name`, `dtype`, `trainable`, ...).

    Call arguments:
      inputs: `[batch, length, width]`.
      padding_mask: Optional `[batch, length]` (bool or int).
      attention_mask: Optional `[batch, length, length]` (bool or int).
      training: Whether dropout is active.

    Example:

    >>> block = TransformerEncoder(
    ...     intermediate_dim=128,
    ...     attention=AttentionSpec("fixed_head", num_heads=8, head_size=32),
    ... )
    >>> x = keras.ops.ones((2, 10, 64))
    >>> block(x, padding_mask=keras.ops.ones((2, 10))).shape
    (2, 10, 64)

    References:
      - Vaswani et al., 2017, "Attention Is All You Need",
        https://arxiv.org/abs/1706.03762
      - Bhojanapalli et al., 2020, "Low-Rank Bottleneck in Multi-head
        Attention Models", https://arxiv.org/abs/2002.07028
      - Cordonnier et al., 2020, "Multi-Head Attention: Collaborate Instead
        of Concatenate", https://arxiv.org/abs/2006.16362
      - keras-hub's `keras_hub.layers.TransformerEncoder`.
    """

    def __init__(
        self,
        intermediate_dim: int,
        attention: AttentionSpec | Mapping[str, Any],
        dropout: float = 0.0,
        attention_dropout: float | None = None,
        intermediate_dropout: float = 0.0,
        activation: Any = "relu",
        layer_norm_epsilon: float = 1e-5,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        normalize_first: bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        spec = AttentionSpec.coerce(attention)
        if spec.per_layer_length is not None:
            raise SpecError(
                "TransformerEncoder takes a scalar attention spec; call spec.for_layer(i) for "
                "per-layer lists."
            )
        self.attention = spec
        for name, rate in (
            ("dropout", dropout),
            ("attention_dropout", attention_dropout),
            ("intermediate_dropout", intermediate_dropout),
        ):
            if rate is not None and (isinstance(rate, bool) or not 0.0 <= float(rate) < 1.0):
                raise ValueError(f"{name} must be in [0, 1); got {rate!r}.")
        self.dropout = float(dropout)
        self.attention_dropout = None if attention_dropout is None else float(attention_dropout)
        self.intermediate_dropout = float(intermediate_dropout)
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalize_first = bool(normalize_first)
        self.supports_masking = True
        self._self_attention_layer = make_attention(
            spec,
            dropout=self.dropout if self.attention_dropout is None else self.attention_dropout,
            name="self_attention_layer",
            **self._dense_kwargs(),
        )

    @property
    def attention_layer(self) -> keras.layers.Layer:
        """The self-attention layer (a `headsize_tf.keras3.layers` layer of `attention`)."""
        return self._self_attention_layer

    def _dense_kwargs(self) -> dict[str, Any]:
        return {
            "kernel_initializer": clone_initializer(self.kernel_initializer),
            "bias_initializer": clone_initializer(self.bias_initializer),
            "dtype": self.dtype_policy,
        }

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        self._self_attention_layer.build(query_shape=inputs_shape, value_shape=inputs_shape)
        self._self_attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon,
            dtype=self.dtype_policy,
            name="self_attention_layer_norm",
        )
        self._self_attention_layer_norm.build(inputs_shape)
        self._self_attention_dropout = keras.layers.Dropout(
            rate=self.dropout, dtype=self.dtype_policy, name="self_attention_dropout"
        )
        self._feedforward_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon,
            dtype=self.dtype_policy,
            name="feedforward_layer_norm",
        )
        self._feedforward_layer_norm.build(inputs_shape)
        self._feedforward_intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            name="feedforward_intermediate_dense",
            **self._dense_kwargs(),
        )
        self._feedforward_intermediate_dense.build(inputs_shape)
        self._feedforward_output_dense = keras.layers.Dense(
            hidden_dim, name="feedforward_output_dense", **self._dense_kwargs()
        )
        self._feedforward_output_dense.build((*inputs_shape[:-1], self.intermediate_dim))
        self._feedforward_dropout = keras.layers.Dropout(
            rate=self.dropout, dtype=self.dtype_policy, name="feedforward_dropout"
        )
        self._feedforward_intermediate_dropout = keras.layers.Dropout(
            rate=self.intermediate_dropout,
            dtype=self.dtype_policy,
            name="feedforward_intermediate_dropout",
        )
        self.built = True

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None, mask=None):
        if padding_mask is None and attention_mask is None:
            padding_mask = mask  # The Keras mask of `inputs`, if any.
        self_attention_mask = merge_padding_and_attention_mask(padding_mask, attention_mask)

        def attend(x):
            return self._self_attention_layer(
                query=x, value=x, attention_mask=self_attention_mask, training=training
            )

        return self._block(inputs, attend, training)

    def _block(self, inputs, attend, training):
        residual = inputs
        x = self._self_attention_layer_norm(inputs) if self.normalize_first else inputs
        x = attend(x)
        x = self._self_attention_dropout(x, training=training) + residual
        if not self.normalize_first:
            x = self._self_attention_layer_norm(x)

        residual = x
        if self.normalize_first:
            x = self._feedforward_layer_norm(x)
        x = self._feedforward_intermediate_dense(x)
        x = self._feedforward_intermediate_dropout(x, training=training)
        x = self._feedforward_output_dense(x)
        x = self._feedforward_dropout(x, training=training) + residual
        if not self.normalize_first:
            x = self._feedforward_layer_norm(x)
        return x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "attention": self.attention.to_dict(),
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "intermediate_dropout": self.intermediate_dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "normalize_first": self.normalize_first,
            }
        )
        return config

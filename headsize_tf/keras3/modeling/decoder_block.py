"""A Llama-shaped decoder block whose attention is any `AttentionSpec`, on Keras 3."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
from keras import ops

from headsize_tf.core.spec import AttentionSpec, SpecError, check_positive_int
from headsize_tf.keras3.layers.factory import make_attention
from headsize_tf.keras3.modeling.activations import get_activation
from headsize_tf.keras3.modeling.rms_norm import RMSNorm
from headsize_tf.keras3.modeling.transformer_encoder import CachedBlockMixin, clone_initializer


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class DecoderBlock(CachedBlockMixin, keras.layers.Layer):
    """Pre-RMSNorm self-attention and gated feed-forward, with residuals (Llama's block).

    `x + attention(rmsnorm(x))`, then `x + down(act(gate(rmsnorm(x))) * up(rmsnorm(x)))`:
    the block of Llama, Mistral and Qwen (SwiGLU with `activation="silu"`,
    GeGLU with "gelu_approximate"). The gate's activation runs in float32,
    as keras-hub's and PyTorch's. The attention layer is `make_attention` of
    a scalar `AttentionSpec` (rotary positions live in the spec), so heads
    can be standard, grouped, latent, collaborative or of a fixed size.

    Args:
      intermediate_dim: Size of the gated feed-forward.
      attention: A scalar `AttentionSpec` or a dict of its fields.
      activation: The gate's activation ("silu" by default).
      layer_norm_epsilon: Epsilon of both RMSNorms.
      norm_scale_offset: 0, or 1 for norms scaling by `1 + w` (Gemma).
      post_norms: Whether the attention and feed-forward outputs are also
        normalised before their residual adds (Gemma 2's sandwich norms).
      attention_logit_soft_cap: None, or the attention layer's logit cap
        (`logit_soft_cap`; Gemma 2).
      query_scale: None (1 / sqrt(head size)), or the attention layer's
        softmax scale (`query_scale`; Gemma 2 and 3 27B).
      attention_bias: Whether the query/key/value projections have biases
        (Qwen2); the output projection has none.
      query_key_norm: Whether queries and keys get a per-head RMSNorm before
        RoPE (Qwen3).
      dropout: Dropout of the attention probabilities and of both residual
        branches.
      kernel_initializer: Initializer of every kernel.
      **kwargs: Base layer arguments (`name`, `dtype`, ...).

    Call arguments:
      inputs: `[batch, length, width]`.
      attention_mask: Optional `[batch, length, length]`; None with
        `use_causal_mask=True` is the causal mask alone.
      use_causal_mask: Whether to mask future positions (when no mask is given).
      training: Whether dropout is active.

    Example:

    >>> block = DecoderBlock(64, {"kind": "grouped", "num_heads": 4, "num_kv_heads": 2,
    ...                           "rope_max_wavelength": 10000})
    >>> block(keras.ops.ones((2, 5, 32)), use_causal_mask=True).shape
    (2, 5, 32)

    References:
      Touvron et al., "LLaMA: Open and Efficient Foundation Language Models",
      2023. https://arxiv.org/abs/2302.13971
      Shazeer, "GLU Variants Improve Transformer", 2020.
      https://arxiv.org/abs/2002.05202
    """

    def __init__(
        self,
        intermediate_dim: int,
        attention: AttentionSpec | Mapping[str, Any],
        activation: Any = "silu",
        layer_norm_epsilon: float = 1e-6,
        norm_scale_offset: float = 0.0,
        post_norms: bool = False,
        attention_logit_soft_cap: float | None = None,
        query_scale: float | None = None,
        attention_bias: bool = False,
        query_key_norm: bool = False,
        dropout: float = 0.0,
        kernel_initializer: Any = "glorot_uniform",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        spec = AttentionSpec.coerce(attention)
        if spec.per_layer_length is not None:
            raise SpecError(
                "DecoderBlock takes a scalar attention spec; call spec.for_layer(i) for "
                "per-layer lists."
            )
        if isinstance(dropout, bool) or not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {dropout!r}.")
        self.attention = spec
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.norm_scale_offset = float(norm_scale_offset)
        self.post_norms = bool(post_norms)
        self.attention_logit_soft_cap = (
            None if attention_logit_soft_cap is None else float(attention_logit_soft_cap)
        )
        self.query_scale = None if query_scale is None else float(query_scale)
        self.attention_bias = bool(attention_bias)
        self.query_key_norm = bool(query_key_norm)
        self.dropout = float(dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self._self_attention_layer = make_attention(
            spec,
            dropout=self.dropout,
            use_bias=self.attention_bias,
            use_output_bias=False,
            query_key_norm_epsilon=self.layer_norm_epsilon if self.query_key_norm else None,
            logit_soft_cap=self.attention_logit_soft_cap,
            query_scale=self.query_scale,
            query_key_norm_offset=self.norm_scale_offset if self.query_key_norm else 0.0,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="self_attention",
        )

    @property
    def attention_layer(self) -> keras.layers.Layer:
        """The self-attention layer (a `headsize_tf.keras3.layers` layer of `attention`)."""
        return self._self_attention_layer

    def _dense(self, units: int, name: str) -> keras.layers.Dense:
        return keras.layers.Dense(
            units,
            use_bias=False,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, inputs_shape):
        width = inputs_shape[-1]
        self._self_attention_layer.build(query_shape=inputs_shape, value_shape=inputs_shape)
        self._self_attention_layer_norm = RMSNorm(
            self.layer_norm_epsilon,
            self.norm_scale_offset,
            dtype=self.dtype_policy,
            name="self_attention_layer_norm",
        )
        self._self_attention_layer_norm.build(inputs_shape)
        self._feedforward_layer_norm = RMSNorm(
            self.layer_norm_epsilon,
            self.norm_scale_offset,
            dtype=self.dtype_policy,
            name="feedforward_layer_norm",
        )
        self._feedforward_layer_norm.build(inputs_shape)
        self._post_norms = []
        if self.post_norms:
            self._post_norms = [
                RMSNorm(
                    self.layer_norm_epsilon,
                    self.norm_scale_offset,
                    dtype=self.dtype_policy,
                    name=name,
                )
                for name in ("post_attention_layer_norm", "post_feedforward_layer_norm")
            ]
            for norm in self._post_norms:
                norm.build(inputs_shape)
        self._feedforward_gate_dense = self._dense(self.intermediate_dim, "feedforward_gate_dense")
        self._feedforward_gate_dense.build(inputs_shape)
        self._feedforward_intermediate_dense = self._dense(
            self.intermediate_dim, "feedforward_intermediate_dense"
        )
        self._feedforward_intermediate_dense.build(inputs_shape)
        self._feedforward_output_dense = self._dense(width, "feedforward_output_dense")
        self._feedforward_output_dense.build((*inputs_shape[:-1], self.intermediate_dim))
        self._dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(self, inputs, attention_mask=None, use_causal_mask=False, training=None):
        def attend(x):
            return self._self_attention_layer(
                query=x,
                value=x,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask and attention_mask is None,
                training=training,
            )

        return self._block(inputs, attend, training)

    def _block(self, inputs, attend, training):
        x = attend(self._self_attention_layer_norm(inputs))
        if self._post_norms:
            x = self._post_norms[0](x)
        x = ops.add(self._dropout_layer(x, training=training), inputs)
        residual = x
        x = self._feedforward_layer_norm(x)
        gate = ops.cast(self._feedforward_gate_dense(x), "float32")
        gate = ops.cast(self.activation(gate), self.compute_dtype)
        x = ops.multiply(self._feedforward_intermediate_dense(x), gate)
        x = self._feedforward_output_dense(x)
        if self._post_norms:
            x = self._post_norms[1](x)
        return ops.add(self._dropout_layer(x, training=training), residual)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "attention": self.attention.to_dict(),
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "norm_scale_offset": self.norm_scale_offset,
                "post_norms": self.post_norms,
                "attention_logit_soft_cap": self.attention_logit_soft_cap,
                "query_scale": self.query_scale,
                "attention_bias": self.attention_bias,
                "query_key_norm": self.query_key_norm,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config

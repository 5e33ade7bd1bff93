"""Pre-LN Transformer decoder block with cached decoding for any head size."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.layers.factory import attention_kwargs, make_attention


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class HeadsizeDecoderBlock(tf_keras.layers.Layer):
    """Causal self-attention (+ optional cross-attention) and a feed-forward net.

    Pre-LayerNorm residual block: `x + SelfAttn(LN(x))`, then (with
    `cross_attention=True`) `x + CrossAttn(LN(x), memory)`, then
    `x + FFN(LN(x))`. Attention layers are `headsize_tf.layers` of the chosen
    kind. `call_cached` decodes incrementally: the cache holds each attention
    layer's own key/value projections, so it is right for any head size
    (Model Garden's decoder cache assumes width / heads).

    Args:
      attention_type: "standard", "fixed_head" or "collaborative".
      num_heads: Heads of every attention layer.
      inner_dim: Feed-forward hidden size.
      head_size: fixed_head head size (int) / collaborative value head size.
      shared_key_dim: collaborative shared query/key size.
      mixing_initializer: collaborative mixing initializer.
      cross_attention: Whether the block attends to an encoder memory.
      causal: Causal self-attention (decoder); False for an encoder block.
      inner_activation: Feed-forward activation.
      dropout: Residual and feed-forward dropout.
      attention_dropout: Dropout on attention probabilities.
      norm_epsilon: LayerNorm epsilon.
      kernel_initializer: Initializer of all kernels.
      **kwargs: Base layer arguments.
    """

    def __init__(
        self,
        attention_type: str,
        num_heads: int,
        inner_dim: int,
        head_size: int | None = None,
        shared_key_dim: int | None = None,
        mixing_initializer: Any = "uniform",
        cross_attention: bool = False,
        causal: bool = True,
        inner_activation: str = "gelu",
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        norm_epsilon: float = 1e-6,
        kernel_initializer: Any = "glorot_uniform",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self._attention_args = attention_kwargs(
            attention_type, num_heads, head_size, shared_key_dim, mixing_initializer
        )
        self._config = {
            "attention_type": attention_type,
            "num_heads": num_heads,
            "inner_dim": inner_dim,
            "head_size": head_size,
            "shared_key_dim": shared_key_dim,
            "mixing_initializer": mixing_initializer,
            "cross_attention": cross_attention,
            "causal": causal,
            "inner_activation": inner_activation,
            "dropout": dropout,
            "attention_dropout": attention_dropout,
            "norm_epsilon": norm_epsilon,
            "kernel_initializer": tf_keras.initializers.serialize(
                tf_keras.initializers.get(kernel_initializer)
            ),
        }

        def attention(name: str):
            return make_attention(
                attention_type,
                **self._attention_args,
                dropout=attention_dropout,
                kernel_initializer=tf_keras.initializers.get(self._config["kernel_initializer"]),
                name=name,
            )

        def norm(name: str):
            return tf_keras.layers.LayerNormalization(epsilon=norm_epsilon, name=name)

        self.self_attention = attention("self_attention")
        self.self_attention_norm = norm("self_attention_norm")
        self.cross_attention = attention("cross_attention") if cross_attention else None
        self.cross_attention_norm = norm("cross_attention_norm") if cross_attention else None
        self.ffn_norm = norm("ffn_norm")
        init = self._config["kernel_initializer"]
        self.intermediate = tf_keras.layers.Dense(
            inner_dim,
            activation=inner_activation,
            kernel_initializer=tf_keras.initializers.get(init),
            name="intermediate",
        )
        self.output_dense = None  # Built in `build` (needs the width).
        self.dropout = tf_keras.layers.Dropout(dropout)

    def build(self, input_shape):
        width = tf.TensorShape(input_shape)[-1]
        self.output_dense = tf_keras.layers.Dense(
            width,
            kernel_initializer=tf_keras.initializers.get(self._config["kernel_initializer"]),
            name="output",
        )
        super().build(input_shape)

    def _feed_forward(self, x, training):
        y = self.intermediate(self.ffn_norm(x))
        y = self.dropout(self.output_dense(self.dropout(y, training=training)), training=training)
        return x + y

    def call(self, x, memory=None, memory_mask=None, self_mask=None, training=None):
        """Full-sequence forward.

        Args:
          x: [B, T, width].
          memory: Encoder output [B, S, width] for cross-attention.
          memory_mask: [B, T or 1, S] mask over the memory.
          self_mask: [B, T or 1, T] mask over `x` (combined with the causal mask).
          training: Dropout mode.
        """
        y = self.self_attention_norm(x)
        y = self.self_attention(
            y,
            y,
            attention_mask=self_mask,
            use_causal_mask=self._config["causal"],
            training=training,
        )
        x = x + self.dropout(y, training=training)
        if self.cross_attention is not None:
            y = self.cross_attention_norm(x)
            y = self.cross_attention(y, memory, attention_mask=memory_mask, training=training)
            x = x + self.dropout(y, training=training)
        return self._feed_forward(x, training)

    def project_memory(self, memory):
        """Cross-attention key/value projections of the memory (computed once)."""
        return self.cross_attention._project_key_value(memory, memory)

    def call_cached(
        self,
        x,
        cache,
        self_mask=None,
        decode_loop_step=None,
        memory_projected=None,
        memory_mask=None,
        training=None,
    ):
        """Decodes new positions `x` [B, T_new, width] given the self-attention cache."""
        y = self.self_attention_norm(x)
        y, cache = self.self_attention.call_cached(
            y, cache, attention_mask=self_mask, decode_loop_step=decode_loop_step, training=training
        )
        x = x + self.dropout(y, training=training)
        if self.cross_attention is not None:
            y = self.cross_attention_norm(x)
            context, _ = self.cross_attention._attend_projected(
                y, memory_projected, memory_mask, training
            )
            x = x + self.dropout(self.cross_attention._project_output(context), training=training)
        return self._feed_forward(x, training), cache

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(self._config)
        return config

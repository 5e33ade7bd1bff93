"""A Model Garden Transformer encoder block with a configurable attention kind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf
import tf_keras
from official.modeling import tf_utils
from official.nlp.modeling import layers as nlp_layers

from headsize_tf.layers.factory import attention_kwargs, make_attention


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class HeadsizeTransformerBlock(nlp_layers.TransformerEncoderBlock):
    """`TransformerEncoderBlock` whose self-attention is one of our layers.

    Model Garden's block has no attention hook and builds a stock
    `MultiHeadAttention` with head size width // heads. This block calls the
    stock `build`, then replaces the (not yet built, weightless) stock layer by
    `StandardAttention`, `FixedHeadAttention` or `CollaborativeAttention` with
    the same dropout, initializers, regularizers and name, so checkpoints keep
    the stock variable layout for everything else.

    Args:
      attention_type: "standard", "fixed_head" or "collaborative".
      head_size: Head size for fixed_head ("sequence_length" allowed) and
        optional value head size for collaborative.
      shared_key_dim: Shared query/key size for collaborative.
      mixing_initializer: Mixing initializer for collaborative.
      pruned_heads: Indices (among `num_attention_heads`) of heads removed by
        pruning. The layer holds only the kept heads, each of the unpruned
        head size; a layer with every head pruned keeps one head whose gate
        is 0 (its output is the output bias, as for the masked layer).
      **kwargs: `TransformerEncoderBlock` arguments (`num_attention_heads`,
        `inner_dim`, `inner_activation`, dropouts, `norm_first`, ...).

    References:
      Bhojanapalli et al. 2020, https://arxiv.org/abs/2002.07028;
      Cordonnier et al. 2020, https://arxiv.org/abs/2006.16362.
    """

    def __init__(
        self,
        attention_type: str = "standard",
        head_size: int | str | None = None,
        shared_key_dim: int | None = None,
        mixing_initializer: Any = "uniform",
        pruned_heads: Sequence[int] = (),
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        pruned = sorted({int(h) for h in pruned_heads})
        if pruned and (pruned[0] < 0 or pruned[-1] >= self._num_heads):
            raise ValueError(
                f"pruned_heads {list(pruned_heads)} must be indices in [0, {self._num_heads})."
            )
        self._pruned_heads = pruned
        self._attention_type = attention_type
        self._head_size = head_size
        self._shared_key_dim = shared_key_dim
        self._mixing_initializer = mixing_initializer
        # Validate now, not at build time.
        attention_kwargs(
            attention_type, self._num_heads, head_size, shared_key_dim, mixing_initializer
        )

    @property
    def pruned_heads(self) -> list[int]:
        return list(self._pruned_heads)

    @property
    def kept_heads(self) -> list[int]:
        """Original indices of the heads this block holds (in order)."""
        return [h for h in range(self._num_heads) if h not in set(self._pruned_heads)]

    def build(self, input_shape):
        super().build(input_shape)
        attention_type, head_size = self._attention_type, self._head_size
        num_heads = max(len(self.kept_heads), 1)
        if self._pruned_heads:
            # As the stock build reads it: a shape, or a list [input, mask(, key)].
            if isinstance(input_shape, tf.TensorShape):
                width = input_shape[-1]
            else:
                width = tf.TensorShape(input_shape[0])[-1]
            if attention_type == "standard":
                # Kept heads keep their size width // heads: fixed-head attention.
                attention_type, head_size = "fixed_head", width // self._num_heads
            elif attention_type == "collaborative" and head_size is None:
                head_size = width // self._num_heads
        self._attention_layer = make_attention(
            attention_type,
            **attention_kwargs(
                attention_type,
                num_heads,
                head_size,
                self._shared_key_dim,
                self._mixing_initializer,
            ),
            dropout=self._attention_dropout_rate,
            use_bias=self._use_bias,
            kernel_initializer=self._attention_initializer,
            bias_initializer=tf_utils.clone_initializer(self._bias_initializer),
            attention_axes=self._attention_axes,
            output_shape=self._output_last_dim,
            bias_regularizer=self._bias_regularizer,
            activity_regularizer=self._activity_regularizer,
            kernel_constraint=self._kernel_constraint,
            bias_constraint=self._bias_constraint,
            name="self_attention",
        )
        if self._pruned_heads and not self.kept_heads:
            # Every head pruned: one placeholder head, gated off for good.
            shape = tf.TensorShape([None, None, width])
            self._attention_layer._build_from_signature(shape, shape)
            self._attention_layer.set_head_mask([0.0])

    @property
    def attention_layer(self):
        return self._attention_layer

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "attention_type": self._attention_type,
                "head_size": self._head_size,
                "shared_key_dim": self._shared_key_dim,
                "mixing_initializer": self._mixing_initializer,
                "pruned_heads": list(self._pruned_heads),
            }
        )
        return config

"""Pre-LN Transformer decoder block with cached decoding for any head size."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.spec import (
    OPTIONAL_HEAD_SIZE_KINDS,
    AttentionSpec,
    check_no_legacy_keys,
)
from headsize_tf.layers.autograph import without_autograph
from headsize_tf.layers.factory import make_attention


def _kept_groups(spec: AttentionSpec, pruned: Sequence[int], name: str) -> int:
    """Key/value heads left when `pruned` query heads leave a grouped layer (whole groups)."""
    size = spec.num_heads // spec.num_kv_heads
    groups = {h // size for h in pruned}
    whole = {h for g in groups for h in range(g * size, (g + 1) * size)}
    if whole != set(pruned):
        raise ValueError(
            f"pruned_heads[{name!r}] {sorted(pruned)} splits a group of {size} query heads; a "
            f"grouped layer ({spec.num_kv_heads} key/value heads) loses whole groups only."
        )
    return spec.num_kv_heads - len(groups)


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
@without_autograph
class HeadsizeDecoderBlock(tf_keras.layers.Layer):
    """Causal self-attention (+ optional cross-attention) and a feed-forward net.

    Pre-LayerNorm residual block: `x + SelfAttn(LN(x))`, then (with
    `cross_attention=True`) `x + CrossAttn(LN(x), memory)`, then
    `x + FFN(LN(x))`. Attention layers are `headsize_tf.layers` of the chosen
    kind (standard, fixed_head, collaborative, grouped or latent; the
    cross-attention is of the same kind, a latent one computing its latent
    from the encoder output). `call_cached` decodes incrementally: the cache
    holds each attention layer's own key-side tensors (per-head keys and
    values, grouped ones, or a latent), so it is right for any head size and
    kind (Model Garden's decoder cache assumes width / heads).

    Args:
      attention: The `AttentionSpec` (or a dict of its fields) of every
        attention layer of the block, with one head count and head size.
      inner_dim: Feed-forward hidden size.
      cross_attention: Whether the block attends to an encoder memory.
      causal: Causal self-attention (decoder); False for an encoder block.
      inner_activation: Feed-forward activation.
      dropout: Residual and feed-forward dropout.
      attention_dropout: Dropout on attention probabilities.
      norm_epsilon: LayerNorm epsilon.
      kernel_initializer: Initializer of all kernels.
      pruned_heads: Indices of heads removed by pruning, per attention layer:
        `{"self_attention": [...], "cross_attention": [...]}`.
      **kwargs: Base layer arguments.
    """

    def __init__(
        self,
        attention: AttentionSpec | Mapping[str, Any] | None = None,
        inner_dim: int = 2048,
        cross_attention: bool = False,
        causal: bool = True,
        inner_activation: str = "gelu",
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        norm_epsilon: float = 1e-6,
        kernel_initializer: Any = "glorot_uniform",
        pruned_heads: Mapping[str, Sequence[int]] | None = None,
        **kwargs: Any,
    ):
        check_no_legacy_keys(type(self).__name__, kwargs)
        super().__init__(**kwargs)
        spec = AttentionSpec.coerce(attention)
        if spec.per_layer_length is not None:
            raise ValueError(
                "HeadsizeDecoderBlock needs a one-layer attention spec; got per-layer lists "
                f"{spec.to_dict()} (use spec.for_layer(i))."
            )
        self._spec = spec
        pruned = {k: sorted({int(h) for h in v}) for k, v in (pruned_heads or {}).items()}
        for key, heads in pruned.items():
            if key not in ("self_attention", "cross_attention"):
                raise ValueError(
                    f"pruned_heads key {key!r}; expected 'self_attention' or 'cross_attention'."
                )
            if heads and (heads[0] < 0 or heads[-1] >= spec.num_heads):
                raise ValueError(
                    f"pruned_heads[{key!r}] {heads} must be indices in [0, {spec.num_heads})."
                )
        self._pruned_heads = {k: v for k, v in pruned.items() if v}
        self._config = {
            "attention": spec.to_dict(),
            "inner_dim": inner_dim,
            "cross_attention": cross_attention,
            "causal": causal,
            "inner_activation": inner_activation,
            "dropout": dropout,
            "attention_dropout": attention_dropout,
            "norm_epsilon": norm_epsilon,
            "kernel_initializer": tf_keras.initializers.serialize(
                tf_keras.initializers.get(kernel_initializer)
            ),
            "pruned_heads": dict(self._pruned_heads) or None,
        }

        def attention(name: str):
            return make_attention(
                self._layer_spec(name),
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

    @property
    def attention_spec(self) -> AttentionSpec:
        return self._spec

    @property
    def pruned_heads(self) -> dict[str, list[int]]:
        return {k: list(v) for k, v in self._pruned_heads.items()}

    def layer_spec(self, name: str) -> AttentionSpec:
        """The spec of attention layer `name` ("self_attention", "cross_attention") as built.

        Args:
          name: The attention layer's attribute name.
        """
        return self._layer_spec(name)

    def _layer_spec(self, name: str) -> AttentionSpec:
        """The spec of one attention layer after pruning (kept heads only)."""
        pruned = self._pruned_heads.get(name)
        if not pruned:
            return self._spec
        spec = self._spec
        kept = spec.num_heads - len(pruned)
        if spec.kind == "standard" or (
            spec.kind in OPTIONAL_HEAD_SIZE_KINDS and spec.head_size is None
        ):
            raise ValueError(
                f"Pruning {name} of a {spec.kind} block needs the head size in the spec; "
                "the pruning tool writes kind fixed_head with the original head size."
            )
        if kept == 0:
            raise ValueError(f"pruned_heads[{name!r}] removes every head; keep at least one.")
        if spec.kind == "grouped":
            return dataclasses.replace(
                spec, num_heads=kept, num_kv_heads=_kept_groups(spec, pruned, name)
            )
        return dataclasses.replace(spec, num_heads=kept)

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
        """Cross-attention key-side projections of the memory (computed once per source).

        Whatever the cross-attention layer caches for its own decoding, entry
        for entry (`headsize_tf.core.kv_cache.cache_entries`): per-head keys
        and values `[B, S, h, .]`, grouped ones `[B, S, G, .]`, or a latent
        layer's latent of the encoder output `[B, S, r]`.
        """
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
            # The layer's own cached attention (a latent layer attends in latent space).
            context, _ = self.cross_attention._attend_cached(
                y, memory_projected, memory_mask, training
            )
            x = x + self.dropout(self.cross_attention._project_output(context), training=training)
        return self._feed_forward(x, training), cache

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(self._config)
        config["attention"] = self._spec.to_dict()
        config["pruned_heads"] = self.pruned_heads or None
        return config

"""Shared-latent attention (MLA without RoPE): keys and values from one cached latent."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.validation import check_latent_args
from headsize_tf.layers.autograph import without_autograph
from headsize_tf.layers.head_attention import _as_shape, inverse_sqrt
from headsize_tf.layers.shared_kv_attention import SharedKVAttentionBase


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
@without_autograph
class LatentAttention(SharedKVAttentionBase):
    """Multi-head attention over a shared key/value latent (DeepSeek-V2's MLA, no RoPE).

    Every position of the value input `y` is compressed to one latent
    `c = y W_DKV` of size `r = kv_latent_dim`; head `i`'s keys and values are
    its up-projections `k^(i) = c W_UK^(i)`, `v^(i) = c W_UV^(i)`. A decoder
    caches only `c`: `r` numbers per token and layer instead of `h (p + v)`.

    A full-sequence call up-projects the keys and values and attends per head.
    `call_cached` appends the new latents to the cache and, with
    `absorb=True`, attends in latent space without up-projecting the cache:
    the query absorbs the key up-projection, `q~^(i) = q^(i) W_UK^(i)T`
    (`[B, T, h, r]`), the logits are `q~^(i) . c / sqrt(p)`, the latent
    context is `a^(i) c` and the context is that times `W_UV^(i)`
    (`absorb=False` up-projects the cache and attends as a full call; both
    agree to float rounding).

    The latent is computed from one input, the value: `key` must be None or
    the value tensor itself.

    Weights: `value_bias` `[h, v]` (per query head, see
    `SharedKVAttentionBase`; only with `use_bias`), `query` `[d, h, p]` with a
    bias `[h, p]`, `latent` `[e, r]`, `key_up` `[r, h, p]` and `value_up`
    `[r, h, v]` without biases, `attention_output` `[h, v, o]` with a bias
    `[o]`. `headsize_tf.core.kv_sharing.latent_weights` converts a trained
    multi-head layer to these weights (`layers.roles.assign_weights` writes
    them); at full rank the conversion is exact.

    A subclass overriding stock MHA's `_compute_attention(query, key, value,
    attention_mask, training)` is called in full-sequence calls with the
    projected query and the up-projected per-head keys and values `[B, S, h,
    ...]` (the values with a trailing channel of ones with `use_bias`: its
    context is each head's attention row sum, which scales the value bias).
    `call_cached` keeps the built-in attention.

    Inputs must be rank 3 `[batch, length, width]` (attention over axis 1).

    Args:
      num_heads: Number of heads `h`.
      kv_latent_dim: Size `r` of the shared key/value latent.
      head_size: Per-head query/key size `p` (softmax scale `1/sqrt(p)`);
        defaults to `width // num_heads`.
      value_dim: Per-head value size `v`; defaults to the head size.
      absorb: Whether `call_cached` attends in latent space (absorbing the
        key and value up-projections) instead of up-projecting the cache.
      dropout: Dropout rate on the attention probabilities.
      use_bias: Whether the query, value and output projections have biases.
      output_shape: Size of the output's last dimension; the query width by
        default.
      attention_axes: None or 1 (rank-3 inputs only).
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the biases (and `value_bias`).
      kernel_regularizer: Regularizer of the dense kernels.
      bias_regularizer: Regularizer of the biases.
      activity_regularizer: Regularizer of the output.
      kernel_constraint: Constraint of the dense kernels.
      bias_constraint: Constraint of the biases.
      seed: Optional int seed of the attention dropout.
      **kwargs: Base layer arguments such as `name` and `dtype`.

    Example:

    >>> layer = LatentAttention(num_heads=8, kv_latent_dim=16)
    >>> x = tf_keras.Input(shape=[16, 64])
    >>> layer(x, x).shape
    TensorShape([None, 16, 64])
    >>> layer.cache_shapes(batch_size=1, length=16)
    {'latent': [1, 16, 16]}

    References:
      DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient
      Mixture-of-Experts Language Model", 2024 (Multi-head Latent
      Attention). https://arxiv.org/abs/2405.04434
      Ji et al., "Towards Economical Inference: Enabling DeepSeek's
      Multi-Head Latent Attention in Any Transformer-based LLMs" (MHA2MLA),
      2025. https://arxiv.org/abs/2502.14837
    """

    def __init__(
        self,
        num_heads: int,
        kv_latent_dim: int,
        head_size: int | None = None,
        absorb: bool = True,
        **kwargs: Any,
    ):
        self._kv_latent_dim, head_size = check_latent_args(
            kv_latent_dim, head_size, kwargs.get("attention_axes")
        )
        super().__init__(num_heads=num_heads, head_size=head_size, **kwargs)
        self._absorb = bool(absorb)

    @property
    def kv_latent_dim(self) -> int:
        """The latent size r."""
        return self._kv_latent_dim

    @property
    def absorb(self) -> bool:
        """Whether `call_cached` attends in latent space."""
        return self._absorb

    # ---------------------------------------------------------------- build
    def _build_from_signature(self, query, value, key=None):
        if key is not None:
            key_shape, value_shape = _as_shape(key), _as_shape(value)
            if key_shape.rank and value_shape.rank and key_shape[-1] != value_shape[-1]:
                raise ValueError(
                    f"LatentAttention {self.name!r} computes keys and values from one latent of "
                    f"the value input, so the key must be the value (or None); got key shape "
                    f"{key_shape} and value shape {value_shape}."
                )
        super()._build_from_signature(query, value, key)

    def _build_projections(self, query, value, key=None):
        self._record_shapes(query, value, key)
        common = self._get_common_kwargs_for_sublayer
        with tf.init_scope():
            self._build_query()
            self._latent_dense = tf_keras.layers.EinsumDense(
                "abc,cd->abd",
                output_shape=[None, self._kv_latent_dim],
                bias_axes=None,
                name="latent",
                **common(),
            )
            self._key_up_dense = self._per_head_dense("key_up", self._key_dim, False)
            self._value_up_dense = self._per_head_dense("value_up", self._value_dim, False)
            self._build_output_and_value_bias()

    def _projection_input_shapes(self, query_shape, key_shape, value_shape, context_shape):
        latent_shape = value_shape[:-1].concatenate([self._kv_latent_dim])
        return [
            (self._query_dense, query_shape),
            (self._latent_dense, value_shape),
            (self._key_up_dense, latent_shape),
            (self._value_up_dense, latent_shape),
            (self._output_dense, context_shape),
        ]

    # ----------------------------------------------------------------- call
    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
    ):
        if key is not None and key is not value:
            raise ValueError(
                f"LatentAttention {self.name!r} computes keys and values from one latent of the "
                "value input: pass key=None (or the value tensor itself), not a separate key."
            )
        return super().call(
            query,
            value,
            attention_mask=attention_mask,
            return_attention_scores=return_attention_scores,
            training=training,
            use_causal_mask=use_causal_mask,
        )

    def _project_key(self, key) -> dict[str, tf.Tensor]:
        """{"latent": [B, S, r]}: the latent of the key input (which is the value)."""
        return {"latent": self._latent_dense(key)}

    def _project_key_value(self, key, value) -> dict[str, tf.Tensor]:
        return {"latent": self._latent_dense(value)}

    def _projected_keys(self, projected: dict[str, tf.Tensor]) -> tf.Tensor:
        return self._key_up_dense(projected["latent"])

    def _projected_values(self, projected: dict[str, tf.Tensor]) -> tf.Tensor:
        return self._value_up_dense(projected["latent"])

    def _logits_from_projected(self, query, projected):
        projected_query = self._query_dense(query)
        projected_query = projected_query * tf.cast(
            inverse_sqrt(self._key_dim), projected_query.dtype
        )
        key = self._projected_keys(projected)
        return tf.einsum(self._dot_product_equation, key, projected_query)

    def _combine(self, weights: tf.Tensor, value: tf.Tensor) -> tf.Tensor:
        return tf.einsum(self._combine_equation, weights, value)

    def _overrides_compute_attention(self) -> bool:
        return (
            type(self)._compute_attention
            is not tf_keras.layers.MultiHeadAttention._compute_attention
        )

    def _attend_cached(self, query, cache, attention_mask, training):
        if not self._absorb:
            return super()._attend_cached(query, cache, attention_mask, training)
        latent = cache["latent"]  # [B, S, r]
        projected_query = self._query_dense(query)  # [B, T, h, p]
        dtype = projected_query.dtype
        projected_query = projected_query * tf.cast(inverse_sqrt(self._key_dim), dtype)
        key_up = tf.cast(self._key_up_dense.kernel, dtype)  # [r, h, p]
        value_up = tf.cast(self._value_up_dense.kernel, dtype)  # [r, h, v]
        absorbed_query = tf.einsum("bthp,rhp->bthr", projected_query, key_up)
        logits = tf.einsum("bthr,bsr->bhts", absorbed_query, tf.cast(latent, dtype))
        scores = self._masked_softmax(logits, attention_mask)
        weights = self._dropout_layer(scores, training=training)
        latent = self._with_value_bias_channel(tf.cast(latent, dtype))
        latent_context = tf.einsum("bhts,bsr->bthr", weights, latent)  # [B, T, h, r (+1)]
        r = self._kv_latent_dim
        context = tf.einsum("bthr,rhv->bthv", latent_context[..., :r], value_up)
        row_sums = latent_context[..., r:] if self._value_bias is not None else None
        return self._add_value_bias(context, row_sums), scores

    def _cache_dims(self) -> dict[str, list[int]]:
        return {"latent": [self._kv_latent_dim]}

    # --------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["kv_latent_dim"] = self._kv_latent_dim
        config["absorb"] = self._absorb
        return config

"""Attention over a shared key/value latent (DeepSeek-V2's MLA, without RoPE), on Keras 3."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from headsize_tf.core.spec import check_positive_int
from headsize_tf.keras3.layers.head_attention import Shape
from headsize_tf.keras3.layers.shared_kv import SharedKVAttentionBase


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class LatentAttention(SharedKVAttentionBase):
    """Multi-head attention whose keys and values are up-projections of one shared latent.

    Every position's key/value input `y` is compressed to one latent
    `c = y W_DKV` of size `kv_latent_dim` (r); head i's key is `c W_UK^(i)`
    and its value `c W_UV^(i)`. A decoder caches only `c`: r numbers per token
    instead of `h (p + v)`.

    Decoding can attend in latent space (`absorb=True`, the default, used by
    `call_cached`): the key up-projection folds into the query
    (`q~_i = q_i W_UK^(i)T`, scores `q~_i . c_s`) and the value up-projection
    applies to the attention-weighted latent (`(sum_s a_is c_s) W_UV^(i)`),
    so a step never up-projects the cache. The full-sequence call
    up-projects and attends per head. Both are the same function.

    Weights: `query` `[d, h, p]` (+ bias), `latent` `[e, r]`, `key_up`
    `[r, h, p]` and `value_up` `[r, h, v]` without biases,
    `attention_output` `[h, v, d]` (+ bias) and `value_bias` `[h, v]`, kept
    per query head and added after attention (`SharedKVAttentionBase`). A
    key bias cannot change a softmax and a latent bias is a key bias plus a
    value bias, so there are none.

    The latent is computed from one input: `key`, if given, must be `value`.

    Args:
      num_heads: Number of heads h.
      kv_latent_dim: Latent size r.
      head_size: Per-head query/key size p (the softmax scale); width //
        num_heads by default.
      value_dim: Per-head value size v; `head_size` by default.
      absorb: Whether `call_cached` attends in latent space (True) or
        up-projects the cached latents every step (False).
      **kwargs: `HeadAttentionBase` arguments.

    Call arguments: as `keras.layers.MultiHeadAttention` (rank-3 inputs).

    Example:

    >>> layer = LatentAttention(num_heads=8, kv_latent_dim=32)
    >>> x = keras.Input(shape=(16, 64))
    >>> layer(x, x).shape
    (None, 16, 64)
    >>> layer.cache_shapes(batch_size=4, length=16)
    {'latent': [4, 16, 32]}

    References:
      DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient
      Mixture-of-Experts Language Model", 2024 (multi-head latent attention).
      https://arxiv.org/abs/2405.04434
      Meng et al., "TransMLA: Multi-Head Latent Attention Is All You Need",
      2025. https://arxiv.org/abs/2502.07864
      Ji et al., "Towards Economical Inference: Enabling DeepSeek's
      Multi-Head Latent Attention in Any Transformer-based LLMs", 2025.
      https://arxiv.org/abs/2502.14837
    """

    def __init__(
        self,
        num_heads: int,
        kv_latent_dim: int,
        head_size: int | None = None,
        absorb: bool = True,
        **kwargs: Any,
    ):
        super().__init__(num_heads=num_heads, head_size=head_size, **kwargs)
        self._kv_latent_dim = check_positive_int("kv_latent_dim", kv_latent_dim)
        self._absorb = True
        self.absorb = absorb
        self._latent_dense = None
        self._key_up_dense = None
        self._value_up_dense = None

    @property
    def kv_latent_dim(self) -> int:
        return self._kv_latent_dim

    @property
    def absorb(self) -> bool:
        """Whether `call_cached` attends in latent space (settable; compiled steps retrace)."""
        return self._absorb

    @absorb.setter
    def absorb(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise ValueError(f"`absorb` must be True or False; got {value!r}.")
        self._absorb = value

    def _build_projections(self, query_shape: Shape, value_shape: Shape, key_shape: Shape) -> None:
        if tuple(key_shape) != tuple(value_shape):
            raise ValueError(
                f"LatentAttention {self.name!r} computes its latent from one input: key shape "
                f"{tuple(key_shape)} differs from value shape {tuple(value_shape)}."
            )
        rank, heads = self._kv_latent_dim, self._num_heads
        self._build_query_output_and_bias(query_shape)
        self._latent_dense = self._dense("latent", value_shape, "abc,cd->abd", (None, rank), False)
        latent_shape = (value_shape[0], value_shape[1], rank)
        self._key_up_dense = self._dense(
            "key_up", latent_shape, "abc,cde->abde", (None, heads, self._key_dim), False
        )
        self._value_up_dense = self._dense(
            "value_up", latent_shape, "abc,cde->abde", (None, heads, self._value_dim), False
        )

    def call(
        self,
        query: Any,
        value: Any,
        key: Any = None,
        query_mask: Any = None,
        value_mask: Any = None,
        key_mask: Any = None,
        attention_mask: Any = None,
        return_attention_scores: bool = False,
        training: Any = None,
        use_causal_mask: bool = False,
    ) -> Any:
        if key is not None and key is not value:
            raise ValueError(
                f"LatentAttention {self.name!r} computes its latent from one input: pass key=None "
                "or key=value."
            )
        return super().call(
            query,
            value,
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            return_attention_scores=return_attention_scores,
            training=training,
            use_causal_mask=use_causal_mask,
        )

    def _project_key(self, key: Any) -> dict[str, Any]:
        return {"latent": self._latent_dense(key)}

    def _project_key_value(self, key: Any, value: Any) -> dict[str, Any]:
        return {"latent": self._latent_dense(value)}

    def _per_head(self, projected: dict[str, Any]) -> dict[str, Any]:
        """Keys and values up-projected from the latents (the non-absorbed path)."""
        latent = projected["latent"]
        return {"key": self._key_up_dense(latent), "value": self._value_up_dense(latent)}

    def _logits_from_projected(self, query: Any, projected: dict[str, Any]) -> Any:
        keys = self._per_head(projected)["key"] if "latent" in projected else projected["key"]
        return ops.einsum("bshp,bthp->bhts", keys, self._scaled_query(query))

    def _combine(self, dropped: Any, projected: dict[str, Any]) -> Any:
        return ops.einsum("bhts,bshv->bthv", dropped, projected["value"])

    def _absorbable(self) -> bool:
        # Quantized up-projections hold integer kernels: up-project instead.
        return (
            self._absorb
            and self._key_up_dense.quantization_mode is None
            and self._value_up_dense.quantization_mode is None
        )

    def _attend_cached(
        self, query: Any, cache: dict[str, Any], attention_mask: Any, training: Any
    ) -> Any:
        if not self._absorbable():
            return super()._attend_cached(query, cache, attention_mask, training)
        latent = cache["latent"]  # [B, S, r]
        dtype = latent.dtype
        key_up = ops.cast(self._key_up_dense.kernel, dtype)  # [r, h, p]
        value_up = ops.cast(self._value_up_dense.kernel, dtype)  # [r, h, v]
        absorbed_query = ops.einsum("bthp,rhp->bthr", self._scaled_query(query), key_up)
        logits = ops.einsum("bthr,bsr->bhts", absorbed_query, latent)
        _, dropped = self._softmax_and_dropout(logits, attention_mask, training)
        latent_context = ops.einsum("bhts,bsr->bthr", dropped, latent)
        context = ops.einsum("bthr,rhv->bthv", latent_context, value_up)
        return self._add_value_bias(context, dropped)

    def _cache_dims(self) -> dict[str, list[int]]:
        return {"latent": [self._kv_latent_dim]}

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"kv_latent_dim": self._kv_latent_dim, "absorb": self._absorb})
        return config

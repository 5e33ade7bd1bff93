"""Grouped-query attention (Ainslie et al., 2023) with any head size, on Keras 3."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from headsize_tf.core.kv_sharing import check_num_kv_heads
from headsize_tf.keras3.layers.head_attention import Shape
from headsize_tf.keras3.layers.shared_kv import SharedKVAttentionBase


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class GroupedAttention(SharedKVAttentionBase):
    """Grouped-query attention: `num_kv_heads` key/value heads shared by groups of query heads.

    The `num_heads` query heads fall into `num_kv_heads` contiguous groups of
    `num_heads / num_kv_heads`; query head `i` attends with key/value head
    `i // (num_heads / num_kv_heads)` (`num_kv_heads=1` is multi-query
    attention, `num_kv_heads=num_heads` multi-head attention). A decoder
    caches `num_kv_heads` keys and values per token instead of `num_heads`.
    The scores are einsums over the grouped query `[B, T, G, h/G, p]`: the
    shared keys and values are never repeated per query head (unlike
    `keras.layers.GroupQueryAttention`, which `ops.repeat`s them).

    Weights, in stock `MultiHeadAttention` layout: `query` `[d, h, p]` (+ bias
    `[h, p]`), `key` `[e, G, p]` and `value` `[e, G, v]` without biases,
    `attention_output` `[h, v, d]` (+ bias), and `value_bias` `[h, v]`. A key
    bias cannot change a softmax, so there is none; the value bias is kept per
    query head and added after attention (`SharedKVAttentionBase`), so a
    converted multi-head layer's biases carry over exactly and the head gates
    act on query heads. `keras.layers.GroupQueryAttention`'s weights map in
    exactly: drop its key bias, repeat its value bias per group.

    Head removal (pruning) removes whole groups: a group's key/value head goes
    when all its query heads go; gates mask single query heads.

    With rotary positions (Llama, Mistral, Qwen: `rope_max_wavelength`), each
    key/value head has its own rotary set, and with `use_bias` the keys keep a
    bias `[G, p]`: rotated with the key, it no longer cancels in the softmax
    (Qwen2). Where `keras.ops.dot_product_attention` applies (no returned
    scores, no attention dropout, value size = head size; JAX and other
    backends but TensorFlow, whose op repeats the shared heads), the G
    key/value heads go to it as they are, without repeating (flash attention
    where the backend has it).

    Args:
      num_heads: Number of query heads h.
      num_kv_heads: Number of key/value heads G; must divide `num_heads`.
      head_size: Per-head query/key size p (the softmax scale); width //
        num_heads by default.
      value_dim: Per-head value size v; `head_size` by default.
      **kwargs: `HeadAttentionBase` arguments (`dropout`, `use_bias`,
        `output_shape`, initializers, regularizers, constraints, `seed`,
        `name`, `dtype`, ...).

    Call arguments: as `keras.layers.MultiHeadAttention` (rank-3 inputs).

    Example:

    >>> layer = GroupedAttention(num_heads=8, num_kv_heads=2)
    >>> x = keras.Input(shape=(16, 64))
    >>> layer(x, x).shape
    (None, 16, 64)
    >>> layer.cache_shapes(batch_size=4, length=16)["key"]
    [4, 16, 2, 8]

    References:
      Ainslie et al., "GQA: Training Generalized Multi-Query Transformer
      Models from Multi-Head Checkpoints", EMNLP 2023.
      https://arxiv.org/abs/2305.13245
      Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need",
      2019. https://arxiv.org/abs/1911.02150
    """

    def __init__(
        self, num_heads: int, num_kv_heads: int, head_size: int | None = None, **kwargs: Any
    ):
        super().__init__(num_heads=num_heads, head_size=head_size, **kwargs)
        self._num_kv_heads = check_num_kv_heads(num_kv_heads, self._num_heads)

    @property
    def num_kv_heads(self) -> int:
        return self._num_kv_heads

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self._num_heads // self._num_kv_heads

    def _build_projections(self, query_shape: Shape, value_shape: Shape, key_shape: Shape) -> None:
        groups = self._num_kv_heads
        self._build_query_output_and_bias(query_shape)
        self._key_dense = self._dense(
            "key",
            key_shape,
            "abc,cde->abde",
            (None, groups, self._key_dim),
            self._use_bias and self.uses_rope,
        )
        self._value_dense = self._dense(
            "value", value_shape, "abc,cde->abde", (None, groups, self._value_dim), False
        )

    def _num_rotary_heads(self) -> int:
        return self._num_kv_heads

    def _attend_projected(
        self,
        query: Any,
        projected: dict[str, Any],
        attention_mask: Any,
        training: Any,
        return_attention_scores: bool = False,
        use_causal_mask: bool = False,
    ) -> tuple[Any, Any]:
        dropout_active = self._dropout > 0 and training is not None and training is not False
        if (
            self._force_einsum
            or self._logit_soft_cap is not None
            # TensorFlow's op repeats the shared heads (and fails for one): einsums are leaner.
            or keras.backend.backend() == "tensorflow"
            or return_attention_scores
            or dropout_active
            or self._value_dim != self._key_dim
        ):
            return super()._attend_projected(
                query,
                projected,
                attention_mask,
                training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask,
            )
        context, attends = self._dot_product_context(
            self._project_query(query),
            projected["key"],
            projected["value"],
            attention_mask,
            use_causal_mask,
        )
        if attends is None:  # Every row attends: its value bias adds whole.
            attends = ops.ones(ops.shape(context)[:2] + (1,), context.dtype)
        return self._add_value_bias_rows(context, attends), None

    def _grouped(self, tensor: Any, axis: int) -> Any:
        """Splits the heads axis `axis` into (groups, group size)."""
        shape = ops.shape(tensor)
        new = (*shape[:axis], self._num_kv_heads, self.group_size, *shape[axis + 1 :])
        return ops.reshape(tensor, new)

    def _merged(self, tensor: Any, axis: int) -> Any:
        """Merges axes (axis, axis + 1) = (groups, group size) back into heads."""
        shape = ops.shape(tensor)
        return ops.reshape(tensor, (*shape[:axis], self._num_heads, *shape[axis + 2 :]))

    def _logits_from_projected(self, query: Any, projected: dict[str, Any]) -> Any:
        grouped_query = self._grouped(self._scaled_query(query), 2)  # [B, T, G, n, p]
        logits = ops.einsum("btgnp,bsgp->bgnts", grouped_query, projected["key"])
        return self._merged(logits, 1)  # [B, N, T, S], head g * n + j

    def _combine(self, dropped: Any, projected: dict[str, Any]) -> Any:
        context = ops.einsum("bgnts,bsgv->btgnv", self._grouped(dropped, 1), projected["value"])
        return self._merged(context, 2)

    def _cache_dims(self) -> dict[str, list[int]]:
        return {
            "key": [self._num_kv_heads, self._key_dim],
            "value": [self._num_kv_heads, self._value_dim],
        }

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["num_kv_heads"] = self._num_kv_heads
        return config

"""Grouped-query attention: groups of query heads share one key/value head."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.validation import check_grouped_args
from headsize_tf.layers.head_attention import inverse_sqrt
from headsize_tf.layers.shared_kv_attention import SharedKVAttentionBase, dims


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class GroupedAttention(SharedKVAttentionBase):
    """Grouped-query attention (GQA; multi-query attention for `num_kv_heads=1`).

    The `h` query heads fall into `G = num_kv_heads` contiguous groups of
    `n = h / G`; query head `i` reads key/value head `i // n`. A decoder then
    caches `G (p + v)` numbers per token and layer instead of `h (p + v)`.
    Keys and values are never repeated per head: the projected query
    `[B, T, h, p]` is viewed as `[B, T, G, n, p]` and attends with einsums,
    the scores coming back as `[B, h, T, S]` in the query's head order.

    Weights, in the order and with the names of stock `MultiHeadAttention`
    where they exist: `value_bias` `[h, v]` (per query head, see
    `SharedKVAttentionBase`; only with `use_bias`), `query` `[d, h, p]` with a
    bias `[h, p]`, `key` `[e, G, p]` and `value` `[e, G, v]` without biases (a
    key bias cannot change a softmax), `attention_output` `[h, v, o]` with a
    bias `[o]`. `headsize_tf.core.kv_sharing.grouped_weights` converts a
    trained multi-head layer to these weights (`layers.roles.assign_weights`
    writes them); with `G = h` the conversion is exact.

    Head gates (`set_head_mask`) act on query heads. Removing heads
    physically must remove whole groups (every query head of a key/value
    head); `group_of_head` gives each head's group.

    `_compute_attention(query, key, value, attention_mask, training)` is stock
    MHA's extension point: a subclass overriding it is called with the
    projected query `[B, T, h, p]`, the grouped keys `[B, S, G, p]` and values
    `[B, S, G, v]` (plus a trailing channel of ones with `use_bias`: its
    context is each head's attention row sum, which scales the value bias;
    keep the values' channels linear) and returns the context `[B, T, h, ...]`
    and the scores `[B, h, T, S]`, as Model Garden's `multi_query_attention`
    does. Incremental decoding (`call_cached`) keeps the built-in attention.

    Inputs must be rank 3 `[batch, length, width]` (attention over axis 1).

    Args:
      num_heads: Number of query heads `h`.
      num_kv_heads: Number `G` of key/value heads; must divide `num_heads`.
      head_size: Per-head query/key size `p` (softmax scale `1/sqrt(p)`);
        defaults to `width // num_heads`.
      value_dim: Per-head value size `v`; defaults to the head size.
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

    >>> layer = GroupedAttention(num_heads=8, num_kv_heads=2)
    >>> x = tf_keras.Input(shape=[16, 64])
    >>> layer(x, x).shape
    TensorShape([None, 16, 64])
    >>> layer.cache_shapes(batch_size=1, length=16)
    {'key': [1, 16, 2, 8], 'value': [1, 16, 2, 8]}

    References:
      Ainslie, Lee-Thorp, de Jong, Zemlyanskiy, Lebrón, Sanghai, "GQA:
      Training Generalized Multi-Query Transformer Models from Multi-Head
      Checkpoints", EMNLP 2023. https://arxiv.org/abs/2305.13245
      Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need",
      2019. https://arxiv.org/abs/1911.02150
    """

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_size: int | None = None,
        **kwargs: Any,
    ):
        self._num_kv_heads, head_size = check_grouped_args(
            num_heads, num_kv_heads, head_size, kwargs.get("attention_axes")
        )
        super().__init__(num_heads=num_heads, head_size=head_size, **kwargs)

    @property
    def num_kv_heads(self) -> int:
        """The number G of key/value heads."""
        return self._num_kv_heads

    @property
    def group_of_head(self) -> list[int]:
        """The key/value head (group) each query head reads: `i // (h / G)`."""
        size = self._num_heads // self._num_kv_heads
        return [i // size for i in range(self._num_heads)]

    # ---------------------------------------------------------------- build
    def _build_projections(self, query, value, key=None):
        self._record_shapes(query, value, key)
        common = self._get_common_kwargs_for_sublayer
        with tf.init_scope():
            self._build_query()
            self._key_dense = tf_keras.layers.EinsumDense(
                "abc,cde->abde",
                output_shape=[None, self._num_kv_heads, self._key_dim],
                bias_axes=None,
                name="key",
                **common(),
            )
            self._value_dense = tf_keras.layers.EinsumDense(
                "abc,cde->abde",
                output_shape=[None, self._num_kv_heads, self._value_dim],
                bias_axes=None,
                name="value",
                **common(),
            )
            self._build_output_and_value_bias()

    # ----------------------------------------------------------------- call
    def _grouped_logits(self, query: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
        """Scaled logits [B, h, T, S] of a projected query [B, T, h, p] and keys [B, S, G, p]."""
        query = query * tf.cast(inverse_sqrt(self._key_dim), query.dtype)
        b, t, _, p = dims(query)
        groups = self._num_kv_heads
        query = tf.reshape(query, [b, t, groups, self._num_heads // groups, p])
        logits = tf.einsum("btgnp,bsgp->bgnts", query, key)
        s = dims(key)[1]
        return tf.reshape(logits, [b, self._num_heads, t, s])

    def _logits_from_projected(self, query, projected):
        return self._grouped_logits(self._query_dense(query), projected["key"])

    def _combine(self, weights: tf.Tensor, value: tf.Tensor) -> tf.Tensor:
        b, _, t, s = dims(weights)
        groups = self._num_kv_heads
        weights = tf.reshape(weights, [b, groups, self._num_heads // groups, t, s])
        context = tf.einsum("bgnts,bsgv->btgnv", weights, value)
        return tf.reshape(context, [b, t, self._num_heads, value.shape[-1]])

    def _compute_attention(self, query, key, value, attention_mask=None, training=None):
        """Context [B, T, h, v] and scores [B, h, T, S] of projected grouped tensors."""
        scores = self._masked_softmax(self._grouped_logits(query, key), attention_mask)
        context = self._combine(self._dropout_layer(scores, training=training), value)
        return context, scores

    def _overrides_compute_attention(self) -> bool:
        return type(self)._compute_attention is not GroupedAttention._compute_attention

    def _projected_keys(self, projected: dict[str, tf.Tensor]) -> tf.Tensor:
        return projected["key"]

    def _projected_values(self, projected: dict[str, tf.Tensor]) -> tf.Tensor:
        return projected["value"]

    def _cache_dims(self) -> dict[str, list[int]]:
        return {
            "key": [self._num_kv_heads, self._key_dim],
            "value": [self._num_kv_heads, self._value_dim],
        }

    # --------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["num_kv_heads"] = self._num_kv_heads
        return config

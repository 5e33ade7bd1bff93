"""Shared machinery of the head-size attention layers (public base class).

Every public layer of `headsize_tf.layers` derives from `HeadAttentionBase`,
which subclasses `tf_keras.layers.MultiHeadAttention` the way Model Garden's
`talking_heads_attention.py` and `multi_query_attention.py` do. The base adds:

* head size resolved at build time (`_resolve_head_size`), so a layer never
  needs `key_dim` up front;
* per-head gates `xi_h` (a non-trainable `[num_heads]` variable, all ones by
  default, not one of the layer's Keras weights, so the weight list and
  `count_params()` equal stock MHA's, and in checkpoints only while a mask is
  set, so stock checkpoints restore under Model Garden's checks) folded into the output projection kernel, which is exactly the same
  as multiplying each head's context by `xi_h` (Michel et al., 2019) but costs
  `O(num_heads * head_size * width)` per call, independent of batch and length;
* a seed for the attention dropout, accepted the way Model Garden's
  `EncoderScaffold(layer_idx_as_attention_seed=True)` passes it;
* validation of arguments and of `attention_mask` shapes with messages that
  name the bad value and what was expected.

Subclasses implement `_resolve_head_size` and, if their scores differ from
dot-product attention over per-head projections, `_build_projections` and
`_attend`.
"""

from __future__ import annotations

import collections.abc
import math
from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.validation import (
    check_attention_args,
    check_attention_mask_shape,
    check_head_mask_shape,
)
from headsize_tf.layers.autograph import without_autograph

_GATES_KEY = "head_gate_values"  # The gates' name in checkpoints.


def _as_shape(x: Any) -> tf.TensorShape:
    if hasattr(x, "shape"):
        return tf.TensorShape(x.shape)
    return tf.TensorShape(x)


def static_shape(x: Any) -> list[int | None] | None:
    """The static shape of a tensor (or shape) as a list; None if its rank is unknown."""
    shape = _as_shape(x)
    return None if shape.rank is None else shape.as_list()


@without_autograph
class HeadAttentionBase(tf_keras.layers.MultiHeadAttention):
    """Base of `StandardAttention`, `FixedHeadAttention`, `CollaborativeAttention`.

    Args:
      num_heads: Number of attention heads (a positive int).
      dropout: Dropout rate on the attention probabilities, in [0, 1).
      use_bias: Whether the projections use bias vectors.
      output_shape: Output size of the last dimension (or a shape tuple);
        defaults to the query width.
      attention_axes: Axes over which attention is applied (as in Keras' MHA).
      kernel_initializer, bias_initializer, kernel_regularizer,
      bias_regularizer, activity_regularizer, kernel_constraint,
      bias_constraint: As in `tf_keras.layers.MultiHeadAttention`.
      seed: Optional int seed of the attention dropout.
      value_dim: Optional per-head value size; the head size by default (as
        `value_dim` of `tf_keras.layers.MultiHeadAttention`).
      **kwargs: Base layer arguments (`name`, `dtype` policies, ...).
    """

    def __init__(
        self,
        num_heads: int,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape: int | collections.abc.Sequence[int] | None = None,
        attention_axes: int | collections.abc.Sequence[int] | None = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        seed: int | None = None,
        value_dim: int | None = None,
        **kwargs: Any,
    ):
        num_heads, value_dim, dropout, seed = check_attention_args(
            type(self).__name__, num_heads, value_dim, dropout, seed, kwargs
        )
        super().__init__(
            num_heads=num_heads,
            key_dim=1,  # Placeholder: resolved in `_build_from_signature`.
            dropout=dropout,
            use_bias=use_bias,
            output_shape=output_shape,
            attention_axes=attention_axes,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self._key_dim = None
        self._value_dim = None
        self._value_dim_arg = value_dim
        self._seed = seed
        self._head_gates = None

    # ------------------------------------------------------------------ API
    @property
    def num_heads(self) -> int:
        return self._num_heads

    @property
    def head_size(self) -> int | None:
        """Per-head query/key size (the softmax scale); None before build."""
        return self._key_dim

    @property
    def value_dim(self) -> int | None:
        """Per-head value size (`head_size` unless `value_dim` was set); None before build."""
        return self._value_dim

    @property
    def head_gates(self) -> tf.Variable | None:
        """Non-trainable `[num_heads]` gates xi_h; None before build."""
        return self._head_gates

    def set_head_mask(self, mask: Any) -> None:
        """Sets the per-head gates xi_h (1 keeps a head, 0 masks it).

        Args:
          mask: A `[num_heads]` array-like of floats (or bools).
        """
        if self._head_gates is None:
            raise ValueError(
                f"Layer {self.name!r} is not built yet: call it on inputs before set_head_mask."
            )
        values = tf.cast(tf.convert_to_tensor(mask), tf.float32)
        shape = None if values.shape.rank is None else values.shape.as_list()
        check_head_mask_shape(self.name, shape, self._num_heads)
        self._head_gates.assign(tf.cast(values, self._head_gates.dtype))

    # ---------------------------------------------------------------- build
    def _resolve_head_size(self, query_shape: tf.TensorShape, key_shape: tf.TensorShape) -> int:
        raise NotImplementedError

    def _build_from_signature(self, query, value, key=None):
        query_shape = _as_shape(query)
        value_shape = _as_shape(value)
        key_shape = value_shape if key is None else _as_shape(key)
        head_size = self._resolve_head_size(query_shape, key_shape)
        self._key_dim = head_size
        self._value_dim = self._value_dim_arg or head_size
        self._build_projections(query, value, key)
        with tf.init_scope():
            # Create every weight now (Keras' MHA waits for the first call), so a
            # layer from `from_config` can take `set_weights` or a checkpoint.
            context_shape = query_shape[:-1].concatenate([self._num_heads, self._value_dim])
            for dense, shape in self._projection_input_shapes(
                query_shape, key_shape, value_shape, context_shape
            ):
                with tf.name_scope(dense.name):  # Variable names as in a first call.
                    dense.build(shape)
            self._create_head_gates()

    def _projection_input_shapes(
        self,
        query_shape: tf.TensorShape,
        key_shape: tf.TensorShape,
        value_shape: tf.TensorShape,
        context_shape: tf.TensorShape,
    ) -> list[tuple[tf_keras.layers.Layer, tf.TensorShape]]:
        """(projection, input shape) of every dense sublayer, in weight order."""
        return [
            (self._query_dense, query_shape),
            (self._key_dense, key_shape),
            (self._value_dense, value_shape),
            (self._output_dense, context_shape),
        ]

    def _create_head_gates(self) -> None:
        """Creates the gates xi_h as a variable outside the Keras weight list.

        The gates are not a Keras weight: `weights`, `get_weights()`,
        `set_weights()` and `count_params()` are exactly stock
        `MultiHeadAttention`'s for the same shapes. For checkpoints they are the
        dependency "head_gate_values" only while a mask is set (see
        `_trackable_children`), so a stock checkpoint restores into an unmasked
        layer under `assert_consumed()` and Model Garden's
        `assert_existing_objects_matched()`, and a masked layer still saves and
        restores its mask.
        """
        gates = tf.Variable(
            tf.ones([self._num_heads], tf.float32),
            trainable=False,
            name="head_gates",
        )
        # `object.__setattr__` skips Keras' automatic weight tracking.
        object.__setattr__(self, "_head_gates", gates)
        # A checkpoint restored before this layer was built may hold a mask for it.
        self._handle_deferred_dependencies(name=_GATES_KEY, trackable=gates)

    def _gates_are_default(self) -> bool:
        """Whether every gate is 1 (no mask set): a stock layer's state."""
        gates = self._head_gates
        if gates is None or not tf.executing_eagerly():
            return gates is None
        return bool(tf.reduce_all(tf.equal(gates, 1.0)).numpy())

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # The gates join checkpoints only when a mask is set; SavedModels always hold them
        # (the traced calls read them).
        children = super()._trackable_children(save_type, **kwargs)
        if self._head_gates is not None and (
            save_type != "checkpoint" or not self._gates_are_default()
        ):
            children[_GATES_KEY] = self._head_gates
        return children

    def _lookup_dependency(self, name, cached_dependencies=None):
        # A checkpoint that holds a mask (ours, or one written before gates were left out
        # while all ones) restores it whether or not this layer's mask is set.
        if name == _GATES_KEY and self._head_gates is not None:
            return self._head_gates
        return super()._lookup_dependency(name, cached_dependencies)

    def _build_projections(self, query, value, key=None):
        """Builds Q/K/V/output projections; default: Keras' MHA ones."""
        super()._build_from_signature(query=query, value=value, key=key)

    def _build_attention(self, rank):
        super()._build_attention(rank)
        # Re-create dropout with this layer's seed.
        self._dropout_layer = tf_keras.layers.Dropout(
            rate=self._dropout, seed=self._seed, dtype=self._dtype_policy
        )

    # ----------------------------------------------------------------- call
    def _check_attention_mask(self, query, key, attention_mask) -> None:
        if attention_mask is None:
            return
        check_attention_mask_shape(
            self.name,
            static_shape(attention_mask),
            static_shape(query),
            static_shape(key),
            self._attention_axes,
            self._num_heads,
        )

    # Key-side projections are split from the scores so a decoding cache can
    # store them: every tensor of the dict has time on axis 1.
    def _project_key(self, key) -> dict[str, tf.Tensor]:
        """Key-side tensors the logits need: {"key": [B, S, N, H]}."""
        return {"key": self._key_dense(key)}

    def _logits_from_projected(self, query, projected):
        """Scaled logits [B, N, T, S] from the query and projected key tensors."""
        projected_query = self._query_dense(query)
        projected_query = projected_query * tf.cast(
            inverse_sqrt(self._key_dim), projected_query.dtype
        )
        return tf.einsum(self._dot_product_equation, projected["key"], projected_query)

    def _attention_logits(self, query, key):
        """Scaled attention logits [B, N, T, S] before masking and softmax."""
        return self._logits_from_projected(query, self._project_key(key))

    def _project_key_value(self, key, value) -> dict[str, tf.Tensor]:
        projected = self._project_key(key)
        projected["value"] = self._value_dense(value)
        return projected

    def _attend_projected(self, query, projected, attention_mask, training):
        """Context [B, T, N, H] and probabilities [B, N, T, S] from projected keys/values."""
        attention_scores = self._masked_softmax(
            self._logits_from_projected(query, projected), attention_mask
        )
        attention_scores_dropout = self._dropout_layer(attention_scores, training=training)
        context = tf.einsum(self._combine_equation, attention_scores_dropout, projected["value"])
        return context, attention_scores

    def _attend(self, query, key, value, attention_mask, training):
        """Returns the per-head context [B, T, N, H] and the probabilities [B, N, T, S]."""
        return self._attend_projected(
            query, self._project_key_value(key, value), attention_mask, training
        )

    def cache_shapes(self, batch_size: int, length: int) -> dict[str, list[int]]:
        """Shapes of the decoding cache of self-attention over `length` steps."""
        shapes = {name: [batch_size, length] + dims for name, dims in self._cache_dims().items()}
        return shapes

    def _cache_dims(self) -> dict[str, list[int]]:
        return {
            "key": [self._num_heads, self._key_dim],
            "value": [self._num_heads, self._value_dim],
        }

    def init_cache(self, batch_size: int, length: int = 0, dtype=None) -> dict[str, tf.Tensor]:
        """An empty (length 0) or zero-filled fixed-length decoding cache."""
        if not self._built_from_signature:
            raise ValueError(f"Layer {self.name!r} is not built yet: call it before init_cache.")
        dtype = dtype or self.compute_dtype
        return {
            name: tf.zeros(shape, dtype)
            for name, shape in self.cache_shapes(batch_size, length).items()
        }

    def call_cached(
        self, query, cache=None, attention_mask=None, decode_loop_step=None, training=None
    ):
        """Incremental causal self-attention for decoding.

        Projects only the new positions `query` [B, T_new, width], appends them
        to `cache` (or, with `decode_loop_step`, writes them at that index of a
        fixed-length cache, for static shapes on TPU) and attends over the
        cache. The cache holds the layer's own projections, so it has the right
        size for any head size (Model Garden's cache assumes width / heads).
        The new positions start at `decode_loop_step`, else at the cache's
        length (0 without a cache), and each attends to the cache's positions
        up to its own: a prompt prefilled in one call is causal, and a
        fixed-length cache's unwritten positions are never read.

        Args:
          query: New positions [B, T_new, width] (self-attention input).
          cache: Dict from `init_cache` or a previous call; None starts one.
          attention_mask: [B, T_new, S] mask over the (updated) cache (padding),
            combined with the causal one.
          decode_loop_step: Index to write a single new position at, or None.
          training: Dropout mode.

        Returns:
          (output [B, T_new, width], updated cache).
        """
        if not self._built_from_signature:
            self._build_from_signature(query=query, value=query)
        new = self._project_key_value(query, query)
        if decode_loop_step is not None:
            start = decode_loop_step
        else:
            start = 0 if cache is None else tf.shape(next(iter(cache.values())))[1]
        if cache is None:
            cache = new
        elif decode_loop_step is None:
            cache = {name: tf.concat([cache[name], new[name]], axis=1) for name in new}
        else:
            updated = {}
            for name, tensor in cache.items():
                length = tf.shape(tensor)[1]
                where = tf.one_hot(decode_loop_step, length, dtype=tensor.dtype)
                where = tf.reshape(where, [1, -1] + [1] * (tensor.shape.rank - 2))
                updated[name] = tensor * (1 - where) + new[name] * where
            cache = updated
        entry = next(iter(cache.values()))  # Every cache entry has time on axis 1.
        if attention_mask is not None:
            self._check_attention_mask(query, entry, attention_mask)
        # A single new position at the end of a growing cache sees it all: no mask to add.
        if decode_loop_step is not None or query.shape[1] != 1:
            rows = tf.range(tf.shape(query)[1]) + tf.cast(start, tf.int32)
            causal = tf.range(tf.shape(entry)[1])[None, :] <= rows[:, None]
            causal = causal[None]  # [1, T_new, S]
            attention_mask = (
                causal
                if attention_mask is None
                else tf.logical_and(tf.cast(attention_mask, tf.bool), causal)
            )
        context, _ = self._attend_cached(query, cache, attention_mask, training)
        return self._project_output(context), cache

    def _attend_cached(self, query, cache, attention_mask, training):
        """Context and probabilities of `call_cached` (default: as a full call)."""
        return self._attend_projected(query, cache, attention_mask, training)

    def _project_output(self, context):
        """Output projection with the head gates folded into the kernel."""
        dense = self._output_dense
        # `call_cached` runs outside Keras' autocast scope: cast to the context's dtype.
        kernel = tf.cast(dense.kernel, context.dtype)
        gates = tf.cast(self._head_gates, kernel.dtype)
        gates = tf.reshape(gates, [self._num_heads] + [1] * (kernel.shape.rank - 1))
        output = tf.einsum(dense.equation, context, kernel * gates)
        if dense.bias is not None:
            output = output + tf.cast(dense.bias, output.dtype)
        return output

    def __call__(self, *args, **kwargs):
        # A Keras 3 tensor (`import keras`: KerasTensor, Variable) would fail deep
        # inside tf_keras; name the Keras 3 layer instead. Checked by module name,
        # so Keras 3 is never imported here.
        for arg in list(args) + list(kwargs.values()):
            for item in arg if isinstance(arg, list | tuple) else (arg,):
                if type(item).__module__.startswith("keras."):
                    name = type(self).__name__
                    raise TypeError(
                        f"headsize_tf.layers.{name} is a tf_keras (Keras 2) layer and got a "
                        f"Keras 3 tensor ({type(item).__name__}); for `import keras` models use "
                        f"headsize_tf.keras3.layers.{name} (or set TF_USE_LEGACY_KERAS=1 and "
                        "build with tf_keras)."
                    )
        return super().__call__(*args, **kwargs)

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
        if not self._built_from_signature:
            self._build_from_signature(query=query, value=value, key=key)
        if key is None:
            key = value

        query_is_ragged = isinstance(query, tf.RaggedTensor)
        if query_is_ragged:
            query_lengths = query.nested_row_lengths()
            query = query.to_tensor()
        key_is_ragged = isinstance(key, tf.RaggedTensor)
        value_is_ragged = isinstance(value, tf.RaggedTensor)
        if key_is_ragged and value_is_ragged:
            bounding_shape = tf.math.maximum(key.bounding_shape(), value.bounding_shape())
            key = key.to_tensor(shape=bounding_shape)
            value = value.to_tensor(shape=bounding_shape)
        elif key_is_ragged:
            key = key.to_tensor(shape=tf.shape(value))
        elif value_is_ragged:
            value = value.to_tensor(shape=tf.shape(key))

        self._check_attention_mask(query, key, attention_mask)
        attention_mask = self._compute_attention_mask(
            query,
            value,
            key=key,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        context, attention_scores = self._attend(query, key, value, attention_mask, training)
        attention_output = self._project_output(context)

        if query_is_ragged:
            attention_output = tf.RaggedTensor.from_tensor(attention_output, lengths=query_lengths)
        if return_attention_scores:
            return attention_output, attention_scores
        return attention_output

    # --------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("key_dim", None)
        config["value_dim"] = self._value_dim_arg
        config["seed"] = self._seed
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> HeadAttentionBase:
        # Keras' MHA pops the build shapes from the dict it is given: copy first.
        return super().from_config(dict(config))


def inverse_sqrt(head_size: int) -> float:
    return 1.0 / math.sqrt(float(head_size))

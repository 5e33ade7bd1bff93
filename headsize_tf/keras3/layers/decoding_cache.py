"""The decoding cache of the Keras 3 head-size attention layers (`DecodingCacheMixin`).

`HeadAttentionBase` inherits `DecodingCacheMixin` (before
`keras.layers.MultiHeadAttention` in its bases) for incremental causal
self-attention: `cache_shapes`, `init_cache` and `call_cached`, which projects
only the new positions, appends them to the cache (or writes them at an index
of a fixed-length cache) and attends over it. The cache holds the layer's own
key-side projections, so its size follows the head size and the key/value
sharing of the layer (`GroupedAttention`, `LatentAttention` and
`CollaborativeAttention` override `_cache_dims`; `LatentAttention` overrides
`_attend_cached` to attend in latent space).

The mixin holds no state and is no layer by itself. The class it is mixed into
provides:

* `built`, `build(query_shape, value_shape)`, `_build_shapes_dict`, `name`
  and `compute_dtype` (a Keras layer's);
* `_num_heads`, `_key_dim` and `_value_dim` (the default `_cache_dims`);
* `_project_key_value(key, value)`: the key-side tensors, a dict whose every
  tensor has time on axis 1 (the cache entries);
* `_attend_projected(query, projected, attention_mask, training)`: the
  context `[B, T, N, H]` of the query over such a dict;
* `_check_attention_mask(query, key, attention_mask)`: validation of the mask;
* `_use_gate` and `_gate_dense` (Keras MHA's output gate), `_sliding_window`;
* `_project_output(context)`: the output projection (head gates folded in).

Backend-agnostic: `keras.ops` only.
"""

from __future__ import annotations

from typing import Any

from keras import ops


class DecodingCacheMixin:
    """Incremental causal self-attention over a decoding cache (see the module docstring)."""

    def cache_shapes(self, batch_size: int, length: int) -> dict[str, list[int]]:
        """Shapes of the decoding cache of self-attention over `length` steps."""
        return {name: [batch_size, length] + dims for name, dims in self._cache_dims().items()}

    def _cache_dims(self) -> dict[str, list[int]]:
        return {
            "key": [self._num_heads, self._key_dim],
            "value": [self._num_heads, self._value_dim],
        }

    def init_cache(self, batch_size: int, length: int = 0, dtype: Any = None) -> dict[str, Any]:
        """An empty (length 0) or zero-filled fixed-length decoding cache."""
        if not self.built:
            raise ValueError(f"Layer {self.name!r} is not built yet: call it before init_cache.")
        dtype = dtype or self.compute_dtype
        return {
            name: ops.zeros(shape, dtype)
            for name, shape in self.cache_shapes(batch_size, length).items()
        }

    def call_cached(
        self,
        query: Any,
        cache: dict[str, Any] | None = None,
        attention_mask: Any = None,
        decode_loop_step: Any = None,
        training: Any = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Incremental causal self-attention for decoding.

        Projects only the new positions `query` [B, T_new, width], appends them
        to `cache` (or, with `decode_loop_step`, writes them at that index of a
        fixed-length cache, for static shapes under `jit`) and attends over the
        cache. The cache holds the layer's own projections, so it has the right
        size for any head size. The new positions start at `decode_loop_step`,
        else at the cache's length (0 without a cache): rotary layers rotate
        their queries and keys there, and each new position attends to the
        cache's positions up to its own (and within the layer's
        `sliding_window`), so a prompt prefilled in one call is causal and a
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
        query = ops.convert_to_tensor(query)
        if not self.built:
            shape = tuple(query.shape)
            if self._build_shapes_dict is None:
                self._build_shapes_dict = {"query_shape": shape, "value_shape": shape}
            self.build(shape, shape)
        # The new positions' first index: rotary layers rotate their queries and keys there.
        if decode_loop_step is not None:
            start = decode_loop_step
        elif cache is None:
            start = 0
        else:  # The cache's length: static where known, else read at run time (a traced cache).
            entry = next(iter(cache.values()))
            start = entry.shape[1] if entry.shape[1] is not None else ops.shape(entry)[1]
        with self._positions_from(start):
            new = self._project_key_value(query, query)
            if cache is None:
                cache = new
            elif decode_loop_step is None:
                cache = {name: ops.concatenate([cache[name], new[name]], axis=1) for name in new}
            else:
                cache = {
                    name: ops.slice_update(
                        tensor,
                        [0, decode_loop_step] + [0] * (len(tensor.shape) - 2),
                        ops.cast(new[name], tensor.dtype),
                    )
                    for name, tensor in cache.items()
                }
            entry = next(iter(cache.values()))  # Every cache entry has time on axis 1.
            if attention_mask is not None:
                self._check_attention_mask(query, entry, attention_mask)
                attention_mask = ops.convert_to_tensor(attention_mask)
            # A single new position at the end of a growing cache sees it all: no mask to add.
            if decode_loop_step is not None or query.shape[1] != 1 or self._sliding_window:
                causal = self._causal_cache_mask(start, query, entry)
                attention_mask = (
                    causal
                    if attention_mask is None
                    else ops.logical_and(ops.cast(attention_mask, "bool"), causal)
                )
            context = self._attend_cached(query, cache, attention_mask, training)
        if self._use_gate:
            context = ops.multiply(context, self._gate_dense(query))
        return self._project_output(context), cache

    def _causal_cache_mask(self, start: Any, query: Any, entry: Any) -> Any:
        """`[1, T_new, S]` bool: new position `start + i` sees the cache's positions up to its
        own, and with a `sliding_window` w only the last w of them (as `call` with
        `use_causal_mask=True`)."""
        rows = ops.add(ops.arange(ops.shape(query)[1], dtype="int32"), ops.cast(start, "int32"))
        rows = ops.expand_dims(rows, 1)
        columns = ops.expand_dims(ops.arange(ops.shape(entry)[1], dtype="int32"), 0)
        mask = ops.less_equal(columns, rows)
        if self._sliding_window:
            mask = ops.logical_and(mask, ops.greater(columns, rows - self._sliding_window))
        return ops.expand_dims(mask, 0)

    def _attend_cached(
        self, query: Any, cache: dict[str, Any], attention_mask: Any, training: Any
    ) -> Any:
        """Context [B, T_new, N, H] of the new positions over the cache (a decoding hook)."""
        context, _ = self._attend_projected(query, cache, attention_mask, training)
        return context

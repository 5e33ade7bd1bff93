"""Attention over a shared key/value latent (DeepSeek-V2's MLA, with decoupled RoPE), on Keras 3."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from headsize_tf.core import rope
from headsize_tf.core.errors import SpecError
from headsize_tf.core.spec import check_positive_int
from headsize_tf.keras3.layers import rotary
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
    `[h, r, p]` and `value_up` `[h, r, v]` without biases,
    `attention_output` `[h, v, d]` (+ bias) and `value_bias` `[h, v]`, kept
    per query head and added after attention (`SharedKVAttentionBase`). A
    key bias cannot change a softmax and a latent bias is a key bias plus a
    value bias, so there are none. The up-projections are stored head-first,
    as a decoding step's per-head products read them: stored rank-first,
    XLA on the CPU transposed both at every step (a SmolLM2-shaped decoder
    with a 50% latent: 33.4 ms per batch-1 step at 512 tokens against 28.6
    ms head-first, side by side). `headsize_tf.keras3.layers.roles` shows
    them in the core's rank-first layout `[r, h, p]`, and `.keras` files
    written rank-first load.

    The latent is computed from one input: `key`, if given, must be `value`.

    Rotary positions (`rope_max_wavelength`) use DeepSeek-V2's decoupled
    rotary key: a latent cannot carry a per-position rotation, so each of
    `num_rope_heads` rotary keys `k_R = rope(y W_KR)` (`2k` dimensions, `k`
    rotating frequency pairs of the head's grid, `rope_frequencies`) is
    computed beside the latent and cached with it (the cache holds one vector
    per token, `[c, k_R]`: `r + num_rope_heads x 2k` values). A head's query has
    `head_size` p dimensions: the first `p - 2k` meet the latent's key
    up-projection (`key_up` `[h, r, p - 2k]`), the last `2k` are rotated and
    meet the rotary key of the head's group (query head i uses rotary key
    `i // (h / num_rope_heads)`). The softmax scale stays 1 / sqrt(p). One
    rotary key is DeepSeek's and TransMLA's form, one per original key/value
    head MHA2MLA's. Weights added: `rope_key` `[e, num_rope_heads, 2k]` (a
    bias `[num_rope_heads, 2k]` with `use_bias`: rotated, a key bias no
    longer cancels).

    Per-head query/key RMSNorms before RoPE (Qwen3, Gemma 3:
    `query_key_norm_epsilon`; rotary latents only) normalise each head's
    query, and each head's key `[c W_UK^(i), k_R]` as a whole. The scales
    `query_norm` and `key_norm` are `[num_rope_heads, p]`, one per rotary
    key's group of heads, in the head's dimension order (latent part, then
    rotary part). A key's norm is not linear in the latent, so each token
    also caches its inverse key RMS per query head (`h` more values); the
    key scale's rotary part applies before the rotary key is cached, its
    latent part is folded into the absorbed query, and the inverse RMS
    multiplies each head's scores.

    Absorbed decoding attends as multi-query attention over the cached
    `[c, k_R]`: the absorbed query `[q_nope W_UK^T, q_rope]` (each head's
    rotary part in its rotary key's slot) against keys `[c, k_R]` whose first
    `r` dimensions are also the values, read in place from the cache; on JAX
    through `keras.ops.dot_product_attention` (flash attention where the
    backend has it), elsewhere with einsums.

    Args:
      num_heads: Number of heads h.
      kv_latent_dim: Latent size r.
      head_size: Per-head query/key size p (the softmax scale); width //
        num_heads by default.
      value_dim: Per-head value size v; `head_size` by default.
      absorb: Whether `call_cached` attends in latent space (True) or
        up-projects the cached latents every step (False).
      num_rope_heads: With rotary positions: the decoupled rotary keys (a
        divisor of `num_heads`; 1 by default).
      rope_grid_size: With rotary positions: the head size whose frequency
        grid `rope_frequencies` index (`head_size` by default). A rotated-RoPE
        conversion (`headsize_tf.core.kv_sharing.rotated_rope_latent_weights`)
        keeps its source's grid in wider heads, and its rotary key may repeat
        a frequency.
      **kwargs: `HeadAttentionBase` arguments (`rope_max_wavelength`,
        `rope_scaling`, `rope_frequencies`: one set, or one per rotary key,
        of equal sizes; p / 4 evenly spread frequencies by default).

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

    _ROPE_REPEATS = True

    def __init__(
        self,
        num_heads: int,
        kv_latent_dim: int,
        head_size: int | None = None,
        absorb: bool = True,
        num_rope_heads: int | None = None,
        rope_grid_size: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(num_heads=num_heads, head_size=head_size, **kwargs)
        if rope_grid_size is not None:
            if not self.uses_rope:
                raise SpecError(
                    f"rope_grid_size={rope_grid_size!r} needs rotary positions: set "
                    "`rope_max_wavelength`."
                )
            rope_grid_size = check_positive_int("rope_grid_size", rope_grid_size)
            if rope_grid_size % 2:
                raise SpecError(
                    f"rope_grid_size must be even (frequency pairs); got {rope_grid_size}."
                )
        self._rope_grid_size = rope_grid_size
        self._kv_latent_dim = check_positive_int("kv_latent_dim", kv_latent_dim)
        if num_rope_heads is not None and not self.uses_rope:
            raise SpecError(
                f"num_rope_heads={num_rope_heads!r} needs rotary positions: set "
                "`rope_max_wavelength`."
            )
        self._num_rope_heads = (
            None if num_rope_heads is None else check_positive_int("num_rope_heads", num_rope_heads)
        )
        if self._num_rope_heads is not None and self._num_heads % self._num_rope_heads:
            raise SpecError(
                f"num_rope_heads={self._num_rope_heads} does not divide num_heads="
                f"{self._num_heads}; each rotary key serves an equal group of query heads."
            )
        self._rope_key_dense = None
        self._rope_pairs = 0
        self._absorb = True
        self.absorb = absorb
        self._latent_dense = None
        self._key_up_dense = None
        self._value_up_dense = None

    @property
    def kv_latent_dim(self) -> int:
        return self._kv_latent_dim

    @property
    def num_rope_heads(self) -> int | None:
        """Decoupled rotary keys (None without rotary positions)."""
        return (self._num_rope_heads or 1) if self.uses_rope else None

    @property
    def rope_pairs(self) -> int:
        """Rotating frequency pairs per rotary key (0 without RoPE; set at build)."""
        return self._rope_pairs

    @property
    def nope_dim(self) -> int | None:
        """Query/key dimensions per head compared through the latent (p - 2k); None unbuilt."""
        return None if self._key_dim is None else self._key_dim - 2 * self._rope_pairs

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
        if self.uses_rope:
            pairs = self._rope_grid() // 2
            frequencies = self._rope_frequencies
            if frequencies is None:
                frequencies = rope.uniform_set(pairs, max(1, pairs // 2))
            self._rope_sets = rope.resolve_sets(
                frequencies, self.num_rope_heads, pairs, "rope_frequencies"
            )
            sizes = {len(chosen) for chosen in self._rope_sets}
            if len(sizes) != 1 or not sizes.pop():
                raise SpecError(
                    f"LatentAttention {self.name!r}: the rotary keys need the same number (>= 1) "
                    f"of frequencies each; got {[len(c) for c in self._rope_sets]}."
                )
            self._rope_pairs = len(self._rope_sets[0])
            if 2 * self._rope_pairs > self._key_dim:
                raise SpecError(
                    f"LatentAttention {self.name!r} rotates {2 * self._rope_pairs} dimensions "
                    f"per rotary key in heads of size {self._key_dim}; the rotary dimensions are "
                    "part of the head."
                )
        self._build_query_output_and_bias(query_shape)
        self._latent_dense = self._dense("latent", value_shape, "abc,cd->abd", (None, rank), False)
        latent_shape = (value_shape[0], value_shape[1], rank)
        self._key_up_dense = None
        if self.nope_dim > 0:
            self._key_up_dense = self._dense(
                "key_up",
                latent_shape,
                "abc,dce->abde",
                (None, heads, self.nope_dim),
                False,
                _HeadFirstUpProjection,
            )
        if self.uses_rope:
            self._rope_key_dense = self._dense(
                "rope_key",
                value_shape,
                "abc,cde->abde",
                (None, self.num_rope_heads, 2 * self._rope_pairs),
                self._use_bias,
            )
        self._value_up_dense = self._dense(
            "value_up",
            latent_shape,
            "abc,dce->abde",
            (None, heads, self._value_dim),
            False,
            _HeadFirstUpProjection,
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

    # ----------------------------------------------------------------- RoPE
    def _build_query_key_norms(self) -> None:
        if self._query_key_norm_epsilon is None:
            return
        if not self.uses_rope:
            raise ValueError(
                f"LatentAttention {self.name!r}: query/key norms (query_key_norm_epsilon) are "
                "for rotary latents, whose rotary keys group the heads; set "
                "`rope_max_wavelength`."
            )
        super()._build_query_key_norms((self.num_rope_heads, self._key_dim))

    def _group_scale(self, norm: Any) -> Any:
        """A `[R, p]` norm's scales `offset + w`, float32."""
        scale = ops.cast(norm, "float32")
        if self._query_key_norm_offset:
            scale = ops.add(scale, self._query_key_norm_offset)
        return scale

    def _norm_scale(self, norm: Any, dtype: Any) -> Any:
        """A `[R, p]` norm's scales `offset + w` for every query head, `[h, p]`."""
        scale = self._group_scale(norm)
        return ops.cast(ops.repeat(scale, self._num_heads // self.num_rope_heads, axis=0), dtype)

    def _inverse_key_rms(self, latent: Any, rope_key: Any) -> Any:
        """`[B, S, h]`: 1 / RMS of each head's key before its norm scale, `[c W_UK^(i), k_R]`."""
        squares = ops.sum(ops.square(ops.cast(rope_key, "float32")), axis=-1)  # [B, S, R]
        squares = ops.repeat(squares, self._num_heads // self.num_rope_heads, axis=2)
        if self._key_up_dense is not None:
            nope = ops.cast(self._key_up_dense(latent), "float32")  # [B, S, h, p - 2k]
            squares = ops.add(squares, ops.sum(ops.square(nope), axis=-1))
        mean = ops.divide(squares, float(self._key_dim))
        return ops.cast(ops.rsqrt(ops.add(mean, self._query_key_norm_epsilon)), latent.dtype)

    def _num_rotary_heads(self) -> int:
        return self.num_rope_heads or 1

    def _rope_grid(self) -> int:
        return int(self._rope_grid_size or self._key_dim)

    def _build_rope(self) -> None:
        if not self.uses_rope:
            self._rope_sets = None
            return
        # Only the rotary keys' own 2k dimensions: the chosen pairs' frequencies.
        self._rope_inverse = rope.compact_table(
            self._rope_sets, self._rope_grid(), self._rope_max_wavelength, self._rope_scaling
        )
        self._rope_factor = rope.attention_factor(self._rope_scaling)

    def _project_query(self, query: Any) -> Any:
        """Projected queries `[B, T, h, p]`; with RoPE the last 2k dimensions are rotated."""
        projected = self._query_dense(query)
        if self.query_norm is not None:
            projected = rotary.rms_normalize(
                projected,
                self._norm_scale(self.query_norm, "float32"),
                self._query_key_norm_epsilon,
            )
        if not self.uses_rope:
            return projected
        nope = self.nope_dim
        rotated = self._rotate(projected[..., nope:])
        if nope == 0:
            return rotated
        return ops.concatenate([projected[..., :nope], rotated], axis=-1)

    def _project_key(self, key: Any) -> dict[str, Any]:
        return self._project_key_value(key, key)

    def _project_key_value(self, key: Any, value: Any) -> dict[str, Any]:
        """`{"latent": [B, S, r + R 2k (+ h)]}`: the latent, then the R rotated rotary keys (the
        cache entry: decoding reads it in place as one multi-query key), then with query/key
        norms each head's inverse key RMS."""
        latent = self._latent_dense(value)
        if not self.uses_rope:
            return {"latent": latent}
        rope_key = self._rope_key_dense(value)  # [B, S, R, 2k]
        parts = [latent]
        if self.key_norm is not None:
            inverse_rms = self._inverse_key_rms(latent, rope_key)
            scale = self._group_scale(self.key_norm)[:, self.nope_dim :]
            rope_key = ops.multiply(ops.cast(rope_key, "float32"), scale)
        rope_key = self._rotate(rope_key)
        shape = ops.shape(rope_key)
        parts.append(
            ops.cast(ops.reshape(rope_key, (shape[0], shape[1], shape[2] * shape[3])), latent.dtype)
        )
        if self.key_norm is not None:
            parts.append(inverse_rms)
        return {"latent": ops.concatenate(parts, axis=-1)}

    def _split(self, stacked: Any) -> tuple[Any, Any]:
        """`[B, S, r + R 2k (+ h)]` -> (the latent `[B, S, r]`, the rotary keys `[B, S, R, 2k]` or
        None); the inverse key RMS, where cached, is `_cached_inverse_rms`'s."""
        rank = self._kv_latent_dim
        if not self.uses_rope:
            return stacked, None
        shape = ops.shape(stacked)
        width = self.num_rope_heads * 2 * self._rope_pairs
        rope_key = ops.reshape(
            stacked[..., rank : rank + width],
            (shape[0], shape[1], self.num_rope_heads, 2 * self._rope_pairs),
        )
        return stacked[..., :rank], rope_key

    def _cached_inverse_rms(self, stacked: Any) -> Any:
        """The cached inverse key RMS per head `[B, S, h]` (None without query/key norms)."""
        if self.key_norm is None:
            return None
        return stacked[..., self._kv_latent_dim + self.num_rope_heads * 2 * self._rope_pairs :]

    def _rope_keys_per_head(self, rope_key: Any) -> Any:
        """Rotary keys `[B, S, R, 2k]` repeated to every query head of their group."""
        return ops.repeat(rope_key, self._num_heads // self.num_rope_heads, axis=2)

    def _per_head(self, projected: dict[str, Any]) -> dict[str, Any]:
        """Keys and values up-projected from the latents (the non-absorbed path)."""
        latent, rope_key = self._split(projected["latent"])
        parts = [] if self._key_up_dense is None else [self._key_up_dense(latent)]
        if parts and self.key_norm is not None:
            scale = self._norm_scale(self.key_norm, parts[0].dtype)[:, : self.nope_dim]
            parts[0] = ops.multiply(parts[0], scale)
        if self.uses_rope:
            parts.append(ops.cast(self._rope_keys_per_head(rope_key), latent.dtype))
        keys = parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=-1)
        inverse_rms = self._cached_inverse_rms(projected["latent"])
        if inverse_rms is not None:
            keys = ops.multiply(keys, ops.expand_dims(ops.cast(inverse_rms, keys.dtype), -1))
        return {"key": keys, "value": self._value_up_dense(latent)}

    def _logits_from_projected(self, query: Any, projected: dict[str, Any]) -> Any:
        keys = self._per_head(projected)["key"] if "latent" in projected else projected["key"]
        return ops.einsum("bshp,bthp->bhts", keys, self._scaled_query(query))

    def _combine(self, dropped: Any, projected: dict[str, Any]) -> Any:
        return ops.einsum("bhts,bshv->bthv", dropped, projected["value"])

    def _absorbable(self) -> bool:
        # Quantized up-projections hold integer kernels: up-project instead.
        return (
            self._absorb
            and (self._key_up_dense is None or self._key_up_dense.quantization_mode is None)
            and self._value_up_dense.quantization_mode is None
        )

    def _absorbed_query(self, query: Any, dtype: Any) -> Any:
        """`[B, T, h, r (+ 2k)]`: the scaled query's latent part times W_UK^T, then its rotary part."""
        scaled = self._scaled_query(query)
        parts = []
        if self._key_up_dense is not None:
            key_up = ops.cast(self._key_up_dense.kernel, dtype)  # [h, r, p - 2k]
            nope = ops.cast(scaled[..., : self.nope_dim], dtype)
            if self.key_norm is not None:  # The key scale's latent part, on the query side.
                nope = ops.multiply(
                    nope, self._norm_scale(self.key_norm, dtype)[:, : self.nope_dim]
                )
            parts.append(ops.einsum("bthp,hrp->bthr", nope, key_up))
        else:
            shape = ops.shape(scaled)
            parts.append(ops.zeros((shape[0], shape[1], shape[2], self._kv_latent_dim), dtype))
        if self.uses_rope:
            parts.append(ops.cast(scaled[..., self.nope_dim :], dtype))
        return parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=-1)

    def _attend_cached(
        self, query: Any, cache: dict[str, Any], attention_mask: Any, training: Any
    ) -> Any:
        if not self._absorbable():
            return super()._attend_cached(query, cache, attention_mask, training)
        # [B, S, r + R 2k (+ h)]: the latent, the rotary keys (and each head's inverse key RMS).
        stacked = cache["latent"]
        dtype = stacked.dtype
        rank = self._kv_latent_dim
        value_up = ops.cast(self._value_up_dense.kernel, dtype)  # [h, r, v]
        inverse_rms = self._cached_inverse_rms(stacked)
        # Normalised keys: the scores before their inverse RMS are in float32 (in bfloat16
        # they would be rounded at the keys' raw scale, then rescaled).
        absorbed = self._multi_query(  # [B, T, h, r + R 2k]
            self._absorbed_query(query, dtype if inverse_rms is None else "float32")
        )
        dropout_active = self._dropout > 0 and training is not None and training is not False
        if (
            keras.backend.backend() == "jax"
            and not dropout_active
            and self._logit_soft_cap is None
            and inverse_rms is None
        ):
            # Multi-query attention over the cache as one key head, also the values (their
            # first r dimensions are the latent's).
            keys = stacked[:, :, None]
            latent_context, attends = self._dot_product_context(
                absorbed, keys, keys, attention_mask, False, scale=1.0
            )
            context = ops.einsum("bthr,hrv->bthv", latent_context[..., :rank], value_up)
            if attends is None:
                attends = ops.ones(ops.shape(context)[:2] + (1,), context.dtype)
            return self._add_value_bias_rows(context, attends)
        if inverse_rms is None:
            logits = ops.einsum("bthd,bsd->bhts", absorbed, stacked)
        else:  # Each head's scores times its keys' inverse RMS.
            keys = ops.cast(stacked[..., : ops.shape(absorbed)[-1]], "float32")
            logits = ops.einsum("bthd,bsd->bhts", absorbed, keys)
            scale = ops.expand_dims(ops.transpose(inverse_rms, (0, 2, 1)), 2)  # [B, h, 1, S]
            logits = ops.cast(ops.multiply(logits, ops.cast(scale, "float32")), dtype)
        _, dropped = self._softmax_and_dropout(logits, attention_mask, training)
        # The whole cached vector times the weights, then its latent part: no copy of the cache.
        latent_context = ops.einsum("bhts,bsd->bthd", dropped, stacked)[..., :rank]
        context = ops.einsum("bthr,hrv->bthv", latent_context, value_up)
        return self._add_value_bias(context, dropped)

    def _multi_query(self, absorbed: Any) -> Any:
        """Absorbed queries `[B, T, h, r + 2k]` laid out as the cached `[c, k_R]` of R rotary
        keys, `[B, T, h, r + R 2k]`: each head's rotary part in its key's slot, zeros elsewhere."""
        groups = self.num_rope_heads
        if not self.uses_rope or groups == 1:
            return absorbed
        rank, width = self._kv_latent_dim, 2 * self._rope_pairs
        owner = np.arange(self._num_heads) // (self._num_heads // groups)
        slots = np.eye(groups, dtype="float32")[owner]  # [h, R]: head -> its rotary key
        rotary = absorbed[..., rank:]  # [B, T, h, 2k]
        spread = rotary[..., None, :] * ops.cast(slots, absorbed.dtype)[None, None, :, :, None]
        shape = ops.shape(rotary)
        spread = ops.reshape(spread, (shape[0], shape[1], shape[2], groups * width))
        return ops.concatenate([absorbed[..., :rank], spread], axis=-1)

    def _cache_dims(self) -> dict[str, list[int]]:
        rotary = self.num_rope_heads * 2 * self._rope_pairs if self.uses_rope else 0
        scales = self._num_heads if self._query_key_norm_epsilon is not None else 0
        return {"latent": [self._kv_latent_dim + rotary + scales]}

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "kv_latent_dim": self._kv_latent_dim,
                "absorb": self._absorb,
                "num_rope_heads": self._num_rope_heads,
                "rope_grid_size": self._rope_grid_size,
            }
        )
        return config


_SWAP = (1, 0, 2)  # [h, r, p] <-> [r, h, p]: head-first storage against the core's layout.


class _HeadFirstUpProjection(keras.layers.EinsumDense):
    """An up-projection `[B, S, r] -> [B, S, h, p]` with its kernel stored head-first, `[h, r, p]`.

    `core_kernel` shows the kernel in the core's layout `[r, h, p]`. Saved
    variables carry a `head_first` entry. A store without it was written
    rank-first (a plain `EinsumDense` of equation "abc,cde->abde"), and its
    kernel (float, int8 or float8) is transposed on load; only a kernel already
    of the head-first shape `[h, r, p]` with r != h loads as it is (head-first
    files written before the entry existed). An int4 or GPTQ/AWQ kernel packed
    rank-first cannot be transposed in place and is refused.
    """

    _LAYOUT_KEY = "head_first"

    @property
    def core_kernel(self) -> _RankFirstView:
        """The kernel as `[r, h, p]` (`shape`, `dtype`, `numpy()`, `assign`)."""
        return _RankFirstView(self.kernel)

    def quantize(
        self, mode: str | None = None, type_check: bool = True, config: Any = None
    ) -> None:
        # Keras quantizes only `EinsumDense` itself unless told this subclass computes the same.
        super().quantize(mode, type_check=False, config=config)

    def save_own_variables(self, store: Any) -> None:
        super().save_own_variables(store)
        if self.built:
            store[self._LAYOUT_KEY] = np.ones([1], np.int8)

    def load_own_variables(self, store: Any) -> None:
        values = {key: store[key] for key in store.keys() if key != self._LAYOUT_KEY}
        if self.built and values and self._LAYOUT_KEY not in store:
            mode = self.quantization_mode
            if mode not in (None, "int8", "float8"):
                raise ValueError(
                    f"Layer {self.name!r}: these weights were saved with the up-projection "
                    f"kernel rank-first [r, h, p] and {mode}-quantized; a packed kernel cannot "
                    "be moved to the head-first layout. Load them unquantized and quantize again."
                )
            stored = tuple(np.shape(values["0"]))
            shape = tuple(self.kernel.shape)
            if stored != shape or shape[0] == shape[1]:
                values["0"] = np.transpose(np.asarray(values["0"]), _SWAP)
        super().load_own_variables(values)


class _RankFirstView:
    """A head-first up-projection kernel `[h, r, p]` seen in the core's layout `[r, h, p]`:
    its `shape`, `dtype`, `numpy()` and `assign(value)` are the core layout's; `.variable` is
    the variable."""

    def __init__(self, variable: Any) -> None:
        self.variable = variable

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.variable.shape[i] for i in _SWAP)

    @property
    def dtype(self) -> Any:
        return self.variable.dtype

    def numpy(self) -> np.ndarray:
        return np.transpose(keras.ops.convert_to_numpy(self.variable), _SWAP)

    def assign(self, value: Any) -> None:
        self.variable.assign(np.transpose(np.asarray(value), _SWAP))

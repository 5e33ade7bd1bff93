"""Shared machinery of the Keras 3 head-size attention layers (public base class).

Every public layer of `headsize_tf.keras3.layers` derives from
`HeadAttentionBase`, which subclasses `keras.layers.MultiHeadAttention` (Keras
3) so the weights, `get_weights()` / `set_weights()` and `count_params()` are
exactly stock MHA's for the same shapes. It is the Keras 3 mirror of
`headsize_tf.layers.HeadAttentionBase` (tf_keras) and adds the same things:

* head size resolved at build time (`_resolve_head_size`), so a layer never
  needs `key_dim` up front;
* per-head gates `xi_h` (a non-trainable `[num_heads]` variable, all ones by
  default) folded into the output projection kernel, which is exactly the same
  as multiplying each head's context by `xi_h` (Michel et al., 2019) but costs
  `O(num_heads * head_size * width)` per call, independent of batch and length
  (a call with fewer rows than the width, a decoding step, gates the context);
* validation of arguments and of `attention_mask` shapes with messages that
  name the bad value and what was expected (the tf_keras front's messages);
* a decoding cache (`init_cache`, `call_cached`), inherited from
  `headsize_tf.keras3.layers.decoding_cache.DecodingCacheMixin`.

The gates are layer state but not a Keras weight: they are in `variables` and
`non_trainable_variables` (so compiled `fit` / `predict` functions on every
backend read their current value) but not in `weights`, `get_weights()`,
`set_weights()` or `count_params()`, and they are not saved in `.keras` /
`.weights.h5` files (a head mask is a transient analysis setting: set it again
after loading).

Where `keras.ops.dot_product_attention` applies (rank-3 inputs attending over
axis 1, value head size = head size, no attention dropout in this call, no
returned scores, dot-product scores) the layer uses it, with Keras MHA's
`flash_attention` argument; otherwise it computes the scores with einsums.

Rotary positions (`rope_max_wavelength`, `rope_scaling`,
`rope_frequencies`; `headsize_tf.core.rope`): the projected queries and keys
are rotated at their positions (keras-hub's and Hugging Face's half-split
convention) before the scores, and keys are cached rotated; a full call
starts at position 0, `call_cached` at its cache index. `query_key_norm_epsilon`
adds a per-head RMSNorm of queries and keys before the rotation (Qwen3's),
and `use_output_bias=False` drops the output bias alone (Qwen2's projections).

Subclasses implement `_resolve_head_size` and, if their scores differ from
dot-product attention over per-head projections, `_build_projections`,
`_project_key` and `_logits_from_projected`.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from headsize_tf.core import rope
from headsize_tf.core.errors import SpecError
from headsize_tf.core.validation import (
    check_attention_args,
    check_attention_mask_shape,
    check_head_mask_shape,
)
from headsize_tf.keras3.layers import rotary
from headsize_tf.keras3.layers.decoding_cache import DecodingCacheMixin

Shape = tuple[int | None, ...]


def _shape(x: Any) -> Shape | None:
    """The static shape of a tensor (None entries for unknown dims), or None if unknown rank."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(_dim(d) for d in shape)
    except (TypeError, ValueError):  # A TensorShape of unknown rank.
        return None


def _dim(d: Any) -> int | None:
    """A dimension as an int, None if unknown or symbolic."""
    if d is None:
        return None
    try:
        return int(d)
    except Exception:  # A symbolic dim (jax.export / jax2tf shape polymorphism).
        return None


def four_d_mask(mask: Any) -> Any:
    """A `[B, T, S]` (or `[B, 1, S]`) attention mask as a bool `[B, 1, T, S]` (a heads axis)."""
    for _ in range(4 - len(mask.shape)):
        mask = ops.expand_dims(mask, axis=-3)
    return ops.cast(mask, "bool")


def _front_mismatch(layer: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Raises TypeError if a tf_keras (Keras 2) tensor was passed to this Keras 3 layer."""
    values = list(args) + list(kwargs.values())
    for value in values:
        items = value if isinstance(value, list | tuple) else (value,)
        for item in items:
            if type(item).__module__.startswith("tf_keras."):
                name = type(layer).__name__
                raise TypeError(
                    f"headsize_tf.keras3.layers.{name} is a Keras 3 layer and got a tf_keras "
                    f"(Keras 2) tensor ({type(item).__name__}); for tf_keras models use "
                    f"headsize_tf.layers.{name} (or build the model with `import keras`, "
                    "Keras 3)."
                )


class HeadAttentionBase(DecodingCacheMixin, keras.layers.MultiHeadAttention):
    """Base of the Keras 3 `StandardAttention`, `FixedHeadAttention`, `CollaborativeAttention`.

    Args:
      num_heads: Number of attention heads (a positive int).
      value_dim: Optional per-head value size; the head size by default (as
        `value_dim` of `keras.layers.MultiHeadAttention`).
      dropout: Dropout rate on the attention probabilities, in [0, 1).
      use_bias: Whether the projections use bias vectors.
      output_shape: Output size of the last dimension (or a shape tuple);
        defaults to the query width.
      attention_axes: Axes over which attention is applied (as in Keras' MHA).
      sliding_window: Optional positive int: each query attends to keys
        within `sliding_window - 1` positions (as in Keras' MHA).
      flash_attention: As in Keras' MHA: None lets the backend decide, True
        requests flash attention (an error on backends without it), False
        disables it.
      kernel_initializer, bias_initializer, kernel_regularizer,
      bias_regularizer, activity_regularizer, kernel_constraint,
      bias_constraint: As in `keras.layers.MultiHeadAttention`.
      use_gate: Whether to gate the attention output with a sigmoid projection
        of the query (as in Keras' MHA).
      seed: Optional int seed of the attention dropout.
      rope_max_wavelength: The RoPE base; None (default): no rotary positions.
      rope_scaling: None or a Hugging Face `rope_scaling` dict (linear,
        llama3, yarn).
      rope_frequencies: The rotating frequency indices: None (all), one list
        for every rotary head or one list per rotary head (partial RoPE).
      query_key_norm_epsilon: If set, a per-head RMSNorm (weights
        `query_norm` / `key_norm`, `[head size]`) of queries and keys before
        RoPE, with this epsilon (Qwen3).
      use_output_bias: Whether the output projection has a bias (None:
        `use_bias`).
      query_key_norm_offset: 0, or 1 for query/key norms scaling by `1 + w`
        with `w` stored (Gemma 3's).
      logit_soft_cap: None, or a cap `c` on the scaled logits before the
        mask and softmax, `c * tanh(logits / c)` (Gemma 2). Capped layers
        take the einsum path: `keras.ops.dot_product_attention`'s own cap is
        another function on some backends and ignored on others.
      query_scale: None (the default: 1 / sqrt(head size)), or the softmax
        scale the queries are multiplied by (Gemma 2 and 3 27B:
        `query_pre_attn_scalar ** -0.5`).
      **kwargs: Base layer arguments (`name`, `dtype` policies, ...).

    All arguments after `num_heads` (and a subclass's head-size arguments) are
    keyword-only: the tf_keras front and Keras' MHA order them differently.
    """

    # Whether the scores are dot products of per-head projections, so that
    # `keras.ops.dot_product_attention` can compute them.
    _dot_product_scores = True

    # Whether a rotary set may repeat a frequency (a latent's rotated rotary key).
    _ROPE_REPEATS = False

    def __init__(
        self,
        num_heads: int,
        *,
        value_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape: int | Sequence[int] | None = None,
        attention_axes: int | Sequence[int] | None = None,
        sliding_window: int | None = None,
        flash_attention: bool | None = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        use_gate: bool = False,
        seed: int | None = None,
        rope_max_wavelength: float | None = None,
        rope_scaling: Mapping[str, Any] | None = None,
        rope_frequencies: Any = None,
        query_key_norm_epsilon: float | None = None,
        use_output_bias: bool | None = None,
        query_key_norm_offset: float = 0.0,
        logit_soft_cap: float | None = None,
        query_scale: float | None = None,
        **kwargs: Any,
    ):
        num_heads, value_dim, dropout, seed = check_attention_args(
            type(self).__name__, num_heads, value_dim, dropout, seed, kwargs
        )
        super().__init__(
            num_heads=num_heads,
            key_dim=1,  # Placeholder: resolved in `build`.
            value_dim=value_dim,
            dropout=dropout,
            use_bias=use_bias,
            output_shape=output_shape,
            attention_axes=attention_axes,
            sliding_window=sliding_window,
            flash_attention=flash_attention,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            use_gate=use_gate,
            seed=seed,
            **kwargs,
        )
        self._key_dim = None
        self._value_dim = None
        self._inverse_sqrt_key_dim = None
        self._value_dim_arg = value_dim
        self._flash_attention_arg = flash_attention
        # Tests set this to compare the einsum path with dot_product_attention.
        self._force_einsum = False
        # `object.__setattr__`: Keras' attribute tracking must not see the gates.
        object.__setattr__(self, "_head_gates", None)
        if rope_max_wavelength is None and (
            rope_scaling is not None or rope_frequencies is not None
        ):
            raise SpecError(
                "rope_scaling / rope_frequencies need rotary positions: set `rope_max_wavelength`."
            )
        self._rope_max_wavelength = (
            None if rope_max_wavelength is None else rope.check_max_wavelength(rope_max_wavelength)
        )
        self._rope_scaling = rope.check_scaling(rope_scaling)
        self._rope_frequencies = rope.normalize_frequencies(
            rope_frequencies, repeats=self._ROPE_REPEATS
        )
        if rope.is_per_layer(self._rope_frequencies):
            raise SpecError("A layer takes one rope_frequencies entry, not a per-layer list.")
        if query_key_norm_epsilon is not None and not float(query_key_norm_epsilon) > 0:
            raise SpecError(
                f"`query_key_norm_epsilon` must be None or > 0; got {query_key_norm_epsilon!r}."
            )
        self._query_key_norm_epsilon = (
            None if query_key_norm_epsilon is None else float(query_key_norm_epsilon)
        )
        if use_output_bias is not None and not isinstance(use_output_bias, bool):
            raise SpecError(f"`use_output_bias` must be None or a bool; got {use_output_bias!r}.")
        self._use_output_bias_arg = use_output_bias
        if logit_soft_cap is not None and (
            isinstance(logit_soft_cap, bool) or not float(logit_soft_cap) > 0
        ):
            raise SpecError(f"`logit_soft_cap` must be None or > 0; got {logit_soft_cap!r}.")
        self._logit_soft_cap = None if logit_soft_cap is None else float(logit_soft_cap)
        if query_scale is not None and (
            isinstance(query_scale, bool) or not float(query_scale) > 0
        ):
            raise SpecError(f"`query_scale` must be None or > 0; got {query_scale!r}.")
        self._query_scale = None if query_scale is None else float(query_scale)
        if float(query_key_norm_offset) not in (0.0, 1.0):
            raise SpecError(
                f"`query_key_norm_offset` must be 0 or 1; got {query_key_norm_offset!r}."
            )
        self._query_key_norm_offset = float(query_key_norm_offset)
        self._use_output_bias = use_bias if use_output_bias is None else use_output_bias
        self._rope_inverse = None  # [rows, pairs] float32, set in build.
        self._rope_factor = 1.0
        self.query_norm = None
        self.key_norm = None
        # The first position of the current call's queries and new keys (RoPE).
        object.__setattr__(self, "_rope_start", 0)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _front_mismatch(self, args, kwargs)
        return super().__call__(*args, **kwargs)

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
    def uses_rope(self) -> bool:
        """Whether queries and keys are rotated (rotary positions)."""
        return self._rope_max_wavelength is not None

    @property
    def rope_sets(self) -> tuple[tuple[int, ...], ...] | None:
        """The rotating frequency indices of each rotary head (None without RoPE or unbuilt)."""
        return getattr(self, "_rope_sets", None)

    @property
    def head_gates(self) -> keras.Variable | None:
        """Non-trainable `[num_heads]` gates xi_h (not a Keras weight); None before build."""
        return self._head_gates

    def set_head_mask(self, mask: Any) -> None:
        """Sets the per-head gates xi_h (1 keeps a head, 0 masks it).

        The mask is not saved with the model (`.keras`, `.weights.h5`).

        Args:
          mask: A `[num_heads]` array-like of floats (or bools).
        """
        if self._head_gates is None:
            raise ValueError(
                f"Layer {self.name!r} is not built yet: call it on inputs before set_head_mask."
            )
        values = np.asarray(mask, dtype=np.float32)
        check_head_mask_shape(self.name, values.shape, self._num_heads)
        self._head_gates.assign(values)

    @property
    def variables(self) -> list[keras.Variable]:
        """All layer state: `weights`, seed generator states and the head gates."""
        variables = super().variables
        gates = self._head_gates
        if gates is not None and all(v is not gates for v in variables):
            variables.append(gates)
        return variables

    # ---------------------------------------------------------------- build
    def _resolve_head_size(self, query_shape: Shape, key_shape: Shape) -> int:
        raise NotImplementedError

    def build(self, query_shape: Shape, value_shape: Shape, key_shape: Shape | None = None) -> None:
        query_shape = tuple(query_shape)
        value_shape = tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        head_size = self._resolve_head_size(query_shape, key_shape)
        self._key_dim = head_size
        self._value_dim = self._value_dim_arg or head_size
        self._inverse_sqrt_key_dim = self._query_scale or 1.0 / math.sqrt(float(head_size))
        self._build_projections(query_shape, value_shape, key_shape)
        self._build_query_key_norms()
        self._build_rope()
        self._create_head_gates()

    # ----------------------------------------------------------------- RoPE
    def _num_rotary_heads(self) -> int:
        """Heads whose keys rotate, each with its own rotary set (default: every head)."""
        return self._num_heads

    def _rotary_dim(self) -> int:
        """The size whose frequency grid the rotary sets index (default: the head size)."""
        return self._key_dim

    def _build_rope(self) -> None:
        if not self.uses_rope:
            self._rope_sets = None
            return
        dim = self._rotary_dim()
        if dim % 2:
            raise SpecError(f"Layer {self.name!r}: rotary positions need an even size; got {dim}.")
        self._rope_sets = rope.resolve_sets(
            self._rope_frequencies, self._num_rotary_heads(), dim // 2, "rope_frequencies"
        )
        self._rope_inverse = rope.frequency_table(
            self._rope_sets, dim, self._rope_max_wavelength, self._rope_scaling
        )
        self._rope_factor = rope.attention_factor(self._rope_scaling)

    def _build_query_key_norms(self, shape: tuple[int, ...] | None = None) -> None:
        """`query_norm` and `key_norm` of `shape` (`[head size]` by default), if the layer has them."""
        if self._query_key_norm_epsilon is None:
            return
        for name in ("query_norm", "key_norm"):
            setattr(
                self,
                name,
                self.add_weight(
                    name=name,
                    shape=shape or (self._key_dim,),
                    initializer="zeros" if self._query_key_norm_offset else "ones",
                    trainable=True,
                ),
            )

    @contextlib.contextmanager
    def _positions_from(self, start: Any) -> Iterator[None]:
        """Queries and new keys of calls inside this block start at position `start`."""
        previous = self._rope_start
        object.__setattr__(self, "_rope_start", start)
        try:
            yield
        finally:
            object.__setattr__(self, "_rope_start", previous)

    def _rotate(self, x: Any) -> Any:
        """RoPE of projected queries or keys `[B, T, H, p]` from the current start position."""
        if self._rope_inverse is None:
            return x
        return rotary.rotate(x, self._rope_inverse, self._rope_start, self._rope_factor)

    def _project_query(self, query: Any) -> Any:
        """Projected queries `[B, T, N, H]`: query dense, query norm, RoPE."""
        projected = self._query_dense(query)
        if self.query_norm is not None:
            projected = rotary.rms_normalize(
                projected,
                self.query_norm,
                self._query_key_norm_epsilon,
                self._query_key_norm_offset,
            )
        return self._rotate(projected)

    def _finish_key(self, key: Any) -> Any:
        """Projected keys `[B, S, K, H]` normalised (query-key norm) and rotated."""
        if self.key_norm is not None:
            key = rotary.rms_normalize(
                key, self.key_norm, self._query_key_norm_epsilon, self._query_key_norm_offset
            )
        return self._rotate(key)

    def _make_output_dense(self, query_shape: Any, common_kwargs: Any, name: Any = None) -> Any:
        """Keras MHA's output projection, with a bias only if `use_output_bias`."""
        use_bias = self._use_bias
        self._use_bias = self._use_output_bias
        try:
            return super()._make_output_dense(query_shape, common_kwargs, name)
        finally:
            self._use_bias = use_bias

    def _build_projections(self, query_shape: Shape, value_shape: Shape, key_shape: Shape) -> None:
        """Builds Q/K/V/output projections; default: Keras' MHA ones."""
        super().build(query_shape, value_shape, key_shape)

    def _create_head_gates(self) -> None:
        """Creates the gates xi_h as a variable outside the Keras weight list.

        `object.__setattr__` keeps the variable out of Keras' tracker, so
        `weights`, `get_weights()`, `set_weights()`, `count_params()` and the
        saved files are exactly stock `MultiHeadAttention`'s; `variables`
        (overridden) lists it, so stateless (JAX) training and prediction
        pass its current value.
        """
        # An initializer, not a value: Keras defers it when the layer is built inside a
        # stateless scope (a functional model's shape inference of a layer holding this one).
        gates = keras.Variable(
            keras.initializers.Ones(),
            shape=(self._num_heads,),
            dtype="float32",
            trainable=False,
            autocast=False,
            name="head_gates",
        )
        object.__setattr__(self, "_head_gates", gates)

    # ----------------------------------------------------------------- call
    def _check_attention_mask(self, query: Any, key: Any, attention_mask: Any) -> None:
        if attention_mask is None:
            return
        check_attention_mask_shape(
            self.name,
            _shape(attention_mask),
            _shape(query),
            _shape(key),
            self._attention_axes,
            self._num_heads,
        )

    # Key-side projections are split from the scores so a decoding cache can
    # store them: every tensor of the dict has time on axis 1.
    def _project_key(self, key: Any) -> dict[str, Any]:
        """Key-side tensors the logits need: {"key": [B, S, N, H]} (normalised, rotated)."""
        return {"key": self._finish_key(self._key_dense(key))}

    def _project_key_value(self, key: Any, value: Any) -> dict[str, Any]:
        projected = self._project_key(key)
        projected["value"] = self._value_dense(value)
        return projected

    def _logits_from_projected(self, query: Any, projected: dict[str, Any]) -> Any:
        """Scaled logits [B, N, T, S] from the query and projected key tensors."""
        projected_query = self._project_query(query)
        projected_query = ops.multiply(
            projected_query, ops.cast(self._inverse_sqrt_key_dim, projected_query.dtype)
        )
        return ops.einsum(self._dot_product_equation, projected["key"], projected_query)

    def _uses_dot_product_attention(
        self, query: Any, training: Any, return_attention_scores: bool
    ) -> bool:
        """Whether `keras.ops.dot_product_attention` computes this call's attention."""
        dropout_active = self._dropout > 0 and training is not None and training is not False
        return (
            self._dot_product_scores
            and not self._force_einsum
            and self._logit_soft_cap is None
            and not return_attention_scores
            and not dropout_active
            and len(query.shape) == 3
            and tuple(self._attention_axes) == (1,)
            and self._value_dim == self._key_dim
        )

    def _dot_product_context(
        self,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any,
        use_causal_mask: bool,
        scale: float | None = None,
    ) -> tuple[Any, Any]:
        """`keras.ops.dot_product_attention` of projected tensors, and which rows attend.

        Keys and values may have fewer heads than the queries (a divisor:
        grouped K/V). A fully masked row gets zero weights, as from
        `_masked_softmax` on the einsum path (the op gives it uniform ones):
        the output must not depend on the path. Returns (context `[B, T, N,
        H]`, `[B, T, 1]` ones where a row attends, or None without a mask).
        """
        mask = None if attention_mask is None else four_d_mask(attention_mask)
        context = ops.dot_product_attention(
            query,
            key,
            value,
            mask=mask,
            scale=self._inverse_sqrt_key_dim if scale is None else scale,
            is_causal=use_causal_mask,
            flash_attention=self._flash_attention,
        )
        if mask is None:
            return context, None
        attends = ops.cast(ops.transpose(ops.any(mask, axis=-1), (0, 2, 1)), context.dtype)
        return ops.multiply(context, ops.expand_dims(attends, -1)), attends

    def _attend_projected(
        self,
        query: Any,
        projected: dict[str, Any],
        attention_mask: Any,
        training: Any,
        return_attention_scores: bool = False,
        use_causal_mask: bool = False,
    ) -> tuple[Any, Any]:
        """Context [B, T, N, H] and probabilities [B, N, T, S] (or None) from projected keys/values.

        `use_causal_mask=True` means the causal mask is the only mask and is
        not in `attention_mask` (None).
        """
        if self._flash_attention and return_attention_scores:
            raise ValueError(
                "Returning attention scores is not supported when flash "
                "attention is enabled. Please disable flash attention to access"
                " attention scores."
            )
        if self._uses_dot_product_attention(query, training, return_attention_scores):
            context, _ = self._dot_product_context(
                self._project_query(query),
                projected["key"],
                projected["value"],
                attention_mask,
                use_causal_mask,
            )
            return context, None
        if use_causal_mask:
            attention_mask = self._compute_causal_mask(query, projected["value"])
        scores = self._masked_softmax(self._logits_from_projected(query, projected), attention_mask)
        dropped = self._dropout_layer(scores, training=training) if self._dropout > 0 else scores
        context = ops.einsum(self._combine_equation, dropped, projected["value"])
        return context, scores

    def _masked_softmax(self, attention_scores: Any, attention_mask: Any = None) -> Any:
        if self._logit_soft_cap is not None:  # Gemma 2: c * tanh(logits / c), before the mask.
            cap = ops.cast(self._logit_soft_cap, attention_scores.dtype)
            attention_scores = ops.multiply(ops.tanh(ops.divide(attention_scores, cap)), cap)
        with warnings.catch_warnings():
            # One key (a prompt's first token, decoded with its cache) is a softmax over one
            # value, 1, as attention means it; Keras warns of any softmax over an axis of size 1.
            warnings.filterwarnings("ignore", "You are using a softmax over axis", UserWarning)
            return super()._masked_softmax(attention_scores, attention_mask)

    @property
    def logit_soft_cap(self) -> float | None:
        """The cap of the attention logits (Gemma 2), or None."""
        return self._logit_soft_cap

    def _fold_gates_into_kernel(self) -> bool:
        dense = self._output_dense
        return dense.quantization_mode is None and dense.activity_regularizer is None

    def _project_output(self, context: Any) -> Any:
        """Output projection with the head gates: on the context for few rows, else in the kernel.

        Both cost one multiply: a decoding step's few rows `[B, 1, N, H]` are
        cheaper to gate than the `[N, H, width]` kernel; a long sequence's
        rows are not. Same result either way.
        """
        dense = self._output_dense
        gates = ops.convert_to_tensor(self._head_gates)
        rows = 1
        for dim in context.shape[:-2]:
            dim = _dim(dim)  # None if unknown or symbolic (shape-polymorphic export).
            rows = None if dim is None or rows is None else rows * dim
        few_rows = rows is not None and rows < int(dense.kernel.shape[-1])
        if few_rows or not self._fold_gates_into_kernel():
            # Quantized or regularized projections: gate the context instead.
            gates = ops.reshape(ops.cast(gates, context.dtype), (self._num_heads, 1))  # [N, Hv]
            return dense(ops.multiply(context, gates))
        kernel = ops.convert_to_tensor(dense.kernel)
        kernel = ops.cast(kernel, context.dtype)
        gates = ops.reshape(
            ops.cast(gates, kernel.dtype), (self._num_heads,) + (1,) * (len(kernel.shape) - 1)
        )
        output = ops.einsum(dense.equation, context, ops.multiply(kernel, gates))
        if dense.bias is not None:
            output = ops.add(output, ops.cast(dense.bias, output.dtype))
        return output

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
        if key is None:
            key = value
        if query_mask is not None or value_mask is not None or key_mask is not None:
            # Keras masks are handled here (merged into the attention mask): copy
            # the inputs so the projections do not see (and warn about) them.
            query, value, key = ops.copy(query), ops.copy(value), ops.copy(key)
        self._check_attention_mask(query, key, attention_mask)
        overridden = self._overrides_compute_attention()
        causal_only = (
            use_causal_mask
            and query_mask is None
            and value_mask is None
            and key_mask is None
            and attention_mask is None
            and self._sliding_window is None
            and not overridden
        )
        if not causal_only:
            attention_mask = self._compute_attention_mask(
                query,
                value,
                query_mask=query_mask,
                value_mask=value_mask,
                key_mask=key_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
            )
        if overridden:
            context, attention_scores = self._call_compute_attention(
                query, key, value, attention_mask, training, return_attention_scores
            )
        else:
            context, attention_scores = self._attend_projected(
                query,
                self._project_key_value(key, value),
                attention_mask,
                training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=causal_only,
            )
        if self._use_gate:
            context = ops.multiply(context, self._gate_dense(query))
        attention_output = self._project_output(context)
        if return_attention_scores:
            return attention_output, attention_scores
        return attention_output

    # Stock MHA's extension point: `_compute_attention(query, key, value, attention_mask,
    # training, return_attention_scores)` on projected [B, T, N, H] tensors. A subclass that
    # overrides it is called with this layer's projections; the head gates and the output
    # projection follow as usual. (Incremental decoding, `call_cached`, keeps the built-in
    # attention.)
    _per_head_projections = True  # False where keys have no head axis (collaborative).

    def _overrides_compute_attention(self) -> bool:
        return (
            type(self)._compute_attention is not keras.layers.MultiHeadAttention._compute_attention
        )

    def _call_compute_attention(
        self,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any,
        training: Any,
        return_attention_scores: bool,
    ) -> tuple[Any, Any]:
        if not self._per_head_projections:
            raise NotImplementedError(
                f"{type(self).__name__} overrides `_compute_attention`, but its keys are one "
                "shared projection without a head axis, not the [B, S, N, H] tensors that "
                "method takes; override `_logits_from_projected` (the scores before the "
                "softmax) instead."
            )
        projected = self._project_key_value(key, value)
        return self._compute_attention(
            self._project_query(query),
            projected["key"],
            projected["value"],
            attention_mask,
            training,
            return_attention_scores,
        )

    def compute_output_spec(
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
        key = value if key is None else key
        output_shape = self.compute_output_shape(query.shape, value.shape, key.shape)
        output = keras.KerasTensor(output_shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        rank = len(query.shape)
        axes = self._attention_axes
        if axes is None:
            axes = tuple(range(1, rank - 1))
        axes = tuple(a if a >= 0 else rank + a for a in axes)
        batch = [query.shape[i] for i in range(rank - 1) if i not in axes]
        scores_shape = (
            batch
            + [self._num_heads]
            + [query.shape[a] for a in axes]
            + [key.shape[a] for a in axes]
        )
        return output, keras.KerasTensor(tuple(scores_shape), dtype=self.compute_dtype)

    # --------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("key_dim", None)
        config["value_dim"] = self._value_dim_arg
        config["flash_attention"] = self._flash_attention_arg
        config.update(
            {
                "rope_max_wavelength": self._rope_max_wavelength,
                "rope_scaling": self._rope_scaling,
                "rope_frequencies": _plain(self._rope_frequencies),
                "query_key_norm_epsilon": self._query_key_norm_epsilon,
                "use_output_bias": self._use_output_bias_arg,
                "logit_soft_cap": self._logit_soft_cap,
                "query_key_norm_offset": self._query_key_norm_offset,
                "query_scale": self._query_scale,
            }
        )
        return config


def _plain(value: Any) -> Any:
    """Nested tuples as nested lists (a JSON config)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value

"""Argument and shape checks of the attention layers, shared by both fronts.

The tf_keras layers (`headsize_tf.layers`) and the Keras 3 layers
(`headsize_tf.keras3.layers`) validate their arguments and their
`attention_mask` with these functions, so the two fronts accept the same
values and raise the same messages. Plain Python: arguments are Python values,
shapes are sequences of ints and Nones (None for a shape of unknown rank), and
a front passes its own initializer lookup where one is needed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from headsize_tf.core.kv_sharing import check_num_kv_heads
from headsize_tf.core.spec import MIXING_INITIALIZERS, check_positive_int

Shape = Sequence[int | None]


def check_no_key_dim(owner: str, kwargs: Mapping[str, Any]) -> None:
    """Raises ValueError if `kwargs` holds `key_dim`: the layers set their head size."""
    if "key_dim" in kwargs:
        raise ValueError(
            f"`key_dim={kwargs['key_dim']!r}` is not an argument of "
            f"{owner}: the head size is set by the layer "
            "(StandardAttention: width // num_heads; FixedHeadAttention and "
            "CollaborativeAttention: `head_size`)."
        )


def check_dropout(dropout: Any) -> float:
    """`dropout` as a float in [0, 1), or a ValueError naming it."""
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout < 1:
        raise ValueError(f"`dropout` must be a float in [0, 1); got {dropout!r}.")
    return float(dropout)


def check_seed(seed: Any) -> int | None:
    """`seed` as an int (or None), or a ValueError naming it."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"`seed` must be an int or None; got {seed!r}.")
    return int(seed)


def check_attention_args(
    owner: str,
    num_heads: Any,
    value_dim: Any,
    dropout: Any,
    seed: Any,
    kwargs: Mapping[str, Any],
) -> tuple[int, int | None, float, int | None]:
    """The checked `(num_heads, value_dim, dropout, seed)` of an attention layer.

    Args:
      owner: The layer class name, for the messages.
      num_heads: A positive int.
      value_dim: None or a positive int.
      dropout: A float in [0, 1).
      seed: None or an int.
      kwargs: The layer's other keyword arguments (`key_dim` is refused).

    Example:

    >>> check_attention_args("StandardAttention", 4, None, 0.1, 7, {})
    (4, None, 0.1, 7)
    """
    check_no_key_dim(owner, kwargs)
    num_heads = check_positive_int("num_heads", num_heads)
    if value_dim is not None:
        value_dim = check_positive_int("value_dim", value_dim)
    return num_heads, value_dim, check_dropout(dropout), check_seed(seed)


def expected_mask_shape(
    query_shape: Shape | None, key_shape: Shape | None, attention_axes: Sequence[int] | None
) -> list[int | None] | None:
    """`[batch, query_length, key_length]` of a rank-3 query attending over axis 1.

    None where the layer does not check masks: a query of unknown rank or of
    another rank, or other attention axes (masks broadcast as in stock MHA,
    which accepts e.g. `[B, 3, 2, 4, 2]` for a `[B, 3, 4, width]` query).
    """
    if query_shape is None or len(query_shape) != 3 or tuple(attention_axes or ()) != (1,):
        return None
    key_length = key_shape[1] if key_shape is not None and len(key_shape) > 1 else None
    return [query_shape[0], query_shape[1], key_length]


def check_attention_mask_shape(
    layer_name: str,
    mask_shape: Shape | None,
    query_shape: Shape | None,
    key_shape: Shape | None,
    attention_axes: Sequence[int] | None,
    num_heads: int | None = None,
) -> None:
    """Raises ValueError unless the mask broadcasts to the scores as in stock MHA.

    Stock `MultiHeadAttention` (both fronts) takes `[batch, query_length,
    key_length]` (or a shape broadcastable to it, rank 2 or 3) and a per-head
    `[batch, num_heads, query_length, key_length]`. Every known dimension
    must be 1 or the expected size; unknown dimensions (None) pass. See
    `expected_mask_shape` for the cases that are not checked.
    """
    expected = expected_mask_shape(query_shape, key_shape, attention_axes)
    if mask_shape is None or expected is None:
        return
    mask_shape = list(mask_shape)
    per_head = [expected[0], num_heads, *expected[1:]]
    want = per_head if len(mask_shape) == 4 else expected
    ok = 2 <= len(mask_shape) <= 4
    if ok:
        for got, size in zip(reversed(mask_shape), reversed(want), strict=False):
            if got is not None and size is not None and got not in (1, size):
                ok = False
    if not ok:
        raise ValueError(
            f"`attention_mask` of layer {layer_name!r} has shape {mask_shape}; "
            f"expected [batch, query_length, key_length] = {expected} or per head "
            f"[batch, num_heads, query_length, key_length] = {per_head} (or a shape "
            "broadcastable to one of them)."
        )


def check_head_mask_shape(layer_name: str, mask_shape: Shape | None, num_heads: int) -> None:
    """Raises ValueError unless a `set_head_mask` mask is `[num_heads]` (one value per head).

    Example:

    >>> check_head_mask_shape("attention", [4], 4)
    """
    if mask_shape is None or len(mask_shape) != 1 or mask_shape[0] != num_heads:
        shown = "<unknown>" if mask_shape is None else list(mask_shape)
        raise ValueError(
            f"Head mask for layer {layer_name!r} has shape {shown}; "
            f"expected [{num_heads}] (one value per head)."
        )


# ------------------------------------------------------------ collaborative
def check_mixing_initializer(value: Any, get_initializer: Callable[[Any], Any]) -> Any:
    """`value` if it is one of `MIXING_INITIALIZERS` or `get_initializer` accepts it.

    Args:
      value: A mixing initializer name, or a Keras initializer (name, config
        dict or instance).
      get_initializer: The front's initializer lookup (e.g.
        `keras.initializers.get`); a ValueError or TypeError from it means
        `value` is unknown.
    """
    if isinstance(value, str) and value in MIXING_INITIALIZERS:
        return value
    try:
        get_initializer(value)
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"Unknown `mixing_initializer` {value!r}; expected one of {list(MIXING_INITIALIZERS)} "
            "or a Keras initializer (name, config dict or instance)."
        ) from err
    return value


def check_collaborative_args(
    shared_key_dim: Any,
    head_size: Any,
    mixing_initializer: Any,
    attention_axes: Any,
    get_initializer: Callable[[Any], Any],
) -> tuple[int, int | None, Any]:
    """The checked `(shared_key_dim, head_size, mixing_initializer)` of a collaborative layer.

    `attention_axes` must be None or axis 1 (rank-3 inputs only).
    """
    shared_key_dim = check_positive_int("shared_key_dim", shared_key_dim)
    if head_size is not None:
        head_size = check_positive_int("head_size", head_size)
    mixing_initializer = check_mixing_initializer(mixing_initializer, get_initializer)
    if attention_axes not in (None, 1, (1,), [1]):
        raise ValueError(
            f"CollaborativeAttention supports attention over axis 1 of rank-3 inputs only; "
            f"got attention_axes={attention_axes!r}."
        )
    return shared_key_dim, head_size, mixing_initializer


def _shape_text(shape: Shape | None) -> str:
    return "<unknown>" if shape is None else str(tuple(shape))


def collaborative_head_size(
    layer_name: str,
    query_shape: Shape | None,
    key_shape: Shape | None,
    num_heads: int,
    head_size: int | None,
    owner: str = "CollaborativeAttention",
) -> int:
    """The head size of a layer whose head size is optional: `head_size`, else width // num_heads.

    Used by the collaborative, grouped and latent layers (`owner` names the
    class in messages). Raises ValueError unless query and key are rank 3 and
    (without `head_size`) the query width is a multiple of `num_heads`.
    """
    return optional_head_size(
        "CollaborativeAttention", layer_name, query_shape, key_shape, num_heads, head_size
    )


def optional_head_size(
    owner: str,
    layer_name: str,
    query_shape: Shape | None,
    key_shape: Shape | None,
    num_heads: int,
    head_size: int | None,
) -> int:
    """The head size of a layer of rank-3 inputs with an optional `head_size`.

    `head_size` if given, else width // num_heads (collaborative, grouped and
    latent layers: `headsize_tf.core.spec.OPTIONAL_HEAD_SIZE_KINDS`).

    Args:
      owner: The layer class name, for the messages.
      layer_name: The layer's name, for the messages.
      query_shape: The query's shape (None: unknown rank).
      key_shape: The key's shape (None: unknown rank).
      num_heads: The number of (query) heads.
      head_size: The layer's `head_size` argument (None: the default).

    Raises:
      ValueError: Unless query and key are rank 3 and (without `head_size`)
        the query width is a multiple of `num_heads`.

    Example:

    >>> optional_head_size("GroupedAttention", "attn", [2, 5, 16], [2, 7, 16], 4, None)
    4
    """
    for role, shape in (("query", query_shape), ("key", key_shape)):
        if shape is None or len(shape) != 3:
            raise ValueError(
                f"{owner} {layer_name!r} expects rank-3 {role} inputs "
                f"[batch, length, width]; got shape {_shape_text(shape)}."
            )
    if head_size is not None:
        return head_size
    width = query_shape[-1]
    if width is None or width % num_heads:
        raise ValueError(
            f"{owner} {layer_name!r}: head_size defaults to width // num_heads, "
            f"but the query width ({width}) is not a multiple of num_heads "
            f"({num_heads}); pass head_size explicitly."
        )
    return width // num_heads


def concatenate_mixing(num_heads: int, shared_key_dim: int) -> np.ndarray:
    """The float32 `[num_heads, shared_key_dim]` "concatenate" mixing matrix (blocks of ones).

    Head i uses shared dims `[i*b, (i+1)*b)` with `b = shared_key_dim // num_heads`.
    """
    if shared_key_dim % num_heads:
        raise ValueError(
            f'mixing_initializer="concatenate" needs shared_key_dim ({shared_key_dim}) to be '
            f"a multiple of num_heads ({num_heads}); use 'uniform', 'normal' or a Keras "
            "initializer otherwise."
        )
    return np.repeat(np.eye(num_heads, dtype=np.float32), shared_key_dim // num_heads, axis=1)


def mixing_initializer_identifier(
    value: Any, head_size: int, shared_key_dim: int, concatenate: Callable[[], Any]
) -> Any:
    """What the front's `initializers.get` takes for a mixing initializer `value`.

    "concatenate" is `concatenate()` (the front's `ConcatenateMixing`); "ones"
    is Keras' `Ones`; "normal" and "uniform" are zero-mean with variance
    `head_size / shared_key_dim`, which keeps a head's score variance that of
    a standard head of size `head_size`. Any other value (a Keras initializer
    name, config or instance) passes unchanged. Both `tf_keras` and Keras 3
    `initializers.get` accept the result.
    """
    if not isinstance(value, str) or value not in MIXING_INITIALIZERS:
        return value
    if value == "concatenate":
        return concatenate()
    if value == "ones":
        return "ones"
    std = math.sqrt(head_size / shared_key_dim)
    if value == "normal":
        return {"class_name": "RandomNormal", "config": {"mean": 0.0, "stddev": std}}
    limit = math.sqrt(3.0) * std
    return {"class_name": "RandomUniform", "config": {"minval": -limit, "maxval": limit}}


# ------------------------------------------------- shared keys and values
def check_rank3_axes(owner: str, attention_axes: Any) -> None:
    """Raises ValueError unless `attention_axes` is None or axis 1 (rank-3 inputs)."""
    if attention_axes not in (None, 1, (1,), [1]):
        raise ValueError(
            f"{owner} supports attention over axis 1 of rank-3 inputs only; "
            f"got attention_axes={attention_axes!r}."
        )


def check_grouped_args(
    num_heads: Any, num_kv_heads: Any, head_size: Any, attention_axes: Any
) -> tuple[int, int | None]:
    """The checked `(num_kv_heads, head_size)` of a grouped-query layer.

    Args:
      num_heads: The layer's query heads (checked by `check_attention_args`).
      num_kv_heads: The number G of key/value heads; must divide `num_heads`.
      head_size: None or a positive int.
      attention_axes: None or axis 1 (rank-3 inputs only).

    Raises:
      SpecError: (a ValueError) naming a bad `num_kv_heads` or `head_size`.

    Example:

    >>> check_grouped_args(8, 2, None, None)
    (2, None)
    """
    num_heads = check_positive_int("num_heads", num_heads)
    groups = check_num_kv_heads(num_kv_heads, num_heads)
    if head_size is not None:
        head_size = check_positive_int("head_size", head_size)
    check_rank3_axes("GroupedAttention", attention_axes)
    return groups, head_size


def check_latent_args(
    kv_latent_dim: Any, head_size: Any, attention_axes: Any
) -> tuple[int, int | None]:
    """The checked `(kv_latent_dim, head_size)` of a shared-latent layer.

    Example:

    >>> check_latent_args(32, None, None)
    (32, None)
    """
    kv_latent_dim = check_positive_int("kv_latent_dim", kv_latent_dim)
    if head_size is not None:
        head_size = check_positive_int("head_size", head_size)
    check_rank3_axes("LatentAttention", attention_axes)
    return kv_latent_dim, head_size

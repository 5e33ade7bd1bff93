"""Rotary position embeddings and per-head RMSNorm on Keras 3 tensors (`keras.ops` only).

The attention layers rotate their projected queries and keys with these
functions; the frequencies come from `headsize_tf.core.rope` (half-split
convention, keras-hub's and Hugging Face's: dimension j pairs with j + n).
A table of inverse frequencies has one row per rotary head (or one row for
all), and a 0 where a pair does not rotate (cos 1, sin 0: partial RoPE).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops


def rotary_cos_sin(
    inverse: np.ndarray, start: Any, length: Any, factor: float, dtype: Any
) -> tuple[Any, Any]:
    """cos and sin `[length, rows, 2n]` at positions start .. start + length - 1.

    Args:
      inverse: `[rows, n]` float32 inverse frequencies.
      start: The first position (an int or a scalar tensor, possibly traced).
      length: The number of positions.
      factor: Multiplies cos and sin (YaRN's attention factor; 1 otherwise).
      dtype: The dtype of the result (the layer's compute dtype).
    """
    positions = ops.add(
        ops.cast(ops.arange(length), "float32"), ops.cast(ops.convert_to_tensor(start), "float32")
    )
    angles = ops.multiply(positions[:, None, None], ops.convert_to_tensor(inverse)[None])
    angles = ops.concatenate([angles, angles], axis=-1)
    cos, sin = ops.cos(angles), ops.sin(angles)
    if factor != 1.0:
        cos, sin = ops.multiply(cos, factor), ops.multiply(sin, factor)
    return ops.cast(cos, dtype), ops.cast(sin, dtype)


def apply_rotary(x: Any, cos: Any, sin: Any) -> Any:
    """Half-split rotation of `x` `[B, T, H, 2n]` by cos/sin `[T, R, 2n]` (R = 1 or R | H).

    Heads are grouped contiguously: head i uses row i // (H / R).
    """
    heads, rows = x.shape[2], cos.shape[1]
    grouped = rows not in (1, heads)
    if grouped:
        shape = ops.shape(x)
        x = ops.reshape(x, (shape[0], shape[1], rows, heads // rows, shape[3]))
        cos, sin = cos[:, :, None], sin[:, :, None]
    x1, x2 = ops.split(x, 2, axis=-1)
    rotated = ops.concatenate([ops.negative(x2), x1], axis=-1)
    out = ops.add(ops.multiply(x, cos), ops.multiply(rotated, sin))
    if grouped:
        out = ops.reshape(out, shape)
    return out


def rotate(x: Any, inverse: np.ndarray, start: Any, factor: float = 1.0) -> Any:
    """RoPE of `x` `[B, T, H, 2n]` at positions start, start + 1, ... (table `[R, n]`)."""
    cos, sin = rotary_cos_sin(inverse, start, ops.shape(x)[1], factor, x.dtype)
    return apply_rotary(x, cos, sin)


def rms_normalize(x: Any, scale: Any, epsilon: float, offset: float = 0.0) -> Any:
    """RMSNorm over the last axis in float32, times `offset + scale`, back in `x`'s dtype
    (keras-hub's; Gemma 3's query/key norms have offset 1)."""
    dtype = x.dtype
    x = ops.cast(x, "float32")
    variance = ops.mean(ops.square(x), axis=-1, keepdims=True)
    x = ops.multiply(x, ops.rsqrt(ops.add(variance, epsilon)))
    scale = ops.cast(scale, "float32")
    if offset:
        scale = ops.add(scale, offset)
    return ops.cast(ops.multiply(x, scale), dtype)

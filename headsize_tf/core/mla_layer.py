"""`MlaLayer`: one latent-attention (MLA) layer's weights, framework-neutral.

The form in which a Keras 3 `LatentAttention` layer reaches the file writers
(`headsize_tf.data.gguf_mla_writer`: llama.cpp's "deepseek2").
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class MlaLayer:
    """One latent-attention layer's weights in the library's layout (numpy, float32).

    Fields (d width, h heads, r latent, n query/key dimensions against the
    latent, k rotary pairs, v value size):
      query: `[d, h, n + 2k]`, the rotary part last, half-split (pair i is
        dimensions i and k + i).
      latent: `[d, r]`.
      rope_key: `[d, 2k]`, half-split.
      key_up: `[h, r, n]`.
      value_up: `[h, r, v]`.
      output: `[h, v, d]`.
      frequencies: the grid index of each rotary pair (pair i turns at
        `base^(-2 frequencies[i] / grid_size)`).
      grid_size: the head size whose frequency grid `frequencies` index.
      query_scale: the softmax scale.
      norm_scale: the attention input norm's scale `[d]` (bounds the latent).
    """

    query: np.ndarray
    latent: np.ndarray
    rope_key: np.ndarray
    key_up: np.ndarray
    value_up: np.ndarray
    output: np.ndarray
    frequencies: tuple[int, ...]
    grid_size: int
    query_scale: float
    norm_scale: np.ndarray

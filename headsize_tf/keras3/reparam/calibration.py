"""Calibration statistics of a Keras 3 decoder's attention inputs, for data-aware KV conversion.

A conversion that sees data keeps what the layer's outputs need, not what
its weights hold: `calibration_stats` runs a `DecoderLM` or a `CausalLM` over
calibration windows and records, per attention layer,

* the second moment `E[x^T x]` `[width, width]` of the attention inputs
  (the normalised hidden states), which turns the latent's joint SVD into
  one of the key and value activations (`headsize_tf.core.kv_sharing.joint_basis`);
* for rotary layers, per key/value head and frequency pair, the mean norm of
  the query pairs (over the group's query heads) times the mean norm of the
  key pair: MHA2MLA's 2-norm score of which pairs keep RoPE
  (`headsize_tf.core.rope.select_pairs`).

The statistics save to and load from one `.npz` (`save` / `load`), written
atomically, with what they were measured on (source, tokens, seed).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

import keras
import numpy as np

from headsize_tf.core.io import atomic_path


@dataclasses.dataclass
class CalibrationStats:
    """Per attention layer: input second moments and rotary pair scores.

    Attributes:
      covariances: `[width, width]` float64 `E[x^T x]` of each layer's
        attention inputs.
      pair_scores: `[key/value heads, pairs]` 2-norm scores of each rotary
        layer (None for layers without RoPE).
      tokens: Tokens the statistics were measured on.
      source: What text (corpus, part, windows) and seed.
    """

    covariances: list[np.ndarray]
    pair_scores: list[np.ndarray | None]
    tokens: int
    source: str

    def save(self, path: str | os.PathLike) -> pathlib.Path:
        """Writes the statistics to one `.npz` atomically."""
        arrays = {f"covariance_{i}": c for i, c in enumerate(self.covariances)}
        for i, scores in enumerate(self.pair_scores):
            if scores is not None:
                arrays[f"pair_scores_{i}"] = scores
        meta = {"layers": len(self.covariances), "tokens": self.tokens, "source": self.source}
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
        return pathlib.Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> CalibrationStats:
        """Statistics written by `save`."""
        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            layers = meta["layers"]
            return cls(
                [data[f"covariance_{i}"] for i in range(layers)],
                [
                    data[f"pair_scores_{i}"] if f"pair_scores_{i}" in data else None
                    for i in range(layers)
                ],
                int(meta["tokens"]),
                meta["source"],
            )


def _pair_norms(x: np.ndarray) -> np.ndarray:
    """`[..., heads, p]` -> `[..., heads, p / 2]` norms of the half-split pairs."""
    half = x.shape[-1] // 2
    return np.sqrt(x[..., :half] ** 2 + x[..., half:] ** 2)


def calibration_stats(
    lm: Any, windows: np.ndarray, batch_size: int = 4, source: str = ""
) -> CalibrationStats:
    """The attention inputs' second moments and rotary pair scores of `lm` on `windows`.

    Args:
      lm: A `DecoderLM` or `CausalLM` (each block's attention input is taken
        by `lm.attention_inputs`: the model's own forward pass and mask).
      windows: int32 `[n, length]` token windows (every token counts).
      batch_size: Windows per forward pass.
      source: A description of the windows, for reports.

    Example:

    >>> stats = calibration_stats(lm, text.train[:32], source="austen train, 32 x 256")
    """
    blocks = lm.transformer_layers
    width = lm.hidden_dim
    sums = [np.zeros([width, width]) for _ in blocks]
    query_norms: list[Any] = [0.0] * len(blocks)
    key_norms: list[Any] = [0.0] * len(blocks)
    tokens = 0
    for start in range(0, len(windows), batch_size):
        ids = np.asarray(windows[start : start + batch_size], np.int32)
        for i, block, h in lm.attention_inputs(ids):
            flat = np.asarray(keras.ops.convert_to_numpy(h), np.float64).reshape(-1, width)
            sums[i] += flat.T @ flat
            attention = block.attention_layer
            if getattr(attention, "uses_rope", False) and hasattr(attention, "_key_dense"):
                query = attention._query_dense(h)
                key = attention._key_dense(h)
                if attention.query_norm is not None:
                    query = attention._project_query(h)  # Normed (rotation keeps pair norms).
                    key = attention._finish_key(key)
                q = _pair_norms(np.asarray(keras.ops.convert_to_numpy(query), np.float64))
                k = _pair_norms(np.asarray(keras.ops.convert_to_numpy(key), np.float64))
                groups = k.shape[2]
                q = q.reshape(*q.shape[:2], groups, -1, q.shape[-1]).mean(axis=3)
                query_norms[i] = query_norms[i] + q.sum(axis=(0, 1))
                key_norms[i] = key_norms[i] + k.sum(axis=(0, 1))
        tokens += int(ids.size)
    covariances = [total / max(tokens, 1) for total in sums]
    scores = [
        None if isinstance(q, float) else (q / tokens) * (k / tokens)
        for q, k in zip(query_norms, key_norms, strict=True)
    ]
    return CalibrationStats(covariances, scores, tokens, source)

"""Numpy oracles of multi-head, grouped-query and shared-latent attention.

Written from the papers' equations, independently of the library's layers:

* multi-head (Vaswani et al.): `a_i = softmax((x W_Q^i + b_Q^i)(y W_K^i + b_K^i)^T
  / sqrt(p))`, `out = sum_i xi_i (a_i (y W_V^i + b_V^i)) W_O^i + b_O`;
* grouped-query (Ainslie et al.): query head i reads key/value head
  `i // (h / G)`; the value bias `[h, v]` is per query head, added to the
  head's context scaled by the row sum of its attention weights;
* shared latent (DeepSeek-V2's MLA without RoPE): `c = y W_DKV`,
  `k^i = c W_UK^i`, `v^i = c W_UV^i`.

Fully masked rows follow a front's stock layer: "uniform" weights on tf_keras
(the masked logits are all equal) and "zero" weights on Keras 3.
"""

from __future__ import annotations

import numpy as np


def _softmax(logits: np.ndarray, mask: np.ndarray | None, masked_rows: str) -> np.ndarray:
    """Softmax over the last axis; mask [B, 1 or N, T, S] (1 keeps)."""
    if mask is None:
        logits = logits - logits.max(-1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(-1, keepdims=True)
    mask = np.broadcast_to(mask.astype(bool), logits.shape)
    filled = np.where(mask, logits, -np.inf)
    row_max = np.max(np.where(mask, logits, -np.inf), axis=-1, keepdims=True)
    empty = ~mask.any(-1, keepdims=True)
    e = np.where(mask, np.exp(filled - np.where(empty, 0.0, row_max)), 0.0)
    weights = e / np.where(empty, 1.0, e.sum(-1, keepdims=True))
    if masked_rows == "uniform":
        weights = np.where(empty, 1.0 / logits.shape[-1], weights)
    elif masked_rows != "zero":
        raise ValueError(masked_rows)
    return weights


def _expand_mask(mask: np.ndarray | None) -> np.ndarray | None:
    if mask is None:
        return None
    mask = np.asarray(mask)
    return mask[:, None] if mask.ndim == 3 else mask


def mha_logits(w: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Scaled logits [B, N, T, S] of multi-head attention."""
    q = np.einsum("btd,dhp->bthp", x, w["query_kernel"])
    if w.get("query_bias") is not None:
        q = q + w["query_bias"]
    k = np.einsum("bse,ehp->bshp", y, w["key_kernel"])
    if w.get("key_bias") is not None:
        k = k + w["key_bias"]
    return np.einsum("bthp,bshp->bhts", q, k) / np.sqrt(q.shape[-1])


def mha(w: dict, x, y, mask=None, masked_rows: str = "zero") -> np.ndarray:
    """Output [B, T, o] of multi-head attention with gates `head_gates`."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    a = _softmax(mha_logits(w, x, y), _expand_mask(mask), masked_rows)
    v = np.einsum("bse,ehv->bshv", y, w["value_kernel"])
    if w.get("value_bias") is not None:
        v = v + w["value_bias"]
    context = np.einsum("bhts,bshv->bthv", a, v)
    gates = np.ones(w["query_kernel"].shape[1]) if w.get("head_gates") is None else w["head_gates"]
    out = np.einsum("bthv,hvo->bto", context * gates[:, None], w["output_kernel"])
    return out + (0.0 if w.get("output_bias") is None else w["output_bias"])


def _shared_output(w: dict, a: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Gated output; the per-head value bias enters scaled by the row sums of `a`."""
    heads = a.shape[1]
    if w.get("value_bias") is not None:
        row_sums = a.sum(-1)  # [B, N, T]
        context = context + np.einsum("bht,hv->bthv", row_sums, w["value_bias"])
    gates = np.ones(heads) if w.get("head_gates") is None else w["head_gates"]
    out = np.einsum("bthv,hvo->bto", context * gates[:, None], w["output_kernel"])
    return out + (0.0 if w.get("output_bias") is None else w["output_bias"])


def grouped_logits(w: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Scaled logits [B, N, T, S] of grouped-query attention (keys repeated per group)."""
    heads = w["query_kernel"].shape[1]
    groups = w["key_kernel"].shape[1]
    q = np.einsum("btd,dhp->bthp", x, w["query_kernel"])
    if w.get("query_bias") is not None:
        q = q + w["query_bias"]
    k = np.einsum("bse,egp->bsgp", y, w["key_kernel"])
    k = np.repeat(k, heads // groups, axis=2)
    return np.einsum("bthp,bshp->bhts", q, k) / np.sqrt(q.shape[-1])


def grouped(w: dict, x, y, mask=None, masked_rows: str = "zero") -> np.ndarray:
    """Output [B, T, o] of grouped-query attention."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    heads = w["query_kernel"].shape[1]
    groups = w["key_kernel"].shape[1]
    a = _softmax(grouped_logits(w, x, y), _expand_mask(mask), masked_rows)
    v = np.repeat(np.einsum("bse,egv->bsgv", y, w["value_kernel"]), heads // groups, axis=2)
    return _shared_output(w, a, np.einsum("bhts,bshv->bthv", a, v))


def latent_logits(w: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Scaled logits [B, N, T, S] of shared-latent attention."""
    q = np.einsum("btd,dhp->bthp", x, w["query_kernel"])
    if w.get("query_bias") is not None:
        q = q + w["query_bias"]
    c = y @ w["latent_kernel"]
    k = np.einsum("bsr,rhp->bshp", c, w["key_up_kernel"])
    return np.einsum("bthp,bshp->bhts", q, k) / np.sqrt(q.shape[-1])


def latent(w: dict, x, y, mask=None, masked_rows: str = "zero") -> np.ndarray:
    """Output [B, T, o] of shared-latent attention."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    a = _softmax(latent_logits(w, x, y), _expand_mask(mask), masked_rows)
    v = np.einsum("bsr,rhv->bshv", y @ w["latent_kernel"], w["value_up_kernel"])
    return _shared_output(w, a, np.einsum("bhts,bshv->bthv", a, v))


def random_mha_weights(
    rng: np.random.Generator,
    width: int,
    heads: int,
    head_size: int,
    value_dim: int | None = None,
    biases: bool = True,
) -> dict:
    """A multi-head layer's weights in the core layout (scaled like trained ones)."""
    v = value_dim or head_size
    s = 1.0 / np.sqrt(width)
    w = {
        "query_kernel": rng.normal(0, s, (width, heads, head_size)),
        "key_kernel": rng.normal(0, s, (width, heads, head_size)),
        "value_kernel": rng.normal(0, s, (width, heads, v)),
        "output_kernel": rng.normal(0, 1 / np.sqrt(heads * v), (heads, v, width)),
        "head_gates": np.ones(heads),
    }
    if biases:
        w.update(
            query_bias=rng.normal(0, 0.5, (heads, head_size)),
            key_bias=rng.normal(0, 0.5, (heads, head_size)),
            value_bias=rng.normal(0, 0.5, (heads, v)),
            output_bias=rng.normal(0, 0.5, (width,)),
        )
    return w

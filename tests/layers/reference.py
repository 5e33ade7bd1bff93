"""Numpy implementations of the papers' attention equations (test oracles)."""

from __future__ import annotations

import numpy as np


def softmax(
    scores: np.ndarray, mask: np.ndarray | None, fully_masked: str = "uniform"
) -> np.ndarray:
    """Softmax over keys of `scores` [B, h, T, S] where `mask` is True.

    `mask` is [B, T, S] (every head) or per head [B, h, T, S] (or broadcastable to
    either, as stock MHA takes it). A fully masked row gives uniform weights
    ("uniform": tf_keras' MHA, which adds -1e9) or zeros ("zero": Keras 3's MHA).
    """
    scores = scores.astype(np.float64)
    if mask is not None:
        mask = np.asarray(mask, bool)
        if mask.ndim < 4:
            mask = np.expand_dims(mask, -3)
        mask = np.broadcast_to(mask, scores.shape)
        scores = np.where(mask, scores, -1e9)
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    probs = e / e.sum(axis=-1, keepdims=True)
    if mask is not None and fully_masked == "zero":
        probs = np.where(mask.any(axis=-1, keepdims=True), probs, 0.0)
    return probs


def multihead(x, y, w, mask=None, gates=None, key=None, fully_masked="uniform", soft_cap=None):
    """Standard / fixed-head attention: per-head projections of size p.

    `soft_cap`: the scaled scores become `soft_cap * tanh(scores / soft_cap)` (Gemma 2).

    w: dict with wq, wk [d, h, p], wv [d, h, p_v], bq, bk [h, p], bv [h, p_v],
    wo [h, p_v, d_out], bo. `y` is the value and, unless `key` is given, the key.
    Returns (output [B, T, d_out], probs [B, h, T, S]).
    """
    key = y if key is None else key
    p = w["wq"].shape[-1]
    q = np.einsum("btd,dhp->bthp", x, w["wq"]) + w["bq"]
    k = np.einsum("bsd,dhp->bshp", key, w["wk"]) + w["bk"]
    v = np.einsum("bsd,dhp->bshp", y, w["wv"]) + w["bv"]
    scores = np.einsum("bthp,bshp->bhts", q, k) / np.sqrt(p)
    if soft_cap is not None:
        scores = soft_cap * np.tanh(scores / soft_cap)
    probs = softmax(scores, mask, fully_masked)
    context = np.einsum("bhts,bshp->bthp", probs, v)
    if gates is not None:
        context = context * np.asarray(gates)[None, None, :, None]
    out = np.einsum("bthp,hpo->bto", context, w["wo"]) + w["bo"]
    return out, probs


def collaborative(x, y, w, head_size, mask=None, gates=None, key=None, fully_masked="uniform"):
    """Collaborative attention (Cordonnier et al. 2020, Eq. 5 with content bias).

    scores_i = (X W_Q diag(m_i) W_K^T K^T + 1 c_i^T K^T) / sqrt(head_size), K the key
    (`key`, or the value `y` if None). w: wq, wk [d, D], mixing [h, D], content
    [d_key, h], wv [d, h, p], bv, wo [h, p, d_out], bo.
    """
    key = y if key is None else key
    q = x @ w["wq"]
    k = key @ w["wk"]
    scores = np.einsum("btd,hd,bsd->bhts", q, w["mixing"], k)
    scores = scores + np.einsum("bsc,ch->bhs", key, w["content"])[:, :, None, :]
    scores = scores / np.sqrt(head_size)
    probs = softmax(scores, mask, fully_masked)
    v = np.einsum("bsd,dhp->bshp", y, w["wv"]) + w["bv"]
    context = np.einsum("bhts,bshp->bthp", probs, v)
    if gates is not None:
        context = context * np.asarray(gates)[None, None, :, None]
    out = np.einsum("bthp,hpo->bto", context, w["wo"]) + w["bo"]
    return out, probs


def standard_to_collaborative(w: dict) -> dict:
    """Exact rewrite of standard heads as collaborative heads (concatenate mixing)."""
    d, h, p = w["wq"].shape
    mixing = np.repeat(np.eye(h), p, axis=1)
    content = np.einsum("dhp,hp->dh", w["wk"], w["bq"])
    return {
        "wq": w["wq"].reshape(d, h * p),
        "wk": w["wk"].reshape(w["wk"].shape[0], h * p),
        "mixing": mixing,
        "content": content,
        "wv": w["wv"],
        "bv": w["bv"],
        "wo": w["wo"],
        "bo": w["bo"],
    }

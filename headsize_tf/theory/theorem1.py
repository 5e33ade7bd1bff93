"""Theorem 1 of Bhojanapalli et al. (2020): the low-rank bottleneck of a head.

A head with query/key size `d` maps inputs `X` (`d_model x n`) to the
column-stochastic attention matrix

    P = softmax((W_k X)^T (W_q X) / sqrt(d))        (softmax over each column)

* `d >= n` (and `X` of full column rank): *every* positive column-stochastic
  `P` is reachable. Softmax ignores a constant added to a column, so it
  suffices to hit the logits `L = sqrt(d) log P`: with `W_q = I` and
  `W_k^T = X (X^T X)^-1 L (X^T X)^-1 X^T`, `(W_k X)^T W_q X = X^T W_k^T X = L`
  (`construct_heads`).
* `d < n`: the logits `(W_k X)^T W_q X` have rank <= d, and a column shift
  `L + 1 c^T` leaves `C L` unchanged (`C = I - 11^T/n`), so a `P` whose
  centred log-matrix `C log P` has rank > d is unreachable for *any* `X`,
  `W_q`, `W_k` (`required_head_size`). `P = softmax(a I)` needs rank `n - 1`.
* `fit_attention`: gradient descent on `W_q`, `W_k` of head size `d_p < n`
  for random `P`, whose error floor grows as `d_p / n` falls.
"""

from __future__ import annotations

import numpy as np


def column_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=0, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=0, keepdims=True)


def attention_matrix(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray) -> np.ndarray:
    """`softmax((W_k X)^T (W_q X) / sqrt(d))`, `d` = rows of `W_q` (the head size)."""
    d = w_q.shape[0]
    return column_softmax((w_k @ x).T @ (w_q @ x) / np.sqrt(d))


def _check_inputs(x: np.ndarray, p: np.ndarray) -> None:
    d, n = x.shape
    if p.shape != (n, n):
        raise ValueError(f"P must be n x n = {n} x {n} to match X ({d} x {n}); got {p.shape}.")
    if np.any(p <= 0):
        raise ValueError("P must be strictly positive (softmax never outputs zeros).")
    if not np.allclose(p.sum(axis=0), 1.0, atol=1e-8):
        raise ValueError("P must be column-stochastic (every column sums to 1).")


def construct_heads(x: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(W_q, W_k)`, each `d x d`, with `attention_matrix(X, W_q, W_k) == P`.

    Args:
      x: `d x n` inputs with `d >= n` and full column rank.
      p: `n x n` positive column-stochastic target.

    Raises:
      ValueError: `d < n` (see `required_head_size`), `X` rank-deficient, or
        `P` not positive column-stochastic.
    """
    x = np.asarray(x, np.float64)
    p = np.asarray(p, np.float64)
    _check_inputs(x, p)
    d, n = x.shape
    if d < n:
        raise ValueError(
            f"Theorem 1 needs head size d >= n; got d={d} < n={n}. A head this small can only "
            f"reach P whose centred log-matrix has rank <= {d} (see required_head_size)."
        )
    gram = x.T @ x
    if np.linalg.matrix_rank(gram) < n:
        raise ValueError(f"X must have full column rank {n}; its rank is lower.")
    logits = np.sqrt(d) * np.log(p)
    gram_inv = np.linalg.inv(gram)
    w_k = (x @ gram_inv @ logits @ gram_inv @ x.T).T
    return np.eye(d), w_k


def required_head_size(p: np.ndarray, tol: float = 1e-8) -> int:
    """Lower bound on the head size that can produce `P` (rank of `C log P`)."""
    p = np.asarray(p, np.float64)
    n = p.shape[0]
    centred = (np.eye(n) - np.ones([n, n]) / n) @ np.log(p)
    s = np.linalg.svd(centred, compute_uv=False)
    return int(np.sum(s > tol * max(s[0], 1e-300)))


def random_stochastic(n: int, rng: np.random.Generator, concentration: float = 1.0) -> np.ndarray:
    """A random positive column-stochastic `n x n` matrix (Dirichlet columns)."""
    return rng.dirichlet(np.full(n, concentration), size=n).T


def fit_attention(
    x: np.ndarray,
    p: np.ndarray,
    head_size: int,
    steps: int = 2000,
    learning_rate: float = 0.05,
    seed: int = 0,
) -> float:
    """Best total-variation error `max_j TV(P_j, P_hat_j)` reached by GD (Adam).

    Fits `W_q`, `W_k` (`head_size x d`) of one head to `P` by minimising the
    cross-entropy between the columns of `P` and of the head's attention.
    """
    import tensorflow as tf

    _check_inputs(np.asarray(x), np.asarray(p))
    rng = np.random.default_rng(seed)
    d, _ = x.shape
    init = 1.0 / np.sqrt(d)
    w_q = tf.Variable(rng.normal(scale=init, size=(head_size, d)), dtype=tf.float64)
    w_k = tf.Variable(rng.normal(scale=init, size=(head_size, d)), dtype=tf.float64)
    xt = tf.constant(x, tf.float64)
    target = tf.constant(p, tf.float64)
    optimizer = tf.keras.optimizers.Adam(learning_rate)
    optimizer.build([w_q, w_k])  # Slots made now: `step` is then traced once, not twice.

    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            logits = tf.transpose(w_k @ xt) @ (w_q @ xt) / np.sqrt(head_size)
            log_probs = tf.nn.log_softmax(logits, axis=0)
            loss = -tf.reduce_mean(tf.reduce_sum(target * log_probs, axis=0))
        grads = tape.gradient(loss, [w_q, w_k])
        optimizer.apply_gradients(zip(grads, [w_q, w_k], strict=True))
        return tf.exp(log_probs)

    best = np.inf
    for _ in range(steps):
        probs = step().numpy()
        best = min(best, float(np.max(0.5 * np.abs(probs - p).sum(axis=0))))
    return best

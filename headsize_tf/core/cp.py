"""CP (PARAFAC) decomposition of the stacked per-head query-key products.

For an attention layer with per-head query kernels `A_h` (`[d, p]`) and key
kernels `B_h` (`[e, p]`), the tensor to decompose is

    T[h] = A_h B_h^T                      (heads x d x e)

and a rank-`D` CP decomposition `T[h] ~= U diag(M[h]) V^T` gives exactly the
collaborative parametrisation of Cordonnier et al. (2020): shared query
projection `U` (`[d, D]`), shared key projection `V` (`[e, D]`) and mixing
matrix `M` (`[heads, D]`).

`head_products_cp` runs alternating least squares on the *factored* tensor:
every contraction goes through the thin per-head factors, so one sweep costs
`O(heads * (d + e) * p * D)` instead of `O(heads * d * e * D)` and the dense
tensor is never formed. It starts from the leading singular subspaces of the
two width unfoldings (a higher-order SVD, also computed from the factors),
which puts it close to the optimum that tensorly's `parafac` approaches from
`init="svd"` after many dense sweeps. `tensorly_cp` runs tensorly's own
`parafac` on the dense tensor, for comparison and as a fallback.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np


@dataclasses.dataclass
class CPResult:
    """Factors of `T[h] ~= query_factor diag(mixing[h]) key_factor^T`.

    Attributes:
      query_factor: `[d, rank]`, the shared query projection.
      key_factor: `[e, rank]`, the shared key projection.
      mixing: `[heads, rank]`, the mixing matrix (CP weights folded in).
      relative_error: `||T - T_hat||_F / ||T||_F`.
      iterations: ALS sweeps run (0 for an exact construction).
      seconds: Wall time of the decomposition.
      method: "exact", "structured_als" or "tensorly".
    """

    query_factor: np.ndarray
    key_factor: np.ndarray
    mixing: np.ndarray
    relative_error: float
    iterations: int
    seconds: float
    method: str


def _check_kernels(query_kernels: np.ndarray, key_kernels: np.ndarray, rank: int) -> None:
    if query_kernels.ndim != 3 or key_kernels.ndim != 3:
        raise ValueError(
            "query and key kernels must be [heads, width, head_size]; got shapes "
            f"{query_kernels.shape} and {key_kernels.shape}."
        )
    if query_kernels.shape[0] != key_kernels.shape[0] or (
        query_kernels.shape[2] != key_kernels.shape[2]
    ):
        raise ValueError(
            f"query kernels {query_kernels.shape} and key kernels {key_kernels.shape} must agree "
            "in heads (axis 0) and head size (axis 2)."
        )
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or rank <= 0:
        raise ValueError(
            f"`shared_key_dim` (the CP rank) must be a positive integer; got {rank!r}."
        )


def dense_head_products(query_kernels: np.ndarray, key_kernels: np.ndarray) -> np.ndarray:
    """The dense `[heads, d, e]` tensor `A_h B_h^T` (for tests and tensorly)."""
    return np.einsum("hdp,hep->hde", query_kernels, key_kernels)


def structured_error(
    query_kernels: np.ndarray,
    key_kernels: np.ndarray,
    query_factor: np.ndarray,
    key_factor: np.ndarray,
    mixing: np.ndarray,
) -> float:
    """`||T - T_hat|| / ||T||` computed from the factors alone (float64)."""
    a = np.asarray(query_kernels, np.float64)
    b = np.asarray(key_kernels, np.float64)
    u, v, m = (np.asarray(x, np.float64) for x in (query_factor, key_factor, mixing))
    norm_t2 = np.einsum("hpq,hpq->", a.transpose(0, 2, 1) @ a, b.transpose(0, 2, 1) @ b)
    au = np.einsum("hdp,dr->hpr", a, u)
    bv = np.einsum("hep,er->hpr", b, v)
    inner = np.sum(m * np.einsum("hpr,hpr->hr", au, bv))
    approx2 = np.sum((m.T @ m) * (u.T @ u) * (v.T @ v))
    return float(np.sqrt(max(norm_t2 - 2.0 * inner + approx2, 0.0) / norm_t2))


def exact_cp(query_kernels: np.ndarray, key_kernels: np.ndarray, rank: int) -> CPResult:
    """The exact decomposition at `rank >= heads * head_size` (concatenated heads).

    Columns beyond `heads * head_size` are zero (they carry nothing).
    """
    _check_kernels(query_kernels, key_kernels, rank)
    start = time.perf_counter()
    heads, d, p = query_kernels.shape
    e = key_kernels.shape[1]
    if rank < heads * p:
        raise ValueError(
            f"exact_cp needs shared_key_dim >= heads * head_size = {heads * p}; got {rank}."
        )
    u = np.zeros([d, rank], np.float64)
    v = np.zeros([e, rank], np.float64)
    m = np.zeros([heads, rank], np.float64)
    for h in range(heads):
        u[:, h * p : (h + 1) * p] = query_kernels[h]
        v[:, h * p : (h + 1) * p] = key_kernels[h]
        m[h, h * p : (h + 1) * p] = 1.0
    return CPResult(u, v, m, 0.0, 0, time.perf_counter() - start, "exact")


def _leading_subspace(gram: np.ndarray, rank: int, rng: np.random.Generator) -> np.ndarray:
    eigvals, eigvecs = np.linalg.eigh(gram)
    basis = eigvecs[:, ::-1][:, : min(rank, gram.shape[0])]
    if rank > basis.shape[1]:  # Rank above the width: pad with random directions.
        extra = rng.standard_normal([gram.shape[0], rank - basis.shape[1]]) / np.sqrt(gram.shape[0])
        basis = np.concatenate([basis, extra], axis=1)
    return basis


def _solve_gram(numerator: np.ndarray, gram: np.ndarray) -> np.ndarray:
    """`numerator @ inv(gram)` for a symmetric PSD gram, with a tiny ridge."""
    ridge = 1e-12 * max(np.trace(gram) / gram.shape[0], 1e-300)
    gram = gram + ridge * np.eye(gram.shape[0])
    try:
        return np.linalg.solve(gram, numerator.T).T
    except np.linalg.LinAlgError:
        return numerator @ np.linalg.pinv(gram)


def balance_factors(u: np.ndarray, v: np.ndarray, m: np.ndarray):
    """Rescales each rank-one term so its three factor columns have equal norms.

    The product is unchanged; equal norms keep the re-fine-tuning well
    conditioned (no column of W_Q a thousand times larger than its W_K).
    """
    nu = np.linalg.norm(u, axis=0)
    nv = np.linalg.norm(v, axis=0)
    nm = np.linalg.norm(m, axis=0)
    lam = nu * nv * nm
    target = np.cbrt(lam)
    safe = lam > 0
    u = np.where(safe, u * np.divide(target, nu, where=safe, out=np.ones_like(nu)), 0.0)
    v = np.where(safe, v * np.divide(target, nv, where=safe, out=np.ones_like(nv)), 0.0)
    m = np.where(safe, m * np.divide(target, nm, where=safe, out=np.ones_like(nm)), 0.0)
    return u, v, m


def head_products_cp(
    query_kernels: np.ndarray,
    key_kernels: np.ndarray,
    rank: int,
    *,
    max_iter: int = 100,
    tol: float = 1e-5,
    init: str = "svd",
    seed: int = 0,
    linesearch: bool = True,
    compute_dtype: str = "float32",
) -> CPResult:
    """Rank-`rank` CP of `T[h] = A_h B_h^T` by ALS on the factors (float64).

    Args:
      query_kernels: `[heads, d, p]` per-head query kernels `A_h`.
      key_kernels: `[heads, e, p]` per-head key kernels `B_h`.
      rank: The CP rank, i.e. the collaborative `shared_key_dim`.
      max_iter: Maximum ALS sweeps.
      tol: Stop when the relative error improves by less than `tol` (relative).
      init: "svd" (leading singular subspaces of the width unfoldings) or
        "random".
      seed: Seed of the random initialisation (and of padding columns).
      linesearch: Extrapolate the factors along their last update every
        sweep and keep the step when it lowers the error (Bro's line search,
        as tensorly's `parafac(linesearch=True)`); speeds convergence.
      compute_dtype: dtype of the large products with the head factors
        ("float32" is about twice as fast here); Gram matrices, solves and the
        reported error are float64.

    Returns:
      A `CPResult` whose factors are balanced (`balance_factors`).
    """
    _check_kernels(query_kernels, key_kernels, rank)
    if init not in ("svd", "random"):
        raise ValueError(f"init must be 'svd' or 'random'; got {init!r}.")
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    a = np.asarray(query_kernels, np.float64)
    b = np.asarray(key_kernels, np.float64)
    heads, d, _ = a.shape
    e = b.shape[1]
    ata = a.transpose(0, 2, 1) @ a  # [h, p, p]
    btb = b.transpose(0, 2, 1) @ b
    norm_t2 = float(np.einsum("hpq,hpq->", ata, btb))
    if norm_t2 == 0.0:
        zeros = (np.zeros([d, rank]), np.zeros([e, rank]), np.zeros([heads, rank]))
        return CPResult(*zeros, 0.0, 0, time.perf_counter() - start, "structured_als")
    if init == "svd":
        # Mode unfoldings' Gram matrices from the factors: sum_h A_h (B_h^T B_h) A_h^T.
        a_btb = np.einsum("hdp,hpq->hdq", a, btb, optimize=True)
        b_ata = np.einsum("hep,hpq->heq", b, ata, optimize=True)
        u = _leading_subspace(np.einsum("hdq,heq->de", a_btb, a, optimize=True), rank, rng)
        v = _leading_subspace(np.einsum("heq,hfq->ef", b_ata, b, optimize=True), rank, rng)
    else:
        u = rng.standard_normal([d, rank])
        v = rng.standard_normal([e, rank])
    # Heads concatenated along the width's partner axis: [d, heads * p].
    dtype = np.dtype(compute_dtype)
    a_cat = np.ascontiguousarray(a.transpose(1, 0, 2).reshape(d, -1), dtype)
    b_cat = np.ascontiguousarray(b.transpose(1, 0, 2).reshape(e, -1), dtype)

    def project(cat: np.ndarray, factor: np.ndarray) -> np.ndarray:  # -> [h, p, r]
        out = cat.T @ factor.astype(dtype)
        return out.astype(np.float64).reshape(heads, -1, factor.shape[1])

    def contract(cat: np.ndarray, projected: np.ndarray, mix: np.ndarray) -> np.ndarray:
        # sum_h cat_h @ (projected_h * mix_h): one GEMM over the concatenated heads.
        weighted = (projected * mix[:, np.newaxis, :]).reshape(-1, mix.shape[1])
        return (cat @ weighted.astype(dtype)).astype(np.float64)

    au = project(a_cat, u)
    bv = project(b_cat, v)
    m = _solve_gram(np.einsum("hpr,hpr->hr", au, bv), (u.T @ u) * (v.T @ v))

    def error_of(u: np.ndarray, v: np.ndarray, m: np.ndarray) -> tuple[float, tuple]:
        au, bv = project(a_cat, u), project(b_cat, v)
        inner = np.sum(m * np.einsum("hpr,hpr->hr", au, bv))
        approx2 = np.sum((m.T @ m) * (u.T @ u) * (v.T @ v))
        return np.sqrt(max(norm_t2 - 2.0 * inner + approx2, 0.0) / norm_t2), (au, bv)

    error = prev = np.inf
    iterations = 0
    for iterations in range(1, max_iter + 1):
        old = (u, v, m)
        mtm = m.T @ m
        u = _solve_gram(contract(a_cat, bv, m), mtm * (v.T @ v))
        au = project(a_cat, u)
        v = _solve_gram(contract(b_cat, au, m), mtm * (u.T @ u))
        bv = project(b_cat, v)
        uv = (u.T @ u) * (v.T @ v)
        numerator_m = np.einsum("hpr,hpr->hr", au, bv)
        m = _solve_gram(numerator_m, uv)
        inner = np.sum(m * numerator_m)
        approx2 = np.sum((m.T @ m) * uv)
        error = np.sqrt(max(norm_t2 - 2.0 * inner + approx2, 0.0) / norm_t2)
        if linesearch and iterations > 2:
            step = iterations ** (1.0 / 3.0)
            trial = tuple(x + step * (x - x0) for x, x0 in zip((u, v, m), old, strict=True))
            trial_error, (trial_au, trial_bv) = error_of(*trial)
            if trial_error < error:
                (u, v, m), error, au, bv = trial, trial_error, trial_au, trial_bv
        if np.isfinite(prev) and prev - error < tol * max(prev, 1e-30):
            break
        prev = error
    u, v, m = balance_factors(u, v, m)
    error = structured_error(a, b, u, v, m)
    return CPResult(u, v, m, error, iterations, time.perf_counter() - start, "structured_als")


def tensorly_cp(
    query_kernels: np.ndarray, key_kernels: np.ndarray, rank: int, **parafac_kwargs
) -> CPResult:
    """tensorly's `parafac` on the dense tensor (defaults unless overridden)."""
    from headsize_tf.core.extras import require

    tl = require("tensorly", purpose='method="tensorly"')
    parafac = require("tensorly.decomposition").parafac

    _check_kernels(query_kernels, key_kernels, rank)
    start = time.perf_counter()
    tensor = dense_head_products(
        np.asarray(query_kernels, np.float64), np.asarray(key_kernels, np.float64)
    )
    with tl.backend_context("numpy"):
        weights, (m, u, v) = parafac(tl.tensor(tensor), rank=rank, **parafac_kwargs)
        weights, m, u, v = (np.asarray(x, np.float64) for x in (weights, m, u, v))
    m = m * weights[np.newaxis, :]
    seconds = time.perf_counter() - start
    error = structured_error(query_kernels, key_kernels, u, v, m)
    u, v, m = balance_factors(u, v, m)
    iterations = int(parafac_kwargs.get("n_iter_max", 100))
    return CPResult(u, v, m, error, iterations, seconds, "tensorly")

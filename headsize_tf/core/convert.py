"""Standard heads -> collaborative heads, on numpy weights (both fronts use it).

Cordonnier, Loukas and Jaggi (2020), Section 4: for per-head query/key kernels
`W_Q^(h)`, `W_K^(h)` the scores of head `h` are

    (x W_Q^(h) + b_Q^(h)) (y W_K^(h) + b_K^(h))^T / sqrt(p)
      = x W_Q^(h) W_K^(h)^T y^T + b_Q^(h) W_K^(h)^T y^T + (terms constant over keys)

The softmax ignores terms constant over keys, so the key bias drops out and the
query bias becomes the per-head content vector `W_K^(h) b_Q^(h)`. A CP
decomposition of the stacked products `W_Q^(h) W_K^(h)^T` at rank `D` gives the
shared `W_Q`, `W_K` and the mixing matrix. Values, the output projection and
the head gates are copied; the softmax keeps the original `1/sqrt(p)`.

Weights in and out use the core's kernel layout (see `headsize_tf.core`):
role -> array with roles `query_kernel` `[d, h, p]`, `query_bias` `[h, p]`,
`key_kernel` `[e, h, p]`, `key_bias`, `value_kernel` `[e, h, pv]`,
`value_bias`, `output_kernel` `[h, pv, out]`, `output_bias` `[out]` and
`head_gates` `[h]` (absent biases are None); the collaborative result has
`query_kernel` / `key_kernel` `[d, D]`, `mixing` `[h, D]` and `content_bias`
`[e, h]` instead of the per-head query/key tensors.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from headsize_tf.core import cp

METHODS = ("als", "tensorly")


@dataclasses.dataclass
class ConversionReport:
    """What one layer's conversion did.

    Attributes:
      name: The layer's name.
      shared_key_dim: The collaborative `D`.
      relative_error: `||T - T_hat|| / ||T||` of the stacked head products.
      method: "exact", "structured_als" or "tensorly".
      iterations: ALS sweeps.
      seconds: Decomposition wall time.
      params_before: Parameters of the original layer.
      params_after: Parameters of the collaborative layer.
    """

    name: str
    shared_key_dim: int
    relative_error: float
    method: str
    iterations: int
    seconds: float
    params_before: int
    params_after: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_head_weights(weights: Mapping[str, np.ndarray | None], name: str) -> None:
    """Raises unless `weights` are per-head rank-3 kernels with equal key and value sizes."""
    for role in ("query_kernel", "key_kernel", "value_kernel", "output_kernel"):
        if np.ndim(weights[role]) != 3:
            raise ValueError(
                f"Attention layer {name!r} has a {role} of shape {np.shape(weights[role])}; only "
                "attention over axis 1 of rank-3 inputs (kernels [width, heads, head_size]) "
                "converts."
            )
    if weights["query_kernel"].shape[2] != weights["value_kernel"].shape[2]:
        raise ValueError(
            f"Attention layer {name!r} has key size {weights['query_kernel'].shape[2]} and "
            f"value size {weights['value_kernel'].shape[2]}; collaborative heads need them equal."
        )


def check_shared_key_dim(shared_key_dim: Any) -> int:
    if (
        isinstance(shared_key_dim, bool)
        or not isinstance(shared_key_dim, int | np.integer)
        or shared_key_dim <= 0
    ):
        raise ValueError(f"shared_key_dim must be a positive integer; got {shared_key_dim!r}.")
    return int(shared_key_dim)


def collaborative_weights(
    weights: Mapping[str, np.ndarray | None],
    shared_key_dim: int,
    *,
    method: str = "als",
    max_iter: int = 100,
    tol: float = 1e-5,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray | None], cp.CPResult]:
    """The collaborative weights equivalent to (or approximating) `weights`.

    At `shared_key_dim >= heads * head_size` the conversion is exact (the
    concatenated heads, no decomposition); below it a rank-`shared_key_dim` CP.
    """
    if method not in METHODS:
        raise ValueError(f"Unknown CP method {method!r}; expected one of {list(METHODS)}.")
    query_heads = np.transpose(weights["query_kernel"], [1, 0, 2])  # [h, d, p]
    key_heads = np.transpose(weights["key_kernel"], [1, 0, 2])
    heads, _, head_size = query_heads.shape
    if isinstance(shared_key_dim, int) and shared_key_dim >= heads * head_size:
        result = cp.exact_cp(query_heads, key_heads, shared_key_dim)
    elif method == "tensorly":
        result = cp.tensorly_cp(query_heads, key_heads, shared_key_dim, random_state=seed)
    else:
        result = cp.head_products_cp(
            query_heads, key_heads, shared_key_dim, max_iter=max_iter, tol=tol, seed=seed
        )
    content_bias = None
    if weights.get("query_bias") is not None:
        # c_h = W_K^(h) b_Q^(h): [key_width, heads].
        content_bias = np.einsum("ehp,hp->eh", weights["key_kernel"], weights["query_bias"])
    gates = weights.get("head_gates")
    out = {
        "query_kernel": result.query_factor.astype(np.float32),
        "key_kernel": result.key_factor.astype(np.float32),
        "mixing": result.mixing.astype(np.float32),
        "content_bias": None if content_bias is None else content_bias.astype(np.float32),
        "value_kernel": weights["value_kernel"],
        "value_bias": weights.get("value_bias"),
        "output_kernel": weights["output_kernel"],
        "output_bias": weights.get("output_bias"),
        "head_gates": np.ones([heads], np.float32) if gates is None else gates,
    }
    return out, result


def count_weights(
    weights: Mapping[str, np.ndarray | None], skip: tuple[str, ...] = ("head_gates",)
) -> int:
    """Parameters in a role -> array dict (the gates are not parameters)."""
    return int(sum(np.size(v) for k, v in weights.items() if v is not None and k not in skip))


def convert_weights(
    weights: Mapping[str, np.ndarray | None],
    shared_key_dim: int,
    *,
    name: str = "attention",
    method: str = "als",
    max_iter: int = 100,
    tol: float = 1e-5,
    tolerance: float | None = None,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray | None], ConversionReport]:
    """Collaborative weights of one layer's per-head `weights` plus a report.

    Warns when the CP's relative error is above `tolerance`.
    """
    shared_key_dim = check_shared_key_dim(shared_key_dim)
    check_head_weights(weights, name)
    converted, result = collaborative_weights(
        weights, shared_key_dim, method=method, max_iter=max_iter, tol=tol, seed=seed
    )
    report = ConversionReport(
        name=name,
        shared_key_dim=shared_key_dim,
        relative_error=float(result.relative_error),
        method=result.method,
        iterations=result.iterations,
        seconds=float(result.seconds),
        params_before=count_weights(weights),
        params_after=count_weights(converted),
    )
    if tolerance is not None and result.relative_error > tolerance:
        warnings.warn(
            f"CP of layer {name!r} at shared_key_dim={shared_key_dim} reached relative error "
            f"{result.relative_error:.4g}, above the requested tolerance {tolerance:.4g} "
            f"({result.iterations} iterations). Raise shared_key_dim or max_iter.",
            stacklevel=2,
        )
    return converted, report

"""Rewrite trained multi-head attention as collaborative attention.

Cordonnier, Loukas and Jaggi (2020), Section 4: for per-head query/key kernels
`W_Q^(h)`, `W_K^(h)` the scores of head `h` are

    (x W_Q^(h) + b_Q^(h)) (y W_K^(h) + b_K^(h))^T / sqrt(p)
      = x W_Q^(h) W_K^(h)^T y^T + b_Q^(h) W_K^(h)^T y^T + (terms constant over keys)

The softmax ignores terms constant over keys, so the key bias drops out and the
query bias becomes the per-head content vector `W_K^(h) b_Q^(h)`. A CP
decomposition of the stacked products `W_Q^(h) W_K^(h)^T` at rank `D` gives the
shared `W_Q`, `W_K` and the mixing matrix. Values, the output projection and
the head gates are copied; the softmax keeps the original `1/sqrt(p)`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import tf_keras

from headsize_tf.core import cp
from headsize_tf.layers import CollaborativeAttention

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


def _numpy(variable) -> np.ndarray | None:
    return None if variable is None else np.asarray(variable.numpy())


def attention_weights(layer: tf_keras.layers.Layer) -> dict[str, np.ndarray | None]:
    """Per-head numpy weights of a built (non-collaborative) multi-head attention layer.

    Returns a dict with `query_kernel` `[d, h, p]`, `query_bias` `[h, p]`,
    `key_kernel` `[e, h, p]`, `key_bias`, `value_kernel` `[e, h, pv]`,
    `value_bias`, `output_kernel` `[h, pv, out]`, `output_bias` `[out]` and
    `head_gates` `[h]` (biases None when the layer has none).
    """
    if not isinstance(layer, tf_keras.layers.MultiHeadAttention) or isinstance(
        layer, CollaborativeAttention
    ):
        raise ValueError(
            f"Layer {getattr(layer, 'name', layer)!r} ({type(layer).__name__}) is not a standard "
            "multi-head attention layer; expected StandardAttention, FixedHeadAttention or a "
            "tf_keras MultiHeadAttention."
        )
    dense = getattr(layer, "_query_dense", None)
    if dense is None or not dense.weights:
        raise ValueError(f"Attention layer {layer.name!r} is not built; call it on inputs first.")
    weights = {}
    for role in ("query", "key", "value"):
        sub = getattr(layer, f"_{role}_dense")
        weights[f"{role}_kernel"] = _numpy(sub.kernel)
        weights[f"{role}_bias"] = _numpy(getattr(sub, "bias", None))
    weights["output_kernel"] = _numpy(layer._output_dense.kernel)
    weights["output_bias"] = _numpy(getattr(layer._output_dense, "bias", None))
    for role in ("query_kernel", "key_kernel", "value_kernel", "output_kernel"):
        if weights[role].ndim != 3:
            raise ValueError(
                f"Attention layer {layer.name!r} has a {role} of shape {weights[role].shape}; only "
                "attention over axis 1 of rank-3 inputs (kernels [width, heads, head_size]) "
                "converts."
            )
    if weights["query_kernel"].shape[2] != weights["value_kernel"].shape[2]:
        raise ValueError(
            f"Attention layer {layer.name!r} has key size {weights['query_kernel'].shape[2]} and "
            f"value size {weights['value_kernel'].shape[2]}; collaborative heads need them equal."
        )
    gates = getattr(layer, "head_gates", None)
    heads = weights["query_kernel"].shape[1]
    weights["head_gates"] = np.ones([heads], np.float32) if gates is None else _numpy(gates)
    return weights


def collaborative_weights(
    weights: dict[str, np.ndarray | None],
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
    if weights["query_bias"] is not None:
        # c_h = W_K^(h) b_Q^(h): [key_width, heads].
        content_bias = np.einsum("ehp,hp->eh", weights["key_kernel"], weights["query_bias"])
    out = {
        "query_kernel": result.query_factor.astype(np.float32),
        "key_kernel": result.key_factor.astype(np.float32),
        "mixing": result.mixing.astype(np.float32),
        "content_bias": None if content_bias is None else content_bias.astype(np.float32),
        "value_kernel": weights["value_kernel"],
        "value_bias": weights["value_bias"],
        "output_kernel": weights["output_kernel"],
        "output_bias": weights["output_bias"],
        "head_gates": weights["head_gates"],
    }
    return out, result


def assign_collaborative(layer: CollaborativeAttention, weights: dict[str, Any]) -> None:
    """Writes `collaborative_weights` output into a built `CollaborativeAttention`."""
    targets = {
        "query_kernel": layer._query_dense.kernel,
        "key_kernel": layer._key_dense.kernel,
        "mixing": layer.mixing,
        "content_bias": layer.content_bias,
        "value_kernel": layer._value_dense.kernel,
        "value_bias": getattr(layer._value_dense, "bias", None),
        "output_kernel": layer._output_dense.kernel,
        "output_bias": getattr(layer._output_dense, "bias", None),
        "head_gates": layer.head_gates,
    }
    for key, variable in targets.items():
        value = weights.get(key)
        if variable is None or value is None:
            if (variable is None) != (value is None):
                raise ValueError(
                    f"Layer {layer.name!r}: {key} is "
                    f"{'absent' if variable is None else 'present'} in the collaborative layer but "
                    f"{'absent' if value is None else 'present'} in the converted weights "
                    "(use_bias differs?)."
                )
            continue
        if tuple(variable.shape) != tuple(value.shape):
            raise ValueError(
                f"Layer {layer.name!r}: {key} has shape {tuple(variable.shape)}, the converted "
                f"weight {tuple(value.shape)}."
            )
        variable.assign(value.astype(variable.dtype.as_numpy_dtype))


def _count(weights: dict[str, np.ndarray | None], skip: tuple[str, ...] = ("head_gates",)) -> int:
    return int(sum(v.size for k, v in weights.items() if v is not None and k not in skip))


def convert_layer_weights(
    layer: tf_keras.layers.Layer,
    shared_key_dim: int,
    *,
    method: str = "als",
    max_iter: int = 100,
    tol: float = 1e-5,
    tolerance: float | None = None,
    seed: int = 0,
) -> tuple[dict[str, Any], ConversionReport]:
    """Collaborative weights for `layer` plus a report; warns above `tolerance`."""
    if isinstance(shared_key_dim, bool) or not isinstance(shared_key_dim, int | np.integer):
        raise ValueError(f"shared_key_dim must be a positive integer; got {shared_key_dim!r}.")
    if shared_key_dim <= 0:
        raise ValueError(f"shared_key_dim must be a positive integer; got {shared_key_dim!r}.")
    weights = attention_weights(layer)
    converted, result = collaborative_weights(
        weights, int(shared_key_dim), method=method, max_iter=max_iter, tol=tol, seed=seed
    )
    report = ConversionReport(
        name=layer.name,
        shared_key_dim=int(shared_key_dim),
        relative_error=float(result.relative_error),
        method=result.method,
        iterations=result.iterations,
        seconds=float(result.seconds),
        params_before=_count(weights),
        params_after=_count(converted),
    )
    if tolerance is not None and result.relative_error > tolerance:
        warnings.warn(
            f"CP of layer {layer.name!r} at shared_key_dim={shared_key_dim} reached relative error "
            f"{result.relative_error:.4g}, above the requested tolerance {tolerance:.4g} "
            f"({result.iterations} iterations). Raise shared_key_dim or max_iter.",
            stacklevel=2,
        )
    return converted, report


def to_collaborative(
    layer: tf_keras.layers.Layer,
    shared_key_dim: int,
    **kwargs: Any,
) -> tuple[CollaborativeAttention, ConversionReport]:
    """A new built `CollaborativeAttention` equivalent to `layer` (exact at full rank).

    Args:
      layer: A built `StandardAttention`, `FixedHeadAttention` or tf_keras
        `MultiHeadAttention` (attention over axis 1 of rank-3 inputs).
      shared_key_dim: The shared query/key size `D` (CP rank).
      **kwargs: `method` ("als" or "tensorly"), `max_iter`, `tol`,
        `tolerance` (warn above this relative error), `seed`.

    Returns:
      The collaborative layer (same name, dropout, bias use, output size;
      softmax scale 1/sqrt(original head size)) and a `ConversionReport`.
    """
    converted, report = convert_layer_weights(layer, shared_key_dim, **kwargs)
    heads = converted["mixing"].shape[0]
    head_size = converted["value_kernel"].shape[2]
    new = CollaborativeAttention(
        num_heads=heads,
        shared_key_dim=int(shared_key_dim),
        head_size=head_size,
        mixing_initializer="concatenate" if shared_key_dim % heads == 0 else "uniform",
        dropout=layer._dropout,
        use_bias=layer._use_bias,
        output_shape=layer._output_shape,
        name=layer.name,
        dtype=layer.dtype_policy,
    )
    new._build_from_signature(layer._query_shape, layer._value_shape, layer._key_shape)
    assign_collaborative(new, converted)
    return new, report

"""Multi-head attention -> shared key/value heads, on numpy weights (both fronts use it).

A decoder caches every layer's keys and values. Sharing them between heads
shrinks the cache; these functions turn a trained multi-head layer into the
two forms deployed today, training-free (uptraining then recovers quality):

* **Grouped-query attention** (Ainslie et al., 2023): the `h` query heads fall
  into `G` contiguous groups of `h / G`, each sharing one key/value head.
  - `method="mean"`: Ainslie's recipe, the group's key and value kernels are
    the mean of its heads' kernels.
  - `method="svd"`: per group, the shared key kernel is the best rank-`p`
    subspace of the group's *attention operators* `W_Q^(i) W_K^(i)T` (query
    bias included) and the shared value kernel the best rank-`v` subspace of
    the group's *output operators* `W_V^(i) W_O^(i)`; each query kernel and
    each output kernel absorbs its head's coordinates in that subspace, so
    the projection error is the only error, and it is the smallest a shared
    `p`-dimensional key (`v`-dimensional value) can have for those operators
    (Eckart-Young). With one head per group it is exact.
  - `method="svd_values"`: the keys mean-pooled (a rotary model's keys allow
    no re-basing, and the mean is the shared key nearest the group's keys in
    any input metric), the values by the output-operator subspace as in
    "svd". With `covariance` (the inputs' second moment, from calibration
    text) both SVDs are of the activations instead of the weights.
* **A shared latent key/value** (DeepSeek-V2's MLA): one `r`-sized
  latent per position, `c = x W_DKV`, with per-head up-projections
  `k^(i) = c W_UK^(i)`, `v^(i) = c W_UV^(i)`. MHA2MLA's joint SVD of the
  stacked key and value kernels `[W_K, W_V]` gives `W_DKV` (its top-`r` left
  singular vectors) and the up-projections (the kernels in that basis); the
  keys are first scaled to the values' Frobenius norm (TransMLA's balancing),
  so neither dominates the shared subspace. At `r = rank([W_K, W_V])` it is
  exact. A rotary model (RoPE) converts with `rope_latent_weights`: the key
  dimensions that keep their rotation become decoupled rotary keys, cached
  beside the latent (MHA2MLA's partial RoPE; exact when every pair is kept).

Grouped sources (fewer key/value heads than query heads, Llama's GQA)
convert too: `per_query_head` repeats their key/value heads, which changes
nothing they compute.

Biases, exactly:

* The key bias is dropped: `q . (k_s + b)` shifts all of a query's scores by
  the same `q . b`, which the softmax ignores.
* The value bias stays per query head, `[h, v]`, added to each head's context
  after attention: head `i` gets `(sum_s a_is) b_V^(i)`, exactly what stock
  attention computes (`sum_s a_is` is 1 except on fully masked rows, 0 on
  Keras 3 and 1 on tf_keras as in the stock layers, and under attention
  dropout). It is the value bias folded into the output per head,
  `b_V^(i) W_O^(i)`, scaled by the head's gate, so gates, dropout and head
  removal stay exact. (With `method="svd"` the bias is re-expressed for the
  new output kernel by least squares; exact with one head per group.)
* The query bias is kept (with `method="svd"` it moves into the new basis).

Weights in use the core's role -> array layout (`headsize_tf.core.convert`):
`query_kernel` `[d, h, p]`, `query_bias` `[h, p]`, `key_kernel` `[e, h, p]`,
`key_bias`, `value_kernel` `[e, h, v]`, `value_bias` `[h, v]`,
`output_kernel` `[h, v, o]`, `output_bias` `[o]`, `head_gates` `[h]`. Out:

* grouped: `query_kernel`, `query_bias`, `key_kernel` `[e, G, p]`,
  `value_kernel` `[e, G, v]`, `value_bias` `[h, v]` (per query head),
  `output_kernel`, `output_bias`, `head_gates`;
* latent: `query_kernel`, `query_bias`, `latent_kernel` `[e, r]`,
  `key_up_kernel` `[r, h, p]`, `value_up_kernel` `[r, h, v]`, `value_bias`
  `[h, v]`, `output_kernel`, `output_bias`, `head_gates`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from headsize_tf.core.spec import SpecError, check_positive_int

GROUPED_METHODS = ("mean", "svd", "svd_values")

Weights = Mapping[str, np.ndarray | None]


@dataclasses.dataclass(frozen=True)
class SharingReport:
    """What one layer's conversion kept.

    Attributes:
      kind: "grouped" or "latent".
      method: "mean" or "svd" (grouped), "joint_svd" (latent).
      size: G (grouped) or r (latent).
      key_energy: Fraction of the key-side operators' squared Frobenius norm
        the shared keys keep (1.0: exact).
      value_energy: The same for the value side.
    """

    kind: str
    method: str
    size: int
    key_energy: float
    value_energy: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_rank3(weights: Weights, roles: tuple[str, ...], name: str) -> None:
    for role in roles:
        if np.ndim(weights[role]) != 3:
            raise ValueError(
                f"Attention layer {name!r} has a {role} of shape {np.shape(weights[role])}; only "
                "per-head kernels [width, heads, head_size] (attention over axis 1) convert."
            )


def check_num_kv_heads(num_kv_heads: Any, num_heads: int) -> int:
    """`num_kv_heads` as an int that divides `num_heads`, or a `SpecError` naming it."""
    groups = check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % groups:
        raise SpecError(
            f"num_kv_heads={groups} does not divide num_heads={num_heads}; grouped attention "
            "needs groups of equal size (a divisor of num_heads)."
        )
    return groups


def latent_full_rank(weights: Weights, split: bool = False) -> int:
    """The largest useful latent size: min(e, h (p + v)), where the joint SVD is exact
    (split SVD: min(e, h p) + min(e, h v))."""
    e, h, p = np.shape(weights["key_kernel"])
    v = np.shape(weights["value_kernel"])[2]
    return int(latent_rank_limit(h * p, h * v, e, split))


def check_latent_rank(kv_latent_dim: Any, full_rank: int) -> int:
    """A latent size in [1, full_rank], or a `SpecError` naming it and the range."""
    if (
        isinstance(kv_latent_dim, bool)
        or not isinstance(kv_latent_dim, int | np.integer)
        or not 1 <= kv_latent_dim <= full_rank
    ):
        raise SpecError(
            f"kv_latent_dim={kv_latent_dim!r} is outside [1, {full_rank}]: a latent rank is a "
            f"positive int at most the rank where the conversion is exact (joint SVD: "
            f"min(width, heads * (key size + value size)); split SVD: the keys' and the values' "
            f"own full ranks added), here {full_rank}."
        )
    return int(kv_latent_dim)


def _value_bias(weights: Weights) -> np.ndarray | None:
    value_bias = weights.get("value_bias")
    return None if value_bias is None else np.asarray(value_bias, np.float32)


def _refit_value_bias(value_bias: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """b' with b' new_i ~= b old_i per head (least squares; exact where possible)."""
    target = np.einsum("hv,hvo->ho", value_bias, old)
    return np.stack(
        [np.linalg.lstsq(new[i].T, target[i], rcond=None)[0] for i in range(len(target))]
    )


def _gates(weights: Weights, heads: int) -> np.ndarray:
    gates = weights.get("head_gates")
    return np.ones([heads], np.float32) if gates is None else np.asarray(gates, np.float32)


def _top_subspace(matrix: np.ndarray, rank: int) -> tuple[np.ndarray, float]:
    """Top-`rank` left singular vectors of `matrix` and the energy fraction they keep."""
    u, s, _ = np.linalg.svd(matrix.astype(np.float64), full_matrices=False)
    energy = float(np.sum(s[:rank] ** 2) / max(np.sum(s**2), 1e-300))
    basis = u[:, :rank]
    if basis.shape[1] < rank:  # Fewer singular vectors than asked: pad orthonormally.
        pad = np.linalg.qr(np.concatenate([basis, np.eye(matrix.shape[0])], axis=1))[0]
        basis = pad[:, :rank]
    return basis, min(energy, 1.0)


def _whitener(covariance: np.ndarray, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """(S, S^-1) with S S = the covariance (plus eps x its mean eigenvalue on the diagonal)."""
    covariance = np.asarray(covariance, np.float64)
    values, vectors = np.linalg.eigh((covariance + covariance.T) / 2)
    values = np.maximum(values, 0) + eps * max(float(np.mean(values)), 1e-12)
    root = np.sqrt(values)
    return (vectors * root) @ vectors.T, (vectors / root) @ vectors.T


def joint_basis(
    flat_key: np.ndarray,
    flat_value: np.ndarray,
    rank: int,
    *,
    balance: bool = True,
    covariance: np.ndarray | None = None,
    split: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The shared latent of keys and values: down-projection, up-projections and spectrum.

    Finds `down` `[e, r]` and up-projections with `down @ key_up ~= flat_key`
    and `down @ value_up ~= flat_value`, best in the least-squares sense of
    the weights (`covariance` None: MHA2MLA's joint SVD) or of the
    activations `x W` over inputs of second moment `covariance` `[e, e]`
    (a whitened SVD: the error the layer's outputs see, as CARE and
    TransMLA's PCA of activations measure it). Exact at full rank.

    Args:
      flat_key, flat_value: `[e, key columns]`, `[e, value columns]` (key
        columns may be 0).
      rank: r.
      balance: Scale the keys to the values' norm (in the same metric) before
        the SVD (TransMLA's balancing of K against V).
      covariance: The inputs' second-moment matrix `E[x^T x]`, or None.
      split: MHA2MLA's split SVD instead of the joint one: the keys and the
        values each get their own SVD and their own part of the latent, in
        proportion to their full ranks (`split_ranks`; half each when keys and
        values are equally wide). Exact when r reaches both full ranks
        (`latent_rank_limit`).

    Returns:
      (down `[e, r]`, key_up `[r, key columns]`, value_up `[r, value columns]`,
      the singular values of the balanced stacked matrix (split: both SVDs'
      together), descending).
    """
    if covariance is None:
        root = inverse = np.eye(flat_key.shape[0])
    else:
        root, inverse = _whitener(covariance)
    key, value = root @ flat_key, root @ flat_value
    scale = 1.0
    if balance and key.size:
        key_norm = np.linalg.norm(key)
        scale = np.linalg.norm(value) / key_norm if key_norm > 0 else 1.0
    if split:
        key_rank, value_rank = split_ranks(key.shape, value.shape, rank)
        key_basis, key_singular = _left_basis(key, key_rank)
        value_basis, value_singular = _left_basis(value, value_rank)
        basis = np.hstack([key_basis, value_basis])
        key_up = np.vstack([key_basis.T @ key, np.zeros([value_rank, key.shape[1]])])
        value_up = np.vstack([np.zeros([key_rank, value.shape[1]]), value_basis.T @ value])
        singular = np.sort(np.concatenate([scale * key_singular, value_singular]))[::-1]
        return inverse @ basis, key_up, value_up, singular
    basis, singular = _left_basis(np.hstack([scale * key, value]), rank)
    return inverse @ basis, basis.T @ key, basis.T @ value, singular


def _left_basis(matrix: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-`rank` left singular vectors of `matrix` `[e, n]` (padded orthonormally when it
    has fewer) and all its singular values."""
    if matrix.shape[1] == 0:
        u, singular = np.zeros([matrix.shape[0], 0]), np.zeros([0])
    else:
        u, singular, _ = np.linalg.svd(matrix, full_matrices=False)
    basis = u[:, :rank]
    if basis.shape[1] < rank:  # Fewer directions than asked: pad orthonormally.
        pad = np.linalg.qr(np.concatenate([basis, np.eye(matrix.shape[0])], axis=1))[0]
        basis = pad[:, :rank]
    return basis, singular


def split_ranks(
    key_shape: tuple[int, ...], value_shape: tuple[int, ...], rank: int
) -> tuple[int, int]:
    """The split SVD's latent sizes (keys, values) out of `rank`: in proportion to their full
    ranks min(e, columns), each at most its full rank.

    >>> split_ranks((64, 48), (64, 64), 64)
    (27, 37)
    """
    e = key_shape[0]
    key_full, value_full = min(e, key_shape[1]), min(e, value_shape[1])
    key_rank = min(key_full, int(round(rank * key_full / max(key_full + value_full, 1))))
    value_rank = min(value_full, rank - key_rank)
    return rank - value_rank, value_rank


def latent_rank_limit(key_columns: int, value_columns: int, width: int, split: bool) -> int:
    """The latent size at which the conversion is exact: min(e, key + value columns) for the
    joint SVD, min(e, key columns) + min(e, value columns) for the split one."""
    if split:
        return min(width, key_columns) + min(width, value_columns)
    return min(width, key_columns + value_columns)


def allocate_ranks(
    spectra: list[np.ndarray], total: int, minimum: int = 1, maximum: list[int] | None = None
) -> list[int]:
    """Latent sizes per layer summing to `total`, by spectral energy.

    The sizes keep the largest summed share of each layer's energy: a layer
    of size r keeps its r largest `s_i^2 / sum s^2`, so layers whose keys and
    values are low-rank give up dimensions to layers that need them (exact,
    through `allocate_by_cost`). Every layer gets at least `minimum` and at
    most `maximum[l]` (default: its number of singular values).

    Example:

    >>> allocate_ranks([np.array([4.0, 1.0]), np.array([2.0, 2.0])], 3)
    [1, 2]
    """
    if minimum < 0:
        raise SpecError(f"minimum must be a latent size >= 0, got {minimum}.")
    limits = maximum or [len(s) for s in spectra]
    lows = [min(minimum, limit) for limit in limits]
    if total < sum(lows) or total > sum(limits):
        raise SpecError(
            f"A total latent budget of {total} cannot be split over {len(spectra)} layers with "
            f"{minimum} to their full ranks ({sum(limits)} in all) each."
        )
    costs = []
    for values, low, limit in zip(spectra, lows, limits, strict=True):
        energy = np.sort(np.asarray(values, np.float64) ** 2)[::-1]
        shares = np.zeros(limit)
        shares[: min(limit, len(energy))] = (energy / max(energy.sum(), 1e-300))[:limit]
        cost = -np.concatenate([[0.0], np.cumsum(shares)])  # cost[r]: minus the share r keep
        cost[:low] = np.inf
        costs.append(cost)
    return allocate_by_cost(costs, total)


def allocate_by_cost(costs: list[np.ndarray], total: int) -> list[int]:
    """Sizes per layer summing to `total` at the least summed cost (exact).

    `costs[l][r]` is what layer l costs at size r (r = 0 .. its largest;
    `inf` where a size is not allowed), e.g. the estimated loss of a latent
    of r dimensions (`keras3.reparam.kv_compress.allocate_by_sensitivity`).
    Costs need not be convex in r (measured ones are not), so a greedy is not
    enough: a dynamic programme over layers and totals finds
    `argmin sum_l costs[l][r_l]` with `sum_l r_l = total`.

    Example:

    >>> inf = np.inf
    >>> allocate_by_cost([np.array([inf, 5.1, 5.0, 0.0]), np.array([inf, 2.0, 0.0])], 3)
    [1, 2]
    >>> allocate_by_cost([np.array([inf, 5.1, 5.0, 0.0]), np.array([inf, 2.0, 0.0])], 4)
    [3, 1]
    """
    costs = [np.asarray(c, np.float64).reshape(-1) for c in costs]
    if not costs or any(len(c) == 0 or np.isnan(c).any() or (c == -np.inf).any() for c in costs):
        raise SpecError("Allocation costs must be one array per layer, finite or +inf.")
    lows = [int(np.argmax(np.isfinite(c))) if np.isfinite(c).any() else len(c) for c in costs]
    highs = [len(c) - 1 - int(np.argmax(np.isfinite(c[::-1]))) for c in costs]
    if any(low >= len(c) for low, c in zip(lows, costs, strict=True)) or not (
        sum(lows) <= total <= sum(highs)
    ):
        raise SpecError(
            f"A total of {total} cannot be split over {len(costs)} layers whose allowed sizes "
            f"sum to {sum(lows)} .. {sum(highs)}."
        )
    # best[t]: the least cost of the layers so far at total t; choices[l][t]: layer l's size.
    best = np.zeros(1)
    choices = []
    for cost in costs:
        merged = np.full(len(best) + len(cost) - 1, np.inf)
        choice = np.zeros(len(merged), np.int64)
        for size in np.flatnonzero(np.isfinite(cost)):
            candidate = best + cost[size]
            window = merged[size : size + len(best)]
            better = candidate < window
            window[better] = candidate[better]
            choice[size : size + len(best)][better] = size
        best = merged
        choices.append(choice)
    sizes = []
    for choice in reversed(choices):
        sizes.append(int(choice[total]))
        total -= sizes[-1]
    return sizes[::-1]


def grouped_weights(
    weights: Weights,
    num_kv_heads: int,
    *,
    method: str = "mean",
    rope: bool = False,
    covariance: np.ndarray | None = None,
    name: str = "attention",
) -> tuple[dict[str, np.ndarray | None], SharingReport]:
    """The grouped-query weights of a multi-head layer.

    Args:
      weights: The layer's weights in the core layout (module docstring).
      num_kv_heads: G, the number of key/value heads; must divide the heads.
        Query head i belongs to group `i // (h / G)`.
      method: "mean" (Ainslie et al.'s mean pooling), "svd" (the per-group
        operator subspaces of the module docstring) or "svd_values" (keys
        mean-pooled, values by their operator subspace).
      rope: The layer rotates its queries and keys (RoPE). Only maps that
        commute with the rotation are allowed on the keys: "mean" and
        "svd_values" (the group's keys and key biases averaged); "svd"
        re-bases key dimensions and is refused.
      covariance: The layer inputs' second moment `[e, e]` (calibration): the
        subspaces are those of the operators applied to such inputs (a
        whitened SVD; `x W` is what the layer sees), not of the weights.
        Mean pooling ignores it (the mean is the nearest shared key or value
        in every input metric).
      name: The layer's name, for error messages.

    Returns:
      (grouped weights, report). With G = h both methods give a layer equal
      to the original (to float32 rounding).

    Example:

    >>> rng = np.random.default_rng(0)
    >>> w = {"query_kernel": rng.normal(size=(16, 4, 8)), "key_kernel": rng.normal(size=(16, 4, 8)),
    ...      "value_kernel": rng.normal(size=(16, 4, 8)), "output_kernel": rng.normal(size=(4, 8, 16))}
    >>> grouped_weights(w, 2)[0]["key_kernel"].shape
    (16, 2, 8)
    """
    if method not in GROUPED_METHODS:
        raise ValueError(f"Unknown grouping method {method!r}; expected one of {GROUPED_METHODS}.")
    if rope and method == "svd":
        raise SpecError(
            "method='svd' re-bases each group's key dimensions, but RoPE rotates fixed pairs of "
            "them by position, so the re-based keys would rotate wrongly; use method='mean' or "
            "'svd_values' on a rotary model."
        )
    weights = per_query_head(weights)
    _check_rank3(weights, ("query_kernel", "key_kernel", "value_kernel", "output_kernel"), name)
    query = np.asarray(weights["query_kernel"], np.float64)
    key = np.asarray(weights["key_kernel"], np.float64)
    value = np.asarray(weights["value_kernel"], np.float64)
    output = np.asarray(weights["output_kernel"], np.float64)
    heads = query.shape[1]
    groups = check_num_kv_heads(num_kv_heads, heads)
    size = heads // groups
    query_bias = weights.get("query_bias")
    query_bias = None if query_bias is None else np.asarray(query_bias, np.float64)
    new_query, new_output = query.copy(), output.copy()
    new_query_bias = None if query_bias is None else query_bias.copy()
    # S with S S = the inputs' second moment: an operator's error on such inputs is that of
    # S times the operator (its key/value input side); S = I measures the weights.
    if covariance is None or method == "mean":
        root = inverse = np.eye(key.shape[0])
    else:
        root, inverse = _whitener(covariance)
    # A head counts by its gate (a gated-off head needs none of the shared dimensions; a group
    # gated off entirely keeps its heads' own subspace); the kernels absorb the head's own,
    # ungated operator, so one head per group stays exact whatever its gate.
    all_gates = np.abs(_gates(weights, heads).astype(np.float64))
    keys, values, key_energy, value_energy = [], [], [], []
    for g in range(groups):
        members = range(g * size, (g + 1) * size)
        gates = {i: all_gates[i] for i in members}
        if max(gates.values()) == 0:
            gates = dict.fromkeys(members, 1.0)
        if method in ("mean", "svd_values"):
            keys.append(key[:, list(members)].mean(axis=1))
        if method == "mean":
            values.append(value[:, list(members)].mean(axis=1))
            continue
        if method == "svd":
            # Keys: the subspace of the group's attention operators [W_Q; b_Q] W_K^T.
            operators = []
            for i in members:
                rows = (
                    query[:, i] if query_bias is None else np.vstack([query[:, i], query_bias[i]])
                )
                operators.append(gates[i] * root @ key[:, i] @ rows.T)  # [e, d(+1)]
            basis, energy = _top_subspace(np.hstack(operators), key.shape[2])  # [e, p]
            keys.append(inverse @ basis)
            key_energy.append(energy)
            for i in members:
                absorbed = key[:, i].T @ root @ basis  # [p, p]: head i's keys in the shared basis.
                new_query[:, i] = query[:, i] @ absorbed
                if query_bias is not None:
                    new_query_bias[i] = query_bias[i] @ absorbed
        # Values: the subspace of the group's output operators W_V W_O.
        products = [root @ value[:, i] @ output[i] for i in members]  # [e, o] each
        gated = [gates[i] * products[i - members.start] for i in members]
        basis, energy = _top_subspace(np.hstack(gated), value.shape[2])  # [e, v]
        values.append(inverse @ basis)
        value_energy.append(energy)
        for i in members:
            new_output[i] = basis.T @ products[i - members.start]
    f32 = np.float32
    value_bias = _value_bias(weights)
    if value_bias is not None and method != "mean":
        value_bias = _refit_value_bias(value_bias.astype(np.float64), output, new_output)
    key_bias = weights.get("key_bias")
    if rope and key_bias is not None:  # Rotated, a key bias does not cancel: pooled with the keys.
        key_bias = np.asarray(key_bias, np.float64).reshape(groups, size, -1).mean(axis=1)
    else:
        key_bias = None
    out = {
        "query_kernel": new_query.astype(f32),
        "query_bias": None if new_query_bias is None else new_query_bias.astype(f32),
        "key_kernel": np.stack(keys, axis=1).astype(f32),
        "value_kernel": np.stack(values, axis=1).astype(f32),
        "value_bias": None if value_bias is None else value_bias.astype(f32),
        "output_kernel": new_output.astype(f32),
        "output_bias": weights.get("output_bias"),
        "head_gates": _gates(weights, heads),
    }
    if key_bias is not None:
        out["key_bias"] = key_bias.astype(f32)
    if method != "svd":
        key_energy = [_kept_energy(root @ key.reshape(key.shape[0], -1), size, key.shape[2])]
    if method == "mean":
        value_energy = [
            _kept_energy(root @ value.reshape(value.shape[0], -1), size, value.shape[2])
        ]
    report = SharingReport(
        "grouped", method, groups, float(np.mean(key_energy)), float(np.mean(value_energy))
    )
    return out, report


def _kept_energy(flat: np.ndarray, size: int, columns: int) -> float:
    """1 - ||W - repeat(mean W)||^2 / ||W||^2 for mean pooling of `flat` `[e, h x columns]`
    (per-head kernels side by side, in the metric they were given in; 1.0 when exact)."""
    per_head = flat.reshape(flat.shape[0], -1, size, columns)
    pooled = per_head.mean(axis=2, keepdims=True)
    error = np.sum((per_head - pooled) ** 2) / max(np.sum(per_head**2), 1e-300)
    return float(1.0 - error)


def pooling_error(
    weights: Weights, num_kv_heads: int, covariance: np.ndarray | None = None
) -> float:
    """How much mean pooling to `num_kv_heads` key/value heads moves a layer's keys and values.

    The mean over keys and values of `||S (W - repeat(pooled W))||^2 / ||S W||^2`,
    with `S` the square root of the inputs' second moment (`covariance`: the
    relative error of the key and value *activations*) or the identity (of
    the weights). 0 when pooling changes nothing (G equal to the source's
    key/value heads); what a per-layer choice of G (`allocate_kv_heads`)
    weighs against the cache.

    Example:

    >>> w = {"query_kernel": np.ones((4, 2, 2)), "key_kernel": np.ones((4, 2, 2)),
    ...      "value_kernel": np.ones((4, 2, 2)), "output_kernel": np.ones((2, 2, 4))}
    >>> pooling_error(w, 1)
    0.0
    """
    weights = per_query_head(weights)
    heads = np.shape(weights["query_kernel"])[1]
    size = heads // check_num_kv_heads(num_kv_heads, heads)
    if covariance is None:
        root = np.eye(np.shape(weights["key_kernel"])[0])
    else:
        root = _whitener(covariance)[0]
    errors = []
    for role in ("key_kernel", "value_kernel"):
        kernel = np.asarray(weights[role], np.float64)
        e, _, columns = kernel.shape
        pooled = kernel.reshape(e, -1, size, columns).mean(axis=2)
        difference = root @ (kernel - np.repeat(pooled, size, axis=1)).reshape(e, -1)
        total = np.sum((root @ kernel.reshape(e, -1)) ** 2)
        errors.append(float(np.sum(difference**2) / max(total, 1e-300)))
    return float(np.mean(errors))


def allocate_kv_heads(
    errors: list[Mapping[int, float]], values_per_head: list[int], budget: int
) -> list[int]:
    """Key/value heads per layer within a cache budget, by measured error (a greedy).

    Every layer starts at its fewest heads; each step moves the layer whose
    next larger choice removes the most error per added cache value, while the
    total stays within `budget`. This is how grouped K/V reaches budgets
    between its uniform choices (SmolLM2: 1 or 3 key/value heads, 33% or
    100%).

    Args:
      errors: Per layer, {G: error} for each allowed G (`pooling_error`).
      values_per_head: Per layer, the cache values one key/value head adds per
        token (key size + value size).
      budget: The total cache values per token over all layers.

    Returns:
      G per layer.

    Example:

    >>> allocate_kv_heads([{1: 0.5, 3: 0.0}, {1: 0.1, 3: 0.0}], [128, 128], 512)
    [3, 1]
    """
    options = [sorted(layer) for layer in errors]
    heads = [layer[0] for layer in options]
    cost = sum(g * v for g, v in zip(heads, values_per_head, strict=True))
    if cost > budget:
        raise SpecError(
            f"A cache budget of {budget} values per token is below the fewest key/value heads' "
            f"own {cost}."
        )
    while True:
        best = None
        for layer, choices in enumerate(options):
            index = choices.index(heads[layer])
            if index + 1 == len(choices):
                continue
            bigger = choices[index + 1]
            added = (bigger - heads[layer]) * values_per_head[layer]
            if cost + added > budget:
                continue
            gain = (errors[layer][heads[layer]] - errors[layer][bigger]) / added
            if best is None or gain > best[0]:
                best = (gain, layer, bigger, added)
        if best is None:
            return heads
        _, layer, heads[layer], added = best
        cost += added


def latent_weights(
    weights: Weights,
    kv_latent_dim: int,
    *,
    balance: bool = True,
    covariance: np.ndarray | None = None,
    split: bool = False,
    name: str = "attention",
) -> tuple[dict[str, np.ndarray | None], SharingReport]:
    """The shared-latent weights of a multi-head layer (joint SVD of keys and values).

    Args:
      weights: The layer's weights in the core layout; key and value inputs
        must have the same width (the latent is computed from one input).
      kv_latent_dim: r, the latent size, in [1, `latent_full_rank(weights)`].
      balance: Scale the keys to the values' Frobenius norm before the SVD
        (TransMLA); False is MHA2MLA's plain joint SVD.
      covariance: The layer inputs' second moment `[e, e]` (calibration):
        the SVD of the activations instead of the weights (`joint_basis`).
      split: Separate SVDs of the keys and the values (MHA2MLA's split
        variant, `joint_basis`) instead of one joint SVD.
      name: The layer's name, for error messages.

    Returns:
      (latent weights, report). At full rank the layer equals the original
      (to float32 rounding).

    Example:

    >>> rng = np.random.default_rng(0)
    >>> w = {"query_kernel": rng.normal(size=(16, 4, 8)), "key_kernel": rng.normal(size=(16, 4, 8)),
    ...      "value_kernel": rng.normal(size=(16, 4, 8)), "output_kernel": rng.normal(size=(4, 8, 16))}
    >>> latent_weights(w, 8)[0]["latent_kernel"].shape
    (16, 8)
    """
    _check_rank3(weights, ("query_kernel", "key_kernel", "value_kernel", "output_kernel"), name)
    weights = per_query_head(weights)
    key = np.asarray(weights["key_kernel"], np.float64)
    value = np.asarray(weights["value_kernel"], np.float64)
    e, heads, p = key.shape
    if value.shape[0] != e:
        raise ValueError(
            f"Attention layer {name!r} has key width {e} and value width {value.shape[0]}; a "
            "shared latent is computed from one input, so they must be equal."
        )
    rank = check_latent_rank(kv_latent_dim, latent_full_rank(weights, split))
    flat_key = key.reshape(e, -1)
    flat_value = value.reshape(e, -1)
    basis, key_up, value_up, _ = joint_basis(
        flat_key, flat_value, rank, balance=balance, covariance=covariance, split=split
    )
    f32 = np.float32
    out = {
        "query_kernel": np.asarray(weights["query_kernel"], f32),
        "query_bias": weights.get("query_bias"),
        "latent_kernel": basis.astype(f32),
        "key_up_kernel": key_up.reshape(rank, heads, p).astype(f32),
        "value_up_kernel": value_up.reshape(rank, heads, -1).astype(f32),
        "value_bias": _value_bias(weights),
        "output_kernel": np.asarray(weights["output_kernel"], f32),
        "output_bias": weights.get("output_bias"),
        "head_gates": _gates(weights, heads),
    }
    report = SharingReport(
        "latent",
        "split_svd" if split else "joint_svd",
        rank,
        float(np.sum(key_up**2) / max(np.sum(flat_key**2), 1e-300)),
        float(np.sum(value_up**2) / max(np.sum(flat_value**2), 1e-300)),
    )
    return out, report


def per_query_head(weights: Weights, num_kv_heads: int | None = None) -> dict[str, Any]:
    """A grouped layer's weights as a multi-head layer's (key/value heads repeated per group).

    The multi-head layer computes exactly what the grouped one computes: each
    query head gets its group's key/value kernels (and key bias); the value
    bias is already per query head. Multi-head weights pass unchanged.

    Args:
      weights: Core-layout weights; `key_kernel` `[e, G, p]` with G < h for
        a grouped layer.
      num_kv_heads: Unused (the key kernel says G); for symmetry with callers.
    """
    out = dict(weights)
    heads = np.shape(weights["query_kernel"])[1]
    groups = np.shape(weights["key_kernel"])[1]
    if groups == heads:
        return out
    size = heads // groups
    for role, axis in (("key_kernel", 1), ("value_kernel", 1), ("key_bias", 0)):
        if out.get(role) is not None:
            out[role] = np.repeat(np.asarray(out[role]), size, axis=axis)
    return out


def rope_layout(sets: Any, head_size: int) -> tuple[list[list[int]], list[list[int]]]:
    """Per rotary set: the dimensions that rotate (pairs' first halves, then their partners) and
    the rest, in a head of `head_size` (half-split: dimension j pairs with j + p / 2)."""
    half = head_size // 2
    rotary, rest = [], []
    for chosen in sets:
        dims = [int(j) for j in chosen] + [int(j) + half for j in chosen]
        rotary.append(dims)
        rest.append([d for d in range(head_size) if d not in set(dims)])
    return rotary, rest


def _latent_operands(
    key: np.ndarray, value: np.ndarray, rest: list[list[int]], heads: int
) -> tuple[np.ndarray, np.ndarray]:
    """The non-rotary keys and the values per query head, flattened `[e, columns]`: what the
    latent holds (key/value head g's `rest[g]` dimensions)."""
    e, groups, _ = key.shape
    size = heads // groups
    per_head_value = np.repeat(value, size, axis=1) if groups != heads else value
    flat_value = per_head_value.reshape(e, -1)
    if not rest[0]:
        return np.zeros([e, 0]), flat_value
    nope_key = np.stack([key[:, i // size, rest[i // size]] for i in range(heads)], axis=1)
    return nope_key.reshape(e, -1), flat_value


def rope_latent_spectrum(
    weights: Weights,
    rope_sets: Any,
    *,
    balance: bool = True,
    covariance: np.ndarray | None = None,
    split: bool = False,
) -> np.ndarray:
    """The singular values `rope_latent_weights`' joint SVD keeps the top of (descending).

    What a per-layer budget allocation (`allocate_ranks`) compares across layers.
    """
    key = np.asarray(weights["key_kernel"], np.float64)
    value = np.asarray(weights["value_kernel"], np.float64)
    heads = np.shape(weights["query_kernel"])[1]
    _, rest = rope_layout([tuple(s) for s in rope_sets], key.shape[2])
    flat_key, flat_value = _latent_operands(key, value, rest, heads)
    full = latent_rank_limit(flat_key.shape[1], flat_value.shape[1], key.shape[0], split)
    return joint_basis(
        flat_key, flat_value, full, balance=balance, covariance=covariance, split=split
    )[3]


def rope_latent_weights(
    weights: Weights,
    kv_latent_dim: int,
    rope_sets: Any,
    *,
    balance: bool = True,
    covariance: np.ndarray | None = None,
    split: bool = False,
    name: str = "attention",
) -> tuple[dict[str, np.ndarray | None], SharingReport]:
    """The latent weights of a rotary multi-head or grouped layer: decoupled rotary keys + a joint SVD.

    MHA2MLA's conversion (Ji et al., 2025): each source key/value head g
    keeps RoPE on its frequency pairs `rope_sets[g]` (k pairs each): those
    `2k` key dimensions become rotary key g, cached as they are; the other
    `p - 2k` key dimensions lose their rotation and, with the values, go
    through the joint SVD into the latent. Each query head's dimensions are
    reordered to match (the kept ones last), so its query is the original
    query, permuted: the softmax scale stays 1 / sqrt(p). With every pair
    kept (k = p / 2) the latent holds the values alone and, at full rank, the
    layer equals the source. A key bias on the rotating dimensions is kept
    (rotated, it does not cancel); on the others it is dropped (it does).

    Args:
      weights: The layer's core-layout weights (multi-head, or grouped with
        `key_kernel` `[e, G, p]`).
      kv_latent_dim: r, in [1, rank of the stacked non-rotary keys and values].
      rope_sets: One set of frequency indices (in [0, p / 2)) per source
        key/value head, all of the same size k >= 1.
      balance: Scale the non-rotary keys to the values' norm before the SVD
        (TransMLA's balancing).
      covariance: The layer inputs' second moment `[e, e]` (calibration): a
        whitened SVD of the key and value activations (`joint_basis`).
      split: Separate SVDs of the keys and the values (MHA2MLA's split
        variant, `joint_basis`) instead of one joint SVD.
      name: The layer's name, for messages.

    Returns:
      (weights with `query_kernel` (reordered), `query_bias`, `latent_kernel`
      `[e, r]`, `key_up_kernel` `[r, h, p - 2k]` (absent when k = p / 2),
      `value_up_kernel`, `rope_key_kernel` `[e, G, 2k]`, `rope_key_bias`,
      `value_bias`, `output_kernel`, `output_bias`, `head_gates`; report).
      A source with per-head query/key norms (`query_norm`, `key_norm`, `[p]`:
      Qwen3, Gemma 3) gets them per key/value head, `[G, p]`, each in its
      heads' new dimension order. Their keys are projected, normalised, then
      rotated: the SVD approximates the projections; the latent layer
      normalises each head's key as a whole (`LatentAttention`).
    """
    _check_rank3(weights, ("query_kernel", "key_kernel", "value_kernel", "output_kernel"), name)
    query = np.asarray(weights["query_kernel"], np.float64)
    key = np.asarray(weights["key_kernel"], np.float64)
    value = np.asarray(weights["value_kernel"], np.float64)
    e, groups, p = key.shape
    heads = query.shape[1]
    if value.shape[0] != e:
        raise ValueError(
            f"Attention layer {name!r} has key width {e} and value width {value.shape[0]}; a "
            "shared latent is computed from one input, so they must be equal."
        )
    sets = [tuple(s) for s in rope_sets]
    if len(sets) != groups:
        raise SpecError(
            f"Layer {name!r} has {groups} key/value heads; got {len(sets)} rotary sets (one per "
            "key/value head)."
        )
    pairs = {len(s) for s in sets}
    if len(pairs) != 1 or 0 in pairs:
        raise SpecError(
            f"Layer {name!r}: every key/value head keeps the same number (>= 1) of rotary "
            f"frequencies; got {[len(s) for s in sets]}."
        )
    k = pairs.pop()
    if any(max(s) >= p // 2 for s in sets):
        raise SpecError(
            f"Layer {name!r}: a head of size {p} has {p // 2} frequency pairs (0..{p // 2 - 1}); "
            f"got {[list(s) for s in sets]}."
        )
    rotary, rest = rope_layout(sets, p)
    size = heads // groups
    new_query = np.stack(
        [query[:, i, rest[i // size] + rotary[i // size]] for i in range(heads)], 1
    )
    query_bias = weights.get("query_bias")
    if query_bias is not None:
        query_bias = np.asarray(query_bias, np.float64)
        query_bias = np.stack(
            [query_bias[i, rest[i // size] + rotary[i // size]] for i in range(heads)]
        )
    rope_key = np.stack([key[:, g, rotary[g]] for g in range(groups)], axis=1)  # [e, G, 2k]
    key_bias = weights.get("key_bias")
    rope_key_bias = None
    if key_bias is not None:
        key_bias = np.asarray(key_bias, np.float64)
        rope_key_bias = np.stack([key_bias[g, rotary[g]] for g in range(groups)])
        normed = weights.get("key_norm") is not None
        if normed and any(np.any(key_bias[g, rest[g]]) for g in range(groups)):
            raise SpecError(
                f"Layer {name!r} normalises each key head after a key bias: on the dimensions "
                "that leave RoPE for the latent, the bias no longer cancels in the softmax, and "
                "the latent has no key bias; keep every rotary pair, or convert to grouped K/V."
            )
    nope = p - 2 * k
    flat_key, flat_value = _latent_operands(key, value, rest, heads)
    out, report = _rope_latent_result(
        weights,
        kv_latent_dim,
        (flat_key, flat_value),
        (new_query, query_bias, rope_key, rope_key_bias),
        nope,
        "rope_split_svd" if split else "rope_joint_svd",
        balance=balance,
        covariance=covariance,
        split=split,
    )
    for role in ("query_norm", "key_norm"):  # Qwen3's and Gemma 3's per-head norms.
        norm = weights.get(role)
        if norm is not None:
            norm = np.asarray(norm, np.float32)
            out[role] = np.stack([norm[rest[g] + rotary[g]] for g in range(groups)])
    return out, report


def _rope_latent_result(
    weights: Weights,
    kv_latent_dim: int,
    operands: tuple[np.ndarray, np.ndarray],
    rotary: tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None],
    nope: int,
    method: str,
    *,
    balance: bool,
    covariance: np.ndarray | None,
    split: bool,
) -> tuple[dict[str, np.ndarray | None], SharingReport]:
    """A rotary latent's weights and report: the joint SVD of the non-rotary keys and the
    values per query head (`operands`), beside the queries and rotary keys (`rotary`:
    query kernel, query bias, rotary key kernel, rotary key bias)."""
    flat_key, flat_value = operands
    new_query, query_bias, rope_key, rope_key_bias = rotary
    key = np.asarray(weights["key_kernel"], np.float64)
    heads = np.shape(weights["query_kernel"])[1]
    size = heads // key.shape[1]
    full = latent_rank_limit(flat_key.shape[1], flat_value.shape[1], key.shape[0], split)
    rank = check_latent_rank(kv_latent_dim, full)
    basis, key_up, value_up, _ = joint_basis(
        flat_key, flat_value, rank, balance=balance, covariance=covariance, split=split
    )
    f32 = np.float32
    out: dict[str, np.ndarray | None] = {
        "query_kernel": new_query.astype(f32),
        "query_bias": None if query_bias is None else query_bias.astype(f32),
        "latent_kernel": basis.astype(f32),
        "value_up_kernel": value_up.reshape(rank, heads, -1).astype(f32),
        "rope_key_kernel": rope_key.astype(f32),
        "rope_key_bias": None if rope_key_bias is None else rope_key_bias.astype(f32),
        "value_bias": _value_bias(weights),
        "output_kernel": np.asarray(weights["output_kernel"], f32),
        "output_bias": weights.get("output_bias"),
        "head_gates": _gates(weights, heads),
    }
    key_energy = 1.0
    if nope:
        out["key_up_kernel"] = key_up.reshape(rank, heads, nope).astype(f32)
        # Of the key operators' energy: the rotary dimensions are kept whole.
        total = np.sum(key**2)
        kept = np.sum(rope_key**2) + np.sum(key_up**2) / size
        key_energy = float(kept / max(total, 1e-300))
    report = SharingReport(
        "latent",
        method,
        rank,
        min(key_energy, 1.0),
        float(np.sum(value_up**2) / max(np.sum(flat_value**2), 1e-300)),
    )
    return out, report


def check_fold(fold: Any, half: int, name: str = "attention") -> int:
    """FreqFold's factor: an int >= 1 dividing the head's `half` frequency pairs."""
    if isinstance(fold, bool) or not isinstance(fold, int | np.integer) or fold < 1:
        raise SpecError(f"Layer {name!r}: rope_fold must be an int >= 1; got {fold!r}.")
    if half % int(fold):
        divisors = [m for m in range(1, half + 1) if half % m == 0]
        raise SpecError(
            f"Layer {name!r}: rope_fold={fold} must divide the head's {half} frequency pairs "
            f"(one of {divisors})."
        )
    return int(fold)


@dataclasses.dataclass(frozen=True)
class RotatedRope:
    """TransMLA's RoRoPE basis of one rotary layer: per frequency band, a PCA across key/value heads.

    With `fold` M = 1 a band is one frequency (RoRoPE, exact); with M > 1 it
    is M neighbouring frequencies (TransMLA's FreqFold), whose PCA runs over
    the G x M channels (frequency m of the band, key/value head g: channel
    `m * G + g`) and concentrates more of the keys' energy in its leading
    components, at the price of turning each component at one of the
    band's frequencies (`frequencies`): exact only at M = 1.

    Fields (P = head size / 2 frequency pairs, G key/value heads, B = P / M
    bands, C = G x M channels per band):
      rotations: `[B, C, C]`, orthonormal columns; component j of band b is
        `sum_(m, g) rotations[b, m G + g, j] k_(g, b M + m)` (the same mix of
        both halves of the pairs, so at M = 1 it commutes with RoPE's
        rotation of that frequency).
      key_energy: `[B, C]`, each component's mean squared key norm (the PCA's
        eigenvalues, descending per band).
      query_energy: `[B, C]`, the query side's: the summed squared norm of
        every query head's rotary query for the component, what it carries.
      fold: M.
    """

    rotations: np.ndarray
    key_energy: np.ndarray
    query_energy: np.ndarray
    fold: int = 1

    @property
    def scores(self) -> np.ndarray:
        """`[B, C]`: sqrt(query energy x key energy), S_2-norm's score in the rotated basis."""
        return np.sqrt(np.maximum(self.query_energy, 0) * np.maximum(self.key_energy, 0))

    @property
    def frequencies(self) -> np.ndarray:
        """`[B, C]`: the frequency each component turns at, `b M + (j mod M)`.

        TransMLA's assignment: a band's leading M components take its M
        frequencies in order (the fastest first); further components repeat
        them.
        """
        return rotary_frequencies(self.key_energy.shape[0], self.key_energy.shape[1], self.fold)

    def components(
        self, count: int, weights: np.ndarray | None = None
    ) -> tuple[tuple[int, int], ...]:
        """The `count` (band, component) pairs of highest score, sorted.

        `weights` `[P]` multiply each component's score by its frequency's
        weight (e.g. `rope.rotation_weights`: how much dropping its rotation
        can cost).
        """
        scores = self.scores
        if weights is not None:
            scores = scores * np.asarray(weights)[self.frequencies]
        flat = scores.reshape(-1)
        if not 1 <= count <= flat.size:
            half = self.scores.shape[0] * self.fold
            raise SpecError(
                f"A layer of {half} frequency pairs x {self.scores.shape[1] // self.fold} "
                f"key/value heads has {flat.size} rotated rotary pairs; keeping {count} needs "
                f"1 <= pairs kept <= {flat.size}."
            )
        top = np.argsort(-flat, kind="stable")[:count]
        width = self.scores.shape[1]
        return tuple(sorted((int(i) // width, int(i) % width) for i in top))

    def leading(self, count: int) -> tuple[tuple[int, int], ...]:
        """The leading component of each of the `count` fastest bands: `(b, 0)`, b < count.

        Their frequencies are evenly spaced from the fastest (`0, M, 2M, ...`),
        so the rotary key they form is DeepSeek-V2's: one key whose pair i
        turns at `base^(-2 i M / p)`, what llama.cpp's "deepseek2" computes
        (`headsize_tf.data.gguf_mla_writer`).
        """
        bands = self.scores.shape[0]
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= bands:
            raise SpecError(
                f"Keeping the leading component of the fastest bands needs 1 <= pairs kept <= "
                f"{bands} (the layer's bands of {self.fold} frequencies); got {count!r}."
            )
        return tuple((b, 0) for b in range(count))


def rotary_frequencies(bands: int, width: int, fold: int) -> np.ndarray:
    """`[bands, width]`: component j of band b turns at frequency `b fold + (j mod fold)`."""
    return np.arange(bands)[:, None] * fold + np.arange(width)[None] % fold


def _band(array: np.ndarray, start: int, fold: int) -> np.ndarray:
    """`[e, G, p]` -> `[e, M G]`: the columns of frequencies start..start + M - 1, channel m G + g."""
    e = array.shape[0]
    return array[:, :, start : start + fold].transpose(0, 2, 1).reshape(e, -1)


def rotated_rope(
    weights: Weights, covariance: np.ndarray | None = None, fold: int = 1
) -> RotatedRope:
    """The RoRoPE basis of a rotary layer (TransMLA, Meng et al. 2025, Sec. 4.2).

    RoPE turns each frequency pair of every key/value head by the same angle,
    so any orthogonal mix of the G heads' pairs of one frequency, applied
    alike to both halves, commutes with it. Per frequency f, the PCA of the
    G heads' pairs (of the weights, or of the activations under the inputs'
    second moment `covariance`) concentrates the rotary keys' energy in the
    leading components: those keep RoPE, shared by every query head (each
    query head's rotary query for component j is `rotations[f, g, j]` times
    its own pair), and the rest lose it. With `fold` M > 1 (FreqFold) the
    PCA runs over bands of M neighbouring frequencies (`RotatedRope`).

    Args:
      weights: Core-layout weights of a multi-head or grouped layer (head
        size p even, half-split pairs: dimension i pairs with i + p / 2).
      covariance: The layer inputs' second moment `[e, e]`, or None.
      fold: FreqFold's M, dividing p / 2 (1: exact RoRoPE).
    """
    query = np.asarray(weights["query_kernel"], np.float64)
    key = np.asarray(weights["key_kernel"], np.float64)
    e, groups, p = key.shape
    heads = query.shape[1]
    half = p // 2
    fold = check_fold(fold, half)
    bands, width = half // fold, groups * fold
    sigma = np.eye(e) if covariance is None else np.asarray(covariance, np.float64)
    rotations = np.zeros([bands, width, width])
    key_energy = np.zeros([bands, width])
    query_energy = np.zeros([bands, width])
    owner = np.arange(heads) // (heads // groups)
    for b in range(bands):
        start = b * fold
        re, im = _band(key, start, fold), _band(key, half + start, fold)
        moment = re.T @ sigma @ re + im.T @ sigma @ im
        values, vectors = np.linalg.eigh((moment + moment.T) / 2)
        order = np.argsort(-values, kind="stable")
        rotations[b], key_energy[b] = vectors[:, order], np.maximum(values[order], 0)
        q_re = query[:, :, start : start + fold]
        q_im = query[:, :, half + start : half + start + fold]
        moments = np.einsum("ehm,ef,fhn->hmn", q_re, sigma, q_re) + np.einsum(
            "ehm,ef,fhn->hmn", q_im, sigma, q_im
        )  # [h, M, M]: each query head's second moment over the band's frequencies
        mix = rotations[b].reshape(fold, groups, width)[:, owner]  # [M, h, C]
        query_energy[b] = np.einsum("mhj,hmn,nhj->j", mix, moments, mix)
    return RotatedRope(rotations, key_energy, query_energy, fold)


def check_rotated_components(
    components: Any, half: int, groups: int, name: str, fold: int = 1
) -> list:
    """Sorted (band, component) pairs, checked against P / M bands and G x M components."""
    fold = check_fold(fold, half, name)
    try:
        pairs = sorted((int(f), int(j)) for f, j in components)
    except (TypeError, ValueError):
        raise SpecError(
            f"Layer {name!r}: rotated RoPE components are (frequency, component) pairs; got "
            f"{components!r}."
        ) from None
    if not pairs or len(set(pairs)) != len(pairs):
        raise SpecError(
            f"Layer {name!r}: rotated RoPE keeps >= 1 distinct (frequency, component) pairs; got "
            f"{components!r}."
        )
    bands, width = half // fold, groups * fold
    bad = [(f, j) for f, j in pairs if not (0 <= f < bands and 0 <= j < width)]
    if bad:
        what = "frequencies" if fold == 1 else f"bands of {fold} frequencies"
        raise SpecError(
            f"Layer {name!r}: a head of size {2 * half} with {groups} key/value heads has "
            f"{what} 0..{bands - 1} and components 0..{width - 1}; got {bad}."
        )
    return pairs


def _turns_at(band: int, component: int, fold: int) -> int:
    """The frequency component j of band b turns at (`rotary_frequencies`' rule, one pair)."""
    return band * fold + component % fold


def _rotary_order(pairs: list[tuple[int, int]], fold: int) -> list[tuple[int, int]]:
    """The rotary key's column order: by the frequency each component turns at."""
    return sorted(pairs, key=lambda bj: (_turns_at(*bj, fold), *bj))


def rotated_layout(
    components: Any, half: int, groups: int, fold: int = 1
) -> tuple[list[int], list[int]]:
    """(the rotary key's frequencies, sorted with repeats; the frequencies that lose RoPE).

    A frequency loses RoPE on its band's components not kept: it keeps a
    non-rotary pair in every query head unless all G x M components of its
    band rotate.
    """
    pairs = check_rotated_components(components, half, groups, "attention", fold)
    counts = np.bincount([b for b, _ in pairs], minlength=half // fold)
    firsts = [_turns_at(b, j, fold) for b, j in _rotary_order(pairs, fold)]
    return firsts, [f for f in range(half) if counts[f // fold] < groups * fold]


def _rotated_operands(
    weights: Weights, rot: RotatedRope, pairs: list[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The non-rotary keys per key/value head `[e, G, n]` (each band's pairs projected on
    its components not kept), the values `[e, G, v]` and the non-rotary frequencies."""
    key = np.asarray(weights["key_kernel"], np.float64)
    e, groups, p = key.shape
    half, fold = p // 2, rot.fold
    width = groups * fold
    kept = {b: [j for c, j in pairs if c == b] for b in range(half // fold)}
    nope_bands = [b for b in kept if len(kept[b]) < width]
    columns_re, columns_im = [], []
    for b in nope_bands:
        dropped = [j for j in range(width) if j not in kept[b]]
        basis = rot.rotations[b][:, dropped]
        projector = basis @ basis.T  # [C, C]
        for columns, start in ((columns_re, b * fold), (columns_im, half + b * fold)):
            residual = (_band(key, start, fold) @ projector).reshape(e, fold, groups)
            columns.extend(residual[:, m] for m in range(fold))
    nope_frequencies = [b * fold + m for b in nope_bands for m in range(fold)]
    if nope_frequencies:
        nope = np.stack(columns_re + columns_im, axis=2)  # [e, G, n]
    else:
        nope = np.zeros([e, groups, 0])
    return nope, np.asarray(weights["value_kernel"], np.float64), nope_frequencies


def _flat_per_query_head(kernel: np.ndarray, heads: int) -> np.ndarray:
    e, groups, _ = kernel.shape
    return np.repeat(kernel, heads // groups, axis=1).reshape(e, -1)


def rotated_rope_spectrum(
    weights: Weights,
    components: Any,
    *,
    balance: bool = True,
    covariance: np.ndarray | None = None,
    split: bool = False,
    fold: int = 1,
) -> np.ndarray:
    """The singular values `rotated_rope_latent_weights`' joint SVD keeps the top of."""
    rot = rotated_rope(weights, covariance, fold)
    groups = np.shape(weights["key_kernel"])[1]
    half = np.shape(weights["key_kernel"])[2] // 2
    pairs = check_rotated_components(components, half, groups, "attention", fold)
    heads = np.shape(weights["query_kernel"])[1]
    nope, value, _ = _rotated_operands(weights, rot, pairs)
    flat_key, flat_value = _flat_per_query_head(nope, heads), _flat_per_query_head(value, heads)
    full = latent_rank_limit(flat_key.shape[1], flat_value.shape[1], nope.shape[0], split)
    return joint_basis(
        flat_key, flat_value, full, balance=balance, covariance=covariance, split=split
    )[3]


def rotated_rope_latent_weights(
    weights: Weights,
    kv_latent_dim: int,
    components: Any,
    *,
    balance: bool = True,
    covariance: np.ndarray | None = None,
    split: bool = False,
    fold: int = 1,
    name: str = "attention",
) -> tuple[dict[str, np.ndarray | None], SharingReport]:
    """The latent weights of a rotary layer by rotated RoPE (TransMLA's RoRoPE) + a joint SVD.

    The key/value heads' pairs of each frequency are rotated into their PCA
    basis (`rotated_rope`); the chosen (frequency, component) pairs become
    one decoupled rotary key shared by every query head (`2K` dimensions for
    K pairs, frequencies repeating where several components of one are
    kept), each query head's rotary query absorbing its head's share of the
    rotation. The components not kept lose RoPE: per frequency, each key/value
    head's pair projected onto them, with the values, goes through the joint
    SVD into the latent. A query head then has `n + 2K` dimensions (`n` = 2 x
    the frequencies not wholly kept); its kernel is scaled by
    `sqrt((n + 2K) / p)` so the layer's softmax scale `1 / sqrt(n + 2K)` acts
    as the source's `1 / sqrt(p)`. The rotary key's frequencies index the
    source's grid of `p` (`rope_grid_size`). With all `P x G` components
    kept, the latent holds the values alone and, at full rank, the layer
    equals the source. The budget of K pairs goes to the components of
    highest score wherever they are (`RotatedRope.components`), each turning
    at its own exact frequency; with `fold` M > 1 (TransMLA's FreqFold) the
    PCA runs over bands of M neighbouring frequencies, components are
    (band, component) pairs, and component j of band b turns at frequency
    `b M + (j mod M)` (an approximation: exact only at M = 1).

    Args:
      weights: Core-layout weights (multi-head, or grouped `[e, G, p]`).
      kv_latent_dim: r, in [1, rank of the stacked non-rotary keys and values].
      components: The (frequency, component) pairs kept on RoPE.
      balance: Scale the non-rotary keys to the values' norm before the SVD.
      covariance: The inputs' second moment `[e, e]`: the PCA and the SVD of
        the activations rather than of the weights.
      split: Separate SVDs of the keys and the values (MHA2MLA's split
        variant, `joint_basis`) instead of one joint SVD.
      fold: FreqFold's M (frequencies per PCA band), dividing p / 2.
      name: The layer's name, for messages.

    Returns:
      (weights: `query_kernel` `[d, h, n + 2K]`, `query_bias`, `latent_kernel`,
      `key_up_kernel` `[r, h, n]` (absent when n = 0), `value_up_kernel`,
      `rope_key_kernel` `[e, 1, 2K]`, `rope_key_bias`, `value_bias`,
      `output_kernel`, `output_bias`, `head_gates`; report).

    References:
      Meng et al., "TransMLA: Multi-Head Latent Attention Is All You Need",
      2025. https://arxiv.org/abs/2502.07864
    """
    _check_rank3(weights, ("query_kernel", "key_kernel", "value_kernel", "output_kernel"), name)
    query = np.asarray(weights["query_kernel"], np.float64)
    key = np.asarray(weights["key_kernel"], np.float64)
    e, groups, p = key.shape
    heads = query.shape[1]
    half = p // 2
    if np.shape(weights["value_kernel"])[0] != e:
        raise ValueError(
            f"Attention layer {name!r}: a shared latent is computed from one input, so the key "
            "and value widths must be equal."
        )
    pairs = check_rotated_components(components, half, groups, name, fold)
    rot = rotated_rope(weights, covariance, fold)
    owner = np.arange(heads) // (heads // groups)
    nope, value, nope_frequencies = _rotated_operands(weights, rot, pairs)
    n = 2 * len(nope_frequencies)
    size = n + 2 * len(pairs)
    scale = np.sqrt(size / p)
    order = _rotary_order(pairs, rot.fold)
    # mixes[k]: `[M, G]`, the kept component k's loadings on its band's channels.
    mixes = [rot.rotations[b][:, j].reshape(rot.fold, groups) for b, j in order]
    starts = [b * rot.fold for b, _ in order]

    def rotary(x: np.ndarray, offset: int, per_head: bool) -> np.ndarray:
        """`[..., H, p]` -> `[..., K]` (keys: summed over the G heads) or `[..., H, K]`."""
        columns = []
        for start, mix in zip(starts, mixes, strict=True):
            band = x[..., offset + start : offset + start + rot.fold]  # [..., H, M]
            if per_head:
                columns.append(np.einsum("...hm,mh->...h", band, mix[:, owner]))
            else:
                columns.append(np.einsum("...gm,mg->...", band, mix))
        return np.stack(columns, axis=-1)

    def query_layout(q: np.ndarray) -> np.ndarray:
        """`[..., h, p]` -> `[..., h, n + 2K]`: non-rotary pairs, then the rotary query."""
        parts = [q[..., nope_frequencies], q[..., [f + half for f in nope_frequencies]]]
        parts += [rotary(q, 0, True), rotary(q, half, True)]
        return scale * np.concatenate(parts, axis=-1)

    new_query = query_layout(query)
    query_bias = weights.get("query_bias")
    if query_bias is not None:
        query_bias = query_layout(np.asarray(query_bias, np.float64))
    rope_key = np.concatenate([rotary(key, 0, False), rotary(key, half, False)], axis=1)[
        :, None
    ]  # [e, 1, 2K]
    rope_key_bias = None
    key_bias = weights.get("key_bias")
    if key_bias is not None:
        key_bias = np.asarray(key_bias, np.float64)
        rope_key_bias = np.concatenate([rotary(key_bias, 0, False), rotary(key_bias, half, False)])[
            None
        ]
    flat_key, flat_value = _flat_per_query_head(nope, heads), _flat_per_query_head(value, heads)
    return _rope_latent_result(
        weights,
        kv_latent_dim,
        (flat_key, flat_value),
        (new_query, query_bias, rope_key, rope_key_bias),
        n,
        "rotated_rope_split_svd" if split else "rotated_rope_joint_svd",
        balance=balance,
        covariance=covariance,
        split=split,
    )

"""Iterative head pruning (Michel et al. 2019, Sec. 4): the least important heads go first."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np


def check_fraction(name: str, value: float, allow_zero: bool = True) -> float:
    """A fraction in [0, 1) (or (0, 1) when `allow_zero` is False)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not ((0.0 <= value < 1.0) if allow_zero else (0.0 < value < 1.0))
    ):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must be a fraction in {interval}; got {value!r}.")
    return float(value)


@dataclasses.dataclass
class PruningStep:
    """One point of the pruning curve."""

    fraction: float
    heads_pruned: int
    metric: float
    mask: list[list[float]]
    seconds: float


def select_heads_to_prune(
    importance: np.ndarray,
    mask: np.ndarray,
    count: int,
    min_heads_per_layer: int = 0,
) -> list[tuple[int, int]]:
    """The `count` least important unpruned heads, keeping `min_heads_per_layer` per layer.

    Ties break by (layer, head) order, so the choice is deterministic.
    """
    remaining = mask != 0
    per_layer = remaining.sum(axis=1)
    candidates = sorted(
        ((importance[i, h], i, h) for i, h in zip(*np.nonzero(remaining), strict=True)),
        key=lambda t: (t[0], t[1], t[2]),
    )
    chosen = []
    for _, layer, head in candidates:
        if len(chosen) == count:
            break
        if per_layer[layer] - 1 < min_heads_per_layer:
            continue
        per_layer[layer] -= 1
        chosen.append((int(layer), int(head)))
    if len(chosen) < count:
        raise ValueError(
            f"Cannot prune {count} more heads while keeping at least {min_heads_per_layer} per "
            f"layer: only {len(chosen)} can go. Lower the target fraction or min_heads_per_layer."
        )
    return chosen


def iterative_pruning(
    num_heads: tuple[int, int],
    importance_fn: Callable[[np.ndarray], np.ndarray],
    metric_fn: Callable[[np.ndarray], float],
    *,
    target_fraction: float = 0.9,
    step: float = 0.1,
    recompute: bool = True,
    min_heads_per_layer: int = 0,
    initial_mask: np.ndarray | None = None,
    progress: bool = True,
    heads: np.ndarray | None = None,
) -> list[PruningStep]:
    """Prunes `step` of all heads at a time down to `target_fraction`.

    Args:
      num_heads: `(layers, heads)`.
      importance_fn: mask -> `[layers, heads]` importance of the model with
        that head mask applied (e.g. `head_importance` after `set_head_mask`).
      metric_fn: mask -> the metric to record (e.g. dev accuracy).
      target_fraction: Final fraction of heads pruned, in [0, 1).
      step: Fraction of all heads pruned per step, in (0, 1).
      recompute: Recompute importance after each step (else the scores of
        the unpruned model are used throughout).
      min_heads_per_layer: Never prune a layer below this many heads.
      initial_mask: Starting mask (default all ones).
      heads: `[layers, heads]` bool, the slots that hold a head (default: all).
        A layer with fewer heads than the widest has slots without one: they
        are neither counted (the fractions are of the heads) nor pruned.

    Returns:
      One `PruningStep` per point, starting with the unpruned model
      (`heads_pruned`: the heads whose mask entry is 0).
    """
    target_fraction = check_fraction("target_fraction", target_fraction)
    step = check_fraction("step", step, allow_zero=False)
    layers, width = num_heads
    exists = np.ones([layers, width], bool) if heads is None else np.asarray(heads, bool)
    total = int(exists.sum())
    # The last step prunes round(target_fraction x heads), as every step rounds its goal.
    if min_heads_per_layer * layers > total - int(round(target_fraction * total)):
        raise ValueError(
            f"target_fraction {target_fraction} prunes {int(round(target_fraction * total))} of "
            f"{total} heads, but min_heads_per_layer={min_heads_per_layer} keeps "
            f"{min_heads_per_layer * layers}."
        )
    if initial_mask is None:
        mask = exists.astype(np.float32)
    else:
        mask = np.where(exists, initial_mask, 0.0).astype(np.float32)

    def pruned() -> int:
        return int(np.count_nonzero((mask == 0) & exists))

    from tqdm.auto import tqdm

    fractions = [0.0]
    while fractions[-1] + step < target_fraction + 1e-9:
        fractions.append(round(fractions[-1] + step, 10))
    if fractions[-1] < target_fraction - 1e-9:
        fractions.append(target_fraction)
    steps: list[PruningStep] = []
    importance, scored_mask = None, None
    # The bar is closed (its line ended) also on an error, so that the error's line is its own.
    with tqdm(fractions, desc="pruning", unit="step", disable=not progress) as bar:
        for fraction in bar:
            start = time.perf_counter()
            goal = int(round(fraction * total))
            have = pruned()
            if goal > have:
                if importance is None or (recompute and not np.array_equal(scored_mask, mask)):
                    importance, scored_mask = importance_fn(mask), mask.copy()
                for layer, head in select_heads_to_prune(
                    importance, mask, goal - have, min_heads_per_layer
                ):
                    mask[layer, head] = 0.0
            metric = float(metric_fn(mask))
            elapsed = time.perf_counter() - start
            steps.append(PruningStep(fraction, pruned(), metric, mask.tolist(), elapsed))
    return steps


def normalize_importance(
    totals: Sequence[np.ndarray], tokens: int, normalize: bool = True
) -> np.ndarray:
    """Per-layer importance `[layers, max heads]` from summed |dL/dxi_h| (Michel et al.).

    Args:
      totals: Per layer, the sum over batches of |gradient of the batch loss
        w.r.t. the head gates| (`[heads_of_layer]`).
      tokens: Tokens seen (the expectation's denominator).
      normalize: Divide each layer's scores by their L2 norm (the paper's
        code does).

    Returns:
      float64 `[layers, max heads]`; layers with fewer heads are NaN-padded.
    """
    if tokens <= 0:
        raise ValueError("The importance dataset has no examples (no batches or no tokens).")
    width = max((len(t) for t in totals), default=0)
    scores = np.full([len(totals), width], np.nan)
    for i, total in enumerate(totals):
        row = np.asarray(total, np.float64) / tokens
        if normalize:
            row = row / (np.linalg.norm(row) + 1e-20)
        scores[i, : len(row)] = row
    return scores


# Head axis of each per-head tensor of an attention layer in the core's kernel
# layout (see `headsize_tf.core`); None marks a tensor shared by all heads.
HEAD_AXES: dict[str, dict[str, int | None]] = {
    "standard": {
        "query_kernel": 1,
        "query_bias": 0,
        "key_kernel": 1,
        "key_bias": 0,
        "value_kernel": 1,
        "value_bias": 0,
        "output_kernel": 0,
        "output_bias": None,
        # Per-head RMSNorm scales of queries and keys (Qwen3): one for every head.
        "query_norm": None,
        "key_norm": None,
    },
    "collaborative": {
        "query_kernel": None,
        "key_kernel": None,
        "value_kernel": 1,
        "value_bias": 0,
        "output_kernel": 0,
        "output_bias": None,
        "mixing": 0,
        "content_bias": 1,
    },
}
HEAD_AXES["fixed_head"] = HEAD_AXES["standard"]
# Shared key/value layers: the query side, the per-query-head value bias and
# the output rows go with the heads; a latent's down-projection is shared; a
# grouped layer's key/value heads go with whole groups (`GROUP_AXES`).
HEAD_AXES["latent"] = {
    "query_kernel": 1,
    "query_bias": 0,
    "latent_kernel": None,
    "key_up_kernel": 1,
    "value_up_kernel": 1,
    "value_bias": 0,
    "output_kernel": 0,
    "output_bias": None,
    # Decoupled rotary keys (one, or one per group of query heads; see `remove`), and the
    # per-head query/key norms' scales of their groups (Qwen3, Gemma 3).
    "rope_key_kernel": None,
    "rope_key_bias": None,
    "query_norm": None,
    "key_norm": None,
}
HEAD_AXES["grouped"] = {
    "query_kernel": 1,
    "query_bias": 0,
    "key_kernel": None,
    "key_bias": None,
    "value_kernel": None,
    "value_bias": 0,
    "output_kernel": 0,
    "output_bias": None,
    "query_norm": None,
    "key_norm": None,
}
# Group (key/value head) axis of a grouped layer's key/value tensors `[e, G, .]`, `[G, p]`.
GROUP_AXES: dict[str, int] = {"key_kernel": 1, "value_kernel": 1, "key_bias": 0}
# Group axis of a latent layer's tensors of its R rotary keys (`[e, R, 2k]`, `[R, 2k]`) and of
# their groups' query/key norm scales (`[R, p]`): with R > 1, each rotary key serves a
# contiguous group of h / R query heads, and removal keeps whole groups as a grouped layer does.
ROTARY_GROUP_AXES: dict[str, int] = {
    "rope_key_kernel": 1,
    "rope_key_bias": 0,
    "query_norm": 0,
    "key_norm": 0,
}


def whole_groups(keep: Sequence[int], num_heads: int, num_kv_heads: int) -> list[int]:
    """The heads of every group (`num_heads / num_kv_heads` contiguous query heads) that
    holds a head of `keep`: what a grouped layer keeps physically.

    Args:
      keep: Head positions to keep.
      num_heads: The layer's query heads h.
      num_kv_heads: Its key/value heads G (a divisor of h).

    Example:

    >>> whole_groups([1, 4], num_heads=8, num_kv_heads=4)
    [0, 1, 4, 5]
    """
    size = num_heads // num_kv_heads
    groups = sorted({int(h) // size for h in keep})
    return [h for g in groups for h in range(g * size, (g + 1) * size)]


def slice_heads(
    kind: str, weights: Mapping[str, np.ndarray | None], keep: Sequence[int]
) -> dict[str, np.ndarray | None]:
    """The weights of the heads at positions `keep` (the head-index slicing plan).

    Args:
      kind: "standard", "fixed_head", "collaborative", "grouped" or "latent".
      weights: Role -> array in the core layout (roles of `HEAD_AXES[kind]`;
        None for absent biases).
      keep: Head positions to keep, in order. Empty keeps head 0's shapes (a
        layer with one, masked, head: a layer cannot have zero heads). A
        grouped layer keeps whole groups (`whole_groups`), their key/value
        heads with them; so does a latent layer with several rotary keys,
        their rotary keys and norm scales with them (`ROTARY_GROUP_AXES`).

    Returns:
      Role -> sliced array (shared tensors unchanged).
    """
    if kind not in HEAD_AXES:
        raise ValueError(f"Unknown attention kind {kind!r}; expected one of {list(HEAD_AXES)}.")
    axes = HEAD_AXES[kind]
    unknown = sorted(set(weights) - set(axes))
    if unknown:
        raise ValueError(f"Unknown weight roles {unknown} for {kind!r}; expected {list(axes)}.")
    index = list(keep) or [0]
    group_axes: dict[str, int] = {}
    heads = np.shape(weights["query_kernel"])[1] if "query_kernel" in weights else 0
    rotary_keys = weights.get("rope_key_kernel")
    if kind == "grouped":
        group_axes, count = GROUP_AXES, np.shape(weights["key_kernel"])[1]
        what = f"a grouped layer ({count} key/value heads)"
    elif kind == "latent" and rotary_keys is not None and np.shape(rotary_keys)[1] > 1:
        group_axes, count = ROTARY_GROUP_AXES, np.shape(rotary_keys)[1]
        what = f"a latent layer with {count} rotary keys (each serves its group)"
    groups: list[int] = []
    if group_axes:
        if not keep:
            index = list(range(heads // count))  # Group 0 (one masked group).
        if sorted(index) != whole_groups(index, heads, count):
            raise ValueError(
                f"Head positions {index} split a group of {heads // count} query heads; "
                f"{what} keeps whole groups."
            )
        groups = list(dict.fromkeys(h // (heads // count) for h in index))
    out: dict[str, np.ndarray | None] = {}
    for role, value in weights.items():
        axis = axes[role]
        if role in group_axes and value is not None:
            out[role] = np.take(np.asarray(value), groups, axis=group_axes[role])
            continue
        if value is None or axis is None:
            out[role] = value
            continue
        value = np.asarray(value)
        bad = [i for i in index if not 0 <= i < value.shape[axis]]
        if bad:
            raise ValueError(f"{role}: head positions {bad} out of range [0, {value.shape[axis]}).")
        out[role] = np.take(value, index, axis=axis)
    return out

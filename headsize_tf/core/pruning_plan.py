"""Iterative head pruning (Michel et al. 2019, Sec. 4): the least important heads go first."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

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

    Returns:
      One `PruningStep` per point, starting with the unpruned model.
    """
    target_fraction = check_fraction("target_fraction", target_fraction)
    step = check_fraction("step", step, allow_zero=False)
    layers, heads = num_heads
    total = layers * heads
    if min_heads_per_layer * layers > total * (1 - target_fraction) + 1e-9:
        raise ValueError(
            f"target_fraction {target_fraction} prunes {math.floor(target_fraction * total)} of "
            f"{total} heads, but min_heads_per_layer={min_heads_per_layer} keeps "
            f"{min_heads_per_layer * layers}."
        )
    mask = np.ones([layers, heads], np.float32) if initial_mask is None else initial_mask.copy()
    from tqdm.auto import tqdm

    fractions = [0.0]
    while fractions[-1] + step < target_fraction + 1e-9:
        fractions.append(round(fractions[-1] + step, 10))
    if fractions[-1] < target_fraction - 1e-9:
        fractions.append(target_fraction)
    steps: list[PruningStep] = []
    importance, scored_mask = None, None
    for fraction in tqdm(fractions, desc="pruning", unit="step", disable=not progress):
        start = time.perf_counter()
        goal = int(round(fraction * total))
        have = int((mask == 0).sum())
        if goal > have:
            if importance is None or (recompute and not np.array_equal(scored_mask, mask)):
                importance, scored_mask = importance_fn(mask), mask.copy()
            for layer, head in select_heads_to_prune(importance, mask, goal - have,
                                                     min_heads_per_layer):  # fmt: skip
                mask[layer, head] = 0.0
        metric = float(metric_fn(mask))
        steps.append(PruningStep(fraction, int((mask == 0).sum()), metric, mask.tolist(),
                                 time.perf_counter() - start))  # fmt: skip
    return steps

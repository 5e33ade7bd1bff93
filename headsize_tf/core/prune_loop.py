"""One pruning driver for every model: importance, curve, removal, save, report.

`prune_loop(adapter, schedule)` runs Michel et al.'s (2019) iterative head
pruning on any `core.model_adapter.ModelAdapter` (either front, any model
kind) and returns the one report schema of `core.prune_report`. It is numpy
only: the adapter owns the gradients, the metric and the weights.

Example:

>>> report = prune_loop(adapter, PruneSchedule(target_fraction=0.3), "runs/pruned")
>>> report["params"], report[report["metric"]]
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from headsize_tf.core.io import check_output_free, write_json
from headsize_tf.core.model_adapter import ModelAdapter
from headsize_tf.core.prune_report import SCHEMA, json_scores, kept_heads
from headsize_tf.core.pruning_plan import PruningStep, iterative_pruning

# What `PruneSchedule.unit` prunes: single heads, or whole key/value groups.
UNITS = ("head", "kv_group")


@dataclasses.dataclass(frozen=True)
class PruneSchedule:
    """How `prune_loop` prunes.

    Args:
      target_fraction: Fraction of the pruned kinds' heads pruned at the end.
      step: Fraction of those heads pruned per step.
      recompute: Recompute importance after each step (else the unpruned
        model's scores throughout).
      min_heads_per_layer: Heads every pruned layer keeps.
      kinds: Attention kinds pruned (`adapter.attention_kinds()`); None: all.
        Fractions count the heads of these kinds only.
      random_seed: Prune uniformly random heads (this seed) instead of the
        least important ones.
      progress: A progress bar over the steps.
      unit: "head" (Michel et al.'s unit), or "kv_group": whole key/value
        groups of a decoder with grouped K/V (a group's importance is the sum
        of its query heads'; the adapter's `kv_groups()` says which slots share
        one). Fractions, steps and `min_heads_per_layer` then count groups,
        so `target_fraction` is the fraction of the KV cache removed.

    Example:

    >>> PruneSchedule(target_fraction=0.5, step=0.1, kinds=("decoder_self",))
    >>> PruneSchedule(target_fraction=1 / 3, step=1 / 9, unit="kv_group")
    """

    target_fraction: float = 0.5
    step: float = 0.1
    recompute: bool = True
    min_heads_per_layer: int = 1
    kinds: tuple[str, ...] | None = None
    random_seed: int | None = None
    progress: bool = True
    unit: str = "head"

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit={self.unit!r}; expected one of {list(UNITS)}.")

    def with_progress(self, progress: bool) -> PruneSchedule:
        """The same schedule with or without its progress bar."""
        return dataclasses.replace(self, progress=progress)

    def settings(self) -> dict[str, Any]:
        """The report's record of the schedule."""
        return {
            "target_fraction": self.target_fraction,
            "step": self.step,
            "recompute": self.recompute,
            "min_heads_per_layer": self.min_heads_per_layer,
            "unit": self.unit,
        }


def masked_schedule(
    original: np.ndarray,
    set_mask: Callable[[np.ndarray], None],
    importance: Callable[[], np.ndarray],
    metric: Callable[[], float],
    *,
    target_fraction: float,
    step: float,
    recompute: bool = True,
    min_heads_per_layer: int = 1,
    initial_mask: np.ndarray | None = None,
    progress: bool = True,
    heads: np.ndarray | None = None,
) -> list[PruningStep]:
    """`core.pruning_plan.iterative_pruning` on a model whose gates `set_mask` sets.

    Each step's importance and metric are measured with that step's mask
    applied; the model gets `original` back at the end, also on an error.

    Args:
      original: The model's current mask (restored at the end).
      set_mask: Applies a mask of `original`'s shape to the model.
      importance: The model's head importance under the applied mask.
      metric: The recorded metric (accuracy, perplexity) under the applied mask.
      target_fraction, step, recompute, min_heads_per_layer: The schedule.
      initial_mask: The schedule's starting mask (default: `original`).
      progress: A progress bar over the steps.
      heads: The slots of `original` that hold a head (default: all).
    """

    def importance_fn(mask):
        set_mask(mask)
        return importance()

    def metric_fn(mask):
        set_mask(mask)
        return metric()

    start = original.copy() if initial_mask is None else initial_mask
    try:
        return iterative_pruning(
            original.shape,
            importance_fn,
            metric_fn,
            target_fraction=target_fraction,
            step=step,
            recompute=recompute,
            min_heads_per_layer=min_heads_per_layer,
            initial_mask=start,
            progress=progress,
            heads=heads,
        )
    finally:
        set_mask(original)


def binary_mask(mask: np.ndarray) -> np.ndarray:
    """1 where a head is present and unpruned, 0 elsewhere (pruned, removed, no head)."""
    mask = np.asarray(mask, np.float64)
    return np.where(np.isfinite(mask) & (mask != 0), 1.0, 0.0).astype(np.float32)


@dataclasses.dataclass
class _Curve:
    rows: list[int]
    original: np.ndarray
    steps: list[PruningStep]
    evaluations: list[dict[str, float]]

    def full(self, sub) -> np.ndarray:
        """A whole-model mask: the pruned rows from `sub`, the others as they were."""
        mask = np.nan_to_num(self.original).astype(np.float32)
        mask[self.rows] = np.asarray(sub, np.float32)
        return mask


def prune_curve(
    adapter: ModelAdapter, schedule: PruneSchedule, importance: np.ndarray | None = None
) -> _Curve:
    """The masked pruning curve (the model gets its mask back at the end).

    `importance` (the scores under the current mask, if already computed) is
    reused for the first step.
    """
    kinds = adapter.attention_kinds()
    if schedule.kinds is not None:
        unknown = sorted(set(schedule.kinds) - set(kinds))
        if unknown or not schedule.kinds:
            raise ValueError(
                f"Attention kinds {unknown or list(schedule.kinds)}; the model has "
                f"{sorted(set(kinds))}."
            )
    rows = [i for i, k in enumerate(kinds) if schedule.kinds is None or k in schedule.kinds]
    original = adapter.head_mask()
    curve = _Curve(rows, original, [], [])
    start = binary_mask(original)[rows]
    random_scores = None
    if schedule.random_seed is not None:
        random_scores = np.random.default_rng(schedule.random_seed).random(original.shape)

    def scores() -> np.ndarray:
        if random_scores is not None:
            return random_scores[rows]
        current = binary_mask(adapter.head_mask())[rows]
        if importance is not None and np.array_equal(current, start):
            return np.asarray(importance)[rows]
        return np.asarray(adapter.head_importance())[rows]

    def metric() -> float:
        values = adapter.evaluate()
        curve.evaluations.append(values)
        return values[adapter.metric_name]

    # Slots without a head (a layer narrower than the widest, -1) are not heads of the fractions;
    # an encoder's removed heads keep their original numbers and count as pruned.
    exists = np.asarray(adapter.original_heads())[rows] >= 0
    groups = _GroupMasks.of(adapter, rows, start) if schedule.unit == "kv_group" else None
    if groups is None:
        restore, first = original[rows], start

        def apply(sub):
            adapter.set_head_mask(curve.full(sub))

        measure = scores
    else:  # The schedule runs on group masks; the adapter gets their head masks.
        restore = first = groups.start

        def apply(sub):
            adapter.set_head_mask(curve.full(groups.heads(sub)))

        def measure():
            return groups.scores(scores())

        exists = groups.exists
    steps = masked_schedule(
        restore,
        apply,
        measure,
        metric,
        target_fraction=schedule.target_fraction,
        step=schedule.step,
        recompute=schedule.recompute,
        min_heads_per_layer=schedule.min_heads_per_layer,
        initial_mask=first,
        progress=schedule.progress,
        heads=exists,
    )
    if groups is not None:
        adapter.set_head_mask(original)  # Gates masked within kept groups, as they were.
        steps = [groups.head_step(step, start) for step in steps]
    curve.steps = steps
    return curve


@dataclasses.dataclass(frozen=True)
class _GroupMasks:
    """Group-level masks of the pruned rows and their head-level forms.

    `of_slot[r, s]`: the key/value group of row r's slot s (-1: no head);
    `start`: 1 for each group with a live head; `exists`: each group the row has.
    """

    of_slot: np.ndarray
    start: np.ndarray
    exists: np.ndarray

    @classmethod
    def of(cls, adapter: ModelAdapter, rows: list[int], start: np.ndarray) -> _GroupMasks:
        kv_groups = getattr(adapter, "kv_groups", None)
        if kv_groups is None:
            raise ValueError(
                f"unit 'kv_group' prunes whole key/value groups; this {type(adapter).__name__} "
                "has none (expected a decoder with grouped or multi-head K/V)."
            )
        of_slot = np.asarray(kv_groups(), np.int64)[rows]
        width = int(of_slot.max()) + 1
        alive = np.zeros([len(rows), width], np.float32)
        exists = np.zeros([len(rows), width], bool)
        for r, s in zip(*np.nonzero(of_slot >= 0), strict=True):
            exists[r, of_slot[r, s]] = True
            if start[r, s] != 0:
                alive[r, of_slot[r, s]] = 1.0
        return cls(of_slot, alive, exists)

    def heads(self, groups: Any) -> np.ndarray:
        """The head mask of a group mask: each slot takes its group's entry."""
        groups = np.asarray(groups, np.float32)
        rows = np.arange(len(self.of_slot))[:, None]
        return np.where(self.of_slot >= 0, groups[rows, np.maximum(self.of_slot, 0)], 0.0)

    def scores(self, heads: np.ndarray) -> np.ndarray:
        """A group's importance: the sum of its heads' (no head: NaN)."""
        total = np.zeros(self.start.shape, np.float64)
        for (r, s), value in np.ndenumerate(np.nan_to_num(np.asarray(heads, np.float64))):
            if self.of_slot[r, s] >= 0:
                total[r, self.of_slot[r, s]] += value
        return np.where(self.start != 0, total, np.nan)

    def head_step(self, step: PruningStep, start: np.ndarray) -> PruningStep:
        """`step` with its head mask, and the heads (not groups) it has pruned."""
        heads = self.heads(step.mask)
        pruned = int(np.count_nonzero(start) - np.count_nonzero(heads))
        return dataclasses.replace(step, mask=heads.tolist(), heads_pruned=pruned)


def curve_points(adapter: ModelAdapter, curve: _Curve) -> list[dict[str, Any]]:
    """The report's curve: per step the fraction, metrics, heads per layer and mask."""
    points = []
    for step, values in zip(curve.steps, curve.evaluations, strict=True):
        mask = curve.full(step.mask)
        points.append(
            {
                "fraction": step.fraction,
                "heads_pruned": step.heads_pruned,
                "metric": step.metric,
                **values,
                "heads_per_layer": np.count_nonzero(mask, axis=1).tolist(),
                "mask": mask.tolist(),
                "seconds": step.seconds,
            }
        )
    return points


def prune_loop(
    adapter: ModelAdapter,
    schedule: PruneSchedule,
    output: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
    extras: Callable[[dict[str, Any], ModelAdapter], None] | None = None,
) -> dict[str, Any]:
    """Importance, masked curve, removal, (save, reload), report.

    Args:
      adapter: The model (`ModelAdapter`).
      schedule: `PruneSchedule`.
      output: Where the pruned model is saved (`adapter.save`); its metric
        "pruned" is then measured on the reloaded model. None: not saved,
        measured in memory.
      overwrite: Replace an existing `output`.
      extras: `extras(report, pruned_adapter)` adds a driver's own keys
        (decoding speed, the model's pruned-head record) before the save.

    Returns:
      The report (`core.prune_report`).
    """
    if output is not None:
        check_output_free(output, overwrite)
    original = adapter.head_mask()
    importance = adapter.head_importance()
    curve = prune_curve(adapter, schedule, importance)
    final = curve.full(curve.steps[-1].mask)
    start = time.perf_counter()
    pruned = adapter.remove_heads(final)
    removal_seconds = time.perf_counter() - start
    numbering = adapter.original_heads()
    name = adapter.metric_name
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "source": adapter.source,
        "metric": name,
        **schedule.settings(),
        "importance": json_scores(importance),
        "curve": curve_points(adapter, curve),
        "kept_heads": {
            "original": kept_heads(original, numbering),
            "pruned": kept_heads(final, numbering),
        },
        "params": {"original": int(adapter.count_params()), "pruned": int(pruned.count_params())},
        "removal_seconds": removal_seconds,
    }
    measured = curve.evaluations
    unsaved = pruned.evaluate() if output is None else {}
    for key in measured[0]:
        report[key] = {
            "original": measured[0][key],
            "masked": measured[-1][key],
            "pruned": unsaved.get(key),
        }
    if extras is not None:
        extras(report, pruned)
    if output is None:
        return report
    path = pruned.save(output, report, overwrite=overwrite)
    reloaded = pruned.reload(path).evaluate()
    for key, value in reloaded.items():
        if key in report:
            report[key]["pruned"] = value
    write_json(path / adapter.report_file, report)
    return report

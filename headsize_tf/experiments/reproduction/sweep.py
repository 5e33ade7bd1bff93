"""The learning-rate sweep over the run files: which runs count, each model's grid and
chosen rate, and the runs still to do (sweep first, then the other seeds)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.experiments.reproduction.plan import Model, unique_models
from headsize_tf.experiments.reproduction.presets import Preset

# Preset fields that do not change what a run trains: a run stays valid when they change.
NOT_SHAPE = ("learning_rates", "grid_note")


# Fields added after runs were recorded: a record without one was made at its default.
_DEFAULTS = json.loads(
    json.dumps(
        {
            f.name: f.default
            for f in dataclasses.fields(Preset)
            if f.default is not dataclasses.MISSING
        }
    )
)


def _shape(preset: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in {**_DEFAULTS, **preset}.items() if k not in NOT_SHAPE}


def load_runs(
    out: pathlib.Path, preset: Preset, framework: str = "tf_keras"
) -> dict[tuple[str, float, int], dict]:
    """Finished runs of this preset's shape and `framework`: {(key, learning rate, seed):
    record}.

    The learning-rate grid is not part of the shape: a run at any rate counts. Runs
    of the two frameworks never mix (their data order differs); records without a
    framework are tf_keras runs.
    """
    runs = {}
    shape = _shape(json.loads(json.dumps(dataclasses.asdict(preset))))  # Lists, as stored.
    for path in sorted((out / "runs").glob("*.json")):
        record = json.loads(path.read_text())
        if (
            _shape(record.get("preset", {})) == shape
            and record.get("framework", "tf_keras") == framework
        ):
            runs[record["key"], record["learning_rate"], record["seed"]] = record
    return runs


EDGE_EXTENSIONS = 2  # Doublings (or halvings) added when the best rate is at the grid's edge.


def final_perplexity(runs: dict, key: str, lr: float) -> float | None:
    """Seed 0's last validation perplexity at `lr` (inf if it diverged); None if not run."""
    record = runs.get((key, lr, 0))
    if record is None:
        return None
    final = record["curve"][-1]["perplexity"] if record["curve"] else np.inf
    return final if np.isfinite(final) else np.inf  # A diverged (NaN) run is never the best.


def model_grid(key: str, preset: Preset, runs: dict) -> list[float]:
    """The learning rates swept for `key`: the preset's grid, extended by a doubling
    (halving) while the best finished rate is its largest (smallest), at most
    `EDGE_EXTENSIONS` times, so the chosen rate is an interior optimum when it can be."""
    grid = sorted(preset.learning_rates)
    for _ in range(EDGE_EXTENSIONS):
        finals = {lr: final_perplexity(runs, key, lr) for lr in grid}
        if any(v is None for v in finals.values()):
            break
        best = min(finals, key=lambda lr: (finals[lr], lr))
        if best == grid[-1]:
            grid.append(grid[-1] * 2)
        elif best == grid[0]:
            grid.insert(0, grid[0] / 2)
        else:
            break
    return grid


def best_learning_rate(key: str, preset: Preset, runs: dict) -> float | None:
    """The swept rate (`model_grid`) with the lowest final validation perplexity at seed 0.

    None until every rate of the model's grid has finished.
    """
    finals = {lr: final_perplexity(runs, key, lr) for lr in model_grid(key, preset, runs)}
    if any(v is None for v in finals.values()):
        return None
    return min(finals, key=lambda lr: (finals[lr], lr))


def pending(
    preset: Preset,
    experiments: dict[str, list[Model]],
    runs: dict,
    seeds: Sequence[int] = (0, 1, 2),
) -> list[tuple[Model, float, int]]:
    """Runs still to do, model by model: its sweep (seed 0 at every learning rate), then
    its other seeds at the chosen rate; so compared pairs complete early."""
    todo = []
    for model in unique_models(experiments).values():
        grid = model_grid(model.key, preset, runs)
        todo += [(model, lr, 0) for lr in grid if (model.key, lr, 0) not in runs]
        lr = best_learning_rate(model.key, preset, runs)
        if lr is not None:
            todo += [(model, lr, s) for s in seeds if s != 0 and (model.key, lr, s) not in runs]
    return todo

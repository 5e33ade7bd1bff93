"""The one pruning report schema, its score serialisation and its reader.

`core.prune_loop.prune_loop` returns (and every prune driver writes) one
JSON object:

* `source`, `metric` (the main metric's name), `target_fraction`, `step`,
  `recompute`, `min_heads_per_layer`, `unit` ("head" or "kv_group"; the
  fractions count that unit): what was run;
* `importance`: `[layers][slots]` scores before pruning (`null`: no head);
* `curve`: one point per step: `fraction`, `heads_pruned`, `metric`, every
  evaluated metric by name, `heads_per_layer`, `mask`, `seconds`;
* `kept_heads`: `{"original", "pruned"}`, per layer the original numbers of
  the heads kept (the record a later pruning continues from);
* `params`: `{"original", "pruned"}`;
* one `{"original", "masked", "pruned"}` block per evaluated metric;
* `removal_seconds`.

Reports in the older layout (`params_before` / `params_after`,
`unpruned_<metric>` / `masked_<metric>` / `pruned_<metric>`) still load
through `read_prune_report`, converted to this one.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SCHEMA = "headsize_tf.prune_report/1"


def json_scores(scores: np.ndarray | Sequence) -> list[list[float | None]]:
    """`[layers][heads]` scores as JSON: NaN / infinite entries (no head) become None."""
    return [[None if not np.isfinite(v) else float(v) for v in row] for row in np.asarray(scores)]


def scores_from_json(rows: Sequence[Sequence[float | None]]) -> np.ndarray:
    """`json_scores`' inverse: a float `[layers, max heads]` array, None and ragged ends NaN."""
    width = max((len(r) for r in rows), default=0)
    return np.array(
        [
            [np.nan if v is None else float(v) for v in r] + [np.nan] * (width - len(r))
            for r in rows
        ],
        np.float64,
    ).reshape(len(rows), width)


def kept_heads(mask: np.ndarray, original: Sequence[Sequence[int]]) -> list[list[int]]:
    """Per layer, the original numbers of the heads whose mask entry is non-zero."""
    mask = np.nan_to_num(np.asarray(mask, np.float64))
    return [
        sorted(int(numbers[s]) for s in range(len(numbers)) if numbers[s] >= 0 and row[s] != 0)
        for row, numbers in zip(mask, original, strict=True)
    ]


def read_prune_report(report: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """A pruning report (a path or a loaded dict) in this schema, earlier ones converted.

    Converted: `params_before` / `params_after` -> `params`; `unpruned_` /
    `masked_` / `pruned_<metric>` -> a `<metric>` block; a missing `metric`
    (reports of LMs and translation models) -> "perplexity"; curve points
    without `metric` get their `<metric>` value.

    Raises:
      ValueError: a report that names neither the parameters nor a metric.
    """
    if not isinstance(report, Mapping):
        path = pathlib.Path(report)
        report = json.loads(path.read_text(encoding="utf-8"))
        where = str(path)
    else:
        where = "the report"
    out = dict(report)
    if "params" not in out:
        if "params_before" not in out:
            raise ValueError(
                f"{where} is not a pruning report: it has neither 'params' (this schema) nor "
                "'params_before' (reports before it)."
            )
        out["params"] = {"original": out["params_before"], "pruned": out.get("params_after")}
    name = out.get("metric")
    if name is None:
        name = next(
            (k[len("unpruned_") :] for k in out if k.startswith("unpruned_")),
            "perplexity" if isinstance(out.get("perplexity"), Mapping) else None,
        )
        if name is None:
            raise ValueError(
                f"{where} names no metric: expected 'metric' (this schema), "
                "'unpruned_<metric>' (classifier reports before it) or a 'perplexity' block."
            )
        out["metric"] = name
    if not isinstance(out.get(name), Mapping):
        out[name] = {
            stage: out.get(f"{old}_{name}")
            for stage, old in (("original", "unpruned"), ("masked", "masked"), ("pruned", "pruned"))
        }
    out["curve"] = [
        {**point, "metric": point[name]} if "metric" not in point and name in point else point
        for point in out.get("curve", [])
    ]
    return out

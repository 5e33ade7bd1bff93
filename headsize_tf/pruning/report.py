"""What the prune drivers show: plots, scores and decoding timing (tf_keras side).

* `plot_importance`, `plot_curves`, `plot_report`: importance heatmaps and
  pruning curves (a classifier's, a model_dir run's).
* `max_fraction_within`: the largest fraction pruned within a metric margin.
* `decoding_speed`, `decoding_speeds`: cached greedy decoding tokens/s of an LM or
  seq2seq (several side by side, interleaved).
* `json_scores` / `scores_from_json`: the score serialisation (NaN -> None),
  from `headsize_tf.core.prune_report`.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from headsize_tf.core.io import save_figure
from headsize_tf.core.prune_report import json_scores, scores_from_json

__all__ = [
    "decoding_speed",
    "decoding_speeds",
    "json_scores",
    "max_fraction_within",
    "plot_curves",
    "plot_importance",
    "plot_report",
    "scores_from_json",
]


def plot_importance(
    importance: np.ndarray,
    path: str | os.PathLike,
    title: str = "",
    row_labels: Sequence[str] | None = None,
) -> None:
    """A layers x heads heatmap (NaN: no such head); `row_labels` name the rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    extra = 1.5 if row_labels else 0.0
    fig, ax = plt.subplots(
        figsize=(1 + extra + 0.45 * importance.shape[1], 1 + 0.45 * importance.shape[0])
    )
    image = ax.imshow(importance, cmap="viridis", aspect="auto")
    ax.set(
        xlabel="head",
        ylabel="layer",
        title=title or "head importance (layer-normalised)",
        xticks=range(importance.shape[1]),
        yticks=range(importance.shape[0]),
    )
    if row_labels:
        ax.set_yticklabels(row_labels, fontsize=7)
    fig.colorbar(image, ax=ax)
    save_figure(fig, path)


def plot_curves(curves: dict[str, Sequence[dict]], path: str | os.PathLike, baseline=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, steps in curves.items():
        ax.plot(
            [100 * s["fraction"] for s in steps],
            [100 * s["metric"] for s in steps],
            "o-",
            label=label,
            ms=3,
        )
    if baseline is not None:
        ax.axhspan(
            100 * baseline - 1,
            100 * baseline,
            color="k",
            alpha=0.08,
            label="within 1 point of unpruned",
        )
    ax.set(xlabel="heads pruned (%)", ylabel="dev accuracy (%)")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def max_fraction_within(steps: Sequence[dict], points: float = 1.0) -> float:
    """Largest pruned fraction whose metric is within `points` of the unpruned one
    (and every smaller fraction too)."""
    base = steps[0]["metric"]
    best = 0.0
    for s in steps:
        if 100 * (base - s["metric"]) > points + 1e-9:
            break
        best = s["fraction"]
    return best


def decoding_speed(
    model,
    prompts: np.ndarray,
    new_tokens: int = 32,
    repeats: int = 3,
    source_ids: np.ndarray | None = None,
) -> float:
    """Generated tokens/s of cached greedy decoding (best of `repeats` after a warm-up);
    at most as many tokens as the model has positions left after the prompt.

    `model` is a `HeadsizeCausalLM`, or a `HeadsizeSeq2Seq` with `source_ids`
    (the cache then starts with the encoded source). `decoding_speeds` times
    several models side by side.
    """
    return decoding_speeds({"model": model}, prompts, new_tokens, repeats, source_ids)["model"]


def decoding_speeds(
    models: Mapping[str, Any],
    prompts: np.ndarray,
    new_tokens: int = 32,
    repeats: int = 3,
    source_ids: np.ndarray | None = None,
) -> dict[str, float]:
    """Cached greedy decoding tokens/s of several models, measured side by side.

    Every model decodes the same prompts (and sources) for the same number of
    tokens; after one warm-up run each, the timed runs are interleaved (model
    a, b, a, b, ...), so a slow spell of the machine hits all of them; each
    model's best run counts.

    Args:
      models: Name -> `HeadsizeCausalLM` (or `HeadsizeSeq2Seq` with `source_ids`).
      prompts: [B, P] prompt ids (a seq2seq: the decoder's start, e.g. [BOS]).
      new_tokens: Tokens generated per row (capped by the models' positions).
      repeats: Timed runs per model.
      source_ids: [B, S] source ids of encoder-decoder models.

    Returns:
      Name -> generated tokens per second.

    Example:

    >>> speeds = decoding_speeds({"original": lm, "grouped": grouped}, prompts, 16)
    >>> speeds["grouped"] / speeds["original"]
    """
    for model in models.values():
        limit = model.get_config().get("max_sequence_length")
        if limit:  # Positions past the model's last one do not exist.
            new_tokens = min(new_tokens, int(limit) - prompts.shape[1])
    if new_tokens < 1:
        raise ValueError(f"A prompt of {prompts.shape[1]} tokens leaves no position to decode.")

    def runner(model):
        step = tf.function(model.decode_step, reduce_retracing=True, autograph=False)

        def run():
            ids = tf.convert_to_tensor(prompts, tf.int32)
            if source_ids is None:
                cache = model.init_cache(tf.shape(ids)[0])
            else:
                cache = model.init_cache(tf.convert_to_tensor(source_ids, tf.int32))
            logits, cache = step(ids, cache, tf.constant(0))
            for t in range(new_tokens):
                next_id = tf.argmax(logits[:, -1], axis=-1, output_type=tf.int32)[:, tf.newaxis]
                logits, cache = step(next_id, cache, tf.constant(prompts.shape[1] + t))
            return logits

        return run

    runs = {name: runner(model) for name, model in models.items()}
    for run in runs.values():
        run().numpy()  # Warm-up: traces every step shape.
    best = dict.fromkeys(runs, np.inf)
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run().numpy()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: float(prompts.shape[0] * new_tokens / best[name]) for name in runs}


def plot_report(
    report: dict[str, Any],
    directory: str | os.PathLike,
    *,
    metric: str = "perplexity",
    label: str = "validation perplexity",
    scale: float = 1.0,
) -> None:
    """`importance.png` (heatmap, layers x heads; a translation model's kinds stacked) and
    `curve.png` (`scale * metric` vs heads pruned, and BLEU beside it when the curve has it)
    in `directory`, the output of a model_dir prune."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory = pathlib.Path(directory)
    importance = report["importance"]
    if isinstance(importance, dict):  # {kind: rows}: one heatmap, a row per layer and kind.
        rows = [row for kind in importance for row in importance[kind]]
        labels = [f"{kind} {i}" for kind in importance for i in range(len(importance[kind]))]
    else:
        rows, labels = importance, None
    scores = scores_from_json(rows)
    plot_importance(scores, directory / "importance.png", "head importance |dL/dxi_h|", labels)
    curve = report["curve"]
    bleu = "bleu" in curve[0]
    fig, axes = plt.subplots(1, 2 if bleu else 1, figsize=(11 if bleu else 6, 4))
    axes = list(np.atleast_1d(axes))
    fractions = [100 * c["fraction"] for c in curve]
    axes[0].plot(fractions, [scale * c[metric] for c in curve], "o-", ms=3)
    title = (
        f"decoding {report['decoding_speedup']:.2f}x faster after removal"
        if "decoding_speedup" in report
        else f"params {report['params']['original']:,} -> {report['params']['pruned']:,}"
    )
    axes[0].set(xlabel="heads pruned (%)", ylabel=label, title=title)
    if bleu:
        axes[1].plot(fractions, [c["bleu"] for c in curve], "o-", ms=3)
        axes[1].set(xlabel="heads pruned (%)", ylabel="validation BLEU (greedy)")
    save_figure(fig, directory / "curve.png")

"""The iterative pruning schedule run on a live model through its head mask."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from headsize_tf.core.io import check_output_free
from headsize_tf.core.pruning_plan import PruningStep, iterative_pruning

check_output = check_output_free  # the library's one "exists" check (`headsize_tf.core.io`)


def check_min_heads(min_heads_per_layer: int, model: str) -> None:
    """Physical removal keeps at least one head per attention layer of an LM or seq2seq."""
    if min_heads_per_layer < 1:
        raise ValueError(
            f"min_heads_per_layer must be at least 1 for {model}; got {min_heads_per_layer}."
        )


def split_config(params, split: str, seed: int | None = None):
    """The task's data config for `split` ("train" or "validation"). Training data gets a
    fixed shuffle seed (`seed`; default 0 unless the run set one), so importance is computed
    on the same batches at every call and in every rerun (Model Garden otherwise draws a
    new seed); another `seed` draws other training batches."""
    if split != "train":
        return params.task.validation_data
    config = params.task.train_data
    if seed is not None:
        return config.replace(seed=int(seed))
    return config.replace(seed=0) if getattr(config, "seed", None) is None else config


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
        )
    finally:
        set_mask(original)

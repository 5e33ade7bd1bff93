"""`ModelAdapter`: a trained model as the framework-neutral drivers see it.

The drivers (`core.prune_loop.prune_loop` today; converting attention to
grouped-query or latent K/V next) are numpy only. Each front wraps its models
(a tf_keras classifier, model_dir run, LM or translation model; a Keras 3
classifier) in an adapter: its attention layers with their kinds, a head-mask
setter, importance from its loss over its batches, a validation metric,
removal of masked heads, and save / reload.

Adapters of decoders with key/value groups also have `kv_groups()`: per
attention layer, the group of each mask slot (-1: no head), which
`PruneSchedule(unit="kv_group")` prunes whole.

Masks are `[attention layers, slots]` float arrays. A slot is a column of
the mask: `original_heads()[layer][slot]` is the head's number in the
unpruned model (the record a second pruning continues from), -1 where the
layer has no head in that slot (a narrower layer). A 0 entry is a pruned (or
removed) head; a slot without a head is 0 or NaN.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ModelAdapter(Protocol):
    """What a driver needs of a trained model, framework-neutral.

    Args:
      source: Where the model came from (a name, a checkpoint or a model_dir),
        for the report.
      metric_name: The key of `evaluate()`'s main metric ("accuracy",
        "perplexity").
      higher_is_better: Whether a larger metric is better.
      report_file: The report's file name inside a saved model.

    Example:

    >>> report = prune_loop(ClassifierAdapter(model, data), PruneSchedule(0.5, 0.1))
    >>> isinstance(adapter, ModelAdapter)
    True
    """

    source: str
    metric_name: str
    report_file: str

    def attention_kinds(self) -> list[str]:
        """One kind per attention layer, the mask's rows ("self", "encoder_self", ...)."""
        ...

    def original_heads(self) -> list[list[int]]:
        """Per attention layer, the original head number of each mask slot (-1: none)."""
        ...

    def head_mask(self) -> np.ndarray:
        """The current `[layers, slots]` gates (removed heads 0; no head: 0 or NaN)."""
        ...

    def set_head_mask(self, mask: np.ndarray) -> None:
        """Sets every layer's gates from a mask of `head_mask()`'s shape."""
        ...

    def head_importance(self) -> np.ndarray:
        """E|dL/dxi_h| of the adapter's loss over its importance batches under the
        current mask, `[layers, slots]` (NaN: no head)."""
        ...

    def evaluate(self) -> dict[str, float]:
        """Validation metrics under the current mask; `metric_name` among them."""
        ...

    def count_params(self) -> int:
        """Parameters of the pruned part (the encoder, or the whole model)."""
        ...

    def remove_heads(self, mask: np.ndarray) -> ModelAdapter:
        """A new adapter of the model without the heads whose mask entry is 0."""
        ...

    def save(
        self, output: str | os.PathLike, report: Mapping[str, Any], overwrite: bool = False
    ) -> pathlib.Path:
        """Writes the model and `report` (as `report_file`) to `output`, atomically."""
        ...

    def reload(self, path: str | os.PathLike) -> ModelAdapter:
        """The adapter of the model `save` wrote to `path` (same data, same metric)."""
        ...

"""The tf_keras half of every `core.model_adapter.ModelAdapter`: gates and importance.

A tf_keras model (a classifier over an encoder, a model_dir run, an LM, a
translation model) is pruned through its attention layers' gates; this base
class reads and sets them (`pruning.remove.head_mask`, one helper for every
model) and scores them by E|dL/dxi_h| of the model's loss over its importance
batches (`pruning.importance.mask_importance`). Subclasses add the metric,
removal and save / reload of their kind of model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from headsize_tf.pruning.importance import mask_importance
from headsize_tf.pruning.remove import head_mask, original_heads, set_head_mask


class KerasModelAdapter:
    """Gates and importance of a tf_keras model's attention layers (`ModelAdapter` base).

    Args:
      model: The model called on the batches (`model(inputs, training=False)`).
      attention: The module holding the attention layers (an encoder inside a
        classifier; default `model`).
      loss: `loss(targets, outputs)` -> the batch's scalar loss.
      importance_data: `(inputs, targets)` batches of the importance.
      source: Where the model came from (the report's `source`).
      kinds: One attention kind per layer (default "self" for all).

    Example:

    >>> adapter = LanguageModelAdapter(lm, data, "runs/lm")
    >>> adapter.set_head_mask(adapter.head_mask() * 0 + 1)
    """

    metric_name = "accuracy"
    report_file = "report.json"

    def __init__(
        self,
        model: Any,
        attention: Any,
        loss: Callable[[Any, Any], Any],
        importance_data: Sequence[tuple[Any, Any]],
        source: str,
        kinds: Sequence[str] | None = None,
    ):
        self.model = model
        self.attention = model if attention is None else attention
        self.loss = loss
        self.importance_data = importance_data
        self.source = str(source)
        self._kinds = list(kinds) if kinds is not None else None

    def attention_kinds(self) -> list[str]:
        return self._kinds or ["self"] * len(self.head_mask())

    def original_heads(self) -> list[list[int]]:
        return original_heads(self.attention)

    def head_mask(self) -> np.ndarray:
        return head_mask(self.attention)

    def set_head_mask(self, mask: np.ndarray) -> None:
        set_head_mask(self.attention, mask)

    def head_importance(self) -> np.ndarray:
        return mask_importance(self.model, self.importance_data, self.loss, self.attention)

    def count_params(self) -> int:
        return int(self.attention.count_params())

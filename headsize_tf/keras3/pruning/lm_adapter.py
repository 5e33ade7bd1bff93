"""A Keras 3 causal LM as the pruning driver's `ModelAdapter`: its own next-token loss, perplexity.

`LMAdapter` serves `headsize_tf.core.prune_loop` for any Keras 3 LM the
library builds (`CausalLM`, `DecoderLM`): importance E|dL/dxi_h| of the
next-token loss on training windows, held-out perplexity as the metric,
physical head removal (`remove_heads`: whole K/V groups for grouped
attention) and `.keras` saving. The keras-hub bridge's GPT-2 adapter derives
from it and saves in keras-hub's layout instead.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import keras
import numpy as np

from headsize_tf.core.io import atomic_directory
from headsize_tf.keras3.layers.roles import kind_of
from headsize_tf.keras3.lm_training import windows_perplexity
from headsize_tf.keras3.pruning.importance import head_importance
from headsize_tf.keras3.pruning.remove import head_mask, remove_heads, set_head_mask

REPORT_FILE = "report.json"
MODEL_FILE = "model.keras"


def _batches(windows: np.ndarray, batch_size: int):
    for start in range(0, len(windows), batch_size):
        batch = windows[start : start + batch_size]
        yield batch[:, :-1], batch[:, 1:]


class LMAdapter:
    """A Keras 3 causal LM as a `ModelAdapter` (see the module docstring).

    Args:
      lm: The model (`CausalLM`, `DecoderLM`).
      importance_windows: int32 `[N, length + 1]` windows of the importance.
      eval_windows: int32 `[M, length + 1]` windows of the perplexity.
      batch_size: Windows per batch.
      source: Where the model came from (reports).

    Example:

    >>> prune_loop(LMAdapter(lm, train_windows, dev_windows), PruneSchedule(0.3), "pruned")
    """

    metric_name = "perplexity"
    report_file = REPORT_FILE

    def __init__(
        self,
        lm: Any,
        importance_windows: np.ndarray,
        eval_windows: np.ndarray,
        batch_size: int = 8,
        source: str = "",
    ):
        for name, windows in (("importance", importance_windows), ("evaluation", eval_windows)):
            if len(windows) == 0:
                raise ValueError(
                    f"No {name} windows: the text has fewer tokens than one window "
                    f"({np.shape(windows)[1]} tokens)."
                )
        self.lm = lm
        self.importance_windows, self.eval_windows = importance_windows, eval_windows
        self.batch_size = batch_size
        self.source = source

    def attention_kinds(self) -> list[str]:
        return ["self"] * len(self.lm.attention_layers)

    def original_heads(self) -> list[list[int]]:
        return [
            [h if np.isfinite(v) else -1 for h, v in enumerate(row)] for row in self.head_mask()
        ]

    def head_mask(self) -> np.ndarray:
        return head_mask(self.lm)

    def kv_groups(self) -> list[list[int]]:
        """Per layer, the key/value group of each mask slot (-1: no head); a multi-head
        layer's heads are a group each, a latent layer's groups are those of its rotary
        keys when it has several (`PruneSchedule(unit="kv_group")`)."""
        width = self.head_mask().shape[1]
        rows = []
        for i, layer in enumerate(self.lm.attention_layers):
            kind = kind_of(layer)
            rotary_keys = layer.num_rope_heads if kind == "latent" else None
            if kind not in ("standard", "fixed_head", "grouped") and not (rotary_keys or 0) > 1:
                latent = {1: " with one rotary key", None: " without rotary keys"}
                raise ValueError(
                    f"Layer {i} has {kind} attention"
                    f"{latent[rotary_keys] if kind == 'latent' else ''}; whole key/value "
                    "groups are pruned in grouped, multi-head or multi-rotary-key latent layers."
                )
            heads = layer.num_heads
            size = heads // (rotary_keys or getattr(layer, "num_kv_heads", heads))
            rows.append([slot // size if slot < heads else -1 for slot in range(width)])
        return rows

    def set_head_mask(self, mask: np.ndarray) -> None:
        set_head_mask(self.lm, np.nan_to_num(np.asarray(mask, np.float32), nan=0.0))

    def head_importance(self) -> np.ndarray:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        data = _batches(self.importance_windows, self.batch_size)
        return head_importance(self.lm, data, loss)

    def evaluate(self) -> dict[str, float]:
        return {"perplexity": windows_perplexity(self.lm, self.eval_windows, self.batch_size)}

    def count_params(self) -> int:
        return int(self.lm.count_params())

    def remove_heads(self, mask: np.ndarray) -> LMAdapter:
        return self._like(remove_heads(self.lm, mask))

    def _like(self, lm: Any) -> LMAdapter:
        return LMAdapter(
            lm, self.importance_windows, self.eval_windows, self.batch_size, self.source
        )

    def save(self, output, report, overwrite: bool = False) -> pathlib.Path:
        with atomic_directory(output, overwrite=overwrite) as written:
            self.lm.save(written / MODEL_FILE)
            (written / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
        return pathlib.Path(output)

    def reload(self, path: str | os.PathLike) -> LMAdapter:
        return self._like(keras.saving.load_model(pathlib.Path(path) / MODEL_FILE))

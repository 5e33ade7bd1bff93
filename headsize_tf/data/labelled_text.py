"""A labelled text classification task (`TextTask`) and the error for bad task data.

`text_tasks` builds one from a file, TFDS GLUE or the built-in data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

Text = str | tuple[str, str]


class TextTaskError(ValueError):
    """A task file or TFDS task that cannot be read as labelled text (one-line message)."""


@dataclasses.dataclass(frozen=True)
class TextTask:
    """A labelled text classification task: train and dev examples.

    Attributes:
      source: Where the rows came from (a file path or `tfds:glue/NAME`).
      text_columns: One column, or two for sentence pairs.
      label_names: Label of each id (`label_names[i]` is class `i`).
      train_texts: Texts (str), or (text, pair text) tuples for pairs.
      train_labels: int32 class ids, one per train text.
      dev_texts: As `train_texts`, for the dev split.
      dev_labels: As `train_labels`, for the dev split.
      split_rule: How rows were split (for reports).
      test_rows: Rows of the test split, left out.

    Example:
      >>> ids = lambda *xs: np.asarray(xs, np.int32)
      >>> task = TextTask("demo", ("text",), ("neg", "pos"), ["bad", "good"], ids(0, 1),
      ...                 ["fine"], ids(1))
      >>> task.label_map, task.num_classes
      ({'neg': 0, 'pos': 1}, 2)
    """

    source: str
    text_columns: tuple[str, ...]
    label_names: tuple[str, ...]
    train_texts: list[Text]
    train_labels: np.ndarray
    dev_texts: list[Text]
    dev_labels: np.ndarray
    split_rule: str = ""
    test_rows: int = 0

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @property
    def label_map(self) -> dict[str, int]:
        """{label: class id}."""
        return {name: i for i, name in enumerate(self.label_names)}

    def splits(self) -> dict[str, tuple[list[Text], np.ndarray]]:
        """{"train": (texts, labels), "dev": (texts, labels)}."""
        return {
            "train": (self.train_texts, self.train_labels),
            "dev": (self.dev_texts, self.dev_labels),
        }

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (source, columns, label map, split sizes)."""
        return {
            "source": self.source,
            "text_columns": list(self.text_columns),
            "label_map": self.label_map,
            "split_rule": self.split_rule,
            "train_examples": len(self.train_texts),
            "dev_examples": len(self.dev_texts),
            "test_rows_left_out": self.test_rows,
        }

"""Keras Tuner for Keras 3 models: a native `HyperModel` over the attention spec."""

from headsize_tf.core.search_space import SearchSpace, SearchSpaceError
from headsize_tf.keras3.tuning.hypermodel import ClassifierHyperModel, OverBudgetError

__all__ = ["ClassifierHyperModel", "OverBudgetError", "SearchSpace", "SearchSpaceError"]

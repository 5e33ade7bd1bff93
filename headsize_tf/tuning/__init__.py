"""Keras Tuner search over heads, head size and shared key dim (`headsize-tf tune`)."""

from headsize_tf.core.search_space import HYPERPARAMETERS
from headsize_tf.tuning.search import (
    HeadsizeBayesianOptimization,
    HeadsizeHyperband,
    HeadsizeHyperModel,
    HeadsizeRandomSearch,
    SearchSpace,
    SearchSpaceError,
    count_params,
    tune,
)

__all__ = [
    "HYPERPARAMETERS",
    "HeadsizeBayesianOptimization",
    "HeadsizeHyperModel",
    "HeadsizeHyperband",
    "HeadsizeRandomSearch",
    "SearchSpace",
    "SearchSpaceError",
    "count_params",
    "tune",
]

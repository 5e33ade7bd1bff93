"""Keras Tuner search over heads, head size and shared key dim (`headsize-tf tune`)."""

from headsize_tf.tuning.search import (
    HYPERPARAMETERS,
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

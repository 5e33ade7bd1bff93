"""Keras Tuner search over heads, head size and shared key dim (`headsize-tf tune`)."""

from headsize_tf.core.search_space import HYPERPARAMETERS, check_space
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
from headsize_tf.tuning.settings import (
    SETTINGS_FILE,
    TuneError,
    default_objective,
    metric_names,
)

__all__ = [
    "HYPERPARAMETERS",
    "SETTINGS_FILE",
    "HeadsizeBayesianOptimization",
    "HeadsizeHyperModel",
    "HeadsizeHyperband",
    "HeadsizeRandomSearch",
    "SearchSpace",
    "SearchSpaceError",
    "TuneError",
    "check_space",
    "count_params",
    "default_objective",
    "metric_names",
    "tune",
]

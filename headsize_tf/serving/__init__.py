"""Serving export (`headsize-tf export`)."""

from headsize_tf.serving.export import (
    TASKS,
    ServingModule,
    experiment_classifier,
    experiment_language_model,
    export,
)

__all__ = ["TASKS", "ServingModule", "experiment_classifier", "experiment_language_model", "export"]

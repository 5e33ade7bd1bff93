"""Serving export (`headsize-tf export`)."""

from headsize_tf.serving.export import TASKS, ServingModule, experiment_classifier, export

__all__ = ["TASKS", "ServingModule", "experiment_classifier", "export"]

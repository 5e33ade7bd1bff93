"""Serving export (`headsize-tf export`)."""

from headsize_tf.serving.export import TASKS, ServingModule, export

__all__ = ["TASKS", "ServingModule", "export"]

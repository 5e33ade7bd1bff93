"""Serving export (`headsize-tf export`)."""

from headsize_tf.serving.export import (
    TASKS,
    ServingModule,
    experiment_classifier,
    experiment_language_model,
    experiment_sentence_encoder,
    export,
)
from headsize_tf.serving.translation import TranslationServingModule, experiment_translator

__all__ = [
    "TASKS",
    "ServingModule",
    "TranslationServingModule",
    "experiment_classifier",
    "experiment_language_model",
    "experiment_sentence_encoder",
    "experiment_translator",
    "export",
]

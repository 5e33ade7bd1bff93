"""The exported graph of a Keras 3 sentence encoder or classifier: text in, vectors or scores out."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from headsize_tf.data.serving_export import IDS_SPEC, MASK_SPEC, TEXT_SPEC
from headsize_tf.keras3.pretrained import SentenceEncoder

TASKS = ("embedding", "sentence_prediction")


def require_tensorflow_backend(what: str) -> None:
    """Raises RuntimeError unless Keras 3 runs on TensorFlow (a SavedModel is a TF graph)."""
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise RuntimeError(
            f"{what} builds a TensorFlow graph from the Keras 3 model, so it needs "
            f"KERAS_BACKEND=tensorflow; this process runs {backend}. Use the export_* functions "
            "of headsize_tf.keras3.serving, which rebuild the model on TensorFlow in a subprocess."
        )


class EncoderServingModule(tf.Module):
    """A Keras 3 `SentenceEncoder` (and classifier) as a `tf.Module` to export.

    The Keras 3 counterpart of `headsize_tf.serving.ServingModule` for
    encoders, with the same signatures and outputs: `serve_text` (raw
    strings, WordPiece tokenisation inside the graph; the vocabulary is a
    SavedModel asset) and `serve_ids` (int32 `input_word_ids` and
    `input_mask`). "embedding" -> `embeddings` [batch, width] (the encoder's
    pooling and normalisation); "sentence_prediction" -> `logits` and
    `probabilities` [batch, classes]. The models' variables are tracked as
    Keras' own `model.export` tracks them (a list), so the head gates of our
    attention layers are saved too. Needs the TensorFlow backend.

    Args:
      encoder: The `SentenceEncoder`: tokenizer, backbone, pooling.
      task: "embedding" or "sentence_prediction".
      classifier: For "sentence_prediction": a Keras 3 model mapping the
        backbone's inputs (`token_ids`, `segment_ids`, `padding_mask`) to
        logits, e.g. `headsize_tf.keras3.pruning.classifier.load_classifier(DIR)`.

    Example:

    >>> module = EncoderServingModule(encoder, "embedding")
    >>> export(module, "/tmp/export")  # headsize_tf.data.serving_export.export

    References:
      - TF Serving's SavedModel layout,
        https://www.tensorflow.org/tfx/serving/serving_basic
    """

    def __init__(
        self,
        encoder: SentenceEncoder,
        task: str = "embedding",
        classifier: keras.Model | None = None,
    ):
        super().__init__(name="headsize_keras3_serving")
        require_tensorflow_backend("EncoderServingModule")
        if task not in TASKS:
            raise ValueError(f"Unknown export task {task!r}; expected one of {list(TASKS)}.")
        if task == "sentence_prediction" and classifier is None:
            raise ValueError("task 'sentence_prediction' needs a model (`classifier`).")
        # The Keras objects stay untracked (Keras 3 tracks its state its own way); what
        # the graph reads is tracked below: the vocabulary asset and every variable.
        object.__setattr__(self, "encoder", encoder)
        object.__setattr__(self, "classifier", classifier)
        self.wordpiece = encoder.tokenizer
        models = [encoder.backbone] + ([classifier] if task == "sentence_prediction" else [])
        self.model_variables = [v for model in models for v in model.variables]
        self.task = task
        self._length = min(encoder.max_seq_length, encoder.backbone.max_sequence_length)

    def _outputs(self, word_ids: tf.Tensor, mask: tf.Tensor) -> dict[str, tf.Tensor]:
        inputs: dict[str, Any] = {
            "token_ids": word_ids,
            "segment_ids": tf.zeros_like(word_ids),
            "padding_mask": mask,
        }
        if self.task == "embedding":
            return {"embeddings": tf.cast(self.encoder.embed_inputs(inputs), tf.float32)}
        logits = tf.cast(self.classifier(inputs, training=False), tf.float32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def serve_text(self, text):
        inputs = self.wordpiece.tokenize(text, self._length)
        return self._outputs(inputs["input_word_ids"], inputs["input_mask"])

    @tf.function(input_signature=[IDS_SPEC, MASK_SPEC], autograph=False)
    def serve_ids(self, input_word_ids, input_mask):
        return self._outputs(input_word_ids, input_mask)

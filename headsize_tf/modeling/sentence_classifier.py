"""A sentence classifier: encoder, mean pooling, dropout and a linear layer."""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from headsize_tf.layers.autograph import without_autograph
from headsize_tf.modeling.sentence_encoder import SentenceEncoder


@without_autograph
class SentenceClassifier(tf_keras.Model):
    """Encoder -> mean pooling -> dropout -> Dense(num_classes) logits.

    Mean pooling over the attention mask is how sentence-transformers models
    are trained; the encoder's CLS pooler is not used (and not trained).

    Args:
      sentence_encoder: A `SentenceEncoder` (its `encoder` is fine-tuned).
      num_classes: Number of labels.
      dropout: Dropout rate before the linear layer.
    """

    def __init__(self, sentence_encoder: SentenceEncoder, num_classes: int, dropout: float = 0.1):
        super().__init__(name="sentence_classifier")
        self.sentence_encoder = sentence_encoder
        self.encoder = sentence_encoder.encoder
        self.dropout = tf_keras.layers.Dropout(dropout)
        self.head = tf_keras.layers.Dense(
            num_classes,
            kernel_initializer=tf_keras.initializers.TruncatedNormal(stddev=0.02),
            name="classifier",
        )

    def call(self, inputs, training=False):
        outputs = self.encoder(inputs, training=training)
        weights = tf.cast(inputs["input_mask"], outputs["sequence_output"].dtype)[..., None]
        pooled = tf.reduce_sum(outputs["sequence_output"] * weights, axis=1) / tf.maximum(
            tf.reduce_sum(weights, axis=1), 1.0
        )
        return self.head(self.dropout(pooled, training=training))

"""Learned absolute position embeddings (as BERT's)."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class PositionEmbedding(keras.layers.Layer):
    """A learned embedding of each position of a sequence.

    Takes a `[batch, length, width]` tensor and returns the embeddings of
    positions `0 .. length - 1` broadcast to its shape (only the shape of the
    input is used). `length` may be anything up to `sequence_length`.

    This layer does not consume or propagate a mask; combine it with a token
    embedding whose mask is handled downstream.

    Args:
      sequence_length: The most positions an input can have (an int).
      initializer: Initializer of the `[sequence_length, width]` table.
      **kwargs: Base layer arguments (`name`, `dtype`, `trainable`, ...).

    Example:

    >>> tokens = keras.layers.Embedding(100, 16)(keras.Input((None,), dtype="int32"))
    >>> positions = PositionEmbedding(sequence_length=128)(tokens)

    References:
      - Devlin et al., 2019, "BERT", https://arxiv.org/abs/1810.04805
    """

    def __init__(self, sequence_length: int, initializer: Any = "glorot_uniform", **kwargs: Any):
        super().__init__(**kwargs)
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, int):
            raise ValueError(f"sequence_length must be a positive int; got {sequence_length!r}.")
        if sequence_length <= 0:
            raise ValueError(f"sequence_length must be a positive int; got {sequence_length!r}.")
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer)

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, inputs_shape[-1]),
            initializer=self.initializer,
            trainable=True,
        )
        self.built = True

    def call(self, inputs):
        shape = ops.shape(inputs)
        table = ops.convert_to_tensor(self.position_embeddings)
        positions = ops.slice(table, (0, 0), (shape[-2], shape[-1]))
        return ops.broadcast_to(ops.cast(positions, self.compute_dtype), shape)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config

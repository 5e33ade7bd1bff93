"""The Keras 3 front: headsize_tf's attention layers for `import keras` models.

`headsize_tf.keras3.layers` mirrors `headsize_tf.layers` (tf_keras / Keras 2)
layer for layer, with the same arguments, validation messages and weight
layout, written with `keras.ops` only so it runs on every Keras 3 backend
(TensorFlow and JAX are tested). Both fronts share the framework-neutral
`headsize_tf.core` (`AttentionSpec`, parameter formulas, pruning plans).
`headsize_tf.keras3.hub` brings keras-hub's BERT, DistilBERT and GPT-2 into
the Keras 3 tools (the optional `hub` extra).
"""

from headsize_tf.keras3 import layers

__all__ = ["layers"]

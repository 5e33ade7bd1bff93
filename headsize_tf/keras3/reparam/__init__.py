"""Keras 3 collaborative-head conversion (Cordonnier et al., 2020), via `headsize_tf.core.convert`."""

from headsize_tf.keras3.reparam.compress import compress, mean_cosine
from headsize_tf.keras3.reparam.convert import compress_backbone, to_collaborative

__all__ = ["compress", "compress_backbone", "mean_cosine", "to_collaborative"]

"""Keras 3 head-sharing conversion: collaborative heads (Cordonnier et al., 2020), grouped-query
key/value heads (Ainslie et al., 2023) and a shared key/value latent (MLA), on one driver
(`convert_model` over `headsize_tf.core.conversion.ConversionTarget`)."""

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.keras3.reparam.compress import compress, mean_cosine
from headsize_tf.keras3.reparam.convert import compress_backbone, convert_model, to_collaborative

__all__ = [
    "ConversionTarget",
    "compress",
    "compress_backbone",
    "convert_model",
    "mean_cosine",
    "to_collaborative",
]

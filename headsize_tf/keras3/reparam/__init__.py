"""Keras 3 head-sharing conversion: collaborative heads (Cordonnier et al., 2020), grouped-query
key/value heads (Ainslie et al., 2023) and a shared key/value latent (MLA), on one driver
(`convert_model` over `headsize_tf.core.conversion.ConversionTarget`); `convert_lm_file` converts
a saved `.keras` CausalLM (`headsize-tf convert --framework keras3`)."""

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.keras3.reparam.calibration import CalibrationStats, calibration_stats
from headsize_tf.keras3.reparam.compress import compress, mean_cosine
from headsize_tf.keras3.reparam.convert import compress_backbone, convert_model, to_collaborative
from headsize_tf.keras3.reparam.kv_compress import KVPlan, allocate_by_sensitivity, compress_kv
from headsize_tf.keras3.reparam.lm_file import convert_lm_file

__all__ = [
    "CalibrationStats",
    "KVPlan",
    "calibration_stats",
    "compress_kv",
    "ConversionTarget",
    "compress",
    "compress_backbone",
    "convert_lm_file",
    "convert_model",
    "allocate_by_sensitivity",
    "mean_cosine",
    "to_collaborative",
]

"""Post-hoc re-parametrisation of trained attention into collaborative heads.

* `cp`: CP decomposition of the stacked per-head query-key products (a fast
  structured ALS, exact construction at full rank, tensorly's `parafac`).
* `convert`: one attention layer -> `CollaborativeAttention`.
* `encoder`: a whole `HeadsizeBertEncoder` (`headsize-tf compress`).
"""

from headsize_tf.core.cp import CPResult, head_products_cp, tensorly_cp
from headsize_tf.reparam.convert import ConversionReport, convert_layer_weights, to_collaborative
from headsize_tf.reparam.encoder import compress_encoder

__all__ = [
    "CPResult",
    "ConversionReport",
    "compress_encoder",
    "convert_layer_weights",
    "head_products_cp",
    "tensorly_cp",
    "to_collaborative",
]

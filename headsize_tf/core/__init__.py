"""The framework-neutral core (numpy / pure Python; no TensorFlow, no Keras).

Both fronts, `headsize_tf` on tf_keras and the Keras 3 one, build on it:

* `spec`: `AttentionSpec`, the one description of an attention layer's heads
  (kind, heads, head size, value head size, shared key dim), its validation
  and its resolution to concrete sizes.
* `params`: parameter formulas of layers, encoders and LMs; parameter matching.
* `cp`: CP decomposition of stacked per-head W_Q W_K^T (collaborative heads).
* `kv_sharing`: multi-head -> grouped-query (mean pooling, per-group SVD) and
  shared-latent (joint SVD) key/value weights, biases exact.
* `kv_cache`: the decoding cache's bytes per token of every kind.
* `pruning_plan`: importance normalisation, iterative pruning schedules and
  head-index slicing plans.
* `io`: atomic file writes and the cache root.

Kernel layout (every kernel in and out of the core): the Keras
`EinsumDense` layout of `MultiHeadAttention`. Query / key / value kernels are
`[width, heads, head_size]` with biases `[heads, head_size]`; the output
kernel is `[heads, value_head_size, width]` with bias `[width]`. A
collaborative layer's shared query / key kernels are `[width, D]`, its mixing
matrix `[heads, D]` and its content bias `[key_width, heads]`.
"""

from headsize_tf.core.spec import (
    KINDS,
    SEQUENCE_LENGTH,
    AttentionSpec,
    ResolvedAttention,
    SpecError,
)

__all__ = ["KINDS", "SEQUENCE_LENGTH", "AttentionSpec", "ResolvedAttention", "SpecError"]

"""Theory of the head-size bottleneck (Bhojanapalli et al., 2020)."""

from headsize_tf.theory.theorem1 import (
    attention_matrix,
    construct_heads,
    fit_attention,
    random_stochastic,
    required_head_size,
)

__all__ = [
    "attention_matrix",
    "construct_heads",
    "fit_attention",
    "random_stochastic",
    "required_head_size",
]

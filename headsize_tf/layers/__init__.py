"""Attention layers whose head size and head sharing are explicit knobs.

* `StandardAttention`: head size = width // heads (the usual rule).
* `FixedHeadAttention`: head size fixed independently of width and heads
  (Bhojanapalli et al., 2020).
* `CollaborativeAttention`: heads share one query/key projection and mix its
  dimensions (Cordonnier et al., 2020).
* `GroupedAttention`: groups of query heads share one key/value head
  (grouped-query attention, Ainslie et al., 2023; multi-query for one group).
* `LatentAttention`: keys and values are per-head up-projections of one
  cached latent (DeepSeek-V2's multi-head latent attention, without RoPE).
* `HeadAttentionBase`: their shared base (head gates, decoding cache); the
  protocol the pruning and reparametrisation tools use.
"""

from headsize_tf.layers.collaborative_attention import CollaborativeAttention, ConcatenateMixing
from headsize_tf.layers.fixed_head_attention import FixedHeadAttention
from headsize_tf.layers.grouped_attention import GroupedAttention
from headsize_tf.layers.head_attention import HeadAttentionBase
from headsize_tf.layers.latent_attention import LatentAttention
from headsize_tf.layers.standard_attention import StandardAttention

__all__ = [
    "CollaborativeAttention",
    "ConcatenateMixing",
    "FixedHeadAttention",
    "GroupedAttention",
    "HeadAttentionBase",
    "LatentAttention",
    "StandardAttention",
]

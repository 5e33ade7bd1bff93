"""Keras 3 attention layers whose head size and head sharing are explicit knobs.

The `import keras` mirror of `headsize_tf.layers` (tf_keras), backend-agnostic
(`keras.ops` only):

* `StandardAttention`: head size = width // heads (the usual rule).
* `FixedHeadAttention`: head size fixed independently of width and heads
  (Bhojanapalli et al., 2020).
* `CollaborativeAttention`: heads share one query/key projection and mix its
  dimensions (Cordonnier et al., 2020).
* `GroupedAttention`: grouped-query attention, `num_kv_heads` key/value heads
  shared by groups of query heads (Ainslie et al., 2023).
* `LatentAttention`: keys and values up-projected from one shared latent per
  position (DeepSeek-V2's MLA), with the absorbed decoding path.
* `HeadAttentionBase`: their shared base (head gates, decoding cache).

`factory.make_attention(spec)` builds the layer of an `AttentionSpec`.
"""

from headsize_tf.keras3.layers.collaborative_attention import (
    CollaborativeAttention,
    ConcatenateMixing,
)
from headsize_tf.keras3.layers.fixed_head_attention import FixedHeadAttention
from headsize_tf.keras3.layers.grouped_attention import GroupedAttention
from headsize_tf.keras3.layers.head_attention import HeadAttentionBase
from headsize_tf.keras3.layers.latent_attention import LatentAttention
from headsize_tf.keras3.layers.standard_attention import StandardAttention

__all__ = [
    "CollaborativeAttention",
    "ConcatenateMixing",
    "FixedHeadAttention",
    "GroupedAttention",
    "HeadAttentionBase",
    "LatentAttention",
    "StandardAttention",
]

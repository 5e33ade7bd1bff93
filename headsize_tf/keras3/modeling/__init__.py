"""Keras 3 models whose attention is any `AttentionSpec` (backend-agnostic).

* `TransformerEncoder`: keras-hub's encoder block with `attention` (a spec)
  in place of `num_heads`; post-LN by default.
* `BertBackbone`: keras-hub's BERT backbone (same inputs and outputs) built
  from such blocks, with per-layer head counts and sizes.
* `CausalLM`: a GPT-style causal LM (pre-LN blocks, tied logits), the
  counterpart of the tf_keras `HeadsizeCausalLM`.
* `DecoderLM`: a Llama-shaped causal LM (RoPE, RMSNorm, gated
  feed-forward, grouped K/V, tied or untied output; Llama, Mistral, Qwen,
  SmolLM), built from `DecoderBlock`s.
* `PositionEmbedding`: learned absolute positions; `RMSNorm`.
"""

from headsize_tf.keras3.modeling.activations import gelu_approximate
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone
from headsize_tf.keras3.modeling.causal_lm import CausalLM
from headsize_tf.keras3.modeling.decoder_block import DecoderBlock
from headsize_tf.keras3.modeling.decoder_lm import DecoderLM
from headsize_tf.keras3.modeling.position_embedding import PositionEmbedding
from headsize_tf.keras3.modeling.rms_norm import RMSNorm
from headsize_tf.keras3.modeling.transformer_encoder import TransformerEncoder

__all__ = [
    "BertBackbone",
    "CausalLM",
    "DecoderBlock",
    "DecoderLM",
    "PositionEmbedding",
    "RMSNorm",
    "TransformerEncoder",
    "gelu_approximate",
]

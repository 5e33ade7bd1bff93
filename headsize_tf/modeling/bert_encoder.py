"""BERT-style encoder whose attention kind and head size are configurable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tf_keras
from official.modeling import tf_utils
from official.nlp.modeling import networks

from headsize_tf.modeling.transformer_block import HeadsizeTransformerBlock


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class HeadsizeBertEncoder(networks.BertEncoderV2):
    """Model Garden's `BertEncoderV2` with standard, fixed-head or collaborative attention.

    Same embeddings, post-LN (or pre-LN) Transformer blocks, pooler, inputs
    (`input_word_ids`, `input_mask`, `input_type_ids`) and outputs
    (`sequence_output`, `pooled_output`, `encoder_outputs`) as `BertEncoderV2`,
    so `BertClassifier`, `BertPretrainerV2` and `BertSpanLabeler` use it
    unchanged. The blocks are `HeadsizeTransformerBlock`s. Unlike Model
    Garden's `EncoderScaffold` with a custom attention class, this encoder
    restores from its config (registered as `headsize_tf>HeadsizeBertEncoder`)
    and from checkpoints.

    Args:
      vocab_size: Vocabulary size.
      hidden_size: Width `d`.
      num_layers: Number of Transformer blocks.
      num_attention_heads: Heads per block `h`.
      attention_type: "standard" (head size d/h), "fixed_head" or "collaborative".
      head_size: fixed_head: head size (int or "sequence_length", which
        needs static-length inputs); collaborative: optional value head size.
      shared_key_dim: collaborative: shared query/key size `D`.
      mixing_initializer: collaborative: mixing initializer.
      inner_activation: FFN activation; "gelu" (exact erf GELU, as in BERT
        checkpoints) by default.
      pruned_heads: Per layer, the indices of heads removed by pruning
        (`headsize_tf.pruning.remove_heads` fills it); None keeps all heads.
      **kwargs: Other `BertEncoderV2` arguments (`max_sequence_length`,
        `type_vocab_size`, `inner_dim`, `output_dropout`,
        `attention_dropout`, `initializer`, `embedding_width`, `norm_first`,
        `output_range`, `return_attention_scores`, ...).

    Example:

    >>> encoder = HeadsizeBertEncoder(vocab_size=100, hidden_size=64, num_layers=2,
    ...     num_attention_heads=8, attention_type="fixed_head", head_size=32, inner_dim=128)
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int = 768,
        num_layers: int = 12,
        num_attention_heads: int = 12,
        attention_type: str = "standard",
        head_size: int | str | None = None,
        shared_key_dim: int | None = None,
        mixing_initializer: Any = "uniform",
        inner_activation: Any = "gelu",
        pruned_heads: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ):
        if pruned_heads is not None and len(pruned_heads) != num_layers:
            raise ValueError(
                f"pruned_heads has {len(pruned_heads)} entries; expected one list per layer "
                f"({num_layers})."
            )
        pruned = [sorted(int(h) for h in heads) for heads in (pruned_heads or [])]
        super().__init__(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            num_attention_heads=num_attention_heads,
            inner_activation=inner_activation,
            **kwargs,
        )
        config = self._config
        initializer = tf_keras.initializers.get(config["initializer"])
        self._transformer_layers = [
            HeadsizeTransformerBlock(
                attention_type=attention_type,
                head_size=head_size,
                shared_key_dim=shared_key_dim,
                mixing_initializer=mixing_initializer,
                pruned_heads=pruned[i] if pruned else (),
                num_attention_heads=num_attention_heads,
                inner_dim=config["inner_dim"],
                inner_activation=inner_activation,
                output_dropout=config["output_dropout"],
                attention_dropout=config["attention_dropout"],
                norm_first=config["norm_first"],
                return_attention_scores=config["return_attention_scores"],
                kernel_initializer=tf_utils.clone_initializer(initializer),
                name=f"transformer/layer_{i}",
            )
            for i in range(num_layers)
        ]
        self._config.update(
            {
                "attention_type": attention_type,
                "head_size": head_size,
                "shared_key_dim": shared_key_dim,
                "mixing_initializer": mixing_initializer,
                "pruned_heads": pruned or None,
            }
        )

    @property
    def attention_layers(self) -> list:
        """The attention layer of each block (built after the first call)."""
        return [block.attention_layer for block in self._transformer_layers]

    def build_weights(self) -> HeadsizeBertEncoder:
        """Creates every weight (one call on a dummy batch); returns self."""
        if not self.built or not self.weights:
            ids = np.zeros([1, 2], np.int32)
            self({"input_word_ids": ids, "input_mask": ids + 1, "input_type_ids": ids})
        return self

    def non_attention_layers(self) -> list[tf_keras.layers.Layer]:
        """The weight-carrying sub-layers other than attention, in a fixed order.

        Two encoders of the same shape but different attention kinds have the
        same list, which is how conversions copy everything but attention.
        """
        layers = [
            self._embedding_layer,
            self._position_embedding_layer,
            self._type_embedding_layer,
            self._embedding_norm_layer,
        ]
        if self._embedding_projection is not None:
            layers.append(self._embedding_projection)
        for block in self._transformer_layers:
            layers.append(block._attention_layer_norm)
            if getattr(block, "_attention_layer_norm_kv", None) is not None:
                layers.append(block._attention_layer_norm_kv)
            layers += [block._intermediate_dense, block._output_dense, block._output_layer_norm]
        layers.append(self._pooler_layer)
        return layers

    def copy_non_attention_weights(self, source: HeadsizeBertEncoder) -> None:
        """Copies embeddings, LayerNorms, FFNs and pooler from `source`."""
        self.build_weights()
        source.build_weights()
        mine, theirs = self.non_attention_layers(), source.non_attention_layers()
        if len(mine) != len(theirs):
            raise ValueError(
                f"Encoders differ in structure: {len(theirs)} non-attention layers in the source, "
                f"{len(mine)} here."
            )
        for dst, src in zip(mine, theirs, strict=True):
            dst.set_weights(src.get_weights())


def plain_config(value: Any) -> Any:
    """A JSON-able copy of a Keras config (tracking wrappers become dicts/lists)."""
    if isinstance(value, Mapping):
        return {str(k): plain_config(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [plain_config(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value

"""BERT-style encoder whose attention kind and head size are configurable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tf_keras
from official.modeling import tf_utils
from official.nlp.modeling import networks

from headsize_tf.core.spec import AttentionSpec, check_no_legacy_keys, migrate_legacy_config
from headsize_tf.layers.autograph import without_autograph
from headsize_tf.modeling import encoder_checkpoint
from headsize_tf.modeling._tracking import replace_sublayer
from headsize_tf.modeling.transformer_block import HeadsizeTransformerBlock


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
@without_autograph
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
      attention: The blocks' `AttentionSpec` (or a dict of its fields):
        kind ("standard": head size d/h, "fixed_head", "collaborative"),
        heads, head size, value head size, shared key dim; per-layer lists
        allowed. "sequence_length" resolves to `max_sequence_length`.
      inner_activation: FFN activation; "gelu" (exact erf GELU, as in BERT
        checkpoints) by default. `BertEncoderV2`'s default is the tanh
        approximation (`gelu(x, approximate=True)`): pass it to compute what a
        stock encoder built without `inner_activation` computes. The older name
        `activation` is honoured as `BertEncoderV2` honours it.
      pruned_heads: Per layer, the indices of heads removed by pruning
        (`headsize_tf.pruning.remove_heads` fills it); None keeps all heads.
      **kwargs: Other `BertEncoderV2` arguments (`max_sequence_length`,
        `type_vocab_size`, `inner_dim`, `output_dropout`,
        `attention_dropout`, `initializer`, `embedding_width`, `norm_first`,
        `output_range`, `return_attention_scores`, ...).

    Example:

    >>> encoder = HeadsizeBertEncoder(vocab_size=100, hidden_size=64, num_layers=2,
    ...     attention=AttentionSpec("fixed_head", num_heads=8, head_size=32), inner_dim=128)
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int = 768,
        num_layers: int = 12,
        attention: AttentionSpec | Mapping[str, Any] | None = None,
        inner_activation: Any = "gelu",
        pruned_heads: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ):
        if pruned_heads is not None and len(pruned_heads) != num_layers:
            raise ValueError(
                f"pruned_heads has {len(pruned_heads)} entries; expected one list per layer "
                f"({num_layers})."
            )
        check_no_legacy_keys(type(self).__name__, kwargs)
        if "activation" in kwargs:
            # `BertEncoderV2` takes `activation` for `inner_activation` (and stores it as that
            # in its config): the blocks must get it too, or the config and the model differ.
            inner_activation = kwargs.pop("activation")
        spec = AttentionSpec.coerce(attention)
        max_length = kwargs.get("max_sequence_length", 512)
        layer_specs = spec.with_sequence_length(max_length).layers(num_layers)
        pruned = [sorted(int(h) for h in heads) for heads in (pruned_heads or [])]
        super().__init__(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            # Only sizes the stock blocks that are replaced below.
            num_attention_heads=layer_specs[0].num_heads,
            inner_activation=inner_activation,
            **kwargs,
        )
        config = self._config
        initializer = tf_keras.initializers.get(config["initializer"])
        blocks = [
            HeadsizeTransformerBlock(
                attention=layer_specs[i],
                pruned_heads=pruned[i] if pruned else (),
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
        replace_sublayer(self, "_transformer_layers", blocks)  # Weights in stock order.
        self._spec = spec
        self._pruned_heads = pruned or None

    def get_config(self) -> dict[str, Any]:
        config = plain_config(super().get_config())
        config.pop("num_attention_heads", None)
        config.update(
            {"attention": self._spec.to_dict(), "pruned_heads": plain_config(self._pruned_heads)}
        )
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects=None) -> HeadsizeBertEncoder:
        return cls(**migrate_legacy_config(config))

    @property
    def attention_spec(self) -> AttentionSpec:
        """The encoder's spec ("sequence_length" resolved to max_sequence_length)."""
        return self._spec.with_sequence_length(self._config["max_sequence_length"])

    @property
    def transformer_layers(self) -> list:
        """The encoder's `HeadsizeTransformerBlock`s, in order (Model Garden keeps them private)."""
        return list(self._transformer_layers)

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

    def _checkpoint_adapter(self, path: str):
        # TensorFlow asks every object being restored for an adapter before its variables are
        # read: the moment to report every attention layer whose shapes cannot restore (not
        # only TensorFlow's shape error for the first variable), also under Model Garden's
        # `task.initialize`.
        encoder_checkpoint.check_on_restore(self, path)
        return super()._checkpoint_adapter(path)

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

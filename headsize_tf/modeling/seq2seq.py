"""Encoder-decoder Transformer with configurable heads and cached decoding."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.decoder_block import HeadsizeDecoderBlock


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
class HeadsizeSeq2Seq(tf_keras.Model):
    """Transformer encoder-decoder (pre-LN) for translation-style tasks.

    The encoder is `num_encoder_layers` bidirectional `HeadsizeDecoderBlock`s
    (causal=False) over the source; the decoder is a `HeadsizeCausalLM` with
    cross-attention. Token embeddings are shared between encoder, decoder and
    the output layer. Every attention layer is of `attention_type`, so the
    collaborative shared key dims of Cordonnier et al.'s NMT runs
    (512/256/128/64) are one argument. Decoding caches each layer's own
    projections and the memory's cross-attention projections (computed once),
    so it works for any head size.

    Args:
      vocab_size: Shared source/target vocabulary.
      hidden_size: Width.
      num_encoder_layers: Encoder blocks.
      num_decoder_layers: Decoder blocks.
      num_attention_heads: Heads of every attention layer.
      attention_type: "standard", "fixed_head" or "collaborative".
      head_size: fixed_head head size / collaborative value head size.
      shared_key_dim: collaborative shared query/key size.
      mixing_initializer: collaborative mixing initializer.
      intermediate_size: Feed-forward size (default 4 * hidden_size).
      max_sequence_length: Positions of source and target.
      dropout_rate: Residual / embedding dropout.
      attention_dropout_rate: Attention-probability dropout.
      initializer_range: Stddev of the truncated-normal initializers.
      padding_id: Source token id that is masked out.
      **kwargs: Model arguments.

    Call: `model({"inputs": source [B, S], "targets": decoder_input [B, T]})`
    -> logits [B, T, vocab].
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        num_encoder_layers: int,
        num_decoder_layers: int,
        num_attention_heads: int,
        attention_type: str = "standard",
        head_size: int | None = None,
        shared_key_dim: int | None = None,
        mixing_initializer: Any = "uniform",
        intermediate_size: int | None = None,
        max_sequence_length: int = 256,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        initializer_range: float = 0.02,
        padding_id: int = 0,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self._config = {
            "vocab_size": vocab_size,
            "hidden_size": hidden_size,
            "num_encoder_layers": num_encoder_layers,
            "num_decoder_layers": num_decoder_layers,
            "num_attention_heads": num_attention_heads,
            "attention_type": attention_type,
            "head_size": head_size,
            "shared_key_dim": shared_key_dim,
            "mixing_initializer": mixing_initializer,
            "intermediate_size": intermediate_size,
            "max_sequence_length": max_sequence_length,
            "dropout_rate": dropout_rate,
            "attention_dropout_rate": attention_dropout_rate,
            "initializer_range": initializer_range,
            "padding_id": padding_id,
        }
        shared = {
            k: self._config[k]
            for k in (
                "vocab_size",
                "hidden_size",
                "num_attention_heads",
                "attention_type",
                "head_size",
                "shared_key_dim",
                "mixing_initializer",
                "intermediate_size",
                "max_sequence_length",
                "dropout_rate",
                "attention_dropout_rate",
                "initializer_range",
            )
        }
        self.decoder = HeadsizeCausalLM(
            num_layers=num_decoder_layers, cross_attention=True, name="decoder", **shared
        )
        self.source_position_embedding = tf_keras.layers.Embedding(
            max_sequence_length,
            hidden_size,
            embeddings_initializer=tf_keras.initializers.TruncatedNormal(stddev=initializer_range),
            name="source_position_embedding",
        )
        self.encoder_blocks = [
            HeadsizeDecoderBlock(
                attention_type=attention_type,
                num_heads=num_attention_heads,
                inner_dim=intermediate_size or 4 * hidden_size,
                head_size=head_size,
                shared_key_dim=shared_key_dim,
                mixing_initializer=mixing_initializer,
                causal=False,
                dropout=dropout_rate,
                attention_dropout=attention_dropout_rate,
                kernel_initializer=tf_keras.initializers.TruncatedNormal(stddev=initializer_range),
                name=f"encoder_block_{i}",
            )
            for i in range(num_encoder_layers)
        ]
        self.encoder_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
        self.embedding_dropout = tf_keras.layers.Dropout(dropout_rate)

    @property
    def token_embedding(self) -> tf_keras.layers.Embedding:
        return self.decoder.token_embedding

    @property
    def attention_layers(self) -> list:
        encoder = [block.self_attention for block in self.encoder_blocks]
        decoder = [
            layer for b in self.decoder.blocks for layer in (b.self_attention, b.cross_attention)
        ]
        return encoder + decoder

    def encode(self, source_ids, training=None):
        """Memory [B, S, width] and its mask [B, 1, S] (False at padding)."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        mask = tf.not_equal(source_ids, self._config["padding_id"])[:, tf.newaxis, :]
        length = tf.shape(source_ids)[1]
        x = self.token_embedding(source_ids) + self.source_position_embedding(
            tf.range(length)[tf.newaxis, :]
        )
        x = self.embedding_dropout(x, training=training)
        for block in self.encoder_blocks:
            x = block(x, self_mask=mask, training=training)
        return self.encoder_norm(x), mask

    def call(self, inputs, training=None):
        memory, mask = self.encode(inputs["inputs"], training=training)
        return self.decoder(inputs["targets"], memory=memory, memory_mask=mask, training=training)

    def init_cache(self, source_ids, length: int = 0) -> dict[str, Any]:
        """Decoding cache: encodes `source_ids` once and projects the memory."""
        memory, mask = self.encode(source_ids)
        return self.decoder.init_cache(tf.shape(memory)[0], length, memory=memory, memory_mask=mask)

    def decode_step(self, input_ids, cache, position, decode_loop_step=None):
        """See `HeadsizeCausalLM.decode_step`."""
        return self.decoder.decode_step(input_ids, cache, position, decode_loop_step)

    def get_config(self) -> dict[str, Any]:
        return dict(self._config, name=self.name)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> HeadsizeSeq2Seq:
        return cls(**config)

"""Encoder-decoder Transformer with configurable heads and cached decoding."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.kv_cache import cache_entries, dtype_bytes
from headsize_tf.core.spec import AttentionSpec, check_no_legacy_keys, migrate_legacy_config
from headsize_tf.layers.autograph import without_autograph
from headsize_tf.modeling.bert_encoder import plain_config
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.decoder_block import HeadsizeDecoderBlock


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
@without_autograph
class HeadsizeSeq2Seq(tf_keras.Model):
    """Transformer encoder-decoder (pre-LN) for translation-style tasks.

    The encoder is `num_encoder_layers` bidirectional `HeadsizeDecoderBlock`s
    (causal=False) over the source; the decoder is a `HeadsizeCausalLM` with
    cross-attention. Token embeddings are shared between encoder, decoder and
    the output layer. The heads are `AttentionSpec`s (`attention` for the
    encoder, and the decoder too unless `decoder_attention` is given), so the
    collaborative shared key dims of Cordonnier et al.'s NMT runs
    (512/256/128/64) are one argument. Decoding caches each layer's own
    projections and the memory's cross-attention projections (computed once),
    so it works for any head size and kind: a grouped or latent decoder
    (`decoder_attention`) caches G key/value heads or an r-sized latent per
    target token, and its cross-attention caches the same per source token
    (a latent cross-attention's latent is computed from the encoder output).
    "sequence_length" head sizes resolve to `max_sequence_length` in encoder
    and decoder alike.

    Args:
      vocab_size: Shared source/target vocabulary.
      hidden_size: Width.
      num_encoder_layers: Encoder blocks.
      num_decoder_layers: Decoder blocks.
      attention: `AttentionSpec` (or a dict of its fields) of the encoder
        (per-layer lists: one entry per encoder layer) and, by default, of
        the decoder.
      decoder_attention: Optional separate spec of the decoder's self- and
        cross-attention layers.
      intermediate_size: Feed-forward size (default 4 * hidden_size).
      max_sequence_length: Positions of source and target.
      dropout_rate: Residual / embedding dropout.
      attention_dropout_rate: Attention-probability dropout.
      initializer_range: Stddev of the truncated-normal initializers.
      padding_id: Source token id that is masked out.
      pruned_heads: Heads removed by pruning: `{"encoder": [per layer
        {"self_attention": [...]}], "decoder": [per layer {"self_attention":
        [...], "cross_attention": [...]}]}`, or None.
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
        attention: AttentionSpec | Mapping[str, Any] | None = None,
        decoder_attention: AttentionSpec | Mapping[str, Any] | None = None,
        intermediate_size: int | None = None,
        max_sequence_length: int = 256,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        initializer_range: float = 0.02,
        padding_id: int = 0,
        pruned_heads: Mapping[str, Sequence[Any]] | None = None,
        **kwargs: Any,
    ):
        check_no_legacy_keys(type(self).__name__, kwargs)
        super().__init__(**kwargs)
        spec = AttentionSpec.coerce(attention)
        decoder_spec = (
            spec if decoder_attention is None else AttentionSpec.coerce(decoder_attention)
        )
        encoder_specs = spec.with_sequence_length(max_sequence_length).layers(num_encoder_layers)
        pruned_heads = dict(pruned_heads or {})
        unknown = set(pruned_heads) - {"encoder", "decoder"}
        if unknown:
            raise ValueError(f"pruned_heads keys {sorted(unknown)}; expected 'encoder', 'decoder'.")
        encoder_pruned = list(pruned_heads.get("encoder") or [None] * num_encoder_layers)
        if len(encoder_pruned) != num_encoder_layers:
            raise ValueError(
                f"pruned_heads['encoder'] has {len(encoder_pruned)} entries; expected one per "
                f"encoder layer ({num_encoder_layers})."
            )
        self._config = {
            "vocab_size": vocab_size,
            "hidden_size": hidden_size,
            "num_encoder_layers": num_encoder_layers,
            "num_decoder_layers": num_decoder_layers,
            "attention": spec.to_dict(),
            "decoder_attention": None if decoder_attention is None else decoder_spec.to_dict(),
            "intermediate_size": intermediate_size,
            "max_sequence_length": max_sequence_length,
            "dropout_rate": dropout_rate,
            "attention_dropout_rate": attention_dropout_rate,
            "initializer_range": initializer_range,
            "padding_id": padding_id,
            "pruned_heads": pruned_heads or None,
        }
        shared = {
            k: self._config[k]
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "max_sequence_length",
                "dropout_rate",
                "attention_dropout_rate",
                "initializer_range",
            )
        }
        self.decoder = HeadsizeCausalLM(
            num_layers=num_decoder_layers,
            attention=decoder_spec,
            cross_attention=True,
            pruned_heads=pruned_heads.get("decoder"),
            name="decoder",
            **shared,
        )
        self.source_position_embedding = tf_keras.layers.Embedding(
            max_sequence_length,
            hidden_size,
            embeddings_initializer=tf_keras.initializers.TruncatedNormal(stddev=initializer_range),
            name="source_position_embedding",
        )
        self.encoder_blocks = [
            HeadsizeDecoderBlock(
                attention=encoder_specs[i],
                inner_dim=intermediate_size or 4 * hidden_size,
                pruned_heads=encoder_pruned[i],
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
    def attention_spec(self) -> AttentionSpec:
        """The encoder's spec ("sequence_length" resolved to max_sequence_length)."""
        return AttentionSpec.coerce(self._config["attention"]).with_sequence_length(
            self._config["max_sequence_length"]
        )

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

    def kv_cache_bytes_per_token(self, dtype: Any = None) -> int:
        """Bytes one target token adds to the decoder's self-attention cache.

        See `HeadsizeCausalLM.kv_cache_bytes_per_token`. The cross-attention
        projections of the source (`cache["memory"]`) are computed once per
        source token, by the same rule (`memory_cache_bytes_per_token`).

        Args:
          dtype: The cache dtype, if not the model's compute dtype.
        """
        return self.decoder.kv_cache_bytes_per_token(dtype)

    def memory_cache_bytes_per_token(self, dtype: Any = None) -> int:
        """Bytes one source token takes in the cached cross-attention projections.

        Args:
          dtype: The cache dtype, if not the model's compute dtype.
        """
        width = self._config["hidden_size"]
        elements = sum(
            sum(cache_entries(block.layer_spec("cross_attention").resolve(width)).values())
            for block in self.decoder.blocks
        )
        return elements * dtype_bytes(dtype or self.compute_dtype)

    def decode_step(self, input_ids, cache, position, decode_loop_step=None):
        """See `HeadsizeCausalLM.decode_step`."""
        return self.decoder.decode_step(input_ids, cache, position, decode_loop_step)

    def get_config(self) -> dict[str, Any]:
        return plain_config(dict(self._config, name=self.name))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> HeadsizeSeq2Seq:
        return cls(**migrate_legacy_config(config))

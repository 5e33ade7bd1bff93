"""Decoder-only causal Transformer language model with configurable heads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from headsize_tf.core.kv_cache import cache_entries, dtype_bytes
from headsize_tf.core.spec import AttentionSpec, check_no_legacy_keys, migrate_legacy_config
from headsize_tf.layers.autograph import without_autograph
from headsize_tf.modeling.bert_encoder import plain_config
from headsize_tf.modeling.decoder_block import HeadsizeDecoderBlock


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
@without_autograph
class HeadsizeCausalLM(tf_keras.Model):
    """A GPT-style language model (Bhojanapalli et al.'s LM1B setting).

    Token + learned position embeddings, `num_layers` pre-LN
    `HeadsizeDecoderBlock`s, a final LayerNorm, and logits through the tied
    token embedding. The heads are one `AttentionSpec` (per-layer lists
    allowed) of any kind, the KV-cache sharing ones included: grouped-query
    heads (`num_kv_heads`) and a shared latent (`kv_latent_dim`), whose
    decoding caches hold only the shared tensors; `head_size="sequence_length"`
    resolves to `max_sequence_length` (the paper's d_p = n), the rule of
    every model.

    Args:
      vocab_size: Vocabulary size.
      hidden_size: Width `d`.
      num_layers: Number of decoder blocks.
      attention: `AttentionSpec` (or a dict of its fields) of every block.
      intermediate_size: Feed-forward size (default 4 * hidden_size).
      max_sequence_length: Number of positions.
      dropout_rate: Residual / embedding dropout.
      attention_dropout_rate: Attention-probability dropout.
      initializer_range: Stddev of the truncated-normal initializers.
      cross_attention: Blocks also attend to an encoder memory (the decoder
        of `HeadsizeSeq2Seq`).
      pruned_heads: Per block, the heads removed by pruning
        (`{"self_attention": [...], "cross_attention": [...]}`), or None.
      **kwargs: Model arguments (`name`, ...).

    Call: `model(input_ids [B, T])` -> logits [B, T, vocab_size].
    Decoding: `init_cache`, `decode_step` (see `headsize_tf.modeling.decoding`);
    `kv_cache_bytes_per_token` is what the cache grows by per token.

    Example:

    >>> lm = HeadsizeCausalLM(vocab_size=100, hidden_size=64, num_layers=2,
    ...                       attention={"kind": "latent", "num_heads": 4,
    ...                                  "kv_latent_dim": [16, 32]})
    >>> lm.kv_cache_bytes_per_token()  # (16 + 32) float32 latents
    192
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        num_layers: int,
        attention: AttentionSpec | Mapping[str, Any] | None = None,
        intermediate_size: int | None = None,
        max_sequence_length: int = 512,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        initializer_range: float = 0.02,
        cross_attention: bool = False,
        pruned_heads: Sequence[Mapping[str, Sequence[int]] | None] | None = None,
        **kwargs: Any,
    ):
        check_no_legacy_keys(type(self).__name__, kwargs)
        super().__init__(**kwargs)
        spec = AttentionSpec.coerce(attention)
        layer_specs = spec.with_sequence_length(max_sequence_length).layers(num_layers)
        if pruned_heads is not None and len(pruned_heads) != num_layers:
            raise ValueError(
                f"pruned_heads has {len(pruned_heads)} entries; expected one per layer "
                f"({num_layers})."
            )
        pruned = [dict(p) if p else None for p in (pruned_heads or [None] * num_layers)]
        self._config = {
            "vocab_size": vocab_size,
            "hidden_size": hidden_size,
            "num_layers": num_layers,
            "attention": spec.to_dict(),
            "intermediate_size": intermediate_size,
            "max_sequence_length": max_sequence_length,
            "dropout_rate": dropout_rate,
            "attention_dropout_rate": attention_dropout_rate,
            "initializer_range": initializer_range,
            "cross_attention": cross_attention,
            "pruned_heads": pruned if any(pruned) else None,
        }

        def init():  # A fresh instance per layer: a shared one repeats its values.
            return tf_keras.initializers.TruncatedNormal(stddev=initializer_range)

        self.token_embedding = tf_keras.layers.Embedding(
            vocab_size, hidden_size, embeddings_initializer=init(), name="token_embedding"
        )
        self.position_embedding = tf_keras.layers.Embedding(
            max_sequence_length,
            hidden_size,
            embeddings_initializer=init(),
            name="position_embedding",
        )
        self.embedding_dropout = tf_keras.layers.Dropout(dropout_rate)
        self.blocks = [
            HeadsizeDecoderBlock(
                attention=layer_specs[i],
                inner_dim=intermediate_size or 4 * hidden_size,
                pruned_heads=pruned[i],
                dropout=dropout_rate,
                attention_dropout=attention_dropout_rate,
                kernel_initializer=init(),
                cross_attention=cross_attention,
                name=f"block_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")

    @property
    def attention_spec(self) -> AttentionSpec:
        """The model's spec ("sequence_length" resolved to max_sequence_length)."""
        return AttentionSpec.coerce(self._config["attention"]).with_sequence_length(
            self._config["max_sequence_length"]
        )

    @property
    def attention_layers(self) -> list:
        return [block.self_attention for block in self.blocks]

    def _embed(self, input_ids, positions, training):
        x = self.token_embedding(input_ids) + self.position_embedding(positions)
        return self.embedding_dropout(x, training=training)

    def _logits(self, x):
        x = self.final_norm(x)
        return tf.einsum("btd,vd->btv", x, tf.cast(self.token_embedding.embeddings, x.dtype))

    def call(self, input_ids, memory=None, memory_mask=None, training=None):
        """Logits [B, T, vocab]; `memory` [B, S, width] with cross-attention."""
        length = tf.shape(input_ids)[1]
        x = self._embed(input_ids, tf.range(length)[tf.newaxis, :], training)
        for block in self.blocks:
            x = block(x, memory=memory, memory_mask=memory_mask, training=training)
        return self._logits(x)

    def init_cache(
        self, batch_size, length: int = 0, memory=None, memory_mask=None
    ) -> dict[str, Any]:
        """Empty per-layer caches (or zero-filled of a fixed `length`).

        With cross-attention, pass the encoder `memory` [B, S, width] and its
        `memory_mask` [B, 1, S]: their projections are computed once here and
        ride in the cache (so beam search expands them with the beams).
        """
        cross = self._config["cross_attention"]
        if cross and memory is None:
            raise ValueError("This model has cross-attention: init_cache needs `memory`.")
        if not self.built:
            width = self._config["hidden_size"]
            self(tf.zeros([1, 1], tf.int32), memory=tf.zeros([1, 1, width]) if cross else None)
        cache: dict[str, Any] = {
            f"layer_{i}": block.self_attention.init_cache(batch_size, length)
            for i, block in enumerate(self.blocks)
        }
        if cross:
            cache["memory"] = {
                f"layer_{i}": block.project_memory(memory) for i, block in enumerate(self.blocks)
            }
            cache["memory_mask"] = tf.cast(memory_mask, tf.float32)
        return cache

    def kv_cache_bytes_per_token(self, dtype: Any = None) -> int:
        """Bytes one decoded token adds to the self-attention cache (all layers, one row).

        `headsize_tf.core.kv_cache.cache_entries` of each block's
        self-attention as built (pruned heads removed), at the cache's dtype
        (default: the model's compute dtype).

        Args:
          dtype: The cache dtype, if not the model's compute dtype.
        """
        width = self._config["hidden_size"]
        elements = sum(
            sum(cache_entries(block.layer_spec("self_attention").resolve(width)).values())
            for block in self.blocks
        )
        return elements * dtype_bytes(dtype or self.compute_dtype)

    def decode_step(self, input_ids, cache, position, decode_loop_step=None):
        """Logits of new tokens `input_ids` [B, T_new] starting at `position`.

        Args:
          input_ids: New token ids [B, T_new].
          cache: From `init_cache` or a previous step.
          position: Position of the first new token (int or scalar tensor).
          decode_loop_step: For a fixed-length cache: write index (T_new = 1).

        Returns:
          (logits [B, T_new, vocab], updated cache).
        """
        new = tf.shape(input_ids)[1]
        positions = position + tf.range(new)
        x = self._embed(input_ids, positions[tf.newaxis, :], False)
        if decode_loop_step is None:
            total = position + new  # Cache length after appending.
        else:
            total = tf.shape(next(iter(cache["layer_0"].values())))[1]
        # New token t (at position + t) sees cache slots <= position + t.
        mask = tf.range(total)[tf.newaxis, :] <= positions[:, tf.newaxis]
        mask = mask[tf.newaxis]
        new_cache = {k: v for k, v in cache.items() if not k.startswith("layer_")}
        memory_mask = cache.get("memory_mask")
        if memory_mask is not None:
            memory_mask = tf.cast(memory_mask, tf.bool)
        for i, block in enumerate(self.blocks):
            x, new_cache[f"layer_{i}"] = block.call_cached(
                x,
                cache[f"layer_{i}"],
                self_mask=mask,
                decode_loop_step=decode_loop_step,
                memory_projected=cache.get("memory", {}).get(f"layer_{i}"),
                memory_mask=memory_mask,
            )
        return self._logits(x), new_cache

    def get_config(self) -> dict[str, Any]:
        return plain_config(dict(self._config, name=self.name))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> HeadsizeCausalLM:
        return cls(**migrate_legacy_config(config))

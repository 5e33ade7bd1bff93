"""A Llama-shaped decoder-only language model with any `AttentionSpec`, on Keras 3."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import keras
from keras import ops

from headsize_tf.core.spec import AttentionSpec, SpecError, check_positive_int
from headsize_tf.keras3.modeling.decoder_block import DecoderBlock
from headsize_tf.keras3.modeling.lm_generation import GenerationMixin
from headsize_tf.keras3.modeling.rms_norm import RMSNorm


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class DecoderLM(GenerationMixin, keras.Model):
    """A Llama-family causal language model (Llama, Mistral, Qwen2, Qwen3, Gemma, SmolLM) on Keras 3.

    Token embeddings, `num_layers` `DecoderBlock`s (pre-RMSNorm attention and
    gated feed-forward), a final RMSNorm and logits through the tied
    embedding or an untied output projection. Positions are rotary (RoPE in
    `attention`: `rope_max_wavelength`, `rope_scaling`, `rope_frequencies`),
    so there is no position table; the sibling of the GPT-shaped `CausalLM`,
    with the same generation (`prefill`, `decode_step`, cached `generate`),
    tools (head importance, pruning, grouped / latent conversion, export) and
    `.keras` saving, on TensorFlow and JAX.

    `attention` is one `AttentionSpec` (per-layer lists allowed, e.g. after
    pruning): grouped K/V (`kind="grouped"`, `num_kv_heads`) is Llama's
    GQA; a shared latent with decoupled rotary keys (`kind="latent"`) is
    DeepSeek's MLA.

    Args:
      vocabulary_size: Size of the token vocabulary.
      num_layers: Number of decoder blocks.
      hidden_dim: Width `d`.
      attention: The blocks' `AttentionSpec` or a dict of its fields;
        grouped K/V with RoPE base 10000 by default.
      intermediate_dim: Gated feed-forward size (default 8 / 3 * hidden_dim,
        rounded up to a multiple of 8).
      max_sequence_length: Positions the model serves (the longest input).
      layer_norm_epsilon: Epsilon of every RMSNorm.
      norm_scale_offset: 0, or 1 for RMSNorms scaling by `1 + w` with `w`
        stored (Gemma's, as its checkpoints hold them).
      activation: The gate's activation: "silu" (SwiGLU) or
        "gelu_approximate" (GeGLU).
      tie_word_embeddings: Logits through the token embedding (True) or an
        own `lm_head` projection `[d, vocabulary]` (False).
      attention_bias: Query/key/value biases (Qwen2).
      query_key_norm: Per-head RMSNorm of queries and keys (Qwen3).
      sliding_window: None, or each position attends to the last
        `sliding_window` positions only (Mistral).
      embedding_scale: None, or a factor the token embeddings are
        multiplied by on the way in, not on the tied way out (Gemma:
        sqrt(hidden_dim)).
      sliding_window_layers: None (every layer attends within
        `sliding_window`), or one bool per layer: which layers are local
        (Gemma 2: every other one, from the first); the others are global.
      post_norms: Whether each block also normalises the attention and
        feed-forward outputs before their residual adds (Gemma 2).
      attention_logit_soft_cap: None, or the cap `c` of every attention
        layer's logits, `c * tanh(logits / c)` (Gemma 2: 50).
      final_logit_soft_cap: None, or the cap of the output logits (Gemma 2:
        30).
      query_scale: None (1 / sqrt(head size)), or every attention layer's
        softmax scale (Gemma 2 and 3 27B: `query_pre_attn_scalar ** -0.5`,
        from width / query heads rather than the head size).
      local_rope_max_wavelength: None, or the RoPE base of the local layers
        (`sliding_window_layers`), `attention`'s being the global layers'
        (Gemma 3: 10,000 local, 1,000,000 global).
      local_rope_scaling: The local layers' `rope_scaling` (with
        `local_rope_max_wavelength`; None: none).
      dropout: Dropout of attention probabilities and residual branches.
      initializer_range: Stddev of the truncated-normal initializers.
      tokenizer: Optional tokenizer (`tokenize`, `detokenize`,
        `start_token_id`, `end_token_id`; e.g.
        `headsize_tf.keras3.pretrained.BytePairTokenizer`) with which
        `generate` takes and returns text; saved with the model.
      dtype: dtype or `keras.DTypePolicy`.
      **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call: `model(token_ids [batch, length])` -> logits `[batch, length,
    vocabulary_size]`, or a dict of `token_ids` and `padding_mask` (1 for
    tokens, 0 for padding).

    Example:

    >>> lm = DecoderLM(vocabulary_size=100, num_layers=2, hidden_dim=32,
    ...                attention={"kind": "grouped", "num_heads": 4, "num_kv_heads": 2,
    ...                           "rope_max_wavelength": 10000},
    ...                max_sequence_length=64)
    >>> lm(np.array([[5, 9, 11]], "int32")).shape
    (1, 3, 100)

    References:
      Touvron et al., "LLaMA: Open and Efficient Foundation Language Models",
      2023. https://arxiv.org/abs/2302.13971
      Su et al., "RoFormer: Enhanced Transformer with Rotary Position
      Embedding", 2021. https://arxiv.org/abs/2104.09864
    """

    def __init__(
        self,
        vocabulary_size: int,
        num_layers: int,
        hidden_dim: int,
        attention: AttentionSpec | Mapping[str, Any] | None = None,
        intermediate_dim: int | None = None,
        max_sequence_length: int = 2048,
        layer_norm_epsilon: float = 1e-6,
        norm_scale_offset: float = 0.0,
        activation: Any = "silu",
        tie_word_embeddings: bool = True,
        attention_bias: bool = False,
        query_key_norm: bool = False,
        sliding_window: int | None = None,
        embedding_scale: float | None = None,
        sliding_window_layers: Any = None,
        post_norms: bool = False,
        attention_logit_soft_cap: float | None = None,
        final_logit_soft_cap: float | None = None,
        query_scale: float | None = None,
        local_rope_max_wavelength: float | None = None,
        local_rope_scaling: Mapping[str, Any] | None = None,
        dropout: float = 0.0,
        initializer_range: float = 0.02,
        tokenizer: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ):
        super().__init__(dtype=dtype, **kwargs)
        if isinstance(tokenizer, dict):  # A serialized tokenizer (from get_config).
            tokenizer = keras.saving.deserialize_keras_object(tokenizer)
        for name, value in (
            ("vocabulary_size", vocabulary_size),
            ("num_layers", num_layers),
            ("hidden_dim", hidden_dim),
            ("max_sequence_length", max_sequence_length),
        ):
            check_positive_int(name, value)
        if intermediate_dim is None:
            intermediate_dim = -(-8 * hidden_dim // 3 // 8) * 8
        check_positive_int("intermediate_dim", intermediate_dim)
        if sliding_window is not None:
            check_positive_int("sliding_window", sliding_window)
        if embedding_scale is not None:
            if isinstance(embedding_scale, bool) or not float(embedding_scale) > 0:
                raise ValueError(
                    f"embedding_scale must be a positive number or None; got {embedding_scale!r}."
                )
            embedding_scale = float(embedding_scale)
        if sliding_window_layers is not None:
            sliding_window_layers = [bool(flag) for flag in sliding_window_layers]
            if len(sliding_window_layers) != num_layers or sliding_window is None:
                raise ValueError(
                    f"sliding_window_layers must hold one bool per layer ({num_layers}) beside a "
                    f"sliding_window; got {sliding_window_layers} with sliding_window="
                    f"{sliding_window!r}."
                )
        for name, cap in (
            ("attention_logit_soft_cap", attention_logit_soft_cap),
            ("final_logit_soft_cap", final_logit_soft_cap),
            ("query_scale", query_scale),
        ):
            if cap is not None and (isinstance(cap, bool) or not float(cap) > 0):
                raise ValueError(f"{name} must be None or > 0; got {cap!r}.")
        spec = AttentionSpec.coerce(
            attention
            if attention is not None
            else {"kind": "grouped", "num_heads": 8, "num_kv_heads": 2, "rope_max_wavelength": 1e4}
        )
        if spec.rope_max_wavelength is None:
            raise SpecError(
                "DecoderLM has no position table: its attention spec needs rotary positions "
                "(`rope_max_wavelength`, e.g. 10000)."
            )
        layer_specs = spec.with_sequence_length(max_sequence_length).layers(num_layers)
        if local_rope_max_wavelength is not None or local_rope_scaling is not None:
            if sliding_window_layers is None or local_rope_max_wavelength is None:
                raise ValueError(
                    "local_rope_max_wavelength (and local_rope_scaling) set the RoPE of the "
                    "layers sliding_window_layers makes local: give both."
                )
            local_rope = {
                "rope_max_wavelength": float(local_rope_max_wavelength),
                "rope_scaling": None if local_rope_scaling is None else dict(local_rope_scaling),
            }
            layer_specs = [
                dataclasses.replace(layer_spec, **local_rope) if local else layer_spec
                for layer_spec, local in zip(layer_specs, sliding_window_layers, strict=True)
            ]

        def initializer():
            return keras.initializers.TruncatedNormal(stddev=initializer_range)

        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=initializer(),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self._blocks = [
            DecoderBlock(
                intermediate_dim,
                layer_specs[i],
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                norm_scale_offset=norm_scale_offset,
                post_norms=post_norms,
                attention_logit_soft_cap=attention_logit_soft_cap,
                query_scale=query_scale,
                attention_bias=attention_bias,
                query_key_norm=query_key_norm,
                dropout=dropout,
                kernel_initializer=initializer(),
                dtype=self.dtype_policy,
                name=f"block_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_norm = RMSNorm(
            layer_norm_epsilon, norm_scale_offset, dtype=self.dtype_policy, name="final_norm"
        )
        self.lm_head = None
        if not tie_word_embeddings:
            self.lm_head = keras.layers.Dense(
                vocabulary_size,
                use_bias=False,
                kernel_initializer=initializer(),
                dtype=self.dtype_policy,
                name="lm_head",
            )

        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.attention = spec
        self.intermediate_dim = intermediate_dim
        self.max_sequence_length = max_sequence_length
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.norm_scale_offset = self.final_norm.scale_offset
        self.activation = activation
        self.tie_word_embeddings = bool(tie_word_embeddings)
        self.attention_bias = bool(attention_bias)
        self.query_key_norm = bool(query_key_norm)
        self.sliding_window = sliding_window
        self.embedding_scale = embedding_scale
        self.sliding_window_layers = sliding_window_layers
        self.post_norms = bool(post_norms)
        self.attention_logit_soft_cap = (
            None if attention_logit_soft_cap is None else float(attention_logit_soft_cap)
        )
        self.final_logit_soft_cap = (
            None if final_logit_soft_cap is None else float(final_logit_soft_cap)
        )
        self.query_scale = None if query_scale is None else float(query_scale)
        self.local_rope_max_wavelength = (
            None if local_rope_max_wavelength is None else float(local_rope_max_wavelength)
        )
        self.local_rope_scaling = None if local_rope_scaling is None else dict(local_rope_scaling)
        self.dropout = float(dropout)
        self.initializer_range = float(initializer_range)
        self.tokenizer = tokenizer
        # Every weight exists from construction: JAX traces `fit` statelessly.
        self.build((None, None))

    def build(self, input_shape):
        self.token_embedding.build(input_shape)
        shape = (*input_shape, self.hidden_dim)
        for block in self._blocks:
            block.build(shape)
        self.final_norm.build(shape)
        if self.lm_head is not None:
            self.lm_head.build(shape)
        self.built = True

    # ------------------------------------------------------------------ masks
    def _window(self, mask: Any, queries: Any, keys_length: Any, start: Any) -> Any:
        """`mask` with keys older than the sliding window removed."""
        if self.sliding_window is None:
            return mask
        query_positions = ops.arange(queries) + start
        key_positions = ops.arange(keys_length)
        recent = key_positions[None, :] > query_positions[:, None] - self.sliding_window
        return ops.logical_and(ops.cast(mask, "bool"), recent[None])

    def _local_and_global(self, causal: Any, local: Any) -> Any:
        """One mask for every block, or one per block where only some layers are local."""
        if self.sliding_window_layers is None:
            return local
        return [local if flag else causal for flag in self.sliding_window_layers]

    def _prefill_mask(self, batch: Any, prompt: Any) -> Any:
        causal = super()._prefill_mask(batch, prompt)
        return self._local_and_global(causal, self._window(causal, prompt, prompt, 0))

    def _step_mask(self, batch: Any, length: int, index: Any) -> Any:
        causal = super()._step_mask(batch, length, index)
        return self._local_and_global(causal, self._window(causal, 1, length, index))

    # -------------------------------------------------------------- forward
    def _embed(self, token_ids: Any, start: Any) -> Any:
        x = self.token_embedding(token_ids)
        if self.embedding_scale is None:
            return x
        return ops.multiply(x, ops.cast(self.embedding_scale, x.dtype))

    def call(self, token_ids, training=None):
        padding_mask = None
        if isinstance(token_ids, dict):
            padding_mask = token_ids.get("padding_mask")
            token_ids = token_ids["token_ids"]
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        x = self._embed(token_ids, 0)
        masks = [None] * len(self._blocks)
        if padding_mask is not None or self.sliding_window is not None:
            batch, length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
            masks = self._per_block(self._prefill_mask(batch, length))
            if padding_mask is not None:  # Padded keys are masked.
                keys = ops.cast(ops.convert_to_tensor(padding_mask), "bool")[:, None, :]
                masks = [ops.logical_and(ops.cast(mask, "bool"), keys) for mask in masks]
        for block, mask in zip(self._blocks, masks, strict=True):
            x = block(x, attention_mask=mask, use_causal_mask=mask is None, training=training)
        return self._logits(x)

    def _logits(self, x: Any) -> Any:
        x = self.final_norm(x)
        logits = self._tied_logits(x) if self.lm_head is None else self.lm_head(x)
        if self.final_logit_soft_cap is None:
            return logits
        cap = ops.cast(self.final_logit_soft_cap, logits.dtype)  # Gemma 2: c tanh(logits / c).
        return ops.multiply(ops.tanh(ops.divide(logits, cap)), cap)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_layers": self.num_layers,
                "hidden_dim": self.hidden_dim,
                "attention": self.attention.to_dict(),
                "intermediate_dim": self.intermediate_dim,
                "max_sequence_length": self.max_sequence_length,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "norm_scale_offset": self.norm_scale_offset,
                "activation": self.activation
                if isinstance(self.activation, str)
                else keras.activations.serialize(self.activation),
                "tie_word_embeddings": self.tie_word_embeddings,
                "attention_bias": self.attention_bias,
                "query_key_norm": self.query_key_norm,
                "sliding_window": self.sliding_window,
                "embedding_scale": self.embedding_scale,
                "sliding_window_layers": self.sliding_window_layers,
                "post_norms": self.post_norms,
                "attention_logit_soft_cap": self.attention_logit_soft_cap,
                "final_logit_soft_cap": self.final_logit_soft_cap,
                "query_scale": self.query_scale,
                "local_rope_max_wavelength": self.local_rope_max_wavelength,
                "local_rope_scaling": self.local_rope_scaling,
                "dropout": self.dropout,
                "initializer_range": self.initializer_range,
                "tokenizer": None
                if self.tokenizer is None
                else keras.saving.serialize_keras_object(self.tokenizer),
            }
        )
        return config

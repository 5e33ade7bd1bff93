"""A Keras 3 decoder-only causal language model with any `AttentionSpec` (backend-agnostic)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
from keras import ops

from headsize_tf.core.spec import AttentionSpec, check_positive_int
from headsize_tf.keras3.modeling.activations import get_activation
from headsize_tf.keras3.modeling.lm_generation import GenerationMixin
from headsize_tf.keras3.modeling.position_embedding import PositionEmbedding
from headsize_tf.keras3.modeling.transformer_encoder import TransformerEncoder


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class CausalLM(GenerationMixin, keras.Model):
    """A GPT-style language model (Bhojanapalli et al.'s LM1B setting) on Keras 3.

    The Keras 3 counterpart of `headsize_tf.modeling.HeadsizeCausalLM`, with the
    same parameters (`headsize_tf.params.causal_lm_params` counts both): token
    and learned position embeddings, embedding dropout, `num_layers` pre-LN
    `TransformerEncoder` blocks under a causal mask, a final LayerNorm and
    logits through the tied token embedding. `attention` is one
    `AttentionSpec` whose `num_heads` and `head_size` may be per-layer lists;
    `head_size="sequence_length"` resolves to `max_sequence_length` (the
    paper's d_p = n). It trains with `fit` on the TensorFlow and JAX backends
    and saves as `.keras`.

    Args:
      vocabulary_size: Size of the token vocabulary.
      num_layers: Number of decoder blocks.
      hidden_dim: Width `d`.
      attention: The blocks' `AttentionSpec` or a dict of its fields
        (per-layer lists allowed); standard attention with 8 heads by default.
      intermediate_dim: Feed-forward size (default 4 * hidden_dim).
      max_sequence_length: Number of positions (the longest input).
      dropout: Dropout of the embeddings, the attention and feed-forward
        outputs and (unless `intermediate_dropout` is given) after the
        feed-forward activation (the tf_keras LM's `dropout_rate`).
      attention_dropout: Dropout of the attention probabilities (the tf_keras
        LM's `attention_dropout_rate`).
      layer_norm_epsilon: Epsilon of every LayerNorm.
      initializer_range: Stddev of the truncated-normal initializers.
      activation: Feed-forward activation: exact (erf) GELU by default,
        "gelu_approximate" (the tanh form) for GPT-2 checkpoints.
      intermediate_dropout: Dropout after the feed-forward activation (None:
        `dropout`; keras-hub's GPT-2 has none: 0).
      tokenizer: Optional tokenizer (a Keras layer such as keras-hub's
        `GPT2Tokenizer`: `tokenize(text)`, `detokenize(ids)`,
        `start_token_id`, `end_token_id`) with which `generate` takes and
        returns text; saved with the model.
      dtype: dtype or `keras.DTypePolicy` of the computations and weights.
      **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Call: `model(token_ids [batch, length])` -> logits `[batch, length,
    vocabulary_size]`; position t sees tokens 0..t only. The input may also
    be a dict of `token_ids` and `padding_mask` (1 for tokens, 0 for
    padding: padded keys are masked, as keras-hub's `GPT2CausalLM` takes
    them). `generate` continues a prompt with cached keys and values
    (`prefill`, then one `decode_step` per token; inherited from
    `headsize_tf.keras3.modeling.lm_generation.GenerationMixin`).

    Example:

    >>> lm = CausalLM(vocabulary_size=100, num_layers=2, hidden_dim=32,
    ...               attention={"kind": "fixed_head", "num_heads": 4, "head_size": 16},
    ...               max_sequence_length=64)
    >>> lm(np.array([[5, 9, 11]], "int32")).shape
    (1, 3, 100)

    References:
      - Radford et al., 2019, "Language Models are Unsupervised Multitask
        Learners" (pre-LN GPT-2 blocks).
      - Bhojanapalli et al., 2020, "Low-Rank Bottleneck in Multi-head
        Attention Models", https://arxiv.org/abs/2002.07028
    """

    def __init__(
        self,
        vocabulary_size: int,
        num_layers: int,
        hidden_dim: int,
        attention: AttentionSpec | Mapping[str, Any] | None = None,
        intermediate_dim: int | None = None,
        max_sequence_length: int = 512,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-6,
        initializer_range: float = 0.02,
        activation: Any = "gelu",
        intermediate_dropout: float | None = None,
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
        if intermediate_dim is not None:
            check_positive_int("intermediate_dim", intermediate_dim)
        spec = AttentionSpec.coerce(attention if attention is not None else {"num_heads": 8})
        layer_specs = spec.with_sequence_length(max_sequence_length).layers(num_layers)
        activation = get_activation(activation)

        def initializer():
            return keras.initializers.TruncatedNormal(stddev=initializer_range)

        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=initializer(),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.position_embedding = PositionEmbedding(
            sequence_length=max_sequence_length,
            initializer=initializer(),
            dtype=self.dtype_policy,
            name="position_embedding",
        )
        self.embedding_dropout = keras.layers.Dropout(
            dropout, dtype=self.dtype_policy, name="embedding_dropout"
        )
        self._blocks = [
            TransformerEncoder(
                intermediate_dim=intermediate_dim or 4 * hidden_dim,
                attention=layer_specs[i],
                dropout=dropout,
                attention_dropout=attention_dropout,
                intermediate_dropout=dropout
                if intermediate_dropout is None
                else intermediate_dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=initializer(),
                normalize_first=True,
                dtype=self.dtype_policy,
                name=f"block_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="final_norm"
        )

        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.attention = spec
        self.intermediate_dim = intermediate_dim
        self.max_sequence_length = max_sequence_length
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.activation = activation
        self.intermediate_dropout = intermediate_dropout
        self.tokenizer = tokenizer
        # Every weight exists from construction (as in a functional model): JAX traces the
        # first `fit` / `evaluate` step statelessly, where no variable may be created.
        self.build((None, None))

    def build(self, input_shape):
        self.token_embedding.build(input_shape)
        shape = (*input_shape, self.hidden_dim)
        self.position_embedding.build(shape)
        for block in self._blocks:
            block.build(shape)
        self.final_norm.build(shape)
        self.built = True

    def call(self, token_ids, training=None):
        padding_mask = None
        if isinstance(token_ids, dict):
            padding_mask = token_ids.get("padding_mask")
            token_ids = token_ids["token_ids"]
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        tokens = self.token_embedding(token_ids)
        x = self.embedding_dropout(tokens + self.position_embedding(tokens), training=training)
        length = ops.shape(token_ids)[1]
        causal = ops.cast(ops.tril(ops.ones((length, length))), "int32")
        mask = ops.broadcast_to(causal[None], (ops.shape(token_ids)[0], length, length))
        if padding_mask is not None:  # Padded keys are masked (keras-hub's decoder mask).
            keys = ops.cast(ops.convert_to_tensor(padding_mask), "int32")[:, None, :]
            mask = ops.minimum(mask, keys)
        for block in self._blocks:
            x = block(x, attention_mask=mask, training=training)
        return self._logits(x)

    def _logits(self, x: Any) -> Any:
        return self._tied_logits(self.final_norm(x))

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
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range,
                "activation": keras.activations.serialize(self.activation),
                "intermediate_dropout": self.intermediate_dropout,
                "tokenizer": None
                if self.tokenizer is None
                else keras.saving.serialize_keras_object(self.tokenizer),
            }
        )
        return config

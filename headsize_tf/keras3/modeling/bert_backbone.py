"""A BERT encoder (Keras 3 functional model) whose attention is any `AttentionSpec`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from headsize_tf.core.spec import AttentionSpec, SpecError, check_positive_int
from headsize_tf.keras3.modeling.activations import get_activation
from headsize_tf.keras3.modeling.position_embedding import PositionEmbedding
from headsize_tf.keras3.modeling.transformer_encoder import TransformerEncoder

# The pooler on the first token: BERT's tanh dense, DistilBERT classifiers' ReLU
# pre-classifier dense, or none (the first token's hidden state is the pooled output).
POOLERS = ("tanh", "relu", "none")


def bert_kernel_initializer(stddev: float = 0.02) -> keras.initializers.Initializer:
    """BERT's initializer of every kernel and embedding."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class BertBackbone(keras.Model):
    """A BERT encoder network with standard, fixed-head or collaborative attention.

    keras-hub's `BertBackbone` (token, segment and position embeddings,
    embedding LayerNorm and dropout, post-LN `TransformerEncoder` blocks,
    a tanh pooler on the first token) with `num_heads` replaced by
    `attention`, an `AttentionSpec` (or a dict of its fields) whose
    `num_heads` and `head_size` may be per-layer lists (a pruned model is an
    ordinary spec); `head_size="sequence_length"` resolves to
    `max_sequence_length`. A functional `keras.Model`: it trains with `fit`,
    saves as `.keras` and restores from `get_config`.

    Inputs: a dict of int32 `[batch, length]` tensors `token_ids`,
    `segment_ids` (absent with `num_segments=0`) and `padding_mask` (1 for
    tokens, 0 for padding). Outputs: a dict of `sequence_output`
    `[batch, length, hidden_dim]` and `pooled_output` `[batch, pooled_dim]`.

    The options beyond keras-hub's `BertBackbone` arguments describe the
    other BERT-family encoders: `num_segments=0` (no segment embedding, as
    DistilBERT), `pooler="relu"` with `pooled_dim` (DistilBERT
    classifiers' pre-classifier dense) or `pooler="none"` (the first token's
    hidden state), the feed-forward `activation` (keras-hub's BERT uses
    "gelu_approximate") and `layer_norm_epsilon`.

    Args:
      vocabulary_size: Size of the token vocabulary.
      num_layers: Number of Transformer blocks.
      hidden_dim: Width of the embeddings, blocks and pooler.
      intermediate_dim: Hidden size of each block's feed-forward net.
      attention: The blocks' `AttentionSpec` or a dict of its fields
        (per-layer lists allowed); standard attention with 12 heads by default.
      dropout: Dropout of the embeddings, attention probabilities and block
        outputs.
      max_sequence_length: Positions of the position embedding (and the
        longest input).
      num_segments: Number of segment ids; 0: no segment embedding and no
        `segment_ids` input (DistilBERT).
      activation: Feed-forward activation; exact (erf) GELU as BERT
        checkpoints by default ("gelu_approximate" for the tanh form).
      layer_norm_epsilon: Epsilon of every LayerNorm.
      pooler: "tanh" (BERT's pooler dense on the first token), "relu" (a
        ReLU dense, DistilBERT classifiers' pre-classifier) or "none" (the
        first token's hidden state, no weights).
      pooled_dim: Width of the pooler dense (default `hidden_dim`; must be
        `hidden_dim` with `pooler="none"`).
      dtype: dtype or `keras.DTypePolicy` of the computations and weights.
      **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Example:

    >>> backbone = BertBackbone(
    ...     vocabulary_size=1000, num_layers=2, hidden_dim=64, intermediate_dim=128,
    ...     attention=AttentionSpec("fixed_head", num_heads=[8, 4], head_size=32),
    ...     max_sequence_length=128)
    >>> ids = np.array([[2, 17, 5, 3, 0, 0]], "int32")
    >>> outputs = backbone(
    ...     {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": ids > 0})
    >>> outputs["sequence_output"].shape, outputs["pooled_output"].shape
    ((1, 6, 64), (1, 64))
    >>> [layer.num_heads for layer in backbone.attention_layers]
    [8, 4]

    References:
      - Devlin et al., 2019, "BERT", https://arxiv.org/abs/1810.04805
      - Bhojanapalli et al., 2020, "Low-Rank Bottleneck in Multi-head
        Attention Models", https://arxiv.org/abs/2002.07028
      - keras-hub's `keras_hub.models.BertBackbone`.
    """

    def __init__(
        self,
        vocabulary_size: int,
        num_layers: int,
        hidden_dim: int,
        intermediate_dim: int,
        attention: AttentionSpec | Mapping[str, Any] | None = None,
        dropout: float = 0.1,
        max_sequence_length: int = 512,
        num_segments: int = 2,
        activation: Any = "gelu",
        layer_norm_epsilon: float = 1e-12,
        pooler: str = "tanh",
        pooled_dim: int | None = None,
        dtype: Any = None,
        **kwargs: Any,
    ):
        for name, value in (
            ("vocabulary_size", vocabulary_size),
            ("num_layers", num_layers),
            ("hidden_dim", hidden_dim),
            ("intermediate_dim", intermediate_dim),
            ("max_sequence_length", max_sequence_length),
        ):
            check_positive_int(name, value)
        if num_segments != 0:
            check_positive_int("num_segments", num_segments, "a non-negative integer")
        if pooler not in POOLERS:
            raise SpecError(f"`pooler` must be one of {list(POOLERS)}; got {pooler!r}.")
        if pooled_dim is not None:
            check_positive_int("pooled_dim", pooled_dim)
            if pooler == "none" and pooled_dim != hidden_dim:
                raise SpecError(
                    f"`pooled_dim` ({pooled_dim}) must be hidden_dim ({hidden_dim}) with "
                    'pooler="none" (the pooled output is the first hidden state).'
                )
        spec = AttentionSpec.coerce(attention if attention is not None else {"num_heads": 12})
        layer_specs = spec.with_sequence_length(max_sequence_length).layers(num_layers)
        activation = get_activation(activation)

        # === Layers ===
        token_embedding = keras.layers.Embedding(
            input_dim=vocabulary_size,
            output_dim=hidden_dim,
            embeddings_initializer=bert_kernel_initializer(),
            dtype=dtype,
            name="token_embedding",
        )
        position_embedding = PositionEmbedding(
            sequence_length=max_sequence_length,
            initializer=bert_kernel_initializer(),
            dtype=dtype,
            name="position_embedding",
        )
        segment_embedding = None
        if num_segments:
            segment_embedding = keras.layers.Embedding(
                input_dim=num_segments,
                output_dim=hidden_dim,
                embeddings_initializer=bert_kernel_initializer(),
                dtype=dtype,
                name="segment_embedding",
            )
        embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm"
        )
        embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        transformer_layers = [
            TransformerEncoder(
                intermediate_dim=intermediate_dim,
                attention=layer_specs[i],
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=bert_kernel_initializer(),
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        pooled_dense = None
        if pooler != "none":
            pooled_dense = keras.layers.Dense(
                pooled_dim or hidden_dim,
                kernel_initializer=bert_kernel_initializer(),
                activation=pooler,
                dtype=dtype,
                name="pooled_dense",
            )

        # === Functional model ===
        inputs = {"token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids")}
        if segment_embedding is not None:
            inputs["segment_ids"] = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
        inputs["padding_mask"] = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        tokens = token_embedding(inputs["token_ids"])
        embedded = [tokens, position_embedding(tokens)]
        if segment_embedding is not None:
            embedded.append(segment_embedding(inputs["segment_ids"]))
        x = embeddings_add(embedded)
        x = embeddings_dropout(embeddings_layer_norm(x))
        for block in transformer_layers:
            x = block(x, padding_mask=inputs["padding_mask"])
        pooled = x[:, 0, :] if pooled_dense is None else pooled_dense(x[:, 0, :])
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": x, "pooled_output": pooled},
            dtype=dtype,
            **kwargs,
        )

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.attention = spec
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.pooler = pooler
        self.pooled_dim = pooled_dim
        self.token_embedding = token_embedding
        self.position_embedding = position_embedding
        self.segment_embedding = segment_embedding
        self.embeddings_layer_norm = embeddings_layer_norm
        self.pooled_dense = pooled_dense
        self._transformer_layers = transformer_layers

    @property
    def attention_spec(self) -> AttentionSpec:
        """The spec ("sequence_length" resolved to `max_sequence_length`)."""
        return self.attention.with_sequence_length(self.max_sequence_length)

    @property
    def transformer_layers(self) -> list[TransformerEncoder]:
        """The Transformer blocks, first to last."""
        return list(self._transformer_layers)

    @property
    def attention_layers(self) -> list[keras.layers.Layer]:
        """The attention layer of each block."""
        return [block.attention_layer for block in self._transformer_layers]

    def get_config(self) -> dict[str, Any]:
        # Not chained to super: a functional model's config is its layer graph.
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "attention": self.attention.to_dict(),
            "dropout": self.dropout,
            "max_sequence_length": self.max_sequence_length,
            "num_segments": self.num_segments,
            "activation": keras.activations.serialize(self.activation),
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "pooler": self.pooler,
            "pooled_dim": self.pooled_dim,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects=None) -> BertBackbone:
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.get(config["dtype"])
        if isinstance(config.get("activation"), dict):
            config["activation"] = keras.activations.deserialize(config["activation"])
        return cls(**config)

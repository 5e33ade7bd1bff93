"""The keras-hub architectures the bridge imports, and how their weights map onto ours.

Each `Architecture` names keras-hub's backbone, task and preprocessor
classes, builds the config of the library's model that computes the same
function (`our_config`), and lists keras-hub's layers in the order of
`headsize_tf.keras3.modeling.surgery.non_attention_layers` of that model
(`hub_layers`) plus its attention layers, so that weights copy layer by
layer in either direction. keras-hub's attention layers are stock
`keras.layers.MultiHeadAttention`s, read and written by role
(`headsize_tf.keras3.layers.roles`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import keras

# keras-hub's BERT family uses LayerNorm epsilon 1e-12; GPT-2 1e-5.
BERT_EPSILON, GPT2_EPSILON = 1e-12, 1e-5


def _bert_config(backbone: Mapping[str, Any], task: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "vocabulary_size": backbone["vocabulary_size"],
        "num_layers": backbone["num_layers"],
        "hidden_dim": backbone["hidden_dim"],
        "intermediate_dim": backbone["intermediate_dim"],
        "attention": {"kind": "standard", "num_heads": backbone["num_heads"]},
        "dropout": backbone["dropout"],
        "max_sequence_length": backbone["max_sequence_length"],
        "num_segments": backbone["num_segments"],
        "activation": "gelu_approximate",
        "layer_norm_epsilon": BERT_EPSILON,
        "pooler": "tanh",
        "pooled_dim": None,
    }


def _distil_bert_config(
    backbone: Mapping[str, Any], task: Mapping[str, Any] | None
) -> dict[str, Any]:
    return {
        **_bert_config({**backbone, "num_segments": 0}, None),
        "activation": "gelu",
        # The classifier's ReLU pre-classifier dense is our pooler; a bare backbone has none.
        "pooler": "relu" if task else "none",
        "pooled_dim": task["hidden_dim"] if task else None,
    }


def _gpt2_config(backbone: Mapping[str, Any], task: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "vocabulary_size": backbone["vocabulary_size"],
        "num_layers": backbone["num_layers"],
        "hidden_dim": backbone["hidden_dim"],
        "attention": {"kind": "standard", "num_heads": backbone["num_heads"]},
        "intermediate_dim": backbone["intermediate_dim"],
        "max_sequence_length": backbone["max_sequence_length"],
        "dropout": backbone["dropout"],
        "attention_dropout": backbone["dropout"],
        "intermediate_dropout": 0.0,
        "layer_norm_epsilon": GPT2_EPSILON,
        "activation": "gelu_approximate",
    }


def _block_layers(backbone: Any) -> list[keras.layers.Layer]:
    layers = []
    for block in backbone.transformer_layers:
        layers += [
            block._self_attention_layer_norm,
            block._feedforward_layer_norm,
            block._feedforward_intermediate_dense,
            block._feedforward_output_dense,
        ]
    return layers


def _bert_layers(backbone: Any, task: Any) -> list[keras.layers.Layer]:
    return [
        backbone.token_embedding,
        backbone.position_embedding,
        backbone.segment_embedding,
        backbone.embeddings_layer_norm,
        *_block_layers(backbone),
        backbone.pooled_dense,
    ]


def _distil_bert_layers(backbone: Any, task: Any) -> list[keras.layers.Layer]:
    layers = [
        backbone.embeddings.token_embedding,
        backbone.embeddings.position_embedding,
        backbone.embeddings_layer_norm,
        *_block_layers(backbone),
    ]
    return layers + ([task.pooled_dense] if task is not None else [])


def _gpt2_layers(backbone: Any, task: Any) -> list[keras.layers.Layer]:
    return [
        backbone.token_embedding,
        backbone.position_embedding,
        *_block_layers(backbone),
        backbone.layer_norm,
    ]


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A keras-hub architecture the bridge imports into the library's Keras 3 models.

    Args:
      name: Short name ("bert", "distil_bert", "gpt2").
      backbone_class: keras-hub's backbone class name (`keras_hub.models.*`).
      task_class: keras-hub's task class kept as the head (a text classifier
        or the causal LM).
      preprocessor_class: keras-hub's preprocessor class of that task.
      causal_lm: The library's model is a `CausalLM` (else a `BertBackbone`).
      tools: The `headsize-tf` commands that take it.
      config_fn: `(keras-hub backbone config, task config or None)` -> our
        model's config arguments.
      layers_fn: `(keras-hub backbone, task or None)` -> keras-hub's layers in
        `non_attention_layers` order.

    Example:

    >>> ARCHITECTURES["gpt2"].our_config(hub_backbone.get_config(), None)["activation"]
    'gelu_approximate'

    References:
      - keras-hub's `BertBackbone`, `DistilBertBackbone`, `GPT2Backbone`
        (https://github.com/keras-team/keras-hub).
    """

    name: str
    backbone_class: str
    task_class: str
    preprocessor_class: str
    causal_lm: bool
    tools: tuple[str, ...]
    config_fn: Callable[[Mapping[str, Any], Mapping[str, Any] | None], dict[str, Any]]
    layers_fn: Callable[[Any, Any], list[keras.layers.Layer]]

    @property
    def model_kind(self) -> str:
        """ "a causal LM" or "an encoder" (for messages)."""
        return "a causal LM" if self.causal_lm else "an encoder"

    def our_config(
        self, backbone_config: Mapping[str, Any], task_config: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """Arguments of the library's model equal to keras-hub's (weights aside)."""
        return self.config_fn(backbone_config, task_config)

    def hub_layers(self, backbone: Any, task: Any = None) -> list[keras.layers.Layer]:
        """keras-hub's weight-carrying layers other than attention, in our order."""
        return self.layers_fn(backbone, task)

    @staticmethod
    def hub_attention_layers(backbone: Any) -> list[keras.layers.Layer]:
        """keras-hub's self-attention layers (stock `MultiHeadAttention`), first to last."""
        return [block._self_attention_layer for block in backbone.transformer_layers]

    def hub_head(self, task: Any) -> tuple[keras.layers.Dense, float] | None:
        """A text classifier's logits `Dense` and its dropout rate (None: no such head)."""
        if task is None or self.causal_lm:
            return None
        return task.output_dense, float(task.dropout)


ARCHITECTURES: dict[str, Architecture] = {
    arch.name: arch
    for arch in (
        Architecture(
            "bert",
            "BertBackbone",
            "BertTextClassifier",
            "BertTextClassifierPreprocessor",
            False,
            ("embed", "compress", "prune"),
            _bert_config,
            _bert_layers,
        ),
        Architecture(
            "distil_bert",
            "DistilBertBackbone",
            "DistilBertTextClassifier",
            "DistilBertTextClassifierPreprocessor",
            False,
            ("embed", "compress", "prune"),
            _distil_bert_config,
            _distil_bert_layers,
        ),
        Architecture(
            "gpt2",
            "GPT2Backbone",
            "GPT2CausalLM",
            "GPT2CausalLMPreprocessor",
            True,
            # "convert": `headsize-tf convert --keras-hub-preset` (convert_hub_lm).
            ("compress", "prune", "convert"),
            _gpt2_config,
            _gpt2_layers,
        ),
    )
}
# Hugging Face `model_type`s (hf:// presets) keras-hub converts into these backbones.
HF_MODEL_TYPES = {
    "bert": "BertBackbone",
    "distilbert": "DistilBertBackbone",
    "gpt2": "GPT2Backbone",
}


def supported() -> str:
    """The supported keras-hub backbones, for messages."""
    return ", ".join(arch.backbone_class for arch in ARCHITECTURES.values())


def architecture_of_class(backbone_class: str) -> Architecture | None:
    """The `Architecture` of a keras-hub backbone class name, or None."""
    for arch in ARCHITECTURES.values():
        if arch.backbone_class == backbone_class:
            return arch
    return None

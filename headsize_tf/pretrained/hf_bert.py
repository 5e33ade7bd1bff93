"""Import Hugging Face-layout BERT checkpoints (safetensors) into our encoder.

A directory with `config.json` (a BERT config), `model.safetensors` and
`vocab.txt` becomes a `HeadsizeBertEncoder` with standard attention and the
same outputs. Reading and validation are framework-neutral
(`headsize_tf.core.hf_checkpoint`: tensors by role in the library's kernel
layout); this module assigns them to the tf_keras encoder's variables.
Optional `sentence_bert_config.json` (max_seq_length),
`tokenizer_config.json` (do_lower_case) and `1_Pooling/config.json` (pooling)
set up the `SentenceEncoder`.
"""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from headsize_tf.core import hf_checkpoint
from headsize_tf.core.hf_checkpoint import REQUIRED_FILES, read_config  # noqa: F401 (re-exported)
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
from headsize_tf.modeling.sentence_encoder import SentenceEncoder

_ACTIVATIONS = hf_checkpoint.ACTIVATIONS
_sentence_settings = hf_checkpoint.sentence_settings


def encoder_from_config(config: dict[str, Any]) -> HeadsizeBertEncoder:
    """A standard-attention `HeadsizeBertEncoder` shaped like a BERT config."""
    activation = _ACTIVATIONS[config.get("hidden_act", "gelu")]
    if activation == "gelu_approximate":
        from official.modeling import activations

        activation = activations.gelu
    return HeadsizeBertEncoder(
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        attention=AttentionSpec("standard", num_heads=config["num_attention_heads"]),
        inner_dim=config.get("intermediate_size", 4 * config["hidden_size"]),
        inner_activation=activation,
        output_dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        max_sequence_length=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2),
    ).build_weights()


def encoder_variables(encoder: HeadsizeBertEncoder) -> dict[str, Any]:
    """The encoder's variables by `hf_checkpoint` role."""
    variables = {
        "embeddings/word": encoder._embedding_layer.embeddings,
        "embeddings/position": encoder._position_embedding_layer._position_embeddings,
        "embeddings/segment": encoder._type_embedding_layer.embeddings,
        "embeddings/norm/gamma": encoder._embedding_norm_layer.gamma,
        "embeddings/norm/beta": encoder._embedding_norm_layer.beta,
        "pooler/kernel": encoder._pooler_layer.kernel,
        "pooler/bias": encoder._pooler_layer.bias,
    }
    for i, block in enumerate(encoder.transformer_layers):
        prefix = f"layer_{i}/"
        attention = block.attention_layer
        for part in ("query", "key", "value"):
            dense = getattr(attention, f"_{part}_dense")
            variables[f"{prefix}attention/{part}/kernel"] = dense.kernel
            variables[f"{prefix}attention/{part}/bias"] = dense.bias
        sublayers = {
            "attention/output": attention._output_dense,
            "intermediate": block._intermediate_dense,
            "output": block._output_dense,
        }
        for name, dense in sublayers.items():
            variables[f"{prefix}{name}/kernel"] = dense.kernel
            variables[f"{prefix}{name}/bias"] = dense.bias
        for name, norm in (
            ("attention_norm", block._attention_layer_norm),
            ("output_norm", block._output_layer_norm),
        ):
            variables[f"{prefix}{name}/gamma"] = norm.gamma
            variables[f"{prefix}{name}/beta"] = norm.beta
    return variables


def tensor_map(encoder: HeadsizeBertEncoder) -> list[tuple[str, Any, Callable]]:
    """(safetensors name, Keras variable, transform) for every encoder weight."""
    heads = encoder.attention_spec.num_heads
    variables = encoder_variables(encoder)
    return [
        (
            role.name,
            variables[role.role],
            functools.partial(hf_checkpoint.to_keras_layout, layout=role.layout, num_heads=heads),
        )
        for role in hf_checkpoint.tensor_roles(len(encoder.transformer_layers))
    ]


def assign_arrays(
    encoder: HeadsizeBertEncoder, arrays: Mapping[str, np.ndarray], source: str
) -> None:
    """Assigns `hf_checkpoint` arrays (by role) to the encoder's variables.

    Every role but the pooler must be present; shapes must match
    (`hf_checkpoint.assign_arrays`).
    """
    hf_checkpoint.assign_arrays(encoder_variables(encoder), arrays, source, "encoder")


def load_weights(
    encoder: HeadsizeBertEncoder, tensors: dict[str, np.ndarray], source: str
) -> list[str]:
    """Assigns safetensors tensors to the encoder; returns unused tensor names.

    Every encoder weight must be present with the right shape (the pooler is
    optional: sentence-transformers checkpoints sometimes drop it).
    """
    variables = encoder_variables(encoder)
    roles = hf_checkpoint.tensor_roles(len(encoder.transformer_layers))
    shapes = {
        role.name: hf_checkpoint.from_keras_shape(variables[role.role].shape, role.layout)
        for role in roles
    }
    arrays, unused = hf_checkpoint.bert_arrays(
        tensors,
        len(encoder.transformer_layers),
        encoder.attention_spec.num_heads,
        source,
        shapes=shapes,
    )
    assign_arrays(encoder, arrays, source)
    return unused


def import_hf_bert(directory: str | os.PathLike, source: str | None = None) -> SentenceEncoder:
    """Imports a Hugging Face-layout BERT directory as a `SentenceEncoder`."""
    checkpoint = hf_checkpoint.read_hf_bert(directory)
    encoder = encoder_from_config(checkpoint.config)
    assign_arrays(encoder, checkpoint.arrays, str(checkpoint.directory / "model.safetensors"))
    return SentenceEncoder(
        encoder,
        checkpoint.vocab_file,
        source=source or str(pathlib.Path(directory)),
        **checkpoint.settings,
    )

"""Import Hugging Face-layout BERT checkpoints (safetensors) into our encoder.

A directory with `config.json` (a BERT config), `model.safetensors` and
`vocab.txt` becomes a `HeadsizeBertEncoder` with standard attention and the
same outputs. Tensors are read with `safetensors.numpy` (no torch); PyTorch's
Linear weights are `(out, in)` and become Keras kernels by transposition.
Optional `sentence_bert_config.json` (max_seq_length),
`tokenizer_config.json` (do_lower_case) and `1_Pooling/config.json` (pooling)
set up the `SentenceEncoder`.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
from headsize_tf.modeling.sentence_encoder import SentenceEncoder

REQUIRED_FILES = ("config.json", "model.safetensors", "vocab.txt")
_IGNORED_TENSORS = ("embeddings.position_ids",)
_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_approximate"}


def read_config(directory: pathlib.Path) -> dict[str, Any]:
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is not valid JSON ({err}).") from None
    if config.get("model_type", "bert") != "bert":
        raise CheckpointError(
            f"{path}: model_type {config.get('model_type')!r} is not supported; expected 'bert'."
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(
            f"{path}: position_embedding_type {config['position_embedding_type']!r} is not "
            "supported; expected 'absolute'."
        )
    eps = float(config.get("layer_norm_eps", 1e-12))
    if abs(eps - 1e-12) > 1e-15:
        raise CheckpointError(f"{path}: layer_norm_eps {eps} is not supported; expected 1e-12.")
    if config.get("hidden_act", "gelu") not in _ACTIVATIONS:
        raise CheckpointError(
            f"{path}: hidden_act {config.get('hidden_act')!r} is not supported; expected one of "
            f"{sorted(_ACTIVATIONS)}."
        )
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        if key not in config:
            raise CheckpointError(f"{path} has no {key!r}.")
    return config


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


def _linear(heads: int | None = None, into_heads: bool = True) -> Callable[[np.ndarray], Any]:
    """PyTorch (out, in) weight -> Keras kernel, optionally split into heads."""

    def transform(w: np.ndarray) -> np.ndarray:
        kernel = w.T
        if heads is None:
            return kernel
        if into_heads:  # [in, heads * p] -> [in, heads, p]
            return kernel.reshape(kernel.shape[0], heads, -1)
        return kernel.reshape(heads, -1, kernel.shape[1])  # [heads * p, out] -> [heads, p, out]

    return transform


def _head_bias(heads: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda b: b.reshape(heads, -1)


def _same(x: np.ndarray) -> np.ndarray:
    return x


def tensor_map(encoder: HeadsizeBertEncoder) -> list[tuple[str, Any, Callable]]:
    """(safetensors name, Keras variable, transform) for every encoder weight."""
    heads = encoder.attention_spec.num_heads
    entries: list[tuple[str, Any, Callable]] = [
        ("embeddings.word_embeddings.weight", encoder._embedding_layer.embeddings, _same),
        (
            "embeddings.position_embeddings.weight",
            encoder._position_embedding_layer._position_embeddings,
            _same,
        ),
        (
            "embeddings.token_type_embeddings.weight",
            encoder._type_embedding_layer.embeddings,
            _same,
        ),
        ("embeddings.LayerNorm.weight", encoder._embedding_norm_layer.gamma, _same),
        ("embeddings.LayerNorm.bias", encoder._embedding_norm_layer.beta, _same),
    ]
    for i, block in enumerate(encoder._transformer_layers):
        prefix = f"encoder.layer.{i}."
        attention = block.attention_layer
        for role in ("query", "key", "value"):
            dense = getattr(attention, f"_{role}_dense")
            entries.append((f"{prefix}attention.self.{role}.weight", dense.kernel, _linear(heads)))
            entries.append((f"{prefix}attention.self.{role}.bias", dense.bias, _head_bias(heads)))
        out = attention._output_dense
        entries += [
            (f"{prefix}attention.output.dense.weight", out.kernel, _linear(heads, False)),
            (f"{prefix}attention.output.dense.bias", out.bias, _same),
            (
                f"{prefix}attention.output.LayerNorm.weight",
                block._attention_layer_norm.gamma,
                _same,
            ),
            (f"{prefix}attention.output.LayerNorm.bias", block._attention_layer_norm.beta, _same),
            (f"{prefix}intermediate.dense.weight", block._intermediate_dense.kernel, _linear()),
            (f"{prefix}intermediate.dense.bias", block._intermediate_dense.bias, _same),
            (f"{prefix}output.dense.weight", block._output_dense.kernel, _linear()),
            (f"{prefix}output.dense.bias", block._output_dense.bias, _same),
            (f"{prefix}output.LayerNorm.weight", block._output_layer_norm.gamma, _same),
            (f"{prefix}output.LayerNorm.bias", block._output_layer_norm.beta, _same),
        ]
    entries += [
        ("pooler.dense.weight", encoder._pooler_layer.kernel, _linear()),
        ("pooler.dense.bias", encoder._pooler_layer.bias, _same),
    ]
    return entries


def load_weights(
    encoder: HeadsizeBertEncoder, tensors: dict[str, np.ndarray], source: str
) -> list[str]:
    """Assigns safetensors tensors to the encoder; returns unused tensor names.

    Every encoder weight must be present with the right shape (the pooler is
    optional: sentence-transformers checkpoints sometimes drop it).
    """
    used = set(_IGNORED_TENSORS)
    for name, variable, transform in tensor_map(encoder):
        # BERT checkpoints converted from TF use "bert." prefixes and gamma/beta.
        key = next((k for k in (name, f"bert.{name}") if k in tensors), None)
        if key is None and name.endswith("LayerNorm.weight"):
            key = next((k for k in (name[:-6] + "gamma",) if k in tensors), None)
        if key is None and name.endswith("LayerNorm.bias"):
            key = next((k for k in (name[:-4] + "beta",) if k in tensors), None)
        if key is None:
            if name.startswith("pooler."):
                continue
            raise CheckpointError(f"{source}: tensor {name!r} is missing.")
        value = transform(np.asarray(tensors[key]))
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(
                f"{source}: tensor {key!r} has shape {tuple(tensors[key].shape)}, which does not "
                f"fit the encoder weight {variable.name} of shape {tuple(variable.shape)} "
                "(check config.json against the weights)."
            )
        variable.assign(value.astype(np.float32))
        used.add(key)
    return sorted(set(tensors) - used)


def _sentence_settings(directory: pathlib.Path) -> dict[str, Any]:
    settings: dict[str, Any] = {"lower_case": True, "max_seq_length": 512, "pooling": "cls"}
    tokenizer_config = directory / "tokenizer_config.json"
    if tokenizer_config.exists():
        settings["lower_case"] = bool(
            json.loads(tokenizer_config.read_text()).get("do_lower_case", True)
        )
    sbert = directory / "sentence_bert_config.json"
    if sbert.exists():
        settings["max_seq_length"] = int(json.loads(sbert.read_text()).get("max_seq_length", 512))
    pooling = directory / "1_Pooling" / "config.json"
    if pooling.exists():
        mode = json.loads(pooling.read_text())
        settings["pooling"] = "mean" if mode.get("pooling_mode_mean_tokens") else "cls"
        settings["normalize"] = True
    return settings


def import_hf_bert(directory: str | os.PathLike, source: str | None = None) -> SentenceEncoder:
    """Imports a Hugging Face-layout BERT directory as a `SentenceEncoder`."""
    from safetensors.numpy import load_file

    directory = pathlib.Path(directory)
    missing = [name for name in REQUIRED_FILES if not (directory / name).exists()]
    if missing:
        raise CheckpointError(
            f"Checkpoint directory {directory} lacks {missing}; a BERT checkpoint needs "
            f"{list(REQUIRED_FILES)} (Hugging Face layout) or a headsize_checkpoint.json."
        )
    config = read_config(directory)
    encoder = encoder_from_config(config)
    try:
        tensors = load_file(str(directory / "model.safetensors"))
    except Exception as err:  # safetensors raises its own error types.
        raise CheckpointError(f"{directory / 'model.safetensors'} is unreadable ({err}).") from None
    unused = load_weights(encoder, tensors, str(directory / "model.safetensors"))
    unused = [name for name in unused if not name.startswith(("cls.", "lm_head."))]
    if unused:
        raise CheckpointError(
            f"{directory / 'model.safetensors'} has tensors the BERT encoder does not use: "
            f"{unused[:5]}{' ...' if len(unused) > 5 else ''}."
        )
    settings = _sentence_settings(directory)
    positions = int(config.get("max_position_embeddings", 512))
    settings["max_seq_length"] = min(settings["max_seq_length"], positions)
    return SentenceEncoder(
        encoder, directory / "vocab.txt", source=source or str(directory), **settings
    )

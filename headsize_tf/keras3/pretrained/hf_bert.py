"""Import Hugging Face-layout BERT checkpoints (safetensors) into a Keras 3 `BertBackbone`.

Reading and validation are framework-neutral
(`headsize_tf.core.hf_checkpoint`: the arrays by role in the library's kernel
layout, which is stock Keras `MultiHeadAttention`'s); this module builds a
standard-attention `BertBackbone` of the checkpoint's shape and assigns them.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

import keras
import numpy as np

from headsize_tf.core import hf_checkpoint
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone
from headsize_tf.keras3.pretrained.sentence_encoder import SentenceEncoder


def backbone_from_checkpoint(checkpoint: hf_checkpoint.HFBertCheckpoint) -> BertBackbone:
    """A standard-attention `BertBackbone` shaped like the checkpoint's config (random weights)."""
    s = checkpoint.encoder_settings()
    return BertBackbone(
        vocabulary_size=s["vocab_size"],
        num_layers=s["num_layers"],
        hidden_dim=s["hidden_size"],
        intermediate_dim=s["intermediate_size"],
        attention=AttentionSpec("standard", num_heads=s["num_heads"]),
        dropout=s["dropout"],
        max_sequence_length=s["max_sequence_length"],
        num_segments=s["type_vocab_size"],
        activation=s["activation"],
        layer_norm_epsilon=s["layer_norm_epsilon"],
    )


def backbone_variables(backbone: BertBackbone) -> dict[str, keras.Variable]:
    """The backbone's variables by `hf_checkpoint` role."""
    variables = {
        "embeddings/word": backbone.token_embedding.embeddings,
        "embeddings/position": backbone.position_embedding.position_embeddings,
        "embeddings/segment": backbone.segment_embedding.embeddings,
        "embeddings/norm/gamma": backbone.embeddings_layer_norm.gamma,
        "embeddings/norm/beta": backbone.embeddings_layer_norm.beta,
        "pooler/kernel": backbone.pooled_dense.kernel,
        "pooler/bias": backbone.pooled_dense.bias,
    }
    for i, block in enumerate(backbone.transformer_layers):
        prefix = f"layer_{i}/"
        attention = block.attention_layer
        dense = {
            "attention/query": attention.query_dense,
            "attention/key": attention.key_dense,
            "attention/value": attention.value_dense,
            "attention/output": attention.output_dense,
            "intermediate": block._feedforward_intermediate_dense,
            "output": block._feedforward_output_dense,
        }
        for name, layer in dense.items():
            variables[f"{prefix}{name}/kernel"] = layer.kernel
            variables[f"{prefix}{name}/bias"] = layer.bias
        norms = {
            "attention_norm": block._self_attention_layer_norm,
            "output_norm": block._feedforward_layer_norm,
        }
        for name, layer in norms.items():
            variables[f"{prefix}{name}/gamma"] = layer.gamma
            variables[f"{prefix}{name}/beta"] = layer.beta
    return variables


def assign_arrays(backbone: BertBackbone, arrays: Mapping[str, np.ndarray], source: str) -> None:
    """Assigns `hf_checkpoint` arrays (by role) to a standard-attention backbone.

    Every role but the pooler must be present, with the variable's shape
    (`hf_checkpoint.assign_arrays`).
    """
    hf_checkpoint.assign_arrays(backbone_variables(backbone), arrays, source, "backbone")


def import_hf_bert(directory: str | os.PathLike, source: str | None = None) -> SentenceEncoder:
    """Imports a Hugging Face-layout BERT directory as a Keras 3 `SentenceEncoder`.

    Args:
      directory: Holds `config.json`, `model.safetensors` and `vocab.txt`
        (optionally sentence-transformers' tokenizer and pooling settings).
      source: Where the weights came from, for reports (default: the directory).

    Returns:
      A `SentenceEncoder` around a standard-attention `BertBackbone` with the
      checkpoint's weights.

    Raises:
      CheckpointError: files are missing, the config is unsupported, or
        tensors are missing, mis-shaped or unused.

    Example:

    >>> encoder = import_hf_bert("all-MiniLM-L6-v2/")
    >>> encoder.embed(["A man is eating food."]).shape
    (1, 384)
    """
    checkpoint = hf_checkpoint.read_hf_bert(directory)
    backbone = backbone_from_checkpoint(checkpoint)
    assign_arrays(backbone, checkpoint.arrays, str(checkpoint.directory / "model.safetensors"))
    return SentenceEncoder(
        backbone,
        checkpoint.vocab_file,
        source=source or str(pathlib.Path(directory)),
        **checkpoint.settings,
    )

"""Rebuilding a `BertBackbone`, `CausalLM` or `DecoderLM` with other attention, keeping the rest.

Conversion to collaborative heads and physical head removal both produce a
model whose attention spec differs (kind, per-layer head counts) while the
embeddings, norms, feed-forward nets and the pooler (BERT), final LayerNorm
(`CausalLM`) or final RMSNorm and output projection (`DecoderLM`) are copied
unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from headsize_tf.core.spec import AttentionSpec, SpecError
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone
from headsize_tf.keras3.modeling.causal_lm import CausalLM
from headsize_tf.keras3.modeling.decoder_lm import DecoderLM

# The models whose attention the Keras 3 tools rewrite (pruning, CP conversion).
AttentionModel = BertBackbone | CausalLM | DecoderLM


def non_attention_layers(model: AttentionModel) -> list[keras.layers.Layer]:
    """The weight-carrying layers other than attention, in a fixed order.

    Two models of the same class and shape but different attention have the
    same list, which is how conversions copy everything but attention. Absent
    layers (a BERT without segment embedding or pooler dense) are left out.
    """
    if isinstance(model, BertBackbone):
        layers = [
            model.token_embedding,
            model.position_embedding,
            model.segment_embedding,
            model.embeddings_layer_norm,
        ]
        last = [model.pooled_dense]
    elif isinstance(model, CausalLM):
        layers, last = [model.token_embedding, model.position_embedding], [model.final_norm]
    elif isinstance(model, DecoderLM):
        layers, last = [model.token_embedding], [model.final_norm, model.lm_head]
        for block in model.transformer_layers:
            layers += [
                block._self_attention_layer_norm,
                block._feedforward_layer_norm,
                block._feedforward_gate_dense,
                block._feedforward_intermediate_dense,
                block._feedforward_output_dense,
                *block._post_norms,  # Gemma 2's.
            ]
        return [layer for layer in layers + last if layer is not None]
    else:
        raise TypeError(
            f"Expected a Keras 3 BertBackbone, CausalLM or DecoderLM; got {type(model).__name__}."
        )
    for block in model.transformer_layers:
        layers += [
            block._self_attention_layer_norm,
            block._feedforward_layer_norm,
            block._feedforward_intermediate_dense,
            block._feedforward_output_dense,
        ]
    return [layer for layer in layers + last if layer is not None]


def with_attention(model: AttentionModel, attention: AttentionSpec | Mapping[str, Any]):
    """A new model of `model`'s class with `attention` and `model`'s other weights.

    The attention layers of the result are freshly initialised: the caller
    writes them (see `headsize_tf.keras3.reparam`, `headsize_tf.keras3.pruning`).
    """
    theirs = non_attention_layers(model)  # Checks the class first.
    modes = {
        layer.quantization_mode
        for layer in model._flatten_layers(include_self=False)
        if layer.quantization_mode is not None
    }
    if modes:
        raise SpecError(
            f"{model.name} is quantized ({', '.join(sorted(modes))}): its attention cannot be "
            "rebuilt from integer kernels; convert or prune the float model, then quantize the "
            "result."
        )
    config = model.get_config()
    config["attention"] = AttentionSpec.coerce(attention).to_dict()
    if getattr(model, "tokenizer", None) is not None:
        config["tokenizer"] = model.tokenizer  # The same tokenizer object (and vocabulary).
    new = type(model).from_config(config)
    mine = non_attention_layers(new)
    for dst, src in zip(mine, theirs, strict=True):
        dst.set_weights(src.get_weights())
    return new

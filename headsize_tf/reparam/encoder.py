"""Whole-encoder conversion into collaborative heads (`headsize-tf compress`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tqdm.auto import tqdm

from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
from headsize_tf.reparam.convert import (
    ConversionReport,
    assign_collaborative,
    convert_layer_weights,
)


def compress_encoder(
    encoder: HeadsizeBertEncoder,
    shared_key_dim: int,
    *,
    progress: bool = True,
    **kwargs: Any,
) -> tuple[HeadsizeBertEncoder, list[ConversionReport]]:
    """A collaborative copy of `encoder` with shared query/key size `shared_key_dim`.

    Every attention layer is converted (`convert_layer_weights`, a progress bar
    per layer); embeddings, LayerNorms, feed-forward layers and the pooler are
    copied. The source is left unchanged.

    Args:
      encoder: A `HeadsizeBertEncoder` with standard or fixed-head attention.
      shared_key_dim: The shared key dimension `D` of every layer.
      progress: Show a tqdm bar over layers.
      **kwargs: `method`, `max_iter`, `tol`, `tolerance`, `seed` of the CP.

    Returns:
      (the new encoder, one `ConversionReport` per layer).
    """
    if not isinstance(encoder, HeadsizeBertEncoder):
        raise ValueError(
            f"compress_encoder needs a HeadsizeBertEncoder; got {type(encoder).__name__}."
        )
    config = dict(encoder.get_config())
    spec = encoder.attention_spec
    if spec.kind == "collaborative":
        raise ValueError(
            "The encoder already has collaborative attention; convert a standard or fixed_head "
            "encoder."
        )
    encoder.build_weights()
    first = encoder.attention_layers[0]
    heads = first.num_heads
    full_rank = max(layer.num_heads * layer.head_size for layer in encoder.attention_layers)
    if isinstance(shared_key_dim, bool) or not 0 < int(shared_key_dim) <= full_rank:
        raise ValueError(
            f"shared_key_dim={shared_key_dim!r} is outside [1, {full_rank}]: the CP is exact at "
            f"the full rank num_heads x head_size = {full_rank}, and larger values only add "
            "parameters."
        )
    config["attention"] = dataclasses.replace(
        spec,
        kind="collaborative",
        shared_key_dim=int(shared_key_dim),
        head_size=first.head_size,
        mixing_initializer="concatenate" if int(shared_key_dim) % heads == 0 else "uniform",
    ).to_dict()
    # Converted first: a bad shared_key_dim fails before anything is built.
    reports: list[ConversionReport] = []
    converted = []
    bar = tqdm(
        encoder.attention_layers, desc=f"CP D={shared_key_dim}", unit="layer", disable=not progress
    )
    for index, layer in enumerate(bar):
        weights, report = convert_layer_weights(layer, shared_key_dim, **kwargs)
        report.name = f"layer_{index}"
        reports.append(report)
        converted.append(weights)
        bar.set_postfix(error=f"{report.relative_error:.3f}")
    new = HeadsizeBertEncoder.from_config(config).build_weights()
    new.copy_non_attention_weights(encoder)
    for layer, weights in zip(new.attention_layers, converted, strict=True):
        assign_collaborative(layer, weights)
    return new, reports

"""`headsize-tf embed` on the Keras 3 front: pretrained encoders and keras-hub presets.

Each runner takes the parsed arguments and returns the loaded sentence encoder
(its `embed(sentences, batch_size, progress)` gives the vectors); the registry in
`headsize_tf.cli.embed` picks one. Nothing here imports tf_keras.
"""

from __future__ import annotations

import argparse
from typing import Any

from headsize_tf.cli._args import encoder_options


def pretrained_encoder(args: argparse.Namespace) -> Any:
    """A pretrained encoder (`--model` / `--checkpoint`) on the Keras 3 front."""
    from headsize_tf.keras3.pretrained import load_sentence_encoder

    encoder = load_sentence_encoder(args.model, args.checkpoint)
    return encoder_options(encoder, args)


def hub_encoder(args: argparse.Namespace) -> Any:
    """`--keras-hub-preset`: a keras-hub BERT / DistilBERT, tokenised by its own preprocessor."""
    from headsize_tf.keras3.hub import load_hub_preset

    hub = load_hub_preset(args.keras_hub_preset, tool="embed")
    if hub.preprocessor is None:
        raise ValueError(
            f"keras-hub preset {args.keras_hub_preset} has no tokenizer to embed text."
        )
    if args.pooling:
        hub.pooling = args.pooling
    if args.sequence_length is not None:
        hub.preprocessor.sequence_length = args.sequence_length
    return hub

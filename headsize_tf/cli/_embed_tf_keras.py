"""`headsize-tf embed` on the tf_keras front: pretrained encoders and model_dirs.

Each runner takes the parsed arguments and returns the loaded sentence encoder
(its `embed(sentences, batch_size, progress)` gives the vectors); the registry in
`headsize_tf.cli.embed` picks one. The tf_keras front is imported inside them,
so importing this module (as `embed` does) loads no tf_keras.
"""

from __future__ import annotations

import argparse
from typing import Any

from headsize_tf.cli._args import encoder_options


def model_dir_encoder(args: argparse.Namespace) -> Any:
    """The trained encoder of a `headsize-tf train` model_dir (mean pooling by default)."""
    from headsize_tf.serving import experiment_sentence_encoder

    encoder = experiment_sentence_encoder(
        args.model_dir, args.vocab_file, pooling=args.pooling or "mean"
    )
    if args.sequence_length is not None:
        encoder.max_seq_length = args.sequence_length
    return encoder


def pretrained_encoder(args: argparse.Namespace) -> Any:
    """A pretrained encoder (`--model` / `--checkpoint`)."""
    from headsize_tf.pretrained import load_sentence_encoder

    encoder = load_sentence_encoder(args.model, args.checkpoint)
    return encoder_options(encoder, args)

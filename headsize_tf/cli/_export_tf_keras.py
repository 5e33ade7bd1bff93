"""`headsize-tf export` on the tf_keras front: pretrained encoders, checkpoints and model_dirs.

The runner takes the parsed arguments and returns the export's path and its
signatures; the registry in `headsize_tf.cli.export` picks it. The tf_keras
front is imported inside it, so importing this module (as `export` does) loads
no tf_keras.
"""

from __future__ import annotations

import argparse
import pathlib


def export(args: argparse.Namespace) -> tuple[pathlib.Path, str]:
    """A pretrained encoder, a `compress`/`prune` checkpoint or a `train` model_dir."""
    from headsize_tf.serving.sources import export_source

    path = export_source(
        args.output,
        args.task,
        model=args.model,
        checkpoint=args.checkpoint,
        model_dir=args.model_dir,
        vocab_file=args.vocab_file,
        beam_size=args.beam_size,
        max_decode_length=args.max_decode_length,
        version=args.version,
        overwrite=args.overwrite,
    )
    return path, "serving_default [text], serve_ids [ids, mask]"

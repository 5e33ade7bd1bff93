"""`headsize-tf compress` on the tf_keras front: pretrained encoders and model_dirs.

Each runner takes the parsed arguments and returns the compress report; the
registry in `headsize_tf.cli.compress` picks one. The tf_keras front is imported
inside them, so importing this module (as `compress` does) loads no tf_keras.
"""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import cp_options, read_lines


def compress_pretrained(args: argparse.Namespace) -> dict:
    """A pretrained encoder (`--model` / `--checkpoint`), its embeddings compared on
    `--eval-file` (default: Rotten Tomatoes test snippets)."""
    from headsize_tf.pretrained import load_sentence_encoder
    from headsize_tf.reparam import compress
    from headsize_tf.reparam.compress import held_out_sentences

    if args.eval_file:
        sentences = read_lines(args.eval_file)[: args.eval_limit]
    source = load_sentence_encoder(args.model, args.checkpoint)
    if not args.eval_file:
        sentences = held_out_sentences(args.eval_limit)
    return compress.compress(
        source, args.shared_key_dim, args.output, eval_sentences=sentences, **cp_options(args)
    )


def compress_model_dir(args: argparse.Namespace) -> dict:
    """A `headsize-tf train` model_dir, evaluated on its own dev data before and after."""
    from headsize_tf.training.train import experiment_of

    if args.framework != "tf_keras" or args.eval_file:
        raise ValueError(
            "--model-dir is evaluated on its own dev data: drop --framework keras3 and --eval-file."
        )
    if experiment_of(args.model_dir) == "headsize_bert/sentence_prediction":
        from headsize_tf.reparam.classifier_dir import compress_classifier_dir

        return compress_classifier_dir(
            args.model_dir, args.shared_key_dim, args.output, **cp_options(args)
        )
    from headsize_tf.reparam.model_dir import compress_model_dir as compress

    return compress(args.model_dir, args.shared_key_dim, args.output, **cp_options(args))

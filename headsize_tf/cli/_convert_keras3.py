"""`headsize-tf convert --framework keras3 --model FILE.keras`: the Keras 3 runner.

An import-linter contract keeps this module (with the core, the data floor and
the Keras 3 front) from importing tf_keras, Model Garden or the tf_keras front.
"""

from __future__ import annotations

import argparse
from typing import Any


def convert_lm_file(args: argparse.Namespace, target: Any) -> dict[str, Any]:
    """Converts the `.keras` CausalLM `args.model` to `target`; returns the report.

    The text (`--data-file` or `--corpus`) is tokenised with `--vocab` (default:
    the Austen corpus's vocab.txt) into windows of the model's positions (or
    `--sequence-length`) plus one.

    Args:
      args: `convert`'s parsed arguments.
      target: The `ConversionTarget`.
    """
    from headsize_tf.core.io import check_output_free

    text_given = args.data_file is not None or args.corpus is not None
    if args.uptrain_steps and not text_given:
        raise ValueError(
            "--uptrain-steps needs text to train on: pass --data-file FILE (plain text) or "
            "--corpus austen."
        )
    if args.convert_encoder:
        raise ValueError("--convert-encoder is for translation model_dirs; a CausalLM has none.")
    if not text_given and (args.vocab or args.sequence_length):
        raise ValueError("--vocab and --sequence-length shape the text of --data-file / --corpus.")
    check_output_free(args.output, args.overwrite)
    from headsize_tf.data.lm_text import load_lm_text
    from headsize_tf.keras3.reparam.lm_file import convert_lm_file as convert
    from headsize_tf.keras3.reparam.lm_file import load_lm_file

    lm = load_lm_file(args.model)
    text = None
    if text_given:
        length = args.sequence_length or lm.max_sequence_length
        if length > lm.max_sequence_length:
            raise ValueError(
                f"--sequence-length {length} is above the model's max_sequence_length "
                f"({lm.max_sequence_length})."
            )
        text = load_lm_text(
            length + 1,
            data_file=args.data_file,
            corpus=args.corpus,
            data_dir=args.data_dir,
            vocab_file=args.vocab,
        )
    cp = (
        {"max_iter": args.max_iter, "tolerance": args.tolerance}
        if target.kind == "collaborative"
        else {}
    )
    return convert(
        lm,
        target,
        args.output,
        text=text,
        uptrain_steps=args.uptrain_steps,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        decode_tokens=args.decode_tokens,
        overwrite=args.overwrite,
        source=str(args.model),
        **cp,
    )

"""`headsize-tf convert --model-dir`: the tf_keras runner (Model Garden model_dirs).

The tf_keras front is imported inside the runner, so importing this module (as
`convert` does) loads no tf_keras.
"""

from __future__ import annotations

import argparse
from typing import Any

KERAS3_ONLY = ("data_file", "corpus", "vocab_file", "sequence_length")


def convert_model_dir(args: argparse.Namespace, target: Any) -> dict[str, Any] | None:
    """Converts `args.model_dir` to `target`; returns the report (None: printed as `compress`
    prints it).

    Args:
      args: `convert`'s parsed arguments.
      target: The `ConversionTarget`.
    """
    from headsize_tf.reparam import convert_dir

    given = [name for name in KERAS3_ONLY if getattr(args, name) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(
            f"{flags}: text for a .keras LM (--model-file); a --model-dir is "
            "evaluated and uptrained on its own data."
        )
    try:
        experiment = convert_dir.check_source(args.model_dir, target)
    except ValueError as err:  # Name the flag, as the user typed it.
        raise ValueError(
            str(err).replace(f"model_dir={args.model_dir}", f"--model-dir {args.model_dir}")
        ) from None
    if experiment not in convert_dir.DECODERS:  # An encoder: `compress --model-dir`.
        if args.uptrain_steps:
            raise ValueError(
                f"--uptrain-steps is for {', '.join(convert_dir.DECODERS)} model_dirs; fine-tune "
                "the converted encoder with `headsize-tf train`."
            )
        from headsize_tf.cli import _compress_tf_keras, compress

        compress_args = argparse.Namespace(**vars(args))
        compress_args.method = target.method
        compress_args.framework = "tf_keras"
        compress_args.eval_file = None
        compress.print_report(compress_args, _compress_tf_keras.compress_model_dir(compress_args))
        return None
    cp = (
        {"max_iter": args.max_iter, "tolerance": args.tolerance}
        if target.kind == "collaborative"
        else {}
    )
    return convert_dir.convert_model_dir(
        args.model_dir,
        target,
        args.output,
        uptrain_steps=args.uptrain_steps,
        uptrain_learning_rate=args.learning_rate,
        overwrite=args.overwrite,
        convert_encoder=True if args.convert_encoder else None,
        eval_batches=args.eval_batches,
        decode_tokens=args.decode_tokens,
        **cp,
    )

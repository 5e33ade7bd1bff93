"""`headsize-tf prune` on the tf_keras front: pretrained encoders and model_dirs.

Each runner takes the parsed arguments and returns the prune report; the
registry in `headsize_tf.cli.prune` picks one. The tf_keras front is imported
inside them, so importing this module (as `prune` does) loads no tf_keras.
"""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import schedule_arguments, task_arguments


def model_dir_experiment(model_dir: str) -> str:
    """The experiment a `headsize-tf train` model_dir was trained with."""
    import json
    import pathlib

    from headsize_tf.training.train import EXPERIMENT_FILE

    marker = pathlib.Path(model_dir) / EXPERIMENT_FILE
    if not marker.exists():
        raise ValueError(
            f"--model-dir {model_dir} is not a `headsize-tf train` model_dir "
            f"(no {EXPERIMENT_FILE})."
        )
    return json.loads(marker.read_text())["experiment"]


def prune_pretrained(args: argparse.Namespace) -> dict:
    """Fine-tunes and prunes a pretrained encoder (`--model` / `--checkpoint`) on the task."""
    from headsize_tf.pruning import prune

    return prune.prune_task(
        args.output,
        model=args.model,
        checkpoint=args.checkpoint,
        **task_arguments(args),
        **schedule_arguments(args),
        finetune_epochs=args.finetune_epochs,
        importance_examples=args.importance_examples,
        overwrite=args.overwrite,
    )


def _batches(args: argparse.Namespace, scale: int = 1, unit: str = "batches") -> dict:
    """`--importance-batches` / `--eval-batches` as a runner's keyword arguments (given ones
    only; `scale` windows a batch where the runner counts windows)."""
    given = {"importance": args.importance_batches, "eval": args.eval_batches}
    return {f"{k}_{unit}": v * scale for k, v in given.items() if v is not None}


def prune_classifier_dir(args: argparse.Namespace) -> dict:
    """Prunes a sentence classifier or masked-LM model_dir."""
    from headsize_tf.pruning.classifier_dir import prune_classifier_dir

    schedule = schedule_arguments(args)
    return prune_classifier_dir(
        args.model_dir, args.output, **schedule, **_batches(args), overwrite=args.overwrite
    )


def prune_language_model(args: argparse.Namespace) -> dict:
    """Prunes a causal LM model_dir (its windows in batches of `LM_BATCH`)."""
    from headsize_tf.pruning.language_model import LM_BATCH, prune_language_model

    schedule = schedule_arguments(args)
    windows = _batches(args, LM_BATCH, "windows")
    return prune_language_model(
        args.model_dir, args.output, **schedule, **windows, overwrite=args.overwrite
    )


def prune_translation_model(args: argparse.Namespace) -> dict:
    """Prunes a translation model_dir (`--attention-kinds`: the kinds of attention pruned)."""
    from headsize_tf.pruning.translation import prune_translation_model

    kinds = {"kinds": args.attention_kinds} if args.attention_kinds else {}
    schedule = schedule_arguments(args)
    return prune_translation_model(
        args.model_dir, args.output, **schedule, **_batches(args), overwrite=args.overwrite, **kinds
    )

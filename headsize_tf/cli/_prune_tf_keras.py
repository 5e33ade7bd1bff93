"""`headsize-tf prune` on the tf_keras front: pretrained encoders and model_dirs."""

from __future__ import annotations

import argparse

# The one registry of what `prune` takes: a `headsize-tf train` model_dir (by its
# experiment) or a pretrained name / checkpoint (by framework). Later: `.keras` files and
# keras-hub presets.
MODEL_DIR_DRIVERS = {
    "headsize_bert/sentence_prediction": "headsize_tf.pruning.classifier_dir:prune_classifier_dir",
    "headsize_bert/pretraining": "headsize_tf.pruning.classifier_dir:prune_classifier_dir",
    "headsize_lm/language_modeling": "headsize_tf.pruning.language_model:prune_language_model",
    "headsize_seq2seq/translation": "headsize_tf.pruning.translation:prune_translation_model",
}


def _driver(name: str):
    import importlib

    module, function = name.split(":")
    return getattr(importlib.import_module(module), function)


def run(args: argparse.Namespace) -> dict:
    from headsize_tf.pruning import prune

    return prune.prune_task(
        args.output,
        model=args.model,
        checkpoint=args.checkpoint,
        task=args.task,
        data=args.data,
        data_dir=args.data_dir,
        data_file=args.data_file,
        data_format=args.data_format,
        text_column=args.text_column,
        text_pair_column=args.text_pair_column,
        label_column=args.label_column,
        split_column=args.split_column,
        tfds=args.tfds,
        target_fraction=args.target_fraction,
        step=args.step,
        recompute=not args.no_recompute,
        min_heads_per_layer=args.min_heads_per_layer,
        finetune_epochs=args.finetune_epochs,
        importance_examples=args.importance_examples,
        overwrite=args.overwrite,
    )


def run_model_dir(args: argparse.Namespace) -> dict:
    import json
    import pathlib

    from headsize_tf.training.train import EXPERIMENT_FILE

    marker = pathlib.Path(args.model_dir) / EXPERIMENT_FILE
    if not marker.exists():
        raise ValueError(
            f"--model_dir {args.model_dir} is not a `headsize-tf train` model_dir "
            f"(no {EXPERIMENT_FILE})."
        )
    experiment = json.loads(marker.read_text())["experiment"]
    if experiment not in MODEL_DIR_DRIVERS:
        raise ValueError(
            f"--model_dir {args.model_dir} is a {experiment} run; prune --model_dir "
            f"takes {', '.join(MODEL_DIR_DRIVERS)} runs."
        )
    if args.framework != "tf_keras" or args.data_file or args.tfds or args.data or args.task:
        raise ValueError(
            "--model_dir prunes the model on its own data: drop --framework keras3 "
            "and the data options."
        )
    schedule = dict(
        target_fraction=args.target_fraction,
        step=args.step,
        recompute=not args.no_recompute,
        min_heads_per_layer=args.min_heads_per_layer,
        overwrite=args.overwrite,
    )
    if args.attention_kinds and experiment != "headsize_seq2seq/translation":
        raise ValueError(
            "--attention-kinds is for translation model_dirs; this model has self-attention only."
        )
    if args.attention_kinds:
        schedule["kinds"] = args.attention_kinds
    return _driver(MODEL_DIR_DRIVERS[experiment])(args.model_dir, args.output, **schedule)

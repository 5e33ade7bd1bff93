"""`headsize-tf prune --framework keras3`: the Keras 3 runner, free of tf_keras.

An import-linter contract keeps this module (with the core, the data floor and
the Keras 3 front) from importing tf_keras, Model Garden or the tf_keras front.
"""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import schedule_arguments, task_arguments


def prune_pretrained(args: argparse.Namespace) -> dict:
    """Fine-tunes and prunes a pretrained encoder (`--model` / `--checkpoint`) on the task."""
    from headsize_tf.core.io import check_output_free
    from headsize_tf.data.text_tasks import load_task
    from headsize_tf.keras3.pretrained import load_sentence_encoder
    from headsize_tf.keras3.pruning.classifier import PruneSettings, prune_classifier

    check_output_free(args.output, args.overwrite)
    task = load_task(**task_arguments(args))
    encoder = load_sentence_encoder(args.model, args.checkpoint)
    settings = PruneSettings(
        **schedule_arguments(args),
        finetune_epochs=args.finetune_epochs,
        importance_examples=args.importance_examples,
    )
    report = prune_classifier(encoder, task, args.output, settings, overwrite=args.overwrite)
    data = report["data"]
    report["data_info"] = {
        "source": data["source"],
        "train_examples": len(task.train_labels),
        "dev_examples": len(task.dev_labels),
    }
    return report

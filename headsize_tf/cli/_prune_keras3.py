"""`headsize-tf prune --framework keras3`: the Keras 3 runner, free of tf_keras.

An import-linter contract keeps this module (with the core, the data floor and
the Keras 3 front) from importing tf_keras, Model Garden or the tf_keras front.
"""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> dict:
    from headsize_tf.core.io import check_output_free
    from headsize_tf.data.text_tasks import load_task
    from headsize_tf.keras3.pretrained import load_sentence_encoder
    from headsize_tf.keras3.pruning.classifier import PruneSettings, prune_classifier

    check_output_free(args.output, args.overwrite)
    task = load_task(
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
    )
    encoder = load_sentence_encoder(args.model, args.checkpoint)
    settings = PruneSettings(
        target_fraction=args.target_fraction,
        step=args.step,
        recompute=not args.no_recompute,
        min_heads_per_layer=args.min_heads_per_layer,
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

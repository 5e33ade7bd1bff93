"""`headsize-tf prune`: head importance, iterative pruning, physical head removal."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _fraction, _positive_int, add_model_source


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "prune",
        help="head importance, iterative pruning and physical head removal",
        description="Fine-tunes the encoder on the task (unless the checkpoint already has a "
        "classifier head from `prune`), scores heads by E|dL/dxi_h| (Michel et al. 2019), "
        "prunes --step of the heads at a time to --target-fraction, removes the pruned heads "
        "physically and writes the checkpoint, report.json, importance.png and curve.png.",
    )
    add_model_source(p)
    p.add_argument("--task", choices=["sentiment"], default="sentiment")
    p.add_argument("--data", choices=["rotten_tomatoes"], default="rotten_tomatoes")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--target-fraction", type=_fraction, default=0.5)
    p.add_argument("--step", type=_fraction, default=0.1)
    p.add_argument("--no-recompute", action="store_true",
                   help="score heads once on the unpruned model")  # fmt: skip
    p.add_argument("--min-heads-per-layer", type=int, default=1)
    p.add_argument("--finetune-epochs", type=float, default=2.0)
    p.add_argument("--importance-examples", type=_positive_int, default=1024)
    p.add_argument("--output", required=True)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from headsize_tf.pruning import prune

    report = prune.prune_task(
        args.output,
        model=args.model,
        checkpoint=args.checkpoint,
        task=args.task,
        data=args.data,
        data_dir=args.data_dir,
        target_fraction=args.target_fraction,
        step=args.step,
        recompute=not args.no_recompute,
        min_heads_per_layer=args.min_heads_per_layer,
        finetune_epochs=args.finetune_epochs,
        importance_examples=args.importance_examples,
        overwrite=args.overwrite,
    )
    print(f"{'pruned':>8}{'dev accuracy':>14}")
    for point in report["curve"]:
        print(f"{100 * point['fraction']:>7.0f}%{100 * point['metric']:>13.2f}%")
    print(f"params: {report['params_before']} -> {report['params_after']}; accuracy after "
          f"removal {100 * report['pruned_accuracy']:.2f}% (masked "
          f"{100 * report['masked_accuracy']:.2f}%)")  # fmt: skip
    print(f"output: {args.output}")
    return 0

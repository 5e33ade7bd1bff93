"""`headsize-tf tune`: Keras Tuner search over attention kind and head sizes."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _positive_int, add_option


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "tune",
        help="Keras Tuner search over attention kind, heads, head size, shared key dim",
        description="Trains trials of a registered experiment (Model Garden trainer) chosen by "
        "Keras Tuner from a search-space YAML (name: [choices] or {min, max, step}; names: "
        "attention_type, num_heads, head_size, shared_key_dim, width, num_layers). Trials over "
        "--budget-params are skipped; --match-params sets the heads to meet the budget. Writes "
        "results.csv, results.md and best.yaml (for `headsize-tf train`); reruns resume.",
    )
    p.add_argument("--experiment", required=True)
    add_option(
        p,
        "--config-file",
        hidden=["--config_file"],
        action="append",
        default=[],
        help="YAML file overriding the experiment (repeatable)",
    )
    p.add_argument("--search-space", required=True)
    p.add_argument("--budget-params", type=_positive_int, default=None)
    p.add_argument("--match-params", action="store_true")
    p.add_argument("--max-trials", type=_positive_int, default=10)
    p.add_argument("--max-epochs", type=_positive_int, default=3, help="hyperband only")
    p.add_argument("--tuner", choices=["random", "bayesian", "hyperband"], default="random")
    p.add_argument(
        "--objective",
        default=None,
        help="metric name, e.g. validation_loss (default: validation_loss for LMs, "
        "cls_accuracy for classifiers)",
    )
    p.add_argument("--direction", choices=["min", "max"], default=None)
    p.add_argument("--output", required=True)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import pathlib

    from headsize_tf import tuning

    objective = None
    if args.objective:
        import keras_tuner

        direction = args.direction or ("max" if "accuracy" in args.objective else "min")
        objective = keras_tuner.Objective(args.objective, direction)
    summary = tuning.tune(
        args.experiment,
        tuning.SearchSpace.from_yaml(args.search_space),
        args.output,
        config_files=tuple(args.config_file),
        tuner=args.tuner,
        max_trials=args.max_trials,
        budget_params=args.budget_params,
        match_params=args.match_params,
        objective=objective,
        max_epochs=args.max_epochs,
        data_dir=args.data_dir,
        seed=args.seed,
    )
    print(pathlib.Path(args.output, "results.md").read_text())
    print(
        f"trials: {summary['trials']} ({summary['completed']} trained, "
        f"{summary['skipped']} skipped over budget)"
    )
    if "best" in summary:
        print(f"best: {pathlib.Path(args.output, 'best.yaml')}")
    return 0

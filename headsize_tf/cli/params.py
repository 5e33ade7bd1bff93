"""`headsize-tf params`: encoder parameter counts and head-count matching."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from headsize_tf.cli._args import _head_size, _positive_int


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
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
    p.add_argument(
        "--head-size",
        type=_head_size,
        default=None,
        help=f"fixed_head and collaborative (default {HEAD_SIZE}); standard: width / heads",
    )
    p.add_argument(
        "--shared-key-dim",
        type=_positive_int,
        default=None,
        help="collaborative: the shared key dimension D",
    )
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
    p.set_defaults(func=run)
    return p


HEAD_SIZE = 32  # Of fixed and collaborative heads unless --head-size says otherwise.


def run(args: argparse.Namespace) -> int:
    from headsize_tf import params

    if args.attention_type == "standard" and args.head_size is not None:
        raise ValueError(
            f"--head-size {args.head_size}: standard heads are width / heads "
            f"({args.width} / {args.num_heads}); use --attention-type fixed_head to set it."
        )
    head_size = args.head_size if args.head_size is not None else HEAD_SIZE
    candidate = params.EncoderSpec(
        vocab_size=args.vocab_size,
        width=args.width,
        num_layers=args.num_layers,
        attention=params.AttentionSpec(
            kind=args.attention_type,
            num_heads=args.num_heads,
            head_size=head_size if args.attention_type != "standard" else None,
            shared_key_dim=args.shared_key_dim,
        ),
        max_sequence_length=args.max_sequence_length,
    )
    candidate.attention.resolve(args.width)  # A setting the layer refuses: one line.
    count = params.encoder_params(candidate)
    print(
        f"{args.attention_type} encoder: width {args.width}, {args.num_layers} layers, "
        f"{args.num_heads} heads -> {count.trainable:,} trainable parameters "
        f"(attention per layer: {candidate.layer_attention(0).trainable:,})"
    )
    if not args.match_widths:
        return 0
    if args.attention_type == "standard":
        print("\n(standard attention's parameters do not depend on its head count: no match)")
        return 0
    print()
    print(
        "| baseline width | baseline heads x size | baseline params | matched heads | matched params |"
    )
    print("|---:|---:|---:|---:|---:|")
    for line in _match_table(candidate, args.match_widths, args.baseline_heads):
        print(line)
    return 0


def _match_table(candidate, widths: list[int], baseline_heads: int) -> Iterator[str]:
    """Table rows: per baseline width, its parameters and the matching candidate heads."""
    import dataclasses

    from headsize_tf import params

    for width in widths:
        baseline = dataclasses.replace(
            candidate, width=width, attention=params.AttentionSpec("standard", baseline_heads)
        )
        try:
            base_count = params.encoder_params(baseline).trainable
        except ValueError as err:
            yield f"| {width} | invalid: {err} | | | |"
            continue
        heads = params.match_encoder_heads(baseline, candidate)
        matched = params.encoder_params(candidate.with_heads(heads)).trainable
        yield (
            f"| {width} | {baseline_heads} x {width // baseline_heads} | "
            f"{base_count:,} | {heads} | {matched:,} |"
        )

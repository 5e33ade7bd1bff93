"""`headsize-tf compress`: a pretrained encoder's attention as collaborative heads."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from headsize_tf.cli import _compress_keras3, _compress_tf_keras
from headsize_tf.cli._args import (
    _non_negative_float,
    _positive_int,
    add_framework,
    add_model_source,
    dispatch,
    model_source,
)

# ALS sweeps and eval sentences unless --max-iter and --eval-limit say otherwise.
MAX_ITER = 100
EVAL_LIMIT = 512


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compress",
        help="rewrite a pretrained encoder's attention as collaborative heads (CP)",
        description="Converts every attention layer into collaborative attention with a "
        "shared key dimension D by a CP decomposition of the stacked per-head W_Q W_K^T "
        "(exact when D >= heads * head_size). Writes a checkpoint directory (for `embed "
        "--checkpoint` and, via its encoder.yaml, `train`) with report.json.",
    )
    add_model_source(
        p,
        model_dir_help="a `headsize-tf train` model_dir (headsize_bert/sentence_prediction or "
        "pretraining, headsize_lm/language_modeling, headsize_seq2seq/translation): its "
        "attention is converted, everything else (the trained head) kept; writes a model_dir "
        "and reports the validation metrics (a classifier: dev accuracy) before and after",
        keras_hub=True,
    )
    add_framework(p)
    p.add_argument("--shared-key-dim", type=_positive_int, required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--method", choices=["als", "tensorly"], default="als")
    p.add_argument(
        "--max-iter",
        type=_positive_int,
        default=None,
        help=f"--method als: sweeps at most (default {MAX_ITER})",
    )
    p.add_argument(
        "--tolerance",
        type=_non_negative_float,
        default=None,
        help="warn when a layer's relative error exceeds this (a finite number >= 0)",
    )
    p.add_argument(
        "--eval-file",
        default=None,
        help="sentences for the embedding cosine (default: Rotten Tomatoes test snippets); "
        "not with --model-dir",
    )
    p.add_argument(
        "--eval-limit",
        type=_positive_int,
        default=None,
        help=f"eval sentences at most (default {EVAL_LIMIT}); not with --model-dir",
    )
    p.set_defaults(func=run)
    return p


# What `compress` takes, each source to its runner (parsed arguments -> report), by the
# keys of `_args.model_source`: the one dispatch of `embed`, `compress`, `convert`, `prune`
# and `export`.
RUNNERS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "model_dir": _compress_tf_keras.compress_model_dir,
    "pretrained/tf_keras": _compress_tf_keras.compress_pretrained,
    "pretrained/keras3": _compress_keras3.compress_pretrained,
    "keras_hub": _compress_keras3.compress_hub_preset,
}


def run(args: argparse.Namespace) -> int:
    from headsize_tf.core.io import check_output_free

    _check_flags(args)
    runner = dispatch(RUNNERS, args)
    check_output_free(args.output, args.overwrite)
    print_report(args, runner(args))
    return 0


def _check_flags(args: argparse.Namespace) -> None:
    """Refuses the flags the named model and method do not use; fills their defaults."""
    if args.max_iter is not None and args.method != "als":
        raise ValueError(
            f"--max-iter {args.max_iter} caps the sweeps of --method als; "
            f"--method {args.method} runs with its own defaults."
        )
    if args.eval_limit is not None and model_source(args) == "model_dir":
        raise ValueError(
            f"--eval-limit {args.eval_limit} counts an encoder's eval sentences; a --model-dir "
            "is evaluated on its own dev data."
        )
    if args.max_iter is None:
        args.max_iter = MAX_ITER
    if args.eval_limit is None:
        args.eval_limit = EVAL_LIMIT


def print_report(args: argparse.Namespace, report: dict) -> None:
    """The one printer: per-layer errors, parameters, and what the source measures (a
    model_dir: its validation metrics; an encoder: the embedding cosine; GPT-2: perplexity)."""
    print(f"{'layer':<10}{'rel. error':>12}{'seconds':>10}")
    for layer in report["layers"]:
        print(f"{layer['name']:<10}{layer['relative_error']:>12.4f}{layer['seconds']:>10.2f}")
    line = f"params: {report['params_before']} -> {report['params_after']}"
    if getattr(args, "model_dir", None):
        if "accuracy_before" in report:
            change = (
                f"dev accuracy {100 * report['accuracy_before']:.2f}% -> "
                f"{100 * report['accuracy_after']:.2f}%"
            )
        else:
            change = "; ".join(
                f"{k} {v:.4g} -> {report['after'][k]:.4g}" for k, v in report["before"].items()
            )
        print(f"{line}; {change}")
        print(f"output (a model_dir): {args.output}")
        return
    print(line)
    if "embedding_cosine" in report:
        print(
            f"embedding cosine vs original ({report['eval_sentences']} sentences): "
            f"{report['embedding_cosine']:.4f}"
        )
    if "perplexity_after" in report:
        print(
            f"perplexity ({report['eval_windows']} windows of the eval sentences): "
            f"{report['perplexity_before']:.2f} -> {report['perplexity_after']:.2f}"
        )
    print(f"output: {args.output}")

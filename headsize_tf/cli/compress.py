"""`headsize-tf compress`: a pretrained encoder's attention as collaborative heads."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _positive_int, add_framework, add_model_source, read_lines


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
    p.add_argument("--max-iter", type=_positive_int, default=100)
    p.add_argument(
        "--tolerance", type=float, default=None, help="warn when a layer's error exceeds this"
    )
    p.add_argument(
        "--eval-file",
        default=None,
        help="sentences for the embedding cosine (default: Rotten Tomatoes test snippets)",
    )
    p.add_argument("--eval-limit", type=_positive_int, default=512)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from headsize_tf.reparam.compress import held_out_sentences

    if getattr(args, "model_dir", None):
        return _run_model_dir(args)
    if args.keras_hub_preset:
        return _run_keras_hub(args)

    if args.framework == "keras3":
        from headsize_tf.keras3 import reparam as compress
        from headsize_tf.keras3.pretrained import load_sentence_encoder
    else:
        from headsize_tf.pretrained import load_sentence_encoder
        from headsize_tf.reparam import compress

    if args.eval_file:
        sentences = read_lines(args.eval_file)[: args.eval_limit]
    source = load_sentence_encoder(args.model, args.checkpoint)
    if not args.eval_file:
        sentences = held_out_sentences(args.eval_limit)
    report = compress.compress(
        source,
        args.shared_key_dim,
        args.output,
        eval_sentences=sentences,
        overwrite=args.overwrite,
        method=args.method,
        max_iter=args.max_iter,
        tolerance=args.tolerance,
    )
    print(f"{'layer':<10}{'rel. error':>12}{'seconds':>10}")
    for layer in report["layers"]:
        print(f"{layer['name']:<10}{layer['relative_error']:>12.4f}{layer['seconds']:>10.2f}")
    print(f"params: {report['params_before']} -> {report['params_after']}")
    if "embedding_cosine" in report:
        print(
            f"embedding cosine vs original ({report['eval_sentences']} sentences): "
            f"{report['embedding_cosine']:.4f}"
        )
    print(f"output: {args.output}")
    return 0


def _run_model_dir(args: argparse.Namespace) -> int:
    from headsize_tf.training.train import experiment_of

    if args.framework != "tf_keras" or args.eval_file:
        raise ValueError(
            "--model_dir is evaluated on its own dev data: drop --framework keras3 and --eval-file."
        )
    cp = dict(
        overwrite=args.overwrite,
        method=args.method,
        max_iter=args.max_iter,
        tolerance=args.tolerance,
    )
    if experiment_of(args.model_dir) == "headsize_bert/sentence_prediction":
        from headsize_tf.reparam.classifier_dir import compress_classifier_dir

        report = compress_classifier_dir(args.model_dir, args.shared_key_dim, args.output, **cp)
        change = (
            f"dev accuracy {100 * report['accuracy_before']:.2f}% -> "
            f"{100 * report['accuracy_after']:.2f}%"
        )
    else:
        from headsize_tf.reparam.model_dir import compress_model_dir

        report = compress_model_dir(args.model_dir, args.shared_key_dim, args.output, **cp)
        change = "; ".join(
            f"{k} {v:.4g} -> {report['after'][k]:.4g}" for k, v in report["before"].items()
        )
    print(f"{'layer':<10}{'rel. error':>12}{'seconds':>10}")
    for layer in report["layers"]:
        print(f"{layer['name']:<10}{layer['relative_error']:>12.4f}{layer['seconds']:>10.2f}")
    print(f"params: {report['params_before']} -> {report['params_after']}; {change}")
    print(f"output (a model_dir): {args.output}")
    return 0


def _run_keras_hub(args: argparse.Namespace) -> int:
    """`--keras-hub-preset`: BERT / DistilBERT (embedding cosine) or GPT-2 (perplexity)."""
    from headsize_tf.core.io import check_output_free
    from headsize_tf.keras3.hub import compress_hub_model, load_hub_preset

    check_output_free(args.output, args.overwrite)
    sentences = read_lines(args.eval_file)[: args.eval_limit] if args.eval_file else None
    hub = load_hub_preset(args.keras_hub_preset, tool="compress")
    if sentences is None:  # Rotten Tomatoes test snippets (fetched once), without tf_keras.
        from headsize_tf.data import corpora
        from headsize_tf.data.splits import split_of

        rows = corpora.fetch_rotten_tomatoes(
            corpora.default_data_dir() / ".downloads" / "rotten_tomatoes"
        )
        sentences = [text for _, text in rows if split_of(text) == "test"][: args.eval_limit]
    report = compress_hub_model(
        hub,
        args.shared_key_dim,
        args.output,
        eval_sentences=sentences,
        overwrite=args.overwrite,
        method=args.method,
        max_iter=args.max_iter,
        tolerance=args.tolerance,
    )
    print(f"{'layer':<10}{'rel. error':>12}{'seconds':>10}")
    for layer in report["layers"]:
        print(f"{layer['name']:<10}{layer['relative_error']:>12.4f}{layer['seconds']:>10.2f}")
    print(f"params: {report['params_before']} -> {report['params_after']}")
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
    return 0

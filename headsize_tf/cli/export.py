"""`headsize-tf export`: a SavedModel in the TF Serving layout."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _positive_int


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export",
        help="SavedModel (TF Serving layout) with raw-text and token-id signatures",
        description="Writes EXPORT_DIR/VERSION/ atomically: serving_default takes raw strings "
        "(tensorflow-text tokenisation in the graph), serve_ids takes int32 ids and masks. "
        "embedding: sentence vectors (also of the encoder of a pretraining, classifier or "
        "span-labeling `train` model_dir); sentence_prediction: logits and probabilities of a "
        "classifier (a `prune` checkpoint or a `train` model_dir); lm: log-likelihood and "
        "next-token probabilities of a causal LM `train` model_dir; translation: beam-search "
        "translations of a headsize_seq2seq/translation `train` model_dir.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a registered pretrained encoder (embedding)")
    source.add_argument("--checkpoint", help="checkpoint dir (compress/prune output, HF layout)")
    source.add_argument(
        "--model_dir",
        help="a `headsize-tf train` model_dir "
        "(headsize_bert/*, headsize_lm/language_modeling or "
        "headsize_seq2seq/translation)",
    )
    p.add_argument(
        "--vocab-file",
        default=None,
        help="vocabulary of a --model_dir (default: vocab.txt next to its data)",
    )
    p.add_argument(
        "--task", choices=["embedding", "sentence_prediction", "lm", "translation"], required=True
    )
    p.add_argument("--beam-size", type=_positive_int, default=4, help="translation: beams")
    p.add_argument(
        "--max-decode-length",
        type=_positive_int,
        default=None,
        help="translation: output pieces at most (default: the data's max_seq_length)",
    )
    p.add_argument("--output", required=True, help="EXPORT_DIR (versions go in EXPORT_DIR/N)")
    p.add_argument("--version", type=_positive_int, default=1)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from headsize_tf.serving.sources import export_source

    path = export_source(
        args.output,
        args.task,
        model=args.model,
        checkpoint=args.checkpoint,
        model_dir=args.model_dir,
        vocab_file=args.vocab_file,
        beam_size=args.beam_size,
        max_decode_length=args.max_decode_length,
        version=args.version,
        overwrite=args.overwrite,
    )
    print(f"exported: {path} (signatures: serving_default [text], serve_ids [ids, mask])")
    return 0

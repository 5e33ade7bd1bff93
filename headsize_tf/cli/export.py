"""`headsize-tf export`: a SavedModel in the TF Serving layout."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import DECODER_HELP, _positive_int, add_framework


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
        "translations of a headsize_seq2seq/translation `train` model_dir. With --framework "
        "keras3: a Keras 3 encoder (embedding), a `prune --framework keras3` checkpoint "
        "(sentence_prediction) or a Keras 3 CausalLM .keras file with --vocab-file (lm: also a "
        "`generate` signature, greedy continuations of text with a max_new_tokens input); a model "
        "of the JAX backend is rebuilt on TensorFlow in a subprocess.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a registered pretrained encoder (embedding)")
    source.add_argument(
        "--checkpoint",
        help="checkpoint dir (compress/prune output, HF layout); with --framework keras3 "
        "--task lm: a CausalLM .keras file",
    )
    source.add_argument(
        "--decoder",
        metavar="NAME_OR_PATH",
        default=None,
        help="--task lm on the Keras 3 front: " + DECODER_HELP + "; its own tokenizer is exported "
        "in-graph",
    )
    source.add_argument(
        "--model_dir",
        help="a `headsize-tf train` model_dir "
        "(headsize_bert/*, headsize_lm/language_modeling or "
        "headsize_seq2seq/translation)",
    )
    p.add_argument(
        "--vocab-file",
        default=None,
        help="vocabulary of a --model_dir (default: vocab.txt next to its data), or of a "
        "--framework keras3 --task lm checkpoint (required there)",
    )
    add_framework(p)
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
    p.add_argument(
        "--max-length",
        type=_positive_int,
        default=None,
        help="a --decoder: positions the export serves, prompt and continuation (default: the "
        "model's; the decoding caches have this length)",
    )
    p.add_argument("--output", required=True, help="EXPORT_DIR (versions go in EXPORT_DIR/N)")
    p.add_argument("--version", type=_positive_int, default=1)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if args.decoder is not None:
        if args.task != "lm":
            raise ValueError(f"--decoder exports a language model: --task lm, not {args.task}.")
        args.framework = "keras3"
    elif args.max_length is not None:
        raise ValueError("--max-length is for --decoder exports.")
    if args.framework == "keras3":
        return _run_keras3(args)
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


def _run_keras3(args: argparse.Namespace) -> int:
    if args.model_dir:
        raise ValueError(
            "--model_dir holds a tf_keras (Model Garden) model: drop --framework keras3."
        )
    try:
        from headsize_tf.keras3.serving import export_source
    except ImportError as err:  # A JAX-only machine: a SavedModel is a TensorFlow graph.
        raise RuntimeError(
            f"--framework keras3 export needs TensorFlow and tensorflow-text installed ({err})."
        ) from None

    path = export_source(
        args.output,
        args.task,
        model=args.model,
        checkpoint=args.checkpoint,
        vocab_file=args.vocab_file,
        version=args.version,
        overwrite=args.overwrite,
        decoder=args.decoder,
        max_length=args.max_length,
    )
    signatures = "serving_default [text], serve_ids [ids, mask]"
    if args.task == "lm":
        signatures += ", generate [text, max_new_tokens]"
    print(f"exported: {path} (signatures: {signatures})")
    return 0

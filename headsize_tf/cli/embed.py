"""`headsize-tf embed`: sentence embeddings of a text file."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _positive_int, add_framework, add_model_source, read_lines


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "embed",
        help="sentence embeddings from a pretrained or compressed encoder",
        description="Writes float32 [N, width] sentence embeddings (mean pooling and L2 "
        "normalisation for sentence-transformers models and `train` model_dirs), one per "
        "input line, in input order.",
    )
    add_model_source(
        p,
        model_dir_help="a `headsize-tf train` model_dir of an encoder "
        "experiment (headsize_bert/pretraining, sentence_prediction, span_labeling): "
        "its trained encoder embeds",
        keras_hub=True,
    )
    add_framework(p)
    p.add_argument(
        "--vocab-file",
        default=None,
        help="vocabulary of a --model_dir (default: vocab.txt next to its data)",
    )
    p.add_argument(
        "--pooling",
        choices=["mean", "cls"],
        default=None,
        help="sentence vector: mean over tokens or the [CLS] token (default: the "
        "model's own, mean for a --model_dir)",
    )
    p.add_argument("--input", required=True, help="text file, one sentence per line")
    p.add_argument("--output", required=True, help="output .npy file")
    p.add_argument("--max-seq-length", type=_positive_int, default=None)
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from headsize_tf.core.io import atomic_path

    if args.model_dir and args.framework != "tf_keras":
        raise ValueError(
            f"--model_dir holds a tf_keras (Model Garden) model: drop --framework {args.framework}."
        )
    if args.keras_hub_preset:
        return _run_keras_hub(args)
    if args.vocab_file and not args.model_dir:
        raise ValueError("--vocab-file is for a --model_dir; a pretrained encoder brings its own.")
    sentences = read_lines(args.input)
    if args.model_dir:
        from headsize_tf.serving import experiment_sentence_encoder

        encoder = experiment_sentence_encoder(
            args.model_dir, args.vocab_file, pooling=args.pooling or "mean"
        )
    else:
        if args.framework == "keras3":
            from headsize_tf.keras3.pretrained import load_sentence_encoder
        else:
            from headsize_tf.pretrained import load_sentence_encoder

        encoder = load_sentence_encoder(args.model, args.checkpoint)
        if args.pooling:
            encoder.pooling = args.pooling
    if args.max_seq_length is not None:
        if args.max_seq_length < 2:
            raise ValueError(f"--max-seq-length must be >= 2; got {args.max_seq_length}.")
        encoder.max_seq_length = args.max_seq_length
    vectors = encoder.embed(sentences, batch_size=args.batch_size, progress=True)
    output = args.output if args.output.endswith(".npy") else args.output + ".npy"
    with atomic_path(output) as tmp:
        np.save(tmp, vectors)
    print(f"embeddings: {vectors.shape[0]} x {vectors.shape[1]} float32 -> {output}")
    return 0


def _run_keras_hub(args: argparse.Namespace) -> int:
    """`--keras-hub-preset`: a keras-hub BERT / DistilBERT, tokenised by its own preprocessor."""
    import numpy as np

    from headsize_tf.core.io import atomic_path
    from headsize_tf.keras3.hub import load_hub_preset

    if args.vocab_file:
        raise ValueError("--vocab-file is for a --model_dir; a keras-hub preset brings its own.")
    if args.max_seq_length is not None and args.max_seq_length < 2:
        raise ValueError(f"--max-seq-length must be >= 2; got {args.max_seq_length}.")
    sentences = read_lines(args.input)
    hub = load_hub_preset(args.keras_hub_preset, tool="embed")
    if hub.preprocessor is None:
        raise ValueError(
            f"keras-hub preset {args.keras_hub_preset} has no tokenizer to embed text."
        )
    if args.pooling:
        hub.pooling = args.pooling
    if args.max_seq_length is not None:
        hub.preprocessor.sequence_length = args.max_seq_length
    vectors = hub.embed(sentences, batch_size=args.batch_size, progress=True)
    output = args.output if args.output.endswith(".npy") else args.output + ".npy"
    with atomic_path(output) as tmp:
        np.save(tmp, vectors)
    print(
        f"embeddings ({hub.architecture}, {hub.pooling} pooling): {vectors.shape[0]} x "
        f"{vectors.shape[1]} float32 -> {output}"
    )
    return 0

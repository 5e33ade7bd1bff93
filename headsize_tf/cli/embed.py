"""`headsize-tf embed`: sentence embeddings of a text file."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from headsize_tf.cli import _embed_keras3, _embed_tf_keras
from headsize_tf.cli._args import (
    _positive_int,
    add_framework,
    add_model_source,
    add_option,
    dispatch,
    model_source,
    read_lines,
)


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
        help="vocabulary of a --model-dir (default: vocab.txt next to its data)",
    )
    p.add_argument(
        "--pooling",
        choices=["mean", "cls"],
        default=None,
        help="sentence vector: mean over tokens or the [CLS] token (default: the "
        "model's own, mean for a --model-dir)",
    )
    p.add_argument("--input", required=True, help="text file, one sentence per line")
    p.add_argument("--output", required=True, help="output .npy file (.npy added if missing)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    add_option(
        p,
        "--sequence-length",
        hidden=["--max-seq-length"],
        type=_positive_int,
        default=None,
        help="tokens per sentence, longer ones cut (default: the model's; at least 2)",
    )
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.set_defaults(func=run)
    return p


# What `embed` takes, each source to its runner (parsed arguments -> a loaded encoder), by
# the keys of `_args.model_source`: the one dispatch of `embed`, `compress`, `convert`,
# `prune` and `export`.
RUNNERS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "model_dir": _embed_tf_keras.model_dir_encoder,
    "pretrained/tf_keras": _embed_tf_keras.pretrained_encoder,
    "pretrained/keras3": _embed_keras3.pretrained_encoder,
    "keras_hub": _embed_keras3.hub_encoder,
}


def run(args: argparse.Namespace) -> int:
    import os

    import numpy as np

    from headsize_tf.core.io import atomic_path, check_output_free

    source = model_source(args)
    if source == "model_dir" and args.framework != "tf_keras":
        raise ValueError(
            f"--model-dir holds a tf_keras (Model Garden) model: drop --framework {args.framework}."
        )
    if args.vocab_file and source != "model_dir":
        brings = "a keras-hub preset" if source == "keras_hub" else "a pretrained encoder"
        raise ValueError(f"--vocab-file is for a --model-dir; {brings} brings its own.")
    if args.sequence_length is not None and args.sequence_length < 2:
        raise ValueError(f"--sequence-length must be >= 2; got {args.sequence_length}.")
    runner = dispatch(RUNNERS, args, source)
    output = args.output if args.output.endswith(".npy") else args.output + ".npy"
    if os.path.realpath(output) == os.path.realpath(args.input):
        raise ValueError(f"--output {output} is the --input file; expected another path.")
    check_output_free(output, args.overwrite, "file")
    sentences = read_lines(args.input)
    encoder = runner(args)
    vectors = encoder.embed(sentences, batch_size=args.batch_size, progress=True)
    with atomic_path(output) as tmp:
        np.save(tmp, vectors)
    how = f" ({encoder.architecture}, {encoder.pooling} pooling)" if source == "keras_hub" else ""
    print(f"embeddings{how}: {vectors.shape[0]} x {vectors.shape[1]} float32 -> {output}")
    return 0

"""`headsize-tf export`: a SavedModel in the TF Serving layout, or a decoder's file for
llama.cpp (GGUF), Hugging Face or keras-hub (`--format`)."""

from __future__ import annotations

import argparse
import pathlib
from collections.abc import Callable

from headsize_tf.cli import _export_keras3, _export_tf_keras
from headsize_tf.cli._args import (
    _positive_int,
    add_framework,
    add_model_source,
    add_option,
    check_output_apart,
    dispatch,
    model_source,
)
from headsize_tf.core.io import check_output_free


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
        "(sentence_prediction), a Keras 3 CausalLM .keras file (--model-file) with --vocab-file "
        "or a pretrained --decoder (lm: also a `generate` signature, greedy continuations of "
        "text with a max_new_tokens input); a model of the JAX backend is rebuilt on TensorFlow "
        "in a subprocess. --format gguf, hf or keras_hub writes a --decoder (a pruned or grouped "
        "`.keras` one too) as a GGUF file for llama.cpp (layers pruned unevenly: its 'deci' "
        "architecture), a Hugging Face directory or a keras-hub preset instead.",
    )
    add_model_source(
        p,
        model_dir_help="a `headsize-tf train` model_dir "
        "(headsize_bert/*, headsize_lm/language_modeling or "
        "headsize_seq2seq/translation)",
        decoder=True,
        model_file_help="--task lm on the Keras 3 front: a CausalLM saved as .keras (with "
        "--vocab-file)",
        checkpoint_help="checkpoint dir (compress/prune output, HF layout)",
    )
    p.add_argument(
        "--vocab-file",
        default=None,
        help="vocabulary of a --model-dir (default: vocab.txt next to its data), or of a "
        "--model-file CausalLM (required there)",
    )
    add_framework(p)
    p.add_argument(
        "--task", choices=["embedding", "sentence_prediction", "lm", "translation"], required=True
    )
    p.add_argument(
        "--beam-size", type=_positive_int, default=None, help="translation: beams (default 4)"
    )
    p.add_argument(
        "--max-decode-length",
        type=_positive_int,
        default=None,
        help="translation: output pieces at most (default: the data's max_seq_length)",
    )
    add_option(
        p,
        "--max-sequence-length",
        hidden=["--max-length"],
        type=_positive_int,
        default=None,
        help="a --decoder: positions the export serves, prompt and continuation (default, and "
        "at most: the model's; a keras-hub preset records none, 8192 by default; the decoding "
        "caches have this length)",
    )
    p.add_argument(
        "--format",
        choices=["savedmodel", "gguf", "hf", "keras_hub"],
        default="savedmodel",
        help="savedmodel (default), or for a --decoder: gguf (llama.cpp: llama, deci for "
        "per-layer heads, deepseek2 for a rotated_high latent), hf (a Hugging Face "
        "directory) or keras_hub (a preset directory)",
    )
    p.add_argument(
        "--gguf-type",
        choices=["f32", "f16", "bf16", "q8_0"],
        default="f32",
        help="--format gguf: the matrices' type (norms stay f32; default f32)",
    )
    p.add_argument(
        "--output",
        required=True,
        help="EXPORT_DIR (versions go in EXPORT_DIR/N); --format gguf: the .gguf file; hf, "
        "keras_hub: the directory",
    )
    p.add_argument(
        "--version",
        type=_positive_int,
        default=None,
        help=f"--format savedmodel: the version directory EXPORT_DIR/N (default {VERSION})",
    )
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=run)
    return p


# What `export` takes, each source to its runner (parsed arguments -> path, signatures), by
# the keys of `_args.model_source`: the one dispatch of `embed`, `compress`, `convert`,
# `prune` and `export`.
RUNNERS: dict[str, Callable[[argparse.Namespace], tuple]] = {
    "model_dir": _export_tf_keras.export,
    "pretrained/tf_keras": _export_tf_keras.export,
    "pretrained/keras3": _export_keras3.export,
    "model_file": _export_keras3.export,
    "decoder": _export_keras3.export,
}


def run(args: argparse.Namespace) -> int:
    source = _source(args)
    runner = dispatch(RUNNERS, args, source)
    # The export directory is apart from the model read: neither it, in it, nor holding it.
    check_output_apart(args, inside=True)
    kind = "file" if args.format == "gguf" else "directory"
    check_output_free(getattr(args, "written_output", args.output), args.overwrite, kind)
    path, what = runner(args)
    print(f"exported: {path} ({'' if args.format != 'savedmodel' else 'signatures: '}{what})")
    return 0


# Beams of a translation export, and the SavedModel version, unless --beam-size and
# --version say otherwise.
BEAM_SIZE = 4
VERSION = 1


def _source(args: argparse.Namespace) -> str:
    """The registry key of what the arguments name (the front's options checked)."""
    if args.gguf_type != "f32" and args.format != "gguf":
        raise ValueError(f"--gguf-type {args.gguf_type} is for --format gguf.")
    if args.version is not None and args.format != "savedmodel":
        raise ValueError(
            f"--version {args.version} numbers a SavedModel export (--format savedmodel); "
            f"--format {args.format} writes --output itself."
        )
    if args.vocab_file is not None and args.decoder is not None:
        raise ValueError("--vocab-file is not for a --decoder: it brings its own tokenizer.")
    for flag, value in (
        ("--beam-size", args.beam_size),
        ("--max-decode-length", args.max_decode_length),
    ):
        if value is not None and args.task != "translation":
            raise ValueError(f"{flag} {value} shapes a translation export (--task translation).")
    if args.beam_size is None:
        args.beam_size = BEAM_SIZE
    if args.format != "savedmodel" and args.decoder is None:
        raise ValueError(
            f"--format {args.format} writes a pretrained or saved decoder: pass --decoder NAME, "
            "FILE.gguf, FILE.keras or DIR."
        )
    if args.decoder is not None:
        if args.task != "lm":
            raise ValueError(f"--decoder exports a language model: --task lm, not {args.task}.")
        args.framework = "keras3"
    elif args.max_sequence_length is not None:
        raise ValueError("--max-sequence-length is for --decoder exports.")
    if args.model_file is not None:
        args.framework = "keras3"
    source = model_source(args)
    if source == "model_dir" and args.framework == "keras3":
        raise ValueError(
            "--model-dir holds a tf_keras (Model Garden) model: drop --framework keras3."
        )
    if args.vocab_file is not None and source == "pretrained/tf_keras":
        raise ValueError(
            "--vocab-file is for a --model-dir (or a --model-file CausalLM); a pretrained "
            "encoder or --checkpoint brings its own."
        )
    if args.version is None:
        args.version = VERSION
    # A SavedModel goes to --output/--version (TF Serving's layout); the other formats to
    # --output itself.
    if args.format == "savedmodel":
        args.written_output = str(pathlib.Path(args.output) / str(args.version))
    return source

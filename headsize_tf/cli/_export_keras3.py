"""`headsize-tf export --framework keras3`: the Keras 3 runner, free of tf_keras.

The runner takes the parsed arguments and returns the export's path and its
signatures; the registry in `headsize_tf.cli.export` picks it. A SavedModel is
a TensorFlow graph: `headsize_tf.keras3.serving` needs TensorFlow and
tensorflow-text (not tf_keras).
"""

from __future__ import annotations

import argparse
import pathlib


def export(args: argparse.Namespace) -> tuple[pathlib.Path, str]:
    """A Keras 3 encoder, a `prune --framework keras3` checkpoint, a CausalLM `.keras` file
    (`--model-file`, or the older `--checkpoint FILE.keras`) or a pretrained `--decoder`."""
    if getattr(args, "format", "savedmodel") != "savedmodel":
        return _decoder_file(args)
    model_file = getattr(args, "model_file", None)
    if model_file is not None and args.task != "lm":
        raise ValueError(
            f"--model-file {model_file} is a Keras 3 CausalLM: it exports --task lm, "
            f"not {args.task}."
        )
    if model_file is not None and not (
        pathlib.Path(model_file).suffix == ".keras" and pathlib.Path(model_file).is_file()
    ):
        raise ValueError(
            f"--model-file {model_file}: expected a saved Keras 3 CausalLM, a .keras file."
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
        checkpoint=model_file if model_file is not None else args.checkpoint,
        vocab_file=args.vocab_file,
        version=args.version,
        overwrite=args.overwrite,
        decoder=args.decoder,
        max_length=args.max_sequence_length,
    )
    signatures = "serving_default [text], serve_ids [ids, mask]"
    if args.task == "lm":
        signatures += ", generate [text, max_new_tokens]"
    return path, signatures


def _decoder_file(args: argparse.Namespace) -> tuple[pathlib.Path, str]:
    """`--format gguf|hf|keras_hub`: the decoder written for llama.cpp, Hugging Face or keras-hub."""
    from headsize_tf.core.io import check_output_free
    from headsize_tf.keras3.pretrained.decoders import load_decoder, save_decoder

    if args.format == "gguf" and pathlib.Path(args.output).suffix != ".gguf":
        raise ValueError(f"--format gguf writes a .gguf file; got --output {args.output}.")
    check_output_free(args.output, args.overwrite, "file" if args.format == "gguf" else "directory")
    lm = load_decoder(args.decoder, max_sequence_length=args.max_sequence_length)
    if args.max_sequence_length not in (None, lm.max_sequence_length):  # A .keras model's.
        raise ValueError(
            f"--max-sequence-length {args.max_sequence_length}: {args.decoder} keeps its "
            f"{lm.max_sequence_length} positions in a --format {args.format} export."
        )
    path = save_decoder(lm, args.output, format=args.format, tensor_type=args.gguf_type)
    what = {"gguf": f"GGUF ({args.gguf_type})", "hf": "Hugging Face", "keras_hub": "keras-hub"}
    return path, f"{what[args.format]}; {_heads(lm)}"


def _heads(lm) -> str:
    """The written model's heads: one count, or the per-layer lists of a pruned model."""
    layers = lm.attention_layers
    queries = [layer.num_heads for layer in layers]
    groups = [getattr(layer, "num_kv_heads", layer.num_heads) for layer in layers]
    if len(set(queries)) == 1 and len(set(groups)) == 1:
        return f"{queries[0]} query and {groups[0]} key/value heads a layer"
    return f"query heads per layer {queries}, key/value heads {groups}"

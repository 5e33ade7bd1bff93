"""A Keras 3 `BertBackbone` with its WordPiece tokenizer and pooling: text in, vectors out."""

from __future__ import annotations

import os
import pathlib
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import keras
import numpy as np
from keras import ops

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.io import atomic_directory, check_output_free
from headsize_tf.data.sentence_checkpoint import SentenceEncoderSettings, TextSettings
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone

CHECKPOINT_FORMAT = "keras3-1"
BACKBONE_FILE = "backbone.keras"
# `embed` pads batches to a multiple of this many tokens (fewer shapes to compile).
LENGTH_MULTIPLE = 16


class SentenceEncoder(SentenceEncoderSettings):
    """A Keras 3 `BertBackbone` plus WordPiece tokenisation and pooling.

    The Keras 3 counterpart of `headsize_tf.pretrained.SentenceEncoder`:
    the same tokenizer (`headsize_tf.data.wordpiece.WordPieceTokenizer`,
    Hugging Face's ids), the same pooling and normalisation, so the two
    fronts embed a text alike. The backbone runs on any Keras 3 backend;
    tokenisation uses tensorflow-text (as keras-hub's tokenizers do).

    Args:
      backbone: The `BertBackbone` (any attention spec).
      vocab_file: WordPiece vocabulary (one token per line).
      lower_case: Lower-case and strip accents (uncased models).
      max_seq_length: Tokens per sentence including [CLS] and [SEP]
        (capped at the backbone's `max_sequence_length`).
      pooling: "mean" (over the padding mask, as sentence-transformers) or
        "cls" (the first token's hidden state).
      normalize: L2-normalise the sentence vectors.
      source: Where the weights came from (for reports).

    Example:

    >>> encoder = load_sentence_encoder("minilm-l6")
    >>> vectors = encoder.embed(["A man is eating food.", "A man is eating bread."])
    >>> float(vectors[0] @ vectors[1])  # cosine: the vectors are normalised

    References:
      - Reimers and Gurevych, 2019, "Sentence-BERT",
        https://arxiv.org/abs/1908.10084
    """

    def __init__(
        self,
        backbone: BertBackbone,
        vocab_file: str | os.PathLike,
        **settings: Unpack[TextSettings],
    ):
        self.backbone = backbone
        self.tokenizer = self._set_text_settings(vocab_file, **settings)

    @property
    def width(self) -> int:
        """Size of the sentence vectors."""
        return int(self.backbone.hidden_dim)

    def with_backbone(self, backbone: BertBackbone, source: str | None = None) -> SentenceEncoder:
        """The same tokenizer and pooling around another (converted, pruned) backbone."""
        return SentenceEncoder(backbone, self.vocab_file, **self.text_settings(source))

    # ------------------------------------------------------------ tokenising
    def tokenize(
        self, texts: Sequence[str], max_seq_length: int | None = None
    ) -> dict[str, np.ndarray]:
        """Backbone inputs (`token_ids`, `segment_ids`, `padding_mask`) of texts.

        int32 numpy arrays `[len(texts), length]`, padded to the longest text
        ([CLS] text [SEP], truncated to `max_seq_length`).
        """
        length = self.max_seq_length if max_seq_length is None else max_seq_length
        length = min(length, self.backbone.max_sequence_length)  # The backbone cannot see more.
        inputs = self.tokenizer.tokenize(list(texts), length)
        return {
            "token_ids": inputs["input_word_ids"].numpy(),
            "segment_ids": inputs["input_type_ids"].numpy(),
            "padding_mask": inputs["input_mask"].numpy(),
        }

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text ([CLS] ... [SEP], truncated), unpadded."""
        if not len(texts):
            return []
        inputs = self.tokenize(texts)
        return self._unpadded(inputs["token_ids"], inputs["padding_mask"])

    # --------------------------------------------------------------- encoding
    def pool(self, sequence_output: Any, padding_mask: Any) -> Any:
        """Sentence vectors `[batch, width]` from `[batch, length, width]` hidden states."""
        if self.pooling == "cls":
            pooled = sequence_output[:, 0, :]
        else:
            weights = ops.expand_dims(ops.cast(padding_mask, sequence_output.dtype), -1)
            total = ops.sum(sequence_output * weights, axis=1)
            pooled = total / ops.maximum(ops.sum(weights, axis=1), 1e-9)
        if self.normalize:
            squares = ops.sum(ops.square(pooled), axis=-1, keepdims=True)
            pooled = pooled * ops.rsqrt(ops.maximum(squares, 1e-24))
        return pooled

    def embed_inputs(self, inputs: Mapping[str, Any], training: bool = False) -> Any:
        """Pooled (and normalised) vectors of tokenised inputs (a backend tensor)."""
        outputs = self.backbone(dict(inputs), training=training)
        return self.pool(outputs["sequence_output"], inputs["padding_mask"])

    def embed(
        self, texts: Sequence[str], batch_size: int = 32, progress: bool = False
    ) -> np.ndarray:
        """float32 `[len(texts), width]` sentence embeddings, in input order.

        Texts are sorted by length and batched so that little padding is
        computed; an empty text embeds `[CLS] [SEP]`. The backbone runs with
        `predict_on_batch` (compiled by the backend) on batches padded to
        `batch_size` rows and a multiple of 16 tokens, so that a backend
        compiling per shape (JAX) compiles a few programs, not one per batch;
        padding is masked and does not change the vectors.
        """
        texts = list(texts)
        batches = self._length_batches(texts, batch_size, progress)
        out = np.zeros([len(texts), self.width], np.float32)
        if not texts:
            return out
        for index in batches:
            inputs = self.tokenize([texts[i] for i in index])
            inputs = _pad_batch(inputs, batch_size, self.backbone.max_sequence_length)
            outputs = self.backbone.predict_on_batch(inputs)
            pooled = self.pool(
                ops.convert_to_tensor(outputs["sequence_output"]),
                ops.convert_to_tensor(inputs["padding_mask"]),
            )
            out[index] = ops.convert_to_numpy(pooled)[: len(index)]
        return out

    # ------------------------------------------------------ saving / loading
    def checkpoint_config(self) -> dict[str, Any]:
        """The JSON written beside the backbone by `save`."""
        return {
            "format": CHECKPOINT_FORMAT,
            "backbone": BACKBONE_FILE,
            "backbone_config": self.backbone.get_config(),
            **self.text_settings(),
        }

    def save(self, directory: str | os.PathLike, *, overwrite: bool = False) -> pathlib.Path:
        """Writes a checkpoint directory atomically (temporary directory, then rename).

        Layout: `headsize_checkpoint.json` (format "keras3-1", tokenizer and
        pooling settings, the backbone's config for reference), `vocab.txt`
        and `backbone.keras` (the backbone in Keras' native format;
        `keras.saving.load_model` opens it).
        """
        final = pathlib.Path(directory)
        check_output_free(final, overwrite)
        with atomic_directory(final) as tmp:
            self.write_into(tmp)
        return final

    def write_into(self, directory: pathlib.Path) -> None:
        """Writes the checkpoint files into an existing (empty) `directory`: the body of
        `save`, for callers that add their own files before one atomic rename."""
        self.backbone.save(str(directory / BACKBONE_FILE))
        self._write_checkpoint_files(directory, self.checkpoint_config())

    @classmethod
    def load(cls, directory: str | os.PathLike) -> SentenceEncoder:
        """Loads a directory written by `save` (`load_sentence_encoder` opens others too)."""
        directory = pathlib.Path(directory)
        config, kwargs = cls._read_checkpoint(
            directory,
            CHECKPOINT_FORMAT,
            required=(),
            layout=f"headsize_checkpoint.json, vocab.txt and {BACKBONE_FILE} (written by "
            "SentenceEncoder.save)",
        )
        path = directory / config.get("backbone", BACKBONE_FILE)
        if not path.exists():
            raise CheckpointError(f"Checkpoint directory {directory} has no {path.name}.")
        try:
            backbone = keras.saving.load_model(str(path))
        except (OSError, ValueError, TypeError, KeyError, zipfile.BadZipFile) as err:
            raise CheckpointError(f"{path} is not a loadable Keras model ({err}).") from None
        if not isinstance(backbone, BertBackbone):
            raise CheckpointError(f"{path} holds a {type(backbone).__name__}, not a BertBackbone.")
        return cls(backbone, **kwargs)


def _pad_batch(
    inputs: dict[str, np.ndarray], rows: int, max_length: int, multiple: int = LENGTH_MULTIPLE
) -> dict[str, np.ndarray]:
    """Inputs padded to `rows` rows and a multiple of `multiple` tokens (at most `max_length`).

    Extra columns are masked padding; extra rows hold one unmasked token (so
    that no softmax is over masked keys only) and are dropped by the caller.
    """
    batch, length = inputs["token_ids"].shape
    padded_length = max(min(-(-length // multiple) * multiple, max_length), length)
    padded = {}
    for name, array in inputs.items():
        full = np.zeros((max(rows, batch), padded_length), array.dtype)
        full[:batch, :length] = array
        padded[name] = full
    padded["padding_mask"][batch:, 0] = 1
    return padded

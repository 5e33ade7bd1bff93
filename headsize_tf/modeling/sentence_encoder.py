"""An encoder with its WordPiece tokenizer and pooling: text in, vectors out."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np
import tensorflow as tf

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.io import atomic_directory, check_output_free
from headsize_tf.data.sentence_checkpoint import SentenceEncoderSettings, TextSettings
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder, plain_config

CHECKPOINT_FORMAT = 1


class SentenceEncoder(SentenceEncoderSettings, tf.Module):
    """A `HeadsizeBertEncoder` plus WordPiece tokenisation and pooling.

    Tokenisation runs in the TF graph with tensorflow-text's `BertTokenizer`
    (lower-casing and accent stripping as uncased BERT; the same ids as
    Hugging Face's `tokenizer.json`), so the whole text -> vector path exports.

    Args:
      encoder: The encoder (built or not).
      vocab_file: WordPiece vocabulary (one token per line).
      lower_case: Lower-case and strip accents (uncased models).
      max_seq_length: Tokens per sentence including [CLS] and [SEP].
      pooling: "mean" (over the attention mask, as sentence-transformers) or
        "cls".
      normalize: L2-normalise the sentence vectors.
      source: Where the weights came from (for reports).
    """

    def __init__(
        self,
        encoder: HeadsizeBertEncoder,
        vocab_file: str | os.PathLike,
        **settings: Unpack[TextSettings],
    ):
        super().__init__(name="sentence_encoder")
        self.encoder = encoder
        self.wordpiece = self._set_text_settings(vocab_file, **settings)
        self.vocab = self.wordpiece.vocab
        # tensorflow-text's BertTokenizer (tracked: its vocabulary is an asset
        # of any SavedModel holding this module).
        self.tokenizer = self.wordpiece.tokenizer

    def with_encoder(
        self, encoder: HeadsizeBertEncoder, source: str | None = None
    ) -> SentenceEncoder:
        """The same tokeniser and pooling around another (compressed, pruned) encoder."""
        return SentenceEncoder(encoder, self.vocab_file, **self.text_settings(source))

    # ------------------------------------------------------------ tokenising
    def tokenize(
        self,
        texts: tf.Tensor,
        max_seq_length: int | tf.Tensor | None = None,
        add_special_tokens: bool = True,
    ) -> dict[str, tf.Tensor]:
        """Encoder inputs for a `[batch]` string tensor, padded to the longest.

        Returns int32 `input_word_ids`, `input_mask`, `input_type_ids` of shape
        `[batch, length]` with `length <= max_seq_length` ([CLS] text [SEP], or
        the word pieces alone without `add_special_tokens`, as language models
        are trained here).
        """
        max_seq_length = self.max_seq_length if max_seq_length is None else max_seq_length
        positions = self.encoder.get_config().get("max_sequence_length")
        if positions and isinstance(max_seq_length, int):
            max_seq_length = min(max_seq_length, positions)  # The encoder cannot see more.
        return self.wordpiece.tokenize(texts, max_seq_length, add_special_tokens)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text ([CLS] ... [SEP], truncated), unpadded."""
        if not len(texts):
            return []
        inputs = self.tokenize(tf.constant(list(texts)))
        return self._unpadded(inputs["input_word_ids"].numpy(), inputs["input_mask"].numpy())

    # --------------------------------------------------------------- encoding
    def pool(self, sequence_output: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """Sentence vectors from `[batch, length, width]` hidden states."""
        if self.pooling == "cls":
            pooled = sequence_output[:, 0]
        else:
            weights = tf.cast(mask, sequence_output.dtype)[:, :, tf.newaxis]
            total = tf.reduce_sum(sequence_output * weights, axis=1)
            pooled = total / tf.maximum(tf.reduce_sum(weights, axis=1), 1e-9)
        if self.normalize:
            pooled = tf.math.l2_normalize(pooled, axis=-1, epsilon=1e-24)
        return pooled

    def embed_inputs(self, inputs: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """Pooled (and normalised) vectors of tokenised inputs."""
        outputs = self.encoder(inputs, training=training)
        return self.pool(outputs["sequence_output"], inputs["input_mask"])

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([None, None], tf.int32),
        ],
        reduce_retracing=True,
        autograph=False,  # No tensor-dependent Python control flow: a faster trace.
    )
    def _embed_ids(self, word_ids: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        inputs = {
            "input_word_ids": word_ids,
            "input_mask": mask,
            "input_type_ids": tf.zeros_like(word_ids),
        }
        return self.embed_inputs(inputs)

    def embed(
        self, texts: Sequence[str], batch_size: int = 32, progress: bool = False
    ) -> np.ndarray:
        """float32 `[len(texts), width]` sentence embeddings, in input order.

        Texts are sorted by length and batched so that little padding is
        computed; an empty text embeds `[CLS] [SEP]`.
        """
        texts = list(texts)
        batches = self._length_batches(texts, batch_size, progress)
        width = self.encoder.get_config()["hidden_size"]
        out = np.zeros([len(texts), width], np.float32)
        if not texts:
            return out
        for index in batches:
            inputs = self.tokenize(tf.constant([texts[i] for i in index]))
            vectors = self._embed_ids(inputs["input_word_ids"], inputs["input_mask"])
            out[index] = vectors.numpy()
        return out

    # ------------------------------------------------------ saving / loading
    def checkpoint_config(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "encoder_config": plain_config(self.encoder.get_config()),
            **self.text_settings(),
        }

    def save(
        self,
        directory: str | os.PathLike,
        *,
        overwrite: bool = False,
        extra_files: dict[str, str | bytes] | None = None,
    ) -> pathlib.Path:
        """Writes a checkpoint directory atomically (temporary dir, then rename).

        Layout: `headsize_checkpoint.json` (encoder config, tokenizer and
        pooling settings), `vocab.txt`, and `ckpt/` (a `tf.train.Checkpoint`
        with the key `encoder`, the layout Model Garden's tasks read as
        `init_checkpoint`). `extra_files` maps names to text or bytes written alongside.
        """
        final = pathlib.Path(directory)
        check_output_free(final, overwrite)
        with atomic_directory(final) as tmp:
            self.encoder.build_weights()
            checkpoint = tf.train.Checkpoint(encoder=self.encoder)
            checkpoint.save(str(tmp / "ckpt" / "encoder"))
            self._write_checkpoint_files(tmp, self.checkpoint_config())
            for name, content in (extra_files or {}).items():
                if isinstance(content, bytes):
                    (tmp / name).write_bytes(content)
                else:
                    (tmp / name).write_text(content)
        return final

    @classmethod
    def load(cls, directory: str | os.PathLike) -> SentenceEncoder:
        """Loads a directory written by `save` (see `load_sentence_encoder` for others)."""
        directory = pathlib.Path(directory)
        config, kwargs = cls._read_checkpoint(
            directory,
            CHECKPOINT_FORMAT,
            required=("ckpt",),
            layout="headsize_checkpoint.json, vocab.txt and ckpt/ (written by `headsize-tf "
            "compress` or SentenceEncoder.save)",
        )
        encoder = HeadsizeBertEncoder.from_config(dict(config["encoder_config"])).build_weights()
        latest = tf.train.latest_checkpoint(str(directory / "ckpt"))
        if latest is None:
            raise CheckpointError(f"{directory / 'ckpt'} holds no TF checkpoint.")
        status = tf.train.Checkpoint(encoder=encoder).read(latest)
        try:
            status.assert_existing_objects_matched().expect_partial()
        except AssertionError as err:
            raise CheckpointError(f"{latest} does not match its encoder config: {err}") from None
        return cls(encoder, **kwargs)

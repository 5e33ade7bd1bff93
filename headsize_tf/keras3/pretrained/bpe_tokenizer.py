"""A byte-level BPE tokenizer for the Keras 3 decoders, on Hugging Face `tokenizers` (no TensorFlow)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np


def _require_tokenizers():
    # `tokenizers` is in the base install.
    import tokenizers

    return tokenizers


@keras.saving.register_keras_serializable(package="headsize_tf_keras3")
class BytePairTokenizer:
    """Text <-> token ids of a Llama-family model, from a `tokenizers` JSON.

    The tokenizer a `DecoderLM` carries for `generate` on text: it wraps a
    Hugging Face `tokenizers.Tokenizer` (byte-level BPE with the model's own
    pre-tokenizer; GGUF files and Hugging Face directories both give one),
    needs no TensorFlow (so it runs on a JAX-only install), and saves with
    the model in `.keras` files (the JSON is part of its config). It adds no
    special tokens itself: `generate` and the text windows put
    `start_token_id` in front where `add_start_token` says so.

    Args:
      tokenizer_json: The tokenizer as a `tokenizers` JSON string.
      start_token_id: The beginning-of-sequence id (None: none).
      end_token_id: The end-of-sequence id (None: none).
      chat_template: The model's chat template (Jinja), kept for users.
      add_start_token: Whether text starts with `start_token_id` (the model
        file's rule: `LlamaCheckpoint.add_bos_token`).

    Example:

    >>> tokenizer = BytePairTokenizer(checkpoint.tokenizer_json, 1, 2)
    >>> tokenizer.detokenize(tokenizer.tokenize("Hello world"))
    'Hello world'
    """

    def __init__(
        self,
        tokenizer_json: str,
        start_token_id: int | None = None,
        end_token_id: int | None = None,
        chat_template: str | None = None,
        add_start_token: bool = True,
    ):
        tokenizers = _require_tokenizers()
        self.tokenizer_json = tokenizer_json
        self._tokenizer = tokenizers.Tokenizer.from_str(tokenizer_json)
        self.start_token_id = None if start_token_id is None else int(start_token_id)
        self.end_token_id = None if end_token_id is None else int(end_token_id)
        self.chat_template = chat_template
        self.add_start_token = bool(add_start_token)

    @property
    def vocabulary_size(self) -> int:
        """Tokens in the vocabulary, added tokens included."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def special_token_ids(self) -> list[int]:
        """Ids of the special (added, control) tokens."""
        return sorted(
            token_id
            for token_id, token in self._tokenizer.get_added_tokens_decoder().items()
            if token.special
        )

    def tokenize(self, text: str | Sequence[str]) -> np.ndarray | list[np.ndarray]:
        """int32 ids of `text` (a list of arrays for a list of strings)."""
        if isinstance(text, str):
            ids = self._tokenizer.encode(text, add_special_tokens=False).ids
            return np.asarray(ids, np.int32)
        encodings = self._tokenizer.encode_batch(list(text), add_special_tokens=False)
        return [np.asarray(e.ids, np.int32) for e in encodings]

    def detokenize(self, ids: Any) -> str:
        """The text of `ids` (special tokens dropped)."""
        ids = np.asarray(ids).reshape(-1).tolist()
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tokenizer.id_to_token(int(token_id))

    def get_config(self) -> dict[str, Any]:
        return {
            "tokenizer_json": self.tokenizer_json,
            "start_token_id": self.start_token_id,
            "end_token_id": self.end_token_id,
            "chat_template": self.chat_template,
            "add_start_token": self.add_start_token,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BytePairTokenizer:
        return cls(**config)

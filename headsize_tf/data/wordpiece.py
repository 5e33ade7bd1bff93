"""WordPiece tokenisation with the ids of Hugging Face's BERT tokenizers, with or without TensorFlow.

Shared by the tf_keras `SentenceEncoder` and the Keras 3 one: text in, int32 encoder inputs
out. `WordPieceTokenizer` is, where tensorflow-text is installed (the `tf` extra),
`wordpiece_tf.TFWordPieceTokenizer`: computed in the TF graph, so the text -> vector path
exports as a SavedModel, as it always was. Without it (the base install: JAX, a Colab TPU),
`wordpiece_hf.HFWordPieceTokenizer`: the same arguments, methods and ids on Hugging Face's
`tokenizers`, with numpy outputs (which have `.numpy()` too).
tests/data/wordpiece_backends_test.py holds the two to the same ids on the Austen novels
and on varied text.

Example:

>>> from headsize_tf.data.wordpiece import WordPieceTokenizer
>>> tokenizer = WordPieceTokenizer("vocab.txt", max_seq_length=128)
>>> tokenizer.token_ids(["A man is eating food."])
[[101, 1037, 2158, 2003, 5983, 2833, 1012, 102]]
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from headsize_tf.core.extras import available
from headsize_tf.data._wordpiece_common import (
    FOLD,
    MAX_BYTES_PER_WORD,
    SPECIAL_TOKENS,
    WordPieceVocab,
)

if TYPE_CHECKING:
    from headsize_tf.data.wordpiece_hf import HFWordPieceTokenizer
    from headsize_tf.data.wordpiece_tf import TFWordPieceTokenizer

    WordPieceTokenizer = TFWordPieceTokenizer | HFWordPieceTokenizer

__all__ = [
    "FOLD",
    "MAX_BYTES_PER_WORD",
    "SPECIAL_TOKENS",
    "WordPieceTokenizer",
    "WordPieceVocab",
    "wordpiece_backend",
]


@functools.cache
def wordpiece_backend() -> str:
    """ "tensorflow_text" where tensorflow-text imports (the `tf` extra), else "tokenizers"."""
    return "tensorflow_text" if available("tensorflow_text") else "tokenizers"


def __getattr__(name: str) -> Any:
    # `WordPieceTokenizer` is picked on first use, so that importing this module imports no
    # TensorFlow.
    if name == "WordPieceTokenizer":
        if wordpiece_backend() == "tensorflow_text":
            from headsize_tf.data.wordpiece_tf import TFWordPieceTokenizer

            return TFWordPieceTokenizer
        from headsize_tf.data.wordpiece_hf import HFWordPieceTokenizer

        return HFWordPieceTokenizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""What the two WordPiece tokenizers share: the vocabulary, its checks, and the settings.

`headsize_tf.data.wordpiece` picks the tokenizer: tensorflow-text's, in the TensorFlow graph
(`wordpiece_tf`), where TensorFlow is installed, and Hugging Face `tokenizers`'
(`wordpiece_hf`) elsewhere; both give the same ids. No TensorFlow here.
"""

from __future__ import annotations

import numbers
import os
import pathlib
from collections.abc import Sequence
from typing import Any

from headsize_tf.core.errors import CheckpointError

SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]", "[UNK]")
# Words longer than this are one [UNK]: tensorflow-text's `max_bytes_per_word` (UTF-8 bytes).
MAX_BYTES_PER_WORD = 100
SUFFIX_INDICATOR = "##"


def read_vocab(vocab_file: str | os.PathLike) -> list[str]:
    """The tokens of a vocabulary file, as TensorFlow's `TextFileInitializer` reads them."""
    lines = pathlib.Path(vocab_file).read_bytes().decode("utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


FOLD = "fold"  # `lower_case` of tensorflow-text's own lower-casing (NFKC case folding).


class WordPieceVocab:
    """The vocabulary and settings of a WordPiece tokenizer, checked.

    Sets `vocab_file` (str), `vocab` (the tokens, one a line of the file, as TensorFlow's
    lookup tables read it: lines end at "\\n", a "\\r" before it dropped), `lower_case`,
    `max_seq_length`, and the ids `cls_id`, `sep_id`, `pad_id` and `unk_id`.

    Raises:
      ValueError: `max_seq_length` is not an int >= 2.
      CheckpointError: the vocabulary lacks [CLS], [SEP], [PAD] or [UNK], or holds a
        token twice.
    """

    def _set_vocab(
        self,
        vocab_file: str | os.PathLike,
        lower_case: bool,
        max_seq_length: int,
        required: Sequence[str] = SPECIAL_TOKENS,
    ) -> None:
        if (
            isinstance(max_seq_length, bool)
            or not isinstance(max_seq_length, int)
            or (max_seq_length < 2)
        ):
            raise ValueError(f"max_seq_length must be an int >= 2; got {max_seq_length!r}.")
        self.vocab_file = str(vocab_file)
        self.vocab = read_vocab(vocab_file)
        for token in required:
            if token not in self.vocab:
                raise CheckpointError(f"Vocabulary {vocab_file} has no {token} token.")
        if len(set(self.vocab)) < len(self.vocab):
            seen: set[str] = set()
            twice = next(t for t in self.vocab if t in seen or seen.add(t))
            raise CheckpointError(f"Vocabulary {vocab_file} holds the token {twice!r} twice.")
        if lower_case not in (True, False, FOLD):
            raise ValueError(
                f"lower_case must be True, False or {FOLD!r} (tensorflow-text's own case "
                f"folding); got {lower_case!r}."
            )
        self.lower_case = bool(lower_case)
        # tensorflow-text's `BertTokenizer(lower_case=True)`: NFKC case folding, control
        # characters as spaces; the prepared corpora (`data.vocab.tokenize_lines`) are
        # tokenized so, and the language models trained on them read text so.
        self.case_folding = lower_case == FOLD
        self.max_seq_length = max_seq_length
        ids = {token: index for index, token in enumerate(self.vocab)}
        self.cls_id, self.sep_id, self.pad_id = (ids.get(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
        self.unk_id = ids["[UNK]"]

    def _length(self, max_seq_length: Any) -> Any:
        """A call's `max_seq_length` (the tokenizer's when None), checked where it is an int:
        at least 2, room for [CLS] and [SEP] (a traced tensor is the caller's to keep so)."""
        if max_seq_length is None:
            return self.max_seq_length
        if isinstance(max_seq_length, bool) or (
            isinstance(max_seq_length, numbers.Integral) and max_seq_length < 2
        ):
            raise ValueError(f"max_seq_length must be an int >= 2; got {max_seq_length!r}.")
        return max_seq_length

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

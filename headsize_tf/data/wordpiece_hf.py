"""BERT WordPiece on Hugging Face `tokenizers`: the ids of `wordpiece_tf`, without TensorFlow.

The tokenizer of the Keras 3 text tools (`SentenceEncoder`, the sentence encoders' ids) on
an install without TensorFlow (the base install: a JAX-only machine, a Colab TPU). Text is
cleaned, lower-cased and split into words as `wordpiece_tf.TFWordPieceTokenizer` does it
(Hugging Face's BERT normalisation, tensorflow-text's `BasicTokenizer` splitting), with
Python's `re` and `unicodedata` in place of TensorFlow's RE2 and ICU; each word is split
into pieces by `tokenizers`' `WordPiece` model, and a word of more than
`MAX_BYTES_PER_WORD` UTF-8 bytes is one [UNK], as tensorflow-text counts them. The ids equal
tensorflow-text's (tests/data/wordpiece_backends_test.py: the Austen novels, varied text,
every character of the Basic Multilingual Plane, generated text); only characters newer than
one side's Unicode tables can differ. Outputs are numpy arrays.

`tokenize_lines` is the same for the prepared corpora's tokenization
(`data.vocab.tokenize_lines`: tensorflow-text's own lower-casing, NFKC case folding), which
`load_lm_text` uses.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from headsize_tf.data._wordpiece_common import (
    FOLD,
    MAX_BYTES_PER_WORD,
    SPECIAL_TOKENS,
    SUFFIX_INDICATOR,
    WordPieceVocab,
)


class TokenIds(np.ndarray):
    """An int32 numpy array with `.numpy()` (itself as a plain array), as an eager
    `tf.Tensor` has: code written for the TensorFlow tokenizer's outputs works on these."""

    def numpy(self) -> np.ndarray:
        return self.view(np.ndarray)


def _token_ids(array: np.ndarray) -> TokenIds:
    return np.asarray(array, np.int32).view(TokenIds)


class HFWordPieceTokenizer(WordPieceVocab):
    """Uncased or cased BERT WordPiece tokenisation on `tokenizers`, padded to the longest text.

    The same arguments, attributes and methods as `TFWordPieceTokenizer`, on Python
    strings and numpy arrays (`tokenize` gives int32 arrays, which also have `.numpy()`),
    and the same ids: text is cleaned, lower-cased and split into words as
    `TFWordPieceTokenizer` does it (`normalize`, `words`; Python's `unicodedata` stands for
    TensorFlow's Unicode tables), and each word is split into pieces by `tokenizers`'
    `WordPiece` model. `tokenizer` is the `tokenizers.Tokenizer` of that model.

    Args:
      vocab_file: WordPiece vocabulary, one token per line; must hold
        [CLS], [SEP], [PAD] and [UNK].
      lower_case: Lower-case and strip accents (uncased models), as Hugging
        Face does; "fold": tensorflow-text's own lower-casing (`normalize`).
      max_seq_length: Tokens per text including [CLS] and [SEP] (an int >= 2).

    Example:

    >>> tokenizer = HFWordPieceTokenizer("vocab.txt", max_seq_length=128)
    >>> tokenizer.tokenize(["A man is eating food."])["input_word_ids"].shape
    (1, 8)
    """

    def __init__(
        self,
        vocab_file: str | os.PathLike,
        lower_case: bool | str = True,
        max_seq_length: int = 512,
        *,
        required: Sequence[str] = SPECIAL_TOKENS,
    ):
        import tokenizers  # In the base install.

        self._set_vocab(vocab_file, lower_case, max_seq_length, required)
        ids = {token: index for index, token in enumerate(self.vocab)}
        model = tokenizers.models.WordPiece(
            ids,
            unk_token="[UNK]",
            continuing_subword_prefix=SUFFIX_INDICATOR,
            # Words are limited in bytes (`word_ids`); this many bytes are at least as
            # many characters.
            max_input_chars_per_word=MAX_BYTES_PER_WORD,
        )
        self.tokenizer = tokenizers.Tokenizer(model)
        self._patterns = _patterns()
        self._word_cache: dict[str, tuple[int, ...]] = {}

    # ------------------------------------------------------------ tokenising
    def normalize(self, text: str) -> str:
        """Hugging Face's BERT text normalisation of a text, as `TFWordPieceTokenizer` does it:
        control and format characters dropped, whitespace unified, and for uncased
        vocabularies lower-cased (a capital sigma always to "σ") and accents stripped; with
        `lower_case="fold"`, tensorflow-text's own lower-casing: ICU's NFKC case folding
        (full-width letters, ligatures, "ß" -> "ss"), NFD, marks dropped, control and format
        characters as spaces."""
        patterns = self._patterns
        if self.case_folding:
            if text.isascii():
                return patterns.control_and_format.sub(" ", text.lower())
            text = patterns.default_ignorable.sub("", text)
            text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKD", text).casefold())
            text = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text.casefold()))
            return patterns.control_and_format.sub(" ", patterns.marks.sub("", text))
        text = patterns.whitespace.sub(" ", patterns.control.sub("", text))
        if self.lower_case:
            text = text.replace("Σ", "σ").lower()
            if not text.isascii():
                text = patterns.marks.sub("", unicodedata.normalize("NFD", text))
        return text

    def words(self, text: str) -> list[str]:
        """The words of a normalised text: split at whitespace, each punctuation mark and
        CJK character a word (tensorflow-text's `BasicTokenizer`)."""
        return self._patterns.words.findall(text)

    def word_ids(self, word: str) -> tuple[int, ...]:
        """The ids of one word's pieces; a word of more than `MAX_BYTES_PER_WORD` UTF-8 bytes,
        or one the vocabulary cannot spell, is one [UNK]."""
        ids = self._word_cache.get(word)
        if ids is None:
            if len(word.encode("utf-8")) > MAX_BYTES_PER_WORD:
                ids = (self.unk_id,)
            else:
                ids = tuple(token.id for token in self.tokenizer.model.tokenize(word))
            self._word_cache[word] = ids
        return ids

    def _encode(self, texts: list[str]) -> list[list[int]]:
        """Word-piece ids of each text (no special tokens)."""
        return [
            [i for word in self.words(self.normalize(text)) for i in self.word_ids(word)]
            for text in texts
        ]

    def tokenize(
        self,
        texts: Sequence[str],
        max_seq_length: int | None = None,
        add_special_tokens: bool = True,
    ) -> dict[str, TokenIds]:
        """Encoder inputs for a batch of texts, padded to the longest.

        Args:
          texts: A sequence (or 1-D numpy array) of str (or UTF-8 bytes).
          max_seq_length: Overrides the tokenizer's `max_seq_length`.
          add_special_tokens: [CLS] text [SEP] (True) or the word pieces
            alone (as the language models here are trained).

        Returns:
          int32 `input_word_ids`, `input_mask` and `input_type_ids` (zeros),
          each `[batch, length]` with `length <= max_seq_length`; texts too
          long are truncated, keeping the final [SEP].
        """
        max_seq_length = int(self._length(max_seq_length))
        rows = []
        for pieces in self._encode(_strings(texts)):
            if add_special_tokens:
                rows.append([self.cls_id, *pieces[: max(max_seq_length - 2, 0)], self.sep_id])
            else:
                rows.append(pieces[:max_seq_length])
        length = max((len(row) for row in rows), default=0)
        word_ids = np.full([len(rows), length], self.pad_id, np.int32)
        mask = np.zeros([len(rows), length], np.int32)
        for i, row in enumerate(rows):
            word_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return {
            "input_word_ids": _token_ids(word_ids),
            "input_mask": _token_ids(mask),
            "input_type_ids": _token_ids(np.zeros_like(word_ids)),
        }

    def detokenize(self, token_ids: np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
        """Text of `[batch, length]` token ids: a `[batch]` numpy array of str.

        Word pieces are glued to the word before them ("play", "##ing" ->
        "playing") and words are joined by one space (as tensorflow-text's
        `detokenize`); special tokens stay as they are ("[UNK]"). Text that
        was lower-cased or cleaned when tokenised stays so.

        Raises:
          ValueError: `token_ids` is not 2-D, or holds an id outside the vocabulary.
        """
        ids = np.asarray(token_ids, np.int64)
        if ids.ndim != 2:
            raise ValueError(f"token_ids must be [batch, length]; got shape {ids.shape}.")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(
                f"token_ids must be in [0, {self.vocab_size}); got {ids.min()} to {ids.max()}."
            )
        glue = " " + SUFFIX_INDICATOR
        texts = [" ".join(self.vocab[i] for i in row).replace(glue, "") for row in ids.tolist()]
        return np.asarray(texts, dtype=object).reshape(len(texts))

    def token_ids(self, texts: Sequence[str], max_seq_length: int | None = None) -> list[list[int]]:
        """Token ids of each text ([CLS] ... [SEP], truncated), unpadded."""
        if not len(texts):
            return []
        inputs = self.tokenize(texts, max_seq_length)
        ids, mask = inputs["input_word_ids"].numpy(), inputs["input_mask"].numpy()
        return [row[: int(m.sum())].tolist() for row, m in zip(ids, mask, strict=True)]


def _strings(texts: Sequence[str] | np.ndarray) -> list[str]:
    """`texts` as a list of str (bytes decoded as UTF-8); a lone str is refused."""
    if isinstance(texts, str | bytes):
        raise ValueError("texts must be a batch (a list of str), not one string.")
    if isinstance(texts, np.ndarray):
        texts = texts.ravel().tolist()
    return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]


# tensorflow-text's BasicTokenizer (`bert_tokenizer._DELIM_REGEX`): ASCII punctuation and
# symbols, Unicode punctuation, and CJK ideographs are words of one character each.
_ASCII_PUNCTUATION = "!-/:-@\\[-`{-~"
_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _char_class(codes: list[int]) -> str:
    """A regex character class of `codes` (sorted), written as ranges."""
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )


# Unicode's Default_Ignorable_Code_Point: ICU's NFKC case folding drops them.
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


class _Patterns(NamedTuple):
    control: re.Pattern  # Cc, Cf, Co, Cs but tab, newline, CR (RE2's \p{C}: no Cn); U+FFFD
    whitespace: re.Pattern  # tab, newline, CR, Zs, U+2028 and U+2029
    marks: re.Pattern  # Mn
    words: re.Pattern  # one punctuation mark or CJK character, or a run of other non-\s
    control_and_format: re.Pattern  # Cc and Cf (tensorflow-text's BasicTokenizer: to " ")
    default_ignorable: re.Pattern


@functools.cache
def _patterns() -> _Patterns:
    """`wordpiece_tf`'s and tensorflow-text's regular expressions in Python, from the
    Unicode categories of Python's `unicodedata`."""
    control, control_and_format, spaces, marks, punctuation = [], [], [], [], []
    for code in range(sys.maxunicode + 1):
        category = unicodedata.category(chr(code))
        if category in ("Cc", "Cf", "Co", "Cs") and chr(code) not in "\t\n\r":
            control.append(code)
        if category in ("Cc", "Cf"):
            control_and_format.append(code)
        elif category in ("Zs", "Zl", "Zp"):  # Zl, Zp: U+2028, U+2029.
            spaces.append(code)
        elif category == "Mn":
            marks.append(code)
        elif category[0] == "P" and code > 0x7F:
            punctuation.append(code)
    delimiters = _ASCII_PUNCTUATION + _char_class(punctuation)
    delimiters += "".join(f"{chr(a)}-{chr(b)}" for a, b in _CJK)
    ignorable = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _DEFAULT_IGNORABLE)
    control.append(0xFFFD)  # Hugging Face's clean_text drops the replacement character.
    return _Patterns(
        control=re.compile(f"[{_char_class(control)}]"),
        whitespace=re.compile(f"[\\t\\n\\r{_char_class(spaces)}]"),
        marks=re.compile(f"[{_char_class(marks)}]"),
        words=re.compile(f"[{delimiters}]|[^\\t\\n\\f\\r {delimiters}]+"),
        control_and_format=re.compile(f"[{_char_class(control_and_format)}]"),
        default_ignorable=re.compile(f"[{ignorable}]"),
    )


def tokenize_lines(lines: Sequence[str], vocab_path: str | os.PathLike) -> list[np.ndarray]:
    """Token ids of each line, as `tensorflow_text.BertTokenizer(vocab_path, lower_case=True)`
    gives them (`headsize_tf.data.vocab.tokenize_lines`), without TensorFlow: int32 arrays,
    no special tokens."""
    tokenizer = HFWordPieceTokenizer(vocab_path, lower_case=FOLD, required=("[UNK]",))
    return [np.asarray(ids, np.int32) for ids in tokenizer._encode(_strings(lines))]

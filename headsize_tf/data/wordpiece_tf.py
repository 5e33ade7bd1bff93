"""WordPiece tokenisation in the TensorFlow graph, with the ids of Hugging Face's BERT tokenizers.

Shared by the tf_keras `SentenceEncoder` and the Keras 3 one where TensorFlow is installed:
text in, int32 encoder inputs out, computed in the TF graph (so the text -> vector path
exports as a SavedModel) with tensorflow-text's `BertTokenizer`. Needs the `tf` extra;
`headsize_tf.data.wordpiece` picks this tokenizer or the TensorFlow-free
`wordpiece_hf.HFWordPieceTokenizer` (the same ids).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf

from headsize_tf.data._wordpiece_common import (
    MAX_BYTES_PER_WORD,
    SPECIAL_TOKENS,
    SUFFIX_INDICATOR,
    WordPieceVocab,
)

__all__ = ["SPECIAL_TOKENS", "TFWordPieceTokenizer"]

# Hugging Face's BertNormalizer(clean_text=True): control and format characters
# (Unicode category C*, but not tab/newline/CR) and U+FFFD are dropped; whitespace (Zs,
# and the line and paragraph separators, which Rust's `char::is_whitespace` holds) -> " ".
_CONTROL = r"[^\P{C}\t\n\r]|\x{FFFD}"
_WHITESPACE = r"[\t\n\r\p{Zs}\x{2028}\x{2029}]"


class TFWordPieceTokenizer(tf.Module, WordPieceVocab):
    """Uncased or cased BERT WordPiece tokenisation, padded to the longest text.

    Cleaning (control characters dropped, whitespace unified), lower-casing
    and accent stripping follow Hugging Face's `BertNormalizer`, so the ids
    equal those of a checkpoint's `tokenizer.json`; word splitting and
    WordPiece are tensorflow-text's `BertTokenizer`. The vocabulary is a
    tracked asset: a `tf.Module` holding this tokenizer exports it.

    Args:
      vocab_file: WordPiece vocabulary, one token per line; must hold
        [CLS], [SEP], [PAD] and [UNK].
      lower_case: Lower-case and strip accents (uncased models), as Hugging
        Face does; "fold": tensorflow-text's own lower-casing (NFKC case
        folding, control characters as spaces), as the prepared corpora and
        the language models trained on them read text.
      max_seq_length: Tokens per text including [CLS] and [SEP] (an int >= 2).

    Example:

    >>> tokenizer = TFWordPieceTokenizer("vocab.txt", max_seq_length=128)
    >>> inputs = tokenizer.tokenize(tf.constant(["A man is eating food."]))
    >>> inputs["input_word_ids"].shape  # [batch, longest text]
    TensorShape([1, 8])

    References:
      - Devlin et al., 2019, "BERT", https://arxiv.org/abs/1810.04805
      - Hugging Face tokenizers' `BertNormalizer` and `BertPreTokenizer`.
    """

    def __init__(
        self,
        vocab_file: str | os.PathLike,
        lower_case: bool | str = True,
        max_seq_length: int = 512,
    ):
        super().__init__(name="wordpiece_tokenizer")
        import tensorflow_text as tf_text

        self._set_vocab(vocab_file, lower_case, max_seq_length)
        # Lower-casing is done in `tokenize` as Hugging Face does it (str.lower,
        # NFD, drop marks); tensorflow-text's lower_case=True would NFKC-fold
        # too (full-width letters, ligatures, "ß" -> "ss") and change ids, unless
        # that is what is asked for (`lower_case="fold"`).
        self.tokenizer = tf_text.BertTokenizer(
            self.vocab_file,
            lower_case=self.case_folding,
            token_out_type=tf.int32,
            suffix_indicator=SUFFIX_INDICATOR,
            max_bytes_per_word=MAX_BYTES_PER_WORD,
        )

    def normalize(self, texts: tf.Tensor) -> tf.Tensor:
        """Hugging Face's BERT text normalisation of a string tensor (with
        `lower_case="fold"`, none: tensorflow-text's tokenizer folds the case itself)."""
        if self.case_folding:
            return texts
        texts = tf.strings.regex_replace(texts, _CONTROL, "")
        texts = tf.strings.regex_replace(texts, _WHITESPACE, " ")
        if self.lower_case:
            import tensorflow_text as tf_text

            # TF lower-cases a word-final capital sigma to "ς", Hugging Face to
            # "σ": route "Σ" through a private-use character (cleaned away above).
            texts = tf.strings.regex_replace(texts, "Σ", "\uf8ff")
            texts = tf.strings.lower(texts, encoding="utf-8")
            texts = tf.strings.regex_replace(texts, "\uf8ff", "σ")
            texts = tf_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
        return texts

    def tokenize(
        self,
        texts: tf.Tensor | Sequence[str],
        max_seq_length: int | tf.Tensor | None = None,
        add_special_tokens: bool = True,
    ) -> dict[str, tf.Tensor]:
        """Encoder inputs for a `[batch]` string tensor, padded to the longest.

        Args:
          texts: A `[batch]` string tensor (or a list of str).
          max_seq_length: Overrides the tokenizer's `max_seq_length`.
          add_special_tokens: [CLS] text [SEP] (True) or the word pieces
            alone (as the language models here are trained).

        Returns:
          int32 `input_word_ids`, `input_mask` and `input_type_ids` (zeros),
          each `[batch, length]` with `length <= max_seq_length`; texts too
          long are truncated, keeping the final [SEP].
        """
        max_seq_length = self._length(max_seq_length)
        texts = self.normalize(tf.convert_to_tensor(texts, tf.string))
        pieces = self.tokenizer.tokenize(texts).merge_dims(-2, -1)
        if add_special_tokens:
            pieces = pieces[:, : max_seq_length - 2]
            batch = tf.shape(texts, out_type=tf.int64)[0]
            cls = tf.fill([batch, 1], self.cls_id)
            sep = tf.fill([batch, 1], self.sep_id)
            ids = tf.concat([cls, pieces, sep], axis=1)
        else:
            ids = pieces[:, :max_seq_length]
        word_ids = ids.to_tensor(default_value=self.pad_id)
        mask = tf.ones_like(ids).to_tensor(default_value=0)
        return {
            "input_word_ids": word_ids,
            "input_mask": mask,
            "input_type_ids": tf.zeros_like(word_ids),
        }

    def detokenize(self, token_ids: tf.Tensor) -> tf.Tensor:
        """Text of `[batch, length]` token ids: a `[batch]` string tensor.

        Word pieces are glued to the word before them ("play", "##ing" ->
        "playing") and words are joined by one space (tensorflow-text's
        `detokenize`); special tokens stay as they are ("[UNK]"). Text that
        was lower-cased or cleaned when tokenised stays so.
        """
        ragged = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(token_ids, tf.int32))
        return tf.strings.reduce_join(self.tokenizer.detokenize(ragged), axis=-1, separator=" ")

    def token_ids(self, texts: Sequence[str], max_seq_length: int | None = None) -> list[list[int]]:
        """Token ids of each text ([CLS] ... [SEP], truncated), unpadded."""
        if not len(texts):
            return []
        inputs = self.tokenize(tf.constant(list(texts)), max_seq_length)
        ids, mask = inputs["input_word_ids"].numpy(), inputs["input_mask"].numpy()
        return [row[: int(m.sum())].tolist() for row, m in zip(ids, mask, strict=True)]

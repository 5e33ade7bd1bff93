"""The exported graph of a Keras 3 `CausalLM`: text in; log-likelihood and greedy continuations."""

from __future__ import annotations

import os

import tensorflow as tf

from headsize_tf.data.serving_export import (
    IDS_SPEC,
    MASK_SPEC,
    TEXT_SPEC,
    language_model_outputs,
)
from headsize_tf.data.wordpiece import FOLD, WordPieceTokenizer
from headsize_tf.keras3.modeling import CausalLM, DecoderLM
from headsize_tf.keras3.serving.encoder_module import require_tensorflow_backend
from headsize_tf.keras3.serving.graph_tokenizer import GraphBytePairTokenizer

MAX_NEW_TOKENS_SPEC = tf.TensorSpec([], tf.int32, name="max_new_tokens")


def lm_tokenizer(
    lm: CausalLM, vocab_file: str | os.PathLike, lower_case: bool = True
) -> WordPieceTokenizer:
    """The tokenizer of `lm`'s texts, after checking that its vocabulary fits the LM.

    Raises:
      ValueError: `lm` is not a `CausalLM`, or the vocabulary has more tokens
        than its `vocabulary_size`.
      CheckpointError: the vocabulary lacks [CLS], [SEP], [PAD] or [UNK].
    """
    if not isinstance(lm, CausalLM):
        raise ValueError(f"lm must be a Keras 3 CausalLM; got {type(lm).__name__}.")
    # As the LMs here are trained (`data.vocab.tokenize_lines`): tensorflow-text's own
    # lower-casing, which folds case (NFKC) where Hugging Face's BERT lower-cases.
    tokenizer = WordPieceTokenizer(
        vocab_file,
        lower_case=FOLD if lower_case else False,
        max_seq_length=max(2, lm.max_sequence_length),
    )
    if tokenizer.vocab_size > lm.vocabulary_size:
        raise ValueError(
            f"Vocabulary {vocab_file} has {tokenizer.vocab_size} tokens; the CausalLM's "
            f"vocabulary_size is {lm.vocabulary_size} (a vocabulary of another corpus?)."
        )
    return tokenizer


class LanguageModelServingModule(tf.Module):
    """A Keras 3 `CausalLM` (with its WordPiece vocabulary) or `DecoderLM` (with its byte-level
    BPE, `GraphBytePairTokenizer`) as a `tf.Module` to export.

    Signatures (`serving_signatures()`):

    * `serving_default(text: string[batch])` and `serve_ids(input_word_ids,
      input_mask: int32[batch, length])`: the outputs of the tf_keras front's
      "lm" export: `log_likelihood` [batch] (sum over tokens 2..n of
      log p(token | prefix)), `num_tokens` [batch] and
      `next_token_probabilities` [batch, vocab];
    * `generate(text: string[batch], max_new_tokens: int32[])`: greedy
      continuation of each text: `output_ids` int32 [batch, max_new_tokens]
      and `continuation` string [batch] (the ids detokenised: word pieces
      glued, words joined by spaces).

    Text is tokenised as the Keras 3 LMs here are trained (lower-cased
    WordPiece without [CLS]/[SEP], `headsize-tf data prepare`), truncated to
    `max_sequence_length`. Greedy decoding is a `tf.while_loop` over the
    model's own key/value caches (`prefill` of the first token, then one
    `decode_step` per position, the steps of `CausalLM.generate`): texts of
    different lengths share one batch, each row feeding its own prompt
    tokens until they run out, then its argmax.
    A prompt needs at least one token, and prompt tokens plus
    `max_new_tokens` must fit in `max_sequence_length`; otherwise the call
    fails with InvalidArgumentError naming the limit. Needs the TensorFlow
    backend.

    A `DecoderLM`'s text is tokenised by its own tokenizer in-graph, its start
    token first where the model adds one; its continuation is detokenised by
    the same.

    Args:
      lm: The `CausalLM` or `DecoderLM`.
      vocab_file: A `CausalLM`'s WordPiece vocabulary (at most
        `lm.vocabulary_size` tokens); exported as an asset.
      lower_case: Lower-case and strip accents, as the training data.
      max_length: Positions the export serves (prompt and continuation; at
        most, and by default, the model's `max_sequence_length`): the
        decoding caches have this length.

    Example:

    >>> module = LanguageModelServingModule(lm, "DATA_DIR/austen/vocab.txt")
    >>> module.generate(tf.constant(["it is a truth"]), 5)["output_ids"].shape
    TensorShape([1, 5])

    References:
      - Radford et al., 2019, "Language Models are Unsupervised Multitask
        Learners" (greedy decoding of a GPT-style LM).
    """

    def __init__(
        self,
        lm: CausalLM | DecoderLM,
        vocab_file: str | os.PathLike | None = None,
        lower_case: bool = True,
        max_length: int | None = None,
    ):
        super().__init__(name="headsize_keras3_lm_serving")
        require_tensorflow_backend("LanguageModelServingModule")
        if isinstance(lm, DecoderLM):
            if lm.tokenizer is None:
                raise ValueError("The DecoderLM carries no tokenizer: it cannot serve text.")
            tokenizer = GraphBytePairTokenizer(lm.tokenizer)
        else:
            tokenizer = lm_tokenizer(lm, vocab_file, lower_case)
        object.__setattr__(self, "lm", lm)  # Untracked, as Keras' own export; its state:
        self.model_variables = list(lm.variables)
        self.wordpiece = tokenizer  # Tracked: the vocabulary asset (or the BPE's tables).
        if max_length is not None and max_length > lm.max_sequence_length:
            raise ValueError(
                f"max_length={max_length} is beyond the model's {lm.max_sequence_length} "
                "positions; serve at most those."
            )
        self._length = max_length or lm.max_sequence_length

    def serving_signatures(self) -> dict[str, tf.types.experimental.GenericFunction]:
        """The signatures `headsize_tf.data.serving_export.export` writes."""
        return {
            "serving_default": self.serve_text,
            "serve_ids": self.serve_ids,
            "generate": self.generate,
        }

    def _tokenize(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.wordpiece.tokenize(text, self._length, add_special_tokens=False)

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def serve_text(self, text):
        return language_model_outputs(self.lm, self._tokenize(text))

    @tf.function(input_signature=[IDS_SPEC, MASK_SPEC], autograph=False)
    def serve_ids(self, input_word_ids, input_mask):
        fits = tf.debugging.assert_less_equal(
            tf.shape(input_word_ids)[1],
            self._length,
            message=f"serve_ids takes at most {self._length} positions (the export's)",
        )
        with tf.control_dependencies([fits]):
            input_word_ids = tf.identity(input_word_ids)
        return language_model_outputs(
            self.lm, {"input_word_ids": input_word_ids, "input_mask": input_mask}
        )

    @tf.function(input_signature=[TEXT_SPEC, MAX_NEW_TOKENS_SPEC], autograph=False)
    def generate(self, text, max_new_tokens):
        inputs = self._tokenize(text)
        lengths = tf.reduce_sum(inputs["input_mask"], axis=1)
        output_ids = self.greedy_ids(inputs["input_word_ids"], lengths, max_new_tokens)
        if isinstance(self.wordpiece, GraphBytePairTokenizer):  # A decoder stops at its end.
            continuation = self.wordpiece.detokenize(output_ids, until_end=True)
        else:
            continuation = self.wordpiece.detokenize(output_ids)
        return {"output_ids": output_ids, "continuation": continuation}

    def greedy_ids(
        self, token_ids: tf.Tensor, lengths: tf.Tensor, max_new_tokens: tf.Tensor
    ) -> tf.Tensor:
        """`max_new_tokens` greedy tokens after each row's `lengths[b]` prompt tokens.

        Args:
          token_ids: int32 `[batch, length]` prompts, right-padded.
          lengths: int32 `[batch]` prompt lengths (each >= 1).
          max_new_tokens: int32 scalar >= 1.

        Returns:
          int32 `[batch, max_new_tokens]`.
        """
        size = self._length
        lengths = tf.cast(lengths, tf.int32)
        checks = [
            tf.debugging.assert_positive(max_new_tokens, message="max_new_tokens must be >= 1"),
            tf.debugging.assert_positive(
                lengths, message="every prompt needs at least one token (an empty text has none)"
            ),
        ]
        # Every later use reads the checked values: a bad one fails with its message, not
        # in an op that would run first (tf.range of a negative count).
        with tf.control_dependencies(checks):
            max_new_tokens, lengths = tf.identity(max_new_tokens), tf.identity(lengths)
        total = tf.reduce_max(lengths) + max_new_tokens
        fits = tf.debugging.assert_less_equal(
            total,
            size,
            message=f"prompt tokens + max_new_tokens must be <= max_sequence_length ({size})",
        )
        with tf.control_dependencies([fits]):
            total = tf.identity(total)
            tokens = tf.pad(token_ids, [[0, 0], [0, size - tf.shape(token_ids)[1]]])
        tokens = tf.ensure_shape(tokens, [None, size])  # Static: the caches' length.
        logits, caches = self.lm.prefill(tokens[:, :1], size)
        columns = tf.range(size)[None]

        def step(index, tokens, logits, caches):
            # Position `index`: the row's prompt token while it has one, else the argmax
            # of the logits at `index - 1`.
            predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
            token = tf.where(index < lengths, tokens[:, index], predicted)
            tokens = tf.where(columns == index, token[:, None], tokens)
            logits, caches = self.lm.decode_step(token[:, None], caches, index)
            return index + 1, tokens, tf.cast(logits[:, -1], tf.float32), caches

        _, tokens, _, _ = tf.while_loop(
            lambda index, *_: index < total,
            step,
            (tf.constant(1), tokens, tf.cast(logits[:, -1], tf.float32), caches),
        )
        positions = lengths[:, None] + tf.range(max_new_tokens)[None]
        return tf.gather(tokens, positions, batch_dims=1)

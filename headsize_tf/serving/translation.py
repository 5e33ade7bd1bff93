"""SavedModel export of a `HeadsizeSeq2Seq` translator, decoding inside the graph.

Signatures (written by `headsize_tf.serving.export`):

* `serving_default(text: string[batch])` -> `translation` string[batch],
  `output_ids` int32[batch, length] (0-padded after [SEP]) and `score`
  float32[batch] (beam search: the best beam's length-normalised
  log-probability; greedy: the summed log-probability);
* `serve_ids(input_word_ids, input_mask: int32[batch, length])`: source ids
  ending in [SEP] (the mask is accepted for a uniform interface; padding is
  id 0) -> `output_ids` and `score`.

Tokenisation is tensorflow-text's `BertTokenizer(lower_case=True)`, the same
as the training pipeline (`headsize_tf.configs.translation`), so the ids a
client gets match the ones the model was trained on. Decoding is Model
Garden's beam search over the model's own key/value cache, which works for
any head size; `beam_size=1` is greedy decoding (a `tf.while_loop` over the
same cache: Model Garden's beam search with one beam prefers finished
hypotheses, which is not greedy).
"""

from __future__ import annotations

import tensorflow as tf

from headsize_tf.configs.translation import BOS, EOS
from headsize_tf.core.spec import is_positive_int
from headsize_tf.data.serving_export import IDS_SPEC as _IDS
from headsize_tf.data.serving_export import MASK_SPEC as _MASK
from headsize_tf.data.serving_export import TEXT_SPEC as _TEXT
from headsize_tf.modeling import decoding
from headsize_tf.serving.export import model_variables
from headsize_tf.tasks.translation import special_ids


class TranslationServingModule(tf.Module):
    """Source text in, translation out.

    Args:
      model: A `HeadsizeSeq2Seq`.
      vocab_file: The shared WordPiece vocabulary it was trained with.
      max_source_length: Source pieces kept (including [SEP]).
      max_decode_length: Target pieces generated at most.
      beam_size: Beams (1 = greedy decoding).
      alpha: Length-normalisation exponent of the beam scores.
      lower_case: As the training data config's `lower_case`.
    """

    def __init__(
        self,
        model,
        vocab_file: str,
        max_source_length: int = 128,
        max_decode_length: int = 64,
        beam_size: int = 4,
        alpha: float = 0.6,
        lower_case: bool = True,
    ):
        super().__init__(name="headsize_translation")
        import tensorflow_text as tf_text

        for name, value in (
            ("max_source_length", max_source_length),
            ("max_decode_length", max_decode_length),
            ("beam_size", beam_size),
        ):
            if not is_positive_int(value):
                raise ValueError(f"{name} must be a positive int; got {value!r}.")
        if max_source_length < 2:
            raise ValueError(f"max_source_length must be >= 2; got {max_source_length}.")
        ids = special_ids(vocab_file)
        # Untracked, its variables tracked: no tf_keras serialisation of every layer
        # in the SavedModel (it traces each layer's call again).
        object.__setattr__(self, "model", model)
        self.tokenizer = tf_text.BertTokenizer(
            vocab_file, lower_case=lower_case, token_out_type=tf.int32
        )
        self._bos, self._eos = ids[BOS], ids[EOS]
        self._max_source_length = max_source_length
        self._max_decode_length = max_decode_length
        self._beam_size = beam_size
        self._alpha = alpha

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # The model's variables as they are when saved (it may be built after this module).
        self.model_variables = model_variables(self.model)
        return super()._trackable_children(save_type, **kwargs)

    def source_ids(self, text: tf.Tensor) -> tf.Tensor:
        """[batch, length] source ids: word pieces (truncated) + [SEP], 0-padded."""
        pieces = self.tokenizer.tokenize(text).merge_dims(-2, -1)[:, : self._max_source_length - 1]
        eos = tf.fill([pieces.nrows(), 1], self._eos)
        return tf.concat([pieces, eos], axis=1).to_tensor(default_value=0)

    def translate_ids(self, source_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        start = tf.fill([tf.shape(source_ids)[0], 1], self._bos)
        if self._beam_size == 1:
            best = decoding.greedy_decode_loop(
                self.model, start, self._max_decode_length, self._eos, source_ids
            )
            score = self._log_probability(source_ids, start, best)
        else:
            sequences, scores = decoding.beam_search_decode(
                self.model,
                start,
                self._max_decode_length,
                beam_size=self._beam_size,
                alpha=self._alpha,
                eos_id=self._eos,
                source_ids=source_ids,
            )
            best, score = sequences[:, 0, 1:], scores[:, 0]  # drop [BOS]
        # Everything after the first [SEP] becomes padding.
        after_eos = tf.cumsum(tf.cast(tf.equal(best, self._eos), tf.int32), axis=1, exclusive=True)
        best = tf.where(after_eos > 0, tf.zeros_like(best), best)
        return {"output_ids": best, "score": score}

    def _log_probability(self, source_ids, start, output_ids):
        """Sum of log p(token) over the output up to and including [SEP]."""
        targets = tf.concat([start, output_ids[:, :-1]], axis=1)
        logits = self.model({"inputs": source_ids, "targets": targets})
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        picked = tf.gather(log_probs, output_ids, batch_dims=2)
        return tf.reduce_sum(picked * tf.cast(output_ids > 0, tf.float32), axis=1)

    def detokenize(self, output_ids: tf.Tensor) -> tf.Tensor:
        """Strings of 0-padded output ids, [SEP] and padding dropped."""
        keep = tf.logical_and(tf.not_equal(output_ids, 0), tf.not_equal(output_ids, self._eos))
        ragged = tf.ragged.boolean_mask(output_ids, keep)
        words = self.tokenizer.detokenize(ragged)
        return tf.strings.reduce_join(words, axis=-1, separator=" ")

    @tf.function(input_signature=[_TEXT], autograph=False)
    def serve_text(self, text):
        outputs = self.translate_ids(self.source_ids(text))
        return {"translation": self.detokenize(outputs["output_ids"]), **outputs}

    @tf.function(input_signature=[_IDS, _MASK], autograph=False)
    def serve_ids(self, input_word_ids, input_mask):
        return self.translate_ids(input_word_ids * tf.cast(input_mask > 0, tf.int32))


def experiment_translator(model_dir: str, vocab_file: str | None = None, **kwargs):
    """A `TranslationServingModule` of a `headsize_seq2seq/translation` model_dir."""
    from headsize_tf.configs import translation
    from headsize_tf.training import train

    params, model = train.load_trained_model(model_dir)
    if not isinstance(params.task.model, translation.Seq2SeqConfig):
        raise ValueError(f"{model_dir} is not a headsize_seq2seq/translation model_dir.")
    data = params.task.train_data
    vocab_file = vocab_file or data.vocab_file
    kwargs.setdefault("max_source_length", data.max_seq_length)
    kwargs.setdefault("max_decode_length", data.max_seq_length)
    return TranslationServingModule(model, vocab_file, lower_case=data.lower_case, **kwargs)

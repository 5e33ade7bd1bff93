"""A decoder's byte-level BPE as TensorFlow ops, for SavedModels that take raw text.

`GraphBytePairTokenizer` turns a `DecoderLM`'s `BytePairTokenizer` (a
`tokenizers` JSON) into keras-hub's `BytePairTokenizer`, whose tokenization
is TensorFlow ops (tensorflow-text's regex split and a lookup table), so the
exported graph tokenizes and detokenizes by itself. A pre-tokenizer that
splits digits one by one (SmolLM2's) is applied first, in-graph. keras-hub's
split regex emulates GPT-2's `\\s+(?!\\S)` rule without a lookahead: ids
equal the model's own tokenizer's on ordinary text, digits, Unicode and runs
of spaces and newlines; a tab or carriage return before a newline can split
differently (tested). Needs the `hub` extra (keras-hub) and tensorflow-text.
"""

from __future__ import annotations

import json
from typing import Any

import tensorflow as tf

from headsize_tf.keras3.modeling.lm_generation import leading_token_id


def _digits_split(tokenizer_json: str) -> bool:
    """Whether the pre-tokenizer splits digits individually (SmolLM2's, StarCoder's)."""
    pre = json.loads(tokenizer_json).get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    return any(p.get("type") == "Digits" and p.get("individual_digits") for p in parts)


def _byte_level(data: dict[str, Any]) -> bool:
    """Whether a `tokenizers` JSON is byte-level BPE (what keras-hub's BytePairTokenizer is)."""
    decoder = data.get("decoder") or {}
    return (
        data.get("model", {}).get("type") == "BPE"
        and not data["model"].get("byte_fallback")
        and decoder.get("type") == "ByteLevel"
    )


class GraphBytePairTokenizer(tf.Module):
    """Text <-> ids of a decoder's tokenizer in TensorFlow ops (exported with the model).

    Args:
      tokenizer: The model's `BytePairTokenizer` (`tokenizer_json`,
        `start_token_id`).

    Example:

    >>> graph = GraphBytePairTokenizer(lm.tokenizer)
    >>> graph.tokenize(tf.constant(["Hello"]), 16)["input_word_ids"].shape
    TensorShape([1, 16])
    """

    def __init__(self, tokenizer: Any):
        super().__init__(name="graph_byte_pair_tokenizer")
        try:
            import keras_hub
        except ImportError:
            raise ImportError(
                "Exporting a decoder with its text tokenizer needs keras-hub: pip install "
                '"headsize-tf[hub]"'
            ) from None
        data = json.loads(tokenizer.tokenizer_json)
        model = data["model"]
        if not _byte_level(data):
            raise ValueError(
                "A SavedModel that takes raw text tokenizes byte-level BPE in-graph (SmolLM, "
                "Llama 3, Qwen); this decoder's tokenizer is "
                f"{'SentencePiece BPE (Llama 2, Mistral, Gemma)' if model.get('byte_fallback') else 'not byte-level BPE'}"
                ": save it as a .keras file or a Hugging Face directory instead."
            )
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        self.bpe = keras_hub.tokenizers.BytePairTokenizer(
            vocabulary=dict(model["vocab"]), merges=merges
        )
        self._digits = _digits_split(tokenizer.tokenizer_json)
        self._start = leading_token_id(tokenizer)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _ids(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Ragged `[batch, ids]` of a `[batch]` string tensor (keras-hub's graph path, always)."""
        if not self._digits:
            return self.bpe(text)
        import tensorflow_text as tf_text

        pieces = tf_text.regex_split(text, r"\p{N}", r"\p{N}")  # Digits alone, kept.
        ids = self.bpe(pieces.flat_values)
        return tf.RaggedTensor.from_row_splits(
            ids.flat_values, tf.gather(ids.row_splits, pieces.row_splits)
        )

    def tokenize(
        self, text: tf.Tensor, length: int, add_special_tokens: bool = False
    ) -> dict[str, tf.Tensor]:
        """`input_word_ids` and `input_mask`, int32 `[batch, length]`: the start token (where the
        model adds one), then the text's ids, truncated and right-padded (`add_special_tokens`
        is for the WordPiece tokenizer's interface; the model's rule decides)."""
        ids = tf.cast(self._ids(text), tf.int32)
        if self._start is not None:
            start = tf.fill([tf.shape(text)[0], 1], tf.constant(self._start, tf.int32))
            ids = tf.concat([start, ids], axis=1)
        ids = ids[:, :length]
        mask = tf.ones_like(ids)
        return {
            "input_word_ids": ids.to_tensor(shape=[None, length]),
            "input_mask": mask.to_tensor(shape=[None, length]),
        }

    def detokenize(self, ids: tf.Tensor) -> tf.Tensor:
        """`[batch]` strings of `[batch, n]` ids."""
        return self.bpe.detokenize(ids)

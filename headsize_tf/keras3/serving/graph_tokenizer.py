"""A decoder's byte-level BPE as TensorFlow ops, for SavedModels that take raw text.

`GraphBytePairTokenizer` turns a `DecoderLM`'s `BytePairTokenizer` (a
`tokenizers` JSON) into keras-hub's `BytePairTokenizer`, whose tokenization
is TensorFlow ops (tensorflow-text's regex split and a lookup table), so the
exported graph tokenizes and detokenizes by itself. A pre-tokenizer that
splits digits one by one (SmolLM2's) is applied first, in-graph. keras-hub's
split regex emulates GPT-2's `\\s+(?!\\S)` rule without a lookahead: ids
equal the model's own tokenizer's on ordinary text, digits, Unicode, control
characters and runs of spaces and newlines; a tab or carriage return before a
newline can split differently (tested); a text with a NUL character is refused
(the regex split would end it there). Only that
pre-tokenization is built in-graph: GPT-2's byte-level regex, optionally after
single digits, with no normalizer; a tokenizer that splits by its own regex
(Llama 3's, Qwen2's, with Qwen's NFC normalizer) is refused rather than
tokenized differently. Needs the `hub` extra (keras-hub) and tensorflow-text.
"""

from __future__ import annotations

import json
from typing import Any

import tensorflow as tf

from headsize_tf.keras3.modeling.lm_generation import leading_token_id


def _pre_tokenizers(data: dict[str, Any]) -> list[dict[str, Any]]:
    pre = data.get("pre_tokenizer") or {}
    return list(pre.get("pretokenizers", [])) if pre.get("type") == "Sequence" else [pre]


def _digits_split(tokenizer_json: str) -> bool:
    """Whether the pre-tokenizer splits digits individually (SmolLM2's, StarCoder's)."""
    parts = _pre_tokenizers(json.loads(tokenizer_json))
    return any(p.get("type") == "Digits" and p.get("individual_digits") for p in parts)


def _graph_pre_tokenization(data: dict[str, Any]) -> str | None:
    """None when the graph splits text as the tokenizer does (GPT-2's byte-level regex,
    optionally after single digits, no normalizer); else what it does instead."""
    if data.get("normalizer"):
        return f"a {data['normalizer'].get('type')} normalizer"
    parts = _pre_tokenizers(data)
    if parts and parts[0].get("type") == "Digits" and parts[0].get("individual_digits"):
        parts = parts[1:]
    if len(parts) != 1 or parts[0].get("type") != "ByteLevel":
        kinds = [p.get("type") for p in _pre_tokenizers(data)]
        return f"the pre-tokenizers {kinds} (a regex of its own)"
    if not parts[0].get("use_regex", True) or parts[0].get("add_prefix_space"):
        return "a byte-level pre-tokenizer without GPT-2's regex, or adding a prefix space"
    return None


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
                "GPT-2); this decoder's tokenizer is "
                f"{'SentencePiece BPE (Llama 2, Mistral, Gemma)' if model.get('byte_fallback') else 'not byte-level BPE'}"
                ": save it as a .keras file or a Hugging Face directory instead."
            )
        unlike = _graph_pre_tokenization(data)
        if unlike is not None:
            raise ValueError(
                "A SavedModel that takes raw text splits it in-graph as GPT-2's byte-level BPE "
                f"does (SmolLM, GPT-2); this decoder's tokenizer has {unlike}, which the graph "
                "would not follow: save it as a .keras file, a GGUF file or a Hugging Face "
                "directory instead."
            )
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        self.bpe = keras_hub.tokenizers.BytePairTokenizer(
            vocabulary=dict(model["vocab"]), merges=merges
        )
        self._digits = _digits_split(tokenizer.tokenizer_json)
        self._start = leading_token_id(tokenizer)
        # Special tokens (start, end, chat markers) are no text: detokenize drops them, as
        # the model's own tokenizer does.
        self._special = sorted(
            int(t["id"]) for t in data.get("added_tokens") or [] if t.get("special")
        )
        self.end_token_id = getattr(tokenizer, "end_token_id", None)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _ids(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Ragged `[batch, ids]` of a `[batch]` string tensor (keras-hub's graph path, always)."""
        # tensorflow-text's regex split (keras-hub's too) ends a string at a NUL byte: such a
        # text is refused, not scored or continued from its first part.
        nul = tf.reduce_any(tf.strings.regex_full_match(text, "(?s).*\\x00.*"))
        checked = tf.debugging.assert_equal(
            nul,
            False,
            message="A text holds a NUL character (\\x00), which the in-graph tokenizer cannot "
            "split; remove it before serving.",
        )
        with tf.control_dependencies([checked]):
            text = tf.identity(text)
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

    def detokenize(self, ids: tf.Tensor, until_end: bool = False) -> tf.Tensor:
        """`[batch]` strings of `[batch, n]` ids, special tokens dropped; with `until_end`,
        each row's text stops before its first end token (as generation stops there)."""
        ids = tf.convert_to_tensor(ids, tf.int32)
        keep = tf.ones_like(ids, tf.bool)
        if self._special:
            special = tf.constant(self._special, tf.int32)
            keep &= ~tf.reduce_any(ids[..., None] == special, axis=-1)
        if until_end and self.end_token_id is not None:
            keep &= tf.cumsum(tf.cast(ids == self.end_token_id, tf.int32), axis=1) == 0
        return self.bpe.detokenize(tf.ragged.boolean_mask(ids, keep))

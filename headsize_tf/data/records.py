"""Training examples from token ids, written as TFRecords (Model Garden's formats).

* `pack_windows`: a token stream cut into fixed-length rows (causal LM);
* `make_mlm_examples`: BERT masked-LM examples (`BertPretrainDataLoader`:
  input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids,
  masked_lm_weights);
* `sentence_examples`: SentencePrediction examples (`[CLS] tokens [SEP]`
  with a label);
* `write_tfrecord`: one `tf.train.Example` per example dict.

`PrepareOptions` holds the sizes a corpus is prepared with.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Sequence

import numpy as np

from headsize_tf.data.vocab import RESERVED_TOKENS


@dataclasses.dataclass(frozen=True)
class PrepareOptions:
    """How a corpus is turned into training files.

    Args:
      vocab_size: WordPiece vocabulary size learnt on the train split.
      seq_length: Tokens per example.
      max_predictions_per_seq: Masked positions per masked-LM example.
      masked_lm_prob: Fraction of tokens masked.
      seed: Seed of the masking.

    Example:
      >>> PrepareOptions(vocab_size=200, seq_length=16).max_predictions_per_seq
      20
    """

    vocab_size: int = 4096
    seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    seed: int = 0


def pack_windows(token_lines: Sequence[np.ndarray], window: int) -> np.ndarray:
    """Concatenates the token stream and cuts it into [N, window] rows."""
    stream = np.concatenate([t for t in token_lines if len(t)]) if token_lines else np.zeros(0)
    n = len(stream) // window
    return stream[: n * window].reshape(n, window).astype(np.int32)


def make_mlm_examples(
    windows: np.ndarray, vocab_size: int, options: PrepareOptions, rng: np.random.Generator
) -> list[dict[str, np.ndarray]]:
    """BERT masked-LM examples: [CLS] window [SEP] with 80/10/10 masking."""
    cls_id, sep_id, mask_id = 2, 3, 4
    examples = []
    for row in windows:
        ids = np.concatenate([[cls_id], row, [sep_id]]).astype(np.int32)
        candidates = np.arange(1, len(ids) - 1)
        n_pred = min(
            options.max_predictions_per_seq,
            max(1, round(len(candidates) * options.masked_lm_prob)),
        )
        positions = np.sort(rng.choice(candidates, size=n_pred, replace=False))
        labels = ids[positions].copy()
        masked = ids.copy()
        for pos in positions:
            draw = rng.random()
            if draw < 0.8:
                masked[pos] = mask_id
            elif draw < 0.9:
                masked[pos] = rng.integers(len(RESERVED_TOKENS), vocab_size)
        pad = options.max_predictions_per_seq - n_pred
        examples.append(
            {
                "input_ids": masked,
                "input_mask": np.ones_like(masked),
                "segment_ids": np.zeros_like(masked),
                "masked_lm_positions": np.pad(positions, (0, pad)).astype(np.int32),
                "masked_lm_ids": np.pad(labels, (0, pad)).astype(np.int32),
                "masked_lm_weights": np.pad(np.ones(n_pred, np.float32), (0, pad)),
            }
        )
    return examples


def sentence_examples(
    token_lines: Sequence[np.ndarray], labels: Sequence[int], seq_length: int
) -> Iterable[dict[str, np.ndarray]]:
    """[CLS] tokens [SEP], truncated and zero-padded to `seq_length`, with labels."""
    for tokens, label in zip(token_lines, labels, strict=True):
        ids = np.concatenate([[2], tokens[: seq_length - 2], [3]]).astype(np.int64)
        pad = seq_length - len(ids)
        yield {
            "input_ids": np.pad(ids, (0, pad)),
            "input_mask": np.pad(np.ones_like(ids), (0, pad)),
            "segment_ids": np.zeros(seq_length, np.int64),
            "label_ids": np.array([label], np.int64),
        }


def write_tfrecord(path: pathlib.Path, examples: Iterable[dict[str, np.ndarray]]) -> int:
    """Writes each example dict as a `tf.train.Example`; returns how many.

    The features map is serialised in a fixed order (protobuf's map order otherwise
    changes from process to process), so the same examples give the same bytes, and
    a corpus prepared again has the checksums of its manifest.
    """
    import tensorflow as tf

    count = 0
    with tf.io.TFRecordWriter(str(path)) as writer:
        for example in examples:
            feature = {}
            for key, value in example.items():
                if value.dtype.kind == "f":
                    feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
                else:
                    feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
                    deterministic=True
                )
            )
            count += 1
    return count

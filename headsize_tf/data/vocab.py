"""WordPiece vocabularies: learning one, and tokenising with it.

`build_wordpiece_vocab` learns a lower-cased vocabulary with tensorflow-text's
`bert_vocab_from_dataset`, the reserved tokens first ([PAD] at id 0), and
`tokenize_lines` tokenises with one (the prepared corpora use both).

The full-scale configs (lm1b, glue, wmt14) read `${DATA_DIR}/NAME/vocab.txt`
(`headsize-tf data vocab`): `build_vocab` learns one from the text features
of a TFDS dataset (networked machines; translation pairs give one shared
vocabulary of both languages) or from local text files, and writes it
atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from headsize_tf.core.io import write_atomic

RESERVED_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class VocabError(ValueError):
    """Bad vocabulary-building input."""


def build_wordpiece_vocab(lines: Iterable[str], vocab_size: int) -> list[str]:
    """Learns a lower-cased WordPiece vocabulary with tensorflow-text's tool."""
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bert_vocab

    dataset = tf.data.Dataset.from_tensor_slices([line for line in lines if line.strip()])
    return bert_vocab.bert_vocab_from_dataset(
        dataset.batch(1000).prefetch(2),
        vocab_size=vocab_size,
        reserved_tokens=RESERVED_TOKENS,
        bert_tokenizer_params={"lower_case": True},
        learn_params={},
    )


def tokenize_lines(lines: Sequence[str], vocab_path: str, batch: int = 4096) -> list[np.ndarray]:
    """Token ids of each line with `tensorflow_text.BertTokenizer` (lower-cased)."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    tokenizer = tf_text.BertTokenizer(vocab_path, lower_case=True, token_out_type=tf.int32)
    out: list[np.ndarray] = []
    for start in range(0, len(lines), batch):
        ragged = tokenizer.tokenize(tf.constant(list(lines[start : start + batch])))
        ragged = ragged.merge_dims(-2, -1)
        out.extend(np.asarray(row, np.int32) for row in ragged.to_list())
    return out


def tfds_lines(
    name: str, features: Sequence[str], split: str = "train", max_examples: int | None = None
) -> Iterator[str]:
    """The text of `features` of each example of a TFDS split (one line per feature)."""
    import tensorflow_datasets as tfds

    if not features:
        raise VocabError(f"Name the text features of {name!r} to learn from (e.g. text, en de).")
    dataset = tfds.load(name, split=split, shuffle_files=False)
    known = set(dataset.element_spec)
    unknown = [f for f in features if f not in known]
    if unknown:
        raise VocabError(f"{name!r} has no text feature(s) {unknown}; it has {sorted(known)}.")
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    for example in dataset.as_numpy_iterator():
        for feature in features:
            yield example[feature].decode("utf-8")


def file_lines(paths: Sequence[str | os.PathLike]) -> Iterator[str]:
    """Lines of local UTF-8 text files."""
    for path in paths:
        if not os.path.isfile(path):
            raise VocabError(f"Text file {str(path)!r} does not exist.")
        with open(path, encoding="utf-8") as f:
            yield from (line.rstrip("\n") for line in f)


def build_vocab(lines: Sequence[str], vocab_size: int, output: str | os.PathLike) -> list[str]:
    """Learns a lower-cased WordPiece vocabulary of about `vocab_size` and writes it."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise VocabError(f"vocab_size must be an int; got {vocab_size!r}.")
    if vocab_size <= len(RESERVED_TOKENS):
        raise VocabError(
            f"vocab_size must exceed the {len(RESERVED_TOKENS)} reserved tokens; got {vocab_size}."
        )
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise VocabError("No text to learn a vocabulary from (every line is empty).")
    vocab = build_wordpiece_vocab(lines, vocab_size)
    write_atomic(output, "\n".join(vocab) + "\n")
    return vocab

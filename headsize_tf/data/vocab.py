"""WordPiece vocabularies for the TFDS experiments (`headsize-tf data vocab`).

The full-scale configs (lm1b, glue, wmt14) read `${DATA_DIR}/NAME/vocab.txt`.
This module learns one with tensorflow-text's `bert_vocab_from_dataset` from
the text features of a TFDS dataset (networked machines; translation pairs
give one shared vocabulary of both languages) or from local text files, and
writes it atomically with the reserved tokens first ([PAD] at id 0).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from headsize_tf.core.io import write_atomic
from headsize_tf.data.corpora import RESERVED_TOKENS, build_wordpiece_vocab


class VocabError(ValueError):
    """Bad vocabulary-building input."""


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

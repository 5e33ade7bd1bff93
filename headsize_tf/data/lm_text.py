"""Plain text as causal-LM windows, for models that carry no tokenizer (`.keras` LMs).

A Keras 3 `CausalLM` saved as `.keras` holds token ids, not a tokenizer. The
text that evaluates or uptrains it is tokenised with a WordPiece vocabulary
(`tensorflow_text.BertTokenizer`, lower-cased, as `headsize-tf data prepare`
tokenises the corpora): by default the Austen corpus's `vocab.txt` (the
vocabulary of the library's LMs trained on it, e.g. the KV-sharing study's),
or any `vocab.txt` given; its ids must fit the model's vocabulary.

Text comes from a registered corpus (`austen`: `train.txt` trains,
`valid.txt` is held out) or a plain UTF-8 file (one paragraph or sentence a
line; each line goes to training or to the held-out part by the SHA-1 of its
text, `data.splits.split_of`: dev and test lines, about 20%, are held out).
The token streams are cut into windows of `window` ids (n + 1 for an LM of
n positions).

Example:

>>> text = load_lm_text(129, data_file="notes.txt")
>>> text.train.shape, text.held_out.shape, text.vocab_file
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from headsize_tf.data._wordpiece_common import read_vocab
from headsize_tf.data.records import pack_windows
from headsize_tf.data.splits import split_of
from headsize_tf.data.vocab import tokenize_lines

LM_CORPORA = ("austen",)  # Registered corpora with train.txt / valid.txt and a vocab.txt.
DEFAULT_VOCAB_CORPUS = "austen"


@dataclasses.dataclass(frozen=True)
class LMText:
    """Token windows for training and held-out evaluation.

    Attributes:
      train: int32 `[windows, window]` ids.
      held_out: int32 `[windows, window]` ids.
      vocab_file: The WordPiece vocabulary used, or, for text a model's own
        tokenizer tokenised (a keras-hub GPT-2's), a description of it.
      source: Where the text came from (for reports).
    """

    train: np.ndarray
    held_out: np.ndarray
    vocab_file: str
    source: str


def default_vocab(data_dir: str | os.PathLike | None = None) -> str:
    """The Austen corpus's `vocab.txt` (the corpus must be prepared).

    Args:
      data_dir: The corpus cache (default: `data.cache.default_data_dir()`).
    """
    from headsize_tf.data.corpora import corpus_path

    return corpus_path(DEFAULT_VOCAB_CORPUS, "vocab.txt", data_dir)


def text_windows(lines: Sequence[str], vocab_file: str, window: int) -> np.ndarray:
    """`lines` tokenised with `vocab_file`, concatenated and cut into `[N, window]` ids.

    Args:
      lines: Text lines.
      vocab_file: A WordPiece `vocab.txt`.
      window: Ids per row.
    """
    lines = [line for line in lines if line.strip()]
    if not lines:
        return np.zeros([0, window], np.int32)
    return pack_windows(tokenize_lines(lines, vocab_file), window)


def _check_vocab(vocab_file: str | os.PathLike) -> None:
    """A WordPiece vocab.txt: UTF-8, one token a line, [UNK] among them."""
    expected = "expected a WordPiece vocab.txt (UTF-8, one token a line, with [UNK])"
    try:
        tokens = read_vocab(vocab_file)
    except UnicodeDecodeError:
        raise ValueError(f"vocab_file={str(vocab_file)!r} is not UTF-8 text; {expected}.") from None
    if "[UNK]" not in tokens:
        raise ValueError(
            f"vocab_file={str(vocab_file)!r} has no [UNK] token ({len(tokens)} lines); {expected}."
        )


def _read_text(path: str | os.PathLike) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        raise ValueError(f"data_file={str(path)!r} does not exist.") from None
    except IsADirectoryError:
        raise ValueError(f"data_file={str(path)!r} is a directory; expected a text file.") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"data_file={str(path)!r} is not UTF-8 text ({err}).") from None


def lm_text_lines(
    *,
    data_file: str | os.PathLike | None = None,
    corpus: str | None = None,
    data_dir: str | os.PathLike | None = None,
) -> tuple[dict[str, list[str]], str]:
    """The training and held-out lines of a corpus or a text file, untokenised.

    A corpus's `train.txt` trains and its `valid.txt` is held out; a file's
    lines are split by `data.splits.split_of` (dev and test lines, about
    20%, held out). `load_lm_text` tokenises them with a WordPiece vocabulary;
    a model with its own tokenizer (a keras-hub GPT-2) tokenises them itself.

    Args:
      data_file: A plain UTF-8 text file (one of `data_file`, `corpus`).
      corpus: A registered corpus (`LM_CORPORA`), prepared under `data_dir`.
      data_dir: The corpus cache (default: `data.cache.default_data_dir()`).

    Returns:
      `({"train": lines, "held_out": lines}, a description of the source)`.
    """
    from headsize_tf.data.corpora import corpus_path

    if (data_file is None) == (corpus is None):
        raise ValueError("Give one text source: data_file= (plain text) or corpus=.")
    if corpus is not None and corpus not in LM_CORPORA:
        raise ValueError(f"corpus={corpus!r} has no LM text; expected one of {list(LM_CORPORA)}.")
    if corpus is not None:
        parts = {
            split: _read_text(corpus_path(corpus, f"{name}.txt", data_dir))
            for split, name in (("train", "train"), ("held_out", "valid"))
        }
        return parts, f"corpus {corpus} (train.txt; held out: valid.txt)"
    parts = {"train": [], "held_out": []}
    for line in _read_text(data_file):
        parts["train" if split_of(line) == "train" else "held_out"].append(line)
    return parts, f"{data_file} (held out: the dev and test lines by SHA-1)"


def check_windows(windows: dict[str, np.ndarray], window: int, where: str) -> None:
    """Raises a ValueError naming the part of `windows` that holds no full window.

    Args:
      windows: Part name ("train", "held_out") -> `[N, window]` ids.
      window: Ids per window.
      where: The text's source, for the message.
    """
    for name, array in windows.items():
        if not len(array):
            raise ValueError(
                f"{where}: the {name.replace('_', '-')} text has fewer than {window} tokens, not "
                "one window; give more text (or a shorter sequence_length=)."
            )


def load_lm_text(
    window: int,
    *,
    data_file: str | os.PathLike | None = None,
    corpus: str | None = None,
    data_dir: str | os.PathLike | None = None,
    vocab_file: str | os.PathLike | None = None,
) -> LMText:
    """Training and held-out windows of `window` ids from a corpus or a text file.

    Args:
      window: Ids per window (an LM of n positions: n + 1).
      data_file: A plain UTF-8 text file (one of `data_file`, `corpus`).
      corpus: A registered corpus (`LM_CORPORA`), prepared under `data_dir`.
      data_dir: The corpus cache (default: `data.cache.default_data_dir()`).
      vocab_file: The WordPiece vocabulary (default: the corpus's, or the
        Austen corpus's for a `data_file`).

    Returns:
      `LMText`; raises a ValueError when a part has no full window.
    """
    from headsize_tf.data.corpora import corpus_path

    if (data_file is None) == (corpus is None):
        raise ValueError("Give one text source: data_file= (plain text) or corpus=.")
    if corpus is not None and corpus not in LM_CORPORA:
        raise ValueError(f"corpus={corpus!r} has no LM text; expected one of {list(LM_CORPORA)}.")
    if vocab_file is None:
        vocab_file = (
            corpus_path(corpus, "vocab.txt", data_dir) if corpus else default_vocab(data_dir)
        )
    elif not os.path.isfile(vocab_file):
        raise ValueError(f"vocab_file={str(vocab_file)!r} does not exist.")
    else:
        _check_vocab(vocab_file)
    vocab_file = str(vocab_file)
    parts, source = lm_text_lines(data_file=data_file, corpus=corpus, data_dir=data_dir)
    windows = {name: text_windows(part, vocab_file, window) for name, part in parts.items()}
    check_windows(windows, window, data_file if data_file is not None else f"corpus {corpus}")
    return LMText(windows["train"], windows["held_out"], vocab_file, source)


__all__ = [
    "LMText",
    "LM_CORPORA",
    "check_windows",
    "default_vocab",
    "lm_text_lines",
    "load_lm_text",
    "text_windows",
]

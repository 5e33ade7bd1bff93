"""Text for a pretrained decoder: token windows from its own tokenizer, and held-out perplexity.

A `DecoderLM` with a tokenizer (`BytePairTokenizer`, or a keras-hub one)
reads plain text itself: `decoder_lm_text` cuts a registered plain text
(`headsize_tf.data.plain_text`: Austen's novels, Moby Dick, Python's docs)
or a UTF-8 file into windows of its token ids, each led by the model's start
token; `decoder_perplexity` is the token-mean perplexity of the windows
(every position after the start token predicted).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from headsize_tf.data.cache import CorpusError
from headsize_tf.data.lm_text import LMText, lm_text_lines
from headsize_tf.data.plain_text import PLAIN_TEXTS, plain_text, token_windows
from headsize_tf.keras3.modeling.lm_generation import leading_token_id

# Registered texts: (training part, held-out part).
TEXT_PARTS = {
    "austen": ("train", "valid"),
    "moby_dick": (None, "all"),
    "python_docs": ("reference", "tutorial"),
}


def _tokenize(lm: Any, start_token: bool | None):
    tokenizer = getattr(lm, "tokenizer", None)
    if tokenizer is None:
        raise ValueError("The decoder carries no tokenizer: it cannot read text.")

    def tokenize(text: str) -> np.ndarray:
        ids = tokenizer.tokenize(text)
        return np.asarray(ids.numpy() if hasattr(ids, "numpy") else ids, np.int32).reshape(-1)

    if start_token is None:
        return tokenize, leading_token_id(tokenizer)
    start = getattr(tokenizer, "start_token_id", None)
    if start_token and start is None:
        raise ValueError("start_token=True, but the decoder's tokenizer has no start token.")
    return tokenize, start if start_token else None


def decoder_lm_text(
    lm: Any,
    window: int,
    *,
    corpus: str | None = None,
    data_file: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    max_train_windows: int | None = None,
    max_held_out_windows: int | None = None,
    train: bool = True,
    start_token: bool | None = None,
) -> LMText:
    """Training and held-out windows of `window` ids of a text, in `lm`'s own tokens.

    Args:
      lm: A decoder with a `tokenizer` (`tokenize`, `start_token_id`).
      window: Ids per window (with a start token: it and `window - 1` text tokens).
      corpus: A registered plain text (`TEXT_PARTS`: "austen" trains on four
        novels and holds out Northanger Abbey; "moby_dick" is held out
        whole; "python_docs" trains on the language reference and holds out
        the tutorial).
      data_file: A UTF-8 file instead (lines held out by SHA-1, about 20%).
      data_dir: The plain texts' cache.
      max_train_windows, max_held_out_windows: Keep the first n windows.
      train: Tokenize the training part too (False: held out only).
      start_token: Put the tokenizer's start token before each window: None
        follows the model file's rule (`add_start_token`), True or False
        overrides it (a study that fixed its protocol).

    Raises:
      ValueError: no or two sources, an unknown corpus, or a part too short
        for one window.
    """
    if (corpus is None) == (data_file is None):
        raise ValueError("Give one text source: corpus= (a registered text) or data_file=.")
    tokenize, start = _tokenize(lm, start_token)
    if corpus is not None:
        if corpus not in TEXT_PARTS:
            raise ValueError(
                f"corpus={corpus!r} is not a registered plain text; expected one of "
                f"{sorted(TEXT_PARTS)}."
            )
        train_part, held_part = TEXT_PARTS[corpus]
        parts = {"held_out": plain_text(corpus, held_part, data_dir)}
        if train and train_part is not None:
            parts["train"] = plain_text(corpus, train_part, data_dir)
        source = f"{corpus} ({PLAIN_TEXTS[corpus].source}); held out: {held_part}"
    else:
        parts, source = lm_text_lines(data_file=data_file)
        if not train:
            parts.pop("train")
    limits = {"train": max_train_windows, "held_out": max_held_out_windows}
    windows = {}
    for name, lines in parts.items():
        try:
            windows[name] = token_windows(lines, tokenize, window, start, max_windows=limits[name])
        except CorpusError as err:  # Name the text and its part.
            raise CorpusError(f"{source.split(' (')[0]}, {name} part: {err}") from None
    empty = np.zeros([0, window], np.int32)
    tokenizer = type(lm.tokenizer).__name__
    return LMText(
        windows.get("train", empty), windows["held_out"], f"{tokenizer} (the model's own)", source
    )

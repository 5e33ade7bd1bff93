"""A keras-hub causal LM (GPT-2) as the pruning driver's `ModelAdapter`: LM loss, perplexity."""

from __future__ import annotations

import json
import os
import pathlib
import sys
from collections.abc import Sequence

import numpy as np

from headsize_tf.core.io import atomic_directory
from headsize_tf.data.lm_text import LMText, check_windows, lm_text_lines
from headsize_tf.keras3.hub.hub_model import HubModel, to_numpy
from headsize_tf.keras3.hub.presets import load_hub_preset
from headsize_tf.keras3.pruning.lm_adapter import REPORT_FILE, LMAdapter
from headsize_tf.keras3.pruning.remove import remove_heads


def lm_windows(hub: HubModel, texts: Sequence[str], length: int, limit: int) -> np.ndarray:
    """int32 `[windows, length + 1]` token windows of `texts` for next-token losses.

    Each text and a newline is tokenized by the model's keras-hub tokenizer;
    the tokens are concatenated and cut into consecutive windows (the last
    partial one dropped).

    Args:
      hub: The `HubModel` (a causal LM with a preprocessor).
      texts: Plain texts, e.g. the lines of a file.
      length: Input tokens per window (a window holds `length + 1`: inputs
        and their next-token targets).
      limit: At most this many windows.

    Example:

    >>> windows = lm_windows(hub, ["It is a truth universally acknowledged"] * 50, 64, 8)
    >>> windows.shape
    (8, 65)
    """
    if not len(texts):
        return np.zeros([0, length + 1], np.int32)
    tokens = hub.tokenizer([f"{text}\n" for text in texts])
    if hasattr(tokens, "to_list"):  # A ragged TensorFlow tensor.
        rows = tokens.to_list()
    else:  # Python lists, or one tensor a row.
        rows = [
            row if isinstance(row, list) else to_numpy(row).reshape(-1).tolist() for row in tokens
        ]
    ids = np.array([int(i) for row in rows for i in row], np.int32)
    count = min(len(ids) // (length + 1), limit)
    return ids[: count * (length + 1)].reshape(count, length + 1)


def hub_lm_text(
    hub: HubModel,
    window: int,
    *,
    data_file: str | os.PathLike | None = None,
    corpus: str | None = None,
    data_dir: str | os.PathLike | None = None,
    train: bool = True,
) -> LMText:
    """`LMText` windows of `window` ids, tokenised by the model's own keras-hub tokenizer.

    The lines and their split are `data.lm_text.lm_text_lines`'s (a corpus's
    train.txt / valid.txt; a file's lines by `data.splits.split_of`, about
    20% held out), as for a `.keras` LM, which `load_lm_text` tokenises with a
    WordPiece vocabulary instead; here `lm_windows` cuts each part into
    windows.

    Args:
      hub: A causal-LM `HubModel` with its preprocessor (GPT-2).
      window: Ids per window (an LM of n positions: at most n + 1).
      data_file: A plain UTF-8 text file (one of `data_file`, `corpus`).
      corpus: A registered corpus (`data.lm_text.LM_CORPORA`).
      data_dir: The corpus cache (default: `data.cache.default_data_dir()`).
      train: Tokenise the training part too (False: it is left empty, for a
        measurement without uptraining).

    Returns:
      `LMText` whose `vocab_file` describes the tokenizer; raises a
      ValueError when a part has no full window.

    Example:

    >>> text = hub_lm_text(hub, 65, data_file="notes.txt")
    >>> report = convert_hub_lm(hub, ConversionTarget("grouped", 2), "out", text=text)
    """
    if hub.tokenizer is None:
        raise ValueError(
            f"{hub.source}: the model has no keras-hub tokenizer (its preset has none) to "
            "tokenise the text with."
        )
    parts, source = lm_text_lines(data_file=data_file, corpus=corpus, data_dir=data_dir)
    if not train:
        parts["train"] = []
    windows = {
        name: lm_windows(hub, [line for line in lines if line.strip()], window - 1, sys.maxsize)
        for name, lines in parts.items()
    }
    where = str(data_file) if data_file is not None else f"corpus {corpus}"
    check_windows(windows if train else {"held_out": windows["held_out"]}, window, where)
    tokenizer = f"the {type(hub.tokenizer).__name__} of {hub.source}"
    return LMText(windows["train"], windows["held_out"], tokenizer, source)


class HubLMAdapter(LMAdapter):
    """A `HubModel` causal LM as a `ModelAdapter`: `LMAdapter` saving in the bridge's layout.

    Importance E|dL/dxi_h| of the next-token loss on training windows,
    validation perplexity, `HubModel.save` as the output.

    Args:
      hub: The `HubModel` (GPT-2).
      importance_windows: int32 `[N, length + 1]` windows of the importance.
      eval_windows: int32 `[M, length + 1]` windows of the perplexity.
      batch_size: Windows per batch.

    Example:

    >>> windows = lm_windows(hub, lines, 64, 256)
    >>> prune_loop(HubLMAdapter(hub, windows, dev_windows), PruneSchedule(0.3), "pruned")
    """

    def __init__(
        self,
        hub: HubModel,
        importance_windows: np.ndarray,
        eval_windows: np.ndarray,
        batch_size: int = 8,
    ):
        if not hub.arch.causal_lm:
            raise ValueError(f"HubLMAdapter takes a causal LM; got {hub.architecture}.")
        super().__init__(hub.backbone, importance_windows, eval_windows, batch_size, hub.source)
        self.hub = hub

    def remove_heads(self, mask: np.ndarray) -> HubLMAdapter:
        return self._like(self.hub.with_backbone(remove_heads(self.lm, mask)))

    def _like(self, hub: HubModel) -> HubLMAdapter:
        return HubLMAdapter(hub, self.importance_windows, self.eval_windows, self.batch_size)

    def save(self, output, report, overwrite: bool = False) -> pathlib.Path:
        with atomic_directory(output, overwrite=overwrite) as written:
            self.hub.write_into(written)
            (written / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
        return pathlib.Path(output)

    def reload(self, path) -> HubLMAdapter:
        return self._like(load_hub_preset(path))

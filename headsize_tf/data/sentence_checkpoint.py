"""What both fronts' `SentenceEncoder` share: settings, batching, checkpoint files.

The tf_keras `headsize_tf.pretrained.SentenceEncoder` and the Keras 3
`headsize_tf.keras3.pretrained.SentenceEncoder` differ in their model (a
`HeadsizeBertEncoder` or a `BertBackbone`) and how they save it; the
tokenizer, the pooling settings, the length-sorted batching of `embed`, the
checkpoint's JSON file and the choice between a registry name and a
directory (`load_sentence_encoder`) are written once here. No Keras.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.hf_checkpoint import read_json_object
from headsize_tf.data.pretrained import PRETRAINED, fetch_pretrained

if TYPE_CHECKING:
    # Imported where a tokenizer is built: `wordpiece` picks its backend (tensorflow-text
    # or `tokenizers`) on first use.
    from headsize_tf.data.wordpiece import WordPieceTokenizer

CHECKPOINT_FILE = "headsize_checkpoint.json"
VOCAB_FILE = "vocab.txt"
POOLINGS = ("mean", "cls")
# The checkpoint formats of the two fronts, and which front opens each.
FORMAT_HINTS = {
    1: " (a tf_keras checkpoint: open it with headsize_tf.pretrained)",
    "keras3-1": " (a Keras 3 checkpoint: open it with headsize_tf.keras3.pretrained)",
}

Encoder = TypeVar("Encoder")


class TextSettings(TypedDict, total=False):
    """Keyword arguments of a `SentenceEncoder` besides its model and vocabulary."""

    lower_case: bool | str
    max_seq_length: int
    pooling: str
    normalize: bool
    source: str


class SentenceEncoderSettings:
    """Tokenizer, pooling settings and checkpoint files of a sentence encoder.

    The base of both fronts' `SentenceEncoder`: a front's `__init__` calls
    `_set_text_settings`, which checks `pooling`, builds the
    `WordPieceTokenizer` and sets the public attributes `vocab_file`,
    `lower_case`, `max_seq_length`, `pooling`, `normalize` and `source`;
    `text_settings()` gives them back as constructor arguments, and
    `_read_checkpoint` / `_write_checkpoint_files` read and write the JSON
    config and the vocabulary of a checkpoint directory.

    Example:

    >>> class Encoder(SentenceEncoderSettings):
    ...     def __init__(self, vocab_file, **settings):
    ...         self.tokenizer = self._set_text_settings(vocab_file, **settings)
    >>> Encoder("vocab.txt", pooling="cls").text_settings()["pooling"]
    'cls'
    """

    def _set_text_settings(
        self,
        vocab_file: str | os.PathLike,
        *,
        lower_case: bool | str = True,
        max_seq_length: int = 256,
        pooling: str = "mean",
        normalize: bool = True,
        source: str = "",
    ) -> WordPieceTokenizer:
        if pooling not in POOLINGS:
            raise ValueError(f"Unknown pooling {pooling!r}; expected one of {list(POOLINGS)}.")
        from headsize_tf.data.wordpiece import WordPieceTokenizer

        tokenizer = WordPieceTokenizer(
            vocab_file, lower_case=lower_case, max_seq_length=max_seq_length
        )
        self.vocab_file = tokenizer.vocab_file
        self.lower_case = lower_case
        self.max_seq_length = max_seq_length
        self.pooling = pooling
        self.normalize = normalize
        self.source = source
        return tokenizer

    def text_settings(self, source: str | None = None) -> TextSettings:
        """The keyword arguments that rebuild these settings (`source` replaced if given)."""
        return {
            "lower_case": self.lower_case,
            "max_seq_length": self.max_seq_length,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "source": self.source if source is None else source,
        }

    # ------------------------------------------------------------- embedding
    @staticmethod
    def _length_batches(
        texts: Sequence[str], batch_size: int, progress: bool = False
    ) -> Iterable[np.ndarray]:
        """Index arrays of `batch_size` texts, longest first (little padding per batch).

        Raises ValueError unless `batch_size` is a positive int; with
        `progress`, a tqdm bar counts the batches.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int; got {batch_size!r}.")
        order = np.argsort([len(t) for t in texts], kind="stable")[::-1]
        from tqdm.auto import tqdm

        batches = [order[i : i + batch_size] for i in range(0, len(texts), batch_size)]
        return tqdm(batches, desc="embed", unit="batch", disable=not progress)

    @staticmethod
    def _unpadded(ids: np.ndarray, mask: np.ndarray) -> list[list[int]]:
        """Each row of `ids` up to its mask's length, as lists."""
        return [row[: int(m.sum())].tolist() for row, m in zip(ids, mask, strict=True)]

    # ---------------------------------------------------------- checkpoints
    def _write_checkpoint_files(self, directory: pathlib.Path, config: dict[str, Any]) -> None:
        """Writes `vocab.txt` and the JSON `config` (`checkpoint_config()`) into `directory`."""
        shutil.copyfile(self.vocab_file, directory / VOCAB_FILE)
        (directory / CHECKPOINT_FILE).write_text(json.dumps(config, indent=2) + "\n")

    @staticmethod
    def _read_checkpoint(
        directory: str | os.PathLike,
        checkpoint_format: Any,
        required: Sequence[str],
        layout: str,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The JSON config of a checkpoint directory and the encoder's keyword arguments.

        Args:
          directory: The checkpoint directory.
          checkpoint_format: The `format` the front reads (1 or "keras3-1").
          required: Names that must exist in `directory` besides the config
            and the vocabulary.
          layout: The expected files, for the message of a missing one.

        Returns:
          (config, kwargs): `kwargs` are `vocab_file` and the `TextSettings`.

        Raises:
          CheckpointError: a missing file, invalid JSON, or another format.
        """
        directory = pathlib.Path(directory)

        def check_files(names: Sequence[str]) -> None:
            for name in names:
                if not (directory / name).exists():
                    raise CheckpointError(
                        f"Checkpoint directory {directory} has no {name}; expected {layout}."
                    )

        check_files((CHECKPOINT_FILE, VOCAB_FILE))
        config_path = directory / CHECKPOINT_FILE
        config = read_json_object(config_path)
        found = config.get("format")
        if found != checkpoint_format:  # Before `required`: the other front's files differ.
            hint = FORMAT_HINTS.get(found, "") if isinstance(found, int | str) else ""
            raise CheckpointError(
                f"{config_path} has format {found!r}; expected {checkpoint_format!r}{hint}."
            )
        check_files(required)
        kwargs = {
            "vocab_file": directory / VOCAB_FILE,
            **{
                key: config[key] for key in ("lower_case", "max_seq_length", "pooling", "normalize")
            },
            "source": config.get("source", str(directory)),
        }
        return config, kwargs


def open_sentence_encoder(
    model: str | None,
    checkpoint: str | os.PathLike | None,
    cache_dir: str | os.PathLike | None,
    load: Callable[[pathlib.Path], Encoder],
    import_hf_bert: Callable[..., Encoder],
) -> Encoder:
    """A front's sentence encoder from a registry name or a checkpoint directory (one of them).

    A registered `model` is fetched into `cache_dir` and imported with
    `import_hf_bert(directory, source=model)`; a `checkpoint` directory
    holding `headsize_checkpoint.json` is opened with `load(directory)`, any
    other with `import_hf_bert(directory)` (Hugging Face layout).
    """
    if (model is None) == (checkpoint is None):
        raise CheckpointError(
            "Give exactly one of a model name (model=) or a checkpoint directory (checkpoint=)."
        )
    if model is not None:
        spec = PRETRAINED.get(model)
        if spec is not None and spec.kind != "encoder":
            raise CheckpointError(
                f"{model!r} is a {spec.kind}, not a sentence encoder; the decoder tools "
                "(headsize_tf.keras3.pretrained.load_decoder) open it."
            )
        return import_hf_bert(fetch_pretrained(model, cache_dir), source=model)
    directory = pathlib.Path(checkpoint)
    if not directory.is_dir():
        raise CheckpointError(f"Checkpoint directory {directory} does not exist.")
    if (directory / CHECKPOINT_FILE).exists():
        return load(directory)
    return import_hf_bert(directory)

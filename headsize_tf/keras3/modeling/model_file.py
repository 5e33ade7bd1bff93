"""Opening `.keras` files with one-line errors: what a file holds, and loading it.

Keras reports a file that is not a zip archive as "File not found" and a
class it cannot rebuild with two chained tracebacks and the whole config;
these helpers name the file and what was expected in one line
(`CheckpointError`).
"""

from __future__ import annotations

import json
import os
import pathlib
import zipfile
from typing import Any

import keras

from headsize_tf.core.errors import CheckpointError

# How much of a Keras loading error a message keeps (Keras appends whole configs).
_REASON_CHARACTERS = 200


def saved_class_name(path: str | os.PathLike) -> str:
    """The class name a `.keras` file's `config.json` records (e.g. "DecoderLM"), without
    building the model.

    Raises:
      CheckpointError: `path` is missing, not a `.keras` file (a zip archive
        with a `config.json`) or its config names no class.
    """
    path = _checked(path)
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (KeyError, ValueError, zipfile.BadZipFile) as err:
        raise CheckpointError(
            f"{path} has no readable config.json ({_reason(err)}); expected a .keras file "
            "written by model.save."
        ) from None
    name = config.get("class_name") if isinstance(config, dict) else None
    if not isinstance(name, str):
        raise CheckpointError(f"{path}: its config.json names no class; expected a Keras model.")
    return name


def load_model_file(path: str | os.PathLike, what: str = "a Keras 3 model") -> Any:
    """`keras.saving.load_model(path)`, with a failure in one line naming `path` and `what`.

    Args:
      path: A `.keras` file.
      what: What the caller expects, for messages ("a DecoderLM", ...).

    Raises:
      CheckpointError: `path` is missing, not a `.keras` zip archive, or Keras
        cannot rebuild or fill its model (the reason cut to one short line).
    """
    path = _checked(path)
    try:
        return keras.saving.load_model(path)
    except ImportError:  # A missing package: the CLI names the extra to install.
        raise
    except Exception as err:  # Keras raises TypeError, ValueError, OSError, KeyError, ...
        raise CheckpointError(f"{path} could not be loaded as {what} ({_reason(err)}).") from None


def _checked(path: str | os.PathLike) -> pathlib.Path:
    path = pathlib.Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist; expected a .keras file.")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path} is not a .keras file (not a zip archive, or cut short); expected a file "
            "written by model.save."
        )
    return path


def _reason(err: BaseException) -> str:
    """An error's first line, at most `_REASON_CHARACTERS` long."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if len(text) > _REASON_CHARACTERS:
        text = text[: _REASON_CHARACTERS - 3] + "..."
    return f"{type(err).__name__}: {text}"

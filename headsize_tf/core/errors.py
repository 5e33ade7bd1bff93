"""Error types shared by every floor, and which errors bad input causes."""

from __future__ import annotations

import sys


class CheckpointError(ValueError):
    """A checkpoint is unknown, missing files, or has missing/mis-shaped tensors."""


class SpecError(ValueError):
    """An invalid attention setting; the message names the value and what was expected."""


def is_user_error(err: BaseException) -> bool:
    """Whether `err` is what bad input causes: the command lines report it in one line
    (exit status 2) instead of a traceback.

    The library's own errors (`ValueError` and its `SpecError` / `CheckpointError`,
    `RuntimeError`, `OSError`s such as `FileExistsError`), a YAML syntax error, and a
    TensorFlow `OpError` (a missing or unreadable file read by a TF kernel).
    """
    if isinstance(err, (ValueError, RuntimeError, OSError)):
        return True
    yaml = sys.modules.get("yaml")
    if yaml is not None and isinstance(err, yaml.YAMLError):
        return True
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(err, tf.errors.OpError)


def is_interrupt(err: BaseException) -> bool:
    """Whether `err` is Ctrl-C: a `KeyboardInterrupt`, or one that TensorFlow's native
    code caught and re-raised as another error (pybind11's "... REPLACED BY
    KeyboardInterrupt" when the signal lands while a function is traced)."""
    return isinstance(err, KeyboardInterrupt) or "REPLACED BY KeyboardInterrupt" in str(err)

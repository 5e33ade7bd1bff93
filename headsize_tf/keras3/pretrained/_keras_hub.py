"""keras-hub is an optional extra: importing it, or one line naming the extra (used by the
keras-hub decoder readers here and by the `headsize_tf.keras3.hub` bridge)."""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRA = 'pip install "headsize-tf[hub]"'


class MissingExtraError(ImportError, RuntimeError):
    """keras-hub is not installed (an `ImportError`; a `RuntimeError` for the CLI's one line).

    Example:

    >>> try:
    ...     require_keras_hub()
    ... except MissingExtraError as err:
    ...     print(err)
    keras-hub is not installed; the keras-hub bridge needs the extra: pip install "headsize-tf[hub]"
    """


def require_keras_hub() -> ModuleType:
    """The `keras_hub` module, or a `MissingExtraError` naming the `hub` extra."""
    try:
        return importlib.import_module("keras_hub")
    except ImportError as err:
        if err.name != "keras_hub":
            raise  # keras-hub is there but one of its own imports failed: show that.
        raise MissingExtraError(
            f"keras-hub is not installed; the keras-hub bridge needs the extra: {EXTRA}"
        ) from None

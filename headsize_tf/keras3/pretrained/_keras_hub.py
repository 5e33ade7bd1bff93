"""keras-hub is an optional extra (`hub`): importing it, or one line naming the extra (used by
the keras-hub decoder readers here and by the `headsize_tf.keras3.hub` bridge)."""

from __future__ import annotations

from types import ModuleType

from headsize_tf.core.extras import MissingExtraError, install_command, require

EXTRA = install_command("hub")


def require_keras_hub() -> ModuleType:
    """The `keras_hub` module, or a `MissingExtraError` naming the `hub` extra.

    Example:

    >>> try:
    ...     require_keras_hub()
    ... except MissingExtraError as err:
    ...     print(err)
    keras-hub is not installed (needed for the keras-hub bridge); install the extra: pip install "headsize-tf[hub]"
    """
    return require("keras_hub", "hub", purpose="the keras-hub bridge")


__all__ = ["EXTRA", "MissingExtraError", "require_keras_hub"]

"""Optional extras: importing an optional package, or one line naming the extra to install.

The base install (`pip install headsize-tf`) is the Keras 3 front on any backend; the rest
comes in extras (`setup.cfg`, docs/install.md): `tf`, `garden`, `jax`, `hub`, `tune`, `cp`,
`gguf`. A module that needs an optional package imports it with `require` where it uses it,
so importing the module works without the extra and using it fails with a
`MissingExtraError` whose message is one line naming the extra (the CLI prints it as its
error line: the error is a `RuntimeError` too). No framework is imported here.

Example:

>>> gguf = require("gguf", purpose="reading GGUF files")
>>> try:
...     require("tensorly")
... except MissingExtraError as err:
...     print(err)
tensorly is not installed; install the extra: pip install "headsize-tf[cp]"
"""

from __future__ import annotations

import importlib
from types import ModuleType

# The optional top-level modules and the extra that installs each.
EXTRAS = {
    "tensorflow": "tf",
    "tf_keras": "tf",
    "tensorflow_text": "tf",
    "official": "garden",
    "tensorflow_datasets": "garden",
    "jax": "jax",
    "keras_hub": "hub",
    "keras_tuner": "tune",
    "tensorly": "cp",
    "gguf": "gguf",
}
# pip's names of the modules whose distribution is named otherwise.
PACKAGES = {
    "tf_keras": "tf-keras",
    "tensorflow_text": "tensorflow-text",
    "official": "tf-models-official",
    "tensorflow_datasets": "tensorflow-datasets",
    "keras_hub": "keras-hub",
    "keras_tuner": "keras-tuner",
}


class MissingExtraError(ImportError, RuntimeError):
    """An optional package is not installed (an `ImportError`; a `RuntimeError` for the
    CLI's one-line error). The message names the extra that installs it."""


def install_command(extra: str) -> str:
    """`pip install "headsize-tf[EXTRA]"`."""
    return f'pip install "headsize-tf[{extra}]"'


def require(module: str, extra: str | None = None, *, purpose: str = "") -> ModuleType:
    """The imported `module`, or a `MissingExtraError` naming the extra that installs it.

    Args:
      module: The module to import ("tensorflow_text", "gguf", "keras_tuner.engine", ...).
      extra: The extra that installs it (default: `EXTRAS` of its top-level package).
      purpose: What needs it, for the message ("reading GGUF files": "gguf is not
        installed (needed for reading GGUF files); install the extra: ...").

    Raises:
      MissingExtraError: the module, or a package of the same extra that it imports, is
        not installed. A package that is installed but fails to import for another reason
        (one of its own dependencies missing or broken) raises its own error, unchanged.
    """
    top = module.split(".")[0]
    extra = extra or EXTRAS.get(top)
    if extra is None:
        raise ValueError(f"No extra is known for {module!r}; name it: require(module, extra).")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        missing = (err.name or "").split(".")[0]
        if missing != top and EXTRAS.get(missing) != extra:
            raise  # Installed, but one of its own imports failed: show that.
        raise _missing(missing, extra, purpose) from None


def as_missing_extra(err: BaseException) -> MissingExtraError | None:
    """`err` as a `MissingExtraError` when it is an optional package's import error, else None.

    For a caller that prints errors as one line (the command line): a
    `ModuleNotFoundError` of a module in `EXTRAS` (raised by code that imports it
    directly) becomes the line naming its extra; a `MissingExtraError` stays as it is.
    """
    if isinstance(err, MissingExtraError):
        return err
    if isinstance(err, ModuleNotFoundError) and err.name:
        top = err.name.split(".")[0]
        if top in EXTRAS:
            return _missing(top, EXTRAS[top])
    return None


def _missing(module: str, extra: str, purpose: str = "") -> MissingExtraError:
    needed = f" (needed for {purpose})" if purpose else ""
    return MissingExtraError(
        f"{PACKAGES.get(module, module)} is not installed{needed}; install the extra: "
        f"{install_command(extra)}"
    )


def available(module: str) -> bool:
    """Whether `module` imports (an optional package that is installed and works)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True

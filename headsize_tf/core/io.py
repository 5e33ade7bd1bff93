"""Atomic file writes shared by experiments, tools and benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any


def cache_root() -> pathlib.Path:
    """`$XDG_CACHE_HOME/headsize_tf` (default `~/.cache/headsize_tf`)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "headsize_tf"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Yields a temporary path beside `path`, renamed onto `path` on success.

    The one write-then-rename helper: readers never see a partial file, and a
    failure (or an interrupt) leaves any previous `path` untouched.

    Example:

    >>> with atomic_path("out/vectors.npy") as tmp:
    ...     numpy.save(tmp, vectors)
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = True) -> Iterator[pathlib.Path]:
    """Yields an empty temporary directory beside `path` that replaces `path` on success.

    The directory counterpart of `atomic_path`: readers see the old directory
    or the whole new one; a failure leaves any previous `path` untouched and
    removes the temporary one. The new directory gets the usual permissions
    (0777 less the umask), not the private mode of a temporary directory.

    Args:
      path: The directory to write.
      overwrite: Replace an existing `path` (else, if one appeared meanwhile,
        raise `FileExistsError` and keep it).
    """
    import shutil
    import tempfile

    final = pathlib.Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
        if final.exists():
            if not overwrite:
                raise FileExistsError(f"Output directory {final} exists; pass overwrite=True.")
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_output_free(output: str | os.PathLike, overwrite: bool) -> None:
    """Raises `FileExistsError` before any work when `output` exists and may not be replaced.

    The one "exists" check of the library's writers; its message names the
    Python argument (the CLI shows its own flag instead).
    """
    if pathlib.Path(output).exists() and not overwrite:
        raise FileExistsError(
            f"Output directory {output} exists; pass overwrite=True to replace it."
        )


def write_atomic(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Writes `text` to `path` through a temporary file renamed into place."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return pathlib.Path(path)


def write_json(path: str | os.PathLike, data: Any) -> pathlib.Path:
    return write_atomic(path, json.dumps(data, indent=2) + "\n")


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> pathlib.Path:
    """Saves a matplotlib figure atomically and closes it."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return pathlib.Path(path)


@contextlib.contextmanager
def native_logs_to(path: str | os.PathLike | None) -> Iterator[None]:
    """Sends what native code writes to the process' stderr (file descriptor 2) to `path`.

    TensorFlow's C++ runtime logs some lines (e.g. grappler's "Number of
    eligible GPUs") through absl before its log level applies; they go to a
    file instead of the screen. Python's `sys.stderr` is flushed first and
    descriptor 2 is restored on exit, also on an error, so an error message
    printed after the block reaches the screen. `None` changes nothing.
    """
    if path is None:
        yield
        return
    import sys

    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)

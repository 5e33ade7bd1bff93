"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import os
import pathlib


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file renamed into place."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

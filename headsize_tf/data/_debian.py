"""Debian packages as a data source: `apt-get download` a .deb and unpack it.

Works without root: `apt-get download` writes into the current directory and
`dpkg-deb -x` unpacks without installing. A machine whose package lists are
empty gets `apt-get update` once, when the first download fails.
"""

from __future__ import annotations

import pathlib
import subprocess

from headsize_tf.data.cache import CorpusError


def apt_download(package: str, workdir: pathlib.Path) -> str:
    """`apt-get download package` into `workdir`; returns what apt-get said."""

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["apt-get", "download", package],
            cwd=workdir,
            capture_output=True,
            text=True,
        )

    result = run()
    if result.returncode != 0:  # A fresh machine needs its package lists first.
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
        result = run()
    return result.stdout + result.stderr


def download_deb(package: str, workdir: pathlib.Path) -> pathlib.Path:
    """The .deb of `package` in `workdir`, downloaded unless one is there already.

    Raises:
      CorpusError: apt-get could not download it (with the end of its output).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    debs = sorted(workdir.glob(f"{package}_*.deb"))
    if not debs:
        said = apt_download(package, workdir)
        debs = sorted(workdir.glob(f"{package}_*.deb"))
        if not debs:
            raise CorpusError(
                f"Could not download the Debian package {package} "
                f"(apt-get download said: {said.strip()[-500:]})."
            )
    return debs[-1]


def extract_deb(deb: pathlib.Path, destination: pathlib.Path) -> pathlib.Path:
    """Unpacks the files of `deb` under `destination` (`dpkg-deb -x`); returns it."""
    destination.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(destination)], check=True)
    return destination

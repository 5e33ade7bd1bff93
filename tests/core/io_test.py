"""`core.io`: files and directories appear whole or not at all."""

from __future__ import annotations

import os
import stat

import pytest

from headsize_tf.core.io import atomic_directory, atomic_path, write_json


def test_atomic_path_keeps_the_old_file_on_failure(tmp_path):
    target = tmp_path / "a" / "x.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("cut off")
    assert target.read_text() == '{\n  "v": 1\n}\n'
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.json"]


def test_atomic_directory_replaces_whole_and_with_the_usual_mode(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_text("old")
    umask = os.umask(0o022)
    try:
        with atomic_directory(target) as tmp:
            (tmp / "new.txt").write_text("new")
            assert not (target / "new.txt").exists()  # Not visible before the end.
    finally:
        os.umask(umask)
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o755  # Not mkdtemp's 0700.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_atomic_directory_failure_and_no_overwrite_keep_the_old_one(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "new.txt").write_text("new")
        raise RuntimeError("cut off")
    with pytest.raises(FileExistsError, match="exists; pass overwrite=True"):
        with atomic_directory(target, overwrite=False) as tmp:
            (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # No temporaries left.

"""The compression study's arguments and records: bad numbers and a rerun with other
settings are refused before any work; the summary holds only the command's runs."""

import json
import subprocess
import sys

import pytest

from headsize_tf.experiments import compression_study as study
from tests.experiments.unreached import Reached, fail


def _record(name, dim, seed, args, splits):
    record = {"model": name, "shared_key_dim": dim, "seed": seed, "params": 100 - (dim or 0)}
    record.update(dev_accuracy=0.8, test_accuracy=0.79)
    if dim is not None:
        record.update(mean_relative_error=0.1, embedding_cosine=0.9)
    return record


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--dims", "-4"], "--dims"),
        (["--dims", "64", "0"], "--dims"),
        (["--seeds", "-1"], "--seeds"),
        (["--epochs", "0"], "--epochs"),
        (["--max-iter", "0"], "--max-iter"),
        (["--eval-sentences", "0"], "--eval-sentences"),
    ],
)
def test_bad_numbers_are_refused_after_parsing(flags, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(study, "rotten_tomatoes_splits", fail)
    with pytest.raises(SystemExit) as exit_:
        study.main(["--output", str(tmp_path / "out"), *flags])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_other_settings_are_refused_and_the_summary_holds_the_commands_dims(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "rotten_tomatoes_splits", lambda data_dir: {})
    monkeypatch.setattr(study, "run_one", _record)
    monkeypatch.setattr(study, "plot", lambda summary, path: None)
    out = tmp_path / "out"
    argv = ["--output", str(out), "--seeds", "0"]
    assert study.main([*argv, "--dims", "128", "64"]) == 0
    assert study.main([*argv, "--dims", "64", "--report-only"]) == 0
    rows = json.loads((out / "compression.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["original", "collaborative_D64"]
    monkeypatch.setattr(study, "run_one", fail)
    with pytest.raises(ValueError, match=r"epochs 2\.0 there, 3\.0 now.*another --output"):
        study.main([*argv, "--dims", "64", "--epochs", "3"])
    with pytest.raises(ValueError, match="model"):
        study.main([*argv, "--dims", "64", "--model", "other"])
    with pytest.raises(Reached):  # The same settings, another dim: resumed.
        study.main([*argv, "--dims", "64", "32"])


def test_help_imports_no_tensorflow():
    # A fresh process: this one has TensorFlow loaded by other tests.
    code = (
        "import sys\n"
        "from headsize_tf.experiments import compression_study, pruning_study\n"
        "for study in (compression_study, pruning_study):\n"
        "    try:\n"
        "        study.main(['--help'])\n"
        "    except SystemExit as exit_:\n"
        "        assert exit_.code == 0, exit_.code\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("usage: ") == 2

"""The LM pruning study's arguments and report: bad numbers, an output that is a file and
a rerun with other settings are refused before any training; the report names the
windows the study used."""

import json

import pytest

from headsize_tf.data import corpora
from headsize_tf.experiments import lm_pruning_study as study
from tests.experiments.unreached import Reached, fail


@pytest.fixture
def no_work(monkeypatch):
    monkeypatch.setattr(corpora, "prepare", fail)


def _argv(tmp_path, *flags):
    return ["--output", str(tmp_path / "out"), "--work-dir", str(tmp_path / "w"), *flags]


@pytest.mark.parametrize(
    "flags,named", [(["--windows", "0"], "--windows"), (["--steps", "0"], "--steps")]
)
def test_bad_numbers_are_refused_after_parsing(flags, named, tmp_path, no_work, capsys):
    with pytest.raises(SystemExit) as exit_:
        study.main(_argv(tmp_path, *flags))
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_output_that_is_a_file_is_refused(tmp_path, no_work):
    (tmp_path / "out").write_text("")
    with pytest.raises(OSError, match="is a file"):
        study.main(_argv(tmp_path))
    assert not (tmp_path / "w").exists()


def test_a_rerun_with_other_settings_is_refused_and_the_same_resumes(tmp_path, no_work):
    with pytest.raises(Reached):
        study.main(_argv(tmp_path, "--steps", "4", "--windows", "8"))
    with pytest.raises(ValueError, match=r"steps 4 there, 6 now.*another --output"):
        study.main(_argv(tmp_path, "--steps", "6", "--windows", "8"))
    with pytest.raises(ValueError, match=r"windows 8 there, 256 now"):
        study.main(_argv(tmp_path, "--steps", "4", "--report-only"))
    with pytest.raises(Reached):
        study.main(_argv(tmp_path, "--steps", "4", "--windows", "8"))


def test_a_recorded_model_of_other_steps_is_refused(tmp_path, no_work):
    (tmp_path / "out" / "runs").mkdir(parents=True)
    (tmp_path / "out" / "runs" / "train.json").write_text(json.dumps({"steps": 4}))
    with pytest.raises(ValueError, match="trained 4 steps, not --steps 6"):
        study.main(_argv(tmp_path, "--steps", "6", "--report-only"))


def test_the_report_names_the_windows_used(tmp_path):
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "settings.json").write_text(json.dumps({"steps": 4, "windows": 8}))
    heads = [study.HEADS] * study.LAYERS
    records = {
        "train": {"steps": 4},
        "importance_pruning": {
            "curve": [{"fraction": 0.0, "perplexity": 10.0, "heads_per_layer": heads}],
            "perplexity": {"original": 10.0},
            "decoding_tokens_per_second": {"original": 100.0, "pruned": 110.0},
            "decoding_speedup": 1.1,
        },
        "one_head_per_layer": {"unpruned": 10.0, "layers": []},
        "half_removed_speed": {
            "tokens_per_second": {"unpruned": 100.0, "half_removed": 105.0},
            "speedup": 1.05,
            "params": {"unpruned": 10, "half_removed": 8},
        },
    }
    for name, record in records.items():
        (out / "runs" / f"{name}.json").write_text(json.dumps(record))
    study.summarize(out, "cmd")
    readme = (out / "README.md").read_text()
    assert "on 8 windows of Northanger Abbey" in readme and "256" not in readme

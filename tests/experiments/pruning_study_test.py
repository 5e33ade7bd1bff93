"""The pruning study's arguments: bad numbers and a rerun with other settings are refused
before any work, and a rerun with the same settings resumes."""

import argparse
import json

import pytest

from headsize_tf.experiments import pruning_study as study
from headsize_tf.experiments._entry import run_main
from tests.experiments.unreached import Reached, fail


@pytest.fixture
def no_work(monkeypatch):
    monkeypatch.setattr(study, "rotten_tomatoes_splits", fail)
    monkeypatch.setattr(study, "_finetuned", fail)


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--step", "0"], "--step"),
        (["--step", "1.5"], "--step"),
        (["--target-fraction", "1"], "--target-fraction"),
        (["--random-seeds", "-1"], "--random-seeds"),
        (["--epochs", "0"], "--epochs"),
    ],
)
def test_bad_numbers_are_refused_after_parsing(flags, named, tmp_path, no_work, capsys):
    with pytest.raises(SystemExit) as exit_:
        study.main(["--output", str(tmp_path / "out"), *flags])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_step_above_the_target_is_one_line_naming_both(tmp_path, no_work, capsys):
    argv = ["--output", str(tmp_path / "out"), "--step", "0.5", "--target-fraction", "0.3"]
    with pytest.raises(SystemExit) as exited:
        run_main(lambda: study.main(argv), "pruning_study")
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "pruning_study: error: --step 0.5: expected at most --target-fraction 0.3\n"
    )
    assert not (tmp_path / "out").exists()


def test_an_output_that_is_a_file_is_refused(tmp_path, no_work):
    (tmp_path / "out").write_text("")
    with pytest.raises(OSError, match="is a file"):
        study.main(["--output", str(tmp_path / "out")])


def test_a_rerun_with_other_settings_is_refused_and_the_same_resumes(tmp_path, no_work):
    out = str(tmp_path / "out")
    with pytest.raises(Reached):
        study.main(["--output", out, "--step", "0.1"])
    with pytest.raises(ValueError, match=r"step 0\.1 there, 0\.2 now.*another --output"):
        study.main(["--output", out, "--step", "0.2"])
    with pytest.raises(ValueError, match=r"random_seeds \[0, 1, 2\] there, \[5\] now"):
        study.main(["--output", out, "--step", "0.1", "--random-seeds", "5"])
    with pytest.raises(ValueError, match="step"):
        study.main(["--output", out, "--step", "0.2", "--report-only"])
    with pytest.raises(Reached):
        study.main(["--output", out, "--step", "0.1"])


def test_curves_of_different_schedules_are_refused(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "importance_scores.json").write_text("[[1.0]]")
    short = [{"fraction": 0.0, "metric": 0.8}, {"fraction": 0.1, "metric": 0.8}]
    for name in ("importance", "importance_recomputed", "random_seed_0"):
        (runs / f"{name}.json").write_text(json.dumps(short))
    (runs / "random_seed_1.json").write_text(json.dumps(short[:1]))

    def unreachable(path):
        raise AssertionError(path)

    args = argparse.Namespace(random_seeds=[0, 1], report_only=True)
    with pytest.raises(ValueError, match="different schedules"):
        study._curves_and_removal(args, runs, runs / "importance_scores.json", None, unreachable)


def test_records_of_a_fine_tuned_model_that_is_gone_are_not_mixed_with_new_ones(
    tmp_path, no_work, monkeypatch
):
    cache = tmp_path / "cache" / "finetuned"
    monkeypatch.setattr(study, "_finetuned_cache", lambda args: cache)
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "importance.json").write_text("[]")  # A curve of the model once cached.
    with pytest.raises(FileNotFoundError, match=r"finetuned, which is gone; use another"):
        study.main(["--output", str(out)])
    assert (out / "runs" / "importance.json").exists()


def test_the_records_name_the_fine_tuned_model_they_were_made_from(tmp_path):
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    cache.mkdir()
    (cache / "weights.bin").write_bytes(b"model one")
    study._check_made_from(runs, cache, cached=False)  # No records yet: anything goes.
    study._record_made_from(runs, cache)
    study._record_made_from(runs, cache)  # The same model again.
    (runs / "importance.json").write_text("[]")
    study._check_made_from(runs, cache, cached=True)
    (cache / "weights.bin").write_bytes(b"model two")  # Fine-tuned again since.
    with pytest.raises(ValueError, match=r"another fine-tuned model than the one cached at"):
        study._record_made_from(runs, cache)

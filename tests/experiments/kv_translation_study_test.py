"""The translation KV study's driver: every target at every uptraining rate, resumable."""

import json
from unittest import mock

import pytest

from headsize_tf.experiments import kv_translation_study as study


def _report(target, rate):
    bleu = {"original": 20.0, "converted": 19.0, "uptrained": 19.5 if rate else 15.0}
    return {
        "target": target.to_dict(),
        "uptrain_learning_rate": rate,
        "kv_cache_bytes_per_token": {"original": 3072, "converted": 768},
        "bleu": bleu,
        "perplexity": {"original": 21.0, "converted": 22.0, "uptrained": 23.0},
    }


def test_every_target_at_every_rate_once_and_a_rerun_reuses_them(tmp_path, capsys):
    convert = mock.Mock(
        side_effect=lambda source, target, out, **kw: _report(target, kw["uptrain_learning_rate"])
    )
    train = mock.Mock(return_value={"steps": 40, "dev_perplexity": 26.0, "train_pairs": 9})
    with (
        mock.patch("headsize_tf.reparam.convert_dir.convert_model_dir", convert),
        mock.patch(
            "headsize_tf.experiments.translation_pruning_study.train_translation_model", train
        ),
    ):
        summary = study.run_study(tmp_path / "out", tmp_path / "work", "data", steps=40)
        assert train.call_count == 1
        rates = [call.kwargs["uptrain_learning_rate"] for call in convert.call_args_list]
        assert rates == [None, 1e-4] * len(study.TARGETS)
        assert {call.kwargs["uptrain_steps"] for call in convert.call_args_list} == {150}
        # The rerun trains and converts nothing (the model_dir's checkpoint stands in).
        (tmp_path / "work" / "nmt_steps40").mkdir(parents=True)
        (tmp_path / "work" / "nmt_steps40" / "checkpoint").write_text("")
        again = study.run_study(tmp_path / "out", tmp_path / "work", "data", steps=40)
    assert train.call_count == 1 and convert.call_count == 2 * len(study.TARGETS)
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == again
    assert again["rows"] == summary["rows"]
    table = (tmp_path / "out" / "README.md").read_text().splitlines()
    rows = [line for line in table if line.startswith("| grouped K/V, per-group SVD |")]
    assert rows == [
        "| grouped K/V, per-group SVD | 1e-3 (the run's) | 3,072 -> 768 | 20.00 | 19.00 | 15.00 "
        "| 21.00 | 22.00 | 23.00 |",
        "| grouped K/V, per-group SVD | 0.0001 | 3,072 -> 768 | 20.00 | 19.00 | 19.50 "
        "| 21.00 | 22.00 | 23.00 |",
    ]
    assert "dev perplexity 26.00" in "\n".join(table)


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--uptrain-steps", "-5"], "--uptrain-steps"),
        (["--steps", "0"], "--steps"),
        (["--steps", "-3"], "--steps"),
    ],
)
def test_bad_step_counts_are_refused_after_parsing(flags, named, tmp_path, capsys):
    prepare = mock.Mock(side_effect=AssertionError("reached data preparation"))
    with (
        mock.patch("headsize_tf.data.corpora.prepare", prepare),
        pytest.raises(SystemExit) as exit_,
    ):
        study.main(["--output", str(tmp_path / "out"), "--work-dir", str(tmp_path / "w"), *flags])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
    assert not prepare.called


def test_an_output_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("")
    prepare = mock.Mock(side_effect=AssertionError("reached data preparation"))
    with mock.patch("headsize_tf.data.corpora.prepare", prepare), pytest.raises(OSError):
        study.main(["--output", str(tmp_path / "out"), "--work-dir", str(tmp_path / "w")])
    assert not prepare.called


def _stubs():
    convert = mock.Mock(
        side_effect=lambda source, target, out, **kw: _report(target, kw["uptrain_learning_rate"])
    )
    train = mock.Mock(return_value={"steps": 40, "dev_perplexity": 26.0, "train_pairs": 9})
    patches = (
        mock.patch("headsize_tf.reparam.convert_dir.convert_model_dir", convert),
        mock.patch(
            "headsize_tf.experiments.translation_pruning_study.train_translation_model", train
        ),
    )
    return train, convert, patches


def test_a_retrained_model_redoes_every_conversion_made_from_the_previous_one(tmp_path, capsys):
    train, convert, (patch_convert, patch_train) = _stubs()
    checkpoint = tmp_path / "work" / "nmt_steps40" / "checkpoint"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text("")
    with patch_convert, patch_train:
        study.run_study(tmp_path / "out", tmp_path / "work", "data", steps=40)
        checkpoint.unlink()  # The model is gone: trained again ...
        capsys.readouterr()
        study.run_study(tmp_path / "out", tmp_path / "work", "data", steps=40)
    # ... and no conversion of the previous model is reused.
    assert train.call_count == 2 and convert.call_count == 2 * 2 * len(study.TARGETS)
    assert f"removing {2 * len(study.TARGETS)} file(s) made from its previous run" in (
        capsys.readouterr().out
    )


def test_main_reports_the_arguments_it_parsed_not_the_process_s(tmp_path, monkeypatch):
    train, convert, (patch_convert, patch_train) = _stubs()
    out, work = tmp_path / "out", tmp_path / "work"
    with patch_convert, patch_train:
        study.run_study(out, work, "data", steps=40)
    monkeypatch.setattr("sys.argv", ["kv_translation_study", "--output", "another"])
    argv = ["--output", str(out), "--work-dir", str(work), "--steps", "40", "--report-only"]
    assert study.main(argv) == 0
    command = (
        f"python -m headsize_tf.experiments.kv_translation_study --output {out} "
        f"--work-dir {work} --steps 40"
    )
    assert f"Command: `{command}`\n" in (out / "README.md").read_text()
    assert json.loads((out / "summary.json").read_text())["command"] == command

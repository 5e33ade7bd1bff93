"""`experiments._steps.Steps`: a step's record is written once and reused while it matches."""

from __future__ import annotations

import argparse
import importlib
import json

import pytest

from headsize_tf.experiments._entry import run_main
from headsize_tf.experiments._steps import MissingRun, Steps, add_study_options, study_command


def test_reuses_a_finished_step_by_its_file(tmp_path, capsys):
    calls = []

    def work():
        calls.append(1)
        return {"value": len(calls)}

    first = Steps(tmp_path).run("train", "training", work)
    assert first["value"] == 1 and first["slug"] == "train" and first["seconds"] >= 0
    assert json.loads((tmp_path / "runs" / "train.json").read_text()) == first
    again = Steps(tmp_path)
    assert again.run("train", "training", work) == first
    assert calls == [1] and again.redone == []
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[train] training ..."
    assert lines[1].startswith("[train] done in ")
    assert lines[2] == f"[train] training: reusing {tmp_path / 'runs' / 'train.json'}"


def test_a_changed_setting_keeps_the_record_and_names_the_setting(tmp_path):
    Steps(tmp_path).run("a", "step a", lambda: {"x": 1}, settings={"lr": 1, "steps": 4})
    before = (tmp_path / "runs" / "a.json").read_bytes()
    with pytest.raises(ValueError, match=r"a.json was made with steps 4, not 6: its results"):
        Steps(tmp_path).run("a", "step a", lambda: {"x": 2}, settings={"lr": 1, "steps": 6})
    assert (tmp_path / "runs" / "a.json").read_bytes() == before


def test_a_changed_setting_redoes_the_step_where_asked_and_numbering(tmp_path, capsys):
    steps = Steps(tmp_path, total=3)
    steps.announce("data")
    a = steps.run("a", "step a", lambda: {"x": 1}, settings={"lr": 1})
    steps.run("b", "step b", lambda: {"x": 2}, settings={"lr": 1})
    assert a["settings"] == {"lr": 1} and steps.redone == ["a", "b"]
    rerun = Steps(tmp_path, total=3, redo_changed=True)
    rerun.announce("data")
    assert rerun.run("a", "step a", lambda: {"x": 10}, settings={"lr": 1})["x"] == 1
    assert rerun.run("b", "step b", lambda: {"x": 20}, settings={"lr": 2})["x"] == 20
    assert rerun.redone == ["b"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["[1/3] data", "[2/3] step a ...", lines[2]]
    assert lines[2].startswith("      done in ")  # Aligned under the step's label.
    assert lines[5] == "[1/3] data"
    assert lines[6].startswith("[2/3] step a: reusing ")
    assert lines[7] == "[3/3] step b ..."


def test_report_only_reuses_records_and_refuses_missing_ones(tmp_path, capsys):
    Steps(tmp_path).run("a", "step a", lambda: {"x": 1})
    capsys.readouterr()
    report = Steps(tmp_path, report_only=True)
    assert report.run("a", "step a", lambda: {"x": 2})["x"] == 1
    with pytest.raises(MissingRun, match=r"--report-only: .*b\.json is missing"):
        report.run("b", "step b", lambda: {"x": 3})
    assert not (tmp_path / "runs" / "b.json").exists()
    assert capsys.readouterr().out == ""  # Reporting prints no progress lines.


def test_a_step_missing_an_output_is_redone_and_a_redone_step_removes_its_derived_files(
    tmp_path, capsys
):
    model = tmp_path / "models" / "base.keras"

    def train():
        model.parent.mkdir(exist_ok=True)
        model.write_text("weights")
        return {"x": 1}

    def base(steps, work=train):
        return steps.run("base", "base", work, {"lr": 1}, [model], ["runs/*.json", "models/*"])

    steps = Steps(tmp_path)
    base(steps)
    steps.run("derived", "derived", lambda: {"y": 1}, {"lr": 1})
    (tmp_path / "models" / "derived.bin").write_text("made from the base")
    capsys.readouterr()
    again = Steps(tmp_path)
    base(again)
    assert again.redone == [] and (tmp_path / "runs" / "derived.json").exists()
    model.unlink()
    capsys.readouterr()
    assert base(Steps(tmp_path, report_only=True))["x"] == 1  # A report needs records only.
    redo = Steps(tmp_path)
    base(redo)
    assert redo.redone == ["base"] and model.exists()
    assert sorted(p.name for p in tmp_path.glob("*/*")) == ["base.json", "base.keras"]
    assert capsys.readouterr().out.splitlines()[:2] == [
        f"[base] base: {model} is missing, redoing the step",
        "[base] base: removing 2 file(s) made from its previous run "
        f"(runs/*.json, models/* in {tmp_path})",
    ]
    # A record of other settings is refused as before, and nothing is removed.
    (tmp_path / "runs" / "derived.json").write_text("{}")
    model.unlink()
    with pytest.raises(ValueError, match="was made with lr 1, not 2"):
        redo.run("base", "base", train, {"lr": 2}, [model], ["runs/*.json"])
    assert (tmp_path / "runs" / "derived.json").exists()


def test_study_directories_that_are_links_or_files_are_refused_as_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    add_study_options(parser, work_dir="study")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_text("")
    for flag in ("--output", "--work-dir"):
        other = ["--work-dir", "w"] if flag == "--output" else ["--output", "o"]
        with pytest.raises(OSError, match=f"^{flag}: Output link is a symbolic link; expected"):
            parser.parse_args([flag, "link", *other])
        with pytest.raises(OSError, match=f"^{flag}: Output file is a file; expected"):
            parser.parse_args([flag, "file", *other])
        assert getattr(parser.parse_args([flag, "real", *other]), flag[2:].replace("-", "_"))
    assert list((tmp_path / "real").iterdir()) == []


def test_study_options_and_command(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    add_study_options(parser, work_dir="lm_pruning")
    args = parser.parse_args(["--output", "o", "--summarize-only"])
    assert args.report_only and args.output == "o"
    assert args.work_dir == str(tmp_path / "headsize_tf" / "work" / "lm_pruning")
    assert "--summarize-only" not in parser.format_help()
    assert "--report-only" in parser.format_help()
    argv = ["--output", "o", "--report-only", "--steps", "5"]
    assert study_command("m", argv) == "python -m m --output o --steps 5"


# Every study main: --report-only on an output without records exits 2, one line, no run.
STUDIES = [
    ("compression_study", []),
    ("pruning_study", []),
    ("kv_sharing_study", ["--quick"]),
    ("kv_budget_study", ["--quick"]),
    ("kv_translation_study", []),
    ("lm_pruning_study", []),
    ("translation_pruning_study", []),
]
WORK_DIRS = ("kv_translation_study", "lm_pruning_study", "translation_pruning_study")


def _exit(module: str, argv: list[str], capsys) -> tuple[int, str]:
    """The exit status and the error output of `python -m headsize_tf.experiments.MODULE`."""
    main = importlib.import_module(f"headsize_tf.experiments.{module}").main
    with pytest.raises(SystemExit) as exited:
        run_main(lambda: main(argv), module)
    return exited.value.code, capsys.readouterr().err


@pytest.mark.parametrize("module,extra", STUDIES, ids=[s[0] for s in STUDIES])
def test_report_only_without_records_is_a_one_line_error(module, extra, tmp_path, capsys):
    out = tmp_path / "study"
    argv = ["--output", str(out), "--report-only", *extra]
    if module in WORK_DIRS:
        argv += ["--work-dir", str(tmp_path / "w")]
    code, err = _exit(module, argv, capsys)
    assert code == 2
    assert err.startswith(f"{module}: error: ") and err.count("\n") == 1 and str(out) in err
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("module,extra", STUDIES, ids=[s[0] for s in STUDIES])
def test_an_output_or_work_dir_that_is_a_link_is_a_one_line_error(module, extra, tmp_path, capsys):
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    flags = ["--output"] + (["--work-dir"] if module in WORK_DIRS else [])
    for flag in flags:
        other = ["--output", str(tmp_path / "out")] if flag == "--work-dir" else []
        code, err = _exit(module, [flag, str(link), *other, *extra], capsys)
        assert code == 2
        assert err == (
            f"{module}: error: {flag}: Output {link} is a symbolic link; expected a directory "
            "or a new path.\n"
        )
    assert list((tmp_path / "elsewhere").iterdir()) == [] and not (tmp_path / "out").exists()

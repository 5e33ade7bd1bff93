"""`experiments._steps.Steps`: a step's record is written once and reused while it matches."""

from __future__ import annotations

import json

from headsize_tf.experiments._steps import Steps


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


def test_a_changed_setting_redoes_the_step_and_numbering(tmp_path, capsys):
    steps = Steps(tmp_path, total=3)
    steps.announce("data")
    a = steps.run("a", "step a", lambda: {"x": 1}, settings={"lr": 1})
    steps.run("b", "step b", lambda: {"x": 2}, settings={"lr": 1})
    assert a["settings"] == {"lr": 1} and steps.redone == ["a", "b"]
    rerun = Steps(tmp_path, total=3)
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

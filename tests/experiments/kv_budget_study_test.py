"""The calibrated-budget study: its grid, its conversions' exact limit, a resumed run, the report."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from headsize_tf.experiments import kv_budget_study as study
from headsize_tf.keras3.modeling import CausalLM
from headsize_tf.keras3.reparam import calibration_stats


def test_the_grid_has_grouped_heads_only_where_whole_heads_meet_the_budget():
    grid = study.variants(study.Settings())
    assert len(grid) == 3 * 3 + 2  # Three latents per budget; grouped K/V at 1/8 only.
    assert {fraction for method, fraction in grid if method[0] == "grouped"} == {8}


def test_every_conversion_is_exact_where_the_budget_holds_the_full_rank():
    keras.utils.set_random_seed(0)
    lm = CausalLM(
        vocabulary_size=40,
        num_layers=2,
        hidden_dim=16,
        attention={"kind": "standard", "num_heads": 8},
        max_sequence_length=12,
    )
    ids = np.random.default_rng(0).integers(0, 40, (4, 12)).astype("int32")
    stats = calibration_stats(lm, ids)
    want = np.asarray(keras.ops.convert_to_numpy(lm(ids)))
    # 8 heads of 2: 32 cache values per token and layer; half is the latent's full rank (16),
    # and grouped K/V at 1/2 keeps 4 of 8 heads (not exact, but within the budget).
    for method in study.METHODS:
        model, report = study.convert(lm, method, 2, stats)
        got = np.asarray(keras.ops.convert_to_numpy(model(ids)))
        if method[0] == "latent":
            assert report["latent_per_layer"] == [16, 16]
            np.testing.assert_allclose(got, want, atol=1e-4)
        else:
            assert report["kv_heads_per_layer"] == [4, 4]


def _corpus(path, rng):
    # A repetitive toy language: windows of 17 ids below 32.
    for split, n in (("train", 64), ("valid", 8), ("test", 8)):
        starts = rng.integers(0, 32, (n, 1))
        np.save(path / f"lm_{split}.npy", ((starts + np.arange(17)) % 32).astype("int32"))


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_the_study_runs_resumes_and_reports(tmp_path, capsys):
    _corpus(tmp_path, np.random.default_rng(0))
    out = tmp_path / "out"
    summary = study.run_study(out, tmp_path, study.quick())
    assert len(summary["rows"]) == len(study.variants(study.quick())) == 8
    assert {p.name for p in out.iterdir()} >= {"README.md", "summary.json", "kv_budget.png"}
    assert (out / "models" / "calibration_8.npz").exists()
    capsys.readouterr()
    again = study.run_study(out, tmp_path, study.quick())  # Every step reused.
    assert "reusing" in capsys.readouterr().out and again["rows"] == summary["rows"]
    assert json.loads((out / "summary.json").read_text())["rows"] == summary["rows"]
    readme = (out / "README.md").read_text()
    assert readme.count("| 1/") == 8 and "## Verdict" in readme


def test_a_retrained_base_redoes_its_calibration_and_conversions(tmp_path, monkeypatch, capsys):
    from headsize_tf.experiments import kv_sharing_study as sharing
    from headsize_tf.experiments import lm_keras3

    calls = []

    def train_run(*args, model_path, **kwargs):
        calls.append("train base")
        model_path.parent.mkdir(parents=True, exist_ok=True)
        model_path.write_text("base")
        return {"device": "CPU"}

    def statistics(out, base, train, settings):  # Kept in models/ as the study's are.
        path = out / "models" / f"calibration_{settings.calibration_windows}.npz"
        if not path.exists():
            calls.append("calibrate")
            path.write_text("statistics")

    def convert(base, method, fraction, stats):
        calls.append(f"convert {study._slug(method, fraction)}")
        return None, {"latent_per_layer": [1]}

    measured = {"validation_perplexity": 10.0, "cache_bytes_per_token": 64, "params": 1}
    monkeypatch.setattr(sharing, "_arrays", lambda settings, corpus: {"train": None, "valid": None})
    monkeypatch.setattr(lm_keras3, "train_run", train_run)
    monkeypatch.setattr(sharing, "_load", lambda path: path)
    monkeypatch.setattr(sharing, "_measure", lambda lm, settings, valid: dict(measured))
    monkeypatch.setattr(study, "_statistics", statistics)
    monkeypatch.setattr(study, "convert", convert)
    monkeypatch.setattr(study, "plot", lambda summary, path: None)
    out = tmp_path / "out"
    study.run_study(out, tmp_path, study.quick(), command="python -m study --output o")
    everything = list(calls)
    assert everything[:2] == ["train base", "calibrate"] and len(everything) == 2 + 8
    assert "Command: `python -m study --output o`\n" in (out / "README.md").read_text()
    calls.clear()
    study.run_study(out, tmp_path, study.quick())
    assert calls == []
    (out / "models" / "base.keras").unlink()
    capsys.readouterr()
    study.run_study(out, tmp_path, study.quick())
    assert calls == everything
    assert "removing 9 file(s) made from its previous run" in capsys.readouterr().out

"""The SmolLM2 study's plan and report (its runs need the real model: results/kv_sharing_smollm2)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from headsize_tf.experiments import kv_sharing_smollm2 as study
from headsize_tf.experiments._entry import run_main


def test_the_plan_covers_the_grid_once():
    names = [run.name for run in study.plan()]
    assert len(names) == len(set(names))
    grid = [run for run in study.plan() if run.method == "latent" and run.fraction == 0.1875]
    # 4 pair strategies x weights / activations x uniform / energy, plus seeds and healing.
    assert {(r.strategy, r.calibrated, r.allocation) for r in grid} >= {
        (s, c, a)
        for s in ("2norm", "uniform", "high", "low")
        for c in (True, False)
        for a in ("uniform", "energy")
    }
    assert {r.seed for r in grid} == {0, 1, 2}
    assert any(r.heal_steps for r in grid)
    # Split against joint SVD on the same methods; grouped K/V between 33% and 100%.
    split = [r for r in grid if r.svd == "split"]
    joint = {dataclasses.replace(r, name="", svd="joint") for r in split}
    assert len(split) == 2 and joint <= {dataclasses.replace(r, name="") for r in grid}
    assert {r.fraction for r in study.plan() if r.method == "grouped"} == {1 / 3, 0.5}
    # Each conversion at its exact limit: every rotary frequency kept, the latent full.
    exact = [r for r in study.plan() if r.method == "exact"]
    assert {(r.strategy, r.calibrated) for r in exact} == {
        ("high", False),
        ("high", True),
        ("rotated", True),
        ("svd_values", True),
    }
    assert all(r.pairs == 32 for r in exact if r.strategy != "svd_values")


def test_logit_match_measures_the_largest_relative_difference_and_the_argmax():
    import keras

    inputs = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(11, 8)(inputs)
    model = keras.Model(inputs, keras.layers.Dense(7)(embedded))
    windows = np.random.default_rng(0).integers(0, 11, (6, 5)).astype("int32")
    assert study.logit_match(model, model, [windows, windows[:2]]) == {
        "max_relative_logit_diff": 0.0,
        "argmax_equal": 1.0,
        "positions": 32,
    }
    scaled = keras.Model(inputs, model(inputs) * 1.5)  # Same argmax, logits 1.5x.
    match = study.logit_match(model, scaled, [windows])
    assert match["max_relative_logit_diff"] == pytest.approx(0.5, rel=1e-5)
    assert match["argmax_equal"] == 1.0 and match["positions"] == 24
    negated = keras.Model(inputs, -model(inputs))
    assert study.logit_match(model, negated, [windows])["argmax_equal"] < 0.5


def test_the_report_tables_plots_and_sums_the_finished_runs(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for name, method, cache, ppl in (
        ("original", "original", 46080, 45.9),
        ("latent-18.75-2norm-act-energy", "latent", 8640, 316.3),
    ):
        record = {
            "run": {"name": name, "method": method, "calibrated": True, "heal_steps": 0},
            "cache_bytes_per_token": cache,
            "params": 1,
            "austen": {"perplexity": ppl, "top1_agreement": 1.0},
            "moby_dick": {"perplexity": ppl * 2, "top1_agreement": 1.0},
            "greedy_agreement": 1.0,
        }
        (runs / f"{name}.json").write_text(json.dumps(record))
    exact = {**record, "run": {"name": "exact-rotated-act", "method": "exact"}}
    exact["cache_bytes_per_token"] = 46080
    exact["details"] = {
        "exactness": {"max_relative_logit_diff": 3.2e-6, "argmax_equal": 1.0, "positions": 4096}
    }
    (runs / "exact-rotated-act.json").write_text(json.dumps(exact))
    table = study.report(tmp_path)
    assert "| exact-rotated-act | 3.2e-06 | 100.00% | 4,096 |" in table
    assert "| latent-18.75-2norm-act-energy | 0.1875 | 316.30 | 632.60 |" in table
    assert (tmp_path / "perplexity_vs_cache.png").stat().st_size > 1000
    assert len(json.loads((tmp_path / "summary.json").read_text())["runs"]) == 3
    with pytest.raises(ValueError, match="no finished run"):
        study.report(tmp_path / "empty")


@pytest.mark.parametrize("entry", ["model.keras", "name=", "name=/no/such/model.keras"])
def test_a_bad_model_file_is_one_line_and_exit_2(entry, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        run_main(
            lambda: study.main(["--output", str(tmp_path), "--model-file", entry]),
            "kv_sharing_smollm2",
        )
    assert exited.value.code == 2
    missing = "/no/such/model.keras is not a file; " if entry.startswith("name=/") else ""
    assert capsys.readouterr().err == (
        f"kv_sharing_smollm2: error: --model-file {entry}: {missing}expected NAME=PATH of a "
        "saved .keras model\n"
    )
    assert not (tmp_path / "runs").exists()

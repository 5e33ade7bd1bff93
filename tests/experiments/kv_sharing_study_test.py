"""The KV-sharing study: variants at equal cache, the rate sweep, resumption, the report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headsize_tf.experiments import kv_sharing_study as study
from tests.experiments.unreached import Reached


def test_variants_have_the_cache_fractions_they_claim():
    settings = study.Settings()
    rows = {(v["method"], v["size"]): v["fraction"] for v in study.variants(settings)}
    assert rows[("grouped_svd", 2)] == rows[("pruned", 8)] == rows[("latent", 64)] == 0.25
    assert rows[("grouped_mean", 1)] == rows[("latent", 32)] == 0.125
    assert rows[("collaborative", 16)] == pytest.approx((16 + 8 + 128) / 256)
    only = study.variants(study.Settings(methods=("latent",), fractions=(2,)))
    assert only == [{"method": "latent", "size": 128, "fraction": 0.5}]


def _corpus(path, rng):
    # A repetitive toy language: windows of 17 ids below 32, learnable in a few steps.
    for split, n in (("train", 64), ("valid", 8), ("test", 8)):
        starts = rng.integers(0, 32, (n, 1))
        np.save(path / f"lm_{split}.npy", ((starts + np.arange(17)) % 32).astype("int32"))


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_the_study_runs_resumes_and_reports(tmp_path):
    _corpus(tmp_path, np.random.default_rng(0))
    settings = study.Settings(
        layers=1,
        width=16,
        heads=4,
        sequence_length=16,
        batch_size=8,
        steps=12,
        vocab_size=32,
        seeds=(0, 1),
        fractions=(2,),
        methods=("grouped_svd", "pruned"),
        uptrain_learning_rates=(1e-3, 3e-3),
        uptrain_fraction=0.25,
        importance_windows=16,
    )
    out = tmp_path / "out"
    summary = study.run_study(out, tmp_path, settings)
    rows = {r["slug"]: r for r in summary["rows"]}
    assert sorted(rows) == ["grouped_svd_2", "pruned_2"]
    base = summary["base"]
    # Half the cache: 2 of 4 key/value heads, or 2 of 4 heads kept.
    assert rows["grouped_svd_2"]["cache_bytes_per_token"] == base["cache_bytes_per_token"] // 2
    assert rows["pruned_2"]["cache_bytes_per_token"] == base["cache_bytes_per_token"] // 2
    for row in rows.values():
        assert row["rate"] in (1e-3, 3e-3) and set(row["sweep"]) == {"0.001", "0.003"}
        assert row["sweep"][f"{row['rate']:g}"] == min(row["sweep"].values())
        assert np.isfinite(row["uptrained_test"]) and row["uptrained_std"] >= 0
    readme = (out / "README.md").read_text()
    assert "grouped K/V, per-group SVD" in readme and (out / "kv_sharing.png").stat().st_size
    # 1 base + 2 conversions + 3 models x (2 swept rates + 1 more seed) runs.
    runs = sorted(p.name for p in (out / "runs").glob("*.json"))
    assert len(runs) == 1 + 2 + 3 * 3, runs
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    again = study.run_study(out, tmp_path, settings)  # Every step reused.
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")} == stamps
    assert json.dumps(again["rows"], sort_keys=True) == json.dumps(summary["rows"], sort_keys=True)


def test_eval_windows_cut_the_held_out_splits_and_only_then_enter_the_settings(tmp_path):
    _corpus(tmp_path, np.random.default_rng(0))
    whole = study.Settings(sequence_length=16, vocab_size=32)
    # Records of whole-split runs (results/kv_sharing) keep matching their settings.
    assert "eval_windows" not in whole.base_settings()
    arrays = study._arrays(whole, tmp_path)
    assert [len(arrays[s]) for s in ("train", "valid", "test")] == [64, 8, 8]
    cut = study.Settings(sequence_length=16, vocab_size=32, eval_windows=3)
    assert cut.base_settings()["eval_windows"] == cut.uptrain_settings()["eval_windows"] == 3
    arrays = study._arrays(cut, tmp_path)
    assert [len(arrays[s]) for s in ("train", "valid", "test")] == [64, 3, 3]
    np.testing.assert_array_equal(arrays["valid"], np.load(tmp_path / "lm_valid.npy")[:3])
    assert study._preset(cut).eval_windows == 3


class _Converted:
    """A converted model as the stubbed conversion returns it: `save` writes a file."""

    def save(self, path):
        path.write_text("converted")


def _stub_work(monkeypatch, calls):
    """Replaces the study's training, conversion and measurement by stubs that log to `calls`."""
    from headsize_tf.experiments import lm_keras3

    def train_run(*args, model_path, **kwargs):
        calls.append("train base")
        model_path.parent.mkdir(parents=True, exist_ok=True)
        model_path.write_text("base")
        return {"test_perplexity": 12.0, "device": "CPU"}

    def convert_variant(base, variant, settings, train):
        calls.append(f"convert {variant['method']}_{variant['size']}")
        return _Converted()

    def uptrain(model_path, settings, arrays, seed, rate):
        calls.append(f"uptrain {model_path.stem} {rate:g} s{seed}")
        return {"validation_perplexity": 10 + rate, "test_perplexity": 11.0, "seed": seed}

    measured = {"validation_perplexity": 10.0, "cache_bytes_per_token": 64, "params": 1}
    monkeypatch.setattr(study, "_arrays", lambda settings, corpus: {"train": None, "valid": None})
    monkeypatch.setattr(lm_keras3, "train_run", train_run)
    monkeypatch.setattr(study, "_load", lambda path: path)
    monkeypatch.setattr(study, "_measure", lambda lm, settings, valid: dict(measured))
    monkeypatch.setattr(study, "convert_variant", convert_variant)
    monkeypatch.setattr(study, "uptrain", uptrain)
    monkeypatch.setattr(study, "plot", lambda summary, path: None)


SMALL = study.Settings(
    layers=1,
    width=16,
    heads=4,
    fractions=(2,),
    methods=("grouped_svd", "latent"),
    seeds=(0, 1),
    uptrain_learning_rates=(1e-3, 3e-3),
)


def test_a_retrained_base_redoes_every_record_made_from_the_previous_one(
    tmp_path, monkeypatch, capsys
):
    calls = []
    _stub_work(monkeypatch, calls)
    out = tmp_path / "out"
    study.run_study(out, tmp_path, SMALL)
    everything = list(calls)
    # The base, its control's sweep (2 rates) and second seed, and the same per conversion.
    assert len(everything) == 1 + 3 + 2 * (1 + 3) and everything[0] == "train base"
    calls.clear()
    study.run_study(out, tmp_path, SMALL)
    assert calls == []  # Every step reused.
    capsys.readouterr()
    (out / "models" / "base.keras").unlink()  # The base is trained again ...
    study.run_study(out, tmp_path, SMALL)
    assert calls == everything  # ... and nothing made from the previous one is reused.
    printed = capsys.readouterr().out.splitlines()
    removed = [line for line in printed if "made from its previous run" in line]
    # The 11 other records and both converted models.
    assert removed == [
        "[base] train the multi-head LM: removing 13 file(s) made from its previous run "
        f"(runs/*.json, models/*.keras in {out})"
    ]
    calls.clear()
    (out / "models" / "latent_16.keras").unlink()  # One conversion is redone, with its runs.
    study.run_study(out, tmp_path, SMALL)
    assert calls == [
        "convert latent_16",
        "uptrain latent_16 0.001 s0",
        "uptrain latent_16 0.003 s0",
        "uptrain latent_16 0.001 s1",
    ]


def test_the_report_shows_the_command_it_is_given(tmp_path, monkeypatch):
    _stub_work(monkeypatch, [])
    out = tmp_path / "out"
    command = "python -m headsize_tf.experiments.kv_sharing_study --output elsewhere"
    study.run_study(out, tmp_path, SMALL, command=command)
    assert f"Command: `{command}`\n" in (out / "README.md").read_text()
    assert json.loads((out / "summary.json").read_text())["command"] == command


def test_main_reports_the_arguments_it_parsed(tmp_path, monkeypatch):
    got = {}

    def run(output, corpus_dir, settings, report_only, command):
        got.update(output=output, report_only=report_only, command=command)
        raise Reached

    monkeypatch.setattr(study, "run_study", run)
    out = str(tmp_path / "out")
    with pytest.raises(Reached):
        study.main(["--output", out, "--quick", "--report-only", "--data-dir", str(tmp_path)])
    assert got == {
        "output": out,
        "report_only": True,
        "command": "python -m headsize_tf.experiments.kv_sharing_study --output "
        f"{out} --quick --data-dir {tmp_path}",
    }

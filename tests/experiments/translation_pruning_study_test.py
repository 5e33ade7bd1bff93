"""The translation pruning study's summary: mean ± std over importance seeds, the most
sensitive kind per seed and on average, computed from the run files alone."""

import json
import pathlib

import numpy as np
import pytest

from headsize_tf.experiments import translation_pruning_study as study

FRACTIONS = [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75]


def _write(out: pathlib.Path, name: str, record: dict) -> None:
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "runs" / f"{name}.json").write_text(json.dumps(record))


def test_summary_over_importance_seeds(tmp_path):
    _write(tmp_path, "train", {"steps": 3000, "dev_perplexity": 26.0, "train_pairs": 100})
    # Final BLEU per (kind, seed): encoder_decoder is the lowest in seeds 0 and 1 only.
    final = {
        "encoder_self": [3.0, 4.0, 1.5],
        "encoder_decoder": [1.0, 2.0, 5.0],
        "decoder_self": [6.0, 7.0, 8.0],
    }
    for kind, bleus in final.items():
        for seed, last in enumerate(bleus):
            bleu = np.linspace(20.0, last, len(FRACTIONS))
            curve = [
                {"fraction": f, "perplexity": 20.0 + 10 * i + seed, "bleu": b}
                for i, (f, b) in enumerate(zip(FRACTIONS, bleu, strict=True))
            ]
            _write(
                tmp_path,
                f"prune_{kind}_seed{seed}",
                {"curve": curve, "decoding_speedup": 1.0 + seed / 10},
            )
    summary = study.summarize(tmp_path, "cmd")
    assert summary["seeds"] == [0, 1, 2]
    assert summary["worst_at_75_by_seed"] == {
        0: "encoder_decoder",
        1: "encoder_decoder",
        2: "encoder_self",
    }
    # Mean final BLEU: encoder_decoder 2.67 < encoder_self 2.83 < decoder_self 7.
    means = {k: np.mean(v) for k, v in final.items()}
    assert summary["most_sensitive_at_75"] == min(means, key=means.get) == "encoder_decoder"
    for kind, bleus in final.items():
        assert summary["mean"][kind]["bleu"][-1] == np.mean(bleus)
        assert summary["std"][kind]["bleu"][-1] == np.std(bleus)
        assert summary["mean"][kind]["perplexity"][-1] == 20.0 + 60 + 1
    # Linear BLEU curves: the mean over levels is the mean of the two ends.
    areas = {k: np.mean([(20.0 + v) / 2 for v in bleus]) for k, bleus in final.items()}
    for kind, value in areas.items():
        assert np.isclose(summary["mean_bleu_over_levels"][kind], value)
    assert summary["most_sensitive_overall"] == min(areas, key=areas.get)
    readme = (tmp_path / "README.md").read_text()
    assert f"| encoder_decoder | 3 | {np.mean(final['encoder_decoder']):.2f} ± " in readme
    assert "| 2 of 3 |" in readme and "| 1 of 3 |" in readme
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def _curve(last_bleu: float) -> list[dict]:
    bleu = np.linspace(20.0, last_bleu, len(FRACTIONS))
    return [
        {"fraction": f, "perplexity": 20.0 + i, "bleu": b}
        for i, (f, b) in enumerate(zip(FRACTIONS, bleu, strict=True))
    ]


def test_a_partial_summary_says_so_and_declares_no_verdict(tmp_path):
    _write(tmp_path, "train", {"steps": 4, "dev_perplexity": 26.0, "train_pairs": 100})
    _write(tmp_path, "prune_encoder_self_seed0", {"curve": _curve(3.0), "decoding_speedup": 1.0})
    summary = study.summarize(tmp_path, "cmd")
    readme = (tmp_path / "README.md").read_text()
    assert "**Partial results**" in readme
    assert "prune_encoder_decoder_seed0, prune_decoder_self_seed0" in readme
    assert "Most sensitive over" not in readme and "No verdict" in readme
    assert summary["most_sensitive_overall"] is None and summary["most_sensitive_at_75"] is None
    assert summary["missing_runs"] == ["prune_encoder_decoder_seed0", "prune_decoder_self_seed0"]


def test_report_only_with_other_steps_is_refused(tmp_path):
    _write(tmp_path, "train", {"steps": 4, "dev_perplexity": 26.0, "train_pairs": 100})
    argv = ["--output", str(tmp_path), "--work-dir", str(tmp_path / "w"), "--report-only"]
    with pytest.raises(ValueError, match="trained 4 steps, not --steps 8"):
        study.main([*argv, "--steps", "8"])
    assert not (tmp_path / "README.md").exists()


@pytest.mark.parametrize(
    "flags,named",
    [(["--steps", "0"], "--steps"), (["--importance-seeds", "-1"], "--importance-seeds")],
)
def test_bad_numbers_are_refused_after_parsing(flags, named, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        study.main(["--output", str(tmp_path / "out"), "--report-only", *flags])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err

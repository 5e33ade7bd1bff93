"""`headsize-tf convert --keras-hub-preset`: a tiny local GPT-2 preset converted to grouped K/V,
measured on held-out text, uptrained, written with its tokenizer and reloaded; bad inputs."""

from __future__ import annotations

import json
import os
import pathlib

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from headsize_tf import cli  # noqa: E402
from headsize_tf.core.conversion import ConversionTarget  # noqa: E402
from headsize_tf.keras3.hub import convert_hub_model, load_hub_preset  # noqa: E402
from tests.keras3.hub.keras_hub_util import build_presets, lm_lines  # noqa: E402

TEXTS = ["the cat", "a dog sat on a mat"]
FAST = ["--decode-tokens", "4"]


@pytest.fixture(scope="module")
def presets(tmp_path_factory) -> dict[str, pathlib.Path]:
    return build_presets(tmp_path_factory.mktemp("presets"))


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("text") / "lines.txt"
    path.write_text("\n".join(lm_lines(200)) + "\n")
    return path


def logits(hub, texts=TEXTS) -> np.ndarray:
    """The LM's logits of `texts` packed by its keras-hub preprocessor."""
    x, _, _ = hub.preprocessor(texts)
    inputs = {k: np.asarray(v).astype("int32") for k, v in x.items()}
    return np.asarray(keras.ops.convert_to_numpy(hub.backbone(inputs)), np.float64)


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_grouped_gpt2_is_measured_uptrained_and_reloads_with_its_tokenizer(
    presets, lines, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = ["convert", "--keras-hub-preset", str(presets["gpt2"]), "--to", "grouped"]
    argv += ["--kv-heads", "1", "--output", str(out), "--data-file", str(lines)]
    argv += ["--heal-steps", "2", "--heal-windows", "4"]  # Healed, then uptrained.
    assert cli.main([*argv, "--uptrain-steps", "2", "--batch-size", "4", *FAST]) == 0
    assert {"report.json", "conversion.png"} <= set(os.listdir(out))
    report = json.loads((out / "report.json").read_text())
    assert set(report["perplexity"]) == {"original", "converted", "uptrained"}
    assert 1.0 < report["perplexity"]["original"] < 200.0  # 55 letters: about uniform
    assert report["kv_cache_fraction"] == 0.25  # 1 of 4 key/value heads per layer
    assert report["target"]["num_kv_heads"] == 1 and report["uptrain_steps"] == 2
    assert report["text"]["held_out_windows"] > 0 and report["text"]["window"] == 33
    assert "GPT2Tokenizer" in report["text"]["vocab_file"]
    assert "uptrained" in capsys.readouterr().out
    assert [layer["layer"] for layer in report["heal"]["layers"]] == [0, 1]
    again = load_hub_preset(out)
    assert again.architecture == "gpt2" and "converted to grouped" in again.source
    assert again.backbone.attention_spec.num_kv_heads == 1
    text = again.generate("the cat", max_new_tokens=3, end_token_id=-1)
    assert isinstance(text, str) and text.startswith("the cat")


def test_converted_logits_equal_the_library_conversion_and_at_full_heads_the_original(
    presets, lines, tmp_path
):
    original = load_hub_preset(presets["gpt2"])
    for heads, atol in (("1", None), ("4", 1e-5)):
        out = tmp_path / heads
        argv = ["convert", "--keras-hub-preset", str(presets["gpt2"]), "--to", "grouped"]
        argv += ["--kv-heads", heads, "--output", str(out)]
        if atol:
            argv += ["--data-file", str(lines)]
        assert cli.main([*argv, *FAST]) == 0
        again = load_hub_preset(out)
        library, _ = convert_hub_model(original, ConversionTarget("grouped", int(heads)))
        np.testing.assert_allclose(logits(again), logits(library), atol=1e-6)
        report = json.loads((out / "report.json").read_text())
        if atol:  # G = heads is exact: the original's logits and perplexity.
            np.testing.assert_allclose(logits(again), logits(original), atol=atol)
            ppl = report["perplexity"]
            assert ppl["converted"] == pytest.approx(ppl["original"], rel=1e-5)
        else:  # No text: no perplexity.
            assert "perplexity" not in report and "text" not in report


def test_gpt2_at_a_cache_budget_is_a_calibrated_latent_that_reloads(
    presets, lines, tmp_path, monkeypatch
):
    from headsize_tf.keras3.hub import hub_lm_text
    from headsize_tf.keras3.reparam import KVPlan, calibration_stats, compress_kv

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "latent"
    argv = ["convert", "--keras-hub-preset", str(presets["gpt2"]), "--to", "latent"]
    argv += ["--cache-fraction", "0.25", "--allocation", "energy", "--calibration-windows", "4"]
    assert cli.main([*argv, "--data-file", str(lines), "--output", str(out), *FAST]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["target"]["method"] == "no RoPE, calibrated joint SVD, energy"
    assert report["kv_cache_fraction"] == pytest.approx(0.25, abs=0.01)
    again = load_hub_preset(out)
    assert "converted to a KV cache of 0.25 (latent)" in again.source
    # The library's conversion with statistics of the same windows: the same model.
    original = load_hub_preset(presets["gpt2"])
    text = hub_lm_text(original, 33, data_file=str(lines))
    stats = calibration_stats(original.backbone, text.train[:4, :-1])
    library, _ = compress_kv(original.backbone, KVPlan(0.25, None, allocation="energy"), stats)
    assert report["latent_per_layer"] == [layer.kv_latent_dim for layer in library.attention_layers]
    x, _, _ = original.preprocessor(TEXTS)
    inputs = {k: np.asarray(v).astype("int32") for k, v in x.items()}
    expected = np.asarray(keras.ops.convert_to_numpy(library(inputs)), np.float64)
    np.testing.assert_allclose(logits(again), expected, atol=1e-5)


@pytest.mark.parametrize("case", ["bert", "vocab", "not_a_preset", "tf_keras"])
def test_bad_hub_convert_input_is_one_line_and_writes_nothing(
    case, presets, lines, tmp_path, capsys
):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    gpt2 = ["--keras-hub-preset", str(presets["gpt2"])]
    extra, fragment = {
        "bert": (
            ["--keras-hub-preset", str(presets["bert"])],
            "convert does not apply to bert (an encoder); convert takes gpt2",
        ),
        "vocab": (
            [*gpt2, "--data-file", str(lines), "--vocab", str(lines)],
            "a keras-hub model tokenises the text with its own tokenizer: drop --vocab",
        ),
        "not_a_preset": (
            ["--keras-hub-preset", str(tmp_path / "empty")],
            "is not a keras-hub preset directory",
        ),
        "tf_keras": ([*gpt2, "--framework", "tf_keras"], "drop --framework tf_keras"),
    }[case]
    before = sorted(os.listdir(tmp_path))
    argv = ["convert", *extra, "--to", "grouped", "--kv-heads", "1", "--output", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines_ = [line for line in err.splitlines() if line.strip()]
    assert len(lines_) == 1 and "Traceback" not in err, err
    assert lines_[0].startswith("headsize-tf convert: error:") and fragment in lines_[0], lines_[0]
    assert sorted(os.listdir(tmp_path)) == before

"""`convert_lm_file`: a saved Keras 3 CausalLM converted, measured on text, uptrained, saved.

No tf_keras on this path; `no_tf_keras_test.py` runs the CLI end to end.
"""

from __future__ import annotations

import json
import pathlib

import keras
import numpy as np
import pytest

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.kv_cache import kv_cache_bytes_per_token
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.data.lm_text import load_lm_text
from headsize_tf.keras3.modeling import CausalLM
from headsize_tf.keras3.reparam.lm_file import convert_lm_file

LETTERS = list("abcdefghij")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + LETTERS + [f"##{c}" for c in LETTERS]
FAST = dict(eval_windows=16, decode_tokens=4, decode_batch=2, decode_repeats=1)


def write_lm_files(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """A tiny CausalLM (.keras: 2 layers of 4 heads of 4, 16 positions), text and a vocab."""
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(LETTERS, rng.integers(1, 5))) for _ in range(2400)]
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
    paths = {"model": root / "lm.keras", "text": root / "text.txt", "vocab": root / "vocab.txt"}
    paths["text"].write_text("\n".join(lines) + "\n")
    paths["vocab"].write_text("\n".join(VOCAB) + "\n")
    keras.utils.set_random_seed(0)
    lm = CausalLM(
        vocabulary_size=32,
        num_layers=2,
        hidden_dim=16,
        attention={"kind": "standard", "num_heads": 4},
        max_sequence_length=16,
    )
    lm(np.zeros([1, 4], "int32"))
    lm.save(paths["model"])
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_lm_files(tmp_path_factory.mktemp("lm_file"))


def test_full_rank_latent_is_exact_and_the_directory_reloads(files, tmp_path):
    text = load_lm_text(17, data_file=files["text"], vocab_file=files["vocab"])
    assert text.train.shape[1] == 17 and len(text.held_out) >= 16
    assert 0.1 < len(text.held_out) / (len(text.train) + len(text.held_out)) < 0.3
    report = convert_lm_file(
        files["model"], ConversionTarget("latent", 16), tmp_path / "out", text=text, **FAST
    )
    ppl = report["perplexity"]
    assert ppl["converted"] == pytest.approx(ppl["original"], rel=1e-5)
    spec = AttentionSpec("latent", 4, kv_latent_dim=16)
    assert (
        report["kv_cache_bytes_per_token"]
        == {
            "original": kv_cache_bytes_per_token(AttentionSpec("standard", 4), 16, 2),
            "converted": kv_cache_bytes_per_token(spec, 16, 2),
        }
        == {"original": 256, "converted": 128}
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "conversion.png",
        "model.keras",
        "report.json",
    ]
    assert (
        json.loads((tmp_path / "out" / "report.json").read_text())["target"]["kv_latent_dim"] == 16
    )
    source = keras.saving.load_model(files["model"])
    converted = keras.saving.load_model(tmp_path / "out" / "model.keras")
    assert converted.attention_spec.kind == "latent" and not converted.compiled
    ids = text.held_out[:2, :-1]
    diff = np.abs(np.asarray(converted(ids)) - np.asarray(source(ids))).max()
    assert diff < 1e-5
    np.testing.assert_array_equal(converted.generate(ids[:, :4], 6), source.generate(ids[:, :4], 6))


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_uptraining_lowers_the_held_out_perplexity(files, tmp_path):
    text = load_lm_text(17, data_file=files["text"], vocab_file=files["vocab"])
    report = convert_lm_file(
        files["model"],
        ConversionTarget("grouped", 1, "mean"),
        tmp_path / "mqa",
        text=text,
        uptrain_steps=30,
        learning_rate=3e-3,
        batch_size=8,
        **FAST,
    )
    ppl = report["perplexity"]
    # An untrained model over a 25-id vocabulary: about 32 (uniform); uptraining learns the text.
    assert ppl["uptrained"] < 0.9 * ppl["converted"]
    assert report["kv_cache_fraction"] == 0.25  # 1 of 4 key/value heads
    assert report["uptrain"]["train_windows"] == len(text.train)


def test_without_text_and_bad_inputs(files, tmp_path):
    report = convert_lm_file(files["model"], ConversionTarget("grouped", 2), tmp_path / "g", **FAST)
    assert "perplexity" not in report and report["kv_cache_bytes_per_token"]["converted"] == 128
    with pytest.raises(ValueError, match=r"uptrain_steps= needs text"):
        convert_lm_file(
            files["model"], ConversionTarget("grouped", 2), tmp_path / "x", uptrain_steps=2
        )
    big = tmp_path / "big_vocab.txt"
    big.write_text("\n".join(VOCAB + [f"w{i}" for i in range(40)]))
    text = load_lm_text(17, data_file=files["text"], vocab_file=big)
    object.__setattr__(text, "held_out", text.held_out + 30)  # ids past the model's 32
    with pytest.raises(ValueError, match=r"the model's vocabulary has 32 ids"):
        convert_lm_file(files["model"], ConversionTarget("grouped", 2), tmp_path / "x", text=text)
    with pytest.raises(ValueError, match=r"is not a \.keras file"):
        convert_lm_file(files["text"], ConversionTarget("grouped", 2), tmp_path / "x")
    with pytest.raises(ValueError, match=r"fewer than 17 tokens"):
        short = tmp_path / "short.txt"
        short.write_text("a b\n")
        load_lm_text(17, data_file=short, vocab_file=files["vocab"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big_vocab.txt", "g", "short.txt"]


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_an_interrupted_uptraining_resumes_where_its_last_checkpoint_was(files, tmp_path):
    text = load_lm_text(17, data_file=files["text"], vocab_file=files["vocab"])
    options = dict(text=text, uptrain_steps=20, learning_rate=3e-3, batch_size=8, **FAST)
    target = ConversionTarget("grouped", 1, "mean")
    state = tmp_path / "state"
    whole = convert_lm_file(files["model"], target, tmp_path / "whole", **options)
    # The same run with a state directory, interrupted after its 10th step's checkpoint.
    calls = []
    original_save = convert_lm_file.__globals__["lm_training"].save_training_state

    def save_then_stop(lm, path, meta):
        original_save(lm, path, meta)
        calls.append(meta["step"])
        if meta["step"] == 10:
            raise KeyboardInterrupt

    module = convert_lm_file.__globals__["lm_training"]
    module.save_training_state = save_then_stop
    try:
        with pytest.raises(KeyboardInterrupt):
            convert_lm_file(
                files["model"], target, tmp_path / "run", state_dir=state, state={"a": 1}, **options
            )
    finally:
        module.save_training_state = original_save
    assert calls == [2, 4, 6, 8, 10] and not (tmp_path / "run").exists()
    assert sorted(p.name for p in state.iterdir()) == [
        "converted.json",
        "converted.keras",
        "state.json",
        "uptrain.npz",
    ]
    resumed = convert_lm_file(
        files["model"], target, tmp_path / "run", state_dir=state, state={"a": 1}, **options
    )
    curve = resumed["uptrain"]["curve"]
    assert [p["step"] for p in curve] == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert resumed["uptrain"]["tokens"] == 20 * 8 * 16
    # Uptraining resumed from step 10 ends where the uninterrupted run ended.
    assert resumed["perplexity"]["uptrained"] == pytest.approx(
        whole["perplexity"]["uptrained"], rel=2e-3
    )
    with pytest.raises(ValueError, match="belongs to another conversion"):
        convert_lm_file(
            files["model"], target, tmp_path / "x", state_dir=state, state={"a": 2}, **options
        )


def test_a_model_file_at_a_cache_budget_is_calibrated_healed_and_saved(
    files, tmp_path, monkeypatch, capsys
):
    from headsize_tf import cli
    from headsize_tf.keras3.lm_training import windows_perplexity

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    base = ["convert", "--model-file", str(files["model"]), "--data-file", str(files["text"])]
    base += ["--vocab-file", str(files["vocab"]), "--eval-windows", "8", "--decode-tokens", "2"]
    budget = ["--to", "latent", "--cache-fraction", "0.25", "--calibration-windows", "8"]
    out = tmp_path / "latent"
    argv = [*base, *budget, "--heal-steps", "5", "--heal-windows", "8", "--output", str(out)]
    assert cli.main(argv) == 0
    assert "measuring calibration statistics on 8 windows" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    # A quarter of 2 x 16 keys + values per token and layer: an 8-wide latent, no rotary keys.
    assert report["target"]["method"] == "no RoPE, calibrated joint SVD, uniform"
    assert report["latent_per_layer"] == [8, 8] and report["kv_cache_fraction"] == 0.25
    assert "the first 8 training windows of 16 tokens" in report["calibration"]["source"]
    for layer in report["heal"]["layers"]:  # Distillation lowers each layer's output error.
        assert layer["relative_error_after"] < layer["relative_error_before"]
    text = load_lm_text(17, data_file=files["text"], vocab_file=files["vocab"])
    saved = keras.saving.load_model(out / "model.keras")
    assert [layer.kv_latent_dim for layer in saved.attention_layers] == [8, 8]
    # The saved model is the one measured (healed): its held-out perplexity is the report's.
    measured = windows_perplexity(saved, text.held_out[:8])
    assert measured == pytest.approx(report["perplexity"]["converted"], rel=1e-4)
    # A second conversion on the same model and windows reads the statistics back; grouped
    # K/V re-bases keys and values by their SVD (no RoPE to keep) where pooling costs most.
    out = tmp_path / "grouped"
    grouped = ["--to", "grouped", "--cache-fraction", "0.5", "--calibration-windows", "8"]
    assert cli.main([*base, *grouped, "--output", str(out)]) == 0
    assert "(cached)" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["kv_cache_fraction"] == 0.5 and sum(report["kv_heads_per_layer"]) == 4
    assert report["target"]["method"].startswith("keys and values by the SVD of their activations")

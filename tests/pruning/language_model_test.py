"""Pruning the heads of a causal LM trained by `headsize-tf train` (issue 14, item 3)."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf import cli
from headsize_tf.modeling.decoding import greedy_decode
from headsize_tf.pruning import language_model as plm
from headsize_tf.pruning.remove import set_head_mask
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_LM = str(ROOT / "official_configs" / "headsize_lm_austen_tiny.yaml")
SHORT = (
    "trainer.train_steps=30,trainer.validation_steps=1,trainer.steps_per_loop=15,"
    "trainer.summary_interval=15,trainer.checkpoint_interval=30,trainer.validation_interval=30,"
    "task.train_data.global_batch_size=8"
)


@pytest.fixture(scope="module")
def trained_lm(austen_data_dir, tmp_path_factory):
    """A tiny standard-attention LM (2 layers of 4 heads), trained 30 steps on Austen."""
    model_dir = str(tmp_path_factory.mktemp("lm") / "model")
    train.run(
        "headsize_lm/language_modeling", model_dir, [TINY_LM], SHORT, data_dir=str(austen_data_dir)
    )
    return model_dir


def test_removal_equals_masking_and_decoding_follows_the_new_heads(trained_lm):
    _, lm = train.load_trained_model(trained_lm)
    mask = np.ones([2, 4], np.float32)
    mask[0, [1, 3]] = 0
    mask[1, 2] = 0
    pruned = plm.remove_lm_heads(lm, mask)
    assert [a.num_heads for a in pruned.attention_layers] == [2, 3]
    assert [a.head_size for a in pruned.attention_layers] == [16, 16]  # width 64 / 4 heads
    ids = np.random.default_rng(0).integers(5, 4096, size=(3, 20)).astype(np.int32)
    set_head_mask(lm, mask)
    masked = lm(ids).numpy()
    np.testing.assert_allclose(pruned(ids).numpy(), masked, atol=1e-5)
    # Each removed head held 4 * 64 * 16 kernel weights and 3 * 16 biases.
    assert lm.count_params() - pruned.count_params() == 3 * (4 * 64 * 16 + 3 * 16)
    # The decoding cache follows the new head counts: cached == uncached.
    prompt = ids[:, :5]
    cached = greedy_decode(pruned, prompt, 8).numpy()
    np.testing.assert_array_equal(cached, greedy_decode(pruned, prompt, 8, use_cache=False))
    with pytest.raises(ValueError, match="Layer 1 would lose every head"):
        plm.remove_lm_heads(lm, np.array([[1, 1, 1, 1], [0, 0, 0, 0]], np.float32))


def test_cli_prunes_a_model_dir_into_a_model_dir(trained_lm, tmp_path, capsys):
    out = tmp_path / "pruned"
    argv = [
        "prune",
        "--model_dir",
        trained_lm,
        "--target-fraction",
        "0.25",
        "--step",
        "0.125",
        "--output",
        str(out),
    ]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / plm.REPORT_FILE).read_text())
    assert [c["fraction"] for c in report["curve"]] == [0.0, 0.125, 0.25]
    assert report["heads_per_layer"] == {
        "original": [4, 4],
        "pruned": report["curve"][-1]["heads_per_layer"],
    }
    assert sum(report["heads_per_layer"]["pruned"]) == 6
    assert report["perplexity"]["pruned"] == pytest.approx(report["perplexity"]["masked"], 1e-4)
    assert report["perplexity"]["masked"] == pytest.approx(report["curve"][-1]["perplexity"], 1e-4)
    assert report["decoding_tokens_per_second"]["pruned"] > 0
    assert f"{report['decoding_speedup']:.2f}x" in printed
    assert (out / "importance.png").stat().st_size > 5_000
    assert (out / "curve.png").stat().st_size > 5_000
    # The output is an ordinary model_dir: it reloads, exports and prunes again.
    params, lm = train.load_trained_model(str(out))
    assert list(params.task.model.attention.num_heads) == report["heads_per_layer"]["pruned"]
    assert lm.count_params() == report["params"]["pruned"]
    assert (
        cli.main(
            [
                "export",
                "--model_dir",
                str(out),
                "--task",
                "lm",
                "--output",
                str(tmp_path / "export"),
            ]
        )
        == 0
    )
    loaded = tf.saved_model.load(str(tmp_path / "export" / "1"))
    served = loaded.signatures["serving_default"](text=tf.constant(["It is a truth."]))
    assert np.isfinite(served["log_likelihood"].numpy()).all()
    again = [
        "prune",
        "--model_dir",
        str(out),
        "--target-fraction",
        "0.25",
        "--step",
        "0.25",
        "--output",
        str(tmp_path / "again"),
    ]
    assert cli.main(again) == 0
    report2 = json.loads((tmp_path / "again" / plm.REPORT_FILE).read_text())
    assert report2["heads_per_layer"]["original"] == report["heads_per_layer"]["pruned"]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--model_dir", "{nope}"], "is not a `headsize-tf train` model_dir"),
        (["--model_dir", "{lm}", "--tfds", "glue/sst2"], "drop --framework keras3 and the data"),
        (["--model_dir", "{lm}", "--min-heads-per-layer", "0"], "min_heads_per_layer must be"),
    ],
)
def test_bad_model_dir_input_is_one_line(argv, fragment, trained_lm, tmp_path, capsys):
    argv = [a.format(nope=str(tmp_path / "nope"), lm=trained_lm) for a in argv]
    assert cli.main(["prune", *argv, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "attention",
    [
        {"kind": "fixed_head", "num_heads": 4, "head_size": 8},
        {"kind": "collaborative", "num_heads": 4, "shared_key_dim": 16},
    ],
)
def test_fixed_and_collaborative_heads_remove_too(attention):
    from headsize_tf.modeling.causal_lm import HeadsizeCausalLM

    lm = HeadsizeCausalLM(
        vocab_size=50, hidden_size=32, num_layers=2, attention=attention, max_sequence_length=16
    )
    ids = np.arange(20).reshape(2, 10) % 50
    lm(ids)
    mask = np.ones([2, 4], np.float32)
    mask[0, 1] = mask[1, 0] = mask[1, 2] = 0
    pruned = plm.remove_lm_heads(lm, mask)
    assert pruned.get_config()["attention"]["kind"] == attention["kind"]
    assert pruned.get_config()["attention"]["num_heads"] == [3, 2]
    set_head_mask(lm, mask)
    np.testing.assert_allclose(pruned(ids).numpy(), lm(ids).numpy(), atol=1e-5)

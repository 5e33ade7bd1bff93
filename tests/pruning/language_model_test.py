"""Pruning the heads of a causal LM trained by `headsize-tf train`."""

import json
import pathlib
import shutil

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
# An eager training loop: a few steps of a tiny model run in less time than tracing the
# loop's graph takes; the tests read the run's checkpoint and config, not its loop.
EAGER = "trainer.train_tf_function=false,trainer.train_tf_while_loop=false"
# Windows of 32 tokens (and 32 positions): `prune --model_dir` reads every window of the
# model_dir's data (up to 256 of each split) and times decoding into the positions after a
# 16-token prompt, so few, short windows keep the prune runs small.
LENGTH = 32
SHORT = (
    f"{EAGER},trainer.train_steps=4,trainer.validation_steps=1,trainer.steps_per_loop=4,"
    "trainer.summary_interval=4,trainer.checkpoint_interval=4,trainer.validation_interval=4,"
    "task.train_data.global_batch_size=8,task.validation_data.global_batch_size=8,"
    f"task.train_data.seq_length={LENGTH},task.validation_data.seq_length={LENGTH},"
    f"task.model.max_sequence_length={LENGTH}"
)


def _short_windows(source: pathlib.Path, target: pathlib.Path, windows: int) -> None:
    """The first `windows` windows of an Austen LM file, cut to `LENGTH + 1` tokens."""
    spec = {"input_ids": tf.io.FixedLenFeature([129], tf.int64)}
    with tf.io.TFRecordWriter(str(target)) as writer:
        for record in tf.data.TFRecordDataset(str(source)).take(windows):
            ids = tf.io.parse_single_example(record, spec)["input_ids"].numpy()[: LENGTH + 1]
            feature = tf.train.Feature(int64_list=tf.train.Int64List(value=ids))
            example = tf.train.Example(features=tf.train.Features(feature={"input_ids": feature}))
            writer.write(example.SerializeToString())


@pytest.fixture(scope="module")
def trained_lm(austen_data_dir, tmp_path_factory):
    """A tiny standard-attention LM (2 layers of 4 heads), trained 4 steps on Austen
    windows of 32 tokens (64 training, 32 validation windows, the real vocabulary)."""
    root = tmp_path_factory.mktemp("lm")
    data = root / "austen32"  # Not "austen": that folder name is the prepared corpus's.
    data.mkdir()
    shutil.copy(austen_data_dir / "austen" / "vocab.txt", data / "vocab.txt")
    paths = {}
    for split, field, windows in (("train", "train", 64), ("valid", "validation", 32)):
        name = f"lm_{split}.tfrecord"
        _short_windows(austen_data_dir / "austen" / name, data / name, windows)
        paths[field] = f"task.{field}_data.input_path={data / name}"
    model_dir = str(root / "model")
    override = ",".join([SHORT, *paths.values()])
    # mode="train": the tests read the checkpoint and config, not the run's evaluation.
    train.run("headsize_lm/language_modeling", model_dir, [TINY_LM], override, mode="train")
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


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
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

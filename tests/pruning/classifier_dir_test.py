"""A sentence classifier trained by `headsize-tf train` prunes and compresses from its
model_dir, keeping its trained head."""

import json
import pathlib

import numpy as np
import pytest

from headsize_tf import cli
from headsize_tf.pruning import classifier_dir as cdir
from headsize_tf.pruning.language_model import REPORT_FILE
from headsize_tf.pruning.remove import set_head_mask
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = str(ROOT / "official_configs" / "headsize_bert_sentiment_tiny.yaml")
# An eager training loop: a few steps of a tiny model run in less time than tracing the
# loop's graph takes; the tests read the run's checkpoint and config, not its loop.
EAGER = "trainer.train_tf_function=false,trainer.train_tf_while_loop=false"
# Small batches: `prune --model_dir` scores heads on --importance-batches training batches
# and measures dev accuracy on --eval-batches dev batches (the run's batch sizes) at every
# point of its curve.
SHORT = (
    f"{EAGER},trainer.train_steps=8,trainer.validation_steps=2,trainer.steps_per_loop=8,"
    "trainer.summary_interval=8,trainer.checkpoint_interval=8,trainer.validation_interval=8,"
    "task.train_data.global_batch_size=8,task.validation_data.global_batch_size=4"
)


@pytest.fixture(scope="module")
def trained(sentiment_data_dir, tmp_path_factory):
    """A tiny standard classifier (2 layers of 4 heads), 8 steps on Rotten Tomatoes."""
    model_dir = str(tmp_path_factory.mktemp("clf") / "model")
    train.run(
        "headsize_bert/sentence_prediction",
        model_dir,
        [TINY],
        SHORT,
        mode="train",  # The tests evaluate the model_dir themselves.
        data_dir=str(sentiment_data_dir),
    )
    return model_dir


def test_prune_keeps_the_head_and_equals_the_masked_model(trained, tmp_path, capsys):
    out = tmp_path / "pruned"
    argv = [
        "prune",
        "--model_dir",
        trained,
        "--target-fraction",
        "0.25",
        "--step",
        "0.125",
        "--importance-batches",
        "4",
        "--eval-batches",
        "8",
        "--output",
        str(out),
    ]
    assert cli.main(argv) == 0
    assert "(a model_dir)" in capsys.readouterr().out
    report = json.loads((out / REPORT_FILE).read_text())
    assert [p["fraction"] for p in report["curve"]] == [0.0, 0.125, 0.25]
    assert sum(report["curve"][-1]["heads_per_layer"]) == 6
    for figure in ("importance.png", "curve.png"):
        assert (out / figure).stat().st_size > 10_000
    # The written model_dir equals the source with the pruned heads masked.
    params, model, encoder = cdir.load(out)
    heads = list(params.task.model.encoder.any.attention.num_heads)
    assert heads == report["curve"][-1]["heads_per_layer"]
    _, source, source_encoder = cdir.load(trained)
    mask = np.ones([2, 4], np.float32)
    for layer, gone in enumerate(report["pruned_heads"]):
        mask[layer, gone] = 0
    set_head_mask(source_encoder, mask)
    data = cdir.classifier_batches(params, "validation", 2)
    for features, _ in data:
        np.testing.assert_allclose(model(features).numpy(), source(features).numpy(), atol=1e-5)
    assert report["accuracy"]["pruned"] == pytest.approx(report["accuracy"]["masked"], abs=1e-6)
    assert report["params"]["original"] - report["params"]["pruned"] == 2 * (4 * 64 * 16 + 3 * 16)
    # An ordinary model_dir: `train --mode eval --config_file DIR/params.yaml` reads it.
    result = train.run(
        "headsize_bert/sentence_prediction", str(out), [str(out / "params.yaml")], mode="eval"
    )
    assert np.isfinite(result.metrics["validation_loss"])


def test_compress_keeps_the_head_and_is_exact_at_full_rank(trained, tmp_path, capsys):
    out = tmp_path / "collab"
    argv = ["compress", "--model_dir", trained, "--shared-key-dim", "64", "--output", str(out)]
    assert cli.main(argv) == 0
    assert "dev accuracy" in capsys.readouterr().out
    report = json.loads((out / REPORT_FILE).read_text())
    # D = 64 = heads x head size: the CP is exact, so the trained classifier is unchanged.
    assert max(layer["relative_error"] for layer in report["layers"]) < 1e-3
    assert report["accuracy_after"] == pytest.approx(report["accuracy_before"], abs=1e-6)
    params, model, _ = cdir.load(out)
    assert params.task.model.encoder.any.attention.kind == "collaborative"
    _, source, _ = cdir.load(trained)
    features, _ = cdir.classifier_batches(params, "validation", 1)[0]
    np.testing.assert_allclose(model(features).numpy(), source(features).numpy(), atol=1e-4)


def test_wrong_kind_of_model_dir_is_one_line(trained, tmp_path, capsys):
    argv = [
        "compress",
        "--model_dir",
        str(tmp_path),
        "--shared-key-dim",
        "8",
        "--output",
        str(tmp_path / "o"),
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a `headsize-tf train` model_dir" in err and "\n" not in err
    assert not (tmp_path / "o").exists()


MLM_TINY = str(ROOT / "official_configs" / "headsize_bert_pretraining_tiny.yaml")
MLM_SHORT = (
    f"{EAGER},trainer.train_steps=4,trainer.validation_steps=1,trainer.steps_per_loop=4,"
    "trainer.summary_interval=4,trainer.checkpoint_interval=4,trainer.validation_interval=4,"
    "task.train_data.global_batch_size=4,task.validation_data.global_batch_size=4"
)


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_a_masked_lm_run_prunes_on_its_own_loss_and_keeps_its_head(
    austen_data_dir, tmp_path, capsys
):
    source_dir = str(tmp_path / "mlm")
    train.run(
        "headsize_bert/pretraining",
        source_dir,
        [MLM_TINY],
        MLM_SHORT,
        mode="train",
        data_dir=str(austen_data_dir),
    )
    out = tmp_path / "pruned"
    argv = [
        "prune",
        "--model_dir",
        source_dir,
        "--target-fraction",
        "0.25",
        "--step",
        "0.125",
        "--output",
        str(out),
    ]
    assert cli.main(argv) == 0
    assert "valid MLM perplexity" in capsys.readouterr().out
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["experiment"] == "headsize_bert/pretraining"
    for figure in ("importance.png", "curve.png"):
        assert (out / figure).stat().st_size > 10_000
    assert report["metric"] == "perplexity"
    assert [p["fraction"] for p in report["curve"]] == [0.0, 0.125, 0.25]
    assert report["perplexity"]["pruned"] == pytest.approx(report["perplexity"]["masked"], rel=1e-4)
    # The written model_dir is the source with the pruned heads masked, MLM head included.
    params, model, _ = cdir.load(out, (cdir.MASKED_LM,))
    assert sum(params.task.model.encoder.any.attention.num_heads) == 6
    _, source, source_encoder = cdir.load(source_dir, (cdir.MASKED_LM,))
    mask = np.ones([2, 4], np.float32)
    for layer, gone in enumerate(report["pruned_heads"]):
        mask[layer, gone] = 0
    set_head_mask(source_encoder, mask)
    for features, _ in cdir.masked_lm_batches(params, "validation", 1):
        np.testing.assert_allclose(
            model(features)["mlm_logits"].numpy(), source(features)["mlm_logits"].numpy(), atol=1e-5
        )
    assert report["perplexity"]["pruned"] == pytest.approx(
        cdir.masked_lm_perplexity(source, cdir.masked_lm_batches(params, "validation", 32)),
        rel=1e-4,
    )

"""`compress --model_dir` of a causal LM, a translation model and a masked-LM encoder trained
by `headsize-tf train` (Cordonnier et al. 2020 post hoc): exact at full
rank, parameter counts from the framework-neutral formulas, reloadable model_dirs."""

import json

import numpy as np
import pytest
import tensorflow_datasets as tfds

from headsize_tf import cli
from headsize_tf import params as hs_params
from headsize_tf.configs import language_modeling
from headsize_tf.modeling.decoding import greedy_decode
from headsize_tf.reparam import model_dir as rmd
from headsize_tf.training import train
from tests.reparam.util import CONFIGS, FOUR_STEPS, VOCAB

# An eager training loop: a few steps of a tiny model run in less time than tracing the
# loop's graph takes; the tests read the run's checkpoint and config, not its loop.
EAGER = "trainer.train_tf_function=false,trainer.train_tf_while_loop=false"


def test_full_rank_lm_is_the_source_and_reloads(lm_dir, tmp_path):
    out = tmp_path / "collab"
    # 4 heads x 16: full rank. Two validation batches, as below.
    report = rmd.compress_model_dir(lm_dir, 64, out, eval_batches=2, progress=False)
    assert max(layer["relative_error"] for layer in report["layers"]) < 1e-4
    assert report["after"]["validation_loss"] == pytest.approx(
        report["before"]["validation_loss"], rel=1e-4
    )
    _, source = train.load_trained_model(lm_dir)
    params, compressed = train.load_trained_model(str(out))
    assert params.task.model.attention.kind == "collaborative"
    ids = np.random.default_rng(0).integers(5, 4096, (2, 12)).astype(np.int32)
    np.testing.assert_allclose(compressed(ids).numpy(), source(ids).numpy(), atol=2e-4)
    assert json.loads((out / rmd.REPORT_FILE).read_text())["shared_key_dim"] == 64


def test_half_rank_lm_counts_decodes_and_goes_through_the_cli(lm_dir, tmp_path, capsys):
    out = tmp_path / "d32"
    argv = ["compress", "--model_dir", lm_dir, "--shared-key-dim", "32", "--output", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / rmd.REPORT_FILE).read_text())
    assert f"validation_loss {report['before']['validation_loss']:.4g} ->" in printed
    params, model = train.load_trained_model(str(out))
    spec = language_modeling.to_spec(params.task.model)
    assert model.count_params() == hs_params.causal_lm_params(spec).trainable
    assert report["params_after"] == model.count_params() < report["params_before"]
    # Collaborative heads keep the decoding cache: cached and uncached greedy agree.
    prompt = np.array([[5, 9, 11]], np.int32)
    cached = greedy_decode(model, prompt, 6).numpy()
    np.testing.assert_array_equal(cached, greedy_decode(model, prompt, 6, use_cache=False).numpy())
    # A collaborative model does not convert again: one line, exit status 2.
    again = [
        "compress",
        "--model_dir",
        str(out),
        "--shared-key-dim",
        "16",
        "--output",
        str(tmp_path / "again"),
    ]
    assert cli.main(again) == 2
    assert "already has collaborative attention" in capsys.readouterr().err
    assert not (tmp_path / "again").exists()


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_translation_model_at_full_rank_is_the_source(tmp_path):
    """Self- and encoder-decoder attention both convert (tfds mock wmt14 data)."""
    data_dir = tmp_path / "data"
    (data_dir / "wmt14").mkdir(parents=True)
    (data_dir / "wmt14" / "vocab.txt").write_text("\n".join(VOCAB))
    model_dir = str(tmp_path / "nmt")
    # One encoder layer and two decoder layers (self- and encoder-decoder attention each).
    override = f"{FOUR_STEPS},{EAGER},task.model.vocab_size=25,task.model.num_encoder_layers=1"
    with tfds.testing.mock_data(num_examples=32, policy=tfds.testing.MockPolicy.USE_CODE):
        train.run(
            "headsize_seq2seq/translation",
            model_dir,
            [str(CONFIGS / "cordonnier_nmt" / "tiny.yaml")],
            override,
            mode="train",  # compress_model_dir evaluates before and after itself.
            data_dir=str(data_dir),
        )
        _, source = train.load_trained_model(model_dir)
        full = source.attention_layers[0].num_heads * source.attention_layers[0].head_size
        report = rmd.compress_model_dir(
            model_dir, full, tmp_path / "out", eval_batches=2, progress=False
        )
    assert len(report["layers"]) == len(source.attention_layers) == 1 + 2 * 2
    assert report["after"]["validation_loss"] == pytest.approx(
        report["before"]["validation_loss"], rel=1e-4
    )
    _, compressed = train.load_trained_model(str(tmp_path / "out"))
    rng = np.random.default_rng(1)
    features = {
        "inputs": rng.integers(5, 25, (2, 7)).astype(np.int32),
        "targets": rng.integers(5, 25, (2, 5)).astype(np.int32),
    }
    np.testing.assert_allclose(compressed(features).numpy(), source(features).numpy(), atol=2e-4)


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_masked_lm_encoder_converts_and_keeps_its_head(austen_data_dir, tmp_path):
    model_dir = str(tmp_path / "mlm")
    train.run(
        "headsize_bert/pretraining",
        model_dir,
        [str(CONFIGS / "headsize_bert_pretraining_tiny.yaml")],
        f"{FOUR_STEPS},{EAGER}",
        mode="train",
        data_dir=str(austen_data_dir),
    )
    report = rmd.compress_model_dir(model_dir, 64, tmp_path / "out", eval_batches=2, progress=False)
    assert report["after"]["validation_loss"] == pytest.approx(
        report["before"]["validation_loss"], rel=1e-4
    )
    params, model = train.load_trained_model(str(tmp_path / "out"))
    assert params.task.model.encoder.any.attention.kind == "collaborative"
    _, source = train.load_trained_model(model_dir)
    ids = np.random.default_rng(2).integers(5, 4096, (2, 10)).astype(np.int32)
    inputs = {
        "input_word_ids": ids,
        "input_mask": np.ones_like(ids),
        "input_type_ids": np.zeros_like(ids),
        "masked_lm_positions": np.array([[1, 4], [2, 3]], np.int32),
    }
    got, want = model(inputs), source(inputs)
    np.testing.assert_allclose(got["mlm_logits"].numpy(), want["mlm_logits"].numpy(), atol=2e-4)

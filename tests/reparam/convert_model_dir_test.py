"""`convert_model_dir`: a trained LM / translation model_dir with grouped or latent heads.

The output is an ordinary model_dir (it reloads, decodes with its small cache and
prunes again); the report's KV-cache bytes are `core.kv_cache`'s, the metrics
come before / after conversion / after uptraining, decoding is timed side by
side; an interrupted uptraining resumes without converting again.
"""

import json
import pathlib
import shutil
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from headsize_tf import cli
from headsize_tf.core import AttentionSpec
from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.kv_cache import kv_cache_bytes_per_token
from headsize_tf.modeling.decoding import greedy_decode
from headsize_tf.pruning.language_model import prune_language_model
from headsize_tf.reparam import convert_dir
from headsize_tf.training import train
from tests.reparam.util import CONFIGS, FOUR_STEPS, VOCAB

# An eager training loop: a few steps of a tiny model run in less time than tracing the
# loop's graph takes; the tests read the run's checkpoint and config, not its loop.
EAGER = "trainer.train_tf_function=false,trainer.train_tf_while_loop=false"
# One generated token: the timed decoding traces the prompt step and one cached step per
# model (a second cached step would trace again, at a longer cache).
FAST = dict(eval_batches=1, decode_tokens=1, decode_batch=2, decode_repeats=2, progress=False)
PROMPT = np.array([[5, 9, 11], [7, 300, 12]], np.int32)


def _global_step(path: str) -> int:
    return int(tf.train.load_variable(path, "global_step/.ATTRIBUTES/VARIABLE_VALUE"))


def test_latent_lm_converts_uptrains_reloads_decodes_and_prunes(lm_dir, tmp_path, capsys):
    out = tmp_path / "latent"
    capsys.readouterr()
    report = convert_dir.convert_model_dir(
        lm_dir, ConversionTarget("latent", 32), out, uptrain_steps=2, **FAST
    )
    # The trainer's step lines are in the model_dir's log, not on the console.
    assert "train | step" not in capsys.readouterr().out
    assert "train | step" in (out / convert_dir.UPTRAIN_LOG).read_text()
    # Width 64, 2 layers of 4 heads of 16: keys and values 2 x 64 floats a layer -> a 32-latent.
    standard = kv_cache_bytes_per_token(AttentionSpec("standard", 4), 64, num_layers=2)
    latent = kv_cache_bytes_per_token(AttentionSpec("latent", 4, kv_latent_dim=32), 64, 2)
    assert report["kv_cache_bytes_per_token"] == {"original": standard, "converted": latent}
    assert (standard, latent, report["kv_cache_fraction"]) == (1024, 256, 0.25)
    assert set(report["perplexity"]) == {"original", "converted", "uptrained"}
    assert all(np.isfinite(v) and v > 1 for v in report["perplexity"].values())
    assert report["params"]["converted"] < report["params"]["original"]
    speed = report["decoding_tokens_per_second"]
    assert speed["original"] > 0 and speed["converted"] > 0
    assert report["decoding_speedup"] == pytest.approx(speed["converted"] / speed["original"])
    assert json.loads((out / "report.json").read_text())["target"] == {
        "kind": "latent",
        "kv_latent_dim": 32,
        "method": "joint_svd",
    }
    assert (out / "conversion.png").stat().st_size > 0
    assert not convert_dir.work_dir(out).exists()
    assert _global_step(tf.train.latest_checkpoint(str(out))) == 2  # The uptrained weights.
    params, model = train.load_trained_model(str(out))
    assert params.task.model.attention.kind == "latent"
    assert model.count_params() == report["params"]["converted"]
    cached = greedy_decode(model, PROMPT, 5).numpy()
    np.testing.assert_array_equal(cached, greedy_decode(model, PROMPT, 5, use_cache=False))
    pruned = prune_language_model(
        out,
        tmp_path / "pruned",
        target_fraction=0.25,
        step=0.25,
        importance_windows=8,
        eval_windows=8,
        decode_tokens=1,
        progress=False,
    )
    assert pruned["heads_per_layer"]["pruned"] != [4, 4]
    _, reloaded = train.load_trained_model(str(tmp_path / "pruned"))
    assert reloaded.attention_spec.kind == "latent"


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_interrupted_uptraining_resumes_without_converting_again(lm_dir, tmp_path, monkeypatch):
    out = tmp_path / "grouped"
    work = convert_dir.work_dir(out)
    real_run = train.run
    starts = []

    def interrupted(experiment, model_dir, config_files, override, **kwargs):
        starts.append(tf.train.latest_checkpoint(model_dir))
        override["trainer"]["train_steps"] = 2  # Stops half way...
        real_run(experiment, model_dir, config_files, override, **kwargs)
        raise KeyboardInterrupt  # ...and is killed.

    monkeypatch.setattr(train, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert_dir.convert_model_dir(
            lm_dir, ConversionTarget("grouped", 2), out, uptrain_steps=4, **FAST
        )
    assert not out.exists() and _global_step(tf.train.latest_checkpoint(str(work))) == 2
    state = json.loads((work / convert_dir.STATE_FILE).read_text())
    assert "uptrained" not in state and state["converted"]["perplexity"] > 1
    assert state["uptraining"] == {"steps": 4, "learning_rate": None}
    # The same cut-off run resumed at another rate starts again from the conversion.
    other = tmp_path / "other_rate"
    shutil.copytree(work, convert_dir.work_dir(other))

    def not_again(*args, **kwargs):
        raise AssertionError("the finished conversion ran again")

    def resumed(experiment, model_dir, config_files, override, **kwargs):
        starts.append(tf.train.latest_checkpoint(model_dir))
        return real_run(experiment, model_dir, config_files, override, **kwargs)

    monkeypatch.setattr(convert_dir, "convert_attention_model", not_again)
    monkeypatch.setattr(train, "run", resumed)
    report = convert_dir.convert_model_dir(
        lm_dir, ConversionTarget("grouped", 2), out, uptrain_steps=4, **FAST
    )
    assert [pathlib.Path(p).name for p in starts] == ["ckpt-0", "ckpt-2"]
    assert _global_step(tf.train.latest_checkpoint(str(out))) == 4
    monkeypatch.undo()
    monkeypatch.setattr(train, "run", resumed)
    rate = convert_dir.convert_model_dir(
        lm_dir,
        ConversionTarget("grouped", 2),
        other,
        uptrain_steps=4,
        uptrain_learning_rate=1e-4,
        **FAST,
    )
    assert pathlib.Path(starts[-1]).name == "ckpt-0" and rate["uptrain_learning_rate"] == 1e-4
    assert report["perplexity"]["converted"] == state["converted"]["perplexity"]
    assert report["kv_cache_bytes_per_token"]["converted"] == 512  # G = 2 of 4 heads
    assert not work.exists()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        convert_dir.convert_model_dir(lm_dir, ConversionTarget("grouped", 2), out, **FAST)


def test_uptraining_keeps_the_optimizer_and_compresses_the_schedule(lm_dir):
    params, _ = train.load_trained_model(lm_dir)
    params = params.replace(trainer={"train_steps": 200, "steps_per_loop": 50})
    override = convert_dir.uptrain_override(params, 10)["trainer"]
    assert override["train_steps"] == 10 and override["checkpoint_interval"] == 10
    # headsize_lm_austen_tiny.yaml: polynomial decay over 200 steps, 20 warm-up steps.
    assert override["optimizer_config"] == {
        "learning_rate": {"polynomial": {"decay_steps": 10}},
        "warmup": {"polynomial": {"warmup_steps": 1}},
    }
    assert "optimizer" not in override["optimizer_config"]  # AdamW and its settings stay.


def test_uptraining_at_another_peak_rate(lm_dir):
    params, _ = train.load_trained_model(lm_dir)
    params = params.replace(trainer={"train_steps": 200})
    override = convert_dir.uptrain_override(params, 10, learning_rate=1e-4)["trainer"]
    assert override["optimizer_config"]["learning_rate"] == {
        "polynomial": {"decay_steps": 10, "initial_learning_rate": 1e-4}
    }
    for bad in (0.0, 1.5, True, "1e-4"):
        with pytest.raises(ValueError, match=r"uptrain_learning_rate must be a float in \(0, 1\)"):
            convert_dir.convert_model_dir(
                lm_dir, ConversionTarget("grouped", 2), "unused", uptrain_learning_rate=bad
            )
    argv = ["convert", "--model_dir", lm_dir, "--to", "grouped", "--kv-heads", "2"]
    argv += ["--output", "unused", "--uptrain-steps", "5", "--learning-rate"]
    stop = ValueError("stopped here")
    with mock.patch.object(convert_dir, "convert_model_dir", side_effect=stop) as convert:
        assert cli.main([*argv, "3e-4"]) == 2
    assert convert.call_args.kwargs["uptrain_learning_rate"] == 3e-4
    with pytest.raises(SystemExit) as exit_status:
        cli.main([*argv, "2"])
    assert exit_status.value.code == 2


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_translation_with_as_many_kv_heads_as_heads_is_the_source(tmp_path):
    """Decoder self- and encoder-decoder attention convert; BLEU and perplexity unchanged."""
    data_dir = tmp_path / "data"
    (data_dir / "wmt14").mkdir(parents=True)
    (data_dir / "wmt14" / "vocab.txt").write_text("\n".join(VOCAB))
    model_dir = str(tmp_path / "nmt")
    with tfds.testing.mock_data(num_examples=32, policy=tfds.testing.MockPolicy.USE_CODE):
        train.run(
            "headsize_seq2seq/translation",
            model_dir,
            [str(CONFIGS / "cordonnier_nmt" / "tiny.yaml")],
            # One encoder layer: grouped targets convert the decoder's (2 layers) only.
            # Validation pairs of 16 pieces: greedy BLEU decodes to the references' length.
            f"{FOUR_STEPS},{EAGER},task.model.vocab_size=25,task.model.num_encoder_layers=1,"
            "task.validation_data.max_seq_length=16",
            mode="train",  # convert_model_dir evaluates before and after itself.
            data_dir=str(data_dir),
        )
        _, source = train.load_trained_model(model_dir)
        heads = source.decoder.blocks[0].self_attention.num_heads
        report = convert_dir.convert_model_dir(
            model_dir, ConversionTarget("grouped", heads), tmp_path / "out", **FAST
        )
    for metric in ("perplexity", "bleu"):
        assert report[metric]["converted"] == pytest.approx(report[metric]["original"], rel=1e-4)
    assert len(report["layers"]) == 2 * len(source.decoder.blocks)
    assert (
        report["memory_cache_bytes_per_token"]["converted"]
        == (report["memory_cache_bytes_per_token"]["original"])
    )
    params, model = train.load_trained_model(str(tmp_path / "out"))
    assert params.task.model.decoder_attention.kind == "grouped"
    assert params.task.model.attention.kind == source.attention_spec.kind
    source_ids = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], np.int32)
    start = np.full([2, 1], 2, np.int32)
    cached = greedy_decode(model, start, 5, source_ids=source_ids).numpy()
    uncached = greedy_decode(model, start, 5, use_cache=False, source_ids=source_ids).numpy()
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_array_equal(cached, greedy_decode(source, start, 5, source_ids=source_ids))


def test_sources_that_do_not_convert(tmp_path):
    encoder = tmp_path / "mlm"
    encoder.mkdir()
    (encoder / "headsize_experiment.json").write_text('{"experiment": "headsize_bert/pretraining"}')
    with pytest.raises(ValueError, match=r"encoder-only headsize_bert/pretraining run: latent"):
        convert_dir.convert_model_dir(encoder, ConversionTarget("latent", 8), tmp_path / "o")
    with pytest.raises(ValueError, match=r"is not a `headsize-tf train` model_dir"):
        convert_dir.convert_model_dir(tmp_path, ConversionTarget("grouped", 1), tmp_path / "o")
    with pytest.raises(ValueError, match=r"uptrain_steps must be an int >= 0; got -1"):
        convert_dir.convert_model_dir(
            encoder, ConversionTarget("grouped", 1), tmp_path / "o", uptrain_steps=-1
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlm"]


def _weights(model_dir) -> list[np.ndarray]:
    _, model = train.load_trained_model(str(model_dir))
    return [w.numpy() for w in model.weights]


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_cli_convert_to_collaborative_is_compress(lm_dir, tmp_path, capsys):
    fast = ["--eval-batches", "1", "--decode-tokens", "1"]
    common = ["--model_dir", lm_dir, "--shared-key-dim", "32"]
    convert = ["convert", "--to", "collaborative", *common, "--output", str(tmp_path / "c"), *fast]
    assert cli.main(convert) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert (
        f"KV-cache bytes per token: 1024 -> {report['kv_cache_bytes_per_token']['converted']}"
        in (printed)
    )
    assert cli.main(["compress", *common, "--output", str(tmp_path / "p")]) == 0
    params_c, _ = train.load_trained_model(str(tmp_path / "c"))
    params_p, _ = train.load_trained_model(str(tmp_path / "p"))
    assert params_c.task.model.attention.as_dict() == params_p.task.model.attention.as_dict()
    for a, b in zip(_weights(tmp_path / "c"), _weights(tmp_path / "p"), strict=True):
        np.testing.assert_array_equal(a, b)


def test_cli_per_layer_kv_heads_and_sizes_the_model_rejects(lm_dir, tmp_path, capsys):
    out = tmp_path / "gqa"
    argv = ["convert", "--model_dir", lm_dir, "--to", "grouped", "--output", str(out)]
    fast = ["--eval-batches", "1", "--decode-tokens", "1", "--method", "mean"]
    assert cli.main([*argv, "--kv-heads", "1", "2", *fast]) == 0
    params, model = train.load_trained_model(str(out))
    assert params.task.model.attention.num_kv_heads == [1, 2]
    assert model.kv_cache_bytes_per_token() == (1 + 2) * 2 * 16 * 4
    capsys.readouterr()
    bad = {
        ("grouped", "--kv-heads", "3"): "--kv-heads 3 does not divide num_heads=4",
        ("grouped", "--kv-heads", "1", "2", "4"): "--kv-heads has 3 entries; the model has 2",
        ("latent", "--kv-rank", "65"): "--kv-rank 65 is outside [1, 64]",
    }
    for (kind, *size), fragment in bad.items():
        argv = [
            "convert",
            "--model_dir",
            lm_dir,
            "--to",
            kind,
            *size,
            "--output",
            str(tmp_path / "x"),
        ]
        assert cli.main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gqa"]


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_a_converted_lm_exports_and_serves_its_own_log_likelihoods(lm_dir, tmp_path):
    # `headsize-tf export --task lm` on a converted model_dir: the SavedModel (served in
    # a fresh process with TensorFlow alone) gives the grouped-K/V model's numbers.
    from headsize_tf import serving
    from tests.serving.export_test import _serve

    out = tmp_path / "grouped"
    convert_dir.convert_model_dir(lm_dir, ConversionTarget("grouped", 2), out, **FAST)
    export = tmp_path / "export"
    argv = ["export", "--model_dir", str(out), "--task", "lm", "--output", str(export)]
    assert cli.main(argv) == 0
    texts = ["It is a truth universally acknowledged.", "Emma Woodhouse, handsome!"]
    tokenizer, lm = serving.experiment_language_model(str(out))
    assert lm.attention_spec.kind == "grouped"
    inputs = tokenizer.tokenize(tf.constant(texts), add_special_tokens=False)
    ids, mask = inputs["input_word_ids"].numpy(), inputs["input_mask"].numpy()
    logits = lm(ids).numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = [
        sum(log_probs[b, t - 1, ids[b, t]] for t in range(1, m.sum())) for b, m in enumerate(mask)
    ]
    served = _serve(export / "1", texts, inputs, tmp_path / "out.npz")
    np.testing.assert_allclose(served["text_log_likelihood"], expected, rtol=1e-5, atol=1e-4)

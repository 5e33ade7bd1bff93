"""The Keras 3 LM runner of the reproduction: Model Garden's schedule, the data arrays, a grid
of its own, resumption (its run on JAX with TensorFlow unimportable, as on a JAX-only GPU
image: tests/keras3/no_tensorflow_test.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil

import numpy as np
import pytest

from headsize_tf.core.io import write_json
from headsize_tf.experiments import lm_keras3
from headsize_tf.experiments._entry import run_main
from headsize_tf.experiments.reproduction.__main__ import main
from headsize_tf.experiments.reproduction.plan import plan, run_name
from headsize_tf.experiments.reproduction.presets import PRESETS
from headsize_tf.experiments.reproduction.runners import _override
from headsize_tf.experiments.reproduction.scheduler import run_pending
from headsize_tf.experiments.reproduction.sweep import load_runs, pending

TEST = PRESETS["test"]


@pytest.mark.parametrize("learning_rate, steps", [(3e-3, 40), (1e-3, 7)])
def test_the_schedule_is_model_gardens(learning_rate, steps):
    """Oracle: the learning rate Model Garden's optimizer factory builds from the
    runner's own optimizer config (`reproduction.runners._override`)."""
    from official.core import exp_factory
    from official.modeling.optimization import optimizer_factory

    from headsize_tf.configs import experiments  # noqa: F401  (registers them)

    model = plan(TEST)["R1"][0]
    preset = dataclasses.replace(TEST, steps=steps)
    experiment = exp_factory.get_exp_config("headsize_lm/language_modeling")
    experiment.override(_override(model, preset, learning_rate, "valid", 1), is_strict=False)
    factory = optimizer_factory.OptimizerFactory(experiment.trainer.optimizer_config)
    garden = factory.build_learning_rate()
    ours = lm_keras3.learning_rate_schedule(learning_rate, steps, max(1, steps // 10))
    for step in range(steps + 3):
        np.testing.assert_allclose(float(ours(step)), float(garden(step)), rtol=1e-6)


@pytest.mark.parametrize(
    "attention",
    [
        {"kind": "fixed_head", "num_heads": 2, "head_size": 8},
        {"kind": "collaborative", "num_heads": 2, "shared_key_dim": 8},
    ],
)
def test_weight_decay_skips_what_model_garden_skips(attention):
    """Oracle: the experiment's exclusion patterns on the tf_keras LM's variable names,
    compared by decayed shapes (the two fronts name their variables differently)."""
    import re

    import tensorflow as tf
    from official.core import exp_factory

    from headsize_tf.configs import experiments  # noqa: F401  (registers them)
    from headsize_tf.configs.language_modeling import CausalLMConfig, build_lm
    from headsize_tf.keras3.modeling import CausalLM

    trainer = exp_factory.get_exp_config("headsize_lm/language_modeling").trainer
    trainer.override(
        _override(plan(TEST)["R1"][0], TEST, 1e-3, "valid", 1)["trainer"], is_strict=False
    )
    config = trainer.optimizer_config.optimizer.adamw
    assert config.weight_decay_rate == lm_keras3.WEIGHT_DECAY
    assert config.gradient_clip_norm == lm_keras3.CLIP_NORM
    assert config.epsilon == lm_keras3.EPSILON
    pattern = "|".join(config.exclude_from_weight_decay)
    garden = build_lm(
        CausalLMConfig(
            vocab_size=50,
            hidden_size=16,
            num_layers=2,
            attention=attention,
            intermediate_size=64,
            max_sequence_length=8,
        )
    )
    garden(tf.zeros([1, 1], tf.int32))
    ours = CausalLM(
        vocabulary_size=50, num_layers=2, hidden_dim=16, attention=attention, max_sequence_length=8
    )
    optimizer = lm_keras3.adamw(1e-3)
    optimizer.build(ours.trainable_variables)

    def shapes(variables, decayed):
        return sorted(tuple(v.shape) for v in variables if decayed(v))

    assert shapes(ours.trainable_variables, optimizer._use_weight_decay) == shapes(
        garden.trainable_variables, lambda v: re.search(pattern, v.name) is None
    )
    assert shapes(ours.trainable_variables, lambda v: not optimizer._use_weight_decay(v)) == (
        shapes(garden.trainable_variables, lambda v: re.search(pattern, v.name) is not None)
    )


def test_the_data_order_is_seeded_epochs_of_permutations():
    order = lm_keras3.window_stream(10, 25, seed=3)
    assert len(order) == 25
    for epoch in (order[:10], order[10:20]):
        assert sorted(epoch) == list(range(10))
    np.testing.assert_array_equal(order, lm_keras3.window_stream(10, 25, seed=3))
    assert not np.array_equal(order, lm_keras3.window_stream(10, 25, seed=4))


@pytest.fixture()
def data_dir(austen_data_dir, tmp_path):
    """A private copy of the prepared corpus (the runner writes its arrays into it)."""
    copy = tmp_path / "data"
    shutil.copytree(austen_data_dir, copy)
    return copy


def test_arrays_hold_every_window_of_each_split(data_dir):
    from headsize_tf.data import corpora

    paths = lm_keras3.export_lm_arrays(data_dir / "austen")
    splits = corpora.load_manifest("austen", data_dir)["stats"]["splits"]
    for split, path in zip(lm_keras3.SPLITS, paths, strict=True):
        array = lm_keras3.load_lm_array(data_dir / "austen", split)
        assert array.dtype == np.int32
        assert array.shape == (splits[split]["lm_examples"], TEST.sequence_length + 1)
        assert 0 <= array.min() and array.max() < TEST.vocab_size
        assert path == lm_keras3.array_path(data_dir / "austen", split)
    stamps = [p.stat().st_mtime_ns for p in paths]
    lm_keras3.export_lm_arrays(data_dir / "austen")
    assert [p.stat().st_mtime_ns for p in paths] == stamps  # Kept, not rewritten.
    with pytest.raises(FileNotFoundError, match="export_lm_arrays"):
        lm_keras3.load_lm_array(data_dir, "train")


def test_token_ids_outside_the_vocabulary_are_refused(data_dir):
    # JAX would look them up as NaN and train a NaN model without an error.
    paths = lm_keras3.export_lm_arrays(data_dir / "austen")
    array = np.load(paths[1])
    array[0, 3] = TEST.vocab_size
    np.save(paths[1], array)
    with pytest.raises(
        ValueError, match=rf"lm_valid.npy holds token ids .* \[0, {TEST.vocab_size}\)"
    ):
        lm_keras3.train_run({"num_heads": 4}, 16, TEST, 1e-3, 0, str(data_dir / "austen"))


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_keras3_runs_form_a_grid_of_their_own(data_dir, tmp_path):
    out = tmp_path / "out"
    argv = [
        "--preset",
        "test",
        "--output",
        str(out),
        "--work-dir",
        str(tmp_path / "work"),
        "--data-dir",
        str(data_dir),
    ]
    assert main([*argv, "--framework", "keras3", "--max-runs", "1"]) == 0
    (path,) = (out / "runs").glob("*.json")
    record = json.loads(path.read_text())
    assert (record["framework"], record["backend"]) == ("keras3", "tensorflow")
    assert record["seed"] == 0 and [p["step"] for p in record["curve"]] == [2, 4]
    assert [p["step"] for p in record["train_curve"]] == [2, 4]
    for point in record["train_curve"]:
        assert point["perplexity"] == pytest.approx(np.exp(point["loss"]), rel=1e-5)
    assert record["params_built"] == record["params"]  # The Model Garden model's count.
    assert record["test_perplexity"] == pytest.approx(np.exp(record["test_loss"]), rel=1e-6)
    assert record["device"].startswith("CPU: ")
    assert "Runner: Keras 3" in (out / "README.md").read_text()
    assert load_runs(out, TEST) == {}  # Not a tf_keras run.
    assert len(load_runs(out, TEST, "keras3")) == 1
    command = json.loads((out / "reproduction.json").read_text())["command"]
    assert "--framework keras3" in command
    # The trained model is kept for the attention-rank study, which reads it on Keras 3.
    import keras

    from headsize_tf.experiments import attention_rank
    from headsize_tf.experiments.reproduction import runners

    saved = runners.keras3_model_path(
        tmp_path / "work", TEST, record["key"], record["learning_rate"], 0
    )
    lm = keras.saving.load_model(saved, compile=False)
    windows = lm_keras3.load_lm_array(data_dir / "austen", "valid")[:2, :-1]
    logits = attention_rank.recorded_logits(lm, windows, layers=lm.attention_layers)
    assert len(logits) == TEST.layers
    assert logits[0].shape == (2, record["heads"], TEST.sequence_length, TEST.sequence_length)
    ranks = attention_rank.measure(logits, record["head_size"])
    assert 0 < ranks["energy_rank_90"] <= record["head_size"]
    # The same run again gives the same numbers (seeded weights, dropout and data order).
    model = next(m for m in plan(TEST)["R1"] if m.key == record["key"])
    again = lm_keras3.train_run(
        model.attention(), model.width, TEST, record["learning_rate"], 0, data_dir / "austen"
    )
    np.testing.assert_allclose(
        [p["perplexity"] for p in again["curve"]],
        [p["perplexity"] for p in record["curve"]],
        rtol=1e-5,
    )


def test_an_output_of_the_other_framework_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    write_json(out / "runs" / "std_w16_h4_p4_lr0.001_seed0.json", {"key": "std_w16_h4_p4"})
    argv = ["--preset", "test", "--output", str(out), "--framework", "keras3"]
    with pytest.raises(SystemExit) as exited:
        run_main(lambda: main(argv), "reproduction")
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"reproduction: error: --output {out} holds tf_keras runs (std_w16_h4_p4_lr0.001_seed0."
        f"json); use another --output for --framework keras3 (e.g. "
        f"{out}_keras3).\n"
    )


def test_a_run_file_of_another_shape_stops_the_worker(tmp_path):
    """A file at a pending run's name that the grid does not count (another preset shape)
    is an error, not a run to skip forever."""
    model, lr, seed = pending(TEST, plan(TEST), {})[0]
    out = tmp_path / "out"
    other = {
        "key": model.key,
        "learning_rate": lr,
        "seed": seed,
        "framework": "keras3",
        "preset": {**dataclasses.asdict(TEST), "steps": 999},
    }
    write_json(out / "runs" / f"{run_name(model.key, lr, seed)}.json", other)
    args = argparse.Namespace(
        work_dir=str(tmp_path / "work"), max_runs=None, keys=None, framework="keras3"
    )
    with pytest.raises(ValueError, match="is a run of another preset shape or framework"):
        run_pending(args, TEST, plan(TEST), out, tmp_path)


def test_a_run_cut_off_after_a_checkpoint_resumes_to_the_same_numbers(
    data_dir, tmp_path, monkeypatch
):
    # A run longer than one command (a job scheduler's time limit): its state at every curve
    # point lets the next command go on; the resumed run ends where an uninterrupted
    # one does (the same windows, weights, optimizer moments and dropout seeds).
    corpus = data_dir / "austen"
    lm_keras3.export_lm_arrays(corpus)
    attention = {"num_heads": 4}
    whole = lm_keras3.train_run(attention, 16, TEST, 1e-3, 0, corpus)
    state = tmp_path / "state.npz"
    real_save = lm_keras3.save_training_state

    def save_then_stop(lm, path, meta):
        real_save(lm, path, meta)
        raise KeyboardInterrupt  # The command's time limit.

    monkeypatch.setattr(lm_keras3, "save_training_state", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        lm_keras3.train_run(attention, 16, TEST, 1e-3, 0, corpus, state_path=state)
    monkeypatch.setattr(lm_keras3, "save_training_state", real_save)
    lines = []
    resumed = lm_keras3.train_run(
        attention, 16, TEST, 1e-3, 0, corpus, progress=lines.append, state_path=state
    )
    assert lines[0] == f"resumed at step 2/{TEST.steps}"
    assert [p["step"] for p in resumed["curve"]] == [2, 4]
    np.testing.assert_allclose(
        [p["perplexity"] for p in resumed["curve"]],
        [p["perplexity"] for p in whole["curve"]],
        rtol=1e-5,
    )
    assert resumed["test_perplexity"] == pytest.approx(whole["test_perplexity"], rel=1e-5)
    # A state of another shape is refused by name, not loaded into the wrong variables.
    with pytest.raises(ValueError, match="a state of another model"):
        lm_keras3.train_run({"num_heads": 4}, 32, TEST, 1e-3, 0, corpus, state_path=state)

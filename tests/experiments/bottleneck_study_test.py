"""The bottleneck study (`experiments.bottleneck`): its models, the recorded attention on
Keras 3, resuming, claims shared through the reproduction's scheduler, and the verdict
rule (on constructed curves)."""

import dataclasses
import json
import threading

import numpy as np
import pytest

from headsize_tf.experiments.bottleneck import plan, runners
from headsize_tf.experiments.bottleneck import report as bottleneck_report
from headsize_tf.experiments.bottleneck.__main__ import main
from headsize_tf.experiments.bottleneck.presets import PRESETS, Setting
from headsize_tf.experiments.reproduction import scheduler

SMOKE = PRESETS["smoke"]


@pytest.mark.parametrize(
    "setting",
    [*PRESETS["cpu"].settings, Setting("recall", 256), Setting("sorting", 512)],
    ids=lambda s: s.name,
)
def test_models_match_parameters_and_bounds(setting):
    preset = PRESETS["cpu"]
    n = setting.sequence_length
    models = plan.models(preset, setting)
    kinds = [m.kind for m in models]
    assert kinds == [
        "standard",
        "fixed_head",
        "standard",
        "fixed_head",
        "standard",
        "collaborative",
    ]
    assert [m.rank_bound for m in models if m.kind == "fixed_head"] == [16, min(n, 64)]
    for fixed, wide in ((models[1], models[2]), (models[3], models[4])):
        target = fixed.params(preset, setting)
        got = wide.params(preset, setting)
        # The closest width of the grid (multiples of h): its neighbours are no closer.
        for w in (wide.width - preset.heads, wide.width + preset.heads):
            other = plan.Model("standard", w, preset.heads).params(preset, setting)
            assert abs(got - target) <= abs(other - target)
    # Collaborative heads reach rank d with about the standard model's parameters.
    std, collab = models[0], models[-1]
    assert collab.rank_bound == preset.width > std.rank_bound
    assert abs(collab.params(preset, setting) / std.params(preset, setting) - 1) < 0.05


@pytest.mark.parametrize(
    "kind, size", [("standard", None), ("fixed_head", 8), ("collaborative", 8)]
)
def test_recorded_scores_are_the_layers_attention(kind, size):
    # The study reads each head's logits through attention_rank's hook, on the einsum
    # path even where the layer would fuse them (dot_product_attention): their causal
    # softmax must be the attention the layer itself returns.
    import keras

    from headsize_tf.experiments import attention_rank
    from headsize_tf.keras3.layers.factory import make_attention

    keras.utils.set_random_seed(0)
    layer = make_attention(plan.Model(kind, 16, 2, size).attention())
    x = np.random.default_rng(0).normal(size=(3, 12, 16)).astype("float32")
    _, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    logits = attention_rank.recorded_logits(
        lambda batch, training: layer(batch, batch, use_causal_mask=True), x, 3, [layer]
    )
    assert len(logits) == 1 and logits[0].shape == (3, 2, 12, 12)
    np.testing.assert_allclose(
        attention_rank.causal_softmax(logits[0]), np.asarray(scores), atol=1e-5
    )
    assert layer._force_einsum is False  # The fused path is back.


def _run(setting, model, lr, seed, curve):
    return {
        "setting": setting.name,
        "needed_rank": setting.needed_rank,
        "model": model.key,
        "params": 1000,
        "learning_rate": lr,
        "seed": seed,
        "curve": [
            {"step": 10 * (i + 1), "accuracy": a, "train_loss": 1.0} for i, a in enumerate(curve)
        ],
        "accuracy": curve[-1],
        "attention_rank": 3.0,
        "source_mass_by_layer": [0.5],
        "device": "CPU",
    }


def test_verdict_needs_every_seed_and_the_second_half_of_training():
    preset = dataclasses.replace(
        PRESETS["cpu"], learning_rates=(1e-3, 3e-3), seeds=(0, 1, 2), curve_points=4
    )
    setting = Setting("gather", 64)
    std, fixed, wide, collab = [plan.models(preset, setting)[i] for i in (0, 1, 2, -1)]
    curves = {
        std.key: [[0.1, 0.2, 0.3, 0.3]] * 3,
        # Ahead from the middle on, in every seed: a settled win.
        fixed.key: [[0.1, 0.3, 0.5, 0.6], [0.1, 0.3, 0.4, 0.5], [0.1, 0.25, 0.6, 0.7]],
        # The fixed model is ahead of this one on average, but behind in seed 1: unsettled.
        wide.key: [[0.1, 0.3, 0.45, 0.55], [0.1, 0.3, 0.45, 0.55], [0.1, 0.3, 0.45, 0.65]],
        collab.key: [[0.1, 0.1, 0.1, 0.1]] * 3,
    }
    runs = [
        _run(setting, m, 1e-3, seed, curves[m.key][seed])
        for m in (std, fixed, wide, collab)
        for seed in range(3)
    ]
    # Seed 0 also ran 3e-3: worse for every model but the fixed one, whose sweep picks it
    # (its other seeds then ran there).
    for m in (std, fixed, wide, collab):
        shift = 0.1 if m is fixed else -0.05
        runs.append(_run(setting, m, 3e-3, 0, [a + shift for a in curves[m.key][0]]))
    for run in runs:
        if run["model"] == fixed.key and run["seed"] > 0:
            run["learning_rate"] = 3e-3
    preset = dataclasses.replace(preset, settings=(setting,), sweep_only=())
    summary = bottleneck_report.summarize(preset, runs, plan.models)
    verdicts = {(c["challenger"], c["baseline"]): c["verdict"] for c in summary["comparisons"]}
    assert verdicts[fixed.key, std.key] == "wins"
    assert verdicts[fixed.key, wide.key] == "unsettled"
    assert verdicts[collab.key, std.key] == "loses"
    rows = {r["model"]: r for r in summary["rows"]}
    assert [rows[m.key]["learning_rate"] for m in (std, fixed, wide, collab)] == [
        1e-3,
        3e-3,
        1e-3,
        1e-3,
    ]
    assert rows[fixed.key]["sweep"] == {"0.001": 0.6, "0.003": pytest.approx(0.7)}
    assert rows[fixed.key]["accuracy"] == pytest.approx(np.mean([0.7, 0.5, 0.7]))
    assert rows[fixed.key]["accuracy_other_seeds"] == pytest.approx(0.6)
    # Theorem 1: gather at n = 64 needs rank 21 > d/h = 8: a larger head is predicted to
    # win per head; per layer (h x 8 = 64 >= 21) it is not.
    comparison = next(c for c in summary["comparisons"] if c["baseline"] == std.key)
    assert comparison["predicted_win"] and not comparison["predicted_win_total"]
    lines = bottleneck_report.verdict_lines(summary)
    assert any("predicts a win in 1 of them: 0 won, 0 lost, 1 unsettled" in x for x in lines)


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_a_rerun_trains_nothing_and_writes_the_same_report(tmp_path, monkeypatch):
    out = tmp_path / "bottleneck"
    assert main(["--preset", "smoke", "--output", str(out)]) == 0
    runs = sorted((out / "runs").glob("*/*.json"))
    assert len(runs) == len(plan.plan(SMOKE)) * (len(SMOKE.learning_rates) + len(SMOKE.seeds) - 1)
    first = json.loads(runs[0].read_text())
    assert first["params_built"] == first["params"]  # The core formula counts the built model.
    assert 0.0 <= first["accuracy"] <= 1.0 and len(first["curve"]) == SMOKE.curve_points
    report = (out / "README.md").read_text()
    assert (out / "bottleneck.png").stat().st_size > 10_000

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(runners, "train_one", refuse)
    assert main(["--preset", "smoke", "--output", str(out)]) == 0
    assert (out / "README.md").read_text() == report


def test_processes_share_the_runs_by_claims(tmp_path, monkeypatch):
    # Another process holds the first run's claim (the file beside its run's): this one
    # trains the others, waits, and finds that run finished once the claim is released.
    out = tmp_path / "bottleneck"
    todo = plan.pending(SMOKE, out)
    first = todo[0].path(out)
    held = scheduler.claim(first.parent, first.name)
    assert (first.parent / f"{first.name}.claim").exists()
    trained = []

    def fake_train(preset, setting, model, lr, seed, progress):
        trained.append(plan.run_name(model.key, lr, seed))
        return {"setting": setting.name, "accuracy": 0.5, "train_seconds": 0.0}

    def finish_first():
        first.write_text(json.dumps({"setting": todo[0].setting.name}))
        scheduler.release(held, remove=True)  # As the study's processes release theirs.

    monkeypatch.setattr(runners, "train_one", fake_train)
    timer = threading.Timer(0.5, finish_first)
    timer.start()
    try:
        runs = runners.run_all(SMOKE, out, progress=lambda line: None, wait_seconds=0.05)
    finally:
        timer.cancel()
    assert trained == [run.name for run in todo[1:]]
    assert len(runs) == len(todo) and plan.pending(SMOKE, out) == []
    assert not list(out.rglob("*.claim"))  # Each claim's file goes with it.


def test_a_removed_claim_file_is_no_claim(tmp_path, monkeypatch):
    # A process that opened a claim's file just before its holder released and removed it
    # locks a file no longer at the path: the claim is taken on the path's file instead.
    import os

    held = scheduler.claim(tmp_path, "run")
    stale = open(tmp_path / "run.claim", "a+")  # noqa: SIM115
    scheduler.release(held, remove=True)
    assert not (tmp_path / "run.claim").exists()
    opened = []

    def open_stale_first(path, mode):
        opened.append(path)
        return stale if len(opened) == 1 else open(path, mode)

    monkeypatch.setattr(scheduler, "open", open_stale_first, raising=False)
    taken = scheduler.claim(tmp_path, "run")
    assert taken is not None and taken is not stale and stale.closed and len(opened) == 2
    assert os.path.samestat(os.stat(tmp_path / "run.claim"), os.fstat(taken.fileno()))
    assert scheduler.claim(tmp_path, "run") is None  # Held.
    scheduler.release(taken, remove=True)


def test_sweep_only_settings_run_their_first_seed_last():
    preset = PRESETS["cpu"]
    todo = plan.todo_list(preset)
    sweeps = [t for t in todo if t[0] in preset.sweep_only]
    assert sweeps == todo[-len(sweeps) :]
    assert {seed for *_, seed in sweeps} == {preset.seeds[0]}
    assert len(sweeps) == sum(
        len(plan.models(preset, s)) * len(preset.learning_rates) for s in preset.sweep_only
    )
    # Every other setting: the sweep, then the other seeds at the chosen rate (None here).
    first = [t for t in todo if t[0] == preset.settings[0]]
    per_model = len(preset.learning_rates) + len(preset.seeds) - 1
    assert len(first) == len(plan.models(preset, preset.settings[0])) * per_model
    assert [t[2] is None for t in first] == sorted(t[2] is None for t in first)


def test_an_unknown_only_is_one_line_naming_the_program(tmp_path, capsys):
    from headsize_tf.experiments._entry import run_main

    argv = ["--output", str(tmp_path / "out"), "--preset", "smoke", "--only", "nope"]
    with pytest.raises(SystemExit) as exited:
        run_main(lambda: main(argv), "bottleneck")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err.startswith("bottleneck: error: --only nope: expected one of ")
    assert not (tmp_path / "out").exists()

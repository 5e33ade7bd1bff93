"""The attention-rank study: rank measures against numpy oracles, the logits it records
from a real LM, and the command on a reproduction trained in the test."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tf_keras

from headsize_tf.experiments import attention_rank as ar
from headsize_tf.experiments._entry import run_main
from headsize_tf.experiments.reproduction.__main__ import main
from headsize_tf.experiments.reproduction.plan import run_name
from headsize_tf.experiments.reproduction.presets import PRESETS
from headsize_tf.experiments.reproduction.runners import run_dir
from headsize_tf.experiments.reproduction.sweep import best_learning_rate, load_runs, model_grid
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM


def test_energy_and_entropy_ranks():
    s = np.array([[4.0, 3.0, 0.0], [10.0, 1.0, 0.0], [2.0, 2.0, 2.0]])
    # Squared energies: 16/25 = 64% < 90% after one value; 100/101 = 99.0%.
    np.testing.assert_array_equal(ar.energy_rank(s, 0.9), [2, 1, 3])
    np.testing.assert_array_equal(ar.energy_rank(s, 0.99), [2, 1, 3])
    np.testing.assert_array_equal(ar.energy_rank(np.zeros((1, 3)), 0.9), [0])
    np.testing.assert_allclose(ar.entropy_rank(s[2]), 3.0)
    p = np.array([4.0, 3.0]) / 7.0
    np.testing.assert_allclose(ar.entropy_rank(s[0]), np.exp(-(p * np.log(p)).sum()))


def test_attention_rank_of_known_logits():
    rng = np.random.default_rng(0)
    n = 24
    zero = np.zeros((n, n))  # Uniform attention: nothing to express.
    low = 4.0 * rng.normal(size=(n, 2)) @ rng.normal(size=(2, n))  # Rank 2, sharp.
    full = 4.0 * rng.normal(size=(n, n))
    ranks = ar.attention_rank(np.stack([zero, low, full]), tolerance=0.05)
    assert ranks[0] == 0
    assert 1 <= ranks[1] <= 2
    assert ranks[2] > 2
    # The oracle at the found rank: truncation within tolerance, one fewer is not.
    u, s, vt = np.linalg.svd(full)
    target = ar.causal_softmax(full)

    def tv(k):
        approx = (u[:, :k] * s[:k]) @ vt[:k]
        return 0.5 * np.abs(ar.causal_softmax(approx) - target).sum(-1).mean()

    k = int(ranks[2])
    assert tv(k) <= 0.05 < tv(k - 1)
    # The causal softmax: rows sum to 1 over j <= i, zero above the diagonal.
    attention = ar.causal_softmax(full)
    np.testing.assert_allclose(attention.sum(-1), 1.0)
    assert (np.triu(attention, 1) == 0).all()


def test_recorded_logits_are_each_heads_bounded_by_its_size():
    tf_keras.utils.set_random_seed(0)
    n, p = 16, 3
    lm = HeadsizeCausalLM(
        vocab_size=40,
        hidden_size=16,
        num_layers=2,
        attention={"kind": "fixed_head", "num_heads": 5, "head_size": p},
        max_sequence_length=n,
    )
    tokens = np.random.default_rng(0).integers(0, 40, (3, n)).astype("int32")
    before = np.asarray(lm(tokens))
    logits = ar.recorded_logits(lm, tokens, batch_size=2)
    assert [x.shape for x in logits] == [(3, 5, n, n)] * 2
    np.testing.assert_allclose(logits[0].mean(-1), 0.0, atol=1e-9)  # Rows centred.
    assert (np.linalg.matrix_rank(logits[1], tol=1e-8) <= p).all()
    assert (np.linalg.matrix_rank(logits[1], tol=1e-8) == p).any()
    # The layers' own method is back: the model computes what it did.
    np.testing.assert_allclose(np.asarray(lm(tokens)), before, atol=1e-6)
    assert "_logits_from_projected" not in vars(ar.attention_layers(lm)[0])
    result = ar.measure(logits, p)
    assert len(result["layers"]) == 2
    assert 0 <= result["attention_rank"] <= p and result["energy_rank_99"] <= p


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_the_command_measures_each_finished_run_once(austen_data_dir, tmp_path, capsys):
    out, work = tmp_path / "rv2", tmp_path / "work"
    argv = [
        "--preset",
        "test",
        "--output",
        str(out),
        "--work-dir",
        str(work),
        "--data-dir",
        str(austen_data_dir),
    ]
    assert main([*argv, "--max-runs", "1", "--keys", "std_w16_h4_p4"]) == 0
    # The rest of the sweep (grid extension included), faked as worse: the trained rate wins.
    (trained,) = (out / "runs").glob("*.json")
    record = json.loads(trained.read_text())
    preset = PRESETS["test"]
    while (runs := load_runs(out, preset)) and best_learning_rate(
        "std_w16_h4_p4", preset, runs
    ) is None:
        for lr in model_grid("std_w16_h4_p4", preset, runs):
            path = out / "runs" / f"{run_name('std_w16_h4_p4', lr, 0)}.json"
            if not path.exists():
                fake = {
                    **record,
                    "learning_rate": lr,
                    "curve": [{**c, "perplexity": 1e9} for c in record["curve"]],
                }
                path.write_text(json.dumps(fake))
    # Seed 1 at the chosen rate has a result file but no checkpoint (another machine's).
    name = run_name("std_w16_h4_p4", record["learning_rate"], 1)
    (out / "runs" / f"{name}.json").write_text(json.dumps({**record, "seed": 1}))
    # Seed 2's run is still training: its checkpoint is not the last step's.
    unfinished = run_name("std_w16_h4_p4", record["learning_rate"], 2)
    (out / "runs" / f"{unfinished}.json").write_text(json.dumps({**record, "seed": 2}))
    partial = run_dir(work, preset, "std_w16_h4_p4", record["learning_rate"], 2)
    partial.mkdir(parents=True)
    (partial / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{preset.steps - 1}"\n')
    (partial / f"ckpt-{preset.steps - 1}.index").write_bytes(b"")
    assert not ar.final_checkpoint(partial, preset.steps)
    assert main([*argv, "--summarize-only"]) == 0
    capsys.readouterr()
    command = [
        "--runs",
        str(out),
        "--work-dir",
        str(work),
        "--windows",
        "2",
        "--data-dir",
        str(austen_data_dir),
        "--output",
        str(out / "attention_rank"),
    ]
    assert ar.main(command) == 0
    printed = capsys.readouterr().out
    assert printed.count("[rank]") == 1
    result = json.loads((out / "attention_rank" / "attention_rank.json").read_text())
    (model,) = result["models"]
    assert model["key"] == "std_w16_h4_p4" and model["seeds"] == [0]
    assert 0 <= model["attention_rank"] <= model["head_size"] == 4
    assert result["windows"] == 2 and "--windows 2" in result["command"]
    assert result["missing"] == [name, unfinished]  # Listed, not measured.
    readme = (out / "attention_rank" / "README.md").read_text()
    assert "| std_w16_h4_p4 | 16 | 4 | 4 |" in readme
    assert "± 0.0" not in readme  # One seed: no spread shown.
    assert (out / "attention_rank" / "attention_rank.png").stat().st_size > 10_000
    # The report rebuilt from the records alone: the same numbers and window count.
    rebuilt = [*command[:-2], "--output", str(out / "attention_rank"), "--report-only"]
    rebuilt[rebuilt.index("--windows") + 1] = "7"  # Not what the records were measured on.
    assert ar.main(rebuilt) == 0
    again = json.loads((out / "attention_rank" / "attention_rank.json").read_text())
    assert again["windows"] == 2 and again["models"] == result["models"]
    assert ar.main(command) == 0  # A rerun reuses the run's measurement.
    assert "[rank]" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--windows", "0"], "attention_rank: error: --windows 0: expected a number >= 1."),
        (["--runs", "/nonexistent"], "attention_rank: error: --runs /nonexistent is not a "),
    ],
)
def test_bad_arguments_name_the_value(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        run_main(lambda: ar.main([*argv, "--output", str(tmp_path / "out")]), "attention_rank")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith(message) and err.count("\n") == 1

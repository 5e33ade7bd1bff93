"""The Keras 3 HyperModel: compiled models per trial, the budget, a real search."""

from __future__ import annotations

import keras
import keras_tuner
import numpy as np
import pytest

from headsize_tf.keras3.tuning import ClassifierHyperModel, OverBudgetError, SearchSpace

LENGTH = 8


def _task(n: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Label 1 iff token 3 occurs in the sequence (any position)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, 20, size=(n, LENGTH)).astype("int32")
    labels = rng.integers(0, 2, size=n)
    where = rng.integers(1, LENGTH, size=n)
    ids[labels == 1, where[labels == 1]] = 3
    ids[:, 0] = 1  # [CLS]
    inputs = {
        "token_ids": ids,
        "segment_ids": np.zeros_like(ids),
        "padding_mask": np.ones_like(ids),
    }
    return inputs, labels


def _hypermodel(space: dict, budget: int | None = None) -> ClassifierHyperModel:
    return ClassifierHyperModel(
        SearchSpace.from_dict(space),
        vocabulary_size=20,
        num_classes=2,
        max_sequence_length=LENGTH,
        defaults={"width": 16, "num_layers": 1},
        budget_params=budget,
        learning_rate=3e-3,
        dropout=0.0,
    )


def test_each_configuration_builds_with_the_formula_count():
    hypermodel = _hypermodel(
        {
            "attention_type": ["standard", "fixed_head", "collaborative"],
            "num_heads": [2, 4],
            "head_size": [4, 8],
            "shared_key_dim": [4, 16],
        }
    )
    seen = set()
    for kind in ("standard", "fixed_head", "collaborative"):
        for heads in (2, 4):
            hp = keras_tuner.HyperParameters()
            hp.Fixed("attention_type", kind)
            hp.Fixed("num_heads", heads)
            model = hypermodel.build(hp)
            settings = hypermodel.settings(hp)
            assert model.count_params() == hypermodel.count_params(settings)
            assert model.optimizer is not None and model.loss is not None  # Compiled.
            seen.add((kind, heads, settings["head_size"], settings["shared_key_dim"]))
    assert len(seen) == 6


def test_over_budget_configurations_fail_their_trial_before_building():
    hypermodel = _hypermodel({"attention_type": ["fixed_head"], "head_size": [64]}, budget=5000)
    hp = keras_tuner.HyperParameters()
    with pytest.raises(OverBudgetError, match=r"params > budget 5,000"):
        hypermodel.build(hp)
    assert issubclass(OverBudgetError, keras_tuner.errors.FailedTrialError)


def test_random_search_fits_trials_and_respects_the_budget(tmp_path):
    keras.utils.set_random_seed(0)
    x, y = _task(256, seed=0)
    x_val, y_val = _task(128, seed=1)
    space = {"attention_type": ["standard", "fixed_head"], "head_size": [4, 32]}
    hypermodel = _hypermodel(space)
    big = keras_tuner.HyperParameters()
    big.Fixed("attention_type", "fixed_head")
    big.Fixed("num_heads", 4)
    big.Fixed("head_size", 32)
    hypermodel.budget_params = hypermodel.count_params(hypermodel.settings(big)) - 1
    tuner = keras_tuner.GridSearch(
        hypermodel,
        objective="val_accuracy",
        max_trials=4,
        directory=str(tmp_path),
        project_name="k3",
        max_consecutive_failed_trials=8,
        seed=0,
    )
    tuner.search(x, y, validation_data=(x_val, y_val), epochs=3, batch_size=32, verbose=0)
    trials = list(tuner.oracle.trials.values())
    completed = [t for t in trials if t.status == "COMPLETED"]
    failed = [t for t in trials if t.status == "FAILED"]
    # Grid: standard, fixed_head x {4, 32} (4 heads); only head size 32 is over.
    assert len(completed) == 2 and len(failed) == 1, [
        (t.hyperparameters.values, t.status) for t in trials
    ]
    assert failed[0].hyperparameters.values == {"attention_type": "fixed_head", "head_size": 32}
    best = tuner.oracle.get_best_trials(1)[0]
    majority = max(np.mean(y_val), 1 - np.mean(y_val))
    assert best.score > majority + 0.1, (best.score, majority)

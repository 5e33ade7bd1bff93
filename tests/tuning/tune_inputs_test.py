"""`headsize-tf tune` refuses bad input in one line before a trial trains; reruns resume.

The commands run in process (`headsize_tf.cli.main`). No test here trains a
model: the refusals come first, and the resume tests replace the trainer
(`headsize_tf.training.train.run`) by one that reports metrics at once.
"""

import json
import os
import pathlib

import pytest

from headsize_tf import cli, tuning
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
LM = "headsize_lm/language_modeling"
LM_TINY = str(ROOT / "official_configs" / "headsize_lm_austen_tiny.yaml")
SHORT = "trainer: {train_steps: 12, validation_steps: 1}\n"


def _run(argv, capsys) -> tuple[int, list[str]]:
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse errors
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.strip()]


def _tree(path: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.fixture
def space_file(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "space.yaml"
        path.write_text(text)
        return str(path)

    return write


# (search space YAML, a fragment of the one-line message)
BAD_SPACES = [
    ("num_heads: {min: 2, max: 8, step: 0}", "num_heads step must be a positive integer; got 0"),
    ("num_heads: {min: 2, max: 8, step: -2}", "num_heads step must be a positive integer; got -2"),
    ("head_size: {min: 64, max: 16}", "head_size min 64 is greater than its max 16"),
    ("width: {min: a, max: 64}", "width min must be a positive integer; got 'a'"),
    ("num_layers: {min: 1, max: 2.5}", "num_layers max must be a positive integer; got 2.5"),
    ("num_heads: {min: 0, max: 4}", "num_heads min must be a positive integer; got 0"),
    ("num_heads: [2, four]", "num_heads choice 'four' is not a positive integer"),
    ("shared_key_dim: [null, 16]", "shared_key_dim choice None is not a positive integer"),
    ("num_heads_per_layer: [0, 2]", "num_heads_per_layer choice 0 is not a positive integer"),
    ("num_heads: [true]", "num_heads choice True is not a positive integer"),
    ("attention_type: [standard, multi]", "attention_type choice 'multi' is not an attention kind"),
]


@pytest.mark.parametrize("text, fragment", BAD_SPACES)
def test_a_bad_range_or_choice_is_refused(text, fragment):
    import yaml

    with pytest.raises(tuning.SearchSpaceError, match=fragment):
        tuning.SearchSpace.from_dict(yaml.safe_load(text))
    space = tuning.SearchSpace(yaml.safe_load(text))  # Built directly: `tune` checks it.
    with pytest.raises(tuning.SearchSpaceError, match=fragment):
        tuning.check_space(space)


def test_good_spaces_pass():
    tuning.check_space(
        tuning.SearchSpace.from_dict(
            {
                "attention_type": ["standard", "fixed_head", "collaborative"],
                "num_heads": {"min": 2, "max": 8, "step": 2},
                "head_size": {"min": 16, "max": 16},
                "shared_key_dim": [16, 32],
            }
        )
    )


def _argv(space: str, out: str, *extra: str, data_dir: str = "/nonexistent") -> list[str]:
    return [
        "tune",
        "--experiment",
        LM,
        "--config-file",
        LM_TINY,
        "--search-space",
        space,
        "--data-dir",
        data_dir,
        "--output",
        out,
        *extra,
    ]


# (search space, extra arguments, a fragment of the one-line message); each is refused
# before the experiment's configuration or data are read.
CLI_CASES = [
    ("num_heads: {min: 2, max: 4, step: 0}", [], "num_heads step must be a positive integer"),
    ("num_heads: {min: 8, max: 2}", [], "num_heads min 8 is greater than its max 2"),
    ("num_heads: [2, x]", [], "num_heads choice 'x' is not a positive integer"),
    (
        "num_heads: [2]",
        ["--max-epochs", "2"],
        "--max-epochs is used by the hyperband tuner only, not by the random tuner",
    ),
    (
        "num_heads: [2]",
        ["--tuner", "bayesian", "--max-epochs", "2"],
        "--max-epochs is used by the hyperband tuner only, not by the bayesian tuner",
    ),
    (
        "num_heads: [2]",
        ["--tuner", "hyperband", "--max-trials", "4"],
        "--max-trials is not used by the hyperband tuner",
    ),
    ("num_heads: [2]", ["--direction", "max"], "--direction needs --objective"),
    ("num_heads: [2]", ["--objective", " "], "--objective is empty"),
    ("num_heads: [2]", ["--seed", "-1"], "--seed: expected an integer >= 0, got '-1'"),
    ("num_heads: [2]", ["--seed", str(2**32)], "--seed must be an integer from 0 to 4294967295"),
    (
        "num_heads_per_layer: [2, 4]",
        ["--budget-params", "400000", "--match-params"],
        "it cannot with num_heads_per_layer",
    ),
    (
        "num_heads: [2, 4]\nhead_size: [16]",
        ["--budget-params", "400000", "--match-params"],
        "--match-params sets num_heads to meet the budget; drop num_heads from the search space",
    ),
]


@pytest.mark.parametrize("space, extra, fragment", CLI_CASES)
def test_bad_arguments_are_one_line(space, extra, fragment, space_file, tmp_path, capsys):
    out = tmp_path / "out"
    code, lines = _run(_argv(space_file(space), str(out), *extra), capsys)
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("headsize-tf tune: error: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert not out.exists()


def test_the_space_file_is_named(space_file, tmp_path, capsys):
    path = space_file("num_heads: {min: 2, max: 4, step: 0}")
    code, lines = _run(_argv(path, str(tmp_path / "out")), capsys)
    assert code == 2
    assert lines == [
        f"headsize-tf tune: error: {path}: num_heads step must be a positive integer; got 0."
    ]


def test_direction_defaults():
    assert tuning.settings.default_direction("validation_loss") == "min"
    assert tuning.settings.default_direction("perplexity") == "min"
    assert tuning.settings.default_direction("mean_squared_error") == "min"
    for name in ("token_accuracy", "cls_accuracy", "auc", "final_f1", "matthews_corrcoef"):
        assert tuning.settings.default_direction(name) == "max", name


def _experiment(name: str, **task):
    from official.core import exp_factory

    from headsize_tf.configs import experiments  # noqa: F401  (registers them)

    params = exp_factory.get_exp_config(name)
    if task:
        params.override({"task": task}, is_strict=False)
    return params


def test_metric_names_of_each_task():
    names = tuning.metric_names
    assert names(_experiment(LM)) == {"validation_loss", "perplexity", "token_accuracy"}
    assert names(_experiment("headsize_seq2seq/translation")) == {
        "validation_loss",
        "perplexity",
        "token_accuracy",
    }
    assert names(_experiment("headsize_bert/pretraining")) == {
        "validation_loss",
        "masked_lm_accuracy",
        "lm_example_loss",
    }
    assert names(_experiment("headsize_bert/sentence_prediction")) == {
        "validation_loss",
        "cls_accuracy",
    }
    matthews = _experiment("headsize_bert/sentence_prediction", metric_type="matthews_corrcoef")
    assert names(matthews) == {"validation_loss", "cls_accuracy", "matthews_corrcoef"}
    span = _experiment("headsize_bert/span_labeling")
    assert names(span) == {"exact_match", "final_f1"}  # No validation loss.
    objective = tuning.default_objective(span, names(span))
    assert (objective.name, objective.direction) == ("final_f1", "max")


@pytest.fixture
def lm(austen_data_dir, tmp_path, monkeypatch):
    """Arguments of a tiny LM search whose trials "train" at once, and the trained trials."""
    (tmp_path / "short.yaml").write_text(SHORT)
    (tmp_path / "space.yaml").write_text("num_heads: [2, 4]\n")
    trained = []

    def fake_run(experiment, model_dir, config_files, override, data_dir=None, seed=0):
        heads = override["task"]["model"]["attention"]["num_heads"]
        trained.append(heads)
        metrics = {"validation_loss": 7.0 + heads / 100, "perplexity": 1.0, "token_accuracy": 0.1}
        return train.TrainResult(model_dir=model_dir, metrics=metrics, params=None)

    monkeypatch.setattr(train, "run", fake_run)

    def argv(*extra: str, space: str = "space.yaml") -> list[str]:
        return [
            "tune",
            "--experiment",
            LM,
            "--config-file",
            LM_TINY,
            "--config-file",
            str(tmp_path / "short.yaml"),
            "--search-space",
            str(tmp_path / space),
            "--data-dir",
            str(austen_data_dir),
            "--output",
            str(tmp_path / "out"),
            *extra,
        ]

    return argv, trained, tmp_path


def test_an_unknown_objective_is_refused_before_a_trial(lm, capsys):
    argv, trained, tmp = lm
    code, lines = _run(argv("--objective", "validation_perplexity"), capsys)
    assert code == 2
    assert lines == [
        "headsize-tf tune: error: Objective 'validation_perplexity' is not a metric that "
        f"{LM} reports; expected one of ['perplexity', 'token_accuracy', 'validation_loss']."
    ]
    assert trained == []
    assert not (tmp / "out").exists()


def test_a_rerun_resumes_the_same_search_and_refuses_another(lm, capsys):
    argv, trained, tmp = lm
    out = tmp / "out"
    assert _run(argv("--max-trials", "1", "--objective", "perplexity"), capsys)[0] == 0
    assert len(trained) == 1
    settings = json.loads((out / tuning.SETTINGS_FILE).read_text())
    assert settings["search_space"] == {"num_heads": [2, 4]}
    assert (settings["objective"], settings["direction"]) == ("perplexity", "min")
    assert settings["config"]["trainer"]["train_steps"] == 12
    # The same settings resume: nothing trains again; more trials continue the search.
    assert _run(argv("--max-trials", "1", "--objective", "perplexity"), capsys)[0] == 0
    assert len(trained) == 1
    assert _run(argv("--max-trials", "2", "--objective", "perplexity"), capsys)[0] == 0
    assert sorted(trained) == [2, 4]
    before = _tree(out)
    (tmp / "other.yaml").write_text("num_heads: [2, 8]\n")
    (tmp / "longer.yaml").write_text("trainer: {train_steps: 24}\n")
    for extra, fragment in [
        (
            ["--search-space", str(tmp / "other.yaml")],
            "--search-space {'num_heads': [2, 8]} (was {'num_heads': [2, 4]})",
        ),
        (["--tuner", "bayesian"], "--tuner 'bayesian' (was 'random')"),
        (["--objective", "validation_loss"], "--objective 'validation_loss' (was 'perplexity')"),
        (["--objective", "perplexity", "--direction", "max"], "--direction 'max' (was 'min')"),
        (["--objective", "perplexity", "--seed", "3"], "--seed 3 (was 0)"),
        (
            ["--objective", "perplexity", "--budget-params", "10000000"],
            "--budget-params 10000000 (was None)",
        ),
        (
            ["--objective", "perplexity", "--config-file", str(tmp / "longer.yaml")],
            "configuration (its config files, --data-dir): trainer.train_steps 24 (was 12)",
        ),
    ]:
        extra = extra if "--objective" in extra else [*extra, "--objective", "perplexity"]
        code, lines = _run(argv(*extra), capsys)
        assert code == 2, extra
        assert len(lines) == 1, lines
        assert f"{out} holds a search started with other settings" in lines[0], lines[0]
        assert fragment in lines[0], lines[0]
        assert "use another --output for a new one" in lines[0], lines[0]
    assert sorted(trained) == [2, 4]
    assert _tree(out) == before


def test_a_damaged_settings_record_is_refused(lm, capsys):
    argv, trained, tmp = lm
    (tmp / "out").mkdir()
    (tmp / "out" / tuning.SETTINGS_FILE).write_text("{not json")
    code, lines = _run(argv("--max-trials", "1"), capsys)
    assert code == 2
    assert len(lines) == 1 and "is not a settings record" in lines[0], lines
    assert trained == []
    assert os.listdir(tmp / "out") == [tuning.SETTINGS_FILE]


def test_hyperband_trials_train_parts_of_the_steps(lm, capsys):
    argv, trained, tmp = lm
    assert _run(argv("--tuner", "hyperband", "--objective", "perplexity"), capsys)[0] == 0
    assert sorted(trained) == [2, 4]
    settings = json.loads((tmp / "out" / tuning.SETTINGS_FILE).read_text())
    assert (settings["tuner"], settings["max_epochs"]) == ("hyperband", 3)
    records = [json.loads(p.read_text()) for p in (tmp / "out").glob("trials/*/record.json")]
    assert [r["override"]["trainer"]["train_steps"] for r in records] == [4, 4]  # 12 // 3.
    code, lines = _run(argv("--tuner", "hyperband", "--max-epochs", "4"), capsys)
    assert code == 2 and "--max-epochs 4 (was 3)" in lines[0], lines


def test_a_search_without_a_settings_record_resumes_and_records_them(lm, capsys):
    argv, trained, tmp = lm
    assert _run(argv("--max-trials", "1"), capsys)[0] == 0
    (tmp / "out" / tuning.SETTINGS_FILE).unlink()  # As an older version leaves it.
    assert _run(argv("--max-trials", "1"), capsys)[0] == 0
    assert len(trained) == 1
    assert (tmp / "out" / tuning.SETTINGS_FILE).is_file()

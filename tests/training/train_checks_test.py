"""`train`'s checks before a run: config types and ranges, the model_dir it resumes,
the printed config, eval-only restores and Ctrl-C (no training here)."""

import gc
import logging
import pathlib

import pytest
import tensorflow as tf
import yaml

from headsize_tf import cli
from headsize_tf.core.errors import CheckpointError
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_LM = str(ROOT / "official_configs" / "headsize_lm_austen_tiny.yaml")
LM = "headsize_lm/language_modeling"


@pytest.fixture()
def trained_dir(tmp_path, austen_data_dir):
    """A model_dir as `train` leaves it (params.yaml, experiment file, a checkpoint),
    without training: the checks read only those files."""
    from official.core import train_utils

    from headsize_tf.core.io import write_json

    params = train.build_params(LM, [TINY_LM], data_dir=str(austen_data_dir))
    model_dir = tmp_path / "lm"
    model_dir.mkdir()
    train_utils.serialize_config(params, str(model_dir))
    write_json(model_dir / train.EXPERIMENT_FILE, {"experiment": LM})
    tf.train.Checkpoint(step=tf.Variable(1)).save(str(model_dir / "ckpt"))
    return model_dir


def _run(model_dir, data_dir, **kwargs):
    args = dict(experiment=LM, model_dir=str(model_dir), config_files=[TINY_LM])
    args.update(kwargs)
    return train.run(data_dir=str(data_dir), **args)


def test_a_rerun_with_another_model_is_refused_before_anything_is_written(
    trained_dir, austen_data_dir
):
    saved = {p.name: p.read_bytes() for p in trained_dir.iterdir() if p.is_file()}
    with pytest.raises(train.ConfigError, match=r"task.model.num_layers=2, not 3; a run resumes"):
        _run(trained_dir, austen_data_dir, params_override="task.model.num_layers=3")
    with pytest.raises(train.ConfigError, match=r"trained as headsize_lm/language_modeling, not"):
        _run(
            trained_dir,
            austen_data_dir,
            experiment="headsize_bert/pretraining",
            config_files=[str(ROOT / "official_configs" / "headsize_bert_pretraining_tiny.yaml")],
        )
    assert {p.name: p.read_bytes() for p in trained_dir.iterdir() if p.is_file()} == saved


def test_a_checkpoint_without_the_train_files_is_refused(trained_dir, austen_data_dir):
    (trained_dir / "params.yaml").unlink()
    with pytest.raises(train.ConfigError, match=r"not a `headsize-tf train` model_dir"):
        _run(trained_dir, austen_data_dir)


def test_trainer_settings_and_dropout_may_change_on_a_rerun(trained_dir, austen_data_dir):
    params = train.build_params(
        LM,
        [TINY_LM],
        "trainer.train_steps=300,task.model.dropout_rate=0.2,"
        "trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate=0.01",
        data_dir=str(austen_data_dir),
    )
    train._check_model_dir(str(trained_dir), LM, params)  # Resumes: no error.


def test_an_unreadable_saved_config_is_one_error(trained_dir, austen_data_dir):
    (trained_dir / "params.yaml").write_text("task:\n  model:\n    retired_field: 3\n")
    with pytest.raises(train.ConfigError, match=r"params.yaml: CausalLMConfig has no field"):
        _run(trained_dir, austen_data_dir)


def test_an_evaluation_without_a_checkpoint_needs_an_init_checkpoint(tmp_path, austen_data_dir):
    empty = tmp_path / "empty"
    with pytest.raises(train.ConfigError, match=r"mode='eval' needs a trained model_dir="):
        _run(empty, austen_data_dir, mode="eval", untrained_eval=False)
    assert not empty.exists()
    # With a task.init_checkpoint the evaluation reads it (Model Garden's initialisation);
    # the check passes and the run fails only on the (missing) checkpoint itself.
    with pytest.raises(Exception) as raised:
        _run(
            empty,
            austen_data_dir,
            params_override=f"task.init_checkpoint={tmp_path}/nowhere/ckpt-1",
            mode="eval",
            untrained_eval=False,
        )
    assert "needs a trained" not in str(raised.value)


def test_unset_schedule_lengths_follow_train_steps():
    params = train.build_params(LM, params_override="trainer.train_steps=500", mode=None)
    optimization = params.trainer.optimizer_config
    assert optimization.learning_rate.polynomial.decay_steps == 500
    assert optimization.warmup.polynomial.warmup_steps == 50
    params = train.build_params(
        LM,
        params_override="trainer.train_steps=500,"
        "trainer.optimizer_config.learning_rate.polynomial.decay_steps=80",
        mode=None,
    )
    assert params.trainer.optimizer_config.learning_rate.polynomial.decay_steps == 80


@pytest.mark.parametrize(
    "override, message",
    [
        ("task.model.dropout_rate=high", r"task.model.dropout_rate must be a number; got 'high'"),
        ("task.train_data.is_training=3", r"task.train_data.is_training must be true or false"),
        ("task.model.hidden_size=64.5", r"task.model.hidden_size must be an integer; got 64.5"),
        ("trainer.validation_steps=-2", r"or -1 for the whole validation set; got -2"),
        ("trainer.checkpoint_interval=0", r"trainer.checkpoint_interval must be a positive int"),
        ("task.model.max_sequence_length=-1", r"max_sequence_length must be a positive int"),
        ({"task": {"model": {"hidden_size": None}}}, r"hidden_size must be a positive int; got"),
        ({"trainer": {"validation_steps": None}}, r"validation_steps must be a positive int"),
        ("trainer.validation_interval=-1", r"or 0 to evaluate at the end only; got -1"),
    ],
)
def test_overrides_of_the_wrong_type_or_range_are_named(override, message):
    with pytest.raises(train.ConfigError, match=message):
        train.build_params(LM, params_override=override, mode=None)


def test_an_int_is_accepted_for_a_float_field_and_0_for_validation_interval():
    params = train.build_params(
        LM, params_override="task.model.dropout_rate=0,trainer.validation_interval=0"
    )
    assert params.task.model.dropout_rate == 0
    params = train.build_params(
        LM, params_override={"task": {"model": {"intermediate_size": None}}}
    )
    assert params.task.model.intermediate_size is None  # The LM's derived default.


def test_the_config_alone_is_built_without_its_data(tmp_path):
    nowhere = tmp_path / "nowhere"
    params = train.build_params(LM, [TINY_LM], data_dir=str(nowhere))
    assert params.task.train_data.input_path == f"{nowhere}/austen/lm_train.tfrecord"
    with pytest.raises(train.ConfigError, match=r"austen"):
        train.build_params(LM, [TINY_LM], data_dir=str(nowhere), mode="train")


def test_the_data_a_mode_reads_must_be_named():
    with pytest.raises(train.ConfigError, match=r"task.validation_data has no input_path"):
        train.build_params(LM, mode="eval")
    train.build_params(LM, mode=None)  # Nothing read: the config alone.


def test_print_config_prints_the_config_a_run_would_use(capsys):
    code = cli.main(
        ["train", "--experiment", LM, "--print-config"]
        + ["--params-override", "task.model.num_layers=3,trainer.train_steps=7"]
    )
    assert code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    expected = train.build_params(
        LM, params_override="task.model.num_layers=3,trainer.train_steps=7", mode=None
    )
    assert printed == yaml.safe_load(yaml.safe_dump(expected.as_dict()))
    assert printed["task"]["model"]["num_layers"] == 3
    assert printed["trainer"]["optimizer_config"]["learning_rate"]["polynomial"]["decay_steps"] == 7


def test_an_evaluation_restores_the_weights_without_warnings_about_the_rest(tmp_path, caplog):
    weights, slot = tf.Variable([1.0, 2.0]), tf.Variable([3.0])
    path = tf.train.Checkpoint(model=tf.train.Checkpoint(w=weights), optimizer=slot).save(
        str(tmp_path / "ckpt")
    )
    restored = tf.Variable([0.0, 0.0])
    checkpoint = train._ReadWeightsCheckpoint(model=tf.train.Checkpoint(w=restored))
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        checkpoint.restore(path)
        del checkpoint
        gc.collect()
    assert restored.numpy().tolist() == [1.0, 2.0]
    assert not [r for r in caplog.records if "restored" in r.getMessage()]
    # A model_dir that `save_model_dir` wrote holds the model alone: no step, no optimizer.
    alone = tf.train.Checkpoint(model=tf.train.Checkpoint(w=weights)).save(str(tmp_path / "alone"))
    restored.assign([0.0, 0.0])
    train._ReadWeightsCheckpoint(
        global_step=tf.Variable(0),
        model=tf.train.Checkpoint(w=restored),
        optimizer=tf.train.Checkpoint(iterations=tf.Variable(0)),
    ).restore(alone)
    assert restored.numpy().tolist() == [1.0, 2.0]
    other = train._ReadWeightsCheckpoint(model=tf.train.Checkpoint(v=tf.Variable([0.0])))
    with pytest.raises(CheckpointError, match=r"does not hold this model's weights \(1 of"):
        other.restore(path)


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    from headsize_tf.cli import params

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(params, "run", interrupted)
    assert cli.main(["params"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "headsize-tf params: interrupted"


def test_ctrl_c_re_raised_by_tensorflow_is_one_line_too(monkeypatch, capsys):
    from headsize_tf.cli import params

    def interrupted(args):
        raise RuntimeError("error_already_set: ORIGINAL OpError REPLACED BY KeyboardInterrupt")

    monkeypatch.setattr(params, "run", interrupted)
    assert cli.main(["params"]) == 130
    assert capsys.readouterr().err.strip() == "headsize-tf params: interrupted"

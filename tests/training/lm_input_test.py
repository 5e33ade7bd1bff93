"""The LM task's training input: batches are drawn from the whole prepared file."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from headsize_tf.configs import language_modeling
from headsize_tf.experiments.reproduction.plan import plan
from headsize_tf.experiments.reproduction.presets import PRESETS
from headsize_tf.experiments.reproduction.runners import _override
from headsize_tf.tasks import language_modeling as lm_task

WINDOWS, LENGTH = 3000, 8


def ordered_file(path) -> str:
    """Windows in file order; window i starts with tokens (i // 100, i % 100)."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(WINDOWS):
            ids = [i // 100, i % 100] + [1] * (LENGTH - 1)
            feature = {"input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids))}
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    return str(path)


def first_batch_windows(config: language_modeling.LMDataConfig) -> np.ndarray:
    task = lm_task.LanguageModelingTask(language_modeling.LanguageModelingConfig())
    inputs, _ = next(iter(task.build_inputs(config)))
    return inputs.numpy()[:, 0] * 100 + inputs.numpy()[:, 1]


def test_the_default_buffer_shuffles_across_the_file_the_grid_keeps_100(tmp_path):
    path = ordered_file(tmp_path / "lm_train.tfrecord")
    fields = dict(
        input_path=path, seq_length=LENGTH, global_batch_size=32, is_training=True, seed=0
    )
    spread = first_batch_windows(language_modeling.LMDataConfig(**fields))
    assert spread.max() > 1000  # 32 draws below 1000 of 3000 windows: p = 3^-32.
    grid = _override(plan(PRESETS["cpu"])["R1"][0], PRESETS["cpu"], 1e-3, "valid", 1)["task"][
        "train_data"
    ]["shuffle_buffer_size"]
    assert grid == 100
    local = first_batch_windows(language_modeling.LMDataConfig(**fields, shuffle_buffer_size=grid))
    assert local.max() < grid + 32  # Model Garden's default: the first ~130 windows only.


def test_validation_reads_every_window_a_last_partial_batch_too(tmp_path):
    """3 windows, batches of 2: two batches (2 + 1), as the experiment's default validation data
    reads them (a set smaller than one batch gave no tokens, a perplexity of 1)."""
    path = tmp_path / "valid.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(3):
            ids = [i] * (LENGTH + 1)
            feature = {"input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids))}
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    default = language_modeling.LanguageModelingConfig().validation_data
    assert not default.is_training and not default.drop_remainder
    config = default.replace(input_path=str(path), seq_length=LENGTH, global_batch_size=2)
    task = lm_task.LanguageModelingTask(language_modeling.LanguageModelingConfig())
    sizes = [int(inputs.shape[0]) for inputs, _ in task.build_inputs(config)]
    assert sizes == [2, 1]

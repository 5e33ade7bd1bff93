"""Pruning an encoder run trained by `headsize-tf train` (compressing one: `reparam`).

A `headsize_bert/sentence_prediction` model_dir holds Model Garden's
`BertClassifier` (a `HeadsizeBertEncoder` and its trained classification
head), a `headsize_bert/pretraining` model_dir its `BertPretrainerV2` (the
encoder and its masked-LM head), each with the config of its data. Here the
encoder's heads are pruned on that data (importance from the task's loss on
training batches: classification or masked-LM cross entropy; dev accuracy or
validation masked-LM perplexity along the schedule; removal), or a
classifier's attention is converted into collaborative heads
(`headsize_tf.reparam.classifier_dir`), and the result is written as an ordinary
model_dir: the encoder's config lists the kept heads per layer (or the
collaborative spec) and the trained head is kept, so `train --mode eval`,
`export --model-dir` and a further `prune` read it like any other run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from headsize_tf.core.prune_loop import PruneSchedule, prune_loop
from headsize_tf.pruning.adapter import KerasModelAdapter
from headsize_tf.pruning.importance import mask_importance
from headsize_tf.pruning.language_model import REPORT_FILE, plot_report, save_model_dir
from headsize_tf.pruning.remove import copy_weights_outside, remove_heads
from headsize_tf.pruning.schedule import check_output, split_config
from headsize_tf.training.evaluation import perplexity

EXPERIMENT = "headsize_bert/sentence_prediction"
MASKED_LM = "headsize_bert/pretraining"


def load(model_dir: str | os.PathLike, experiments: tuple[str, ...] = (EXPERIMENT,)):
    """(params, model, its HeadsizeBertEncoder) of a run of one of `experiments` (a
    sentence_prediction run's BertClassifier, a pretraining run's BertPretrainerV2)."""
    from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
    from headsize_tf.training import train

    marker = pathlib.Path(model_dir) / train.EXPERIMENT_FILE
    if marker.exists() and json.loads(marker.read_text())["experiment"] not in experiments:
        raise ValueError(f"{model_dir} is not a {' or '.join(experiments)} model_dir.")
    params, model = train.load_trained_model(str(model_dir))
    encoder = getattr(model, "checkpoint_items", {}).get("encoder")
    if not isinstance(encoder, HeadsizeBertEncoder):
        raise ValueError(f"{model_dir} has no HeadsizeBertEncoder.")
    return params, model, encoder


def masked_lm_batches(params, split: str, batches: int) -> list[tuple[dict, dict]]:
    """(features, features) batches of a pretraining run's data: the masked positions,
    ids and weights are both inputs and targets."""
    from official.core import task_factory

    task = task_factory.get_task(params.task)
    config = split_config(params, split)
    out = []
    for features in task.build_inputs(config).take(batches):
        features = {k: v.numpy() for k, v in features.items()}
        out.append((features, features))
    return out


def masked_lm_loss(targets: dict, outputs: dict) -> tf.Tensor:
    """Mean cross entropy over the masked positions (weights 0 are padding)."""
    loss = tf_keras.losses.sparse_categorical_crossentropy(
        targets["masked_lm_ids"], tf.cast(outputs["mlm_logits"], tf.float32), from_logits=True
    )
    weights = tf.cast(targets["masked_lm_weights"], tf.float32)
    return tf.reduce_sum(loss * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def masked_lm_perplexity(model: tf_keras.Model, data) -> float:
    """exp of the mean cross entropy over every masked position of `data` (its
    `masked_lm_batches`; weight 0 is padding): `training.evaluation.perplexity`."""
    batches = ((f, f["masked_lm_ids"], f["masked_lm_weights"]) for f, _ in data)
    return perplexity(model, batches, logits_key="mlm_logits")


def classifier_batches(params, split: str, batches: int) -> list[tuple[dict, np.ndarray]]:
    from official.core import task_factory

    task = task_factory.get_task(params.task)
    config = split_config(params, split)
    out = []
    for element in task.build_inputs(config).take(batches):
        # Model Garden's sentence data yields one dict, the labels under "label_ids".
        features, labels = element if isinstance(element, tuple) else (element, None)
        labels = features["label_ids"] if labels is None else labels
        features = {k: v.numpy() for k, v in features.items() if k != "label_ids"}
        out.append((features, np.asarray(labels).reshape(-1)))
    return out


def accuracy(model: tf_keras.Model, data) -> float:
    @tf.function(reduce_retracing=True, autograph=False)
    def predict(features):
        return tf.argmax(model(features, training=False), axis=-1, output_type=tf.int32)

    right = sum(int(np.sum(predict(f).numpy() == y)) for f, y in data)
    return right / max(sum(len(y) for _, y in data), 1)


@dataclasses.dataclass(frozen=True)
class _Objective:
    """What an encoder run is pruned on: its batches, its loss and its dev metric."""

    batches: Any
    loss: Any
    metric: Any
    metric_name: str


OBJECTIVES = {
    EXPERIMENT: _Objective(
        classifier_batches,
        tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        accuracy,
        "accuracy",
    ),
    MASKED_LM: _Objective(masked_lm_batches, masked_lm_loss, masked_lm_perplexity, "perplexity"),
}


def importance(model, encoder, data, normalize: bool = True, loss=None) -> np.ndarray:
    """`[layers, heads]` importance in the original head numbering (removed heads NaN),
    from `loss` (default: the classification loss)."""
    loss = loss or OBJECTIVES[EXPERIMENT].loss
    return mask_importance(model, data, loss, encoder, normalize=normalize)


def rebuild_with_encoder(params, model, new_encoder):
    """(params, model, task.model override) of `model` (a Model Garden model with a
    `HeadsizeBertEncoder` under `checkpoint_items["encoder"]`: a classifier, a masked-LM
    pretrainer) rebuilt around `new_encoder` (pruned, collaborative), every weight outside
    the encoder (the task's head) copied."""
    from official.core import task_factory

    from headsize_tf.configs.encoders import fields_from_encoder_config
    from headsize_tf.training import train

    override = {"encoder": {"any": fields_from_encoder_config(new_encoder.get_config())}}
    params = params.replace(task={"model": override})
    rebuilt = task_factory.get_task(params.task).build_model()
    train.build_heads(rebuilt)
    target = rebuilt.checkpoint_items["encoder"]
    target.set_weights(new_encoder.get_weights())
    copy_weights_outside(model, rebuilt, [model.checkpoint_items["encoder"]], [target])
    return params, rebuilt, override


def save_classifier_dir(
    params,
    model,
    new_encoder,
    output,
    report: dict[str, Any],
    overwrite: bool = False,
    experiment: str = EXPERIMENT,
) -> pathlib.Path:
    """Writes `model`'s head (classification, masked LM) on `new_encoder` as a model_dir."""
    params, rebuilt, override = rebuild_with_encoder(params, model, new_encoder)
    return save_model_dir(
        params,
        rebuilt,
        output,
        experiment,
        override,
        {REPORT_FILE: json.dumps(report, indent=2)},
        overwrite=overwrite,
    )


class ModelDirAdapter(KerasModelAdapter):
    """A `headsize_bert` run (classifier or masked-LM pretrainer) as a `ModelAdapter`.

    Args:
      params: The run's config.
      model: Its Model Garden model (`checkpoint_items["encoder"]` a `HeadsizeBertEncoder`).
      experiment: `EXPERIMENT` or `MASKED_LM` (the loss and the dev metric).
      train_data, dev_data: Importance and dev batches of the run's data.
      source: The model_dir.
      override: The `task.model` override of a rebuilt model (None: as trained).

    Example:

    >>> params, model, _ = load("runs/cls")
    >>> adapter = ModelDirAdapter(params, model, EXPERIMENT, train_data, dev_data, "runs/cls")
    """

    report_file = REPORT_FILE

    def __init__(self, params, model, experiment, train_data, dev_data, source, override=None):
        self.objective = OBJECTIVES[experiment]
        super().__init__(
            model, model.checkpoint_items["encoder"], self.objective.loss, train_data, source
        )
        self.metric_name = self.objective.metric_name
        self.params, self.experiment, self.dev_data = params, experiment, dev_data
        self.override = override

    def evaluate(self) -> dict[str, float]:
        return {self.metric_name: self.objective.metric(self.model, self.dev_data)}

    def remove_heads(self, mask: np.ndarray) -> ModelDirAdapter:
        params, rebuilt, override = rebuild_with_encoder(
            self.params, self.model, remove_heads(self.attention, mask)
        )
        return self._like(params, rebuilt, override)

    def _like(self, params, model, override=None) -> ModelDirAdapter:
        return ModelDirAdapter(
            params,
            model,
            self.experiment,
            self.importance_data,
            self.dev_data,
            self.source,
            override,
        )

    def save(self, output, report, overwrite: bool = False) -> pathlib.Path:
        return save_model_dir(
            self.params,
            self.model,
            output,
            self.experiment,
            self.override,
            {REPORT_FILE: json.dumps(report, indent=2)},
            overwrite=overwrite,
        )

    def reload(self, path) -> ModelDirAdapter:
        params, model, _ = load(path, (self.experiment,))
        return self._like(params, model)


def prune_classifier_dir(
    model_dir: str | os.PathLike,
    output: str | os.PathLike,
    *,
    target_fraction: float = 0.5,
    step: float = 0.1,
    recompute: bool = True,
    min_heads_per_layer: int = 1,
    importance_batches: int = 16,
    eval_batches: int = 32,
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Importance, dev-metric curve and removal for an encoder run's model_dir.

    A sentence_prediction run is pruned on its classification loss with dev
    accuracy along the schedule (report keys `*_accuracy`); a masked-LM
    pretraining run on its masked-LM loss with validation masked-LM
    perplexity (`*_perplexity`). The task's head is kept. The report is
    `core.prune_loop`'s, with `experiment` and the encoder's `pruned_heads`.
    """
    from headsize_tf.training import train

    check_output(output, overwrite)
    params, model, _ = load(model_dir, tuple(OBJECTIVES))
    experiment = train.experiment_of(model_dir)
    objective = OBJECTIVES[experiment]
    adapter = ModelDirAdapter(
        params,
        model,
        experiment,
        objective.batches(params, "train", importance_batches),
        objective.batches(params, "validation", eval_batches),
        str(model_dir),
    )

    def extras(report: dict[str, Any], pruned: ModelDirAdapter) -> None:
        report["experiment"] = experiment
        # Original numbering, from the report's record (the rebuilt encoder's config holds
        # the per-layer head counts, not the numbers).
        kept = report["kept_heads"]
        report["pruned_heads"] = [
            sorted(set(before) - set(after))
            for before, after in zip(kept["original"], kept["pruned"], strict=True)
        ]

    schedule = PruneSchedule(target_fraction, step, recompute, min_heads_per_layer)
    report = prune_loop(
        adapter, schedule.with_progress(progress), output, overwrite=overwrite, extras=extras
    )
    if adapter.metric_name == "accuracy":
        plot_report(report, output, metric="metric", label="dev accuracy (%)", scale=100)
    else:
        plot_report(report, output, metric="metric", label="validation masked-LM perplexity")
    return report


__all__ = ["ModelDirAdapter", "prune_classifier_dir"]

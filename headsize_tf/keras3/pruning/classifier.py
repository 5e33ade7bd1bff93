"""Prune a Keras 3 sentence classifier on a labelled text task (`prune --framework keras3`).

The Keras 3 counterpart of `headsize_tf.pruning.prune`: a `SentenceEncoder`'s
backbone gets a linear head on its pooled output and is fine-tuned with
`model.fit`; heads are scored by E|dL/dxi_h| (`head_importance`, the backend's
own gradients), pruned `step` of all heads at a time by the shared driver
(`headsize_tf.core.prune_loop`, through `Keras3ClassifierAdapter`), and the final mask is
removed physically (`remove_heads`: per-layer head counts). The output
directory holds the pruned `SentenceEncoder` checkpoint, the classifier head,
`report.json` and `label_map.json`, written atomically.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

import keras
import numpy as np

from headsize_tf.core.io import atomic_directory, check_output_free
from headsize_tf.core.prune_loop import PruneSchedule, prune_loop
from headsize_tf.keras3.lm_training import build_optimizer
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone
from headsize_tf.keras3.pretrained import SentenceEncoder
from headsize_tf.keras3.pruning.importance import head_importance
from headsize_tf.keras3.pruning.remove import head_mask, remove_heads, set_head_mask

REPORT_FILE = "report.json"
HEAD_FILE = "classifier_head.npz"
LABEL_MAP_FILE = "label_map.json"


def classifier(backbone: BertBackbone, num_classes: int, dropout: float = 0.1) -> keras.Model:
    """A functional classifier: `backbone`'s pooled output -> dropout -> logits ("logits")."""
    pooled = backbone.output["pooled_output"]
    pooled = keras.layers.Dropout(dropout, name="head_dropout")(pooled)
    logits = keras.layers.Dense(num_classes, name="logits")(pooled)
    return keras.Model(backbone.input, logits, name="classifier")


def with_backbone(model: keras.Model, backbone: BertBackbone) -> keras.Model:
    """The same classifier head (shared weights) on another backbone."""
    logits = model.get_layer("logits")(backbone.output["pooled_output"])
    return keras.Model(backbone.input, logits, name="classifier")


def batches(
    inputs: Mapping[str, np.ndarray], labels: np.ndarray, batch_size: int = 32
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """Deterministic `(inputs, labels)` batches."""
    for start in range(0, len(labels), batch_size):
        yield (
            {k: v[start : start + batch_size] for k, v in inputs.items()},
            labels[start : start + batch_size],
        )


def accuracy(model: keras.Model, inputs: Mapping[str, np.ndarray], labels: np.ndarray) -> float:
    """Accuracy of `model`'s argmax over `inputs`."""
    logits = model.predict(dict(inputs), batch_size=64, verbose=0)
    return float(np.mean(np.argmax(logits, axis=-1) == labels))


@dataclasses.dataclass
class PruneSettings:
    """Settings of `prune_classifier` (the CLI's flags)."""

    target_fraction: float = 0.5
    step: float = 0.1
    recompute: bool = True
    min_heads_per_layer: int = 1
    finetune_epochs: float = 2.0
    learning_rate: float = 5e-5
    batch_size: int = 32
    importance_examples: int = 1024
    max_seq_length: int = 64
    seed: int = 0


def prune_classifier(
    encoder: SentenceEncoder,
    task: Any,
    output: str | os.PathLike,
    settings: PruneSettings | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    model: keras.Model | None = None,
    adapter_class: type[Keras3ClassifierAdapter] | None = None,
) -> dict[str, Any]:
    """Fine-tunes, scores, prunes and removes heads; writes `output`; returns the report.

    Args:
      encoder: A Keras 3 `SentenceEncoder` (pretrained, compressed or pruned),
        or an object with its `backbone`, `tokenize`, `with_backbone` and
        `source` (a keras-hub `HubModel`).
      task: A `headsize_tf.data.text_tasks.TextTask` (single texts).
      output: Output directory (see the module doc).
      settings: `PruneSettings`.
      overwrite: Replace an existing `output`.
      progress: Show the pruning progress bar.
      model: The classifier to fine-tune, on `encoder.backbone` with a
        "logits" layer (default: `classifier(encoder.backbone, num_classes)`,
        a new head).
      adapter_class: The adapter wrapping it, whose `save` / `reload` define
        the output (default `Keras3ClassifierAdapter`).

    Example:

    >>> report = prune_classifier(encoder, load_task(data_file="reviews.csv"), "pruned")
    >>> report["accuracy"]["pruned"], report["heads_per_layer"]
    """
    settings = settings or PruneSettings()
    output = pathlib.Path(output)
    check_output_free(output, overwrite)
    if task.is_pair:
        raise ValueError(
            f"{task.source}: sentence pairs ({', '.join(task.text_columns)}) are not supported "
            "with --framework keras3 yet; use the tf_keras front."
        )
    if settings.importance_examples <= 0:
        raise ValueError(
            f"importance_examples must be positive; got {settings.importance_examples}."
        )
    keras.utils.set_random_seed(settings.seed)
    length = settings.max_seq_length
    x_train = encoder.tokenize(task.train_texts, max_seq_length=length)
    x_dev = encoder.tokenize(task.dev_texts, max_seq_length=length)
    y_train, y_dev = np.asarray(task.train_labels), np.asarray(task.dev_labels)
    n_importance = min(settings.importance_examples, len(y_train))
    x_importance = {k: v[:n_importance] for k, v in x_train.items()}
    y_importance = y_train[:n_importance]

    backbone = encoder.backbone
    model = model if model is not None else classifier(backbone, task.num_classes)
    model.compile(
        optimizer=keras.optimizers.AdamW(settings.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    start = time.perf_counter()
    if settings.finetune_epochs > 0:
        build_optimizer(model)  # Before `fit` traces its step (see its docstring).
        steps = max(1, math.ceil(settings.finetune_epochs * len(y_train) / settings.batch_size))
        per_epoch = math.ceil(len(y_train) / settings.batch_size)
        epochs = math.ceil(steps / per_epoch)
        limit = min(len(y_train), steps * settings.batch_size) if epochs == 1 else len(y_train)
        model.fit(
            {k: v[:limit] for k, v in x_train.items()},
            y_train[:limit],
            batch_size=settings.batch_size,
            epochs=epochs,
            verbose=0,
            shuffle=True,
        )
    finetune_seconds = time.perf_counter() - start

    adapter = (adapter_class or Keras3ClassifierAdapter)(
        encoder, model, (x_importance, y_importance), (x_dev, y_dev), task.label_map
    )

    def extras(report: dict[str, Any], pruned: Keras3ClassifierAdapter) -> None:
        report.update(
            framework="keras3",
            backend=keras.backend.backend(),
            data=task.describe() if hasattr(task, "describe") else task.source,
            settings=dataclasses.asdict(settings),
            finetune_seconds=finetune_seconds,
            heads_per_layer=list(pruned.backbone.attention_spec.num_heads),
            label_map=task.label_map,
        )

    schedule = PruneSchedule(
        settings.target_fraction,
        settings.step,
        settings.recompute,
        settings.min_heads_per_layer,
        progress=progress,
    )
    return prune_loop(adapter, schedule, output, overwrite=overwrite, extras=extras)


class Keras3ClassifierAdapter:
    """A Keras 3 classifier over a `SentenceEncoder`'s backbone as a `ModelAdapter`.

    Args:
      encoder: The `SentenceEncoder` (its backbone is pruned; it is saved).
      model: The classifier (`classifier(encoder.backbone, ...)`).
      importance_data: `(inputs, labels)` of the importance examples.
      dev_data: `(inputs, labels)` of the dev accuracy.
      label_map: {label: class id}, saved with the model.

    Example:

    >>> adapter = Keras3ClassifierAdapter(encoder, model, (x, y), (x_dev, y_dev), labels)
    >>> prune_loop(adapter, PruneSchedule(target_fraction=0.4), "out")
    """

    metric_name = "accuracy"
    report_file = REPORT_FILE

    def __init__(self, encoder, model, importance_data, dev_data, label_map):
        self.encoder, self.model, self.backbone = encoder, model, encoder.backbone
        self.importance_data, self.dev_data, self.label_map = importance_data, dev_data, label_map
        self.source = str(encoder.source)

    def attention_kinds(self) -> list[str]:
        return ["self"] * len(self.backbone.attention_layers)

    def original_heads(self) -> list[list[int]]:
        mask = self.head_mask()
        return [[h if np.isfinite(v) else -1 for h, v in enumerate(row)] for row in mask]

    def head_mask(self) -> np.ndarray:
        return head_mask(self.backbone)

    def set_head_mask(self, mask: np.ndarray) -> None:
        set_head_mask(self.backbone, np.nan_to_num(np.asarray(mask, np.float32), nan=0.0))

    def head_importance(self) -> np.ndarray:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        data = batches(*self.importance_data)
        return head_importance(self.model, data, loss, layers=self.backbone.attention_layers)

    def evaluate(self) -> dict[str, float]:
        return {"accuracy": accuracy(self.model, *self.dev_data)}

    def count_params(self) -> int:
        return int(self.backbone.count_params())

    def remove_heads(self, mask: np.ndarray) -> Keras3ClassifierAdapter:
        backbone = remove_heads(self.backbone, mask)
        model = with_backbone(self.model, backbone)
        return self._like(self.encoder.with_backbone(backbone), model)

    def _like(self, encoder, model) -> Keras3ClassifierAdapter:
        return type(self)(encoder, model, self.importance_data, self.dev_data, self.label_map)

    def save(self, output, report, overwrite: bool = False) -> pathlib.Path:
        _save(self.encoder, self.model, report, pathlib.Path(output), overwrite)
        return pathlib.Path(output)

    def reload(self, path) -> Keras3ClassifierAdapter:
        from headsize_tf.keras3.pretrained import load_sentence_encoder

        encoder = load_sentence_encoder(checkpoint=path)
        return self._like(encoder, load_classifier(path, encoder))


def _save(encoder, model, report, output: pathlib.Path, overwrite: bool) -> None:
    with atomic_directory(output, overwrite=overwrite) as written:
        encoder.write_into(written)
        kernel, bias = (keras.ops.convert_to_numpy(w) for w in model.get_layer("logits").weights)
        np.savez(written / HEAD_FILE, kernel=kernel, bias=bias)
        (written / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
        (written / LABEL_MAP_FILE).write_text(
            json.dumps(report["label_map"], indent=2, ensure_ascii=False) + "\n"
        )


def load_classifier(directory: str | os.PathLike, encoder: SentenceEncoder | None = None):
    """The pruned classifier written by `prune_classifier` (backbone + saved head);
    `encoder`: its `SentenceEncoder`, if already loaded."""
    from headsize_tf.keras3.pretrained import load_sentence_encoder

    directory = pathlib.Path(directory)
    encoder = encoder or load_sentence_encoder(checkpoint=directory)
    head = np.load(directory / HEAD_FILE)
    model = classifier(encoder.backbone, head["kernel"].shape[1])
    model.get_layer("logits").set_weights([head["kernel"], head["bias"]])
    return model

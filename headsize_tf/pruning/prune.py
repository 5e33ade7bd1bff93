"""`headsize-tf prune`: importance, an iterative pruning curve, and a smaller model.

Works on a `SentenceClassifier` (pretrained encoder + pooling + linear head)
fine-tuned on a labelled sentence (or sentence-pair) task: the built-in
Rotten Tomatoes sentiment data, a CSV / TSV / JSONL file or a TFDS GLUE task
(`headsize_tf.data.text_tasks`). The pruned encoder is written with its heads
physically removed, with `report.json`, `label_map.json` and two plots.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

import numpy as np
import tf_keras

from headsize_tf.core.prune_loop import PruneSchedule, curve_points, prune_curve, prune_loop
from headsize_tf.core.prune_report import scores_from_json
from headsize_tf.data.text_tasks import TextTask, TextTaskError, load_task
from headsize_tf.pretrained import SentenceEncoder
from headsize_tf.pruning.adapter import KerasModelAdapter
from headsize_tf.pruning.importance import mask_importance
from headsize_tf.pruning.remove import remove_heads
from headsize_tf.pruning.report import plot_curves, plot_importance
from headsize_tf.pruning.schedule import check_output
from headsize_tf.training import finetune as ft

HEAD_FILE = "classifier_head.npz"
REPORT_FILE = "report.json"
LABEL_MAP_FILE = "label_map.json"


@dataclasses.dataclass
class TaskData:
    """Tokenised examples of a sentence classification task."""

    train: tuple[list[str], np.ndarray]
    importance_ids: list[np.ndarray]
    importance_labels: np.ndarray
    eval_ids: list[np.ndarray]
    eval_labels: np.ndarray
    num_classes: int


def task_data(
    encoder: SentenceEncoder,
    splits: dict[str, tuple[list, np.ndarray]],
    importance_examples: int = 1024,
    max_seq_length: int = 64,
    num_classes: int | None = None,
) -> TaskData:
    """Importance on the first `importance_examples` train examples; metric on dev.

    Args:
      encoder: Tokenises the texts.
      splits: {"train": (texts, labels), "dev": (texts, labels)}; texts are
        strings or (text, text) pairs.
      importance_examples: Train examples the importance is averaged over.
      max_seq_length: Tokens per example.
      num_classes: Labels (default: the largest label + 1).
    """
    if importance_examples <= 0:
        raise ValueError(f"importance_examples must be positive; got {importance_examples}.")
    texts, labels = splits["train"]
    if not texts or not splits["dev"][0]:
        raise ValueError("The task has no training or no dev examples.")
    return TaskData(
        train=splits["train"],
        importance_ids=ft.tokenize_all(encoder, texts[:importance_examples], max_seq_length),
        importance_labels=labels[:importance_examples],
        eval_ids=ft.tokenize_all(encoder, splits["dev"][0], max_seq_length),
        eval_labels=splits["dev"][1],
        num_classes=num_classes or int(max(labels.max(), splits["dev"][1].max()) + 1),
    )


def importance_batches(token_ids, labels, batch_size: int = 64):
    """Deterministic (inputs, labels) batches for `head_importance`."""
    for index in ft.length_batches(token_ids, batch_size):
        yield ft.pad_batch(token_ids, index), labels[index]


def classifier_importance(model: ft.SentenceClassifier, data: TaskData, normalize=True):
    """`[layers, num_attention_heads]` importance in the original head numbering.

    Heads already removed from the encoder (`pruned_heads`) are NaN.
    """
    batches = importance_batches(data.importance_ids, data.importance_labels)
    return mask_importance(model, batches, _LOSS, model.encoder, normalize=normalize)


_LOSS = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class SentenceClassifierAdapter(KerasModelAdapter):
    """A `SentenceClassifier` on a task's examples as a `ModelAdapter` (dev accuracy).

    Args:
      model: The classifier (its encoder's heads are pruned).
      data: `TaskData` of the task.
      source: The pretrained name or checkpoint.
      label_map: {label: class id}, saved with the model.

    Example:

    >>> adapter = SentenceClassifierAdapter(classifier, task_data(encoder, splits), "minilm-l6")
    >>> prune_loop(adapter, PruneSchedule(target_fraction=0.4), "out")
    """

    def __init__(self, model, data: TaskData, source: str = "", label_map=None):
        batches = list(importance_batches(data.importance_ids, data.importance_labels))
        super().__init__(model, model.encoder, _LOSS, batches, source)
        self.data, self.label_map = data, label_map

    def evaluate(self) -> dict[str, float]:
        return {"accuracy": ft.accuracy(self.model, self.data.eval_ids, self.data.eval_labels)}

    def remove_heads(self, mask: np.ndarray) -> SentenceClassifierAdapter:
        pruned = with_encoder(self.model, remove_heads(self.model.encoder, mask))
        return self._like(pruned)

    def _like(self, model) -> SentenceClassifierAdapter:
        new = SentenceClassifierAdapter.__new__(SentenceClassifierAdapter)
        KerasModelAdapter.__init__(
            new, model, model.encoder, _LOSS, self.importance_data, self.source
        )
        new.data, new.label_map = self.data, self.label_map
        return new

    def save(self, output, report, overwrite: bool = False) -> pathlib.Path:
        return save_pruned(self.model, output, report, overwrite, self.label_map)

    def reload(self, path) -> SentenceClassifierAdapter:
        return self._like(load_classifier(path))


def pruning_curve(
    model: ft.SentenceClassifier,
    data: TaskData,
    *,
    target_fraction: float,
    step: float,
    mode: str = "importance",
    recompute: bool = False,
    min_heads_per_layer: int = 0,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Dev accuracy vs fraction of heads pruned (masking; the model is restored after).

    `mode` "importance" uses `head_importance` (recomputed after each step
    if `recompute`); "random" prunes uniformly random heads (seeded). The
    points are `core.prune_loop.curve_points`.
    """
    if mode not in ("importance", "random"):
        raise ValueError(f"mode must be 'importance' or 'random'; got {mode!r}.")
    adapter = SentenceClassifierAdapter(model, data)
    schedule = PruneSchedule(
        target_fraction,
        step,
        recompute,
        min_heads_per_layer,
        random_seed=seed if mode == "random" else None,
        progress=progress,
    )
    return curve_points(adapter, prune_curve(adapter, schedule))


def save_pruned(
    model: ft.SentenceClassifier,
    output: str | os.PathLike,
    report: dict[str, Any],
    overwrite: bool = False,
    label_map: dict[str, int] | None = None,
) -> pathlib.Path:
    """Writes encoder checkpoint + classifier head + report (+ label map) atomically."""
    import io

    head = io.BytesIO()
    kernel, bias = (w.numpy() for w in model.head.weights)
    np.savez(head, kernel=kernel, bias=bias)
    encoder = model.sentence_encoder
    files: dict[str, str | bytes] = {
        REPORT_FILE: json.dumps(report, indent=2),
        HEAD_FILE: head.getvalue(),
    }
    if label_map is not None:
        files[LABEL_MAP_FILE] = json.dumps(label_map, indent=2, ensure_ascii=False)
    return encoder.save(output, overwrite=overwrite, extra_files=files)


def load_label_map(directory: str | os.PathLike) -> dict[str, int] | None:
    """{label: class id} saved by `save_pruned`, or None if the directory has none."""
    path = pathlib.Path(directory) / LABEL_MAP_FILE
    if not path.exists():
        return None
    return {str(k): int(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def load_classifier(directory: str | os.PathLike) -> ft.SentenceClassifier | None:
    """The classifier saved by `save_pruned`, or None if the directory has no head."""
    from headsize_tf.pretrained import load_sentence_encoder

    directory = pathlib.Path(directory)
    if not (directory / HEAD_FILE).exists():
        return None
    weights = np.load(directory / HEAD_FILE)
    encoder = load_sentence_encoder(checkpoint=directory)
    model = ft.SentenceClassifier(encoder, int(weights["bias"].shape[0]))
    model(ft.pad_batch([np.array(encoder.token_ids([""])[0])], np.arange(1)))
    model.head.set_weights([weights["kernel"], weights["bias"]])
    return model


def with_encoder(model: ft.SentenceClassifier, encoder) -> ft.SentenceClassifier:
    """The same classifier head on another (e.g. pruned) encoder."""
    sentence_encoder = model.sentence_encoder.with_encoder(encoder)
    new = ft.SentenceClassifier(sentence_encoder, model.head.units)
    new(ft.pad_batch([np.array(sentence_encoder.token_ids([""])[0])], np.arange(1)))
    new.head.set_weights(model.head.get_weights())
    return new


def prune_model(
    model: ft.SentenceClassifier,
    data: TaskData,
    output: str | os.PathLike,
    *,
    target_fraction: float = 0.5,
    step: float = 0.1,
    recompute: bool = True,
    min_heads_per_layer: int = 1,
    overwrite: bool = False,
    extra: dict[str, Any] | None = None,
    label_map: dict[str, int] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Importance, curve to `target_fraction`, physical removal; writes `output`.

    `label_map` ({label: class id}) goes into the report and `label_map.json`;
    `progress` shows a bar over the pruning steps. The report is
    `core.prune_loop`'s, with `extra`, `pruned_heads` and `label_map`.
    """
    output = pathlib.Path(output)
    check_output(output, overwrite)
    adapter = SentenceClassifierAdapter(model, data, (extra or {}).get("source", ""), label_map)

    def extras(report: dict[str, Any], pruned: SentenceClassifierAdapter) -> None:
        report.update(extra or {})
        report["pruned_heads"] = pruned.model.encoder.get_config()["pruned_heads"]
        if label_map is not None:
            report["label_map"] = label_map

    schedule = PruneSchedule(target_fraction, step, recompute, min_heads_per_layer)
    report = prune_loop(
        adapter, schedule.with_progress(progress), output, overwrite=overwrite, extras=extras
    )
    plot_importance(scores_from_json(report["importance"]), output / "importance.png")
    plot_curves(
        {"importance" + (" (recomputed)" if recompute else ""): report["curve"]},
        output / "curve.png",
        baseline=report["curve"][0]["metric"],
    )
    return report


def prune_task(
    output: str | os.PathLike,
    *,
    model: str | None = None,
    checkpoint: str | os.PathLike | None = None,
    task: str | None = None,
    data: str | None = None,
    data_dir: str | os.PathLike | None = None,
    data_file: str | os.PathLike | None = None,
    data_format: str | None = None,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    split_column: str | None = None,
    tfds: str | None = None,
    target_fraction: float = 0.5,
    step: float = 0.1,
    recompute: bool = True,
    min_heads_per_layer: int = 1,
    finetune_epochs: float = 2.0,
    importance_examples: int = 1024,
    overwrite: bool = False,
) -> dict[str, Any]:
    """`headsize-tf prune`: fine-tune if needed, then `prune_model` on a task's data.

    The data are the built-in `task`/`data` (sentiment / rotten_tomatoes, the
    default), a `data_file` with its columns, or a `tfds` GLUE task (see
    `load_task`); the label count and the label map saved with the model
    come from the data. The encoder is a registry `model` or a `checkpoint`
    directory; a checkpoint written by `prune` (with a classifier head) is
    pruned as it is (its label map must match), any other encoder is first
    fine-tuned on the task's train split for `finetune_epochs`. Returns the
    report `prune_model` writes to `output`.

    Args:
      output: Directory written (checkpoint, report.json, label_map.json, plots).
      model: A registered pretrained encoder (or `checkpoint`).
      checkpoint: A checkpoint directory (or `model`).
      task: Built-in task ("sentiment").
      data: Built-in data ("rotten_tomatoes").
      data_dir: Cache of the built-in data, or the TFDS data directory.
      data_file: A CSV / TSV / JSONL file of labelled texts.
      data_format: Its format, if not from the extension.
      text_column: Its text column (default "text").
      text_pair_column: Its second text column, for sentence pairs.
      label_column: Its label column (default "label").
      split_column: Its train/dev/test column (default: a hash split).
      tfds: A TFDS GLUE task ("glue/sst2", "glue/mnli", ...).
      target_fraction: Fraction of heads pruned at the end.
      step: Fraction of heads pruned per step.
      recompute: Recompute importance after each step.
      min_heads_per_layer: Heads every layer keeps.
      finetune_epochs: Epochs of fine-tuning before pruning.
      importance_examples: Train examples the importance is averaged over.
      overwrite: Replace an existing `output`.
    """
    from headsize_tf.pretrained import load_sentence_encoder

    check_output(output, overwrite)
    if step == 0:
        raise ValueError("step= must be a fraction in (0, 1); got 0.")
    text_task = load_task(
        task=task,
        data=data,
        data_dir=data_dir,
        data_file=data_file,
        data_format=data_format,
        text_column=text_column,
        text_pair_column=text_pair_column,
        label_column=label_column,
        split_column=split_column,
        tfds=tfds,
    )
    classifier = load_classifier(checkpoint) if checkpoint else None
    if classifier is None:
        encoder = load_sentence_encoder(model, checkpoint)
        config = dataclasses.replace(ft.FinetuneConfig(), epochs=finetune_epochs)
        classifier, _ = ft.finetune(
            encoder, text_task.splits()["train"], config, num_classes=text_task.num_classes
        )
    else:
        _check_head(checkpoint, classifier, text_task)
    examples = task_data(
        classifier.sentence_encoder,
        text_task.splits(),
        importance_examples,
        num_classes=text_task.num_classes,
    )
    return prune_model(
        classifier,
        examples,
        output,
        target_fraction=target_fraction,
        step=step,
        recompute=recompute,
        min_heads_per_layer=min_heads_per_layer,
        overwrite=overwrite,
        extra={
            "task": task
            or ("sentiment" if data_file is None and tfds is None else "classification"),
            "data": text_task.source,
            "data_info": text_task.describe(),
            "source": model or str(checkpoint),
        },
        label_map=text_task.label_map,
    )


def _check_head(checkpoint, classifier: ft.SentenceClassifier, text_task: TextTask) -> None:
    """A checkpoint's classifier head must fit the task's labels."""
    units = classifier.head.units
    if units != text_task.num_classes:
        raise TextTaskError(
            f"Checkpoint {checkpoint} has a classifier head of {units} classes; the task "
            f"{text_task.source} has {text_task.num_classes} labels {list(text_task.label_names)}."
        )
    saved = load_label_map(checkpoint)
    if saved is not None and saved != text_task.label_map:
        raise TextTaskError(
            f"Checkpoint {checkpoint} was trained with the labels {saved}; the task "
            f"{text_task.source} has {text_task.label_map}."
        )

"""Head pruning of a trained causal language model (Michel et al. 2019, on an LM).

The importance of head h is E|dL/dxi_h| of the LM loss (next-token cross
entropy on training windows), normalised per layer; heads are pruned `step`
of all heads at a time (importance recomputed after each step by default)
while the validation perplexity is recorded; the pruned heads are then
removed from the weights. The result is an ordinary `headsize-tf train`
model_dir: its `params.yaml` lists the kept heads per layer (and each layer's
head size, so standard heads become fixed-head layers of their original
size), so it reloads, exports, decodes with the cache and trains further
like any other.

Example:

>>> report = prune_language_model("runs/lm", "runs/lm_pruned", target_fraction=0.3)
>>> report["perplexity"]["pruned"], report["decoding_tokens_per_second"]
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from headsize_tf.core.io import atomic_directory
from headsize_tf.core.prune_loop import PruneSchedule, prune_loop
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.pruning.adapter import KerasModelAdapter
from headsize_tf.pruning.importance import mask_importance
from headsize_tf.pruning.remove import (
    copy_kept_heads,
    copy_weights_outside,
    mask_kept,
    physical_keep,
)
from headsize_tf.pruning.report import decoding_speed, plot_report  # noqa: F401  (re-exported)
from headsize_tf.pruning.schedule import check_min_heads, check_output
from headsize_tf.training.evaluation import perplexity

REPORT_FILE = "pruning_report.json"


@dataclasses.dataclass
class LMData:
    """Batches of (inputs [B, T], next-token targets [B, T]) from packed LM windows."""

    importance: list[tuple[np.ndarray, np.ndarray]]
    evaluation: list[tuple[np.ndarray, np.ndarray]]


def read_windows(path: str, seq_length: int, limit: int) -> np.ndarray:
    """The first `limit` windows of `seq_length + 1` token ids of an LM TFRecord file."""
    spec = {"input_ids": tf.io.FixedLenFeature([seq_length + 1], tf.int64)}
    files = tf.io.gfile.glob(path)
    if not files:
        raise ValueError(f"No LM data at {path!r}; prepare it (headsize-tf data prepare).")
    rows = [
        tf.io.parse_single_example(record, spec)["input_ids"].numpy()
        for record in tf.data.TFRecordDataset(files).take(limit)
    ]
    if not rows:
        raise ValueError(f"The LM data at {path!r} is empty.")
    return np.stack(rows).astype(np.int32)


def batches(windows: np.ndarray, batch_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (windows[i : i + batch_size, :-1], windows[i : i + batch_size, 1:])
        for i in range(0, len(windows), batch_size)
    ]


# Windows per batch of an LM model_dir's importance and perplexity.
LM_BATCH = 32


def lm_data(
    params, importance_windows: int = 256, eval_windows: int = 256, batch_size: int = LM_BATCH
) -> LMData:
    """Importance on the first training windows, perplexity on the validation windows."""
    n = params.task.train_data.seq_length
    train = read_windows(params.task.train_data.input_path, n, importance_windows)
    valid = read_windows(params.task.validation_data.input_path, n, eval_windows)
    return LMData(batches(train, batch_size), batches(valid, batch_size))


_LOSS = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def head_counts(lm: HeadsizeCausalLM) -> list[int]:
    return [layer.num_heads for layer in lm.attention_layers]


def lm_importance(
    lm: HeadsizeCausalLM, data: Sequence[tuple[np.ndarray, np.ndarray]], normalize: bool = True
) -> np.ndarray:
    """`[layers, max heads]` importance (NaN where a layer has fewer heads)."""
    return mask_importance(lm, data, _LOSS, normalize=normalize)


def remove_lm_heads(lm: HeadsizeCausalLM, mask: np.ndarray) -> HeadsizeCausalLM:
    """A new LM without the heads whose mask entry is 0 (every layer keeps one at least).

    Its config lists the kept heads per layer and each layer's head size
    (standard heads become fixed-head layers of their size); kept heads keep
    their gate values. Grouped-query layers lose whole groups only: a group
    with a kept head stays, its pruned heads masked (gate 0), and the config
    lists each layer's key/value heads. The source is left unchanged.
    """
    mask = np.asarray(mask, np.float32)
    config = dict(lm.get_config())
    if config.get("cross_attention") or config.get("pruned_heads"):
        raise ValueError("remove_lm_heads takes a decoder-only LM without pruned_heads.")
    layers = lm.attention_layers
    keep = []
    for i, layer in enumerate(layers):
        kept = [h for h in range(layer.num_heads) if mask[i, h] != 0]
        if not kept:
            raise ValueError(f"Layer {i} would lose every head; keep one at least.")
        keep.append(physical_keep(layer, kept))
    spec = lm.attention_spec
    sizes: dict[str, Any] = {}
    if spec.kind == "grouped":  # Whole groups go: G_l = kept heads / group size.
        sizes["num_kv_heads"] = [
            len(k) * layer.num_kv_heads // layer.num_heads
            for k, layer in zip(keep, layers, strict=True)
        ]
    config["attention"] = dataclasses.replace(
        spec,
        kind="fixed_head" if spec.kind == "standard" else spec.kind,
        num_heads=[len(k) for k in keep],
        head_size=[layer.head_size for layer in layers],
        **sizes,
    ).to_dict()
    config.pop("name", None)
    new = HeadsizeCausalLM.from_config(config)
    new(tf.zeros([1, 2], tf.int32))
    copy_other_weights(lm, new)
    for i, (old_layer, new_layer) in enumerate(zip(layers, new.attention_layers, strict=True)):
        copy_kept_heads(old_layer, new_layer, keep[i])
        if spec.kind == "grouped":  # Pruned heads of kept groups stay masked.
            mask_kept(old_layer, new_layer, keep[i], mask[i])
    return new


def copy_other_weights(source: tf_keras.Model, target: tf_keras.Model) -> None:
    """Copies every weight outside the attention layers, in creation order (same structure)."""
    copy_weights_outside(source, target, source.attention_layers, target.attention_layers)


def save_model_dir(
    params,
    model: tf_keras.Model,
    output: str | os.PathLike,
    experiment: str = "headsize_lm/language_modeling",
    model_override: dict[str, Any] | None = None,
    extra_files: dict[str, str] | None = None,
    overwrite: bool = False,
) -> pathlib.Path:
    """Writes `model` as a `headsize-tf train` model_dir atomically: `params.yaml` with
    `model_override` applied to task.model (default: the LM's attention spec), the
    experiment name, a checkpoint and `extra_files`."""
    from official.core import train_utils

    from headsize_tf.training.train import EXPERIMENT_FILE

    output = pathlib.Path(output)
    check_output(output, overwrite)
    if model_override is None:
        model_override = {"attention": model.attention_spec.to_dict()}
    with atomic_directory(output) as tmp:
        params = params.replace(task={"model": model_override})
        train_utils.serialize_config(params, str(tmp))
        (tmp / EXPERIMENT_FILE).write_text(json.dumps({"experiment": experiment}))
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp), 1)
        manager.save(checkpoint_number=0)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return output


class LanguageModelAdapter(KerasModelAdapter):
    """A `headsize_lm/language_modeling` run as a `ModelAdapter`: next-token loss on
    training windows, validation perplexity.

    Args:
      params: The run's config.
      lm: Its `HeadsizeCausalLM`.
      data: `LMData` (importance and validation batches).
      source: The model_dir.

    Example:

    >>> params, lm = train.load_trained_model("runs/lm")
    >>> adapter = LanguageModelAdapter(params, lm, lm_data(params), "runs/lm")
    """

    metric_name = "perplexity"
    report_file = REPORT_FILE

    def __init__(self, params, lm: HeadsizeCausalLM, data: LMData, source: str):
        super().__init__(lm, None, _LOSS, data.importance, source)
        self.params, self.data = params, data

    def evaluate(self) -> dict[str, float]:
        return {"perplexity": perplexity(self.model, self.data.evaluation)}

    def count_params(self) -> int:
        return int(self.model.count_params())

    def remove_heads(self, mask: np.ndarray) -> LanguageModelAdapter:
        return LanguageModelAdapter(
            self.params, remove_lm_heads(self.model, mask), self.data, self.source
        )

    def save(self, output, report, overwrite: bool = False) -> pathlib.Path:
        return save_model_dir(
            self.params,
            self.model,
            output,
            extra_files={REPORT_FILE: json.dumps(report, indent=2)},
            overwrite=overwrite,
        )

    def reload(self, path) -> LanguageModelAdapter:
        from headsize_tf.training import train

        params, lm = train.load_trained_model(str(path))
        return LanguageModelAdapter(params, lm, self.data, self.source)


def prune_language_model(
    model_dir: str | os.PathLike,
    output: str | os.PathLike,
    *,
    target_fraction: float = 0.5,
    step: float = 0.1,
    recompute: bool = True,
    min_heads_per_layer: int = 1,
    importance_windows: int = 256,
    eval_windows: int = 256,
    decode_tokens: int = 32,
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """`headsize-tf prune --model-dir` of a causal LM: importance, curve, removal, save.

    Args:
      model_dir: A `headsize_lm/language_modeling` model_dir.
      output: The pruned model_dir written (with `pruning_report.json`,
        `importance.png`, `curve.png`).
      target_fraction: Fraction of heads pruned at the end.
      step: Fraction of heads pruned per step.
      recompute: Recompute importance after each step.
      min_heads_per_layer: Heads every layer keeps (at least 1).
      importance_windows: Training windows the importance is averaged over.
      eval_windows: Validation windows of the perplexity.
      decode_tokens: Tokens generated per prompt for the decoding speed.
      overwrite: Replace an existing `output`.

    Returns:
      The report (`core.prune_loop`'s): importance, curve (perplexity at each
      fraction), heads per layer, parameters and perplexity before / masked /
      after removal, cached-decoding tokens/s before and after (side by side).
    """
    from headsize_tf.training import train

    check_output(output, overwrite)
    check_min_heads(min_heads_per_layer, "an LM")
    params, lm = train.load_trained_model(str(model_dir))
    if not isinstance(lm, HeadsizeCausalLM) or lm.get_config().get("cross_attention"):
        raise ValueError(f"{model_dir} is not a headsize_lm/language_modeling model_dir.")
    data = lm_data(params, importance_windows, eval_windows)
    adapter = LanguageModelAdapter(params, lm, data, str(model_dir))

    def extras(report: dict[str, Any], pruned: LanguageModelAdapter) -> None:
        prompts = data.evaluation[0][0][:4, :16]
        speed = {
            "original": decoding_speed(lm, prompts, decode_tokens),
            "pruned": decoding_speed(pruned.model, prompts, decode_tokens),
        }
        report["heads_per_layer"] = {
            "original": head_counts(lm),
            "pruned": head_counts(pruned.model),
        }
        report["decoding_tokens_per_second"] = speed
        report["decoding_speedup"] = speed["pruned"] / speed["original"]

    schedule = PruneSchedule(target_fraction, step, recompute, min_heads_per_layer)
    report = prune_loop(
        adapter, schedule.with_progress(progress), output, overwrite=overwrite, extras=extras
    )
    plot_report(report, output)
    return report


__all__ = [
    "LanguageModelAdapter",
    "copy_other_weights",
    "decoding_speed",
    "lm_importance",
    "perplexity",
    "prune_language_model",
    "remove_lm_heads",
    "save_model_dir",
]

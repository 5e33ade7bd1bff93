"""Healing a converted decoder layer by layer: each attention layer distilled from the original's.

After a training-free KV conversion, `layerwise_distill` trains every
converted attention layer to reproduce the original layer's outputs on the
same inputs: the original model's attention inputs (its normalised hidden
states on calibration text) go through the original layer for the targets
and through the converted layer for the prediction, and Adam minimises the
mean squared error relative to the targets' mean square. No backward pass
goes through the model: each layer trains alone (a few seconds on a CPU), so
healing fits where end-to-end uptraining does not. It is backend-neutral
(`keras.Model.fit` on a one-layer model sharing the converted layer).

With a `state_dir`, each healed layer's weights and errors are written there
atomically as it finishes (`layer_<i>.npz`); a rerun on the same models and
settings loads the finished layers and trains only the rest.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Callable
from typing import Any

import keras
import numpy as np


def _attention_inputs(lm: Any, windows: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Per layer, the attention inputs `[n, length, width]` of `lm` on `windows`."""
    inputs: list[list[np.ndarray]] = [[] for _ in lm.transformer_layers]
    for start in range(0, len(windows), batch_size):
        for i, _, h in lm.attention_inputs(np.asarray(windows[start : start + batch_size])):
            inputs[i].append(np.asarray(keras.ops.convert_to_numpy(h), np.float32))
    return [np.concatenate(parts) for parts in inputs]


class _OneLayer(keras.Model):
    """One attention layer on `[batch, length, width]` inputs under a fixed mask `[1, T, T]`."""

    def __init__(self, layer: keras.layers.Layer, mask: np.ndarray):
        super().__init__(name="one_layer")
        self.attention = layer
        self._mask = np.asarray(mask, bool)

    def call(self, x: Any) -> Any:
        mask = keras.ops.convert_to_tensor(self._mask)
        mask = keras.ops.broadcast_to(mask, (keras.ops.shape(x)[0], *self._mask.shape[1:]))
        return self.attention(x, x, attention_mask=mask)


def _one_layer_model(layer: keras.layers.Layer, mask: np.ndarray) -> keras.Model:
    """`layer` alone, under the model's own self-attention mask (causal; a sliding window's)."""
    return _OneLayer(layer, mask)


def _outputs(model: keras.Model, inputs: np.ndarray, batch_size: int) -> np.ndarray:
    return np.concatenate(
        [
            np.asarray(model.predict_on_batch(inputs[i : i + batch_size]), np.float32)
            for i in range(0, len(inputs), batch_size)
        ]
    )


def layerwise_distill(
    original: Any,
    converted: Any,
    windows: np.ndarray,
    steps: int = 100,
    learning_rate: float = 1e-3,
    batch_size: int = 4,
    seed: int = 0,
    progress: Callable[[str], None] | None = print,
    state_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Trains each attention layer of `converted` to reproduce `original`'s (in place).

    Args:
      original: The source `DecoderLM` or `CausalLM` (any model with
        `attention_inputs`, `attention_masks` and `attention_layers`). Each
        layer trains under the model's own mask: causal, and a sliding
        window's where windows are longer than it.
      converted: Its converted copy (same blocks, other attention).
      windows: int32 `[n, length]` calibration windows.
      steps: Adam steps per layer.
      learning_rate: Adam's rate.
      batch_size: Windows per step.
      seed: Seed of the batches' order.
      progress: Called with one line per layer (None: silent).
      state_dir: Where each finished layer is kept (resumable); None: nowhere.
        A layer saved with other settings or shapes is an error, not reused.

    Returns:
      {"steps", "learning_rate", "tokens", "seconds", "layers": [{"layer",
      "relative_error_before", "relative_error_after", "kept"}]}: the error is
      the mean squared difference over the targets' mean square; a layer
      whose error distillation raised keeps its converted weights ("kept":
      "converted", else "healed").
    """
    start_time = time.perf_counter()
    keras.utils.set_random_seed(seed)
    inputs = _attention_inputs(original, windows, batch_size)
    masks = [
        np.asarray(keras.ops.convert_to_numpy(mask))
        for mask in original.attention_masks(inputs[0].shape[1])
    ]
    report: dict[str, Any] = {
        "steps": int(steps),
        "learning_rate": float(learning_rate),
        "tokens": int(np.prod(windows.shape)),
        "layers": [],
    }
    settings = {"steps": int(steps), "learning_rate": float(learning_rate), "seed": int(seed)}
    settings["windows"] = [int(n) for n in np.shape(windows)]
    state = None if state_dir is None else pathlib.Path(state_dir)
    pairs = zip(original.attention_layers, converted.attention_layers, strict=True)
    for i, (teacher, student) in enumerate(pairs):
        saved = None if state is None else state / f"layer_{i}.npz"
        if saved is not None and saved.exists():
            entry = _restore_layer(student, saved, settings, inputs[i][:1])
            report["layers"].append(entry)
            if progress is not None:
                progress(f"layer {i}: restored from {saved}")
            continue
        targets = _outputs(_one_layer_model(teacher, masks[i]), inputs[i], batch_size)
        scale = float(np.mean(targets**2)) or 1.0
        model = _one_layer_model(student, masks[i])
        start = student.get_weights()
        before = float(np.mean((_outputs(model, inputs[i], batch_size) - targets) ** 2)) / scale
        model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="mse")
        keras.utils.set_random_seed(seed + i)  # Each layer's batches alone: a resumed run's too.
        per_epoch = max(1, len(inputs[i]) // batch_size)
        epochs = max(1, -(-steps // per_epoch))
        model.fit(
            inputs[i],
            targets,
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=min(per_epoch, steps),
            shuffle=True,
            verbose=0,
        )
        after = float(np.mean((_outputs(model, inputs[i], batch_size) - targets) ** 2)) / scale
        entry = {"layer": i, "relative_error_before": before, "relative_error_after": after}
        if after > before:  # Distillation made it worse (an exact layer, too high a rate).
            student.set_weights(start)
            entry["kept"] = "converted"
        else:
            entry["kept"] = "healed"
        report["layers"].append(entry)
        if saved is not None:
            _save_layer(student, saved, {**settings, **entry})
        if progress is not None:
            progress(f"layer {i}: relative error {before:.4f} -> {after:.4f}")
    report["seconds"] = round(time.perf_counter() - start_time, 1)
    return report


def _save_layer(layer: keras.layers.Layer, path: pathlib.Path, meta: dict[str, Any]) -> None:
    """A healed layer's weights and its report entry, written atomically."""
    from headsize_tf.core.io import atomic_path

    arrays = {f"weight_{i}": np.asarray(w) for i, w in enumerate(layer.get_weights())}
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(meta)), **arrays)


def _restore_layer(
    layer: keras.layers.Layer, path: pathlib.Path, settings: dict[str, Any], sample: np.ndarray
) -> dict[str, Any]:
    """Loads `_save_layer`'s file into `layer`; its report entry."""
    if not layer.built:
        layer(sample, sample, use_causal_mask=True)
    with np.load(path) as saved:
        meta = json.loads(str(saved["meta"]))
        kept = {k: meta.get(k) for k in settings}
        if kept != settings:
            raise ValueError(
                f"{path} was healed with {kept}, not {settings}: remove it (or the state "
                "directory) to heal again."
            )
        weights = [saved[f"weight_{i}"] for i in range(len(saved.files) - 1)]
    shapes = [tuple(w.shape) for w in layer.get_weights()]
    if [w.shape for w in weights] != shapes:
        raise ValueError(f"{path} holds weights of other shapes than the layer's {shapes}.")
    layer.set_weights(weights)
    entry = {k: meta[k] for k in ("layer", "relative_error_before", "relative_error_after")}
    return {**entry, "kept": meta.get("kept", "healed")}

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
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from headsize_tf.core.io import atomic_directory, save_figure
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.pruning.importance import head_importance
from headsize_tf.pruning.remove import copy_kept_heads, copy_weights_outside
from headsize_tf.pruning.schedule import check_min_heads, check_output, masked_schedule

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


def lm_data(
    params, importance_windows: int = 256, eval_windows: int = 256, batch_size: int = 32
) -> LMData:
    """Importance on the first training windows, perplexity on the validation windows."""
    n = params.task.train_data.seq_length
    train = read_windows(params.task.train_data.input_path, n, importance_windows)
    valid = read_windows(params.task.validation_data.input_path, n, eval_windows)
    return LMData(batches(train, batch_size), batches(valid, batch_size))


_LOSS = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def perplexity(lm: HeadsizeCausalLM, data: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """exp of the mean next-token cross entropy over every token of `data`."""

    @tf.function(reduce_retracing=True)
    def total(ids, targets):
        logits = tf.cast(lm(ids, training=False), tf.float32)
        return tf.reduce_sum(
            tf_keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
        )

    loss = sum(float(total(ids, targets)) for ids, targets in data)
    tokens = sum(targets.size for _, targets in data)
    return float(np.exp(loss / tokens))


def head_counts(lm: HeadsizeCausalLM) -> list[int]:
    return [layer.num_heads for layer in lm.attention_layers]


def lm_head_mask(lm: HeadsizeCausalLM) -> np.ndarray:
    """`[layers, max heads]` gates; the missing heads of smaller layers are 0."""
    counts = head_counts(lm)
    mask = np.zeros([len(counts), max(counts)], np.float32)
    for i, layer in enumerate(lm.attention_layers):
        mask[i, : layer.num_heads] = layer.head_gates.numpy()
    return mask


def set_lm_head_mask(lm: HeadsizeCausalLM, mask: np.ndarray) -> None:
    mask = np.asarray(mask, np.float32)
    for i, layer in enumerate(lm.attention_layers):
        layer.set_head_mask(mask[i, : layer.num_heads])


def lm_importance(
    lm: HeadsizeCausalLM, data: Sequence[tuple[np.ndarray, np.ndarray]], normalize: bool = True
) -> np.ndarray:
    """`[layers, max heads]` importance (NaN where a layer has fewer heads)."""
    scores = head_importance(lm, data, _LOSS, layers=lm.attention_layers, normalize=normalize)
    out = np.full(lm_head_mask(lm).shape, np.nan)
    for i, n in enumerate(head_counts(lm)):
        out[i, :n] = scores[i, :n]
    return out


def remove_lm_heads(lm: HeadsizeCausalLM, mask: np.ndarray) -> HeadsizeCausalLM:
    """A new LM without the heads whose mask entry is 0 (every layer keeps one at least).

    Its config lists the kept heads per layer and each layer's head size
    (standard heads become fixed-head layers of their size); kept heads keep
    their gate values. The source is left unchanged.
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
        keep.append(kept)
    spec = lm.attention_spec
    config["attention"] = dataclasses.replace(
        spec,
        kind="fixed_head" if spec.kind == "standard" else spec.kind,
        num_heads=[len(k) for k in keep],
        head_size=[layer.head_size for layer in layers],
    ).to_dict()
    config.pop("name", None)
    new = HeadsizeCausalLM.from_config(config)
    new(tf.zeros([1, 2], tf.int32))
    copy_other_weights(lm, new)
    for i, (old_layer, new_layer) in enumerate(zip(layers, new.attention_layers, strict=True)):
        copy_kept_heads(old_layer, new_layer, keep[i])
    return new


def decoding_speed(
    model,
    prompts: np.ndarray,
    new_tokens: int = 32,
    repeats: int = 3,
    source_ids: np.ndarray | None = None,
) -> float:
    """Generated tokens/s of cached greedy decoding (best of `repeats` after a warm-up);
    at most as many tokens as the model has positions left after the prompt.

    `model` is a `HeadsizeCausalLM`, or a `HeadsizeSeq2Seq` with `source_ids`
    (the cache then starts with the encoded source).
    """
    limit = model.get_config().get("max_sequence_length")
    if limit:  # Positions past the model's last one do not exist.
        new_tokens = min(new_tokens, int(limit) - prompts.shape[1])
    if new_tokens < 1:
        raise ValueError(f"A prompt of {prompts.shape[1]} tokens leaves no position to decode.")
    step = tf.function(model.decode_step, reduce_retracing=True)

    def run():
        ids = tf.convert_to_tensor(prompts, tf.int32)
        if source_ids is None:
            cache = model.init_cache(tf.shape(ids)[0])
        else:
            cache = model.init_cache(tf.convert_to_tensor(source_ids, tf.int32))
        logits, cache = step(ids, cache, tf.constant(0))
        for t in range(new_tokens):
            next_id = tf.argmax(logits[:, -1], axis=-1, output_type=tf.int32)[:, tf.newaxis]
            logits, cache = step(next_id, cache, tf.constant(prompts.shape[1] + t))
        return logits

    run().numpy()
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run().numpy()
        best = min(best, time.perf_counter() - start)
    return float(prompts.shape[0] * new_tokens / best)


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
    """`headsize-tf prune --model_dir` of a causal LM: importance, curve, removal, save.

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
      The report: importance, curve (perplexity at each fraction), heads per
      layer, parameters and perplexity before / masked / after removal,
      cached-decoding tokens/s before and after (measured side by side).
    """
    from headsize_tf.training import train

    check_output(output, overwrite)
    check_min_heads(min_heads_per_layer, "an LM")
    params, lm = train.load_trained_model(str(model_dir))
    if not isinstance(lm, HeadsizeCausalLM) or lm.get_config().get("cross_attention"):
        raise ValueError(f"{model_dir} is not a headsize_lm/language_modeling model_dir.")
    data = lm_data(params, importance_windows, eval_windows)
    original = lm_head_mask(lm)

    importance = lm_importance(lm, data.importance)
    steps = masked_schedule(
        original,
        lambda mask: set_lm_head_mask(lm, mask),
        lambda: lm_importance(lm, data.importance),
        lambda: perplexity(lm, data.evaluation),
        target_fraction=target_fraction,
        step=step,
        recompute=recompute,
        min_heads_per_layer=min_heads_per_layer,
        progress=progress,
    )
    curve = [dataclasses.asdict(s) for s in steps]
    final = np.asarray(curve[-1]["mask"], np.float32)
    pruned = remove_lm_heads(lm, final)
    set_lm_head_mask(lm, final)
    masked_ppl = perplexity(lm, data.evaluation)
    set_lm_head_mask(lm, original)
    prompts = data.evaluation[0][0][:4, :16]
    speed = {
        "original": decoding_speed(lm, prompts, decode_tokens),
        "pruned": decoding_speed(pruned, prompts, decode_tokens),
    }
    report = {
        "source": str(model_dir),
        "target_fraction": target_fraction,
        "step": step,
        "recompute": recompute,
        "importance": [[None if np.isnan(v) else float(v) for v in row] for row in importance],
        "curve": [
            {
                "fraction": c["fraction"],
                "perplexity": c["metric"],
                "heads_per_layer": np.count_nonzero(c["mask"], axis=1).tolist(),
            }
            for c in curve
        ],
        "heads_per_layer": {"original": head_counts(lm), "pruned": head_counts(pruned)},
        "params": {"original": int(lm.count_params()), "pruned": int(pruned.count_params())},
        "perplexity": {
            "original": curve[0]["metric"],
            "masked": masked_ppl,
            "pruned": perplexity(pruned, data.evaluation),
        },
        "decoding_tokens_per_second": speed,
        "decoding_speedup": speed["pruned"] / speed["original"],
    }
    path = save_model_dir(
        params,
        pruned,
        output,
        extra_files={REPORT_FILE: json.dumps(report, indent=2)},
        overwrite=overwrite,
    )
    plot_report(report, path)
    return report


def plot_report(
    report: dict[str, Any],
    directory: str | os.PathLike,
    *,
    metric: str = "perplexity",
    label: str = "validation perplexity",
    scale: float = 1.0,
) -> None:
    """`importance.png` (heatmap, layers x heads; a translation model's kinds stacked) and
    `curve.png` (`scale * metric` vs heads pruned, and BLEU beside it when the curve has it)
    in `directory`, the output of a model_dir prune."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headsize_tf.pruning.prune import plot_importance

    directory = pathlib.Path(directory)
    importance = report["importance"]
    if isinstance(importance, dict):  # {kind: rows}: one heatmap, a row per layer and kind.
        rows = [row for kind in importance for row in importance[kind]]
        labels = [f"{kind} {i}" for kind in importance for i in range(len(importance[kind]))]
    else:
        rows, labels = importance, None
    width = max(len(r) for r in rows)
    scores = np.array(
        [[np.nan if v is None else v for v in r] + [np.nan] * (width - len(r)) for r in rows]
    )
    plot_importance(scores, directory / "importance.png", "head importance |dL/dxi_h|", labels)
    curve = report["curve"]
    bleu = "bleu" in curve[0]
    fig, axes = plt.subplots(1, 2 if bleu else 1, figsize=(11 if bleu else 6, 4))
    axes = list(np.atleast_1d(axes))
    fractions = [100 * c["fraction"] for c in curve]
    axes[0].plot(fractions, [scale * c[metric] for c in curve], "o-", ms=3)
    title = (
        f"decoding {report['decoding_speedup']:.2f}x faster after removal"
        if "decoding_speedup" in report
        else f"params {report['params_before']:,} -> {report['params_after']:,}"
    )
    axes[0].set(xlabel="heads pruned (%)", ylabel=label, title=title)
    if bleu:
        axes[1].plot(fractions, [c["bleu"] for c in curve], "o-", ms=3)
        axes[1].set(xlabel="heads pruned (%)", ylabel="validation BLEU (greedy)")
    save_figure(fig, directory / "curve.png")


__all__ = [
    "copy_other_weights",
    "decoding_speed",
    "lm_importance",
    "perplexity",
    "prune_language_model",
    "remove_lm_heads",
    "save_model_dir",
]

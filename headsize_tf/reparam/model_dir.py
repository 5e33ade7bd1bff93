"""Collaborative heads for a model trained by `headsize-tf train` (Cordonnier et al. 2020, Sec. 4).

`compress --model_dir` converts every attention layer of a trained model_dir into
collaborative attention with a shared query/key size `D` by the CP decomposition of
its stacked per-head `W_Q^(h) W_K^(h)^T` (exact at full rank) and writes the result
as an ordinary model_dir of the same experiment: the config holds the collaborative
spec, every other weight (embeddings, feed-forward layers, LayerNorms, the task's
head: masked-LM, LM or translation output) is copied, so `train` fine-tunes it
further, `export --model_dir` serves it and the report compares the task's own
validation metrics before and after.

Experiments: masked-LM pretraining (the encoder converts, its MLM head is kept),
causal LMs and encoder-decoder translation models (self-attention, and
encoder-decoder attention, which the CP treats alike). Sentence classifiers go
through `headsize_tf.reparam.classifier_dir.compress_classifier_dir` (dev
accuracy).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from tqdm.auto import tqdm

from headsize_tf.core.io import write_json
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from headsize_tf.reparam.convert import (
    ConversionReport,
    assign_collaborative,
    convert_layer_weights,
)
from headsize_tf.reparam.encoder import compress_encoder

PRETRAINING = "headsize_bert/pretraining"
LANGUAGE_MODEL = "headsize_lm/language_modeling"
TRANSLATION = "headsize_seq2seq/translation"
EXPERIMENTS = (PRETRAINING, LANGUAGE_MODEL, TRANSLATION)
REPORT_FILE = "compress_report.json"


def evaluate(params, model: tf_keras.Model, batches: int = 16) -> dict[str, float]:
    """The task's validation loss (mean over `batches` validation batches) and metrics,
    computed as Model Garden's evaluator does (`task.validation_step`)."""
    from official.core import task_factory

    task = task_factory.get_task(params.task)
    metrics = task.build_metrics(training=False)

    @tf.function(reduce_retracing=True)
    def step(inputs):
        return task.validation_step(inputs, model, metrics)

    losses = [
        float(step(inputs)[task.loss])
        for inputs in task.build_inputs(params.task.validation_data).take(batches)
    ]
    if not losses:
        raise ValueError("The validation data yielded no batch.")
    out = {"validation_loss": float(np.mean(losses))}
    out.update({m.name: float(m.result()) for m in metrics})
    return out


def compress_attention_model(
    model: tf_keras.Model, shared_key_dim: int, *, progress: bool = True, **kwargs: Any
) -> tuple[tf_keras.Model, list[ConversionReport]]:
    """A collaborative copy of a `HeadsizeCausalLM` or `HeadsizeSeq2Seq` (source unchanged).

    Args:
      model: A built model with standard or fixed-head attention, the same
        heads in every layer (compress before pruning).
      shared_key_dim: `D` of every attention layer, at most the full rank
        `num_heads * head_size` (where the CP is exact).
      progress: A bar over the layers.
      **kwargs: `method`, `max_iter`, `tol`, `tolerance`, `seed` of the CP.

    Returns:
      (the new built model, one `ConversionReport` per attention layer).
    """
    config = dict(model.get_config())
    spec = model.attention_spec
    if spec.kind == "collaborative":
        raise ValueError(
            "The model already has collaborative attention; convert a standard or fixed_head model."
        )
    if config.get("pruned_heads") or isinstance(spec.num_heads, (list, tuple)):
        raise ValueError(
            "The model has per-layer (pruned) heads; compress the model before pruning it."
        )
    layers = model.attention_layers
    first = layers[0]
    full_rank = first.num_heads * first.head_size
    if isinstance(shared_key_dim, bool) or not 0 < int(shared_key_dim) <= full_rank:
        raise ValueError(
            f"shared_key_dim={shared_key_dim!r} is outside [1, {full_rank}]: the CP is exact at "
            f"the full rank num_heads x head_size = {full_rank}, and larger values only add "
            "parameters."
        )
    converted, reports = [], []
    bar = tqdm(layers, desc=f"CP D={shared_key_dim}", unit="layer", disable=not progress)
    for index, layer in enumerate(bar):
        weights, report = convert_layer_weights(layer, int(shared_key_dim), **kwargs)
        report.name = f"layer_{index}"
        converted.append(weights)
        reports.append(report)
        bar.set_postfix(error=f"{report.relative_error:.3f}")
    config["attention"] = dataclasses.replace(
        spec,
        kind="collaborative",
        shared_key_dim=int(shared_key_dim),
        head_size=first.head_size,
        mixing_initializer="concatenate"
        if int(shared_key_dim) % first.num_heads == 0
        else "uniform",
    ).to_dict()
    config.pop("name", None)
    new = type(model).from_config(config)
    if isinstance(new, HeadsizeSeq2Seq):
        new({"inputs": tf.zeros([1, 2], tf.int32), "targets": tf.zeros([1, 2], tf.int32)})
    else:
        new(tf.zeros([1, 2], tf.int32))
    from headsize_tf.pruning.remove import copy_weights_outside

    copy_weights_outside(model, new, layers, new.attention_layers)
    for layer, weights in zip(new.attention_layers, converted, strict=True):
        assign_collaborative(layer, weights)
    return new, reports


def compress_model_dir(
    model_dir: str | os.PathLike,
    shared_key_dim: int,
    output: str | os.PathLike,
    *,
    eval_batches: int = 16,
    overwrite: bool = False,
    progress: bool = True,
    **kwargs: Any,
) -> dict[str, Any]:
    """`headsize-tf compress --model_dir` of a pretraining, LM or translation run.

    Args:
      model_dir: A `headsize-tf train` model_dir of one of `EXPERIMENTS`.
      shared_key_dim: `D` of every attention layer.
      output: The model_dir written (atomically, with `compress_report.json`).
      eval_batches: Validation batches of the before / after metrics.
      overwrite: Replace an existing `output`.
      **kwargs: `method`, `max_iter`, `tol`, `tolerance`, `seed` of the CP.

    Returns:
      The report: per-layer relative error and seconds, parameters and the
      task's validation metrics before and after (the latter from the
      reloaded output).
    """
    from headsize_tf.pruning.classifier_dir import rebuild_with_encoder
    from headsize_tf.pruning.language_model import save_model_dir
    from headsize_tf.pruning.schedule import check_output
    from headsize_tf.training import train

    experiment = train.experiment_of(model_dir)
    if experiment not in EXPERIMENTS:
        raise ValueError(
            f"{model_dir} is a {experiment} model_dir; compress --model_dir takes "
            f"{', '.join(EXPERIMENTS)} and headsize_bert/sentence_prediction runs."
        )
    check_output(output, overwrite)
    params, model = train.load_trained_model(str(model_dir))
    if experiment == PRETRAINING:
        encoder = model.checkpoint_items["encoder"]
        if encoder.get_config().get("pruned_heads"):
            raise ValueError(f"{model_dir} has pruned heads; compress the model before pruning it.")
        compressed, reports = compress_encoder(encoder, shared_key_dim, progress=progress, **kwargs)
        params_out, new, override = rebuild_with_encoder(params, model, compressed)
        before_params, after_params = encoder.count_params(), compressed.count_params()
    else:
        new, reports = compress_attention_model(model, shared_key_dim, progress=progress, **kwargs)
        params_out, override = params, {"attention": new.get_config()["attention"]}
        before_params, after_params = model.count_params(), new.count_params()
    report = {
        "source": str(model_dir),
        "experiment": experiment,
        "shared_key_dim": int(shared_key_dim),
        "layers": [
            {"name": r.name, "relative_error": float(r.relative_error), "seconds": float(r.seconds)}
            for r in reports
        ],
        "params_before": int(before_params),
        "params_after": int(after_params),
        "before": evaluate(params, model, eval_batches),
    }
    path = save_model_dir(params_out, new, output, experiment, override, overwrite=overwrite)
    reloaded_params, reloaded = train.load_trained_model(str(path))
    report["after"] = evaluate(reloaded_params, reloaded, eval_batches)
    write_json(path / REPORT_FILE, report)
    return report


__all__ = ["EXPERIMENTS", "compress_attention_model", "compress_model_dir", "evaluate"]

"""Collaborative heads for a model trained by `headsize-tf train` (Cordonnier et al. 2020, Sec. 4).

`compress --model-dir` converts every attention layer of a trained model_dir into
collaborative attention with a shared query/key size `D` by the CP decomposition of
its stacked per-head `W_Q^(h) W_K^(h)^T` (exact at full rank) and writes the result
as an ordinary model_dir of the same experiment: the config holds the collaborative
spec, every other weight (embeddings, feed-forward layers, LayerNorms, the task's
head: masked-LM, LM or translation output) is copied, so `train` fine-tunes it
further, `export --model-dir` serves it and the report compares the task's own
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

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.convert import ConversionReport
from headsize_tf.core.io import write_json
from headsize_tf.core.spec import AttentionSpec, ResolvedAttention, SpecError
from headsize_tf.layers.roles import assign_weights, kind_of, numpy_weights
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
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

    @tf.function(reduce_retracing=True, autograph=False)
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


@dataclasses.dataclass(frozen=True)
class _Group:
    """Attention layers one spec of the model config describes (`key`), by block."""

    key: str
    blocks: list[Any]
    names: list[str]
    attributes: tuple[str, ...]

    def layers(self) -> list[Any]:
        return [getattr(b, a) for b in self.blocks for a in self.attributes]


def _groups(model: tf_keras.Model, convert_encoder: bool) -> list[_Group]:
    """The converted parts of an LM (its blocks) or a seq2seq (decoder; encoder if asked)."""
    if isinstance(model, HeadsizeSeq2Seq):
        decoder = _Group(
            "decoder_attention",
            list(model.decoder.blocks),
            [f"decoder/block_{i}" for i in range(len(model.decoder.blocks))],
            ("self_attention", "cross_attention"),
        )
        if not convert_encoder:
            return [decoder]
        encoder = _Group(
            "attention",
            list(model.encoder_blocks),
            [f"encoder_block_{i}" for i in range(len(model.encoder_blocks))],
            ("self_attention",),
        )
        return [encoder, decoder]
    if isinstance(model, HeadsizeCausalLM) and not model.get_config().get("cross_attention"):
        blocks = list(model.blocks)
        return [
            _Group(
                "attention", blocks, [f"block_{i}" for i in range(len(blocks))], ("self_attention",)
            )
        ]
    raise ValueError(
        f"convert_attention_model takes a HeadsizeCausalLM or HeadsizeSeq2Seq; got "
        f"{type(model).__name__}."
    )


def _resolved(layer: tf_keras.layers.Layer) -> ResolvedAttention:
    """The layer's concrete sizes; its kind as `roles.kind_of` reads its weights."""
    return ResolvedAttention(kind_of(layer), layer.num_heads, layer.head_size, layer.value_dim)


def _group_spec(group: _Group, target: ConversionTarget, width: int) -> AttentionSpec:
    """The converted spec of `group` (one entry per block; a block's layers must agree)."""
    first = group.attributes[0]
    per_block = [_resolved(getattr(b, first)) for b in group.blocks]
    for other in group.attributes[1:]:
        for i, block in enumerate(group.blocks):
            resolved = _resolved(getattr(block, other))
            if resolved != per_block[i]:
                raise SpecError(
                    f"{group.names[i]}: {first} {per_block[i]} and {other} {resolved} differ (heads "
                    "pruned differently?); a block's attention layers convert to one spec."
                )
    spec = target.spec(per_block, width=width)
    if spec.kind == "collaborative":  # Where D is a multiple of h, concatenated heads fit.
        heads = spec.num_heads if isinstance(spec.num_heads, tuple) else (spec.num_heads,)
        divides = all(spec.shared_key_dim % h == 0 for h in heads)
        spec = dataclasses.replace(spec, mixing_initializer="concatenate" if divides else "uniform")
    return spec


def convert_attention_model(
    model: tf_keras.Model,
    target: ConversionTarget,
    *,
    convert_encoder: bool | None = None,
    progress: bool = True,
    **kwargs: Any,
) -> tuple[tf_keras.Model, list[dict[str, Any]]]:
    """A copy of a `HeadsizeCausalLM` or `HeadsizeSeq2Seq` with its attention converted.

    The tf_keras front of the one conversion driver
    (`headsize_tf.core.conversion.ConversionTarget`): every converted layer
    is read into the core layout with `layers.roles.numpy_weights`, converted
    by `target.convert_layer` and written with `layers.roles.assign_weights`;
    the new model's config holds `target.spec(...)` (per-layer lists where
    layers differ, e.g. after pruning), every other weight is copied and the
    source is left unchanged. Converted: an LM's self-attention; a seq2seq's
    decoder self-attention and encoder-decoder attention (block i's two
    layers get `target`'s size i; a latent cross-attention's latent is
    computed from the encoder output) and, with `convert_encoder`, its
    encoder self-attention. Grouped at `num_kv_heads = heads`, latent at full
    rank and collaborative at `heads x head size` compute what `model`
    computes.

    Args:
      model: A built multi-head (standard or fixed-head) model.
      target: What to convert into, e.g. `ConversionTarget("grouped", 2)`.
      convert_encoder: Convert a seq2seq's encoder too (default: only for a
        collaborative target: grouped and latent heads shrink a decoder's
        cache, which an encoder does not have).
      progress: A bar over the layers.
      **kwargs: Collaborative CP options (`max_iter`, `tol`, `tolerance`, `seed`).

    Returns:
      (the new built model, one report dict per converted layer, with its
      `layer` path).

    Example:

    >>> grouped, reports = convert_attention_model(lm, ConversionTarget("grouped", 2))
    >>> grouped.kv_cache_bytes_per_token() < lm.kv_cache_bytes_per_token()
    True
    """
    if not isinstance(target, ConversionTarget):
        raise TypeError(f"target must be a ConversionTarget; got {target!r}.")
    if convert_encoder is None:
        convert_encoder = target.kind == "collaborative"
    groups = _groups(model, convert_encoder)
    width = int(model.get_config()["hidden_size"])
    if isinstance(target.size, tuple) and len(groups) > 1:
        raise SpecError(
            f"Per-layer `{target.size_name}` {list(target.size)} is ambiguous over encoder and "
            "decoder; convert the decoder only (convert_encoder=False) or give one size."
        )
    config = dict(model.get_config())
    config.pop("name", None)
    old_decoder_spec = config.get("decoder_attention")
    specs = {group.key: _group_spec(group, target, width) for group in groups}
    for key, spec in specs.items():
        config[key] = spec.to_dict()
    if (
        isinstance(model, HeadsizeSeq2Seq)
        and old_decoder_spec is None
        and "attention" in specs
        and specs["attention"] == specs["decoder_attention"]
    ):
        config["decoder_attention"] = None  # As before: the decoder shares the encoder's spec.
    pruned = config.get("pruned_heads")
    if pruned:  # The converted layers' sizes are in their spec now.
        if isinstance(model, HeadsizeSeq2Seq):
            sides = {"attention": "encoder", "decoder_attention": "decoder"}
            pruned = {k: v for k, v in pruned.items() if k not in {sides[g] for g in specs}}
            config["pruned_heads"] = pruned or None
        else:
            config["pruned_heads"] = None
    new = type(model).from_config(config)
    _build(new)
    old_layers = [layer for g in groups for layer in g.layers()]
    new_groups = _groups(new, convert_encoder)
    new_layers = [layer for g in new_groups for layer in g.layers()]
    from headsize_tf.pruning.remove import copy_weights_outside

    copy_weights_outside(model, new, old_layers, new_layers)
    jobs = [
        (f"{name}/{attribute}", index, getattr(old, attribute), getattr(fresh, attribute))
        for group, new_group in zip(groups, new_groups, strict=True)
        for index, (name, old, fresh) in enumerate(
            zip(group.names, group.blocks, new_group.blocks, strict=True)
        )
        for attribute in group.attributes
    ]
    reports = []
    bar = tqdm(jobs, desc=f"{target.kind} {target.size_name}", unit="layer", disable=not progress)
    for path, index, source, dest in bar:
        weights, report = target.convert_layer(numpy_weights(source), index, name=path, **kwargs)
        assign_weights(dest, weights)
        reports.append({**report, "layer": path})
    return new, reports


def _build(model: tf_keras.Model) -> None:
    dummy = tf.zeros([1, 2], tf.int32)
    if isinstance(model, HeadsizeSeq2Seq):
        model({"inputs": dummy, "targets": dummy})
    else:
        model(dummy)


def compress_attention_model(
    model: tf_keras.Model, shared_key_dim: int, *, progress: bool = True, **kwargs: Any
) -> tuple[tf_keras.Model, list[ConversionReport]]:
    """A collaborative copy of a `HeadsizeCausalLM` or `HeadsizeSeq2Seq` (source unchanged).

    `convert_attention_model` with a collaborative `ConversionTarget`, every
    attention layer (a seq2seq's encoder too) converted.

    Args:
      model: A built model with standard or fixed-head attention, the same
        heads in every layer (compress before pruning).
      shared_key_dim: `D` of every attention layer, at most the full rank
        `num_heads * head_size` (where the CP is exact).
      progress: A bar over the layers.
      **kwargs: `method`, `max_iter`, `tol`, `tolerance`, `seed` of the CP.

    Returns:
      (the new built model, one `ConversionReport` per attention layer, named
      `layer_{i}` in `model.attention_layers` order).
    """
    spec = model.attention_spec
    if spec.kind == "collaborative":
        raise ValueError(
            "The model already has collaborative attention; convert a standard or fixed_head model."
        )
    if model.get_config().get("pruned_heads") or isinstance(spec.num_heads, (list, tuple)):
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
    method = kwargs.pop("method", None)
    target = ConversionTarget("collaborative", int(shared_key_dim), method)
    new, reports = convert_attention_model(
        model, target, convert_encoder=True, progress=progress, **kwargs
    )
    # Reports in `attention_layers` order (a seq2seq: encoder, then decoder self / cross).
    by_path = {r["layer"]: r for r in reports}
    order = [_path_of(model, layer) for layer in layers]
    out = []
    for index, path in enumerate(order):
        fields = {k: v for k, v in by_path[path].items() if k != "layer"}
        out.append(ConversionReport(**dict(fields, name=f"layer_{index}")))
    return new, out


def _path_of(model: tf_keras.Model, layer: tf_keras.layers.Layer) -> str:
    """`convert_attention_model`'s report path of one of `model.attention_layers`."""
    for group in _groups(model, convert_encoder=True):
        for name, block in zip(group.names, group.blocks, strict=True):
            for attribute in group.attributes:
                if getattr(block, attribute) is layer:
                    return f"{name}/{attribute}"
    raise ValueError(f"Layer {layer.name!r} is not an attention layer of the model.")


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
    """`headsize-tf compress --model-dir` of a pretraining, LM or translation run.

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
            f"{model_dir} is a {experiment} model_dir; compress --model-dir takes "
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


__all__ = [
    "EXPERIMENTS",
    "compress_attention_model",
    "compress_model_dir",
    "convert_attention_model",
    "evaluate",
]

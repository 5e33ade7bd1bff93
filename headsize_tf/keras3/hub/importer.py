"""`import_hub_model`: a keras-hub model object into the library's Keras 3 model."""

from __future__ import annotations

from typing import Any

from headsize_tf.core.errors import CheckpointError
from headsize_tf.keras3.hub.architectures import (
    ARCHITECTURES,
    Architecture,
    architecture_of_class,
    supported,
)
from headsize_tf.keras3.hub.hub_model import HubModel
from headsize_tf.keras3.layers.roles import assign_weights, numpy_weights
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone
from headsize_tf.keras3.modeling.causal_lm import CausalLM
from headsize_tf.keras3.modeling.surgery import non_attention_layers
from headsize_tf.keras3.pretrained._keras_hub import require_keras_hub


def _split(model: Any) -> tuple[Any, Any]:
    """(keras-hub backbone, task or None) of a keras-hub model object."""
    keras_hub = require_keras_hub()
    if isinstance(model, keras_hub.models.Task):
        return model.backbone, model
    if isinstance(model, keras_hub.models.Backbone):
        return model, None
    raise CheckpointError(
        f"Expected a keras-hub model (a keras_hub.models Backbone or task); got "
        f"{type(model).__name__}. Supported backbones: {supported()}."
    )


def hub_architecture(model: Any) -> Architecture:
    """The `Architecture` of a keras-hub model object (a `CheckpointError` naming the
    supported ones otherwise, and for a task other than the architecture's own)."""
    backbone, task = _split(model)
    arch = architecture_of_class(type(backbone).__name__)
    if arch is None:
        raise CheckpointError(
            f"Unsupported keras-hub architecture {type(backbone).__name__}; the bridge imports "
            f"{supported()} (and their {', '.join(a.task_class for a in ARCHITECTURES.values())})."
        )
    if task is not None and type(task).__name__ != arch.task_class:
        raise CheckpointError(
            f"Unsupported keras-hub task {type(task).__name__}; the bridge keeps {arch.task_class} "
            f"heads of {arch.backbone_class} (pass model.backbone to import the encoder alone)."
        )
    return arch


def _task_config(task: Any) -> dict[str, Any] | None:
    if task is None:
        return None
    config = dict(task.get_config())
    config.pop("backbone", None)
    config.pop("preprocessor", None)
    return config


def import_hub_model(model: Any, preprocessor: Any = None, source: str | None = None) -> HubModel:
    """The library's Keras 3 model equal to a keras-hub model, its head and preprocessor kept.

    Args:
      model: A keras-hub `BertBackbone`, `BertTextClassifier`,
        `DistilBertBackbone`, `DistilBertTextClassifier`, `GPT2Backbone` or
        `GPT2CausalLM` (from `from_preset`, or built from arguments).
      preprocessor: keras-hub's preprocessor of a bare backbone (a task
        brings its own).
      source: Where the model came from, for reports (default: its name).

    Returns:
      A `HubModel`: a `BertBackbone` (BERT, DistilBERT) or `CausalLM`
      (GPT-2, tokenizer attached) with keras-hub's weights, computing
      keras-hub's sequence, pooled, classifier and LM outputs.

    Raises:
      CheckpointError: Another architecture or task (the message names the
        supported ones).

    Example:

    >>> gpt2 = keras_hub.models.GPT2CausalLM.from_preset("gpt2_base_en")
    >>> hub = import_hub_model(gpt2)
    >>> hub.generate("The quick brown fox", max_new_tokens=8)
    """
    arch = hub_architecture(model)
    hub_backbone, task = _split(model)
    if task is not None:
        preprocessor = task.preprocessor
    backbone_config = dict(hub_backbone.get_config())
    task_config = _task_config(task)
    config = arch.our_config(backbone_config, task_config)
    dtype = hub_backbone.dtype_policy.name
    if arch.causal_lm:
        tokenizer = getattr(preprocessor, "tokenizer", None)
        backbone = CausalLM(**config, tokenizer=tokenizer, dtype=dtype)
    else:
        backbone = BertBackbone(**config, dtype=dtype)
    copy_hub_weights(arch, hub_backbone, task, backbone)
    head, head_dropout = None, 0.1
    hub_head = arch.hub_head(task)
    if hub_head is not None:
        hub_dense, head_dropout = hub_head
        head = hub_dense.__class__.from_config(hub_dense.get_config())
        head.build((None, backbone.output["pooled_output"].shape[-1]))
        head.set_weights(hub_dense.get_weights())
    return HubModel(
        arch.name,
        backbone,
        head=head,
        head_dropout=head_dropout,
        preprocessor=preprocessor,
        hub_config={"backbone": backbone_config, "task": task_config},
        source=source or getattr(model, "name", arch.name),
    )


def copy_hub_weights(
    arch: Architecture, hub_backbone: Any, task: Any, backbone: BertBackbone | CausalLM
) -> None:
    """Copies keras-hub's weights into the library's model of `arch.our_config` (layer by
    layer; attention by role)."""
    theirs = arch.hub_layers(hub_backbone, task)
    mine = non_attention_layers(backbone)
    if len(theirs) != len(mine):
        raise CheckpointError(
            f"{arch.backbone_class}: {len(theirs)} layers to copy into {len(mine)}; the model's "
            "config does not match keras-hub's."
        )
    for dst, src in zip(mine, theirs, strict=True):
        dst.set_weights(src.get_weights())
    hub_attention = arch.hub_attention_layers(hub_backbone)
    for dst, src in zip(backbone.attention_layers, hub_attention, strict=True):
        assign_weights(dst, numpy_weights(src))

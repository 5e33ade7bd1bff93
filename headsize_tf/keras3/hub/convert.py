"""`convert_hub_model`: a keras-hub model's attention as grouped, latent or collaborative heads.

`convert_hub_lm` is `headsize-tf convert --keras-hub-preset`: a GPT-2's
conversion measured, optionally uptrained and written with its tokenizer.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.keras3.hub.hub_model import HubModel
from headsize_tf.keras3.hub.importer import import_hub_model
from headsize_tf.keras3.modeling.causal_lm import CausalLM
from headsize_tf.keras3.reparam.convert import convert_model
from headsize_tf.keras3.reparam.lm_file import convert_lm_file


def as_hub_model(model: Any) -> HubModel:
    """`model` if a `HubModel`, else the keras-hub model object imported (`import_hub_model`)."""
    return model if isinstance(model, HubModel) else import_hub_model(model)


def convert_hub_model(
    model: Any, target: ConversionTarget, **kwargs: Any
) -> tuple[HubModel, list[dict[str, Any]]]:
    """A keras-hub model (or `HubModel`) with every attention layer converted to `target`.

    `headsize_tf.keras3.reparam.convert_model` on the imported model: GPT-2's
    K/V heads grouped (`ConversionTarget("grouped", G)`, exact at G = heads)
    or shared through a latent (`ConversionTarget("latent", r)`), or BERT's
    heads collaborative. The head, preprocessor and tokenizer are kept; the
    result saves in the library's layout (`HubModel.save`), not as a keras-hub
    preset (keras-hub's blocks have no grouped or latent K/V).

    Args:
      model: A keras-hub `GPT2CausalLM`, `BertTextClassifier`, ... (or their
        backbones), or a `HubModel` (possibly pruned).
      target: What to convert into, e.g. `ConversionTarget("grouped", 2)`.
      **kwargs: Collaborative CP options (`max_iter`, `tol`, `tolerance`, `seed`).

    Returns:
      The converted `HubModel` and one report dict per layer.

    Example:

    >>> gpt2 = keras_hub.models.GPT2CausalLM.from_preset("gpt2_base_en")
    >>> grouped, reports = convert_hub_model(gpt2, ConversionTarget("grouped", 4))
    >>> grouped.generate("The quick brown fox", max_new_tokens=8)

    References:
      - Ainslie et al., 2023, "GQA: Training Generalized Multi-Query
        Transformer Models from Multi-Head Checkpoints",
        https://arxiv.org/abs/2305.13245
      - DeepSeek-AI, 2024, "DeepSeek-V2" (multi-head latent attention),
        https://arxiv.org/abs/2405.04434
    """
    hub = as_hub_model(model)
    backbone, reports = convert_model(hub.backbone, target, **kwargs)
    described = f"{hub.source} converted to {target.kind} {target.size_name} {target.size}"
    return hub.with_backbone(backbone, described), reports


def convert_hub_lm(
    model: Any,
    target: ConversionTarget,
    output: str | os.PathLike,
    *,
    text: Any = None,
    description: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """A keras-hub causal LM (GPT-2) converted, measured, optionally uptrained and saved.

    `keras3.reparam.convert_lm_file` on the model's `CausalLM` (the same
    conversion as `convert_hub_model`, the same report and plot), written as
    `HubModel.save` writes it, with the tokenizer: `load_hub_preset(output)`
    reopens it and `generate`s text. `output` also holds `report.json` and
    `conversion.png`.

    Args:
      model: A keras-hub `GPT2CausalLM` or a causal-LM `HubModel`.
      target: What to convert into, e.g. `ConversionTarget("grouped", 2)`;
        None with a `converter` (e.g. a latent at a cache budget).
      output: The directory written, atomically.
      text: `LMText` tokenised by the model's own tokenizer
        (`keras3.hub.lm_adapter.hub_lm_text`): held-out perplexity and the
        uptraining data; None: neither.
      description: What the conversion was, for the saved model's source line
        (default: the target's kind and size).
      **kwargs: `convert_lm_file`'s options (`uptrain_steps`, `learning_rate`,
        `batch_size`, `decode_tokens`, `overwrite`, `converter`, CP options, ...).

    Returns:
      The report (also `output/report.json`).

    Example:

    >>> text = hub_lm_text(hub, 129, corpus="austen")
    >>> report = convert_hub_lm(hub, ConversionTarget("latent", 256), "gpt2_mla", text=text,
    ...                         uptrain_steps=200)
    >>> load_hub_preset("gpt2_mla").generate("It is a truth", max_new_tokens=16)
    """
    hub = as_hub_model(model)
    if not hub.arch.causal_lm:
        raise ValueError(
            f"convert_hub_lm takes a causal LM (GPT-2); {hub.architecture} is an encoder "
            "(convert_hub_model converts its heads to collaborative ones)."
        )

    what = description or f"{target.kind} {target.size_name} {target.size}"

    def save(converted: CausalLM, directory: pathlib.Path) -> None:
        hub.with_backbone(converted, f"{hub.source} converted to {what}").write_into(directory)

    kwargs.setdefault("source", hub.source)
    return convert_lm_file(hub.backbone, target, output, text=text, save_model=save, **kwargs)

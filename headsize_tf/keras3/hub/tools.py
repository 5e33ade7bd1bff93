"""The Keras 3 tools on keras-hub models: compress, prune (a classifier or an LM).

`compress_hub_model` rewrites the attention as collaborative heads
(`headsize_tf.keras3.reparam`); `prune_hub_classifier` fine-tunes a BERT /
DistilBERT text classifier on a labelled task and prunes its heads
(`headsize_tf.keras3.pruning.classifier`, the classifier head kept when its
classes match); `prune_hub_lm` prunes GPT-2's heads by the importance of its
own next-token loss on plain text. Every output is a `HubModel.save`
directory (the library's layout once heads are removed or converted) with
`report.json`, which `load_hub_preset` opens.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from headsize_tf.core.io import atomic_directory, check_output_free, write_json
from headsize_tf.core.prune_loop import PruneSchedule, prune_loop
from headsize_tf.keras3.hub.classifier_adapter import HubClassifierAdapter
from headsize_tf.keras3.hub.convert import as_hub_model
from headsize_tf.keras3.hub.lm_adapter import HubLMAdapter, lm_windows
from headsize_tf.keras3.lm_training import windows_perplexity
from headsize_tf.keras3.pruning.classifier import PruneSettings, prune_classifier
from headsize_tf.keras3.reparam.compress import compress as compress_encoder
from headsize_tf.keras3.reparam.convert import compress_backbone

REPORT_FILE = "report.json"


def compress_hub_model(
    model: Any,
    shared_key_dim: int,
    output: str | os.PathLike,
    *,
    eval_sentences: Sequence[str] = (),
    overwrite: bool = False,
    batch_size: int = 32,
    **cp_kwargs: Any,
) -> dict[str, Any]:
    """Collaborative heads (a CP of every layer's W_Q W_K^T) for a keras-hub model; writes
    `output` with `report.json`.

    Args:
      model: A keras-hub model object or a `HubModel` (BERT, DistilBERT, GPT-2).
      shared_key_dim: `D`, in [1, heads x head size] (exact at the full rank).
      output: The directory written (`HubModel.save`'s library layout).
      eval_sentences: Sentences compared before and after: an encoder's
        embedding cosine, an LM's perplexity (none: skipped).
      overwrite: Replace an existing `output`.
      batch_size: Batch size of the comparison.
      **cp_kwargs: `method`, `max_iter`, `tol`, `tolerance`, `seed`.

    Returns:
      The report: per-layer relative error and seconds, parameters before
      and after, and the comparison on `eval_sentences`.

    Example:

    >>> report = compress_hub_model(hub, 32, "compressed", eval_sentences=lines)
    >>> report["mean_relative_error"], report.get("perplexity_after")
    """
    hub = as_hub_model(model)
    if not hub.arch.causal_lm:
        report = compress_encoder(
            hub,
            shared_key_dim,
            output,
            eval_sentences=eval_sentences,
            overwrite=overwrite,
            batch_size=batch_size,
            **cp_kwargs,
        )
        report = {"architecture": hub.architecture, **report}
        write_json(pathlib.Path(output) / REPORT_FILE, report)
        return report
    output = pathlib.Path(output)
    check_output_free(output, overwrite)
    start = time.perf_counter()
    lm, reports = compress_backbone(hub.backbone, shared_key_dim, **cp_kwargs)
    seconds = time.perf_counter() - start
    compressed = hub.with_backbone(
        lm, f"{hub.source} compressed to shared_key_dim={shared_key_dim}"
    )
    report: dict[str, Any] = {
        "framework": "keras3",
        "architecture": hub.architecture,
        "source": hub.source,
        "shared_key_dim": int(shared_key_dim),
        "layers": [r.to_dict() for r in reports],
        "mean_relative_error": float(np.mean([r.relative_error for r in reports])),
        "seconds": seconds,
        "params_before": int(hub.backbone.count_params()),
        "params_after": int(lm.count_params()),
        "attention_params_before": int(sum(r.params_before for r in reports)),
        "attention_params_after": int(sum(r.params_after for r in reports)),
    }
    if len(eval_sentences):
        length = min(64, hub.backbone.max_sequence_length)
        windows = lm_windows(hub, eval_sentences, length, limit=256)
        if len(windows):
            report["eval_windows"] = int(len(windows))
            report["perplexity_before"] = windows_perplexity(hub.backbone, windows, batch_size)
            report["perplexity_after"] = windows_perplexity(lm, windows, batch_size)
    with atomic_directory(output) as written:
        compressed.write_into(written)
        (written / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report


def prune_hub_classifier(
    model: Any,
    task: Any,
    output: str | os.PathLike,
    settings: PruneSettings | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Fine-tunes a keras-hub BERT / DistilBERT classifier on `task`, prunes its heads and
    writes `output` (`prune_classifier` with the model's own head and preprocessor).

    The classifier head is kept when it has `task.num_classes` classes (and
    no output activation); otherwise a new linear head goes on the pooled
    output (an encoder preset without a head gets one too).

    Args:
      model: A keras-hub model object or a `HubModel` (BERT or DistilBERT).
      task: A `headsize_tf.data.text_tasks.TextTask` (single texts).
      output: The directory written (`HubModel.save` plus `report.json` and
        `label_map.json`).
      settings: `PruneSettings` (the schedule, fine-tuning, lengths).
      overwrite: Replace an existing `output`.
      progress: Show the pruning progress bar.

    Returns:
      The pruning report (`core.prune_loop`): curve, heads per layer, dev
      accuracy original / masked / after removal, parameters.

    Example:

    >>> task = load_task(data_file="reviews.csv")
    >>> report = prune_hub_classifier(hub, task, "pruned", PruneSettings(target_fraction=0.3))
    """
    hub = as_hub_model(model)
    if hub.arch.causal_lm:
        raise ValueError(
            f"prune_hub_classifier takes BERT or DistilBERT; {hub.architecture} is a causal LM "
            "(use prune_hub_lm)."
        )
    keep = hub.head is not None and hub.num_classes == task.num_classes
    keep = keep and keras.activations.serialize(hub.head.activation) == "linear"
    classifier = hub.model if keep else None
    return prune_classifier(
        hub,
        task,
        output,
        settings,
        overwrite=overwrite,
        progress=progress,
        model=classifier,
        adapter_class=HubClassifierAdapter,
    )


@dataclasses.dataclass
class _LMSettings:
    target_fraction: float
    step: float
    recompute: bool
    min_heads_per_layer: int
    importance_windows: int
    eval_windows: int
    sequence_length: int


def prune_hub_lm(
    model: Any,
    train_texts: Sequence[str],
    dev_texts: Sequence[str],
    output: str | os.PathLike,
    *,
    target_fraction: float = 0.5,
    step: float = 0.1,
    recompute: bool = True,
    min_heads_per_layer: int = 1,
    importance_windows: int = 256,
    eval_windows: int = 128,
    sequence_length: int = 64,
    overwrite: bool = False,
    progress: bool = True,
    data: str = "",
) -> dict[str, Any]:
    """Prunes a keras-hub GPT-2's heads by E|dL/dxi_h| of its next-token loss; writes `output`.

    No fine-tuning: the importance is the gradient of the pretrained LM's own
    loss on windows of `train_texts`; the metric is the perplexity on
    windows of `dev_texts` (both tokenized by the model's keras-hub tokenizer).

    Args:
      model: A keras-hub `GPT2CausalLM` (or backbone with a preprocessor via
        `import_hub_model`) or a `HubModel`.
      train_texts: Texts of the importance windows.
      dev_texts: Texts of the perplexity windows.
      output: The directory written (`HubModel.save`'s library layout and
        `report.json`).
      target_fraction: Fraction of heads pruned at the end.
      step: Fraction of heads pruned per step.
      recompute: Recompute importance after each step.
      min_heads_per_layer: Heads every layer keeps.
      importance_windows: At most this many importance windows.
      eval_windows: At most this many perplexity windows.
      sequence_length: Tokens per window (at most the model's
        `max_sequence_length`).
      overwrite: Replace an existing `output`.
      progress: Show the pruning progress bar.
      data: A description of the texts for the report.

    Returns:
      The pruning report (`core.prune_loop`): curve of perplexities, heads
      per layer, perplexity original / masked / after removal, parameters.

    Example:

    >>> report = prune_hub_lm(gpt2, train_lines, dev_lines, "pruned", target_fraction=0.3)
    >>> report["perplexity"]["pruned"]
    """
    hub = as_hub_model(model)
    if not hub.arch.causal_lm:
        raise ValueError(
            f"prune_hub_lm takes a causal LM (GPT-2); {hub.architecture} is an encoder "
            "(use prune_hub_classifier)."
        )
    if hub.tokenizer is None:
        raise ValueError("The LM has no keras-hub preprocessor to tokenize the texts with.")
    check_output_free(output, overwrite)
    length = min(int(sequence_length), hub.backbone.max_sequence_length - 1)
    settings = _LMSettings(
        target_fraction,
        step,
        recompute,
        min_heads_per_layer,
        importance_windows,
        eval_windows,
        length,
    )
    adapter = HubLMAdapter(
        hub,
        lm_windows(hub, train_texts, length, importance_windows),
        lm_windows(hub, dev_texts, length, eval_windows),
    )

    def extras(report: dict[str, Any], pruned: HubLMAdapter) -> None:
        report.update(
            framework="keras3",
            backend=keras.backend.backend(),
            architecture=hub.architecture,
            data=data,
            settings=dataclasses.asdict(settings),
            windows={
                "importance": int(len(adapter.importance_windows)),
                "eval": int(len(adapter.eval_windows)),
            },
            heads_per_layer=list(pruned.lm.attention_spec.num_heads),
        )

    schedule = PruneSchedule(
        target_fraction, step, recompute, min_heads_per_layer, progress=progress
    )
    return prune_loop(adapter, schedule, output, overwrite=overwrite, extras=extras)

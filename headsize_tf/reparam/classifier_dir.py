"""Collaborative heads for a sentence classifier trained by `headsize-tf train`.

`compress --model-dir` of a `headsize_bert/sentence_prediction` run: its
`HeadsizeBertEncoder` becomes collaborative attention (CP of every layer's
stacked `W_Q^(h) W_K^(h)^T`, `headsize_tf.reparam.compress_encoder`), its
trained classification head is kept, and the result is an ordinary model_dir
of the same experiment; the report compares dev accuracy before and after
(the latter from the reloaded output). Other runs: `reparam.model_dir`.
"""

from __future__ import annotations

import os
from typing import Any

from headsize_tf.core.io import check_output_free, write_json
from headsize_tf.pruning.classifier_dir import (
    REPORT_FILE,
    accuracy,
    classifier_batches,
    load,
    save_classifier_dir,
)
from headsize_tf.reparam.encoder import compress_encoder


def compress_classifier_dir(
    model_dir: str | os.PathLike,
    shared_key_dim: int,
    output: str | os.PathLike,
    *,
    eval_batches: int = 32,
    overwrite: bool = False,
    progress: bool = True,
    **cp_kwargs: Any,
) -> dict[str, Any]:
    """The model_dir's encoder as collaborative heads (CP), its trained head kept.

    Args:
      model_dir: A `headsize_bert/sentence_prediction` model_dir.
      shared_key_dim: `D` of every attention layer.
      output: The model_dir written (atomically, with its report).
      eval_batches: Dev batches of the before / after accuracy.
      overwrite: Replace an existing `output`.
      progress: A progress bar over the layers.
      **cp_kwargs: `method`, `max_iter`, `tol`, `tolerance`, `seed` of the CP.
    """
    check_output_free(output, overwrite)
    params, model, encoder = load(model_dir)
    if encoder.get_config().get("pruned_heads"):
        raise ValueError(f"{model_dir} has pruned heads; compress the model before pruning it.")
    compressed, reports = compress_encoder(encoder, shared_key_dim, progress=progress, **cp_kwargs)
    dev_data = classifier_batches(params, "validation", eval_batches)
    report = {
        "source": str(model_dir),
        "shared_key_dim": int(shared_key_dim),
        "layers": [
            {"name": r.name, "relative_error": float(r.relative_error), "seconds": float(r.seconds)}
            for r in reports
        ],
        "params_before": int(encoder.count_params()),
        "params_after": int(compressed.count_params()),
        "accuracy_before": accuracy(model, dev_data),
    }
    path = save_classifier_dir(params, model, compressed, output, report, overwrite)
    _, reloaded, _ = load(path)
    report["accuracy_after"] = accuracy(reloaded, dev_data)
    write_json(path / REPORT_FILE, report)
    return report


__all__ = ["compress_classifier_dir"]

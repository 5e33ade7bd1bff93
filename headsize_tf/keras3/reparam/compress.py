"""Compress a Keras 3 `SentenceEncoder` into collaborative heads, with a report.

The Keras 3 counterpart of `headsize_tf.reparam.compress` (what
`headsize-tf compress --framework keras3` runs): every attention layer
becomes collaborative attention with a shared key dim `D` (`compress_backbone`),
the original and compressed sentence embeddings are compared on held-out
sentences, and the checkpoint directory (`SentenceEncoder.save` layout plus
`report.json`) is written atomically.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.core.io import atomic_directory, check_output_free
from headsize_tf.keras3.pretrained import SentenceEncoder
from headsize_tf.keras3.reparam.convert import compress_backbone

REPORT_FILE = "report.json"


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean cosine similarity of matching rows of `a` and `b`."""
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return float(np.mean(np.sum(a * b, axis=1)))


def compress(
    source: SentenceEncoder,
    shared_key_dim: int,
    output: str | os.PathLike,
    *,
    eval_sentences: Sequence[str] = (),
    overwrite: bool = False,
    batch_size: int = 64,
    **cp_kwargs: Any,
) -> dict[str, Any]:
    """Compresses `source` and writes a checkpoint directory with `report.json`.

    Args:
      source: A Keras 3 `SentenceEncoder` with standard or fixed-head attention.
      shared_key_dim: `D`, in [1, heads x head size].
      output: The checkpoint directory to write (opened by
        `load_sentence_encoder(checkpoint=...)`).
      eval_sentences: Sentences for the embedding cosine (none: skipped).
      overwrite: Replace an existing `output`.
      batch_size: Embedding batch size.
      **cp_kwargs: `method`, `max_iter`, `tol`, `tolerance`, `seed`.

    Returns:
      The report: per-layer relative error and seconds, parameter counts,
      and the mean cosine between original and compressed embeddings.
    """
    output = pathlib.Path(output)
    check_output_free(output, overwrite)
    start = time.perf_counter()
    backbone, reports = compress_backbone(source.backbone, shared_key_dim, **cp_kwargs)
    seconds = time.perf_counter() - start
    compressed = source.with_backbone(
        backbone, f"{source.source} compressed to shared_key_dim={shared_key_dim}"
    )
    report: dict[str, Any] = {
        "framework": "keras3",
        "source": source.source,
        "shared_key_dim": int(shared_key_dim),
        "layers": [r.to_dict() for r in reports],
        "mean_relative_error": float(np.mean([r.relative_error for r in reports])),
        "seconds": seconds,
        "params_before": int(source.backbone.count_params()),
        "params_after": int(backbone.count_params()),
        "attention_params_before": int(sum(r.params_before for r in reports)),
        "attention_params_after": int(sum(r.params_after for r in reports)),
    }
    if len(eval_sentences):
        before = source.embed(eval_sentences, batch_size=batch_size)
        after = compressed.embed(eval_sentences, batch_size=batch_size)
        report["eval_sentences"] = len(eval_sentences)
        report["embedding_cosine"] = mean_cosine(before, after)
    with atomic_directory(output) as written:
        compressed.write_into(written)
        (written / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report

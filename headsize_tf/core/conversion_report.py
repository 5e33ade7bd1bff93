"""What a head-sharing conversion reports, for both fronts: the file names and the plot.

`headsize-tf convert` writes `report.json` (metrics by stage: "original",
"converted", "uptrained"; KV-cache bytes per token; parameters; decoding
tokens/s side by side) and `conversion.png` beside the converted model,
whether it is a tf_keras model_dir (`headsize_tf.reparam.convert_dir`) or a
Keras 3 `.keras` LM (`headsize_tf.keras3.reparam.lm_file`).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np

from headsize_tf.core.io import save_figure

REPORT_FILE = "report.json"
PLOT_FILE = "conversion.png"
STAGES = ("original", "converted", "uptrained")


def plot_conversion(report: dict[str, Any], path: str | os.PathLike) -> pathlib.Path:
    """Bars of the report: perplexity (BLEU) by stage, KV-cache bytes and decoding tokens/s.

    Panels whose numbers the report lacks (no text: no perplexity) are left out.

    Args:
      report: A `convert` report (`REPORT_FILE`).
      path: The PNG written (atomically).

    Example:

    >>> plot_conversion(json.load(open("runs/lm_latent/report.json")), "conversion.png")
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (key, label)
        for key, label in (
            ("perplexity", "held-out perplexity"),
            ("bleu", "validation BLEU (greedy)"),
            ("kv_cache_bytes_per_token", "KV-cache bytes per token"),
            ("decoding_tokens_per_second", "cached greedy decoding tokens/s"),
        )
        if report.get(key)
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4))
    colors = {"original": "0.55", "converted": "tab:blue", "uptrained": "tab:green"}
    for ax, (key, label) in zip(np.atleast_1d(axes), panels, strict=True):
        values = report[key]
        bars = ax.bar(list(values), list(values.values()), color=[colors[k] for k in values])
        ax.bar_label(bars, fmt="%.4g", fontsize=8)
        ax.set(title=label)
        ax.tick_params(axis="x", labelsize=8)
    target = report["target"]
    size = next(v for k, v in target.items() if k not in ("kind", "method"))
    source = report.get("experiment") or report.get("source")
    fig.suptitle(
        f"{source} -> {target['kind']} ({size}, {target['method']}); "
        f"uptrained {report['uptrain_steps']} steps",
        fontsize=9,
    )
    return save_figure(fig, path)


__all__ = ["PLOT_FILE", "REPORT_FILE", "STAGES", "plot_conversion"]

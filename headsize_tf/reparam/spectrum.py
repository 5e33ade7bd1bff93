"""Spectrum analysis of query-key products (Cordonnier et al. 2020, Fig. 1).

For each layer: the cumulative share of variance captured by the top-k
singular values of (a) each head's `W_Q^(h) W_K^(h)^T` separately and (b) the
heads' concatenated `[W_Q^(1)..W_Q^(H)] [W_K^(1)..W_K^(H)]^T`-style products
(the `W_Q`/`W_K` concatenation over heads). If heads shared nothing, the
concatenation would need `H * head_size` dimensions; a curve that saturates far
earlier shows the redundancy collaborative heads remove.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

from headsize_tf.reparam.convert import attention_weights


def _cumulative_energy(matrix: np.ndarray) -> np.ndarray:
    s = np.linalg.svd(matrix, compute_uv=False)
    energy = np.cumsum(s**2)
    return energy / energy[-1] if energy[-1] > 0 else energy


def layer_spectrum(layer) -> dict[str, np.ndarray]:
    """Cumulative captured variance: per head (mean over heads) and concatenated.

    Returns `{"per_head": [head_size], "concatenated_query": [width],
    "concatenated_key": [width]}` curves, each rising to 1.
    """
    weights = attention_weights(layer)
    q, k = weights["query_kernel"], weights["key_kernel"]  # [d, h, p]
    heads = q.shape[1]
    per_head = np.mean(
        [_cumulative_energy(q[:, h, :] @ k[:, h, :].T)[: q.shape[2]] for h in range(heads)], axis=0
    )
    return {
        "per_head": per_head,
        "concatenated_query": _cumulative_energy(q.reshape(q.shape[0], -1)),
        "concatenated_key": _cumulative_energy(k.reshape(k.shape[0], -1)),
    }


def encoder_spectrum(encoder) -> list[dict[str, np.ndarray]]:
    encoder.build_weights()
    return [layer_spectrum(layer) for layer in encoder.attention_layers]


def plot_spectrum(
    spectra: list[dict[str, np.ndarray]], path: str | os.PathLike, title: str = ""
) -> pathlib.Path:
    """Writes the Fig. 1-style plot (one line per layer, two panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for i, spectrum in enumerate(spectra):
        color = plt.cm.viridis(i / max(len(spectra) - 1, 1))
        axes[0].plot(
            np.arange(1, len(spectrum["per_head"]) + 1),
            spectrum["per_head"],
            color=color,
            label=f"layer {i}",
        )
        curve = spectrum["concatenated_key"]
        axes[1].plot(np.arange(1, len(curve) + 1), curve, color=color, label=f"layer {i}")
    axes[0].set(
        title="per head: W_Q^(h) W_K^(h)T (mean over heads)",
        xlabel="rank",
        ylabel="cumulative captured variance",
    )
    axes[1].set(title="heads concatenated: [W_K^(1) ... W_K^(H)]", xlabel="rank")
    axes[1].axvline(len(spectra[0]["per_head"]), color="gray", ls=":", lw=1)
    axes[1].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    from headsize_tf.core.io import save_figure

    return save_figure(fig, path)

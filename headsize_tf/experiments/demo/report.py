"""The demo's summary: the markdown table and the figure."""

from __future__ import annotations

import os

from headsize_tf.core.io import save_figure


def markdown(rows: list[dict]) -> str:
    """The summary table: one row per model."""
    lines = [
        "| idea | model | encoder params | attention params | dev accuracy | dev examples/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['idea']} | {r['name']} | {r['encoder_params']:,} | "
        f"{r['attention_params']:,} | {100 * r['dev_accuracy']:.2f}% | "
        f"{r['examples_per_second']:,.0f} |"
        for r in rows
    ]
    return "\n".join(lines)


def plot(rows: list[dict], path: str | os.PathLike) -> None:
    """Dev accuracy (with attention parameters) and dev examples/s per model, as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {
        "standard": "#888",
        "fixed_head": "#2a7",
        "minilm": "#aaa",
        "collaborative": "#27c",
        "pruned": "#c52",
    }
    names = [r["name"].replace(" (", "\n(").replace(", ", ",\n", 1) for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, key, label, scale in (
        (axes[0], "dev_accuracy", "dev accuracy (%)", 100),
        (axes[1], "examples_per_second", "dev examples / s", 1),
    ):
        values = [scale * r[key] for r in rows]
        bars = ax.bar(range(len(rows)), values, color=[colors.get(r["slug"], "#888") for r in rows])
        for bar, r, v in zip(bars, rows, values, strict=True):
            text = f"{v:.1f}" if key == "dev_accuracy" else f"{v:,.0f}"
            if key == "dev_accuracy":
                text += f"\n{r['attention_params'] / 1e6:.2f}M attn"
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                bar.get_height(),
                text,
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.set_xticks(range(len(rows)), names, fontsize=6.5)
        ax.set_ylabel(label)
        if key == "dev_accuracy":
            ax.set_ylim(50, 100)
    axes[0].set_title("Rotten Tomatoes dev accuracy (attention parameters)")
    axes[1].set_title("Inference speed (CPU, measured side by side)")
    fig.tight_layout()
    save_figure(fig, path)

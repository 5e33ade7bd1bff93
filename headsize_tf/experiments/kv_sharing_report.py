"""The report of `kv_sharing_study`: summary, plot and README from the run records.

`kv_sharing_study.run_study` collects the records of its steps (the base
model, the uptrained control and every converted variant, training-free and
uptrained) and writes `summarize`'s dict as `summary.json`, `plot`'s figure as
`kv_sharing.png` and `markdown`'s text as `README.md`. The functions take the
study's `Settings` (`kv_sharing_study.Settings`); `METHODS` and `LABELS` name
the methods in the study's order (these and the three functions stay importable from
`kv_sharing_study`).
"""

from __future__ import annotations

import pathlib
import statistics
from collections.abc import Sequence
from typing import Any

from headsize_tf.core.io import save_figure
from headsize_tf.experiments._steps import study_command

METHODS = ("grouped_mean", "grouped_svd", "latent", "pruned", "collaborative")
LABELS = {
    "grouped_mean": "grouped K/V, mean-pooled (Ainslie)",
    "grouped_svd": "grouped K/V, per-group SVD",
    "latent": "shared latent K/V (joint SVD)",
    "pruned": "heads pruned (importance)",
    "collaborative": "collaborative keys",
}


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(records: dict[str, Any], settings: Any) -> dict[str, Any]:
    """The table rows, the best method per cache fraction and the verdicts."""
    base = records["base"]
    base_ppl = base["validation_perplexity"]
    control = _mean_std([r["validation_perplexity"] for r in records["control"]["runs"]])
    control_test = _mean_std([r["test_perplexity"] for r in records["control"]["runs"]])
    rows = []
    for slug, record in records["variants"].items():
        free = record["free"]
        up_mean, up_std = _mean_std([r["validation_perplexity"] for r in record["uptrained"]])
        test_mean, test_std = _mean_std([r["test_perplexity"] for r in record["uptrained"]])
        rows.append(
            {
                "slug": slug,
                "method": free["method"],
                "size": free["size"],
                "fraction": free["fraction"],
                "cache_bytes_per_token": free["cache_bytes_per_token"],
                "params": free["params"],
                "free": free["validation_perplexity"],
                "uptrained": up_mean,
                "uptrained_std": up_std,
                "uptrained_test": test_mean,
                "uptrained_test_std": test_std,
                "rate": record["rate"],
                "sweep": record["sweep"],
                "uptrained_vs_base": up_mean / base_ppl - 1,
                "free_vs_base": free["validation_perplexity"] / base_ppl - 1,
            }
        )
    best = {}
    for f in settings.fractions:
        at = [r for r in rows if abs(r["fraction"] - 1 / f) < 1e-9]
        if at:
            top = min(at, key=lambda r: r["uptrained"])
            free_top = min(at, key=lambda r: r["free"])
            best[f"1/{f}"] = {
                "uptrained": top["slug"],
                "uptrained_vs_base": top["uptrained_vs_base"],
                "free": free_top["slug"],
                "free_vs_base": free_top["free_vs_base"],
            }
    goals = {}
    for f, limit in ((4, 0.03), (2, 0.01)):
        if f"1/{f}" in best:
            change = best[f"1/{f}"]["uptrained_vs_base"]
            goals[f"1/{f}"] = {"limit": limit, "change": change, "met": change <= limit}
    return {
        "settings": settings.to_dict(),
        "base": {
            "validation_perplexity": base_ppl,
            "test_perplexity": base.get("test_perplexity"),
            "cache_bytes_per_token": base["cache_bytes_per_token"],
            "params": base["params"],
            "device": base.get("device"),
        },
        "control_uptrained": {
            "mean": control[0],
            "std": control[1],
            "test_mean": control_test[0],
            "test_std": control_test[1],
            "rate": records["control"]["rate"],
            "sweep": records["control"]["sweep"],
        },
        "rows": rows,
        "best": best,
        "goals": goals,
    }


def plot(summary: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    colors = dict(zip(METHODS, ["C0", "C1", "C2", "C3", "C4"], strict=True))
    for method in METHODS:
        rows = sorted(
            (r for r in summary["rows"] if r["method"] == method), key=lambda r: r["fraction"]
        )
        if not rows:
            continue
        x = [r["fraction"] for r in rows]
        ax.plot(x, [r["free"] for r in rows], "--", marker="x", color=colors[method], alpha=0.6)
        ax.errorbar(
            x,
            [r["uptrained"] for r in rows],
            yerr=[r["uptrained_std"] for r in rows],
            marker="o",
            color=colors[method],
            label=LABELS[method],
            capsize=3,
        )
    base = summary["base"]["validation_perplexity"]
    ax.axhline(base, color="black", linewidth=1, label=f"multi-head, full cache ({base:.1f})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    fractions = sorted({r["fraction"] for r in summary["rows"]})
    ax.set_xticks(fractions)
    ax.set_xticklabels(
        [f"1/{round(1 / f)}" if abs(1 / f - round(1 / f)) < 1e-9 else f"{f:.2f}" for f in fractions]
    )
    ax.minorticks_off()
    top = max(max(r["free"], r["uptrained"]) for r in summary["rows"])
    ticks = [
        t for t in (90, 95, 100, 105, 110, 120, 130, 140, 160, 200) if base * 0.9 < t < top * 1.1
    ]
    ax.set_yticks(ticks)
    ax.set_yticklabels([str(t) for t in ticks])
    ax.set_xlabel("KV-cache fraction of the multi-head model's")
    ax.set_ylabel("validation perplexity (log scale)")
    ax.set_title("Austen LM: dashed = training-free, solid = uptrained on 5% (mean ± std)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save_figure(fig, path)
    plt.close(fig)


def markdown(summary: dict[str, Any], settings: Any) -> str:
    """README.md: the summary's command (this process's where it has none), the model,
    the table and the verdict."""
    command = summary.get("command") or study_command(
        "headsize_tf.experiments.kv_sharing_study", None
    )
    base = summary["base"]
    control = summary["control_uptrained"]
    lines = [
        "# Every head-sharing method at equal KV-cache size (Austen LM, Keras 3)",
        "",
        f"Command: `{command}`",
        "",
        f"Model: {settings.layers} pre-LN layers, width {settings.width}, {settings.heads} heads "
        f"of {settings.head_size}, sequence {settings.sequence_length}, trained "
        f"{settings.steps} steps of {settings.batch_size} x {settings.sequence_length} tokens "
        f"(validation perplexity {base['validation_perplexity']:.2f}, test "
        f"{base['test_perplexity']:.2f}; {base['cache_bytes_per_token']:,} cache bytes per "
        f"token in float32; {base['device']}). Uptraining (Ainslie et al.): "
        f"{settings.uptrain_steps} steps ({100 * settings.uptrain_fraction:.0f}% of the "
        "training tokens) of the original loss and optimizer, warm-up and linear decay from a "
        "peak rate chosen per model on seed "
        f"{settings.seeds[0]} among {[f'{r:g}' for r in settings.uptrain_learning_rates]} by "
        f"validation perplexity, then seeds {list(settings.seeds[1:])} at that rate; test "
        "perplexity is untouched by the choice. The unconverted model uptrained the same way "
        f"(rate {control['rate']:g}): validation {control['mean']:.2f} ± {control['std']:.2f}, "
        f"test {control['test_mean']:.2f} ± {control['test_std']:.2f}. Training-free and "
        "uptrained perplexities are on the validation split (Northanger Abbey).",
        "",
        "![perplexity vs cache](kv_sharing.png)",
        "",
        "| cache | method | size | bytes/token | params | training-free | uptrained (mean ± std) "
        "| vs base | rate | test, uptrained |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(summary["rows"], key=lambda r: (-r["fraction"], r["method"])):
        lines.append(
            f"| {r['fraction']:.3f} | {LABELS[r['method']]} | {r['size']} | "
            f"{r['cache_bytes_per_token']:,} | {r['params']:,} | {r['free']:.2f} | "
            f"{r['uptrained']:.2f} ± {r['uptrained_std']:.2f} | "
            f"{100 * r['uptrained_vs_base']:+.1f}% | {r['rate']:g} | "
            f"{r['uptrained_test']:.2f} ± {r['uptrained_test_std']:.2f} |"
        )
    lines += ["", "## Verdict", ""]
    for fraction, best in summary["best"].items():
        lines.append(
            f"- Cache {fraction}: best uptrained **{best['uptrained']}** "
            f"({100 * best['uptrained_vs_base']:+.1f}% vs the unconverted model); best "
            f"training-free {best['free']} ({100 * best['free_vs_base']:+.1f}%)."
        )
    for fraction, goal in summary["goals"].items():
        verdict = "met" if goal["met"] else "**not met**"
        lines.append(
            f"- Goal at {fraction} (within {100 * goal['limit']:.0f}% of the unconverted "
            f"perplexity after uptraining): {verdict} ({100 * goal['change']:+.1f}%)."
        )
    return "\n".join(lines) + "\n"

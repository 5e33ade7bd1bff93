"""The reproductions' report (`reproduce` and `reproduction` both): the verdict rules, the
verdicts table, the perplexity plot, and the `reproduction`'s README and learning curves.

The rule of every verdict: a difference counts only when the mean ± std bars
of the two models do not overlap (`compare`).
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import numpy as np

from headsize_tf.core.io import save_figure
from headsize_tf.experiments.reproduction.presets import Preset
from headsize_tf.experiments.reproduction.sweep import EDGE_EXTENSIONS


def _fmt(row: dict) -> str:
    return f"{row['mean']:.2f} ± {row['std']:.2f}"


def compare(a: dict, b: dict) -> str:
    """ "lower" / "higher" when a's mean perplexity is below / above b's by more
    than their two standard deviations together (the 1-std bars do not
    overlap); otherwise "tie"."""
    if a["mean"] + a["std"] < b["mean"] - b["std"]:
        return "lower"
    if a["mean"] - a["std"] > b["mean"] + b["std"]:
        return "higher"
    return "tie"


def r1_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """R1's judged (baseline, fixed) pairs from rows planned as baseline, fixed, ...

    Only pairs with a wider baseline test the claim: matching the narrowest baseline's
    parameters gives a fixed-head model of the same width (fewer heads).
    """
    return [
        (b, f)
        for b, f in zip(rows[0::2], rows[1::2], strict=True)
        if b["key"] != f["key"] and b["width"] > f["width"]
    ]


def verdicts(summary: dict) -> list[dict]:
    """Each claim of the paper, judged from the summary's means and stds.

    Rules (stated in the README): a difference counts only when the 1-std bars
    do not overlap (`compare`). Call only with every planned run finished.
    """
    out = []
    if "R1" in summary:
        pairs = r1_pairs(summary["R1"])
        results = [compare(f, b) for b, f in pairs]
        verdict = (
            "not reproduced"
            if "higher" in results
            else "reproduced"
            if "lower" in results
            else "tie"
        )
        width, size = (pairs[0][1]["width"], pairs[0][1]["head_size"]) if pairs else ("w", "p")
        out.append(
            {
                "claim": f"R1: at equal parameters, width {width} with fixed head size {size} is at "
                "least as good as the wider baselines (head = width / 4)",
                "evidence": "; ".join(
                    f"{f['key']} {_fmt(f)} vs {b['key']} {_fmt(b)} ({r})"
                    for (b, f), r in zip(pairs, results, strict=True)
                ),
                "verdict": verdict,
            }
        )
    if "R2" in summary:
        rows = summary["R2"]
        fixed = sorted(
            (r for r in rows if r["attention_type"] == "fixed_head"), key=lambda r: r["heads"]
        )
        base = sorted(
            (r for r in rows if r["attention_type"] == "standard"), key=lambda r: r["heads"]
        )
        first = next(r for r in base if r["heads"] == fixed[0]["heads"])
        series = [first] + fixed if first["key"] != fixed[0]["key"] else fixed
        result = compare(series[-1], series[0])
        out.append(
            {
                "claim": f"R2a: with head size fixed at {fixed[-1]['head_size']}, more heads "
                "improve perplexity (parameters grow with the heads)",
                "evidence": ", ".join(f"{r['heads']} heads {_fmt(r)}" for r in series),
                "verdict": {
                    "lower": "reproduced",
                    "higher": "not reproduced (reversed)",
                    "tie": "not reproduced (no clear change)",
                }[result],
            }
        )
        best = min(base, key=lambda r: r["mean"])
        # Most heads against the best baseline; when most heads is itself the best, against
        # the fewest heads (lower there means the claim is reversed).
        result = compare(base[-1], best) if base[-1] is not best else compare(base[-1], base[0])
        out.append(
            {
                "claim": "R2b: with head size = width / heads, many heads make the model worse",
                "evidence": ", ".join(
                    f"{r['heads']} heads of {r['width'] // r['heads']} {_fmt(r)}" for r in base
                ),
                "verdict": {
                    "higher": "reproduced",
                    "lower": "not reproduced (reversed)",
                    "tie": "not reproduced (no clear change)",
                }[result],
            }
        )
    if "R3" in summary:
        rows = sorted(summary["R3"], key=lambda r: r["head_size"])
        result = compare(rows[-1], rows[0])
        out.append(
            {
                "claim": "R3: at 8 heads, a larger head size improves perplexity",
                "evidence": ", ".join(f"head size {r['head_size']} {_fmt(r)}" for r in rows),
                "verdict": {
                    "lower": "reproduced",
                    "higher": "not reproduced (reversed)",
                    "tie": "not reproduced (no clear change)",
                }[result],
            }
        )
    return out


def verdicts_table(judged: Sequence[dict]) -> list[str]:
    """The README's "Verdicts" section (no lines when nothing is judged)."""
    if not judged:
        return []
    lines = [
        "## Verdicts",
        "",
        "A difference counts only when the mean ± std bars do not overlap.",
        "",
        "| claim | here (test perplexity) | verdict |",
        "|---|---|---|",
    ]
    lines += [f"| {v['claim']} | {v['evidence']} | **{v['verdict']}** |" for v in judged]
    lines.append("")
    return lines


def plot_perplexity(
    summary: dict, path: pathlib.Path, titles: dict[str, str] | None = None
) -> None:
    """Test perplexity (mean ± std) per experiment: vs parameters (R1), heads (R2) or head
    size (R3), baselines and fixed heads as two series; `titles` per experiment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    field = {"R1": "params", "R2": "heads", "R3": "head_size"}
    fig, axes = plt.subplots(1, len(summary), figsize=(5 * len(summary), 3.8))
    axes = np.atleast_1d(axes)
    for ax, (name, rows) in zip(axes, summary.items(), strict=True):
        for kind, label in (
            ("standard", "baseline (head = width / heads)"),
            ("fixed_head", "fixed head size"),
        ):
            pts = sorted(
                (r for r in rows if r["attention_type"] == kind and r["mean"] is not None),
                key=lambda r: r[field[name]],
            )
            ax.errorbar(
                [r[field[name]] for r in pts],
                [r["mean"] for r in pts],
                yerr=[r["std"] for r in pts],
                fmt="o-",
                capsize=3,
                label=label,
            )
        ax.set(
            title=(titles or {}).get(name, name),
            ylabel="test perplexity",
            xlabel={"R1": "parameters", "R2": "heads", "R3": "head size"}[name],
        )
        if name != "R1":
            ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    save_figure(fig, path)


def markdown(
    summary: dict,
    preset_name: str,
    preset: Preset,
    command: str,
    status: str,
    judged: Sequence[dict],
    ordered: Sequence[dict],
    runner_line: str = "",
) -> str:
    p = preset
    lines = [
        "# Bhojanapalli et al. (2020) R1 and R2: per-model learning rates, learning curves",
        "",
        f"Command: `{command}`",
        "",
        *([runner_line, ""] if runner_line else []),
        f"Preset `{preset_name}`: {p.layers} pre-LN layers, FFN 4 x width, vocab "
        f"{p.vocab_size}, sequence {p.sequence_length}, batch {p.batch_size}, {p.steps} "
        f"steps ({p.tokens:,} training tokens per run), dropout {p.dropout}, AdamW with 10% "
        f"warm-up and linear decay; learning rate per model from the grid "
        f"{', '.join(f'{lr:g}' for lr in p.learning_rates)} (seed 0, lowest final "
        "validation perplexity); test perplexity (Persuasion), mean ± sample std (n - 1) "
        "over seeds; seed 0 also chose the rate, so the mean of the other seeds is shown "
        "too; train perplexity: the last training loop's (dropout on), seed mean, where "
        "runs recorded it.",
        "",
        status,
        "",
    ]
    titles = {
        "R1": "R1 (Fig. 1): width w with fixed head size vs wider baselines at equal parameters",
        "R2": f"R2 (Fig. 3a): width {p.width}, more heads: baseline (head = width / "
        f"heads) vs fixed head {p.head_size}",
    }
    notes = {
        "R1": f"Pairs at equal parameters. The first pair (width {p.width}) has one width "
        "on both sides and is not judged: it is the narrow end of the baseline "
        "series.",
        "R2": "The baselines keep the parameters of width "
        f"{p.width}; the fixed-head models grow with their heads, as in the paper.",
    }
    for name in ("R1", "R2"):
        lines += [
            f"## {titles[name]}",
            "",
            notes[name],
            "",
            "| model | width | heads | head size | params | learning rate | "
            "test perplexity | seeds | other seeds' mean | train perplexity |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for i, r in enumerate(summary[name]):
            if i and r["key"] == summary[name][i - 1]["key"]:
                continue  # Baseline and fixed head coincide (width / heads = head size).
            ppl = "not run" if r["mean"] is None else f"{r['mean']:.2f} ± {r['std']:.2f}"
            lr = "sweep pending" if r["learning_rate"] is None else f"{r['learning_rate']:g}"
            trained = (
                "—"
                if r["train_perplexity"] is None
                else f"{r['train_perplexity']:.2f} ({r['train_seeds']} seeds)"
            )
            other = "—" if r["mean_other_seeds"] is None else f"{r['mean_other_seeds']:.2f}"
            lines.append(
                f"| {r['key']} | {r['width']} | {r['heads']} | {r['head_size']} | "
                f"{r['params']:,} | {lr} | {ppl} | "
                f"{','.join(map(str, r['seeds']))} | {other} | {trained} |"
            )
        lines.append("")
    rates = sorted({float(lr) for finals in summary["sweep"].values() for lr in finals})
    lines += [
        "## Learning-rate sweep (seed 0, final validation perplexity)",
        "",
        f"The grid {', '.join(f'{lr:g}' for lr in p.learning_rates)} gains a doubling "
        f"(halving) while a model's best rate is its largest (smallest), up to "
        f"{EDGE_EXTENSIONS} times; empty cells were not needed."
        + (f" {p.grid_note}" if p.grid_note else ""),
        "",
        "| model | " + " | ".join(f"lr {lr:g}" for lr in rates) + " |",
        "|---|" + "---:|" * len(rates),
    ]
    for key, finals in summary["sweep"].items():
        values = {float(lr): v for lr, v in finals.items()}
        cells = [
            "" if lr not in values else "—" if values[lr] is None else f"{values[lr]:.2f}"
            for lr in rates
        ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines.append("")
    if ordered:
        lines += [
            "## Is the budget long enough? The ordering of each pair along training",
            "",
            "Validation perplexity, fixed minus baseline, over the seeds both have; a "
            "pair is settled when the seed-mean difference and every seed's own keep "
            "one sign from the middle checkpoint to the last.",
            "",
            "| experiment | fixed | baseline | seed-mean difference at each checkpoint | "
            "same sign since step | final, by seed | settled |",
            "|---|---|---|---|---:|---|---|",
        ]
        for o in ordered:
            diffs = ", ".join(f"{d:+.1f}" for d in o["difference"])
            finals = ", ".join(
                f"{s}: {d:+.1f}" for s, d in zip(o["seeds"], o["final_by_seed"], strict=True)
            )
            lines.append(
                f"| {o['experiment']} | {o['fixed']} | {o['baseline']} | {diffs} | "
                f"{o['settled_from_step']} | {finals} | "
                f"{'yes' if o['settled'] else 'no'} |"
            )
        lines.append("")
    lines += verdicts_table(judged)
    lines += [
        "![perplexity vs parameters and heads](reproduction.png)",
        "",
        "![learning curves](curves.png)",
        "",
    ]
    return "\n".join(lines)


def plot(summary: dict, out: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Fig. 1 plots perplexity against parameters for fixed-head models of several head
    # counts: R2's fixed-head models (width w, heads of the fixed size) join R1's there.
    r1_keys = {r["key"] for r in summary["R1"]}
    extra = [
        r for r in summary["R2"] if r["attention_type"] == "fixed_head" and r["key"] not in r1_keys
    ]
    plot_perplexity(
        {"R1": summary["R1"] + extra, "R2": summary["R2"]},
        out / "reproduction.png",
        titles={"R1": "R1 (Fig. 1 style; R2's fixed heads too)", "R2": "R2 (Fig. 3a style)"},
    )

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, curve in sorted(summary["curves"].items()):
        ax.plot(
            curve["steps"],
            curve["perplexity"],
            "--" if key.startswith("std") else "-",
            marker="o",
            markersize=3,
            label=key,
        )
    ax.set(
        xlabel="step",
        ylabel="validation perplexity (seed mean)",
        yscale="log",
        title="Learning curves at each model's learning rate",
    )
    if summary["curves"]:
        ax.legend(fontsize=6, ncol=2)
    save_figure(fig, out / "curves.png")

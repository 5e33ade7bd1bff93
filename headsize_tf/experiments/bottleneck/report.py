"""The bottleneck study's summary, verdict, table and plots (from its run files), and its
report files: `bottleneck.json`, README.md and `bottleneck.png` under the output."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from headsize_tf.core.io import atomic_path, write_json
from headsize_tf.experiments.bottleneck.plan import models
from headsize_tf.experiments.bottleneck.presets import PRESETS
from headsize_tf.experiments.reproduction.summary import settled_from

COMMAND = "python -m headsize_tf.experiments.bottleneck"


def command(preset_name: str, out: pathlib.Path) -> str:
    """The command that makes (and resumes) the study at `out`."""
    preset = "" if preset_name == "cpu" else f" --preset {preset_name}"
    return f"{COMMAND}{preset} --output {out}"


def write_report(preset_name: str, out: pathlib.Path, runs: list[dict[str, Any]]) -> dict:
    """Writes `bottleneck.json`, `README.md` and `bottleneck.png` under `out`; returns the
    summary. The README links a `VERDICT.md` beside it, or in the directory above."""
    preset = PRESETS[preset_name]
    summary = {"preset": preset_name, **summarize(preset, runs, models)}
    write_json(out / "bottleneck.json", summary)
    with atomic_path(out / "README.md") as tmp:
        discussion = next(
            (f"../{name}" for name in ("VERDICT.md",) if (out.parent / name).exists()),
            "VERDICT.md" if (out / "VERDICT.md").exists() else None,
        )
        pathlib.Path(tmp).write_text(
            markdown(summary, preset, command(preset_name, out), discussion)
        )
    if summary["rows"]:
        with atomic_path(out / "bottleneck.png") as tmp:
            plot(summary, preset, tmp)
    return summary


KIND_LABELS = {"standard": "standard", "fixed_head": "fixed head size", "collaborative": "collab"}


def summarize(
    preset: Any, runs: Sequence[dict[str, Any]], models: Callable[[Any, Any], Sequence[Any]]
) -> dict[str, Any]:
    """Rows per setting and model at the model's chosen rate, and the compared pairs.

    `models(preset, setting)` lists a setting's models (`bottleneck.plan.models`).
    """
    by_key = {(r["setting"], r["model"], r["learning_rate"], r["seed"]): r for r in runs}
    rows, comparisons = [], []
    for setting in (*preset.settings, *preset.sweep_only):
        name = setting.name
        group: dict[str, dict[str, Any]] = {}
        for model in models(preset, setting):
            sweep = {
                f"{lr:g}": by_key[name, model.key, lr, preset.seeds[0]]["accuracy"]
                for lr in preset.learning_rates
                if (name, model.key, lr, preset.seeds[0]) in by_key
            }
            lr = _chosen(preset, by_key, name, model.key)
            got = [by_key[k] for s in preset.seeds if (k := (name, model.key, lr, s)) in by_key]
            if not got:
                continue
            acc = [r["accuracy"] for r in got]
            row = {
                "setting": name,
                "task": setting.task,
                "sequence_length": setting.sequence_length,
                "needed_rank": got[0]["needed_rank"],
                "model": model.key,
                "kind": model.kind,
                "width": model.width,
                "heads": model.heads,
                "rank_bound": model.rank_bound,
                "params": got[0]["params"],
                "learning_rate": lr,
                "sweep": sweep,
                # With three rates or more, a choice at the grid's edge says the grid
                # may not hold the best rate (with two, every choice is an edge).
                "rate_at_edge": len(preset.learning_rates) > 2
                and lr in (min(preset.learning_rates), max(preset.learning_rates)),
                "seeds": [r["seed"] for r in got],
                "accuracy": float(np.mean(acc)),
                "accuracy_std": float(np.std(acc, ddof=1)) if len(acc) > 1 else 0.0,
                # Seed 0 also chose the rate on the same held-out set: the other seeds alone.
                "accuracy_other_seeds": float(np.mean(acc[1:])) if len(acc) > 1 else None,
                "by_seed": {str(r["seed"]): r["accuracy"] for r in got},
                "curves": {str(r["seed"]): [p["accuracy"] for p in r["curve"]] for r in got},
                "steps": [p["step"] for p in got[0]["curve"]],
                "attention_rank": float(np.mean([r["attention_rank"] for r in got])),
                "source_mass": float(np.mean([max(r["source_mass_by_layer"]) for r in got])),
                "devices": sorted({r["device"] for r in got}),
            }
            rows.append(row)
            group[model.key] = row
        comparisons += _compare(preset, group)
    return {"rows": rows, "comparisons": comparisons}


def _chosen(preset: Any, by_key: dict, name: str, key: str) -> float | None:
    found = [
        (r["accuracy"], -r["curve"][-1]["train_loss"], lr)
        for lr in preset.learning_rates
        if (r := by_key.get((name, key, lr, preset.seeds[0])))
    ]
    return max(found)[2] if len(found) == len(preset.learning_rates) else None


def _pairs(group: dict[str, dict[str, Any]], width: int) -> list[tuple[dict, dict, str]]:
    """(challenger, baseline, what is compared) of one setting; `width`: the narrow d."""
    rows = list(group.values())
    narrow = next((r for r in rows if r["kind"] == "standard" and r["width"] == width), None)
    out = []
    for i, row in enumerate(rows):
        if row["kind"] == "fixed_head":
            if narrow:
                out.append((row, narrow, "same width"))
            after = rows[i + 1] if i + 1 < len(rows) else None
            wide = after if after and after["kind"] == "standard" and after is not narrow else None
            if wide:
                out.append((row, wide, "equal parameters"))
        elif row["kind"] == "collaborative" and narrow:
            out.append((row, narrow, "equal parameters"))
    return out


def _layer_bound(row: dict[str, Any]) -> int:
    """The query/key dimensions of a whole layer: h x p, or D for collaborative heads
    (they share one query/key space of D and only reweight its dimensions)."""
    return row["rank_bound"] if row["kind"] == "collaborative" else row["heads"] * row["rank_bound"]


def _compare(preset: Any, group: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for a, b, what in _pairs(group, preset.width):
        seeds = sorted(set(a["curves"]) & set(b["curves"]), key=int)
        if not seeds or a["steps"] != b["steps"]:
            continue
        per_seed = np.subtract([a["curves"][s] for s in seeds], [b["curves"][s] for s in seeds])
        diff = per_seed.mean(0)
        middle = (len(diff) - 1) // 2
        start = settled_from(diff)
        agree = all((np.sign(row[middle:]) == np.sign(diff[-1])).all() for row in per_seed)
        settled = bool(start is not None and start <= middle and agree and diff[-1] != 0)
        # Theorem 1's prediction: the challenger's larger rank bound helps only where the
        # baseline's heads are below the needed rank. Per head; and for the layer, whose
        # h heads can split the queries between them (h x the bound in all).
        predicted = a["rank_bound"] > b["rank_bound"] and a["needed_rank"] > b["rank_bound"]
        total = [_layer_bound(a), _layer_bound(b)]
        predicted_total = total[0] > total[1] and a["needed_rank"] > total[1]
        verdict = (
            ("wins" if diff[-1] > 0 else "loses") if settled and len(seeds) > 1 else "unsettled"
        )
        out.append(
            {
                "setting": a["setting"],
                "task": a["task"],
                "sequence_length": a["sequence_length"],
                "needed_rank": a["needed_rank"],
                "challenger": a["model"],
                "baseline": b["model"],
                "compared": what,
                "bounds": [a["rank_bound"], b["rank_bound"]],
                "params": [a["params"], b["params"]],
                "difference": float(diff[-1]),
                # Where every model ends near 100%, the first checkpoint still shows which
                # learns faster.
                "difference_first": float(diff[0]),
                "first_step": a["steps"][0],
                "final_by_seed": per_seed[:, -1].tolist(),
                "params_ratio": a["params"] / b["params"],
                "settled": settled,
                "verdict": verdict,
                "predicted_win": bool(predicted),
                "predicted_win_total": bool(predicted_total),
            }
        )
    return out


def verdict_lines(summary: dict[str, Any]) -> list[str]:
    """The study's answer in sentences, from the comparisons."""
    comps = [c for c in summary["comparisons"] if c["challenger"].startswith("fixed")]
    fair = [c for c in comps if c["compared"] == "equal parameters"]
    lines = []
    wins = [c for c in fair if c["verdict"] == "wins"]
    losses = [c for c in fair if c["verdict"] == "loses"]
    lines.append(
        f"At equal parameters a fixed head size wins {len(wins)} of {len(fair)} comparisons "
        f"(settled over every seed), loses {len(losses)}, and {len(fair) - len(wins) - len(losses)} "
        "are unsettled."
    )
    for c in wins:
        lines.append(
            f"- wins: {c['setting']} (needed rank {c['needed_rank']}): "
            f"{c['challenger']} over {c['baseline']} by {100 * c['difference']:+.1f} points."
        )
    for key, reading in (
        ("predicted_win", "per head (the needed rank exceeds the baseline's head size)"),
        (
            "predicted_win_total",
            "per layer (it exceeds h x the head size: heads can split queries)",
        ),
    ):
        predicted = [c for c in fair if c[key]]
        if not predicted:
            continue
        won = sum(c["verdict"] == "wins" for c in predicted)
        lost = sum(c["verdict"] == "loses" for c in predicted)
        surprise = sum(c["verdict"] == "wins" for c in fair if not c[key])
        lines.append(
            f"Theorem 1 read {reading} predicts a win in {len(predicted)} of them: "
            f"{won} won, {lost} lost, {len(predicted) - won - lost} unsettled; "
            f"{surprise} win(s) where it predicts none."
        )
    collab = [c for c in summary["comparisons"] if c["challenger"].startswith("collab")]
    if collab:
        won = sum(c["verdict"] == "wins" for c in collab)
        lines.append(
            f"Collaborative heads (rank bound D = d, the standard model's parameters) win "
            f"{won} of {len(collab)} comparisons against standard heads."
        )
    return lines


def markdown(
    summary: dict[str, Any], preset: Any, command: str, discussion: str | None = None
) -> str:
    """The README; `discussion`: a hand-written page beside it to link (e.g. VERDICT.md)."""
    lines = [
        "# Where does the head-size bottleneck bind?",
        "",
        f"Command: `{command}`",
        "",
        *(
            [f"What it shows, with the long runs: [{discussion}]({discussion}).", ""]
            if discussion
            else []
        ),
        f"Causal LMs of {preset.layers} layers, {preset.heads} heads, trained "
        f"{preset.steps} steps of {preset.batch_size} fresh sequences on the tasks of "
        "`headsize_tf.data.rank_tasks`; accuracy over the answers of "
        f"{preset.eval_examples} held-out sequences, mean ± sample std over seeds "
        f"{', '.join(map(str, preset.seeds))} at each model's rate (chosen on seed "
        f"{preset.seeds[0]} from {', '.join(f'{x:g}' for x in preset.learning_rates)}). "
        "Needed rank: the copy tasks' solving attention pattern's (m, one source per "
        "answer), preference's logits' (K: its preference matrix's); bound: the rank one head's logits can reach (d/h, p or D); used: "
        "the attention rank the trained heads use (mean over layers, heads, examples); "
        "source mass: the most attention one head of a layer puts on the answers' sources.",
        "",
        "## Verdict",
        "",
        *verdict_lines(summary),
        "",
        "## Models",
        "",
        "| setting | needed rank | model | params | bound | needed / bound | rate | accuracy | "
        "seeds 1+ | used rank | source mass |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in summary["rows"]:
        edge = " (edge)" if r["rate_at_edge"] else ""
        lines.append(
            f"| {r['setting']} | {r['needed_rank']} | {r['model']} | "
            f"{r['params']:,} | {r['rank_bound']} | {r['needed_rank'] / r['rank_bound']:.2g} | "
            f"{r['learning_rate']:g}{edge} | {_accuracy(r)} | {_pct(r['accuracy_other_seeds'])} | "
            f"{r['attention_rank']:.1f} | {r['source_mass']:.2f} |"
        )
    lines += [
        "",
        "## Comparisons",
        "",
        "Challenger minus baseline accuracy (points) after the last step; settled when the "
        "seed-mean difference and every seed's keep one sign from the middle checkpoint on.",
        "",
        "| setting | challenger | baseline | compared | params ratio | difference | by seed | "
        "verdict | predicted win: per head / per layer | at the first checkpoint |",
        "|---|---|---|---|---:|---:|---|---|---|---:|",
    ]
    for c in summary["comparisons"]:
        seeds = ", ".join(f"{100 * x:+.1f}" for x in c["final_by_seed"])
        lines.append(
            f"| {c['setting']} | {c['challenger']} | {c['baseline']} | "
            f"{c['compared']} | {c['params_ratio']:.2f} | {100 * c['difference']:+.1f} | "
            f"{seeds} | {c['verdict']} | "
            f"{'yes' if c['predicted_win'] else 'no'} / "
            f"{'yes' if c['predicted_win_total'] else 'no'} | "
            f"{100 * c['difference_first']:+.1f} (step {c['first_step']}) |"
        )
    devices = sorted({d for r in summary["rows"] for d in r["devices"]})
    lines += ["", f"Devices: {', '.join(devices)}.", "", "![accuracy](bottleneck.png)", ""]
    return "\n".join(lines)


def _accuracy(row: dict[str, Any]) -> str:
    if len(row["seeds"]) == 1:
        return f"{100 * row['accuracy']:.1f} (seed {row['seeds'][0]} only)"
    return f"{100 * row['accuracy']:.1f} ± {100 * row['accuracy_std']:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def plot(summary: dict[str, Any], preset: Any, path: Any) -> None:
    """Accuracy against parameters per setting, and against needed rank / head bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [*preset.settings, *preset.sweep_only]
    names = [s.name for s in settings]
    cols = 3
    rows_count = -(-(len(names) + 1) // cols)
    fig, axes = plt.subplots(rows_count, cols, figsize=(4.4 * cols, 3.4 * rows_count))
    axes = np.atleast_1d(axes).ravel()
    colors = {"standard": "tab:blue", "fixed_head": "tab:red", "collaborative": "tab:green"}
    for ax, setting in zip(axes, settings, strict=False):
        name = setting.name
        rows = [r for r in summary["rows"] if r["setting"] == name]
        if not rows:
            ax.text(0.5, 0.5, "not run yet", ha="center", va="center", transform=ax.transAxes)
        for r in rows:
            ax.errorbar(
                r["params"],
                100 * r["accuracy"],
                yerr=100 * r["accuracy_std"],
                fmt="o",
                color=colors[r["kind"]],
                capsize=3,
            )
            ax.annotate(
                r["model"].split("_", 1)[1],
                (r["params"], 100 * r["accuracy"]),
                fontsize=6,
                xytext=(3, 3),
                textcoords="offset points",
            )
        ax.set_xscale("log")
        ax.set_title(f"{name} (needed rank {setting.needed_rank})", fontsize=9)
        ax.set_xlabel("parameters")
        ax.set_ylabel("answer accuracy (%)")
        ax.grid(alpha=0.3)
    ax = axes[len(names)]
    for kind, color in colors.items():
        rows = [r for r in summary["rows"] if r["kind"] == kind]
        ax.scatter(
            [r["needed_rank"] / r["rank_bound"] for r in rows],
            [100 * r["accuracy"] for r in rows],
            color=color,
            label=KIND_LABELS[kind],
            s=14,
        )
    ax.axvline(1.0, color="gray", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_title("every setting: accuracy against m / head bound", fontsize=9)
    ax.set_xlabel("needed rank / (d/h, p or D)")
    ax.set_ylabel("answer accuracy (%)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    for ax in axes[len(names) + 1 :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

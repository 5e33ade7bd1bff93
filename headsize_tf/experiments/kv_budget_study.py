"""Calibrated KV-cache budgets on an LM without RoPE: the activations' SVD against the weights'.

The Austen LM of `kv_sharing_study` (Keras 3 `CausalLM`: 4 pre-LN layers,
width 128, 8 heads of 16, learned positions, 2,000 steps) is trained here (or
its saved model reused), then its KV cache is cut, training-free, to 1/8, 1/16
and 1/32 of multi-head's:

* a shared latent (`keras3.reparam.compress_kv` with `KVPlan(rope_strategy=None)`)
  from the joint SVD of the key and value *weights*, from the SVD of their
  *activations* on the first 32 training windows (the inputs' second moments
  whiten it: TransMLA's PCA, CARE's covariance SVD), and the latter with the
  latent's sizes moved between layers by spectral energy at the same total;
* grouped K/V where the budget allows whole heads (1/8: one of 8), each group
  re-based by the SVD of its operators' weights or activations
  (`kv_compress.grouped_budget`).

Validation perplexity on Northanger Abbey (the whole split). Each step writes
its own file under `runs/` (the base model and the calibration statistics under
`models/`), so a rerun skips finished steps; README.md and kv_budget.png are
rebuilt from the files.

    python -m headsize_tf.experiments.kv_budget_study --output results/kv_budget_austen
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Sequence
from typing import Any

from headsize_tf.core.io import write_atomic
from headsize_tf.experiments import kv_sharing_study as sharing
from headsize_tf.experiments._steps import Steps, study_command

MODULE = "headsize_tf.experiments.kv_budget_study"
# (kind, calibration, allocation) of each conversion.
METHODS = (
    ("latent", "weights", "uniform"),
    ("latent", "activations", "uniform"),
    ("latent", "activations", "energy"),
    ("grouped", "weights", "uniform"),
    ("grouped", "activations", "uniform"),
)
LABELS = {
    ("latent", "weights", "uniform"): "latent, weight SVD",
    ("latent", "activations", "uniform"): "latent, activation SVD",
    ("latent", "activations", "energy"): "latent, activation SVD, sizes by energy",
    ("grouped", "weights", "uniform"): "grouped K/V, weight SVD",
    ("grouped", "activations", "uniform"): "grouped K/V, activation SVD",
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The base LM (`kv_sharing_study.Settings`), the budgets (1/f) and the calibration."""

    base: sharing.Settings = sharing.Settings()
    fractions: tuple[int, ...] = (8, 16, 32)
    calibration_windows: int = 32

    @property
    def sequence_length(self) -> int:
        return self.base.sequence_length

    @property
    def vocab_size(self) -> int:
        return self.base.vocab_size


def quick() -> Settings:
    """Seconds-long settings for the tests."""
    # The smallest WordPiece vocabulary the Austen text gives is about 110 tokens.
    base = dataclasses.replace(sharing.quick(), sequence_length=16, vocab_size=256, steps=12)
    return Settings(base=base, fractions=(4, 8), calibration_windows=8)


def _slug(method: tuple[str, str, str], fraction: int) -> str:
    kind, calibration, allocation = method
    return f"{kind}_{calibration}_{allocation}_1of{fraction}"


def variants(settings: Settings) -> list[tuple[tuple[str, str, str], int]]:
    """(method, 1/f) of every conversion: grouped K/V only where whole heads meet the budget."""
    heads = settings.base.heads
    return [
        (method, fraction)
        for fraction in settings.fractions
        for method in METHODS
        if method[0] == "latent" or fraction <= heads
    ]


def _statistics(out: pathlib.Path, base: Any, train: Any, settings: Settings) -> Any:
    """Calibration statistics of the base on the first training windows (kept in models/)."""
    from headsize_tf.keras3.reparam.calibration import CalibrationStats, calibration_stats

    path = out / "models" / f"calibration_{settings.calibration_windows}.npz"
    if path.exists():
        return CalibrationStats.load(path)
    windows = train[: settings.calibration_windows, :-1]
    source = (
        f"austen train: the first {windows.shape[0]} windows of {windows.shape[1]} tokens, in "
        "order (no sample, no seed)"
    )
    stats = calibration_stats(base, windows, source=source)
    stats.save(path)
    return stats


def convert(base: Any, method: tuple[str, str, str], fraction: int, stats: Any) -> Any:
    """`base` at 1/`fraction` of its cache by `method` (training-free); (model, report)."""
    from headsize_tf.keras3.reparam import KVPlan, compress_kv, convert_model
    from headsize_tf.keras3.reparam.kv_compress import grouped_budget

    kind, calibration, allocation = method
    calibrated = calibration == "activations"
    if kind == "latent":
        plan = KVPlan(1 / fraction, None, calibrated=calibrated, allocation=allocation)
        return compress_kv(base, plan, stats)
    target, report = grouped_budget(base, 1 / fraction, stats if calibrated else None, "svd")
    converted, layers = convert_model(
        base, target, covariances=stats.covariances if calibrated else None
    )
    return converted, {**report, "layers": layers}


def run_study(
    output: str | pathlib.Path,
    corpus_dir: str | pathlib.Path,
    settings: Settings,
    report_only: bool = False,
    command: str | None = None,
) -> dict[str, Any]:
    """Runs (or resumes) the study; writes README.md, summary.json and kv_budget.png.

    `command` is the report's command line (default: this process's arguments,
    `study_command(..., None)`).
    """
    from headsize_tf.experiments import lm_keras3

    out = pathlib.Path(output)
    corpus_dir = pathlib.Path(corpus_dir)
    base_settings = settings.base
    arrays = {} if report_only else sharing._arrays(base_settings, corpus_dir)
    steps = Steps(out, report_only=report_only)
    base_path = out / "models" / "base.keras"

    def train_base() -> dict[str, Any]:
        record = lm_keras3.train_run(
            {"kind": "standard", "num_heads": base_settings.heads},
            base_settings.width,
            sharing._preset(base_settings),
            base_settings.learning_rate,
            0,
            corpus_dir,
            progress=lambda line: print(f"  {line}", flush=True),
            model_path=base_path,
        )
        measured = sharing._measure(sharing._load(base_path), base_settings, arrays["valid"])
        return {**record, **measured}

    # A record without its model retrains it; what was made from an earlier base goes.
    base_record = steps.run(
        "base",
        "train the multi-head LM",
        train_base,
        base_settings.base_settings(),
        outputs=[base_path],
        derived=["runs/*.json", "models/calibration_*.npz"],
    )
    loaded: dict[str, Any] = {}

    def base_and_stats() -> tuple[Any, Any]:
        if not loaded:
            base = sharing._load(base_path)
            loaded["base"] = base
            loaded["stats"] = _statistics(out, base, arrays["train"], settings)
        return loaded["base"], loaded["stats"]

    rows = []
    run_settings = {
        **base_settings.base_settings(),
        "calibration_windows": settings.calibration_windows,
    }
    for method, fraction in variants(settings):

        def work(method=method, fraction=fraction) -> dict[str, Any]:
            base, stats = base_and_stats()
            model, report = convert(base, method, fraction, stats)
            measured = sharing._measure(model, base_settings, arrays["valid"])
            sizes = report.get("latent_per_layer") or report.get("kv_heads_per_layer")
            return {"sizes": sizes, **measured}

        slug = _slug(method, fraction)
        title = f"{LABELS[method]} at 1/{fraction} of the cache"
        record = steps.run(slug, title, work, run_settings)
        rows.append({"method": list(method), "fraction": 1 / fraction, **record})
    summary = {
        "command": command or study_command(MODULE, None),
        "base": {
            key: base_record.get(key)
            for key in ("validation_perplexity", "cache_bytes_per_token", "params", "device")
        },
        "seconds": {
            "base": base_record["seconds"],
            "conversions": sum(row["seconds"] for row in rows),
        },
        "settings": {
            **dataclasses.asdict(base_settings),
            "fractions": list(settings.fractions),
            "calibration_windows": settings.calibration_windows,
        },
        "rows": rows,
    }
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot(summary, out / "kv_budget.png")
    write_atomic(out / "README.md", markdown(summary))
    return summary


def _label(row: dict[str, Any]) -> str:
    return LABELS[tuple(row["method"])]


def verdicts(summary: dict[str, Any]) -> list[str]:
    """Per budget: the activation SVD against the weight SVD, latent and grouped."""
    lines = []
    by = {(tuple(r["method"]), round(1 / r["fraction"])): r for r in summary["rows"]}
    base = summary["base"]["validation_perplexity"]
    for fraction in summary["settings"]["fractions"]:
        for kind in ("latent", "grouped"):
            weights = by.get(((kind, "weights", "uniform"), fraction))
            calibrated = by.get(((kind, "activations", "uniform"), fraction))
            if weights is None or calibrated is None:
                continue
            w, c = weights["validation_perplexity"], calibrated["validation_perplexity"]
            lines.append(
                f"1/{fraction}, {kind}: activation SVD {c:.2f} against weight SVD {w:.2f} "
                f"(+{100 * (c / base - 1):.1f}% against +{100 * (w / base - 1):.1f}% over the "
                f"original's {base:.2f}): the calibrated conversion "
                + ("wins." if c < w else "does not win.")
            )
    return lines


def markdown(summary: dict[str, Any]) -> str:
    """README.md: the summary's command (this process's where it has none), the model, the
    table and the verdict."""
    settings = summary["settings"]
    base = summary["base"]
    lines = [
        "# Calibrated KV-cache budgets on an LM without RoPE (Austen LM, Keras 3)",
        "",
        f"Command: `{summary.get('command') or study_command(MODULE, None)}`",
        "",
        f"Model: a Keras 3 `CausalLM` with learned positions, {settings['layers']} pre-LN "
        f"layers, width {settings['width']}, {settings['heads']} heads of "
        f"{settings['width'] // settings['heads']}, trained {settings['steps']} steps of "
        f"{settings['batch_size']} x {settings['sequence_length']} tokens on four Austen "
        f"novels (validation perplexity {base['validation_perplexity']:.2f}, "
        f"{base['cache_bytes_per_token']:,} cache bytes per token). Every conversion is "
        "training-free; the activation SVD whitens by the attention inputs' second moments "
        f"on the first {settings['calibration_windows']} training windows. Perplexity on the "
        "validation split (Northanger Abbey).",
        "",
        f"Time: {summary['seconds']['base'] / 60:.0f} minutes to train the base, "
        f"{summary['seconds']['conversions'] / 60:.1f} for the {len(summary['rows'])} "
        f"conversions and their measurements ({base['device'] or 'CPU'}).",
        "",
        "![perplexity against cache](kv_budget.png)",
        "",
        "| cache | method | sizes per layer | bytes/token | perplexity | vs original |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for row in summary["rows"]:
        ppl = row["validation_perplexity"]
        change = 100 * (ppl / base["validation_perplexity"] - 1)
        lines.append(
            f"| 1/{round(1 / row['fraction'])} | {_label(row)} | "
            f"{', '.join(str(s) for s in row['sizes'])} | {row['cache_bytes_per_token']:,} | "
            f"{ppl:.2f} | {change:+.1f}% |"
        )
    lines += ["", "## Verdict", ""] + [f"- {line}" for line in verdicts(summary)]
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: pathlib.Path) -> None:
    """Perplexity against the cache fraction, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headsize_tf.core.io import atomic_path

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for method in METHODS:
        rows = [r for r in summary["rows"] if tuple(r["method"]) == method]
        if rows:
            xs = [r["fraction"] for r in rows]
            ys = [r["validation_perplexity"] for r in rows]
            ax.plot(xs, ys, marker="o", label=LABELS[method])
    ax.axhline(summary["base"]["validation_perplexity"], color="grey", ls="--", label="original")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("fraction of the multi-head KV cache")
    ax.set_ylabel("validation perplexity (training-free)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    return sharing.austen_study_main(
        argv,
        MODULE,
        __doc__.splitlines()[0],
        lambda fast: quick() if fast else Settings(),
        run_study,
        lambda summary, _: markdown(summary),
    )


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "kv_budget_study")

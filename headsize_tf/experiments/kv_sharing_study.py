"""Every head-sharing method at equal KV-cache size, on an LM trained here (Keras 3).

A causal LM (4 pre-LN layers, width 128, 8 heads of 16, sequence 128) is
trained on Jane Austen's novels (2000 steps of 16 x 128 tokens, the
results/lm_pruning model's shape and budget, on Keras 3's `lm_keras3`
runner), then its decoding cache is cut to 1/2, 1/4 and 1/8 by each method:

* grouped-query K/V heads, mean-pooled (Ainslie et al., 2023), G = 4, 2, 1;
* grouped-query K/V heads, per-group operator SVD (`core.kv_sharing`);
* a shared latent K/V by the balanced joint SVD (TransMLA / MHA2MLA),
  r = 128, 64, 32 (the cache holds h (p + v) = 256 numbers per token);
* head pruning at the same cache size (Michel et al.: importance
  E|dL/dxi_h| on training windows, recomputed after each 1/8 of the heads,
  every layer keeping a head), the pruned heads removed;
* collaborative keys (Cordonnier et al.), which cache a shared key of D plus
  every head's value: they cannot go below half the cache, so they are
  measured at the smallest D in the grid (D = 16: 0.59 of the cache).

Each converted model is measured training-free (validation perplexity) and
after uptraining on 5% of the original training tokens (100 steps, Ainslie's
recipe: the original loss and optimizer, warm-up and decay), 3 seeds; the
unconverted model uptrained the same way is the control. Each step writes its
own file under `runs/` (converted models under `models/`), so a rerun skips
finished steps; the table, plot and verdict are rebuilt from the files.

    python -m headsize_tf.experiments.kv_sharing_study --output results/kv_sharing
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.core.io import save_figure, write_atomic
from headsize_tf.experiments._steps import Steps

METHODS = ("grouped_mean", "grouped_svd", "latent", "pruned", "collaborative")
LABELS = {
    "grouped_mean": "grouped K/V, mean-pooled (Ainslie)",
    "grouped_svd": "grouped K/V, per-group SVD",
    "latent": "shared latent K/V (joint SVD)",
    "pruned": "heads pruned (importance)",
    "collaborative": "collaborative keys",
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The study's shapes and budgets (`quick()` for tests)."""

    layers: int = 4
    width: int = 128
    heads: int = 8
    sequence_length: int = 128
    batch_size: int = 16
    steps: int = 2000
    learning_rate: float = 2e-3
    dropout: float = 0.1
    vocab_size: int = 4096
    uptrain_fraction: float = 0.05
    uptrain_learning_rates: tuple[float, ...] = (1e-4, 3e-4, 1e-3)
    seeds: tuple[int, ...] = (0, 1, 2)
    fractions: tuple[int, ...] = (2, 4, 8)  # The cache is cut to 1/f.
    collaborative_dims: tuple[int, ...] = (16,)
    importance_windows: int = 256
    methods: tuple[str, ...] = METHODS

    @property
    def head_size(self) -> int:
        return self.width // self.heads

    @property
    def uptrain_steps(self) -> int:
        return max(1, round(self.uptrain_fraction * self.steps))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def base_settings(self) -> dict[str, Any]:
        """What the base model depends on (a changed entry retrains it)."""
        fields = ("layers", "width", "heads", "sequence_length", "batch_size", "steps")
        fields += ("learning_rate", "dropout", "vocab_size")
        return {name: getattr(self, name) for name in fields}

    def convert_settings(self) -> dict[str, Any]:
        """What a conversion depends on (the pruning importance data included)."""
        return {**self.base_settings(), "importance_windows": self.importance_windows}

    def uptrain_settings(self) -> dict[str, Any]:
        return {**self.convert_settings(), "uptrain_fraction": self.uptrain_fraction}


def quick() -> Settings:
    """Seconds-long settings for the tests (a 1-layer LM, 4 heads of 4)."""
    return Settings(
        uptrain_learning_rates=(1e-3, 3e-3),
        layers=1,
        width=16,
        heads=4,
        batch_size=4,
        steps=8,
        seeds=(0, 1),
        fractions=(2, 4),
        collaborative_dims=(2,),
        importance_windows=8,
        uptrain_fraction=0.25,
    )


def variants(settings: Settings) -> list[dict[str, Any]]:
    """(method, size, fraction) of every converted model."""
    out = []
    heads, p = settings.heads, settings.head_size
    for f in settings.fractions:
        if heads % f == 0:
            for method in ("grouped_mean", "grouped_svd"):
                out.append({"method": method, "size": heads // f, "fraction": 1 / f})
            out.append(
                {"method": "pruned", "size": settings.layers * heads // f, "fraction": 1 / f}
            )
        out.append({"method": "latent", "size": 2 * heads * p // f, "fraction": 1 / f})
    for d in settings.collaborative_dims:
        fraction = (d + heads + heads * p) / (2 * heads * p)
        out.append({"method": "collaborative", "size": d, "fraction": fraction})
    return [v for v in out if v["method"] in settings.methods]


def _slug(variant: dict[str, Any]) -> str:
    return f"{variant['method']}_{variant['size']}"


def _preset(settings: Settings):
    from headsize_tf.experiments.reproduction.presets import Preset

    return Preset(
        layers=settings.layers,
        sequence_length=settings.sequence_length,
        batch_size=settings.batch_size,
        width=settings.width,
        steps=settings.steps,
        learning_rates=(settings.learning_rate,),
        curve_points=4,
        dropout=settings.dropout,
        vocab_size=settings.vocab_size,
    )


def _arrays(settings: Settings, corpus_dir: pathlib.Path) -> dict[str, np.ndarray]:
    from headsize_tf.experiments import lm_keras3

    arrays = {s: lm_keras3.load_lm_array(corpus_dir, s) for s in lm_keras3.SPLITS}
    lm_keras3.check_lm_arrays(arrays, settings.sequence_length, settings.vocab_size)
    return arrays


def _load(path: pathlib.Path):
    import keras

    import headsize_tf.keras3.modeling  # noqa: F401  (registers the classes a file names)

    return keras.saving.load_model(path, compile=False)


def _measure(lm, settings: Settings, valid: np.ndarray) -> dict[str, Any]:
    from headsize_tf.core import kv_cache
    from headsize_tf.experiments import lm_keras3

    lm_keras3.compile_lm(lm, 1e-3, settings.uptrain_steps)  # Evaluation only.
    ppl, loss = lm_keras3.perplexity(lm, valid)
    spec = lm.attention_spec
    return {
        "validation_perplexity": ppl,
        "validation_loss": loss,
        "cache_bytes_per_token": kv_cache.kv_cache_bytes_per_token(
            spec, settings.width, num_layers=settings.layers
        ),
        "params": int(lm.count_params()),
        "attention": spec.to_dict(),
    }


def _prune(base, settings: Settings, train: np.ndarray, keep: int):
    """Removes heads by iterative importance pruning down to `keep` heads in all."""
    import keras

    from headsize_tf.core.pruning_plan import iterative_pruning
    from headsize_tf.keras3.pruning import remove_heads
    from headsize_tf.keras3.pruning.importance import head_importance
    from headsize_tf.keras3.pruning.remove import set_head_mask

    windows = train[: settings.importance_windows]
    batches = [
        (windows[i : i + 16, :-1], windows[i : i + 16, 1:]) for i in range(0, len(windows), 16)
    ]
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    total = settings.layers * settings.heads

    def importance(mask: np.ndarray) -> np.ndarray:
        set_head_mask(base, mask)
        return head_importance(base, batches, loss)

    steps = iterative_pruning(
        (settings.layers, settings.heads),
        importance,
        lambda mask: 0.0,
        target_fraction=1 - keep / total,
        step=1 / settings.heads,
        recompute=True,
        min_heads_per_layer=1,
        progress=False,
    )
    mask = np.asarray(steps[-1].mask, np.float32)
    set_head_mask(base, np.ones_like(mask))
    if int(mask.sum()) != keep:
        raise RuntimeError(f"Pruning kept {int(mask.sum())} heads, not {keep}.")
    return remove_heads(base, mask)


def convert_variant(base, variant: dict[str, Any], settings: Settings, train: np.ndarray):
    """The converted model of one variant (training-free)."""
    from headsize_tf.core.conversion import ConversionTarget
    from headsize_tf.keras3.reparam import convert_model

    method, size = variant["method"], variant["size"]
    if method == "pruned":
        return _prune(base, settings, train, size)
    kind, how = {
        "grouped_mean": ("grouped", "mean"),
        "grouped_svd": ("grouped", "svd"),
        "latent": ("latent", "joint_svd"),
        "collaborative": ("collaborative", "als"),
    }[method]
    return convert_model(base, ConversionTarget(kind, size, how))[0]


def uptrain(
    lm, settings: Settings, arrays: dict[str, np.ndarray], seed: int, learning_rate: float
) -> dict[str, Any]:
    """Ainslie's uptraining: `uptrain_steps` more steps of the original loss and optimizer
    (warm-up and linear decay from `learning_rate`); validation and test perplexity."""
    import keras

    from headsize_tf.experiments import lm_keras3

    keras.utils.set_random_seed(seed)
    steps = settings.uptrain_steps
    lm_keras3.compile_lm(lm, learning_rate, steps)
    curve, _ = lm_keras3.fit_windows(
        lm,
        arrays["train"],
        steps,
        settings.batch_size,
        seed + 1000,  # Not the base run's data order.
        [steps],
        lambda: lm_keras3.perplexity(lm, arrays["valid"]),
    )
    return {
        "validation_perplexity": curve[-1]["perplexity"],
        "test_perplexity": lm_keras3.perplexity(lm, arrays["test"])[0],
        "steps": steps,
        "seed": seed,
        "learning_rate": learning_rate,
    }


def uptrain_runs(
    steps: Steps, slug: str, title: str, model_path: pathlib.Path, settings: Settings, arrays
) -> tuple[float, list[dict[str, Any]], dict[str, float]]:
    """The rate sweep on the first seed (best validation perplexity wins), then the other
    seeds at that rate: (rate, one run per seed, validation perplexity per swept rate)."""
    config = settings.uptrain_settings()
    first, *others = settings.seeds
    sweep = {
        rate: steps.run(
            f"{slug}_uptrained_lr{rate:g}_s{first}",
            f"{title}: uptrain at {rate:g} (seed {first})",
            lambda rate=rate: uptrain(_load(model_path), settings, arrays, first, rate),
            config,
        )
        for rate in settings.uptrain_learning_rates
    }
    rate = min(sweep, key=lambda r: sweep[r]["validation_perplexity"])
    runs = [sweep[rate]] + [
        steps.run(
            f"{slug}_uptrained_lr{rate:g}_s{seed}",
            f"{title}: uptrain at {rate:g} (seed {seed})",
            lambda seed=seed: uptrain(_load(model_path), settings, arrays, seed, rate),
            config,
        )
        for seed in others
    ]
    return rate, runs, {f"{r:g}": v["validation_perplexity"] for r, v in sweep.items()}


def run_study(
    output: str | pathlib.Path, corpus_dir: str | pathlib.Path, settings: Settings
) -> dict[str, Any]:
    """Runs (or resumes) the study; writes README.md, summary.json and kv_sharing.png."""
    from headsize_tf.core.io import atomic_path
    from headsize_tf.experiments import lm_keras3

    out = pathlib.Path(output)
    corpus_dir = pathlib.Path(corpus_dir)
    arrays = _arrays(settings, corpus_dir)
    steps = Steps(out)
    base_path = out / "models" / "base.keras"

    def train_base() -> dict[str, Any]:
        attention = {"kind": "standard", "num_heads": settings.heads}
        record = lm_keras3.train_run(
            attention,
            settings.width,
            _preset(settings),
            settings.learning_rate,
            0,
            corpus_dir,
            progress=lambda line: print(f"  {line}", flush=True),
            model_path=base_path,
        )
        return {**record, **_measure(_load(base_path), settings, arrays["valid"])}

    if not base_path.exists():  # A record without its model (copied runs/) retrains.
        (out / "runs" / "base.json").unlink(missing_ok=True)
    base = steps.run("base", "train the multi-head LM", train_base, settings.base_settings())
    rate, control, sweep = uptrain_runs(
        steps, "base", "the unconverted LM", base_path, settings, arrays
    )
    records: dict[str, Any] = {
        "base": base,
        "variants": {},
        "control": {"rate": rate, "runs": control, "sweep": sweep},
    }
    for variant in variants(settings):
        slug = _slug(variant)
        model_path = out / "models" / f"{slug}.keras"
        title = f"{LABELS[variant['method']]}, size {variant['size']}"

        def convert(variant=variant, model_path=model_path) -> dict[str, Any]:
            lm = convert_variant(_load(base_path), variant, settings, arrays["train"])
            with atomic_path(model_path) as tmp:
                lm.save(tmp)
            return {**variant, **_measure(lm, settings, arrays["valid"])}

        if not model_path.exists():
            (out / "runs" / f"{slug}.json").unlink(missing_ok=True)
        free = steps.run(
            slug, f"{title}: convert, training-free", convert, settings.convert_settings()
        )
        rate, uptrained, sweep = uptrain_runs(steps, slug, title, model_path, settings, arrays)
        records["variants"][slug] = {
            "free": free,
            "uptrained": uptrained,
            "rate": rate,
            "sweep": sweep,
        }
    summary = summarize(records, settings)
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot(summary, out / "kv_sharing.png")
    write_atomic(out / "README.md", markdown(summary, settings))
    return summary


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(records: dict[str, Any], settings: Settings) -> dict[str, Any]:
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


def markdown(summary: dict[str, Any], settings: Settings) -> str:
    base = summary["base"]
    control = summary["control_uptrained"]
    lines = [
        "# Every head-sharing method at equal KV-cache size (Austen LM, Keras 3)",
        "",
        "Command: `python -m headsize_tf.experiments.kv_sharing_study --output results/kv_sharing`",
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/kv_sharing")
    parser.add_argument("--data-dir", default=None, help="DATA_DIR (default: the cache's)")
    parser.add_argument("--quick", action="store_true", help="a seconds-long check (tests)")
    args = parser.parse_args(argv)
    from headsize_tf.core.io import cache_root
    from headsize_tf.data import corpora
    from headsize_tf.experiments import lm_keras3

    settings = quick() if args.quick else Settings()
    data_dir = pathlib.Path(args.data_dir) if args.data_dir else cache_root() / "data"
    corpora.prepare("austen", data_dir, corpora.PrepareOptions(seq_length=settings.sequence_length))
    lm_keras3.export_lm_arrays(data_dir / "austen")
    summary = run_study(args.output, data_dir / "austen", settings)
    print(markdown(summary, settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())

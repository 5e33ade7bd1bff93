"""Do the reproduction's trained heads use the rank their head size allows?

Theorem 1 of Bhojanapalli et al. (2020): a head of size p < n computes attention
logits Q K^T of rank at most p, so it cannot express every n x n attention matrix;
a fixed head size raises that bound independently of the width. If the bound is
what limits a trained model, its heads should use (nearly) all p dimensions; if
they use far fewer, a larger head has nothing to add at that budget.

This study reads the final checkpoints that `reproduction` left in its work dir
(runs at each model's chosen learning rate), feeds validation windows through
each model and measures, per head, the spectrum of the scaled logits Q K^T
(n x n, the full bilinear form on the window, before the causal mask):

- energy rank: the fewest singular values holding 90% (99%) of the squared
  singular values (the Frobenius energy), at most p;
- entropy rank (Roy & Vetterli, 2007): exp of the entropy of the normalised
  singular values.

It writes `runs/<run>.json` per checkpoint (a rerun skips finished ones),
`attention_rank.json`, `README.md` and `attention_rank.png` under `--output`
(`--report-only`: from the records alone). `--work-dir` is the reproduction's
(the same default).

    python -m headsize_tf.experiments.attention_rank \\
        --runs results/reproduction_v2 --output results/reproduction_v2/attention_rank
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import add_study_options, study_command

ENERGY = (0.9, 0.99)
METRICS = ("attention_rank", *(f"energy_rank_{int(f * 100)}" for f in ENERGY), "entropy_rank")


def energy_rank(singular_values: np.ndarray, fraction: float) -> np.ndarray:
    """Fewest leading singular values whose squares hold `fraction` of the total
    (over the last axis; 0 for an all-zero spectrum)."""
    s2 = np.square(np.sort(np.asarray(singular_values, np.float64), axis=-1)[..., ::-1])
    total = s2.sum(-1, keepdims=True)
    cumulative = np.cumsum(s2, -1) / np.where(total > 0, total, 1.0)
    # A small tolerance so that an exact fraction (e.g. two equal values, 50%) counts.
    rank = (cumulative < fraction - 1e-12).sum(-1) + 1
    return np.where(total[..., 0] > 0, rank, 0)


def entropy_rank(singular_values: np.ndarray) -> np.ndarray:
    """exp(entropy) of the singular values normalised to sum 1 (Roy & Vetterli, 2007)."""
    s = np.asarray(singular_values, np.float64)
    p = s / np.maximum(s.sum(-1, keepdims=True), 1e-300)
    entropy = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1)
    return np.exp(entropy)


def attention_layers(model: Any) -> list[Any]:
    """The model's headsize attention layers, in call order (layer 0 first)."""
    from headsize_tf.layers.head_attention import HeadAttentionBase

    found = [m for m in model.submodules if isinstance(m, HeadAttentionBase)]
    return sorted(found, key=lambda layer: _layer_index(layer.name))


def _layer_index(name: str) -> tuple[int, str]:
    digits = "".join(c if c.isdigit() else " " for c in name).split()
    return (int(digits[-1]) if digits else -1, name)


def recorded_logits(
    model: Any, token_ids: np.ndarray, batch_size: int = 4, layers: Sequence[Any] | None = None
) -> list[np.ndarray]:
    """Every head's scaled logits on each window, rows centred, per attention layer: a list
    (one per layer) of [windows, heads, n, n] float64 arrays. Softmax ignores a constant
    added to a row (e.g. the query . key-bias term), so centring changes no attention.

    `layers` defaults to the model's tf_keras headsize attention layers; a Keras 3
    model passes its own (`CausalLM.attention_layers`: the hook is the same method)."""
    layers = attention_layers(model) if layers is None else list(layers)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no headsize attention layer.")
    recorded: dict[int, list[np.ndarray]] = {i: [] for i in range(len(layers))}
    for i, layer in enumerate(layers):

        def record(query, projected, _original=layer._logits_from_projected, _i=i):
            logits = _original(query, projected)
            values = np.asarray(logits, np.float64)  # [B, N, T, S]
            recorded[_i].append(values - values.mean(-1, keepdims=True))
            return logits

        layer._logits_from_projected = record
    # Keras 3's layers may take `ops.dot_product_attention`, which never forms the logits:
    # the einsum path (the same attention) while recording.
    fused = {
        i: layer._force_einsum for i, layer in enumerate(layers) if hasattr(layer, "_force_einsum")
    }
    for i in fused:
        layers[i]._force_einsum = True
    try:
        for start in range(0, len(token_ids), batch_size):
            model(token_ids[start : start + batch_size], training=False)
    finally:
        for layer in layers:
            del layer._logits_from_projected  # The class method again.
        for i, value in fused.items():
            layers[i]._force_einsum = value
    return [np.concatenate(recorded[i]) for i in range(len(layers))]


def causal_softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over keys j <= i of [..., n, n] logits (the LM's attention)."""
    n = logits.shape[-1]
    masked = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
    z = np.exp(masked - masked.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def attention_rank(logits: np.ndarray, tolerance: float = 0.05) -> np.ndarray:
    """Fewest singular directions of each [..., n, n] logits matrix whose truncation gives
    the same causal attention up to `tolerance`: the mean over rows of the total
    variation distance between the two attention distributions. 0: uniform attention
    is already that close."""
    shape = logits.shape[:-2]
    n = logits.shape[-1]
    flat = logits.reshape(-1, n, n)
    u, s, vt = np.linalg.svd(flat)
    target = causal_softmax(flat)
    approx = np.zeros_like(flat)
    rank = np.full(len(flat), -1)
    todo = np.arange(len(flat))  # Matrices not yet within tolerance: only they are updated.
    for k in range(s.shape[-1] + 1):
        if k:
            approx[todo] += s[todo, k - 1, None, None] * (
                u[todo, :, k - 1, None] * vt[todo, k - 1, None, :]
            )
        diff = causal_softmax(approx[todo]) - target[todo]
        tv = 0.5 * np.abs(diff).sum(-1).mean(-1)
        rank[todo[tv <= tolerance]] = k
        todo = todo[tv > tolerance]
        if not len(todo):
            break
    return rank.reshape(shape)


def measure(
    logits: Sequence[np.ndarray], head_size: int, tolerance: float = 0.05
) -> dict[str, Any]:
    """Per-layer and overall means of the rank measures over heads and windows."""
    per_layer = []
    for values in logits:
        s = np.linalg.svd(values, compute_uv=False)
        row = {f"energy_rank_{int(f * 100)}": float(energy_rank(s, f).mean()) for f in ENERGY}
        row["entropy_rank"] = float(entropy_rank(s).mean())
        row["attention_rank"] = float(attention_rank(values, tolerance).mean())
        per_layer.append(row)
    overall = {k: float(np.mean([row[k] for row in per_layer])) for k in per_layer[0]}
    return {"head_size": head_size, "tolerance": tolerance, "layers": per_layer, **overall}


def _load_windows(data_dir: pathlib.Path, count: int) -> np.ndarray:
    from headsize_tf.experiments import lm_keras3

    corpus = data_dir / "austen"
    lm_keras3.export_lm_arrays(corpus)
    return lm_keras3.load_lm_array(corpus, "valid")[:count, :-1]


def final_checkpoint(model_dir: pathlib.Path, steps: int) -> bool:
    """Whether `model_dir` holds the run's last checkpoint (`ckpt-<steps>`), so that a run
    still training (or cut off) is not measured as if it were finished."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(str(model_dir))
    return latest is not None and pathlib.Path(latest).name == f"ckpt-{steps}"


def run(
    runs_dir: pathlib.Path,
    work_dir: pathlib.Path,
    out: pathlib.Path,
    data_dir: pathlib.Path,
    windows: int = 4,
    report_only: bool = False,
) -> dict[str, Any]:
    """Measures every checkpoint of the reproduction's chosen runs; returns the summary.

    With `report_only`, measures nothing: the runs' records alone make the summary.
    """
    from headsize_tf.core.io import write_json
    from headsize_tf.experiments.reproduction import plan, presets, runners

    summary_path = runs_dir / "reproduction.json"
    if not summary_path.exists():
        raise ValueError(f"{summary_path} is missing: summarize the reproduction first.")
    summary = json.loads(summary_path.read_text())
    preset = presets.PRESETS[summary["preset"]]
    rows = {r["key"]: r for name in ("R1", "R2") for r in summary[name]}
    tokens = None if report_only else _load_windows(data_dir, windows)
    models, missing, measured_on = [], [], set()
    for key, row in rows.items():
        if row["learning_rate"] is None or not row["seeds"]:
            continue
        per_seed = []
        for seed in row["seeds"]:
            name = plan.run_name(key, row["learning_rate"], seed)
            path = out / "runs" / f"{name}.json"
            if not path.exists() and report_only:
                missing.append(name)
                continue
            if not path.exists():
                keras3 = runners.keras3_model_path(
                    work_dir, preset, key, row["learning_rate"], seed
                )
                model_dir = runners.run_dir(work_dir, preset, key, row["learning_rate"], seed)
                if keras3.exists():  # A Keras 3 run (`--framework keras3`, e.g. on a GPU).
                    import keras

                    import headsize_tf.keras3.modeling  # noqa: F401  (registers the classes)

                    print(f"[rank] {name}", flush=True)
                    model = keras.saving.load_model(keras3, compile=False)
                    logits = recorded_logits(model, tokens, layers=model.attention_layers)
                elif model_dir.exists() and final_checkpoint(model_dir, preset.steps):
                    from headsize_tf.training import train  # tf_keras: a Model Garden run.

                    print(f"[rank] {name}", flush=True)
                    _, model = train.load_trained_model(str(model_dir))
                    logits = recorded_logits(model, tokens)
                else:
                    missing.append(name)
                    continue
                result = measure(logits, row["head_size"])
                write_json(path, {"run": name, "seed": seed, "windows": len(tokens), **result})
            per_seed.append(json.loads(path.read_text()))
            measured_on.add(per_seed[-1]["windows"])
        if not per_seed:
            continue
        models.append(
            {
                **{
                    k: row[k]
                    for k in (
                        "key",
                        "width",
                        "heads",
                        "head_size",
                        "params",
                        "attention_type",
                        "mean",
                    )
                },
                "seeds": [r["seed"] for r in per_seed],
                "tolerance": per_seed[0]["tolerance"],
                **{k: float(np.mean([r[k] for r in per_seed])) for k in METRICS},
                # Sample std over seeds, as in the reproduction's tables.
                **{
                    f"{k}_std": float(np.std([r[k] for r in per_seed], ddof=1))
                    if len(per_seed) > 1
                    else 0.0
                    for k in METRICS
                },
                "by_layer": np.mean(
                    [[x["attention_rank"] for x in r["layers"]] for r in per_seed], axis=0
                ).tolist(),
            }
        )
    return {
        "preset": summary["preset"],
        # The windows the records were measured on (a report rebuilt from them loads none).
        "windows": len(tokens) if tokens is not None else max(measured_on, default=windows),
        "models": models,
        "missing": missing,
    }


def markdown(result: dict[str, Any], command: str) -> str:
    tolerance = result["models"][0]["tolerance"] if result["models"] else 0.05
    lines = [
        "# Do the trained heads use the rank their head size allows?",
        "",
        f"Command: `{command}`",
        "",
        f"Each head's scaled logits Q K^T (n x n, rows centred: softmax ignores row "
        f"constants) on {result['windows']} validation windows, from the "
        f"`{result['preset']}` preset's final checkpoints at each model's chosen learning "
        "rate (`reproduction`). A head of size p has logits of rank p at most (Theorem "
        "1). Means over layers, heads, windows, then seeds (± sample std over seeds).",
        "",
        f"- **attention rank**: the fewest singular directions of the logits whose "
        f"truncation gives the same causal attention within {tolerance:g} (mean total "
        "variation distance over rows);",
        "- energy rank: the fewest singular values holding 90% (99%) of the squared ones;",
        "- entropy rank: exp of the entropy of the normalised singular values "
        "(Roy & Vetterli, 2007).",
        "",
        "| model | width | heads | head size p | test perplexity | attention rank | / p | "
        "by layer | energy rank 90% / 99% | entropy rank | seeds |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for m in result["models"]:
        layers = ", ".join(f"{v:.1f}" for v in m["by_layer"])
        # One seed has no spread to show (not "± 0.0").
        spread = f" ± {m['attention_rank_std']:.1f}" if len(m["seeds"]) > 1 else ""
        lines.append(
            f"| {m['key']} | {m['width']} | {m['heads']} | {m['head_size']} | "
            f"{m['mean']:.2f} | {m['attention_rank']:.1f}{spread}"
            f" | {m['attention_rank'] / m['head_size']:.2f}"
            f" | {layers} | {m['energy_rank_90']:.1f} / {m['energy_rank_99']:.1f} | "
            f"{m['entropy_rank']:.1f} | {','.join(map(str, m['seeds']))} |"
        )
    if result["missing"]:
        lines += ["", f"No checkpoint (not measured): {', '.join(result['missing'])}."]
    lines += ["", "![attention rank vs head size](attention_rank.png)", ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    from headsize_tf.core.io import save_figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    sizes = [m["head_size"] for m in result["models"]]
    top = max(sizes, default=1)
    axes[0].plot([0, top], [0, top], color="0.7", lw=1, label="rank = head size (the bound)")
    for ax, x in zip(axes, ("head_size", "width"), strict=True):
        groups: dict[int, list[dict[str, Any]]] = {}
        for m in result["models"]:
            standard = m["width"] == m["heads"] * m["head_size"]
            ax.errorbar(
                m[x],
                m["attention_rank"],
                yerr=m["attention_rank_std"],
                fmt="s" if standard else "o",
                color="C0" if standard else "C1",
                capsize=3,
            )
            groups.setdefault(m[x], []).append(m)
        for at, group in groups.items():  # Labels of one x stacked up from its lowest point
            group.sort(key=lambda m: m["attention_rank"])  # (the space above is empty).
            for i, m in enumerate(group):
                ax.annotate(
                    f"w{m['width']} h{m['heads']}x{m['head_size']}",
                    (at, group[0]["attention_rank"]),
                    textcoords="offset points",
                    xytext=(7, -3 + 10 * i),
                    fontsize=8,
                )
        ax.plot([], [], "s", color="C0", label="standard (head = width / heads)")
        ax.plot([], [], "o", color="C1", label="fixed head size")
        ax.set_xlabel({"head_size": "head size p", "width": "width d"}[x])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("attention rank (mean over heads)")
    axes[0].set_title("vs head size: far below the bound")
    axes[1].set_title("vs width")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("Rank the trained heads' attention needs")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("attention_rank", __doc__.split("\n")[0])
    parser.add_argument(
        "--runs",
        default="results/reproduction_v2",
        help="a reproduction output (its reproduction.json)",
    )
    add_study_options(parser, work_dir="reproduction")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if args.windows < 1:
        raise ValueError(f"--windows {args.windows}: expected a number >= 1.")
    from headsize_tf.core.io import write_atomic, write_json
    from headsize_tf.data import corpora
    from headsize_tf.experiments.reproduction import presets

    runs_dir = pathlib.Path(args.runs)
    out = pathlib.Path(args.output)
    try:
        preset = presets.PRESETS[json.loads((runs_dir / "reproduction.json").read_text())["preset"]]
    except (OSError, KeyError, ValueError) as err:
        raise ValueError(f"--runs {runs_dir} is not a reproduction output ({err}).") from None
    options = corpora.PrepareOptions(seq_length=preset.sequence_length)
    data_dir = corpora.data_dir_for(options, args.data_dir)
    result = run(
        runs_dir, pathlib.Path(args.work_dir), out, data_dir, args.windows, args.report_only
    )
    command = study_command("headsize_tf.experiments.attention_rank", argv)
    write_json(out / "attention_rank.json", {"command": command, **result})
    write_atomic(out / "README.md", markdown(result, command))
    plot(result, out / "attention_rank.png")
    for m in result["models"]:
        print(
            f"{m['key']:>20}: head size {m['head_size']:>3}, energy rank 90% "
            f"{m['energy_rank_90']:.1f}, attention rank {m['attention_rank']:.1f}"
        )
    return 0


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "attention_rank")

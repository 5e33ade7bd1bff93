"""Compression study: MiniLM -> collaborative heads at several shared key dims.

For each shared key dimension D: CP conversion of every layer (relative
reconstruction error), mean cosine between original and compressed sentence
embeddings on held-out Rotten Tomatoes test snippets, and dev accuracy after
the same short fine-tune on the Rotten Tomatoes train split as the
uncompressed model ("original"). Each (model, seed) writes its own run file,
so a rerun skips finished runs (resumable); the summary (JSON, markdown,
plot) is rebuilt from the run files of the command's --dims and --seeds.
`settings.json` records the settings every run depends on (--model, --epochs,
--max-iter, --eval-sentences); a rerun with other ones is refused.

    python -m headsize_tf.experiments.compression_study --output results/compression
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Sequence

import numpy as np

from headsize_tf.core.arguments import non_negative_int, positive_float, positive_int
from headsize_tf.core.io import save_figure, write_atomic, write_json
from headsize_tf.data.text_tasks import rotten_tomatoes_splits
from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import (
    MissingRun,
    add_study_options,
    check_study_settings,
    study_command,
)

DIMS = (384, 256, 192, 128, 64)


def _source(model: str):
    from headsize_tf.pretrained import load_sentence_encoder

    return load_sentence_encoder(model)


def _compressed(model: str, dim: int, max_iter: int):
    from headsize_tf.reparam import compress_encoder

    source = _source(model)
    encoder, reports = compress_encoder(source.encoder, dim, progress=False, max_iter=max_iter)
    compressed = source.with_encoder(encoder, f"{model} D={dim}")
    return source, compressed, reports


def run_one(name: str, dim: int | None, seed: int, args, splits) -> dict:
    """Conversion metrics (dim given) and fine-tuned dev/test accuracy of one run."""
    from headsize_tf.reparam.compress import mean_cosine
    from headsize_tf.training import finetune as ft

    record: dict = {"model": name, "shared_key_dim": dim, "seed": seed}
    if dim is None:
        model = _source(args.model)
        record["params"] = int(model.encoder.count_params())
    else:
        source, model, reports = _compressed(args.model, dim, args.max_iter)
        record["params"] = int(model.encoder.count_params())
        record["relative_error"] = [r.relative_error for r in reports]
        record["mean_relative_error"] = float(np.mean(record["relative_error"]))
        record["cp_seconds"] = float(sum(r.seconds for r in reports))
        held_out = splits["test"][0][: args.eval_sentences]
        record["embedding_cosine"] = mean_cosine(source.embed(held_out), model.embed(held_out))
    config = dataclasses.replace(ft.FinetuneConfig(), epochs=args.epochs, seed=seed)
    record["finetune"] = dataclasses.asdict(config)
    classifier, info = ft.finetune(model, splits["train"], config, verbose=args.verbose)
    record.update(info)
    for split in ("dev", "test"):
        ids = ft.tokenize_all(model, splits[split][0], config.max_seq_length)
        record[f"{split}_accuracy"] = ft.accuracy(classifier, ids, splits[split][1])
    return record


def summarize(runs: list[dict]) -> dict:
    by_model: dict[str, list[dict]] = {}
    for run in runs:
        by_model.setdefault(run["model"], []).append(run)
    rows = []
    for name, group in by_model.items():
        dev = [r["dev_accuracy"] for r in group]
        row = {
            "model": name,
            "shared_key_dim": group[0]["shared_key_dim"],
            "params": group[0]["params"],
            "seeds": sorted(r["seed"] for r in group),
            "dev_accuracy_mean": float(np.mean(dev)),
            "dev_accuracy_std": float(np.std(dev)),
            "test_accuracy_mean": float(np.mean([r["test_accuracy"] for r in group])),
        }
        if group[0]["shared_key_dim"] is not None:
            row["mean_relative_error"] = group[0]["mean_relative_error"]
            row["embedding_cosine"] = group[0]["embedding_cosine"]
        rows.append(row)
    rows.sort(key=lambda r: -(r["shared_key_dim"] or 10**9))
    original = next((r for r in rows if r["model"] == "original"), None)
    for row in rows:
        if original is not None:
            row["dev_points_lost"] = 100 * (
                original["dev_accuracy_mean"] - row["dev_accuracy_mean"]
            )
    return {"rows": rows}


def markdown(summary: dict, command: str, args) -> str:
    lines = [
        "# Compressing all-MiniLM-L6-v2 into collaborative heads",
        "",
        f"Command: `{command}`",
        "",
        f"Fine-tune: Rotten Tomatoes train split, {args.epochs} epoch(s), batch 32, AdamW lr 5e-5 "
        "(10% warm-up, linear decay), mean pooling + linear head, max 64 tokens; the same recipe "
        "for every model. Dev/test: the corpus' fixed SHA-1 split. Cosine: mean cosine between "
        f"original and compressed embeddings of {args.eval_sentences} held-out test snippets "
        "(before fine-tuning). Relative error: mean over the 6 layers of ||T - T_hat|| / ||T||.",
        "",
        "| model | D | params | rel. error | emb. cosine | dev acc (mean ± std) | points lost "
        "| test acc | seeds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in summary["rows"]:
        err = f"{r['mean_relative_error']:.3f}" if "mean_relative_error" in r else "—"
        cos = f"{r['embedding_cosine']:.4f}" if "embedding_cosine" in r else "—"
        lost = f"{r.get('dev_points_lost', 0.0):+.2f}" if r["model"] != "original" else "—"
        lines.append(
            f"| {r['model']} | {r['shared_key_dim'] or 384} | {r['params']:,} | {err} | {cos} | "
            f"{100 * r['dev_accuracy_mean']:.2f} ± {100 * r['dev_accuracy_std']:.2f} | {lost} | "
            f"{100 * r['test_accuracy_mean']:.2f} | {','.join(map(str, r['seeds']))} |"
        )
    at192 = next((r for r in summary["rows"] if r["shared_key_dim"] == 192), None)
    if at192 is not None and "dev_points_lost" in at192:
        lost = at192["dev_points_lost"]
        lines += [
            "",
            f"Target (the paper: < 1.5 points lost at 2x compression): ≤ 1.5 dev points lost at "
            f"D = 192 — {'met' if lost <= 1.5 else 'NOT met'} ({lost:+.2f} points, mean over "
            f"seeds {','.join(map(str, at192['seeds']))}).",
        ]
    lines += ["", "![compression](compression.png)"]
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in summary["rows"] if r["shared_key_dim"] is not None]
    dims = [r["shared_key_dim"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].plot(dims, [r["mean_relative_error"] for r in rows], "o-")
    axes[0].set(xlabel="shared key dim D", ylabel="mean relative CP error", title="reconstruction")
    axes[1].plot(dims, [r["embedding_cosine"] for r in rows], "o-")
    axes[1].set(xlabel="shared key dim D", ylabel="cosine vs original", title="embeddings")
    axes[2].errorbar(
        dims,
        [100 * r["dev_accuracy_mean"] for r in rows],
        yerr=[100 * r["dev_accuracy_std"] for r in rows],
        fmt="o-",
        label="collaborative (re-fine-tuned)",
    )
    original = next((r for r in summary["rows"] if r["model"] == "original"), None)
    if original:
        axes[2].axhline(
            100 * original["dev_accuracy_mean"], color="k", ls="--", label="original fine-tuned"
        )
        axes[2].axhspan(
            100 * original["dev_accuracy_mean"] - 1.5,
            100 * original["dev_accuracy_mean"],
            color="k",
            alpha=0.08,
        )
    axes[2].set(xlabel="shared key dim D", ylabel="dev accuracy (%)", title="Rotten Tomatoes")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.invert_xaxis()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("compression_study", __doc__.split("\n")[0])
    add_study_options(parser)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--dims", type=positive_int, nargs="+", default=list(DIMS))
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=positive_float, default=2.0)
    parser.add_argument("--max-iter", type=positive_int, default=100)
    parser.add_argument("--eval-sentences", type=positive_int, default=512)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--verbose", type=non_negative_int, default=2)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.output)
    # Every record depends on these; --dims and --seeds only choose which records exist.
    check_study_settings(
        out,
        {
            "model": args.model,
            "epochs": args.epochs,
            "max_iter": args.max_iter,
            "eval_sentences": args.eval_sentences,
        },
        args.report_only,
    )
    runs_dir = out / "runs"
    plan = [("original", None)] + [(f"collaborative_D{d}", d) for d in dict.fromkeys(args.dims)]
    seeds = list(dict.fromkeys(args.seeds))
    splits = None
    paths = []
    for seed in seeds:
        for name, dim in plan:
            path = runs_dir / f"{name}_seed{seed}.json"
            paths.append(path)
            if path.exists():
                if not args.report_only:
                    print(f"[skip] {path} exists")
                continue
            if args.report_only:
                raise MissingRun(path)
            splits = splits or rotten_tomatoes_splits(args.data_dir)
            print(f"[run] {name} seed {seed}", flush=True)
            start = time.perf_counter()
            record = run_one(name, dim, seed, args, splits)
            record["wall_seconds"] = time.perf_counter() - start
            write_json(path, record)
            print(f"[done] {name} seed {seed}: dev {record['dev_accuracy']:.4f}", flush=True)
    # Only this command's runs: others of the same settings (other --dims or --seeds) stay out.
    runs = [json.loads(p.read_text()) for p in paths]
    summary = summarize(runs)
    command = study_command("headsize_tf.experiments.compression_study", argv)
    summary["command"] = command
    write_json(out / "compression.json", summary)
    write_atomic(out / "README.md", markdown(summary, command, args))
    plot(summary, out / "compression.png")
    print((out / "README.md").read_text())
    return 0


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "compression_study")

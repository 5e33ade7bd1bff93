"""Pruning study: MiniLM fine-tuned on Rotten Tomatoes, heads pruned in 10% steps.

1. Fine-tune all-MiniLM-L6-v2 on the Rotten Tomatoes train split (cached).
2. Prune 10% of the 72 heads at a time down to 90% (masking), recording dev
   accuracy: importance scored once on the unpruned model, importance
   recomputed after every step, and uniformly random heads (several seeds).
   Importance: E|dL/dxi_h| over the first 1024 train examples, layer-normalised.
3. Remove the heads of the largest fraction within 1 point physically and check
   the accuracy equals the masked model's.

Every curve writes its own run file, so a rerun skips finished work; `settings.json`
records the settings the runs were made with, and a rerun with other ones is refused
(another --output keeps them apart). `runs/finetuned.json` names the fine-tuned model
(cached outside --output) the records were made from: a missing record is not made from
another one (the cache gone, or made again), which would mix two models' records.

    python -m headsize_tf.experiments.pruning_study --output results/pruning
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from collections.abc import Sequence

import numpy as np

from headsize_tf.core.arguments import non_negative_int, open_fraction, positive_float
from headsize_tf.core.io import write_atomic, write_json
from headsize_tf.data.text_tasks import rotten_tomatoes_splits
from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import (
    MissingRun,
    add_study_options,
    check_study_settings,
    study_command,
)

# In `runs/`: which fine-tuned model the records were made from (its cache and digest).
MADE_FROM = "finetuned.json"


def _finetuned_cache(args) -> pathlib.Path:
    """Where the fine-tuned classifier of these settings is cached (outside `--output`)."""
    from headsize_tf.pretrained import registry

    name = f"{args.model}-rotten_tomatoes-e{args.epochs:g}-seed{args.seed}"
    return registry.default_cache_dir().parent / "finetuned" / name


def _digest(directory: pathlib.Path) -> str:
    """SHA-256 of a directory's files (names and bytes), in name order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _check_made_from(runs: pathlib.Path, cache: pathlib.Path, cached: bool) -> None:
    """Refuses to add records to `runs` made from another fine-tuned model than theirs.

    The records there were made from the model cached at `cache`; if it is gone
    (`cached` False), fine-tuning again would mix records of two models.
    """
    made = [p for p in sorted(runs.glob("*.json")) if p.name != MADE_FROM]
    if made and not cached:
        raise FileNotFoundError(
            f"{runs} holds records made from the fine-tuned model cached at {cache}, which is "
            f"gone; use another --output, or remove {runs} to redo them all"
        )


def _record_made_from(runs: pathlib.Path, cache: pathlib.Path) -> None:
    """Records the cached model's digest in `runs`, or refuses one other than recorded."""
    path, digest = runs / MADE_FROM, _digest(cache)
    if path.exists() and json.loads(path.read_text())["digest"] != digest:
        raise ValueError(
            f"{runs} holds records made from another fine-tuned model than the one cached at "
            f"{cache} (made again since); use another --output, or remove {runs} to redo them"
        )
    write_json(path, {"cache": str(cache), "digest": digest})


def _finetuned(args, splits):
    from headsize_tf.pretrained import load_sentence_encoder
    from headsize_tf.pruning import prune
    from headsize_tf.training import finetune as ft

    cache = _finetuned_cache(args)
    model = prune.load_classifier(cache)
    if model is not None:
        print(f"[skip] fine-tuned model cached at {cache}")
        return model
    config = dataclasses.replace(ft.FinetuneConfig(), epochs=args.epochs, seed=args.seed)
    model, info = ft.finetune(
        load_sentence_encoder(args.model), splits["train"], config, verbose=args.verbose
    )
    prune.save_pruned(
        model, cache, {"finetune": dataclasses.asdict(config), **info}, overwrite=True
    )
    return model


def markdown(summary: dict, command: str) -> str:
    curves = summary["curves"]
    names = list(curves)
    fractions = [s["fraction"] for s in curves[names[0]]]
    lines = [
        "# Pruning heads of all-MiniLM-L6-v2 fine-tuned on Rotten Tomatoes",
        "",
        f"Command: `{command}`",
        "",
        f"Unpruned dev accuracy: {100 * summary['unpruned_accuracy']:.2f}% "
        f"({summary['dev_examples']} dev examples; 72 heads = 6 layers x 12). Heads are masked "
        "(gate 0) step by step; importance = E|dL/dxi_h| on 1024 train examples, "
        "layer-normalised (Michel et al. 2019). Random: mean ± std over seeds.",
        "",
        "| heads pruned | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for i, fraction in enumerate(fractions):
        cells = []
        for name in names:
            point = curves[name][i]
            if "metric_std" in point:
                cells.append(f"{100 * point['metric']:.2f} ± {100 * point['metric_std']:.2f}")
            else:
                cells.append(f"{100 * point['metric']:.2f}")
        lines.append(f"| {100 * fraction:.0f}% | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Largest fraction pruned with ≤ 1 point dev-accuracy loss (at every step up to it):",
        "",
    ]
    for name, value in summary["max_fraction_within_1_point"].items():
        lines.append(f"- {name}: {100 * value:.0f}%")
    removal = summary.get("removal")
    if removal:
        lines += [
            "",
            f"Physical removal at {100 * removal['fraction']:.0f}% ({removal['heads_removed']} "
            f"heads): encoder parameters {removal['params_before']:,} -> "
            f"{removal['params_after']:,}; dev accuracy {100 * removal['removed_accuracy']:.2f}% "
            f"(masked {100 * removal['masked_accuracy']:.2f}%).",
        ]
    verdict = summary["max_fraction_within_1_point"].get("importance (recomputed)", 0.0)
    lines += [
        "",
        f"Target (the paper's BERT result: ≥ 40% of heads pruned with ≤ 1 point lost): "
        f"{'met' if verdict >= 0.4 - 1e-9 else 'NOT met'} with recomputed importance "
        f"({100 * verdict:.0f}%).",
        "",
        "![curves](pruning.png) ![importance](importance.png)",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("pruning_study", __doc__.split("\n")[0])
    add_study_options(parser)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--epochs", type=positive_float, default=2.0)
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--random-seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target-fraction", type=open_fraction, default=0.9)
    parser.add_argument("--step", type=open_fraction, default=0.1)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--verbose", type=non_negative_int, default=2)
    args = parser.parse_args(argv)
    if args.step > args.target_fraction:
        raise ValueError(
            f"--step {args.step:g}: expected at most --target-fraction {args.target_fraction:g}"
        )
    out = pathlib.Path(args.output)
    check_study_settings(
        out,
        {
            "model": args.model,
            "epochs": args.epochs,
            "seed": args.seed,
            "random_seeds": args.random_seeds,
            "target_fraction": args.target_fraction,
            "step": args.step,
        },
        args.report_only,
    )
    runs = out / "runs"
    loaded: dict = {}

    def splits() -> dict:
        if "splits" not in loaded:
            loaded["splits"] = rotten_tomatoes_splits(args.data_dir)
        return loaded["splits"]

    def model_and_data(path: pathlib.Path) -> tuple:
        """The fine-tuned model and its task data, loaded when a record must be made."""
        if args.report_only:
            raise MissingRun(path)
        if "model" not in loaded:
            from headsize_tf.pruning import prune

            cache = _finetuned_cache(args)
            _check_made_from(runs, cache, (cache / prune.HEAD_FILE).exists())
            loaded["model"] = model = _finetuned(args, splits())
            _record_made_from(runs, cache)
            loaded["data"] = prune.task_data(model.sentence_encoder, splits())
        return loaded["model"], loaded["data"]

    importance_path = runs / "importance_scores.json"
    if not importance_path.exists():
        model, data = model_and_data(importance_path)
        from headsize_tf.pruning import prune

        write_json(importance_path, prune.classifier_importance(model, data).tolist())
    summary = _curves_and_removal(args, runs, importance_path, splits, model_and_data)
    from headsize_tf.pruning.report import plot_curves, plot_importance

    shown = summary.pop("shown")
    command = study_command("headsize_tf.experiments.pruning_study", argv)
    summary["command"] = command
    write_json(out / "pruning.json", summary)
    plot_curves(shown, out / "pruning.png", baseline=summary["unpruned_accuracy"])
    plot_importance(np.asarray(summary["importance"]), out / "importance.png")
    write_atomic(out / "README.md", markdown(summary, command))
    print((out / "README.md").read_text())
    return 0


def _curves_and_removal(args, runs, importance_path, splits, model_and_data) -> dict:
    """The pruning curves and the removal record (made where missing); the summary."""
    from headsize_tf.modeling.bert_encoder import plain_config
    from headsize_tf.pruning import prune, remove_heads
    from headsize_tf.pruning.report import max_fraction_within
    from headsize_tf.training import finetune as ft

    importance = np.asarray(json.loads(importance_path.read_text()))
    plan = {
        "importance": {"mode": "importance", "recompute": False},
        "importance (recomputed)": {"mode": "importance", "recompute": True},
        **{f"random seed {s}": {"mode": "random", "seed": s} for s in args.random_seeds},
    }
    curves = {}
    for name, kwargs in plan.items():
        path = runs / (name.replace(" ", "_").replace("(", "").replace(")", "") + ".json")
        if path.exists():
            if not args.report_only:
                print(f"[skip] {path}")
        else:
            model, data = model_and_data(path)
            print(f"[run] {name}", flush=True)
            steps = prune.pruning_curve(
                model, data, target_fraction=args.target_fraction, step=args.step, **kwargs
            )
            write_json(path, steps)
        curves[name] = json.loads(path.read_text())
    schedules = {tuple(round(s["fraction"], 9) for s in curve) for curve in curves.values()}
    if len(schedules) > 1:  # Records that predate settings.json, of several settings.
        raise ValueError(
            f"the curves under {runs} follow different schedules (other --step or "
            "--target-fraction); use another --output"
        )
    random_names = [n for n in curves if n.startswith("random")]
    random_curve = []
    for i, point in enumerate(curves[random_names[0]]):
        values = [curves[n][i]["metric"] for n in random_names]
        random_curve.append(
            {
                "fraction": point["fraction"],
                "metric": float(np.mean(values)),
                "metric_std": float(np.std(values)),
            }
        )
    shown = {k: v for k, v in curves.items() if not k.startswith("random")}
    shown[f"random ({len(random_names)} seeds)"] = random_curve
    summary = {
        "unpruned_accuracy": curves["importance"][0]["metric"],
        "dev_examples": len(splits()["dev"][1]),
        "importance": importance.tolist(),
        "curves": {
            k: [{kk: vv for kk, vv in s.items() if kk != "mask"} for s in v]
            for k, v in shown.items()
        },
        "max_fraction_within_1_point": {k: max_fraction_within(v) for k, v in shown.items()},
    }
    best_name = "importance (recomputed)"
    fraction = summary["max_fraction_within_1_point"][best_name]
    point = next(s for s in curves[best_name] if abs(s["fraction"] - fraction) < 1e-9)
    removal_path = runs / "removal.json"
    if fraction > 0 and not removal_path.exists():
        model, data = model_and_data(removal_path)
        pruned = prune.with_encoder(model, remove_heads(model.encoder, np.asarray(point["mask"])))
        write_json(
            removal_path,
            {
                "fraction": fraction,
                "heads_removed": point["heads_pruned"],
                "params_before": int(model.encoder.count_params()),
                "params_after": int(pruned.encoder.count_params()),
                "masked_accuracy": point["metric"],
                "removed_accuracy": ft.accuracy(pruned, data.eval_ids, data.eval_labels),
                "pruned_heads": plain_config(pruned.encoder.get_config()["pruned_heads"]),
            },
        )
    if removal_path.exists():
        summary["removal"] = json.loads(removal_path.read_text())
    return {**summary, "shown": shown}


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "pruning_study")

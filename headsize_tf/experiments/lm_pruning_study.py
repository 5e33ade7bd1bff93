"""Michel et al. (2019) on a language model trained here: which heads does an LM need?

A causal LM (4 pre-LN layers, width 128, 8 heads of 16, sequence 128) is
trained on Jane Austen's novels (`headsize-tf train`), then:

1. *Importance-ordered pruning* (`headsize-tf prune --model-dir`): heads
   scored by E|dL/dxi_h| of the LM loss, normalised per layer, 10% of all
   heads pruned at a time with the scores recomputed, down to 80% (every
   layer keeps one head); validation perplexity at each step; the pruned
   heads removed and cached greedy decoding timed before and after.
2. *Random order* (3 seeds): the same schedule with uniformly random heads,
   the paper's control.
3. *One head per layer* (their Table 2): each layer alone reduced to its most
   important head, the rest intact.
4. *Decoding speed at 50% of heads removed*, side by side with the unpruned
   model.

Each step writes its own file under `runs/`, so a rerun skips finished steps;
the summary is rebuilt from the files. `settings.json` records --steps and
--windows; a rerun with other ones is refused.

    python -m headsize_tf.experiments.lm_pruning_study --output results/lm_pruning
"""

from __future__ import annotations

import contextlib
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.core.arguments import positive_int
from headsize_tf.core.io import (
    native_logs_to,
    save_figure,
    write_atomic,
    write_json,
)
from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import (
    Steps,
    add_study_options,
    check_study_settings,
    check_trained_steps,
    print_report,
    study_command,
)

LAYERS, WIDTH, HEADS = 4, 128, 8
TARGET, STEP = 0.8, 0.1


def _override(steps: int) -> dict[str, Any]:
    return {
        "task": {
            "model": {
                "vocab_size": 4096,
                "hidden_size": WIDTH,
                "num_layers": LAYERS,
                "attention": {"kind": "standard", "num_heads": HEADS},
                "intermediate_size": 4 * WIDTH,
                "max_sequence_length": 128,
                "dropout_rate": 0.1,
            },
            # Model Garden's shuffle buffer of 100, with which the recorded runs were made.
            "train_data": {
                "input_path": "${DATA_DIR}/austen/lm_train.tfrecord",
                "global_batch_size": 16,
                "seq_length": 128,
                "shuffle_buffer_size": 100,
            },
            "validation_data": {
                "input_path": "${DATA_DIR}/austen/lm_valid.tfrecord",
                "global_batch_size": 32,
                "seq_length": 128,
                "is_training": False,
                "drop_remainder": False,
            },
        },
        "trainer": {
            "train_steps": steps,
            "validation_steps": 10,
            "steps_per_loop": 200,
            "summary_interval": 200,
            "checkpoint_interval": 400,
            "validation_interval": steps,
            "optimizer_config": {
                "optimizer": {"type": "adamw", "adamw": {"weight_decay_rate": 0.01}},
                "learning_rate": {
                    "polynomial": {"initial_learning_rate": 2e-3, "decay_steps": steps}
                },
                "warmup": {"polynomial": {"warmup_steps": steps // 10}},
            },
        },
    }


def _load(model_dir: str, windows: int):
    from headsize_tf.pruning import language_model as plm
    from headsize_tf.training import train

    params, lm = train.load_trained_model(model_dir)
    return lm, plm.lm_data(params, windows, windows)


def random_curve(model_dir: str, seed: int, windows: int) -> dict:
    """Perplexity along the same schedule with uniformly random heads (seeded)."""
    from headsize_tf.core.pruning_plan import iterative_pruning
    from headsize_tf.pruning import language_model as plm
    from headsize_tf.pruning.remove import set_head_mask

    lm, data = _load(model_dir, windows)
    scores = np.random.default_rng(seed).random([LAYERS, HEADS])

    def metric(mask):
        set_head_mask(lm, mask)
        return plm.perplexity(lm, data.evaluation)

    steps = iterative_pruning(
        (LAYERS, HEADS),
        lambda mask: scores,
        metric,
        target_fraction=TARGET,
        step=STEP,
        recompute=False,
        min_heads_per_layer=1,
        progress=False,
    )
    return {
        "seed": seed,
        "curve": [{"fraction": s.fraction, "perplexity": s.metric} for s in steps],
    }


def one_head_per_layer(model_dir: str, importance: np.ndarray, windows: int) -> dict:
    """Perplexity with one layer reduced to its most important head (Michel et al. Table 2)."""
    from headsize_tf.pruning import language_model as plm
    from headsize_tf.pruning.remove import set_head_mask

    lm, data = _load(model_dir, windows)
    rows = []
    for layer in range(LAYERS):
        mask = np.ones([LAYERS, HEADS], np.float32)
        mask[layer] = 0
        mask[layer, int(np.nanargmax(importance[layer]))] = 1
        set_head_mask(lm, mask)
        rows.append(
            {
                "layer": layer,
                "kept_head": int(np.nanargmax(importance[layer])),
                "perplexity": plm.perplexity(lm, data.evaluation),
            }
        )
    set_head_mask(lm, np.ones([LAYERS, HEADS], np.float32))
    return {"unpruned": plm.perplexity(lm, data.evaluation), "layers": rows}


def half_removed_speed(model_dir: str, importance: np.ndarray, windows: int) -> dict:
    """Cached greedy decoding tokens/s, unpruned vs the 50% least important heads removed."""
    from headsize_tf.pruning import language_model as plm

    lm, data = _load(model_dir, windows)
    mask = np.ones([LAYERS, HEADS], np.float32)
    for layer in range(LAYERS):
        mask[layer, np.argsort(importance[layer])[: HEADS // 2]] = 0
    pruned = plm.remove_lm_heads(lm, mask)
    prompts = data.evaluation[0][0][:16, :16]
    # Interleaved: each model timed in turn, best of 3 rounds each.
    speeds: dict[str, list[float]] = {"unpruned": [], "half_removed": []}
    for _ in range(3):
        speeds["unpruned"].append(plm.decoding_speed(lm, prompts, 64, repeats=1))
        speeds["half_removed"].append(plm.decoding_speed(pruned, prompts, 64, repeats=1))
    best = {k: max(v) for k, v in speeds.items()}
    return {
        "tokens_per_second": best,
        "speedup": best["half_removed"] / best["unpruned"],
        "params": {"unpruned": int(lm.count_params()), "half_removed": int(pruned.count_params())},
        "batch": 16,
        "prompt": 16,
        "new_tokens": 64,
    }


def summarize(out: pathlib.Path, command: str) -> dict:
    runs = {p.stem: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))}
    settings_path = out / "settings.json"
    windows = json.loads(settings_path.read_text())["windows"] if settings_path.exists() else None
    windows_text = f"{windows} windows" if windows else "the study's windows"
    prune = runs["importance_pruning"]
    randoms = [runs[k] for k in sorted(runs) if k.startswith("random_seed")]
    layers = runs["one_head_per_layer"]
    speed = runs["half_removed_speed"]
    fractions = [c["fraction"] for c in prune["curve"]]
    random_ppl = np.array([[c["perplexity"] for c in r["curve"]] for r in randoms])
    lines = [
        "# Michel et al. (2019) on an Austen LM: importance-ordered vs random pruning",
        "",
        f"Command: `{command}`",
        "",
        f"Model: {LAYERS} pre-LN layers, width {WIDTH}, {HEADS} heads of {WIDTH // HEADS} "
        f"({LAYERS * HEADS} heads), sequence 128, trained {runs['train']['steps']} steps of "
        f"16 x 128 tokens on Austen (validation perplexity "
        f"{prune['perplexity']['original']:.2f} on {windows_text} of Northanger Abbey). "
        f"Importance: E|dL/dxi_h| on {windows_text} of training text, normalised per layer, "
        "recomputed "
        f"after each step of {100 * STEP:.0f}% of the heads; every layer keeps a head.",
        "",
        "## Validation perplexity vs heads pruned",
        "",
        "| heads pruned | importance order | random order (mean ± std, 3 seeds) | heads per layer (importance) |",
        "|---:|---:|---:|---|",
    ]
    for i, c in enumerate(prune["curve"]):
        rnd = (
            f"{random_ppl[:, i].mean():.2f} ± {random_ppl[:, i].std():.2f}"
            if random_ppl.size
            else "—"
        )
        lines.append(
            f"| {100 * c['fraction']:.0f}% | {c['perplexity']:.2f} | {rnd} | "
            f"{c['heads_per_layer']} |"
        )
    within = [
        c["fraction"]
        for c in prune["curve"]
        if c["perplexity"] <= 1.05 * prune["perplexity"]["original"]
    ]
    ours = np.array([c["perplexity"] for c in prune["curve"]])
    if random_ppl.size:
        better = int(np.sum(ours[1:] < random_ppl[:, 1:].mean(0)))
        comparison = (
            f"Importance order is below the random-order mean at {better} of "
            f"{len(ours) - 1} pruning levels (Michel et al. find it below at every "
            "level)."
        )
    else:
        comparison = ""
    lines += [
        "",
        f"Up to {100 * max(within):.0f}% of the heads go with at most 5% higher "
        f"perplexity when removed in importance order. {comparison}",
        "",
        "## One head per layer (Michel et al. Table 2)",
        "",
        f"Unpruned: {layers['unpruned']:.2f}.",
        "",
        "| layer reduced to its best head | perplexity | change |",
        "|---:|---:|---:|",
    ]
    for row in layers["layers"]:
        lines.append(
            f"| {row['layer']} (head {row['kept_head']}) | {row['perplexity']:.2f} | "
            f"{100 * (row['perplexity'] / layers['unpruned'] - 1):+.1f}% |"
        )
    ps = prune["decoding_tokens_per_second"]
    hs = speed["tokens_per_second"]
    lines += [
        "",
        "## Decoding speed (cached greedy decoding, CPU, side by side)",
        "",
        f"- {100 * TARGET:.0f}% of heads removed (the importance-pruned model): "
        f"{ps['original']:.0f} -> {ps['pruned']:.0f} tokens/s ({prune['decoding_speedup']:.2f}x; "
        "batch 4, prompt 16, 32 new tokens).",
        f"- 50% removed (the 4 least important heads of each layer): {hs['unpruned']:.0f} -> "
        f"{hs['half_removed']:.0f} tokens/s ({speed['speedup']:.2f}x; batch 16, prompt 16, "
        f"64 new tokens); parameters {speed['params']['unpruned']:,} -> "
        f"{speed['params']['half_removed']:,}.",
        "",
        "At width 128 a decoding step is dominated by fixed per-step costs and the "
        "4096-word output layer, so removing heads barely changes decoding speed here; "
        "`benchmarks/pruning.py` measures it at width 512.",
        "",
        "![curve](curve.png)",
        "",
        "![importance](importance.png)",
        "",
    ]
    write_atomic(out / "README.md", "\n".join(lines))
    _plot(fractions, prune, random_ppl, out / "curve.png")
    summary = {"command": command, "runs": runs}
    write_json(out / "summary.json", summary)
    return summary


def _plot(fractions, prune, random_ppl, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    x = [100 * f for f in fractions]
    ax.plot(x, [c["perplexity"] for c in prune["curve"]], "o-", label="importance order")
    if random_ppl.size:
        ax.errorbar(
            x,
            random_ppl.mean(0),
            yerr=random_ppl.std(0),
            fmt="s--",
            capsize=3,
            label="random order (3 seeds)",
        )
    ax.set(
        xlabel="heads pruned (%)",
        ylabel="validation perplexity",
        yscale="log",
        title="Austen LM, 32 heads",
    )
    ax.legend()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("lm_pruning_study", __doc__.split("\n")[0])
    add_study_options(parser, work_dir="lm_pruning")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--steps", type=positive_int, default=2000)
    parser.add_argument(
        "--windows",
        type=positive_int,
        default=256,
        help="training windows for importance, validation windows for perplexity",
    )
    args = parser.parse_args(argv)
    out = pathlib.Path(args.output)
    check_study_settings(out, {"steps": args.steps, "windows": args.windows}, args.report_only)
    check_trained_steps(out, args.steps)
    if not args.report_only:
        from headsize_tf.data import corpora
        from headsize_tf.experiments.reproduction.runners import quiet_tensorflow

        quiet_tensorflow()
        work = pathlib.Path(args.work_dir)
        model_dir = str(work / f"lm_steps{args.steps}")
        data_dir = str(corpora.prepare("austen", args.data_dir).parent)
        with native_logs_to(work / "native.log"):
            _run(args, out, work, model_dir, data_dir)
    return print_report(
        summarize, out, study_command("headsize_tf.experiments.lm_pruning_study", argv)
    )


def _run(args, out: pathlib.Path, work: pathlib.Path, model_dir: str, data_dir: str) -> None:
    from headsize_tf.pruning import language_model as plm
    from headsize_tf.training import train

    def train_lm():
        work.mkdir(parents=True, exist_ok=True)
        with open(f"{model_dir}.log", "a") as log, contextlib.redirect_stdout(log):
            result = train.run(
                "headsize_lm/language_modeling",
                model_dir,
                params_override=_override(args.steps),
                data_dir=data_dir,
            )
        return {"steps": args.steps, "validation_perplexity": result.metrics["perplexity"]}

    study = Steps(out)
    # What was made from an earlier model goes when it is trained again.
    study.run("train", f"training the LM, {args.steps} steps", train_lm, derived=["runs/*.json"])
    pruned_dir = work / f"pruned_steps{args.steps}"
    prune = study.run(
        "importance_pruning",
        "importance-ordered pruning, removal, speed",
        lambda: plm.prune_language_model(
            model_dir,
            pruned_dir,
            target_fraction=TARGET,
            step=STEP,
            importance_windows=args.windows,
            eval_windows=args.windows,
            overwrite=True,
            progress=False,
        ),
    )
    plm.plot_report(prune, out)  # importance.png (and curve.png, redrawn by summarize)
    importance = np.array(
        [[np.nan if v is None else v for v in row] for row in prune["importance"]]
    )
    for seed in (0, 1, 2):
        study.run(
            f"random_seed{seed}",
            "random-order pruning",
            lambda seed=seed: random_curve(model_dir, seed, args.windows),
        )
    study.run(
        "one_head_per_layer",
        "each layer reduced to its best head",
        lambda: one_head_per_layer(model_dir, importance, args.windows),
    )
    study.run(
        "half_removed_speed",
        "decoding speed at 50% of heads removed",
        lambda: half_removed_speed(model_dir, importance, args.windows),
    )


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "lm_pruning_study")

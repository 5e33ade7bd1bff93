"""Bhojanapalli et al. (2020) at small scale: Jane Austen language models.

* R1 (their Fig. 1): standard baselines of width {64, 96, 128} (4 heads, head
  size = width / 4) vs fixed head size 32 at width 64 with the head count that
  matches each baseline's parameters: test perplexity vs parameters.
* R2 (Fig. 3a / Table 2A): width 64, heads {2, 4, 8, 16, 32}: baseline (head
  size 64 / heads) vs fixed head size 32.
* R3 (Table 2B): width 64, 8 heads, head size {8, 16, 32, 64}.

Every run: 2 pre-LN layers, FFN 4 x width, WordPiece vocab 4096, sequences of
128, batch 32, `--steps` steps (the same token budget for all: steps x 4096
tokens), Adam with the same schedule, test perplexity on the held-out novel
(Persuasion). Each (config, seed) writes its own run file and a rerun skips it,
so the set resumes across sessions; the summary is rebuilt from the run files.

    python -m headsize_tf.experiments.reproduce --output results/reproduction
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.core.io import save_figure, write_atomic, write_json


@dataclasses.dataclass(frozen=True)
class LMRun:
    width: int
    heads: int
    attention_type: str
    head_size: int | None

    @property
    def key(self) -> str:
        """Names the model; a fixed head of size width / heads *is* the baseline (one run)."""
        size = self.head_size if self.attention_type == "fixed_head" else self.width // self.heads
        standard = self.width % self.heads == 0 and size == self.width // self.heads
        return f"{'std' if standard else 'fixed'}_w{self.width}_h{self.heads}_p{size}"

    def spec(self):
        from headsize_tf import params

        return params.EncoderSpec(
            vocab_size=4096,
            width=self.width,
            num_layers=2,
            attention=self.attention(),
            intermediate_size=4 * self.width,
            max_sequence_length=128,
        )

    def attention(self) -> dict[str, Any]:
        """The model's attention spec fields."""
        head_size = self.head_size if self.attention_type == "fixed_head" else None
        return {"kind": self.attention_type, "num_heads": self.heads, "head_size": head_size}

    def params(self) -> int:
        from headsize_tf import params

        return params.causal_lm_params(self.spec()).trainable


def plan() -> dict[str, list[LMRun]]:
    from headsize_tf import params

    r1 = []
    for width in (64, 96, 128):
        baseline = LMRun(width, 4, "standard", None)
        candidate = LMRun(64, 1, "fixed_head", 32)
        heads = params.match_num_heads(
            baseline.params(),
            lambda h, c=candidate: dataclasses.replace(c, heads=h).params(),
            range(1, 65),
        )
        r1 += [baseline, dataclasses.replace(candidate, heads=heads)]
    r2 = []
    for heads in (2, 4, 8, 16, 32):
        r2 += [LMRun(64, heads, "standard", None), LMRun(64, heads, "fixed_head", 32)]
    r3 = [LMRun(64, 8, "fixed_head", size) for size in (8, 16, 32, 64)]
    return {"R1": r1, "R2": r2, "R3": r3}


def _override(run: LMRun, steps: int, test_batches: int, learning_rate: float = 2e-3) -> dict:
    return {
        "task": {
            "model": {
                "vocab_size": 4096,
                "hidden_size": run.width,
                "num_layers": 2,
                "attention": run.attention(),
                "intermediate_size": 4 * run.width,
                "max_sequence_length": 128,
                "dropout_rate": 0.0,
            },
            # Model Garden's shuffle buffer of 100, with which the recorded runs were made.
            "train_data": {
                "input_path": "${DATA_DIR}/austen/lm_train.tfrecord",
                "global_batch_size": 32,
                "seq_length": 128,
                "shuffle_buffer_size": 100,
            },
            "validation_data": {
                "input_path": "${DATA_DIR}/austen/lm_test.tfrecord",
                "global_batch_size": 32,
                "seq_length": 128,
                "is_training": False,
                "drop_remainder": False,
            },
        },
        "trainer": {
            "train_steps": steps,
            "validation_steps": test_batches,
            "steps_per_loop": 100,
            "summary_interval": 100,
            "checkpoint_interval": 200,
            "validation_interval": steps,
            "optimizer_config": {
                "optimizer": {"type": "adamw", "adamw": {"weight_decay_rate": 0.01}},
                "learning_rate": {
                    "polynomial": {"initial_learning_rate": learning_rate, "decay_steps": steps}
                },
                "warmup": {"polynomial": {"warmup_steps": steps // 10}},
            },
        },
    }


def run_all(args) -> dict:
    from headsize_tf.data import corpora
    from headsize_tf.training import train

    corpora.prepare("austen", args.data_dir)
    manifest = corpora.load_manifest("austen", args.data_dir)
    test_windows = manifest["stats"]["splits"]["test"]["lm_examples"]
    test_batches = int(np.ceil(test_windows / 32))
    out = pathlib.Path(args.output)
    experiments = selected(args)
    unique = {}
    for runs in experiments.values():
        for run in runs:
            unique.setdefault(run.key, run)
    for seed in args.seeds:
        for key, run in unique.items():
            path = out / "runs" / f"{key}_seed{seed}.json"
            if path.exists():
                continue
            print(f"[run] {key} seed {seed} ({run.params():,} params)", flush=True)
            start = time.perf_counter()
            # A run resumes from its own checkpoints only: the directory names every setting.
            model_dir = (
                pathlib.Path(args.work_dir)
                / f"{key}_seed{seed}_steps{args.steps}_lr{args.learning_rate:g}"
            )
            result = train.run(
                "headsize_lm/language_modeling",
                str(model_dir),
                params_override=_override(run, args.steps, test_batches, args.learning_rate),
                data_dir=args.data_dir,
                seed=seed,
            )
            record = {
                **dataclasses.asdict(run),
                "key": key,
                "seed": seed,
                "params": run.params(),
                "steps": args.steps,
                "tokens": args.steps * 32 * 128,
                "learning_rate": args.learning_rate,
                "test_perplexity": result.metrics["perplexity"],
                "test_loss": result.metrics["validation_loss"],
                "seconds": time.perf_counter() - start,
            }
            write_json(path, record)
            print(
                f"[done] {key} seed {seed}: test perplexity {record['test_perplexity']:.2f}",
                flush=True,
            )
    return summarize(out, experiments)


def selected(args) -> dict[str, list[LMRun]]:
    """The planned runs that `--only` (experiments) and `--keys` (models) keep."""
    experiments = {}
    for name, runs in plan().items():
        if args.only and name not in args.only:
            continue
        runs = [r for r in runs if not args.keys or r.key in args.keys]
        if runs:
            experiments[name] = runs
    known = {r.key for runs in plan().values() for r in runs}
    unknown = sorted(set(args.keys or ()) - known)
    if unknown or not experiments:
        raise SystemExit(
            f"--keys {unknown or args.keys} select no planned run; known: {sorted(known)}"
        )
    return experiments


def summarize(out: pathlib.Path, experiments: dict[str, list[LMRun]]) -> dict:
    records: dict[str, list[dict]] = {}
    for path in sorted((out / "runs").glob("*.json")):
        r = json.loads(path.read_text())
        records.setdefault(r["key"], []).append(r)
    summary = {}
    for name, runs in experiments.items():
        rows = []
        for run in runs:
            got = records.get(run.key, [])
            ppl = [r["test_perplexity"] for r in got]
            rows.append(
                {
                    "key": run.key,
                    **dataclasses.asdict(run),
                    "params": run.params(),
                    "seeds": sorted(r["seed"] for r in got),
                    "mean": float(np.mean(ppl)) if ppl else None,
                    "std": float(np.std(ppl)) if ppl else None,
                }
            )
        summary[name] = rows
    return summary


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


def markdown(
    summary: dict,
    command: str,
    steps: int,
    learning_rate: float = 2e-3,
    judged: Sequence[dict] = (),
) -> str:
    lines = [
        "# Bhojanapalli et al. (2020) at small scale: Jane Austen LMs",
        "",
        f"Command: `{command}`",
        "",
        f"2 pre-LN layers, FFN 4 x width, vocab 4096, sequence 128, batch 32, {steps} steps "
        f"({steps * 4096:,} training tokens per run), AdamW {learning_rate:g} with 10% "
        "warm-up and linear "
        "decay; test perplexity on Persuasion; mean ± population std (ddof 0) over seeds.",
        "",
    ]
    titles = {
        "R1": "R1 (Fig. 1): narrower fixed-head models vs wider baselines at equal parameters",
        "R2": "R2 (Fig. 3a): width 64, more heads: baseline (head = 64 / heads) vs fixed head 32",
        "R3": "R3 (Table 2B): width 64, 8 heads, head size varied",
    }
    for name, rows in summary.items():
        lines += [
            f"## {titles[name]}",
            "",
            "| model | width | heads | head size | params | test perplexity | seeds |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in rows:
            size = r["head_size"] or r["width"] // r["heads"]
            ppl = "not run" if r["mean"] is None else f"{r['mean']:.2f} ± {r['std']:.2f}"
            lines.append(
                f"| {r['key']} | {r['width']} | {r['heads']} | {size} | "
                f"{r['params']:,} | {ppl} | {','.join(map(str, r['seeds']))} |"
            )
        lines.append("")
    if judged:
        lines += [
            "## Verdicts",
            "",
            "A difference counts only when the mean ± std bars do not overlap.",
            "",
            "| claim | here (test perplexity) | verdict |",
            "|---|---|---|",
        ]
        lines += [f"| {v['claim']} | {v['evidence']} | **{v['verdict']}** |" for v in judged]
        lines.append("")
    return "\n".join(lines)


def plot(summary: dict, path: pathlib.Path, titles: dict[str, str] | None = None) -> None:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="results/reproduction")
    parser.add_argument("--work-dir", default="/tmp/headsize_reproduction")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=2e-3,
        help="peak AdamW learning rate, the same for every run",
    )
    parser.add_argument("--only", nargs="*", choices=["R1", "R2", "R3"], default=None)
    parser.add_argument(
        "--keys",
        nargs="*",
        default=None,
        help="run only these models (e.g. std_w64_h8_p8 fixed_w64_h8_p32)",
    )
    parser.add_argument("--data-dir", default=None)
    parser.add_argument(
        "--summarize-only",
        action="store_true",
        help="rebuild the summary from the run files without training",
    )
    args = parser.parse_args(argv)
    if args.summarize_only:
        experiments = selected(args)
        summary = summarize(pathlib.Path(args.output), experiments)
    else:
        summary = run_all(args)
    given = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--summarize-only"]
    command = "python -m headsize_tf.experiments.reproduce " + " ".join(given)
    out = pathlib.Path(args.output)
    planned = len({r["key"] for rows in summary.values() for r in rows}) * len(args.seeds)
    finished = len(list((out / "runs").glob("*.json")))
    # A claim is judged only on its whole experiment: `--keys` subsets compare rows only.
    judged = verdicts(summary) if finished >= planned and not args.keys else []
    write_json(out / "reproduction.json", {"command": command, **summary, "verdicts": judged})
    status = "A subset of the models (--keys): no claim is judged here.\n\n" if args.keys else ""
    status += f"Status: {finished} of {planned} runs finished" + (
        "."
        if finished >= planned
        else " — rerun the command to continue (it skips "
        "finished runs); no claim is judged before all seeds are in."
    )
    write_atomic(
        out / "README.md",
        markdown(summary, command, args.steps, args.learning_rate, judged) + "\n" + status + "\n",
    )
    plot(summary, out / "reproduction.png")
    print((out / "README.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

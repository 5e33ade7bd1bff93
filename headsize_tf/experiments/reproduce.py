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

import dataclasses
import json
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.core.io import write_atomic, write_json
from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import add_study_options, study_command

# The verdict rules and the plot are shared with `reproduction` (its `report`); `compare`,
# `r1_pairs`, `verdicts` and `plot` stay this module's names too.
from headsize_tf.experiments.reproduction.report import compare as compare
from headsize_tf.experiments.reproduction.report import plot_perplexity as plot
from headsize_tf.experiments.reproduction.report import r1_pairs as r1_pairs
from headsize_tf.experiments.reproduction.report import verdicts, verdicts_table


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
        raise ValueError(
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
    lines += verdicts_table(judged)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("reproduce", __doc__.split("\n")[0])
    add_study_options(parser, work_dir="reproduce")
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
    args = parser.parse_args(argv)
    if args.report_only:
        experiments = selected(args)
        summary = summarize(pathlib.Path(args.output), experiments)
    else:
        summary = run_all(args)
    command = study_command("headsize_tf.experiments.reproduce", argv)
    out = pathlib.Path(args.output)
    planned = len({r["key"] for rows in summary.values() for r in rows}) * len(args.seeds)
    finished = len(list((out / "runs").glob("*.json")))
    if args.report_only and not finished:
        raise ValueError(
            f"--report-only: {out} holds no finished runs; run the study first (without "
            "--report-only)."
        )
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
    from headsize_tf.experiments._entry import run_main

    run_main(main, "reproduce")

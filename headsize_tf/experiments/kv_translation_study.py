"""KV sharing on a translation model: decoder self- and encoder-decoder attention, with BLEU.

The English-German model of results/translation_pruning (Debian's gettext
catalogues, 3 + 3 layers, width 128, 8 heads of 16, 3000 steps) is trained
again with the same command, then its decoder's caches (self-attention keys
and values, and the encoder-decoder attention's keys and values of the
source) are cut to 1/4 by `headsize-tf convert --model-dir`'s driver
(`reparam.convert_dir.convert_model_dir`): grouped K/V heads (per-group SVD,
and Ainslie's mean pooling) and a shared latent. Each is measured
training-free and after uptraining on 5% of the training steps with the
model's own data, loss and optimizer (Model Garden's trainer): dev BLEU
(greedy) and perplexity, KV-cache bytes per target token. Each step writes its
own record under `runs/`; a rerun skips finished ones.

    python -m headsize_tf.experiments.kv_translation_study --output results/kv_sharing/translation
"""

from __future__ import annotations

import itertools
import json
import pathlib
from collections.abc import Sequence
from typing import Any

from headsize_tf.core.arguments import non_negative_int, positive_int
from headsize_tf.core.io import native_logs_to, write_atomic
from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import Steps, add_study_options, study_command

MODULE = "headsize_tf.experiments.kv_translation_study"

# Uptraining peak rates: the run's own (None: 1e-3, which its schedule had decayed to
# 2.5e-4 by step 3000) and a tenth of it.
UPTRAIN_RATES = (None, 1e-4)
# (slug, label, kind, size, method): 1/4 of the decoder's cache (8 heads of 16).
TARGETS = (
    ("grouped_svd_2", "grouped K/V, per-group SVD", "grouped", 2, "svd"),
    ("grouped_mean_2", "grouped K/V, mean-pooled (Ainslie)", "grouped", 2, "mean"),
    ("latent_64", "shared latent K/V (joint SVD)", "latent", 64, "joint_svd"),
)


def run_study(
    output: str | pathlib.Path,
    work: str | pathlib.Path,
    data_dir: str,
    steps: int = 3000,
    uptrain_steps: int = 150,
    report_only: bool = False,
    command: str | None = None,
) -> dict[str, Any]:
    """Trains (or reuses) the model, converts it to every target; returns the summary.

    With `report_only`, rebuilds the report from the runs' records and runs nothing
    (a missing record raises `MissingRun`). `command` is the report's command line
    (default: this process's arguments, `study_command(..., None)`).
    """
    out, work = pathlib.Path(output), pathlib.Path(work)
    model_dir = str(work / f"nmt_steps{steps}")
    study = Steps(out, report_only=report_only)

    def train() -> dict[str, Any]:
        from headsize_tf.experiments.translation_pruning_study import train_translation_model

        return train_translation_model(model_dir, steps, data_dir)

    def convert(kind: str, size: int, method: str, name: str, rate: float | None):
        from headsize_tf.core.conversion import ConversionTarget
        from headsize_tf.reparam.convert_dir import convert_model_dir

        return convert_model_dir(
            model_dir,
            ConversionTarget(kind, size, method),
            work / name,
            uptrain_steps=uptrain_steps,
            uptrain_learning_rate=rate,
            overwrite=True,
            progress=False,
        )

    # A record without its checkpoint retrains it; what was made from an earlier model goes.
    base = study.run(
        "train",
        f"training the translation model, {steps} steps",
        train,
        {"steps": steps},
        outputs=[pathlib.Path(model_dir) / "checkpoint"],
        derived=["runs/*.json"],
    )
    rows = []
    for (slug, label, kind, size, method), rate in itertools.product(TARGETS, UPTRAIN_RATES):
        name = slug if rate is None else f"{slug}_lr{rate:g}"
        at = "the run's peak rate" if rate is None else f"peak rate {rate:g}"
        report = study.run(
            name,
            f"{label}: convert and uptrain {uptrain_steps} steps at {at}",
            lambda args=(kind, size, method, name, rate): convert(*args),
            {"steps": steps, "uptrain_steps": uptrain_steps}
            | ({} if rate is None else {"uptrain_learning_rate": rate}),
        )
        rows.append({"slug": name, "label": label, "uptrain_learning_rate": rate, "report": report})
    summary = {
        "command": command or study_command(MODULE, None),
        "base": base,
        "rows": rows,
        "steps": steps,
        "uptrain_steps": uptrain_steps,
    }
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_atomic(out / "README.md", markdown(summary))
    return summary


def markdown(summary: dict[str, Any]) -> str:
    """README.md: the summary's command (this process's where it has none) and the table."""
    lines = [
        "# KV sharing on an English-German translation model (decoder caches at 1/4)",
        "",
        f"Command: `{summary.get('command') or study_command(MODULE, None)}`",
        "",
        f"Model: results/translation_pruning's (gettext_de, 3 + 3 layers, width 128, 8 heads of "
        f"16), trained {summary['steps']} steps (dev perplexity "
        f"{summary['base']['dev_perplexity']:.2f}). Every decoder layer's self-attention and "
        "encoder-decoder attention converted (the encoder caches nothing); uptraining: "
        f"{summary['uptrain_steps']} steps (5%) of the model's own training, at its own peak "
        "rate and at a tenth of it. BLEU: greedy, dev split. Perplexity: the conversion "
        "report's, over the first 8 dev batches (the training's figure covers the whole "
        "split).",
        "",
        "| method | uptraining peak rate | KV bytes per target token | BLEU original "
        "| training-free | uptrained | perplexity original | training-free | uptrained |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in summary["rows"]:
        r = row["report"]
        kv, bleu, ppl = r["kv_cache_bytes_per_token"], r.get("bleu", {}), r["perplexity"]
        lines.append(
            f"| {row['label']} | {_rate(row.get('uptrain_learning_rate'))} | "
            f"{kv['original']:,} -> {kv['converted']:,} | "
            f"{bleu.get('original', float('nan')):.2f} | {bleu.get('converted', float('nan')):.2f} "
            f"| {bleu.get('uptrained', float('nan')):.2f} | {ppl['original']:.2f} | "
            f"{ppl['converted']:.2f} | {ppl.get('uptrained', float('nan')):.2f} |"
        )
    return "\n".join(lines) + "\n"


def _rate(rate: float | None) -> str:
    return "1e-3 (the run's)" if rate is None else f"{rate:g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("kv_translation_study", __doc__.splitlines()[0])
    add_study_options(parser, work_dir="kv_translation")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--steps", type=positive_int, default=3000)
    parser.add_argument(
        "--uptrain-steps",
        type=non_negative_int,
        default=150,
        help="uptraining steps after each conversion (0: training-free only)",
    )
    args = parser.parse_args(argv)
    work = pathlib.Path(args.work_dir)
    command = study_command(MODULE, argv)
    if args.report_only:
        summary = run_study(args.output, work, "", args.steps, args.uptrain_steps, True, command)
        print(markdown(summary))
        return 0
    from headsize_tf.data import corpora
    from headsize_tf.experiments.reproduction.runners import quiet_tensorflow

    quiet_tensorflow()
    data_dir = str(corpora.prepare("gettext_de", args.data_dir).parent)
    work.mkdir(parents=True, exist_ok=True)
    with native_logs_to(work / "native.log"):
        summary = run_study(
            args.output, work, data_dir, args.steps, args.uptrain_steps, command=command
        )
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "kv_translation_study")

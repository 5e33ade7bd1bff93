"""The demo's steps: train, fine-tune, convert, prune, time and export (one function each)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import time
from typing import Any

import numpy as np

from headsize_tf.experiments.demo.settings import BASE, PRETRAINED, DemoModel, DemoSettings


def _override(model: DemoModel, steps: int, dev_examples: int | None = None) -> dict[str, Any]:
    config = json.loads(json.dumps(BASE))
    config["task"]["model"]["encoder"]["any"].update(model.encoder_fields())
    if dev_examples:
        # One validation batch of the first `dev_examples` records: dev.tfrecord holds
        # the dev split in the order of `dev_split`, so every row scores the same snippets.
        validation = config["task"]["validation_data"]
        validation["global_batch_size"] = min(dev_examples, validation["global_batch_size"])
    trainer = config["trainer"]
    trainer["train_steps"] = trainer["validation_interval"] = steps
    trainer["optimizer_config"]["learning_rate"]["polynomial"]["decay_steps"] = steps
    trainer["optimizer_config"]["warmup"]["polynomial"]["warmup_steps"] = max(1, steps // 10)
    return config


def train_small(
    model: DemoModel, slug: str, output: pathlib.Path, data_dir: str | None, settings: DemoSettings
) -> dict:
    """Trains one small model from scratch (idea 1); its row of the table."""
    from headsize_tf import params as counts
    from headsize_tf.training import train

    # Model Garden's trainer prints its own step logs: they go to a file, not the screen.
    log = output / "logs" / f"{slug}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as sink, contextlib.redirect_stdout(sink):
        result = train.run(
            "headsize_bert/sentence_prediction",
            str(output / "models" / slug),
            params_override=_override(model, settings.steps, settings.dev_examples),
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


def dev_split(data_dir: str | None, dev_examples: int | None = None) -> dict:
    """The Rotten Tomatoes splits, dev cut to its first `dev_examples` (None: all)."""
    from headsize_tf.data.text_tasks import rotten_tomatoes_splits

    splits = rotten_tomatoes_splits(data_dir)
    texts, labels = splits["dev"]
    splits["dev"] = (texts[:dev_examples], labels[:dev_examples])
    return splits


def finetune_minilm(
    directory: pathlib.Path,
    shared_key_dim: int | None,
    data_dir: str | None,
    settings: DemoSettings,
    in_memory: dict[str, Any] | None = None,
) -> dict:
    """Fine-tunes MiniLM (or its collaborative conversion) and saves the classifier (also
    into `in_memory`, by directory, when given)."""
    from headsize_tf.pretrained import load_sentence_encoder
    from headsize_tf.pruning import prune
    from headsize_tf.training import finetune as ft

    splits = dev_split(data_dir, settings.dev_examples)
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
    if in_memory is not None:
        in_memory[str(directory)] = classifier
    return record


def prune_minilm(output: pathlib.Path, data_dir: str | None, settings: DemoSettings) -> dict:
    """Prunes the fine-tuned MiniLM's heads and removes them (idea 3); its row."""
    from headsize_tf.pruning import prune
    from headsize_tf.pruning.report import plot_importance

    classifier = prune.load_classifier(output / "models" / "minilm")
    data = prune.task_data(
        classifier.sentence_encoder,
        dev_split(data_dir, settings.dev_examples),
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
    plot_importance(importance, output / "importance.png", "MiniLM head importance (fine-tuned)")
    return {
        "idea": "head pruning",
        "kind": "classifier",
        "directory": str(directory),
        "name": f"MiniLM, {100 * settings.prune_fraction:.0f}% of heads pruned "
        f"({kept} of {total} kept)",
        "dev_accuracy": report["accuracy"]["pruned"],
        "encoder_params": report["params"]["pruned"],
        "curve": [{"fraction": p["fraction"], "metric": p["metric"]} for p in report["curve"]],
    }


def measure_speed(
    rows: list[dict],
    data_dir: str | None,
    repeats: int = 3,
    dev_examples: int | None = None,
    in_memory: dict[str, Any] | None = None,
) -> dict:
    """Dev examples/s of each model (best of `repeats` passes after a warm-up); a
    classifier found in `in_memory` (by directory) is timed there, not reloaded."""
    from headsize_tf.pruning import prune
    from headsize_tf.serving import experiment_classifier
    from headsize_tf.training import finetune as ft

    texts = dev_split(data_dir, dev_examples)["dev"][0]
    out = {}
    for row in rows:
        if row["kind"] == "experiment":
            tokenizer, model = experiment_classifier(row["model_dir"])
            encoder, length = model.checkpoint_items["encoder"], 128
        else:
            model = (in_memory or {}).get(row["directory"]) or prune.load_classifier(
                row["directory"]
            )
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


def export_pruned(pruned_dir: pathlib.Path, export_dir: pathlib.Path) -> dict:
    """Exports the pruned MiniLM as a SavedModel that takes raw text."""
    from headsize_tf.serving import export
    from headsize_tf.serving.sources import serving_module

    module = serving_module("sentence_prediction", checkpoint=pruned_dir)
    path = export(module, export_dir, 1, overwrite=True)
    return {"export": str(path)}

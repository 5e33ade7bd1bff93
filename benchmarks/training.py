"""Training speed of our BERT-small encoders vs Model Garden's stock BertEncoderV2.

BERT-small shape (4 layers, width 256, 4 heads, seq 128, intermediate 1024,
vocab 30522), batch 16, a BertClassifier train step (forward, backward, Adam
update) under `tf.function`. Encoders: stock `BertEncoderV2`, and
`HeadsizeBertEncoder` with standard attention, fixed head size 64 (= d/h)
and 128, and collaborative heads with shared key dim 256 and 128. Timed
interleaved in shuffled order in one process; steps/s and ratio to stock.

Usage:
  python benchmarks/training.py [--repeats 7] [--steps 5] [--output results/benchmarks]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import random
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from _common import write_atomic  # noqa: E402
from official.nlp.modeling import models, networks  # noqa: E402

from headsize_tf.core import AttentionSpec  # noqa: E402
from headsize_tf.modeling import HeadsizeBertEncoder  # noqa: E402

BATCH, SEQ, WIDTH, LAYERS, HEADS, INNER, VOCAB = 16, 128, 256, 4, 4, 1024, 30522
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=WIDTH,
    num_layers=LAYERS,
    inner_dim=INNER,
    max_sequence_length=SEQ,
    type_vocab_size=2,
    inner_activation="gelu",
)


def _spec(kind: str, **sizes) -> AttentionSpec:
    return AttentionSpec(kind, num_heads=HEADS, **sizes)


def encoders() -> dict[str, tf_keras.layers.Layer]:
    return {
        "stock BertEncoderV2": networks.BertEncoderV2(num_attention_heads=HEADS, **COMMON),
        "standard (4x64)": HeadsizeBertEncoder(attention=_spec("standard"), **COMMON),
        "fixed_head (4x64)": HeadsizeBertEncoder(
            attention=_spec("fixed_head", head_size=64), **COMMON
        ),
        "fixed_head (4x128)": HeadsizeBertEncoder(
            attention=_spec("fixed_head", head_size=128), **COMMON
        ),
        "collaborative (D=256)": HeadsizeBertEncoder(
            attention=_spec("collaborative", shared_key_dim=256), **COMMON
        ),
        "collaborative (D=128)": HeadsizeBertEncoder(
            attention=_spec("collaborative", shared_key_dim=128), **COMMON
        ),
    }


def make_step(encoder):
    model = models.BertClassifier(encoder, num_classes=2)
    optimizer = tf_keras.optimizers.Adam(1e-4)
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(inputs, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return step, model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--output", default="results/benchmarks")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    ids = rng.integers(1, VOCAB, size=(BATCH, SEQ)).astype(np.int32)
    inputs = {
        "input_word_ids": tf.constant(ids),
        "input_mask": tf.ones_like(ids),
        "input_type_ids": tf.zeros_like(ids),
    }
    labels = tf.constant(rng.integers(0, 2, size=(BATCH,)).astype(np.int32))
    runs = []
    for name, encoder in encoders().items():
        step, model = make_step(encoder)
        for _ in range(2):
            step(inputs, labels)
        runs.append({"name": name, "step": step, "params": model.count_params(), "sps": []})
    order_rng = random.Random(0)
    for _ in range(args.repeats):
        order = list(runs)
        order_rng.shuffle(order)
        for run in order:
            start = time.perf_counter()
            for _ in range(args.steps):
                loss = run["step"](inputs, labels)
            float(loss)
            run["sps"].append(args.steps / (time.perf_counter() - start))
    stock = statistics.median(runs[0]["sps"])
    rows = [
        {
            "encoder": r["name"],
            "params": int(r["params"]),
            "median_steps_per_s": round(statistics.median(r["sps"]), 3),
            "ratio_to_stock": round(statistics.median(r["sps"]) / stock, 3),
            "all_steps_per_s": [round(v, 3) for v in r["sps"]],
        }
        for r in runs
    ]
    command = "python benchmarks/training.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    meta = {
        "command": command.strip(),
        "shape": {"batch": BATCH, "seq": SEQ, "width": WIDTH, "layers": LAYERS, "heads": HEADS},
        "repeats": args.repeats,
        "steps_per_repeat": args.steps,
        "tensorflow": tf.__version__,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
    }
    out = pathlib.Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "training.json", json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [
        "# BERT-small training speed (BertClassifier train step)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Batch {BATCH}, seq {SEQ}, width {WIDTH}, {LAYERS} layers, {HEADS} heads; TF "
        f"{tf.__version__}; {meta['machine']}; median of {args.repeats} interleaved repeats "
        f"(shuffled order) x {args.steps} steps. Ratio = steps/s / stock BertEncoderV2 steps/s.",
        "",
        "| encoder | params | steps/s | ratio to stock |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['encoder']} | {r['params']:,} | {r['median_steps_per_s']:.2f} | "
            f"{r['ratio_to_stock']:.3f} |"
        )
    write_atomic(out / "training.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

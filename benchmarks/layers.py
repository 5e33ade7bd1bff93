"""Forward+backward speed of the attention layers vs stock Keras MHA.

BERT-base shapes (batch 8, sequence 128, width 768, 12 heads): stock
`tf_keras.layers.MultiHeadAttention`, `StandardAttention`,
`FixedHeadAttention` (head 64 and 128) and `CollaborativeAttention` (shared
key dim 768, 384, 192), each with and without XLA. Configurations are timed
interleaved (round-robin over repeats) in one process so machine noise hits
all of them alike; we report medians and ratios to stock MHA under the same
compilation setting. Two parts are timed: the whole layer, and the
attention-score part (query/key projections, logits, softmax) that
collaborative heads change.

Usage:
  python benchmarks/layers.py [--repeats 7] [--iters 5] [--output results/benchmarks]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import random
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from _common import write_atomic  # noqa: E402

from headsize_tf.layers import (  # noqa: E402
    CollaborativeAttention,
    FixedHeadAttention,
    StandardAttention,
)

BATCH, SEQ, WIDTH, HEADS = 8, 128, 768, 12


def make_layers() -> dict[str, tf_keras.layers.Layer]:
    return {
        "stock MHA (12x64)": tf_keras.layers.MultiHeadAttention(HEADS, key_dim=WIDTH // HEADS),
        "StandardAttention (12x64)": StandardAttention(HEADS),
        "FixedHeadAttention (12x64)": FixedHeadAttention(HEADS, head_size=64),
        "FixedHeadAttention (12x128)": FixedHeadAttention(HEADS, head_size=128),
        "CollaborativeAttention (D=768)": CollaborativeAttention(HEADS, shared_key_dim=768),
        "CollaborativeAttention (D=384)": CollaborativeAttention(HEADS, shared_key_dim=384),
        "CollaborativeAttention (D=192)": CollaborativeAttention(HEADS, shared_key_dim=192),
    }


def score_part(layer: tf_keras.layers.Layer, x: tf.Tensor) -> tf.Tensor:
    """Attention probabilities: Q/K projections, logits, softmax."""
    if hasattr(layer, "_attention_logits"):
        logits = layer._attention_logits(x, x)
    else:  # Stock Keras MHA.
        q = layer._query_dense(x) * (1.0 / math.sqrt(layer._key_dim))
        k = layer._key_dense(x)
        logits = tf.einsum(layer._dot_product_equation, k, q)
    return tf.nn.softmax(logits, axis=-1)


def make_step(layer, part: str, jit: bool):
    def step(x, probe):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, x) if part == "layer" else score_part(layer, x)
            loss = tf.reduce_sum(y * probe)
        grads = tape.gradient(loss, [x] + layer.trainable_weights)
        return loss, grads

    return tf.function(step, jit_compile=jit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--output", default="results/benchmarks")
    args = parser.parse_args(argv)

    x = tf.random.normal([BATCH, SEQ, WIDTH], seed=0)
    layers = make_layers()
    for layer in layers.values():
        layer(x, x)
    probes = {
        "layer": tf.random.normal([BATCH, SEQ, WIDTH], seed=1),
        "scores": tf.random.normal([BATCH, HEADS, SEQ, SEQ], seed=2),
    }
    configs = []
    for jit in (False, True):
        for part in ("layer", "scores"):
            for name, layer in layers.items():
                step = make_step(layer, part, jit)
                for _ in range(2):  # Trace / compile and warm up.
                    step(x, probes[part])
                configs.append({"name": name, "xla": jit, "part": part, "step": step, "ms": []})
    rng = random.Random(0)
    for _ in range(args.repeats):
        order = list(configs)
        rng.shuffle(order)  # No configuration always runs first or after another.
        for cfg in order:
            probe = probes[cfg["part"]]
            start = time.perf_counter()
            for _ in range(args.iters):
                loss, _ = cfg["step"](x, probe)
            float(loss)  # Block on the result.
            cfg["ms"].append(1e3 * (time.perf_counter() - start) / args.iters)

    rows = []
    for cfg in configs:
        stock = next(
            c
            for c in configs
            if c["name"].startswith("stock") and c["xla"] == cfg["xla"] and c["part"] == cfg["part"]
        )
        median = statistics.median(cfg["ms"])
        rows.append(
            {
                "layer": cfg["name"],
                "part": cfg["part"],
                "xla": cfg["xla"],
                "median_ms": round(median, 3),
                "ratio_to_stock_mha": round(median / statistics.median(stock["ms"]), 3),
                "all_ms": [round(v, 3) for v in cfg["ms"]],
            }
        )
    out_dir = pathlib.Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/layers.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {
        "command": command.strip(),
        "shape": {"batch": BATCH, "seq": SEQ, "width": WIDTH, "heads": HEADS},
        "repeats": args.repeats,
        "iters_per_repeat": args.iters,
        "tensorflow": tf.__version__,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "measure": "forward+backward (grads wrt input and weights), median ms per step",
    }
    write_atomic(out_dir / "layers.json", json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [
        "# Attention layer speed (forward + backward)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Shape: batch {BATCH}, seq {SEQ}, width {WIDTH}, {HEADS} heads; "
        f"TF {tf.__version__}; {meta['machine']}; median of {args.repeats} interleaved "
        f"repeats (shuffled order) x {args.iters} steps. Ratio = median / stock MHA median (same part, same XLA).",
        "",
        "| layer | part | XLA | median ms | ratio to stock MHA |",
        "|---|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {r['part']} | {'yes' if r['xla'] else 'no'} | "
            f"{r['median_ms']:.2f} | {r['ratio_to_stock_mha']:.3f} |"
        )
    write_atomic(out_dir / "layers.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

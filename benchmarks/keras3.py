"""Keras 3 attention layers vs `keras.layers.MultiHeadAttention`, per backend (CPU).

BERT-base shapes (batch 8, sequence 128, width 768, 12 heads). Each layer
sits in a one-layer functional model; we time `predict_on_batch` (forward)
and `train_on_batch` (forward, backward, SGD update), compiled by Keras as
`fit` would (`jit_compile` off and on), on the TensorFlow and JAX backends.
Each backend runs in its own child process (Keras fixes its backend at
import); within a process the configurations are timed interleaved
(round-robin in shuffled order) so machine noise hits all alike, and we
report medians and the ratio to stock MHA under the same backend, part and
compilation setting. CPU timings are noisy: compare ratios, not milliseconds.

Usage:
  python benchmarks/keras3.py [--repeats 7] [--iters 3] [--backends tensorflow,jax]
      [--output results/benchmarks]
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

BATCH, SEQ, WIDTH, HEADS = 8, 128, 768, 12


def _layers():
    import keras

    from headsize_tf.keras3.layers import (
        CollaborativeAttention,
        FixedHeadAttention,
        StandardAttention,
    )

    return {
        "stock MHA (12x64)": lambda: keras.layers.MultiHeadAttention(HEADS, key_dim=64),
        "StandardAttention (12x64)": lambda: StandardAttention(HEADS),
        "FixedHeadAttention (12x64)": lambda: FixedHeadAttention(HEADS, head_size=64),
        "FixedHeadAttention (12x128)": lambda: FixedHeadAttention(HEADS, head_size=128),
        "CollaborativeAttention (D=384)": lambda: CollaborativeAttention(HEADS, shared_key_dim=384),
    }


def child(repeats: int, iters: int) -> list[dict]:
    """Times every configuration on the current backend; returns rows."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(BATCH, SEQ, WIDTH)).astype("float32")
    y = np.random.default_rng(1).normal(size=(BATCH, SEQ, WIDTH)).astype("float32")
    configs = []
    for jit in (False, True):
        for name, make in _layers().items():
            inputs = keras.Input((SEQ, WIDTH))
            model = keras.Model(inputs, make()(inputs, inputs))
            model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse", jit_compile=jit)
            for part, run in (
                ("forward", lambda m=model: m.predict_on_batch(x)),
                ("train step", lambda m=model: m.train_on_batch(x, y)),
            ):
                for _ in range(2):  # Trace / compile and warm up.
                    run()
                configs.append({"name": name, "xla": jit, "part": part, "run": run, "ms": []})
    rng = random.Random(0)
    for _ in range(repeats):
        order = list(configs)
        rng.shuffle(order)
        for cfg in order:
            start = time.perf_counter()
            for _ in range(iters):
                out = cfg["run"]()
            np.asarray(out)  # Block on the result.
            cfg["ms"].append(1e3 * (time.perf_counter() - start) / iters)
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
                "backend": keras.backend.backend(),
                "layer": cfg["name"],
                "part": cfg["part"],
                "jit_compile": cfg["xla"],
                "median_ms": round(median, 3),
                "ratio_to_stock_mha": round(median / statistics.median(stock["ms"]), 3),
                "all_ms": [round(v, 3) for v in cfg["ms"]],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--backends", default="tensorflow,jax")
    parser.add_argument("--output", default="results/benchmarks")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.repeats, args.iters)))
        return 0

    from _common import rows_per_backend

    rows = rows_per_backend(
        __file__, args.backends, ["--repeats", str(args.repeats), "--iters", str(args.iters)]
    )
    if isinstance(rows, int):
        return rows

    import keras
    from _common import write_atomic

    versions = {"keras": keras.__version__}
    try:
        import jax

        versions["jax"] = jax.__version__
    except ImportError:
        pass
    import tensorflow as tf

    versions["tensorflow"] = tf.__version__
    command = "python benchmarks/keras3.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {
        "command": command.strip(),
        "shape": {"batch": BATCH, "seq": SEQ, "width": WIDTH, "heads": HEADS},
        "repeats": args.repeats,
        "iters_per_repeat": args.iters,
        "versions": versions,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus (CPU only)",
        "measure": "median ms per predict_on_batch / train_on_batch call",
    }
    out_dir = pathlib.Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "keras3.json", json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [
        "# Keras 3 attention layers vs keras.layers.MultiHeadAttention (CPU)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Shape: batch {BATCH}, seq {SEQ}, width {WIDTH}, {HEADS} heads; "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f"; {meta['machine']}; median of {args.repeats} interleaved repeats x "
        f"{args.iters} calls. Ratio = median / stock MHA median (same backend, part, "
        "jit_compile). Target: <= 1.0x for FixedHeadAttention at d/h (12x64).",
        "",
        "| backend | layer | part | jit_compile | median ms | ratio to stock MHA |",
        "|---|---|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['layer']} | {r['part']} | {'yes' if r['jit_compile'] else 'no'}"
            f" | {r['median_ms']:.2f} | {r['ratio_to_stock_mha']:.3f} |"
        )
    write_atomic(out_dir / "keras3.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    raise SystemExit(main())

"""Decoding speed and KV-cache size of every head-sharing kind, side by side (Keras 3).

A 4-layer LM of width 256 with 8 heads of 32 (vocabulary 4096, 2080
positions) decodes a batch of 8 rows at contexts 512, 1024 and 2048: its
caches are filled to the context (random values: speed does not depend on
them) and `CausalLM.compiled_decode_step` (`tf.function` / `jax.jit`) adds
new tokens one by one. Random weights: the kinds are derived from the one
multi-head model by `headsize_tf.keras3.reparam.convert_model` and
`remove_heads`, so each has its real shapes:

* multi-head (the reference, 8 key/value heads);
* grouped, G = 4 / 2 / 1 key/value heads (cache 1/2, 1/4, 1/8);
* latent, r = 256 / 128 / 64, absorbed decoding (attends in latent space)
  and up-projected decoding (re-expands the cached latents every step);
* heads pruned to 4 / 2 / 1 per layer (the same cache fractions);
* collaborative keys, D = 64 (its cache cannot go below the values' half).

Each backend runs in its own child process (Keras fixes its backend at
import); configurations are interleaved in shuffled order per repeat so
machine noise hits all alike. We report median decode tokens/s (batch x
steps / time), the ratio to the multi-head model at the same context, and the
cache's bytes per token (measured on the arrays, checked against
`headsize_tf.core.kv_cache`). CPU timings are noisy: compare ratios.

Usage:
  python benchmarks/kv_cache.py [--repeats 3] [--steps 16] [--backends tensorflow]
      [--contexts 512,1024,2048] [--batch 8] [--output results/benchmarks]
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

VOCAB, LAYERS, WIDTH, HEADS = 4096, 4, 256, 8


def child(repeats: int, steps: int, contexts: list[int], batch: int) -> list[dict]:
    import keras
    import numpy as np

    from headsize_tf.core import kv_cache
    from headsize_tf.core.conversion import ConversionTarget
    from headsize_tf.keras3.modeling import CausalLM
    from headsize_tf.keras3.pruning import remove_heads
    from headsize_tf.keras3.reparam import convert_model

    keras.utils.set_random_seed(0)
    lm = CausalLM(
        vocabulary_size=VOCAB,
        num_layers=LAYERS,
        hidden_dim=WIDTH,
        attention={"kind": "standard", "num_heads": HEADS},
        max_sequence_length=max(contexts) + steps,
    )
    lm(np.zeros((1, 4), "int32"))
    models = {"multi-head (8 K/V heads)": lm}
    for groups in (4, 2, 1):
        models[f"grouped, G={groups}"] = convert_model(lm, ConversionTarget("grouped", groups))[0]
    for rank in (256, 128, 64):
        models[f"latent, r={rank}, absorbed"] = convert_model(lm, ConversionTarget("latent", rank))[
            0
        ]
        plain = convert_model(lm, ConversionTarget("latent", rank))[0]
        for layer in plain.attention_layers:
            layer.absorb = False
        models[f"latent, r={rank}, up-projected"] = plain
    for kept in (4, 2, 1):
        mask = np.zeros([LAYERS, HEADS], np.float32)
        mask[:, :kept] = 1.0
        models[f"pruned to {kept} heads"] = remove_heads(lm, mask)
    models["collaborative, D=64"] = convert_model(lm, ConversionTarget("collaborative", 64))[0]

    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, (batch, 1)).astype("int32")
    rows = []
    for context in contexts:
        length = context + steps
        runs, bytes_per_token = {}, {}
        # Random values drawn on the device: at 32K tokens the caches hold gigabytes, too
        # slow to draw on the host.
        seed = keras.random.SeedGenerator(context)
        for name, model in models.items():
            caches = []
            for layer in model.attention_layers:
                shapes = layer.cache_shapes(batch, length)
                caches.append({k: keras.random.normal(s, seed=seed) for k, s in shapes.items()})
            measured = sum(  # from the arrays' shapes and dtypes: no copy to the host
                int(np.prod(t.shape)) * np.dtype(keras.backend.standardize_dtype(t.dtype)).itemsize
                for c in caches
                for t in c.values()
            )
            per_token = kv_cache.kv_cache_bytes_per_token(
                model.attention_spec, WIDTH, num_layers=LAYERS
            )
            assert measured == per_token * batch * length, (name, measured, per_token)
            bytes_per_token[name] = per_token
            step = model.compiled_decode_step()

            # The compiled step donates its caches on JAX: each run continues from the last
            # run's caches (same shapes, same cost).
            state = {"caches": caches}

            def run(step=step, state=state, context=context):
                for index in range(context, context + steps):
                    logits, state["caches"] = step(tokens, state["caches"], index)
                return keras.ops.convert_to_numpy(logits)

            run()  # Compile (one trace per cache length) and warm up.
            runs[name] = run
        seconds = {name: [] for name in runs}
        order_rng = random.Random(context)
        for _ in range(repeats):
            order = list(runs)
            order_rng.shuffle(order)
            for name in order:
                start = time.perf_counter()
                runs[name]()
                seconds[name].append(time.perf_counter() - start)
        base = statistics.median(seconds["multi-head (8 K/V heads)"])
        full = bytes_per_token["multi-head (8 K/V heads)"]
        for name, s in seconds.items():
            rows.append(
                {
                    "backend": keras.backend.backend(),
                    "context": context,
                    "batch": batch,
                    "config": name,
                    "cache_bytes_per_token": bytes_per_token[name],
                    "cache_fraction": round(bytes_per_token[name] / full, 4),
                    "tokens_per_s": round(batch * steps / statistics.median(s), 1),
                    "speedup": round(base / statistics.median(s), 3),
                    "all_s": [round(v, 4) for v in s],
                    "params": int(models[name].count_params()),
                    "device": _device(),
                }
            )
        print(f"context {context} done", file=sys.stderr, flush=True)
    return rows


def _device() -> str:
    """The accelerator the child's backend computes on ("cpu" or, e.g., "NVIDIA H100 80GB HBM3")."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        return "cpu" if device.platform == "cpu" else device.device_kind
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        return (
            tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
            if gpus
            else "cpu"
        )
    return "cpu"


def _plot(rows: list[dict], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _common import save_figure

    backends = sorted({r["backend"] for r in rows})
    fig, axes = plt.subplots(1, len(backends), figsize=(7 * len(backends), 4.5), squeeze=False)
    for ax, backend in zip(axes[0], backends, strict=True):
        mine = [r for r in rows if r["backend"] == backend]
        for config in dict.fromkeys(r["config"] for r in mine):
            points = sorted(
                (r["context"], r["tokens_per_s"]) for r in mine if r["config"] == config
            )
            style = "-" if "multi-head" in config else ("--" if "up-projected" in config else "-")
            ax.plot(*zip(*points, strict=True), style, marker="o", label=config, linewidth=1.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (cached tokens)")
        ax.set_ylabel("decode tokens/s")
        ax.set_title(
            f"Keras 3 ({backend}, {mine[0].get('device', 'cpu')}), batch {mine[0]['batch']}"
        )
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    save_figure(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--contexts", default="512,1024,2048")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--backends", default="tensorflow")
    parser.add_argument("--output", default="results/benchmarks")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    contexts = [int(c) for c in args.contexts.split(",")]
    if args.child:
        print(json.dumps(child(args.repeats, args.steps, contexts, args.batch)))
        return 0
    from _common import rows_per_backend, write_atomic

    child_args = ["--repeats", str(args.repeats), "--steps", str(args.steps)]
    child_args += ["--contexts", args.contexts, "--batch", str(args.batch)]
    rows = rows_per_backend(__file__, args.backends, child_args)
    if isinstance(rows, int):
        return rows
    command = "python benchmarks/kv_cache.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    meta = {
        "command": command.strip(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.processor() or '?'}",
        "shape": {"vocab": VOCAB, "layers": LAYERS, "width": WIDTH, "heads": HEADS},
        "repeats": args.repeats,
        "steps": args.steps,
        "devices": sorted({r["device"] for r in rows}),
    }
    out_dir = pathlib.Path(args.output)
    write_atomic(
        out_dir / "kv_cache.json", json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    _plot(rows, out_dir / "kv_cache.png")
    lines = [
        "# Decoding with a smaller KV cache: every head-sharing kind side by side "
        f"(Keras 3, {', '.join(meta['devices'])})",
        "",
        f"Command: `{meta['command']}`  ",
        f"LM: {LAYERS} layers, width {WIDTH}, {HEADS} heads of {WIDTH // HEADS}, vocabulary "
        f"{VOCAB}, random weights; batch {args.batch}, {args.steps} decode steps after a cache "
        f"filled to the context; {meta['machine']}, computing on {', '.join(meta['devices'])}; median of {args.repeats} interleaved "
        "repeats. Speed-up = the multi-head model's median time / this one's, same context "
        "and backend. Cache bytes per token (float32, all layers) measured on the arrays.",
        "",
        "![decode tokens/s](kv_cache.png)",
        "",
        "| backend | context | kind | cache bytes/token | fraction | tokens/s | speed-up |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['context']} | {r['config']} | {r['cache_bytes_per_token']:,} "
            f"| {r['cache_fraction']:.3f} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f} |"
        )
    write_atomic(out_dir / "kv_cache.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    raise SystemExit(main())

"""Keras 3 `CausalLM.generate`: cached and compiled decoding, and heads removed (CPU).

A 4-layer LM of width 256 with 8 heads of 32 (vocabulary 4096) continues a
batch of 8 prompts of 32 tokens by 64 tokens, greedily. Timed per backend in
its own child process (Keras fixes its backend at import), configurations
interleaved in shuffled order so machine noise hits all alike:

* compiled cache: `generate` (a `tf.function` / `jax.jit` step over the
  layers' key/value caches), the reference;
* eager cache: `generate(compile=False)`;
* half the heads removed: `remove_heads` with heads 4..7 of every layer
  masked, then `generate` (Michel et al.: removing heads speeds inference;
  the pruned layers are `fixed_head` layers of the same head size 32, the
  same computation as standard attention with fewer heads);
* eager, no cache: the whole sequence through the model for every new
  token, eagerly (TensorFlow only: on JAX every new length recompiles every
  op). Against "eager cache" it shows the cache's gain alone; against the
  compiled cache, the cache's and the compilation's together.

We report median tokens/s and the ratio to the compiled cache of the full
model. CPU timings are noisy: compare ratios, not tokens/s.

Usage:
  python benchmarks/keras3_decoding.py [--repeats 5] [--backends tensorflow,jax]
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

VOCAB, LAYERS, WIDTH, HEADS, MAX_LENGTH = 4096, 4, 256, 8, 256
BATCH, PROMPT, NEW = 8, 32, 64


def child(repeats: int) -> list[dict]:
    import keras
    import numpy as np

    from headsize_tf.keras3.modeling import CausalLM
    from headsize_tf.keras3.pruning import remove_heads

    keras.utils.set_random_seed(0)
    lm = CausalLM(
        vocabulary_size=VOCAB,
        num_layers=LAYERS,
        hidden_dim=WIDTH,
        attention={"kind": "standard", "num_heads": HEADS},
        max_sequence_length=MAX_LENGTH,
    )
    mask = np.ones([LAYERS, HEADS], np.float32)
    mask[:, HEADS // 2 :] = 0.0
    pruned = remove_heads(lm, mask)
    prompt = np.random.default_rng(0).integers(1, VOCAB, (BATCH, PROMPT)).astype("int32")

    def uncached():
        sequence = prompt
        for _ in range(NEW):
            logits = keras.ops.convert_to_numpy(lm(sequence))
            following = logits[:, -1].argmax(-1).astype("int32")
            sequence = np.concatenate([sequence, following[:, None]], axis=1)
        return sequence

    configs = {
        "compiled cache": lambda: lm.generate(prompt, NEW),
        "eager cache": lambda: lm.generate(prompt, NEW, compile=False),
        "half the heads removed, compiled cache": lambda: pruned.generate(prompt, NEW),
    }
    if keras.backend.backend() == "tensorflow":
        configs["eager, no cache (whole sequence per token)"] = uncached
    reference = configs["compiled cache"]()
    for name, run in configs.items():  # Compile and warm up; the full model agrees.
        out = run()
        if "removed" not in name:
            np.testing.assert_array_equal(out, reference)
    seconds = {name: [] for name in configs}
    rng = random.Random(0)
    for _ in range(repeats):
        order = list(configs)
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            configs[name]()
            seconds[name].append(time.perf_counter() - start)
    base = statistics.median(seconds["compiled cache"])
    return [
        {
            "backend": keras.backend.backend(),
            "config": name,
            "tokens_per_s": round(BATCH * NEW / statistics.median(s), 1),
            "time_ratio_to_compiled_cache": round(statistics.median(s) / base, 3),
            "all_s": [round(v, 4) for v in s],
            "params": int((pruned if "removed" in name else lm).count_params()),
        }
        for name, s in seconds.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backends", default="tensorflow,jax")
    parser.add_argument("--output", default="results/benchmarks")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.repeats)))
        return 0
    from _common import rows_per_backend

    rows = rows_per_backend(__file__, args.backends, ["--repeats", str(args.repeats)])
    if isinstance(rows, int):
        return rows

    from _common import write_atomic

    command = "python benchmarks/keras3_decoding.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    meta = {
        "command": command.strip(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "shape": {
            "vocab": VOCAB,
            "layers": LAYERS,
            "width": WIDTH,
            "heads": HEADS,
            "batch": BATCH,
            "prompt": PROMPT,
            "new_tokens": NEW,
        },
        "repeats": args.repeats,
    }
    out_dir = pathlib.Path(args.output)
    write_atomic(
        out_dir / "keras3_decoding.json", json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    lines = [
        "# Keras 3 CausalLM.generate: cache, compilation, heads removed (CPU)",
        "",
        f"Command: `{meta['command']}`  ",
        f"LM: {LAYERS} layers, width {WIDTH}, {HEADS} heads of {WIDTH // HEADS}, vocabulary "
        f"{VOCAB}; {BATCH} prompts of {PROMPT} tokens, {NEW} new tokens, greedy; "
        f"{meta['machine']}; median of {args.repeats} interleaved repeats. Ratio = median "
        "time / the full model's compiled cache (same backend).",
        "",
        "| backend | decoding | params | tokens/s | time ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['config']} | {r['params']:,} | "
            f"{r['tokens_per_s']:.1f} | {r['time_ratio_to_compiled_cache']:.2f} |"
        )
    write_atomic(out_dir / "keras3_decoding.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    raise SystemExit(main())

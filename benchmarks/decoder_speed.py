"""Prefill and cached-decode speed of SmolLM2-shaped decoders: ours against keras-hub, and the KV-cache kinds.

Two tables, each a child process per Keras backend (Keras fixes its backend at
import), models interleaved in shuffled order per repeat so machine noise hits
all alike; medians reported as tokens/s and as ratios measured side by side.

* `--part hub`: the library's `DecoderLM` against keras-hub's
  `Llama3CausalLM` holding the same weights (copied through the Llama
  checkpoint mapping; their logits are compared first). Prefill: one forward
  pass over `--prefill` tokens per row, last-position logits; decode: steps
  of one token per row over caches filled to the context with random values,
  each model's step compiled the same way (`jax.jit` over its variables, or
  `tf.function`). Ratio = ours / keras-hub tokens/s.
* `--part kv`: our decoder's decode step with the original cache (3 grouped
  K/V heads) and converted caches of the same shape family: grouped G = 1
  (33%) and a shared latent with decoupled rotary keys (three rotary keys of
  4 frequency pairs, as MHA2MLA's conversion keeps; latent sizes for 50,
  31.25, 18.75 and 12.5% of the cache; at 18.75% also rotated RoPE's one rotary
  key of 12 pairs, TransMLA's form). Random weights: speed depends on
  shapes, not values. Ratio = converted / original tokens/s, and beside it
  the ideal from the bytes a step reads (weights + cache).

Shape (SmolLM2-135M): 30 layers, width 576, 9 query heads of 64, 3 key/value
heads, SwiGLU 1536, vocabulary 49152, tied embeddings, RoPE base 100000.
`--layers` shrinks the depth for a quick check.

Usage:
  python benchmarks/decoder_speed.py --part hub --backends tensorflow,jax \
      --prefill 256 --contexts 256,1024 --batches 1 --output results/smollm2
  python benchmarks/decoder_speed.py --part kv --backends jax --contexts 2048,4096,8192 \
      --batches 1,16 --output OUT
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

VOCAB, LAYERS, WIDTH, HEADS, KV_HEADS, HEAD, FFN, BASE = 49152, 30, 576, 9, 3, 64, 1536, 1e5
# Latent caches per token and layer of the kv table: (latent size, fraction of 384).
LATENTS = {"50%": 168, "31.25%": 96, "18.75%": 48, "12.5%": 24}
ROPE_HEADS, ROPE_PAIRS = 3, 4


def _device() -> str:
    import keras

    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        return "cpu" if device.platform == "cpu" else device.device_kind
    return "cpu"


def _compiled(fn, model, donate_caches: bool = False):
    """`fn` compiled by the backend over `model`'s variables (the same wrapper for every model).

    With `donate_caches`, `fn(tokens, caches, index)`'s caches are donated on JAX (updated in
    place, as `DecoderLM.compiled_decode_step` does), for ours and keras-hub's alike.
    """
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        variables = list(model.variables)

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                return fn(*args)

        jitted = jax.jit(stateless, donate_argnums=(2,) if donate_caches else ())
        return lambda *args: jitted([v.value for v in variables], *args)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, autograph=False)
    return fn


def _index(value: int):
    import keras

    if keras.backend.backend() == "jax":
        import jax.numpy as jnp

        return jnp.asarray(value, "int32")
    return keras.ops.convert_to_tensor(value, "int32")


def _sync(x):
    import keras

    return keras.ops.convert_to_numpy(x)


def _decoder(attention: dict, layers: int, max_length: int):
    from headsize_tf.keras3.modeling import DecoderLM

    return DecoderLM(
        vocabulary_size=VOCAB,
        num_layers=layers,
        hidden_dim=WIDTH,
        attention={**attention, "rope_max_wavelength": BASE},
        intermediate_dim=FFN,
        max_sequence_length=max_length,
        layer_norm_epsilon=1e-5,
    )


def _our_step(lm):
    def step(tokens, caches, index):
        return lm._decode(tokens, caches, index)

    return _compiled(step, lm, donate_caches=True)


def _our_prefill(lm):
    def prefill(ids):
        x = lm.token_embedding(ids)
        for block in lm.transformer_layers:
            x = block(x, use_causal_mask=True)
        return lm._logits(x[:, -1:])

    return _compiled(prefill, lm)


def _random_caches(lm, batch: int, length: int, rng):
    """Caches filled with random values, drawn on the device (values do not change speed)."""
    import keras

    seed = int(rng.integers(1 << 30))
    return [
        {
            name: keras.random.normal(shape, seed=seed + i)
            for name, shape in layer.cache_shapes(batch, length).items()
        }
        for i, layer in enumerate(lm.attention_layers)
    ]


def _emit(args, row: dict) -> dict:
    """Appends `row` to OUTPUT/decoder_speed_PART.partial.jsonl at once: a run cut off by a time
    limit keeps the rows it finished."""
    import keras

    row = dict(row, backend=keras.backend.backend(), device=_device(), layers=args.layers)
    path = pathlib.Path(args.output) / f"decoder_speed_{args.part}.partial.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def _time(runs: dict, repeats: int, seed: int) -> dict[str, list[float]]:
    seconds = {name: [] for name in runs}
    order_rng = random.Random(seed)
    for _ in range(repeats):
        order = list(runs)
        order_rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            runs[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def hub_child(args) -> list[dict]:
    import keras
    import keras_hub
    import numpy as np

    from headsize_tf.keras3.modeling.llama_weights import checkpoint_from_decoder
    from headsize_tf.keras3.pretrained.hub_decoders import hub_backbone_from_checkpoint

    keras.utils.set_random_seed(0)
    max_length = max(args.contexts + [args.prefill]) + args.steps
    ours = _decoder(
        {"kind": "grouped", "num_heads": HEADS, "num_kv_heads": KV_HEADS, "head_size": HEAD},
        args.layers,
        max_length,
    )
    backbone = hub_backbone_from_checkpoint(checkpoint_from_decoder(ours), "Llama3Backbone")
    for layer in backbone._flatten_layers():  # keras-hub's converter default; ours is 1e-5.
        if type(layer).__name__ == "LlamaLayerNorm":
            layer.epsilon = 1e-5
    theirs = keras_hub.models.Llama3CausalLM(backbone=backbone, preprocessor=None)
    rng = np.random.default_rng(0)
    rows = []
    for batch in args.batches:
        # Prefill: a forward pass over the prompt, last-position logits.
        ids = rng.integers(1, VOCAB, (batch, args.prefill)).astype("int32")
        mask = np.ones_like(ids)
        our_prefill = _our_prefill(ours)

        def hub_forward(ids, mask):
            hidden = backbone({"token_ids": ids, "padding_mask": mask})
            return backbone.token_embedding(hidden[:, -1:], reverse=True)

        hub_prefill = _compiled(hub_forward, theirs)
        a, b = _sync(our_prefill(ids)), _sync(hub_prefill(ids, mask))
        diff = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-9))
        runs = {
            "ours": lambda f=our_prefill, ids=ids: _sync(f(ids)),
            "keras-hub": lambda f=hub_prefill, ids=ids, mask=mask: _sync(f(ids, mask)),
        }
        for run in runs.values():
            run()
        seconds = _time(runs, args.repeats, batch)
        for name, s in seconds.items():
            rows.append(
                _emit(
                    args,
                    {
                        "phase": "prefill",
                        "model": name,
                        "batch": batch,
                        "context": args.prefill,
                        "tokens_per_s": round(batch * args.prefill / statistics.median(s), 1),
                        "all_s": [round(v, 4) for v in s],
                        "relative_logit_diff": diff,
                    },
                )
            )
        print(f"prefill batch {batch} done", file=sys.stderr, flush=True)
        # Decode: steps over caches filled to the context.
        tokens = rng.integers(1, VOCAB, (batch, 1)).astype("int32")
        our_step = _our_step(ours)

        def hub_step_fn(tokens, cache, index):
            logits, _, cache = theirs.call_with_cache(tokens, cache, index)
            return logits, cache

        hub_step = _compiled(hub_step_fn, theirs, donate_caches=True)
        for context in args.contexts:
            length = context + args.steps
            our_caches = _random_caches(ours, batch, length, rng)
            hub_cache = keras.random.normal(
                (batch, args.layers, 2, length, KV_HEADS, HEAD), seed=int(rng.integers(1 << 30))
            )

            # Donated caches are consumed: each run continues from the last run's caches.
            ours_state, hub_state = {"caches": our_caches}, {"caches": hub_cache}

            def run_ours(state=ours_state, context=context, step=our_step, tokens=tokens):
                for index in range(context, context + args.steps):
                    logits, state["caches"] = step(tokens, state["caches"], _index(index))
                return _sync(logits)

            def run_hub(state=hub_state, context=context, step=hub_step, tokens=tokens):
                for index in range(context, context + args.steps):
                    logits, state["caches"] = step(tokens, state["caches"], _index(index))
                return _sync(logits)

            runs = {"ours": run_ours, "keras-hub": run_hub}
            for run in runs.values():
                run()
            seconds = _time(runs, args.repeats, context + batch)
            for name, s in seconds.items():
                rows.append(
                    _emit(
                        args,
                        {
                            "phase": "decode",
                            "model": name,
                            "batch": batch,
                            "context": context,
                            "tokens_per_s": round(batch * args.steps / statistics.median(s), 1),
                            "all_s": [round(v, 4) for v in s],
                        },
                    )
                )
            print(f"decode batch {batch} context {context} done", file=sys.stderr, flush=True)
    return rows


def kv_child(args) -> list[dict]:
    import keras
    import numpy as np

    from headsize_tf.core import kv_cache

    keras.utils.set_random_seed(0)
    max_length = max(args.contexts) + args.steps
    base = {"num_heads": HEADS, "head_size": HEAD}
    configs = {
        "original (G=3)": {"kind": "grouped", "num_kv_heads": KV_HEADS, **base},
        "grouped G=1": {"kind": "grouped", "num_kv_heads": 1, **base},
    }
    for label, rank in LATENTS.items():
        if args.latents and label not in args.latents:
            continue
        configs[f"latent {label}"] = {
            "kind": "latent",
            "kv_latent_dim": rank,
            "num_rope_heads": ROPE_HEADS,
            "rope_frequencies": [0, 8, 16, 24][:ROPE_PAIRS],
            **base,
        }
    if not args.latents or "18.75%" in args.latents:
        # Rotated RoPE (TransMLA's RoRoPE) at 18.75%: one rotary key of 12 rotated pairs (all
        # 3 components of the 4 highest frequencies), heads of 2 x 28 + 24 = 80 dimensions.
        configs["latent 18.75% rotated"] = {
            **base,
            "kind": "latent",
            "kv_latent_dim": LATENTS["18.75%"],
            "head_size": 80,
            "value_dim": HEAD,
            "num_rope_heads": 1,
            "rope_frequencies": [f for f in range(4) for _ in range(KV_HEADS)],
            "rope_grid_size": HEAD,
        }
    models = {name: _decoder(spec, args.layers, max_length) for name, spec in configs.items()}
    weight_bytes = {name: 4 * lm.count_params() for name, lm in models.items()}
    cache_bytes = {
        name: kv_cache.kv_cache_bytes_per_token(lm.attention_spec, WIDTH, num_layers=args.layers)
        for name, lm in models.items()
    }
    rng = np.random.default_rng(0)
    rows = []
    for batch in args.batches:
        tokens = rng.integers(1, VOCAB, (batch, 1)).astype("int32")
        steps = {name: _our_step(lm) for name, lm in models.items()}
        for context in args.contexts:
            length = context + args.steps
            runs = {}
            for name, lm in models.items():
                state = {"caches": _random_caches(lm, batch, length, rng)}

                def run(step=steps[name], state=state, context=context, tokens=tokens):
                    for index in range(context, context + args.steps):
                        logits, state["caches"] = step(tokens, state["caches"], _index(index))
                    return _sync(logits)

                run()
                runs[name] = run
            seconds = _time(runs, args.repeats, context + batch)
            reference = "original (G=3)"
            base_s = statistics.median(seconds[reference])

            def read(name, context=context, batch=batch):
                return weight_bytes[name] + batch * context * cache_bytes[name]

            for name, s in seconds.items():
                rows.append(
                    _emit(
                        args,
                        {
                            "config": name,
                            "batch": batch,
                            "context": context,
                            "cache_bytes_per_token": cache_bytes[name],
                            "cache_fraction": round(cache_bytes[name] / cache_bytes[reference], 4),
                            "tokens_per_s": round(batch * args.steps / statistics.median(s), 1),
                            "ratio": round(base_s / statistics.median(s), 3),
                            "ideal_ratio": round(read(reference) / read(name), 3),
                            "all_s": [round(v, 4) for v in s],
                        },
                    )
                )
            print(f"batch {batch} context {context} done", file=sys.stderr, flush=True)
    return rows


def _table(part: str, rows: list[dict]) -> list[str]:
    if part == "hub":
        lines = [
            "| backend | device | phase | batch | context | ours tokens/s | keras-hub tokens/s "
            "| ours / keras-hub |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        keys = sorted(
            {(r["backend"], r["device"], r["phase"], r["batch"], r["context"]) for r in rows},
            key=lambda k: (k[0], k[2] != "prefill", k[3], k[4]),
        )
        for key in keys:
            pair = {
                r["model"]: r
                for r in rows
                if (r["backend"], r["device"], r["phase"], r["batch"], r["context"]) == key
            }
            ours, theirs = pair["ours"]["tokens_per_s"], pair["keras-hub"]["tokens_per_s"]
            lines.append(
                f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]:,} | {ours:,.1f} | "
                f"{theirs:,.1f} | {ours / theirs:.3f} |"
            )
        return lines
    lines = [
        "| backend | device | batch | context | cache | fraction | tokens/s | ratio | ideal |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['device']} | {r['batch']} | {r['context']:,} | {r['config']} "
            f"| {r['cache_fraction']:.3f} | {r['tokens_per_s']:,.1f} | {r['ratio']:.3f} | "
            f"{r['ideal_ratio']:.3f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("hub", "kv"), required=True)
    parser.add_argument("--backends", default="tensorflow")
    parser.add_argument("--contexts", default="256,1024")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--prefill", type=int, default=256)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument(
        "--latents", default="", help="the kv part's latent caches to time (e.g. 31.25%%,18.75%%)"
    )
    parser.add_argument("--output", required=True)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.contexts = [int(c) for c in args.contexts.split(",")]
    args.batches = [int(b) for b in args.batches.split(",")]
    args.latents = [label for label in args.latents.split(",") if label]
    if args.child:
        rows = hub_child(args) if args.part == "hub" else kv_child(args)
        print(json.dumps(rows))
        return 0
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from _common import rows_per_backend, write_atomic

    raw = argv if argv is not None else sys.argv[1:]
    child_args = [a for a in raw if not a.startswith("--backends")]
    if "--backends" in raw:
        i = raw.index("--backends")
        child_args = raw[:i] + raw[i + 2 :]
    partial = pathlib.Path(args.output) / f"decoder_speed_{args.part}.partial.jsonl"
    partial.unlink(missing_ok=True)
    rows = rows_per_backend(__file__, args.backends, child_args)
    if isinstance(rows, int):
        return rows
    partial.unlink(missing_ok=True)
    command = "python benchmarks/decoder_speed.py " + " ".join(raw)
    meta = {
        "command": command.strip(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.processor() or '?'}",
        "devices": sorted({r["device"] for r in rows}),
        "repeats": args.repeats,
        "steps": args.steps,
        "layers": args.layers,
    }
    out = pathlib.Path(args.output)
    name = f"decoder_speed_{args.part}"
    write_atomic(out / f"{name}.json", json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}; devices {meta['devices']}",
        "",
    ]
    lines += _table(args.part, rows)
    write_atomic(out / f"{name}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

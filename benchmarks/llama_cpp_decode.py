"""Decode speed in llama.cpp of SmolLM2 and its pruned and grouped forms, written as GGUF.

Each model is written by the library (`save_decoder(..., "gguf", tensor_type)`) and
run by llama.cpp (the `llama-cpp-python` bindings, in an environment of their own: the
project does not depend on them). For each context, every model's cache is first
filled with the same Northanger Abbey ids (prefill). Then, in interleaved repeats,
llama.cpp decodes `--steps` single tokens after that context. The table reports
tokens/s (the median of the repeats) and the ratio to the original's, measured side by
side in one run. Beside each ratio is the ideal a decode step's bytes give: the
original's bytes read per step (weights + KV cache at that context) over the model's.
llama.cpp's cache is float16 (its default), with flash attention on: without it llama.cpp
pads every layer's value cache to the widest layer's, and a pruned model keeps the
original's value cache.

Models: the original SmolLM2-135M-Instruct (9 query and 3 key/value heads of 64, 30
layers) and each `--model LABEL=FILE.keras`, e.g.:

* `headsize-tf convert --decoder smollm2-135m-instruct-q4 --to grouped --kv-heads 1
  --output DIR` (one key/value head: a third of the cache; llama.cpp's "llama");
* `headsize-tf prune --decoder ... [--unit kv_group] --output DIR` (layers that differ in
  heads: llama.cpp's "deci");
* `headsize-tf convert --decoder ... --to latent --cache-fraction F --rope-strategy
  rotated_high ... --output DIR` (a shared latent and one rotary key: llama.cpp's
  "deepseek2", whose MLA cache holds the latent and the rotary key per token and layer).

`--name` sets the output files' stem (default `decode`: `decode.json`, `decode.md`).

Usage:

  python benchmarks/llama_cpp_decode.py --llama-python /tmp/lcpp/bin/python \\
      --model grouped=/tmp/smollm2_g1/model.keras \\
      --model groups_pruned=/tmp/smollm2_groups/model.keras --output results/gguf_llama_cpp
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Runs in llama-cpp-python's environment: tokens/s of every model after every context.
LLAMA_CPP_CHILD = r"""
import json, statistics, sys, time
from llama_cpp import Llama

job = json.load(open(sys.argv[1]))
ids, steps, threads = job["ids"], job["steps"], job["threads"]
rows = []
for context in job["contexts"]:
    models = {
        name: Llama(model_path=path, n_ctx=context + steps + 8, n_batch=512, n_threads=threads,
                    flash_attn=True, verbose=False)
        for name, path in job["files"].items()
    }
    for name, llm in models.items():
        started = time.perf_counter()
        llm.eval(ids[:context])
        print(f"{name}: {context} tokens filled in {time.perf_counter() - started:.1f} s",
              file=sys.stderr, flush=True)
    times = {name: [] for name in models}
    for _ in range(job["repeats"]):
        for name, llm in models.items():
            llm.n_tokens = context  # Decoding resumes after the context (later entries dropped).
            started = time.perf_counter()
            for step in range(steps):
                llm.eval([ids[context + step]])
            times[name].append(time.perf_counter() - started)
    for name in models:
        rows.append({"model": name, "context": context,
                     "tokens_per_s": steps / statistics.median(times[name]),
                     "seconds": times[name]})
    del models
json.dump(rows, open(job["out"], "w"))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-python", required=True, help="python with llama_cpp")
    parser.add_argument("--output", required=True)
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="LABEL=FILE.keras",
        help="a converted or pruned DecoderLM to time beside the original (repeatable)",
    )
    parser.add_argument("--contexts", default="512,2048,8000")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tensor-type", default="q8_0", choices=["f32", "f16", "bf16", "q8_0"])
    parser.add_argument("--name", default="decode", help="the output files' stem")
    args = parser.parse_args(argv)

    import numpy as np

    from headsize_tf.core.io import write_atomic, write_json
    from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
    from headsize_tf.keras3.pretrained.decoders import load_decoder, save_decoder
    from headsize_tf.keras3.reparam.lm_file import kv_bytes_per_token

    start = time.perf_counter()
    contexts = [int(c) for c in args.contexts.split(",")]
    lm = load_decoder("smollm2-135m-instruct-q4")
    length = max(contexts) + args.steps
    text = decoder_lm_text(lm, length, corpus="austen", max_held_out_windows=1, train=False)
    ids = [int(i) for i in np.asarray(text.held_out)[0]]
    models = {"original": lm}
    for given in args.model:
        label, _, path = given.partition("=")
        if not path:
            parser.error(f"--model {given}: expected LABEL=FILE.keras")
        models[label] = load_decoder(path)
    with tempfile.TemporaryDirectory(prefix="llama_cpp_decode_") as tmp:
        tmp = pathlib.Path(tmp)
        files, bytes_per_step = {}, {}
        for name, model in models.items():
            path = save_decoder(model, tmp / f"{name}.gguf", "gguf", tensor_type=args.tensor_type)
            files[name] = str(path)
            kv = kv_bytes_per_token(model) // 4  # Values per token (float32 models).
            bytes_per_step[name] = {"weights": path.stat().st_size, "cache_per_token": 2 * kv}
        job = {
            "files": files,
            "ids": ids,
            "contexts": contexts,
            "steps": args.steps,
            "repeats": args.repeats,
            "threads": os.cpu_count() or 1,
            "out": str(tmp / "rows.json"),
        }
        (tmp / "job.json").write_text(json.dumps(job))
        (tmp / "child.py").write_text(LLAMA_CPP_CHILD)
        print(f"llama.cpp: {len(files)} models x contexts {contexts} ...", flush=True)
        done = subprocess.run(
            [args.llama_python, str(tmp / "child.py"), str(tmp / "job.json")], check=False
        )
        if done.returncode:
            return done.returncode
        rows = json.loads((tmp / "rows.json").read_text())
    from _common import llama_cpp_version

    version = llama_cpp_version(args.llama_python)
    speed = {(row["model"], row["context"]): row["tokens_per_s"] for row in rows}

    def step_bytes(model: str, context: int) -> int:
        sizes = bytes_per_step[model]
        return sizes["weights"] + sizes["cache_per_token"] * context

    for row in rows:
        name, context = row["model"], row["context"]
        row["ratio"] = row["tokens_per_s"] / speed[("original", context)]
        row["ideal"] = step_bytes("original", context) / step_bytes(name, context)
        row["cache_mb"] = bytes_per_step[name]["cache_per_token"] * context / 2**20
        print(
            f"{name:14s} context {context:5d}: {row['tokens_per_s']:6.1f} tokens/s "
            f"({row['ratio']:.2f}x; bytes ideal {row['ideal']:.2f}x)",
            flush=True,
        )
    command = "python benchmarks/llama_cpp_decode.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    result = {
        "command": command.strip(),
        "llama_cpp_python": version,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "tensor_type": args.tensor_type,
        "bytes": bytes_per_step,
        "rows": rows,
        "seconds": round(time.perf_counter() - start, 1),
    }
    out = pathlib.Path(args.output)
    write_json(out / f"{args.name}.json", result)
    lines = [
        "| model | context | cache (MB, float16) | tokens/s | ratio | bytes ideal |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['context']:,} | {r['cache_mb']:.1f} | {r['tokens_per_s']:.1f} | "
        f"{r['ratio']:.2f}x | {r['ideal']:.2f}x |"
        for r in sorted(rows, key=lambda r: (r["context"], r["model"] != "original"))
    ]
    write_atomic(out / f"{args.name}.md", "\n".join(lines) + "\n")
    print(f"wrote {out / args.name}.json and .md in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

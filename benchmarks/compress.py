"""CP re-parametrisation of a BERT-base-shaped encoder: ours vs tensorly's default.

Twelve attention layers of BERT-base shape (12 heads of 64, width 768) whose
heads share a subspace, as in trained BERTs (Cordonnier et al. 2020, Fig. 1):
per layer, W_Q^(h) = B_Q C_h + noise with a shared basis B_Q of 384 directions
with a decaying spectrum (same for keys). Each layer is decomposed to shared
key dim 384 by

* ours: `headsize_tf.reparam.cp.head_products_cp` with `--max-iter` sweeps
  (default 60; structured ALS on the thin per-head factors, HOSVD init, line
  search);
* tensorly: `tensorly.decomposition.parafac` with its defaults (rank 384,
  n_iter_max=100, init="svd", tol=1e-8) on the dense 12 x 768 x 768 tensor.

Both errors are the exact relative Frobenius error of the stacked products.
tensorly takes minutes per layer here, so its per-layer results are cached in
`--cache` and a rerun continues where it stopped (`--tensorly-layers` limits
how many layers it runs; the table says how many).

Usage:
  python benchmarks/compress.py [--tensorly-layers 12] [--output results/benchmarks]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from _common import write_atomic, write_json  # noqa: E402

from headsize_tf.core import cp  # noqa: E402

LAYERS, HEADS, WIDTH, HEAD_SIZE, SHARED, RANK = 12, 12, 768, 64, 384, 384


def layer_kernels(layer: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + layer)

    def kernels():
        basis = np.linalg.qr(rng.standard_normal([WIDTH, SHARED]))[0]
        basis = basis * np.exp(-np.arange(SHARED) / 128)[None]
        heads = [
            basis @ rng.standard_normal([SHARED, HEAD_SIZE])
            + 0.1 * rng.standard_normal([WIDTH, HEAD_SIZE])
            for _ in range(HEADS)
        ]
        return (0.05 * np.stack(heads)).astype(np.float32)

    return kernels(), kernels()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="results/benchmarks")
    parser.add_argument("--cache", default="results/benchmarks/compress_tensorly_layers.json")
    parser.add_argument("--tensorly-layers", type=int, default=LAYERS)
    parser.add_argument("--max-iter", type=int, default=60)
    args = parser.parse_args()
    out = pathlib.Path(args.output)
    cache = pathlib.Path(args.cache)
    tensorly_runs = json.loads(cache.read_text()) if cache.exists() else {}

    ours = []
    for layer in range(LAYERS):
        q, k = layer_kernels(layer)
        result = cp.head_products_cp(q, k, RANK, max_iter=args.max_iter)
        ours.append(
            {
                "layer": layer,
                "seconds": result.seconds,
                "iterations": result.iterations,
                "relative_error": result.relative_error,
            }
        )
        print(
            f"ours     layer {layer:2d}: {result.seconds:6.2f} s  error "
            f"{result.relative_error:.4f}  ({result.iterations} sweeps)",
            flush=True,
        )
    for layer in range(min(args.tensorly_layers, LAYERS)):
        if str(layer) in tensorly_runs:
            continue
        q, k = layer_kernels(layer)
        result = cp.tensorly_cp(q, k, RANK)  # tensorly's defaults
        tensorly_runs[str(layer)] = {
            "seconds": result.seconds,
            "relative_error": result.relative_error,
        }
        write_json(cache, tensorly_runs)
        print(
            f"tensorly layer {layer:2d}: {result.seconds:6.1f} s  error "
            f"{result.relative_error:.4f}",
            flush=True,
        )

    done = sorted(int(layer) for layer in tensorly_runs)
    ours_total = sum(r["seconds"] for r in ours)
    data = {
        "command": "python benchmarks/compress.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "shape": {
            "layers": LAYERS,
            "heads": HEADS,
            "width": WIDTH,
            "head_size": HEAD_SIZE,
            "rank": RANK,
        },
        "ours": ours,
        "ours_total_seconds": ours_total,
        "ours_mean_error": float(np.mean([r["relative_error"] for r in ours])),
        "ours_max_iter": args.max_iter,
        "tensorly": {str(layer): tensorly_runs[str(layer)] for layer in done},
    }
    lines = [
        "# CP re-parametrisation speed: BERT-base shape to shared key dim 384",
        "",
        f"Command: `{data['command']}` ({os.cpu_count()} CPUs). 12 layers x 12 heads of 64, "
        "width 768; heads share a 384-dim subspace with a decaying spectrum plus noise.",
        "",
        "| layer | ours (s) | ours error | tensorly default (s) | tensorly error |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in ours:
        t = tensorly_runs.get(str(r["layer"]))
        t_cells = f"{t['seconds']:.1f} | {t['relative_error']:.4f}" if t else "not run | —"
        lines.append(
            f"| {r['layer']} | {r['seconds']:.2f} | {r['relative_error']:.4f} | {t_cells} |"
        )
    lines += [
        "",
        f"Ours, all 12 layers: **{ours_total:.1f} s**, mean error "
        f"{data['ours_mean_error']:.4f} (target: ≤ 60 s).",
        "",
    ]
    if done:
        t_total = sum(tensorly_runs[str(i)]["seconds"] for i in done)
        t_err = float(np.mean([tensorly_runs[str(i)]["relative_error"] for i in done]))
        o_err = float(np.mean([ours[i]["relative_error"] for i in done]))
        o_time = sum(ours[i]["seconds"] for i in done)
        data.update(
            tensorly_layers=len(done),
            tensorly_total_seconds=t_total,
            tensorly_mean_error=t_err,
            speedup_on_same_layers=t_total / o_time,
        )
        lines.append(
            f"tensorly's default `parafac`, {len(done)} of 12 layers: {t_total:.0f} s "
            f"(ours on the same layers: {o_time:.1f} s, **{t_total / o_time:.0f}x faster**); mean "
            f"error {t_err:.4f} vs ours {o_err:.4f} on the same layers "
            f"({'ours equal or lower' if o_err <= t_err + 1e-9 else 'ours HIGHER'})."
        )
    write_json(out / "compress.json", data)
    write_atomic(out / "compress.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

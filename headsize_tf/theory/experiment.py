"""Error floor of one attention head fitting random attention matrices vs head size.

For n = `--n` tokens, random inputs X (n x n) and random positive
column-stochastic P (Dirichlet columns), a head of size d_p is fitted by Adam
(`theory.fit_attention`); we record the best max-column total-variation error.
Theorem 1 predicts (near) zero error for d_p >= n and a floor below it.

    python -m headsize_tf.theory.experiment --output results/theory
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from headsize_tf.core.io import save_figure, write_atomic, write_json
from headsize_tf.theory.theorem1 import (
    attention_matrix,
    construct_heads,
    fit_attention,
    random_stochastic,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="results/theory")
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--head-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 24, 32, 48])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    args = parser.parse_args(argv)
    rows = []
    for head_size in args.head_sizes:
        errors, exact = [], []
        for seed in args.seeds:
            rng = np.random.default_rng(seed)
            p = random_stochastic(args.n, rng, concentration=0.3)
            x = rng.normal(size=(max(head_size, args.n), args.n))
            gd = fit_attention(
                x[: args.n],
                p,
                head_size,
                steps=args.steps,
                learning_rate=args.learning_rate,
                seed=seed,
            )
            errors.append(gd)
            if head_size >= args.n:  # Theorem 1's construction, inputs of width d_p >= n.
                w_q, w_k = construct_heads(x, p)
                tv = 0.5 * np.abs(attention_matrix(x, w_q, w_k) - p).sum(axis=0).max()
                exact.append(float(tv))
        rows.append(
            {
                "head_size": head_size,
                "ratio": head_size / args.n,
                "errors": errors,
                "mean": float(np.mean(errors)),
                "std": float(np.std(errors)),
                "construction_error": max(exact) if exact else None,
            }
        )
        print(
            f"d_p={head_size:3d}: max-column TV {rows[-1]['mean']:.4f} ± {rows[-1]['std']:.4f}",
            flush=True,
        )
    command = "python -m headsize_tf.theory.experiment " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    write_json(f"{args.output}/theorem1.json", {"command": command, "n": args.n, "rows": rows})
    lines = [
        "# One head fitting random attention matrices (Bhojanapalli et al. 2020, Theorem 1)",
        "",
        f"Command: `{command}`",
        "",
        f"n = {args.n} tokens, X ~ N(0, 1) (n x n), P with Dirichlet(0.3) columns, Adam "
        f"(lr {args.learning_rate}) {args.steps} steps on the cross-entropy; error = best max over columns of the total "
        f"variation distance; mean ± std over seeds {args.seeds}.",
        "",
        "| head size d_p | d_p / n | GD: max-column TV error | Theorem 1 construction |",
        "|---:|---:|---:|---:|",
    ]
    for r in rows:
        exact = "—" if r["construction_error"] is None else f"{r['construction_error']:.1e}"
        lines.append(
            f"| {r['head_size']} | {r['ratio']:.3f} | {r['mean']:.4f} ± {r['std']:.4f} | {exact} |"
        )
    below = [r for r in rows if r["head_size"] < args.n]
    above = [r for r in rows if r["head_size"] >= args.n]
    if below and above:
        lines += [
            "",
            f"Reading: the best head below the sequence length (d_p = {below[-1]['head_size']}) "
            f"stays at {below[-1]['mean']:.3f}; at d_p = {above[0]['head_size']} >= n the error "
            f"falls to {above[0]['mean']:.4f} ({below[-1]['mean'] / above[0]['mean']:.0f}x lower), "
            "and the floor rises steeply as d_p / n shrinks further (Theorem 1's rank argument). "
            "At d_p >= n every P is exactly reachable (the construction's error is round-off), so "
            "the GD error left there is optimisation, not capacity.",
        ]
    write_atomic(f"{args.output}/README.md", "\n".join(lines) + "\n\n![floor](theorem1.png)\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.errorbar(
        [r["ratio"] for r in rows],
        [r["mean"] for r in rows],
        yerr=[r["std"] for r in rows],
        fmt="o-",
    )
    ax.axvline(1.0, color="gray", ls=":", label="d_p = n (Theorem 1)")
    ax.set(
        xscale="log",
        xlabel="head size / sequence length (d_p / n)",
        ylabel="max-column TV error",
        title=f"one head, n = {args.n}",
    )
    ax.legend()
    save_figure(fig, f"{args.output}/theorem1.png")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

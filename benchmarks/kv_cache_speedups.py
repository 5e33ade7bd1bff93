"""Speed-up against cache fraction, from `benchmarks/kv_cache.py`'s JSON files.

One panel per (backend, device); a line per way of sharing keys and values
(grouped, absorbed latent, pruned heads) and context: how much faster than the
multi-head model each fraction of the cache decodes.

Usage:
  python benchmarks/kv_cache_speedups.py results/benchmarks/kv_cache_gpu/*.json \
      --output results/benchmarks/kv_cache_gpu/speedups.png
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

FAMILIES = {"grouped": "grouped", "latent, r=": "latent (absorbed)", "pruned": "pruned heads"}
STYLES = {"grouped": ("C0", "o"), "latent (absorbed)": ("C1", "s"), "pruned heads": ("C2", "^")}
DASHES = (":", "--", "-", "-.")


def family(config: str) -> str | None:
    """The family a benchmark row's `config` belongs to (None: the reference, up-projection)."""
    if "up-projected" in config:
        return None
    return next((name for prefix, name in FAMILIES.items() if config.startswith(prefix)), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=pathlib.Path)
    parser.add_argument("--output", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    rows = [row for path in args.files for row in json.loads(path.read_text())["rows"]]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _common import save_figure

    panels = sorted({(r["backend"], r.get("device", "cpu")) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(9 * len(panels), 4.5), squeeze=False)
    for ax, (backend, device) in zip(axes[0], panels, strict=True):
        mine = [r for r in rows if (r["backend"], r.get("device", "cpu")) == (backend, device)]
        contexts = sorted({r["context"] for r in mine})
        for name, (color, marker) in STYLES.items():
            for index, context in enumerate(contexts):
                chosen = [
                    r for r in mine if r["context"] == context and family(r["config"]) == name
                ]
                points = sorted((r["cache_fraction"], r["speedup"]) for r in chosen)
                if points:
                    ax.plot(
                        *zip(*points, strict=True),
                        marker=marker,
                        color=color,
                        linestyle=DASHES[index % len(DASHES)],
                        label=f"{name}, context {context} (batch {chosen[0]['batch']})",
                    )
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("KV cache, fraction of the multi-head model's")
        ax.set_ylabel("decode speed-up over multi-head")
        ax.set_title(f"Keras 3 ({backend}, {device})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    save_figure(fig, args.output)
    plt.close(fig)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    raise SystemExit(main())
